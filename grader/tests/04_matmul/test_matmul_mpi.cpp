// The value checks of test_matmul.cpp on real processes: run under `mpirun -np P`, each rank is
// one process; rank 0 passes A and B, the others empty matrices, and rank 0 must return A*B
// exactly (small integers) while the others return empty matrices. The 2-D strategy must give a
// clear error on every rank when P is not a square. (Traffic and simulated-time checks need the
// threads backend's instrumentation; they run in test_matmul.cpp.)
#include <gtest/gtest.h>

#include <cstdlib>

#include "matmul_testing.hpp"

namespace {

using namespace matmul_test;

struct Dims {
  long m, k, n;
};
const std::vector<Dims> kShapes = {{12, 12, 12}, {37, 5, 6}, {5, 6, 41}, {6, 29, 5}, {13, 11, 7}};

int job_size() {
  const int p = distlab::testing::mpi_job_size();
  return p > 0 ? p : 4;  // outside mpirun: the threads backend with 4 ranks
}

/// This process's rank under mpirun (0 outside it: then rank 0's view is the one checked).
int job_rank() { return distlab::testing::mpi_job_rank(); }

void values(Strategy s) {
  const int p = job_size();
  const int me = job_rank();
  if (s == Strategy::Blocks2D && grid_side(p) < 0) {
    const RunResult got = run_strategy(fn_of(s), distlab::testing::test_options(p),
                                       int_matrix(4, 4, 1), int_matrix(4, 4, 2));
    EXPECT_FALSE(got.ok) << name_of(s) << " on " << p
                         << " ranks (not a square) must throw a clear error on every rank";
    return;
  }
  unsigned seed = 1;
  for (const Dims& d : kShapes) {
    SCOPED_TRACE(std::string(name_of(s)) + " p=" + std::to_string(p) + " A " + std::to_string(d.m) +
                 "x" + std::to_string(d.k) + " B " + std::to_string(d.k) + "x" +
                 std::to_string(d.n) + ", rank " + std::to_string(me));
    const Eigen::MatrixXf A = int_matrix(d.m, d.k, seed);
    const Eigen::MatrixXf B = int_matrix(d.k, d.n, seed + 1000);
    ++seed;
    const RunResult got = run_strategy(fn_of(s), distlab::testing::test_options(p), A, B);
    ASSERT_TRUE(got.ok) << got.error;
    const RankRecord& mine = got.ranks[static_cast<std::size_t>(me)];
    if (me == 0) {
      const Eigen::MatrixXf want = A * B;
      ASSERT_EQ(got.C.rows(), want.rows());
      ASSERT_EQ(got.C.cols(), want.cols());
      EXPECT_TRUE(got.C == want) << "rank 0's C differs from A*B";
    } else {
      EXPECT_EQ(mine.rows * mine.cols, 0) << "ranks other than 0 must return an empty matrix";
    }
  }
}

}  // namespace

TEST(Mpi, MatmulByRows) { values(Strategy::Rows); }
TEST(Mpi, MatmulByCols) { values(Strategy::Cols); }
TEST(Mpi, MatmulByReduction) { values(Strategy::Reduction); }
TEST(Mpi, Matmul2dBlocks) { values(Strategy::Blocks2D); }
