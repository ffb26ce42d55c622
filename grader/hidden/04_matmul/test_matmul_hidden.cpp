// Instructor-only tests of 04_matmul: edge shapes (dimensions smaller than p), inputs on the
// other ranks that must be ignored, repeated calls, a two-level network, larger products; per
// strategy, values and plan (traffic and simulated time) as separate tests.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
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

/// Each rank's built-in collective calls (name and bytes), in call order, read from the Chrome
/// trace the threads backend writes at the end of a launch (one track per rank, "rank R").
using Calls = std::vector<std::vector<std::pair<std::string, std::uint64_t>>>;
Calls collective_calls(const std::string& path, int p) {
  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::map<long, int> rank_of_track;
  for (const auto& ev : doc.at("traceEvents")) {
    if (ev.value("name", "") != "thread_name") continue;
    const std::string track = ev.at("args").value("name", "");
    for (int r = 0; r < p; ++r) {
      if (track == "rank " + std::to_string(r)) rank_of_track[ev.at("tid").get<long>()] = r;
    }
  }
  std::vector<std::vector<std::tuple<long, std::string, std::uint64_t>>> seen(
      static_cast<std::size_t>(p));
  for (const auto& ev : doc.at("traceEvents")) {
    if (ev.value("cat", "") != "collective") continue;
    const auto it = rank_of_track.find(ev.at("tid").get<long>());
    if (it == rank_of_track.end()) continue;
    const auto& args = ev.at("args");
    seen[static_cast<std::size_t>(it->second)].emplace_back(
        args.value("collective_call", -1L), ev.value("name", ""), args.value("bytes", 0ULL));
  }
  Calls calls(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& v = seen[static_cast<std::size_t>(r)];
    std::sort(v.begin(), v.end());
    for (const auto& [seq, name, bytes] : v) {
      calls[static_cast<std::size_t>(r)].emplace_back(name, bytes);
    }
  }
  return calls;
}

