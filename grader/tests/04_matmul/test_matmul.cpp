// Public tests of 04_matmul. See matmul_testing.hpp for the inputs, the tolerance and the
// reference run of the documented communication plans.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <mutex>
#include <string>
#include <vector>

#include "distlab_testing.hpp"
#include "matmul.hpp"
#include "matmul_testing.hpp"

using distlab::testing::run_ranks;
using distlab::testing::test_options;
using namespace matmul_test;

namespace {

// The shard split, computed here independently of the header: sizes differ by at most one and
// the first n % parts shards are the larger ones.
std::vector<long> shard_sizes(long n, int parts) {
  std::vector<long> s(static_cast<std::size_t>(parts), n / parts);
  for (long i = 0; i < n % parts; ++i) s[static_cast<std::size_t>(i)] += 1;
  return s;
}

Eigen::MatrixXf counting_matrix(long rows, long cols) {
  Eigen::MatrixXf m(rows, cols);
  for (long j = 0; j < cols; ++j)
    for (long i = 0; i < rows; ++i) m(i, j) = static_cast<float>(100 * i + j + 1);  // never 0
  return m;
}

// The packed row-block layout of matmul.hpp, built element by element.
std::vector<float> expected_row_blocks(const Eigen::MatrixXf& M, int parts) {
  const auto sizes = shard_sizes(M.rows(), parts);
  const long rmax = cdiv(M.rows(), parts);
  std::vector<float> buf(static_cast<std::size_t>(parts * rmax * M.cols()), 0.0f);
  long begin = 0;
  for (int b = 0; b < parts; ++b) {
    for (long j = 0; j < M.cols(); ++j)
      for (long i = 0; i < sizes[static_cast<std::size_t>(b)]; ++i)
        buf[static_cast<std::size_t>(b * rmax * M.cols() + j * rmax + i)] = M(begin + i, j);
    begin += sizes[static_cast<std::size_t>(b)];
  }
  return buf;
}

std::vector<float> expected_col_blocks(const Eigen::MatrixXf& M, int parts) {
  const auto sizes = shard_sizes(M.cols(), parts);
  const long cmax = cdiv(M.cols(), parts);
  std::vector<float> buf(static_cast<std::size_t>(parts * M.rows() * cmax), 0.0f);
  long begin = 0;
  for (int b = 0; b < parts; ++b) {
    for (long j = 0; j < sizes[static_cast<std::size_t>(b)]; ++j)
      for (long i = 0; i < M.rows(); ++i)
        buf[static_cast<std::size_t>(b * M.rows() * cmax + j * M.rows() + i)] = M(i, begin + j);
    begin += sizes[static_cast<std::size_t>(b)];
  }
  return buf;
}

struct Dims {
  long m, k, n;
};
// square, tall-skinny, wide, long reduction; most sizes do not divide the world sizes.
const std::vector<Dims> kShapes = {{12, 12, 12}, {37, 5, 6}, {5, 6, 41}, {6, 29, 5}, {13, 11, 7}};

void values_all_world_sizes(Strategy s) {
  const std::vector<int> ps = s == Strategy::Blocks2D ? std::vector<int>{1, 4, 9}
                                                      : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8};
  unsigned seed = 1;
  for (int p : ps)
    for (const Dims& d : kShapes) check_case(s, p, d.m, d.k, d.n, seed++, /*check_plan=*/false);
}

void plan_cases(Strategy s) {
  const dist::NetworkModel flat = dist::NetworkModel::flat();
  dist::NetworkModel with_gamma = flat;  // reductions cost time too
  with_gamma.reduce_Bps = 2e9;
  const std::vector<int> ps =
      s == Strategy::Blocks2D ? std::vector<int>{4, 9} : std::vector<int>{2, 3, 4, 7};
  unsigned seed = 100;
  for (int p : ps) {
    check_case(s, p, 40, 30, 20, seed++, true, flat);
    check_case(s, p, 19, 23, 31, seed++, true, with_gamma);
  }
  // A big enough product that bandwidth, not latency, dominates the simulated time.
  check_case(s, s == Strategy::Blocks2D ? 4 : 3, 96, 160, 128, seed++, true, flat);
}

}  // namespace

// ---- Task 1 -------------------------------------------------------------------------------------

