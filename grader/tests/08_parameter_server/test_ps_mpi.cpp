// The synchronous value checks of test_ps.cpp on real processes: under `mpirun -np P` each
// process is one rank (servers first) and checks what it holds (a worker the whole weight vector,
// a server its shard) after every step against the oracle it computes itself. Traffic, time and
// the asynchronous modes need the threads backend (its clock and its deterministic recv_any);
// they run in test_ps.cpp.
#include <gtest/gtest.h>

#include "ps_harness.hpp"

namespace {

using namespace pstest;

void values(int servers) {
  const int p = distlab::testing::job_size_or(4);  // outside mpirun: 4 ranks on threads
  if (p <= servers) GTEST_SKIP() << "needs more than " << servers << " ranks";
  const int me = distlab::testing::job_rank_or_all();
  const mlp::Config c = small_config();
  static const datasets::Split data = mlp::make_data(c);
  const auto ref = oracle(c, data, p - servers, 3);
  const SyncRun run = run_sync(c, data, p - servers, servers, 3);
  const std::string what = sync_name(p - servers, servers);
  if (me < 0) {
    expect_sync_values(run, ref, 0, p, what);
  } else {
    expect_sync_values(run, ref, me, me + 1, what);
  }
}

}  // namespace

TEST(Mpi, OneServer) { values(1); }
TEST(Mpi, TwoServers) { values(2); }
TEST(Mpi, ThreeServers) { values(3); }
