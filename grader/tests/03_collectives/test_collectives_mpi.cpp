// The value checks of test_collectives.cpp on real processes: run under `mpirun -np P`, every
// rank is one process of the job, and each function must give the closed-form results for the
// job's world size, every root, every op, several counts, twice. (Traffic and simulated-time
// checks need the threads backend's instrumentation; they run in test_collectives.cpp.)
#include <gtest/gtest.h>

#include "collectives_checks.hpp"

namespace {

using namespace ctest;

const std::vector<std::size_t> kCounts = {0, 1, 7, 1000, 1003};

std::vector<int> job_size() {
  const int p = distlab::testing::mpi_job_size();
  return {p > 0 ? p : 4};  // outside mpirun: the threads backend with 4 ranks
}

}  // namespace

TEST(Mpi, BroadcastNaive) {
  check_broadcast_values(collectives::broadcast_naive, "broadcast_naive", job_size(), kCounts,
                         true);
}
TEST(Mpi, BroadcastTree) {
  check_broadcast_values(collectives::broadcast_tree, "broadcast_tree", job_size(), kCounts, true);
}
TEST(Mpi, BroadcastRing) {
  check_broadcast_values(collectives::broadcast_ring, "broadcast_ring", job_size(), kCounts, true);
}
TEST(Mpi, ReduceNaive) {
  check_reduce_values(collectives::reduce_naive, "reduce_naive", job_size(), kCounts, true);
}
TEST(Mpi, ReduceTree) {
  check_reduce_values(collectives::reduce_tree, "reduce_tree", job_size(), kCounts, true);
}
TEST(Mpi, AllReduceNaive) {
  check_all_reduce_values(collectives::all_reduce_naive, "all_reduce_naive", job_size(), kCounts);
}
TEST(Mpi, AllReduceButterfly) {
  check_all_reduce_values(collectives::all_reduce_butterfly, "all_reduce_butterfly", job_size(),
                          kCounts);
}
TEST(Mpi, AllReduceRing) {
  check_all_reduce_values(collectives::all_reduce_ring, "all_reduce_ring", job_size(), kCounts);
}
TEST(Mpi, GatherNaive) {
  check_gather_values(collectives::gather_naive, "gather_naive", job_size(), kCounts, true);
}
TEST(Mpi, GatherTree) {
  check_gather_values(collectives::gather_tree, "gather_tree", job_size(), kCounts, true);
}
TEST(Mpi, AllGatherRing) {
  check_all_gather_values(collectives::all_gather_ring, "all_gather_ring", job_size(), kCounts);
}
TEST(Mpi, ReduceScatterRing) {
  check_reduce_scatter_values(collectives::reduce_scatter_ring, "reduce_scatter_ring", job_size(),
                              kCounts);
}