std::string show(const std::vector<std::pair<std::string, std::uint64_t>>& calls) {
  std::string out;
  for (const auto& [name, bytes] : calls) {
    out += (out.empty() ? "" : ", ") + name + " (" + std::to_string(bytes) + " B)";
  }
  return out;
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

namespace {

// Products with an empty dimension (m, k or n = 0): A.cols() == B.rows(), so nothing is rejected;
// C is m x n (zero when k = 0), the plan's chunks are empty.
void empty_dimensions(Strategy s, bool check_plan) {
  struct Dims {
    long m, k, n;
  };
  const std::vector<Dims> shapes = {{0, 3, 4}, {5, 0, 7}, {2, 3, 0}, {0, 0, 0}, {0, 4, 0}};
  unsigned seed = 2300 + 100 * static_cast<unsigned>(s);
  for (int p : world_sizes(s, {1, 3}))
    for (const Dims& d : shapes) check_case(s, p, d.m, d.k, d.n, seed++, check_plan);
}

}  // namespace

TEST_P(HiddenValues, EmptyDimensions) { empty_dimensions(GetParam(), false); }
TEST_P(HiddenPlan, EmptyDimensions) { empty_dimensions(GetParam(), true); }

// matmul.hpp: share_shape throws only when A.cols() != B.rows(): a dimension of 0 is a shape like
// any other (every rank gets {m, k, n}, one broadcast of 4 int64), and a mismatch that involves
// an empty dimension still throws on every rank, naming both shapes.
TEST(HiddenShareShape, EmptyDimensionsAreNotAnError) {
  struct Case {
    long ar, ac, br, bc;
  };
  const int p = 3;
  for (const Case c : {Case{0, 3, 3, 4}, Case{5, 0, 0, 7}, Case{2, 3, 3, 0}, Case{0, 0, 0, 0},
                       Case{0, 3, 2, 0}, Case{3, 0, 5, 2}, Case{3, 4, 0, 2}}) {
    const std::string a = std::to_string(c.ar) + "x" + std::to_string(c.ac);
    const std::string b = std::to_string(c.br) + "x" + std::to_string(c.bc);
    SCOPED_TRACE("A " + a + ", B " + b);
    const Eigen::MatrixXf A = int_matrix(c.ar, c.ac, 1), B = int_matrix(c.br, c.bc, 2);
    std::mutex mu;
    std::vector<std::string> errors(p);
    std::vector<matmul::Shape> got(p, matmul::Shape{-1, -1, -1});
    std::vector<RankRecord> recs(p);
    const dist::LaunchOptions opts = test_options(p);
    distlab::testing::run_ranks(opts, [&] {
      dist::barrier();
      dist::reset_stats();
      const double t0 = dist::sim_time();
      const Eigen::MatrixXf empty;
      matmul::Shape s{-1, -1, -1};
      std::string error;
      try {
        s = dist::rank() == 0 ? matmul::share_shape(A, B) : matmul::share_shape(empty, empty);
      } catch (const std::invalid_argument& e) {
        error = e.what();
      }
      RankRecord rec;
      rec.sim_s = dist::sim_time() - t0;
      rec.stats = dist::stats();
      std::lock_guard<std::mutex> lock(mu);
      const auto r = static_cast<std::size_t>(dist::rank());
      got[r] = s;
      errors[r] = error;
      recs[r] = rec;
    });
    const bool mismatch = c.ac != c.br;
    for (int r = 0; r < p; ++r) {
      const auto k = static_cast<std::size_t>(r);
      if (mismatch) {
        EXPECT_TRUE(errors[k].find(a) != std::string::npos &&
                    errors[k].find(b) != std::string::npos)
            << "rank " << r << ": A.cols() != B.rows(), so share_shape must throw "
            << "std::invalid_argument naming both shapes; got '" << errors[k] << "'";
      } else {
        EXPECT_EQ(errors[k], "") << "rank " << r << ": A.cols() == B.rows() = " << c.ac
                                 << ", so the shapes multiply (C is " << c.ar << "x" << c.bc
                                 << "); an empty dimension is not an error";
        EXPECT_TRUE(got[k].m == c.ar && got[k].k == c.ac && got[k].n == c.bc)
            << "rank " << r << " got {" << got[k].m << ", " << got[k].k << ", " << got[k].n
            << "}, expected {" << c.ar << ", " << c.ac << ", " << c.bc << "}";
      }
    }
    const std::vector<Step> plan{{Step::Broadcast, true, 4}};
    EXPECT_TRUE(same_traffic(recs, run_plan(plan, opts), describe(plan)));
  }
}

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

// Calls of one launch with new operands of the same shapes each time: "rank 0 returns exactly
// Eigen's A * B" of this call's A and B, so nothing packed, scattered or computed for an earlier
// call may be reused (the same shapes are where a cache keyed by the shapes would hit).
TEST_P(HiddenValues, NewOperandsOfTheSameShapesEachCall) {
  const Strategy s = GetParam();
  const int p = s == Strategy::Blocks2D ? 4 : 3;
  const int calls = 3;
  std::vector<Eigen::MatrixXf> as, bs, got(static_cast<std::size_t>(calls));
  for (int c = 0; c < calls; ++c) {
    as.push_back(int_matrix(7, 5, 3100 + 10 * static_cast<unsigned>(c)));
    bs.push_back(int_matrix(5, 6, 3105 + 10 * static_cast<unsigned>(c)));
  }
  std::string error;
  try {
    dist::launch(test_options(p), [&] {
      for (int c = 0; c < calls; ++c) {
        const auto uc = static_cast<std::size_t>(c);
        Eigen::MatrixXf C = dist::rank() == 0 ? fn_of(s)(as[uc], bs[uc])
                                              : fn_of(s)(Eigen::MatrixXf(), Eigen::MatrixXf());
        if (dist::rank() == 0) got[uc] = std::move(C);
      }
    });
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_EQ(error, "") << "the launch failed";
  for (int c = 0; c < calls; ++c) {
    const auto uc = static_cast<std::size_t>(c);
    const Eigen::MatrixXf want = as[uc] * bs[uc];
    ASSERT_EQ(got[uc].rows(), want.rows()) << "call " << c;
    ASSERT_EQ(got[uc].cols(), want.cols()) << "call " << c;
    EXPECT_EQ(got[uc], want) << "call " << c
                             << " of 3 in one launch, new A and B of the same shapes each time: "
                                "rank 0 must return this call's A * B";
  }
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

// The plan's collectives in the plan's order: the built-in collectives of the threads backend
// synchronise the ranks, so counters and clocks cannot tell a swapped order apart; the trace's
// record of each rank's calls can. Compared with a run of the plan itself (plan_of/run_plan).
TEST_P(HiddenPlan, CollectivesInThePlansOrder) {
  const Strategy s = GetParam();
  const int p = s == Strategy::Blocks2D ? 4 : 3;
  const long m = 7, k = 5, n = 8;
  const Eigen::MatrixXf A = int_matrix(m, k, 2100), B = int_matrix(k, n, 2101);
  const std::string base = ::testing::TempDir() + "distlab_04_order_" + name_of(s);
  dist::LaunchOptions o = test_options(p);
  o.trace_path = base + "_strategy.json";
  const RunResult got = run_strategy(fn_of(s), o, A, B);
  ASSERT_TRUE(result_ok(got, A * B));
  const auto plan = plan_of(s, p, m, k, n);
  o.trace_path = base + "_plan.json";
  run_plan(plan, o);
  const Calls mine = collective_calls(base + "_strategy.json", p);
  const Calls want = collective_calls(base + "_plan.json", p);
  std::remove((base + "_strategy.json").c_str());
  std::remove((base + "_plan.json").c_str());
  for (int r = 0; r < p; ++r) {
    const auto& g = mine[static_cast<std::size_t>(r)];
    const auto& w = want[static_cast<std::size_t>(r)];
    ASSERT_FALSE(w.empty()) << "the plan's run left no trace of rank " << r;
    EXPECT_EQ(g, w) << name_of(s) << ", rank " << r << " called [" << show(g)
                    << "] but the plan in matmul.hpp [" << describe(plan) << "] calls [" << show(w)
                    << "]: call the plan's collectives in its order";
  }
}

// matmul.hpp: unpack_row_blocks / unpack_col_blocks read a buffer "in that layout (padding
// ignored)": whatever the padding holds (NaN here), the matrix comes back exactly.
TEST(HiddenPack, UnpackIgnoresThePadding) {
  for (auto [rows, cols, parts] :
       std::vector<std::tuple<long, long, int>>{{7, 3, 3}, {2, 5, 4}, {10, 4, 4}}) {
    const Eigen::MatrixXf M = int_matrix(rows, cols, 2200 + static_cast<unsigned>(rows));
    const long rmax = cdiv(rows, parts);
    std::vector<float> rb = matmul::pack_row_blocks(M, parts);
    ASSERT_EQ(rb.size(), static_cast<std::size_t>(parts * rmax * cols));
    for (int b = 0; b < parts; ++b) {
      const long have = matmul::shard_range(rows, parts, b).size;
      for (long j = 0; j < cols; ++j)
        for (long i = have; i < rmax; ++i)
          rb[static_cast<std::size_t>(b * rmax * cols + j * rmax + i)] = std::nanf("");
    }
    EXPECT_TRUE(matmul::unpack_row_blocks(rb, rows, cols, parts) == M)
        << rows << "x" << cols << " in " << parts << " row blocks, NaN padding";
    const Eigen::MatrixXf T = M.transpose();  // cols x rows: column blocks of `rows` columns
    const long cmax = cdiv(T.cols(), parts);
    std::vector<float> cb = matmul::pack_col_blocks(T, parts);
    ASSERT_EQ(cb.size(), static_cast<std::size_t>(parts * T.rows() * cmax));
    for (int b = 0; b < parts; ++b) {
      const long have = matmul::shard_range(T.cols(), parts, b).size;
      for (long j = have; j < cmax; ++j)
        for (long i = 0; i < T.rows(); ++i)
          cb[static_cast<std::size_t>(b * T.rows() * cmax + j * T.rows() + i)] = std::nanf("");
    }
    EXPECT_TRUE(matmul::unpack_col_blocks(cb, T.rows(), T.cols(), parts) == T)
        << T.rows() << "x" << T.cols() << " in " << parts << " column blocks, NaN padding";
  }
}

// matmul.hpp: "Throws std::invalid_argument when buf has the wrong size", the size being the
// padded layout's: a buffer of every other size is refused, the unpadded rows * cols among them
// (for shapes that do not divide parts, where the two differ), a float more and a float less.
TEST(HiddenPack, UnpackRefusesEveryBufferSizeButThePaddedLayouts) {
  for (auto [rows, cols, parts] :
       std::vector<std::tuple<long, long, int>>{{7, 3, 3}, {2, 5, 4}, {5, 7, 3}, {1, 3, 2}}) {
    const auto padded_rows = static_cast<std::size_t>(parts * cdiv(rows, parts) * cols);
    const auto padded_cols = static_cast<std::size_t>(parts * rows * cdiv(cols, parts));
    const auto plain = static_cast<std::size_t>(rows * cols);
    for (std::size_t size : {plain, padded_rows - 1, padded_rows + 1, padded_cols - 1,
                             padded_cols + 1, std::size_t{0}}) {
      const std::vector<float> buf(size, 1.0f);
      const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " in " +
                               std::to_string(parts) + " parts, a buffer of " +
                               std::to_string(size) + " floats";
      if (size != padded_rows) {
        EXPECT_THROW(matmul::unpack_row_blocks(buf, rows, cols, parts), std::invalid_argument)
            << "unpack_row_blocks, " << what << " (the layout holds " << padded_rows << ")";
      }
      if (size != padded_cols) {
        EXPECT_THROW(matmul::unpack_col_blocks(buf, rows, cols, parts), std::invalid_argument)
            << "unpack_col_blocks, " << what << " (the layout holds " << padded_cols << ")";
      }
    }
  }
}

// matmul.hpp: the pack functions give "parts * max_shard(rows, parts) * cols" and
// "parts * rows * max_shard(cols, parts)" floats, and the unpack functions throw
// std::invalid_argument "when buf has the wrong size", also for an empty matrix (0 rows or 0
// columns), whose only right size is 0 floats.
TEST(HiddenPack, EmptyMatricesPackToNothingAndRejectAnyOtherSize) {
  for (auto [rows, cols] : std::vector<std::pair<long, long>>{{0, 3}, {3, 0}, {0, 0}}) {
    for (int parts : {1, 2, 4}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " in " +
                   std::to_string(parts) + " parts");
      const Eigen::MatrixXf M(rows, cols);
      EXPECT_EQ(matmul::pack_row_blocks(M, parts).size(), 0u) << "pack_row_blocks";
      EXPECT_EQ(matmul::pack_col_blocks(M, parts).size(), 0u) << "pack_col_blocks";
      const std::vector<float> none;
      const Eigen::MatrixXf r = matmul::unpack_row_blocks(none, rows, cols, parts);
      EXPECT_EQ(r.rows(), rows) << "unpack_row_blocks of 0 floats";
      EXPECT_EQ(r.cols(), cols) << "unpack_row_blocks of 0 floats";
      const Eigen::MatrixXf c = matmul::unpack_col_blocks(none, rows, cols, parts);
      EXPECT_EQ(c.rows(), rows) << "unpack_col_blocks of 0 floats";
      EXPECT_EQ(c.cols(), cols) << "unpack_col_blocks of 0 floats";
      for (std::size_t size : {std::size_t{1}, std::size_t{6}}) {
        const std::vector<float> wrong(size, 1.0f);
        EXPECT_THROW(matmul::unpack_row_blocks(wrong, rows, cols, parts), std::invalid_argument)
            << "unpack_row_blocks of " << size
            << " floats for an empty matrix (the layout holds 0 floats)";
        EXPECT_THROW(matmul::unpack_col_blocks(wrong, rows, cols, parts), std::invalid_argument)
            << "unpack_col_blocks of " << size
            << " floats for an empty matrix (the layout holds 0 floats)";
      }
    }
  }
}

namespace {
std::string strategy_name(const ::testing::TestParamInfo<Strategy>& info) {
  return name_of(info.param);
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Hidden, HiddenValues, ::testing::ValuesIn(kAll), strategy_name);
INSTANTIATE_TEST_SUITE_P(Hidden, HiddenPlan, ::testing::ValuesIn(kAll), strategy_name);
