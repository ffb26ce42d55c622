// The value checks of test_tp.cpp on real processes: under `mpirun -np 4` each process is one rank
// of the grid and checks its own shards after every step against the oracle it computes itself.
// Traffic, memory and time need the threads backend's counters and clock: they run in test_tp.cpp.
#include <gtest/gtest.h>

#include "tp_harness.hpp"

namespace {

using namespace tptest;

void values(int t, int zero) {
  const int p = distlab::testing::job_size_or(4);
  if (p % t != 0) GTEST_SKIP() << "needs a multiple of " << t << " ranks";
  expect_values(grid_config(tiny_config(10), t, p / t, zero));
}

}  // namespace

TEST(Mpi, TensorTimesData) { values(2, 0); }
TEST(Mpi, TensorParallelOnly) { values(4, 0); }
TEST(Mpi, ZeroStage1) { values(2, 1); }
TEST(Mpi, ZeroStage2) { values(1, 2); }
