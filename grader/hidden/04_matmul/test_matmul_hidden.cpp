// Instructor-only tests of 04_matmul: edge shapes (dimensions smaller than p), inputs on the
// other ranks that must be ignored, repeated calls, a two-level network, larger products; per
// strategy, values and plan (traffic and simulated time) as separate tests.
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

// Per strategy and per property, so that each is its own graded item: HiddenValues.*/<strategy>
// checks the product only; HiddenPlan.*/<strategy> also the traffic and simulated time of the
// strategy's plan (after the values: a wrong product is not timed).
class HiddenValues : public ::testing::TestWithParam<Strategy> {};
class HiddenPlan : public ::testing::TestWithParam<Strategy> {};

namespace {

// Dimensions smaller than the number of ranks (some shards are empty), down to 1x1.
void tiny_and_empty_shards(Strategy s, bool check_plan) {
  struct Dims {
    long m, k, n;
  };
  const std::vector<Dims> shapes = {{1, 1, 1}, {2, 3, 2}, {3, 1, 9}, {9, 2, 1}, {1, 7, 1}};
  unsigned seed = 500 + 100 * static_cast<unsigned>(s);
  for (int p : world_sizes(s, {1, 2, 5, 8}))
    for (const Dims& d : shapes) check_case(s, p, d.m, d.k, d.n, seed++, check_plan);
}

// Three calls in one launch: no state may leak from one call into the next.
void repeated_calls(Strategy s, bool check_plan) {
  const int p = s == Strategy::Blocks2D ? 9 : 6;
  check_case(s, p, 17, 13, 19, 900 + static_cast<unsigned>(s), check_plan,
             dist::NetworkModel::flat(), /*calls=*/3);
}

// A two-level network (fast links inside nodes, slow between): the plan's cost changes, the
// strategy must still follow it.
void two_level_network(Strategy s, bool check_plan) {
  const int p = s == Strategy::Blocks2D ? 9 : 8;
  check_case(s, p, 48, 40, 36, 1300 + static_cast<unsigned>(s), check_plan,
             dist::NetworkModel::two_level(p == 9 ? 3 : 4));
}

}  // namespace

TEST_P(HiddenValues, TinyAndEmptyShards) { tiny_and_empty_shards(GetParam(), false); }
TEST_P(HiddenPlan, TinyAndEmptyShards) { tiny_and_empty_shards(GetParam(), true); }
TEST_P(HiddenValues, RepeatedCalls) { repeated_calls(GetParam(), false); }
TEST_P(HiddenPlan, RepeatedCalls) { repeated_calls(GetParam(), true); }
TEST_P(HiddenValues, TwoLevelNetwork) { two_level_network(GetParam(), false); }
TEST_P(HiddenPlan, TwoLevelNetwork) { two_level_network(GetParam(), true); }

// Whatever the other ranks pass is ignored: only rank 0's A and B count.
TEST_P(HiddenValues, OtherRanksInputsAreIgnored) {
  const Strategy s = GetParam();
  const Eigen::MatrixXf A = int_matrix(11, 6, 1), B = int_matrix(6, 10, 2);
  const Eigen::MatrixXf junk_a = Eigen::MatrixXf::Constant(3, 5, 7.0f);
  const Eigen::MatrixXf junk_b = Eigen::MatrixXf::Constant(4, 2, -1.0f);
  const int p = s == Strategy::Blocks2D ? 4 : 3;
  const RunResult got = run_strategy(fn_of(s), test_options(p), A, B, 1, junk_a, junk_b);
  EXPECT_TRUE(result_ok(got, A * B));
}

// Larger real-valued products (|C - A*B| <= 1e-6 k).
TEST_P(HiddenValues, LargeRealValued) {
  struct Case {
    int p;
    long m, k, n;
  };
  const Strategy s = GetParam();
  const Case c = s == Strategy::Blocks2D ? Case{4, 1024, 384, 1024}
                 : s == Strategy::Rows   ? Case{8, 1024, 64, 512}
                 : s == Strategy::Cols   ? Case{5, 128, 256, 1024}
                                         : Case{6, 256, 768, 256};
  const auto seed = 1700 + 2 * static_cast<unsigned>(s);
  const Eigen::MatrixXf A = real_matrix(c.m, c.k, seed), B = real_matrix(c.k, c.n, seed + 1);
  const RunResult got = run_strategy(fn_of(s), test_options(c.p, 20000), A, B);
  EXPECT_TRUE(result_ok(got, A * B, 1e-6 * static_cast<double>(c.k)));
}

namespace {
std::string strategy_name(const ::testing::TestParamInfo<Strategy>& info) {
  return name_of(info.param);
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Hidden, HiddenValues, ::testing::ValuesIn(kAll), strategy_name);
INSTANTIATE_TEST_SUITE_P(Hidden, HiddenPlan, ::testing::ValuesIn(kAll), strategy_name);