TEST(ShareShape, EveryRankLearnsTheShapes) {
  for (int p : {1, 3, 4}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    const Eigen::MatrixXf A = int_matrix(5, 3, 1), B = int_matrix(3, 7, 2);
    std::mutex mu;
    std::vector<matmul::Shape> got(static_cast<std::size_t>(p));
    std::vector<RankRecord> recs(static_cast<std::size_t>(p));
    auto opts = test_options(p);
    run_ranks(opts, [&] {
      dist::barrier();
      dist::reset_stats();
      const double t0 = dist::sim_time();
      const Eigen::MatrixXf empty;
      const matmul::Shape s =
          dist::rank() == 0 ? matmul::share_shape(A, B) : matmul::share_shape(empty, empty);
      RankRecord rec;
      rec.sim_s = dist::sim_time() - t0;
      rec.stats = dist::stats();
      std::lock_guard<std::mutex> lock(mu);
      got[static_cast<std::size_t>(dist::rank())] = s;
      recs[static_cast<std::size_t>(dist::rank())] = rec;
    });
    for (int r = 0; r < p; ++r) {
      const auto& s = got[static_cast<std::size_t>(r)];
      EXPECT_TRUE(s.m == 5 && s.k == 3 && s.n == 7)
          << "rank " << r << " got {" << s.m << ", " << s.k << ", " << s.n
          << "}, expected {5, 3, 7}";
    }
    const std::vector<Step> plan{{Step::Broadcast, true, 4}};
    EXPECT_TRUE(same_traffic(recs, run_plan(plan, opts), describe(plan)));
  }
}

TEST(ShareShape, MismatchedShapesThrowOnEveryRank) {
  const int p = 3;
  const Eigen::MatrixXf A = int_matrix(4, 3, 1), B = int_matrix(5, 2, 2);
  std::mutex mu;
  std::vector<std::string> msgs(p);
  run_ranks(p, [&] {
    const Eigen::MatrixXf empty;
    try {
      if (dist::rank() == 0)
        matmul::share_shape(A, B);
      else
        matmul::share_shape(empty, empty);
    } catch (const std::invalid_argument& e) {
      std::lock_guard<std::mutex> lock(mu);
      msgs[static_cast<std::size_t>(dist::rank())] = e.what();
    }
  });
  for (int r = 0; r < p; ++r) {
    const std::string& m = msgs[static_cast<std::size_t>(r)];
    EXPECT_TRUE(m.find("4x3") != std::string::npos && m.find("5x2") != std::string::npos)
        << "rank " << r << " must throw std::invalid_argument naming both shapes (4x3, 5x2); got '"
        << m << "'";
  }
}

// ---- Task 2 -------------------------------------------------------------------------------------

TEST(PackRowBlocks, LayoutAndPadding) {
  for (auto [rows, cols, parts] : std::vector<std::tuple<long, long, int>>{
           {7, 3, 3}, {8, 2, 4}, {2, 3, 5}, {5, 4, 1}, {1, 1, 2}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " in " +
                 std::to_string(parts) + " parts");
    const Eigen::MatrixXf M = counting_matrix(rows, cols);
    const std::vector<float> got = matmul::pack_row_blocks(M, parts);
    const std::vector<float> want = expected_row_blocks(M, parts);
    EXPECT_TRUE(distlab::testing::elements_near<float>(got, want));
    const Eigen::MatrixXf back = matmul::unpack_row_blocks(want, rows, cols, parts);
    ASSERT_EQ(back.rows(), rows);
    ASSERT_EQ(back.cols(), cols);
    EXPECT_TRUE(back == M) << "unpack_row_blocks(pack) did not give the matrix back";
  }
  // 7 split in 3 parts: chunks of 3 (padded), so the buffer holds 3 * 3 * 3 = 27 floats; one
  // float fewer or more is the wrong size (a longer buffer is rejected too, not read in part)
  for (std::size_t size : {std::size_t{10}, std::size_t{26}, std::size_t{28}, std::size_t{54}}) {
    const std::vector<float> wrong(size);
    EXPECT_THROW(matmul::unpack_row_blocks(wrong, 7, 3, 3), std::invalid_argument)
        << "a buffer of " << size << " floats (27 expected) must be rejected";
  }
}

