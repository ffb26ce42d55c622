// Instructor-only tests of 04_matmul: edge shapes (dimensions smaller than p), inputs on the
// other ranks that must be ignored, repeated calls, a two-level network, larger products.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <string>
#include <vector>

#include "../../tests/04_matmul/matmul_testing.hpp"
#include "distlab_testing.hpp"
#include "matmul.hpp"

using distlab::testing::test_options;
using namespace matmul_test;

namespace {

const Strategy kAll[] = {Strategy::Rows, Strategy::Cols, Strategy::Reduction, Strategy::Blocks2D};

std::vector<int> world_sizes(Strategy s, std::vector<int> flat) {
  return s == Strategy::Blocks2D ? std::vector<int>{1, 4, 9} : flat;
}

}  // namespace

// Dimensions smaller than the number of ranks (some shards are empty), down to 1x1.
TEST(MatmulHidden, TinyAndEmptyShards) {
  struct Dims {
    long m, k, n;
  };
  const std::vector<Dims> shapes = {{1, 1, 1}, {2, 3, 2}, {3, 1, 9}, {9, 2, 1}, {1, 7, 1}};
  unsigned seed = 500;
  for (Strategy s : kAll)
    for (int p : world_sizes(s, {1, 2, 5, 8}))
      for (const Dims& d : shapes) check_case(s, p, d.m, d.k, d.n, seed++, /*check_plan=*/true);
}

// Whatever the other ranks pass is ignored: only rank 0's A and B count.
TEST(MatmulHidden, OtherRanksInputsAreIgnored) {
  const Eigen::MatrixXf A = int_matrix(11, 6, 1), B = int_matrix(6, 10, 2);
  const Eigen::MatrixXf junk_a = Eigen::MatrixXf::Constant(3, 5, 7.0f);
  const Eigen::MatrixXf junk_b = Eigen::MatrixXf::Constant(4, 2, -1.0f);
  for (Strategy s : kAll) {
    SCOPED_TRACE(name_of(s));
    const int p = s == Strategy::Blocks2D ? 4 : 3;
    const RunResult got = run_strategy(fn_of(s), test_options(p), A, B, 1, junk_a, junk_b);
    EXPECT_TRUE(result_ok(got, A * B));
  }
}

// Three calls in one launch: no state may leak from one call into the next.
TEST(MatmulHidden, RepeatedCalls) {
  unsigned seed = 900;
  for (Strategy s : kAll) {
    const int p = s == Strategy::Blocks2D ? 9 : 6;
    check_case(s, p, 17, 13, 19, seed++, true, dist::NetworkModel::flat(), /*calls=*/3);
  }
}

// A two-level network (fast links inside nodes, slow between): the plan's cost changes, the
// strategy must still follow it.
TEST(MatmulHidden, TwoLevelNetwork) {
  unsigned seed = 1300;
  for (Strategy s : kAll) {
    const int p = s == Strategy::Blocks2D ? 9 : 8;
    check_case(s, p, 48, 40, 36, seed++, true, dist::NetworkModel::two_level(p == 9 ? 3 : 4));
  }
}

// Larger real-valued products (|C - A*B| <= 1e-6 k).
TEST(MatmulHidden, LargeRealValued) {
  struct Case {
    Strategy s;
    int p;
    long m, k, n;
  };
  const std::vector<Case> cases = {{Strategy::Blocks2D, 4, 1024, 384, 1024},
                                   {Strategy::Rows, 8, 1024, 64, 512},
                                   {Strategy::Cols, 5, 128, 256, 1024}};
  unsigned seed = 1700;
  for (const Case& c : cases) {
    SCOPED_TRACE(name_of(c.s));
    const Eigen::MatrixXf A = real_matrix(c.m, c.k, seed++), B = real_matrix(c.k, c.n, seed++);
    const RunResult got = run_strategy(fn_of(c.s), test_options(c.p, 20000), A, B);
    EXPECT_TRUE(result_ok(got, A * B, 1e-6 * static_cast<double>(c.k)));
  }
}
