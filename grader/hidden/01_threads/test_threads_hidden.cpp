// Hidden tests of 01_threads: edge cases, larger sizes and repetition.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "distlab/timing.hpp"
#include "distlab_testing.hpp"
#include "threads.hpp"

using namespace std::chrono_literals;

TEST(HiddenStartJoin, EightSleepersOverlap) {
  std::atomic<int> ran{0};
  std::vector<threads::Task> tasks(8, [&ran] {
    std::this_thread::sleep_for(120ms);
    ++ran;
  });
  distlab::Stopwatch sw;
  threads::run_parallel(tasks);
  const double elapsed = sw.elapsed_s();
  EXPECT_EQ(ran.load(), 8);
  EXPECT_LT(elapsed, 0.6 * 8 * 0.120) << "8 tasks of 120 ms took " << elapsed * 1e3 << " ms";
}

TEST(HiddenStartJoin, SequentialTwoSleepersAreSerial) {
  std::atomic<int> active{0}, max_active{0};
  std::vector<threads::Task> tasks(2, [&] {
    const int now = ++active;
    int seen = max_active.load();
    while (now > seen && !max_active.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(200ms);
    --active;
  });
  distlab::Stopwatch sw;
  threads::run_sequential(tasks);
  EXPECT_GE(sw.elapsed_s(), 0.95 * 0.4);
  EXPECT_EQ(max_active.load(), 1);
}

TEST(HiddenChunkBounds, HugeCountsDoNotOverflow) {
  const std::size_t n = 1'000'000'000'003ULL;
  std::size_t begin = 0;
  for (int i = 0; i < 7; ++i) {
    const auto [b, e] = threads::chunk_bounds(n, 7, i);
    ASSERT_EQ(b, begin);
    ASSERT_EQ(e - b, n / 7 + (static_cast<std::size_t>(i) < n % 7 ? 1 : 0));
    begin = e;
  }
  EXPECT_EQ(begin, n);
}

TEST(HiddenParallelSum, EveryThreadCountUpTo33) {
  std::vector<double> data(1001);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = (i % 2 ? -1.0 : 1.0) * static_cast<double>(i);
  const double want = std::accumulate(data.begin(), data.end(), 0.0);  // exact: integers
  for (int k = 1; k <= 33; ++k)
    EXPECT_EQ(threads::parallel_sum(data, k), want) << "n_threads=" << k;
}

TEST(HiddenParallelSum, LargeInputWithinRoundingBound) {
  std::vector<double> data(1 << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::sin(static_cast<double>(i)) * 1e6;
  const double want = std::accumulate(data.begin(), data.end(), 0.0);
  double abs_sum = 0;
  for (double x : data) abs_sum += std::abs(x);
  const double tol =
      static_cast<double>(data.size()) * std::numeric_limits<double>::epsilon() * abs_sum;
  for (int k : {2, 5, 16}) EXPECT_NEAR(threads::parallel_sum(data, k), want, tol) << k;
}

TEST(HiddenProcesses, SingleCreationAndBoundaryValues) {
  const auto c = threads::measure_creation_cost(1);
  EXPECT_EQ(c.n, 1);
  EXPECT_GT(c.process_s, 0.0);
  EXPECT_GT(c.thread_s, 0.0);
  EXPECT_THROW(threads::measure_creation_cost(0), std::invalid_argument);
  auto p = threads::write_in_child_process(9, 0);
  EXPECT_EQ(p.writer_saw, 0);
  EXPECT_EQ(p.parent_saw, 9);
  p = threads::write_in_child_process(9, 255);
  EXPECT_EQ(p.writer_saw, 255);
  EXPECT_EQ(p.parent_saw, 9);
  EXPECT_THROW(threads::write_in_child_process(0, -1), std::invalid_argument);
}

TEST(HiddenParallelFor, ManyItemsManyWorkersRepeated) {
  for (int rep = 0; rep < 5; ++rep) {
    const std::size_t n = 10000;
    std::vector<std::atomic<int>> hits(n);
    std::mutex mu;
    std::set<std::thread::id> ids;
    threads::parallel_for(n, 16, [&](std::size_t i) {
      ++hits[i];
      if (i % 97 == 0) {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
    EXPECT_LE(ids.size(), 16u);
  }
}

TEST(HiddenParallelFor, SeveralFailingItemsAndReuseAfterFailure) {
  for (int rep = 0; rep < 10; ++rep) {
    EXPECT_THROW(threads::parallel_for(200, 6,
                                       [](std::size_t i) {
                                         if (i % 10 == 3) throw std::out_of_range("item failed");
                                       }),
                 std::out_of_range);
  }
  std::atomic<long> sum{0};
  threads::parallel_for(100, 6, [&](std::size_t i) { sum += static_cast<long>(i); });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(HiddenParallelMap, SleepingItemsRunInParallel) {
  std::vector<double> xs(6, 1.0);
  distlab::Stopwatch sw;
  const auto ys = threads::parallel_map(
      xs,
      [](double x) {
        std::this_thread::sleep_for(100ms);
        return 2 * x;
      },
      3);
  EXPECT_LT(sw.elapsed_s(), 0.6 * 0.6);
  EXPECT_EQ(ys, std::vector<double>(6, 2.0));
}

TEST(HiddenTrajectories, LargerDataSetAndEdgeShapes) {
  threads::OdeConfig cfg;
  cfg.n_trajectories = 200;
  cfg.steps = 300;
  cfg.seed = 123456789;
  const auto ref = threads::generate_trajectories(cfg, 1);
  ASSERT_EQ(ref.size(), 200u * 301u);
  for (std::size_t i = 0; i < cfg.n_trajectories; ++i) {
    ASSERT_EQ(ref[i * 301], threads::initial_state(cfg, i)) << "row " << i << " starts at x0";
  }
  for (int w = 2; w <= 8; ++w) {
    ASSERT_TRUE(
        distlab::testing::elements_near<double>(threads::generate_trajectories(cfg, w), ref))
        << w << " workers";
  }
  threads::OdeConfig empty = cfg;
  empty.n_trajectories = 0;
  EXPECT_TRUE(threads::generate_trajectories(empty, 4).empty());
  threads::OdeConfig flat = cfg;
  flat.n_trajectories = 5;
  flat.steps = 0;
  const auto x0 = threads::generate_trajectories(flat, 3);
  ASSERT_EQ(x0.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(x0[i], threads::initial_state(flat, i));
}