TEST(PackColBlocks, LayoutAndPadding) {
  for (auto [rows, cols, parts] : std::vector<std::tuple<long, long, int>>{
           {3, 7, 3}, {2, 8, 4}, {3, 2, 5}, {4, 5, 1}, {1, 1, 2}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " in " +
                 std::to_string(parts) + " parts");
    const Eigen::MatrixXf M = counting_matrix(rows, cols);
    const std::vector<float> got = matmul::pack_col_blocks(M, parts);
    const std::vector<float> want = expected_col_blocks(M, parts);
    EXPECT_TRUE(distlab::testing::elements_near<float>(got, want));
    const Eigen::MatrixXf back = matmul::unpack_col_blocks(want, rows, cols, parts);
    ASSERT_EQ(back.rows(), rows);
    ASSERT_EQ(back.cols(), cols);
    EXPECT_TRUE(back == M) << "unpack_col_blocks(pack) did not give the matrix back";
  }
  // 7 split in 3 parts: chunks of 3 (padded), so the buffer holds 3 * 3 * 3 = 27 floats; one
  // float fewer or more is the wrong size (a longer buffer is rejected too, not read in part)
  for (std::size_t size : {std::size_t{10}, std::size_t{26}, std::size_t{28}, std::size_t{54}}) {
    const std::vector<float> wrong(size);
    EXPECT_THROW(matmul::unpack_col_blocks(wrong, 3, 7, 3), std::invalid_argument)
        << "a buffer of " << size << " floats (27 expected) must be rejected";
  }
}

// ---- Task 3: values (exact, small-integer inputs), world sizes 1..8 ------------------------------

TEST(MatmulByRows, Values) { values_all_world_sizes(Strategy::Rows); }
TEST(MatmulByCols, Values) { values_all_world_sizes(Strategy::Cols); }
TEST(MatmulByReduction, Values) { values_all_world_sizes(Strategy::Reduction); }
TEST(Matmul2dBlocks, Values) { values_all_world_sizes(Strategy::Blocks2D); }

// ---- Task 3: the communication plan (counters per rank, simulated time within 1%) --------------

TEST(MatmulByRows, CommunicationPlan) { plan_cases(Strategy::Rows); }
TEST(MatmulByCols, CommunicationPlan) { plan_cases(Strategy::Cols); }
TEST(MatmulByReduction, CommunicationPlan) { plan_cases(Strategy::Reduction); }
TEST(Matmul2dBlocks, CommunicationPlan) { plan_cases(Strategy::Blocks2D); }

TEST(Matmul2dBlocks, NonSquareWorldSizeIsAClearError) {
  for (int p : {2, 3, 5, 6, 8}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    const Eigen::MatrixXf A = int_matrix(6, 6, 1), B = int_matrix(6, 6, 2);
    std::mutex mu;
    std::vector<std::string> msgs(static_cast<std::size_t>(p));
    std::vector<dist::Stats> stats(static_cast<std::size_t>(p));
    run_ranks(p, [&] {
      dist::reset_stats();
      const Eigen::MatrixXf empty;
      std::string msg;
      try {
        if (dist::rank() == 0)
          matmul::matmul_2d_blocks(A, B);
        else
          matmul::matmul_2d_blocks(empty, empty);
      } catch (const std::invalid_argument& e) {
        msg = e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      msgs[static_cast<std::size_t>(dist::rank())] = msg;
      stats[static_cast<std::size_t>(dist::rank())] = dist::stats();
    });
    for (int r = 0; r < p; ++r) {
      const std::string& m = msgs[static_cast<std::size_t>(r)];
      EXPECT_NE(m.find(std::to_string(p)), std::string::npos)
          << "rank " << r << " must throw std::invalid_argument naming p = " << p << "; got '" << m
          << "'";
      EXPECT_EQ(stats[static_cast<std::size_t>(r)].messages_sent +
                    stats[static_cast<std::size_t>(r)].builtin_collectives,
                0u)
          << "rank " << r << " communicated before rejecting p = " << p;
    }
  }
}

// ---- Task 3: one product of size 1024 (real-valued; |C - A*B| <= 1e-6 k) -----------------------

TEST(MatmulByReduction, Size1024RealValues) {
  const long m = 1024, k = 1024, n = 256;
  const Eigen::MatrixXf A = real_matrix(m, k, 7), B = real_matrix(k, n, 8);
  const Eigen::MatrixXf want = A * B;
  const RunResult got = run_strategy(matmul::matmul_by_reduction, test_options(4, 20000), A, B);
  EXPECT_TRUE(result_ok(got, want, 1e-6 * static_cast<double>(k)));
}
