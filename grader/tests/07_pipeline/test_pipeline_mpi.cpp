// The value checks of test_pipeline.cpp on real processes: under `mpirun -np P` each process is
// one stage; it checks its own stage's weights (and the last stage its losses) against
// single-process training that it computes itself. Traffic, time and memory need the threads
// backend's simulated clock and counters; they run in test_pipeline.cpp.
#include <gtest/gtest.h>

#include "pipeline_harness.hpp"

namespace {

using namespace pptest;

void values(pp::Schedule s) {
  const int p = distlab::testing::job_size_or(4);  // outside mpirun: 4 ranks on threads
  const int me = distlab::testing::job_rank_or_all();
  for (int layers : {p, p + 1}) {
    const mlp::Config c = tiny_config(layers, 16);
    const Reference ref = single_process(c, 2);
    for (int m : {1, 3, 8}) {
      const PipelineRun run = run_pipeline(c, p, m, s, 2);
      const std::string what = std::string(pp::to_string(s)) + ": " + config_name(c) +
                               ", p=" + std::to_string(p) + ", m=" + std::to_string(m);
      if (me < 0) {
        expect_values(run, c, ref, 0, p, what);
      } else {
        expect_values(run, c, ref, me, me + 1, what + ", rank " + std::to_string(me), false);
      }
    }
  }
}

}  // namespace

TEST(Mpi, Naive) { values(pp::Schedule::Naive); }
TEST(Mpi, GPipe) { values(pp::Schedule::GPipe); }
TEST(Mpi, OneFOneB) { values(pp::Schedule::OneFOneB); }
