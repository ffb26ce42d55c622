// Public tests of 01_threads. Timing checks use sleeping tasks with wide margins so that they hold
// on a loaded two-core machine: overlapped work must take < 0.6 x the sum of the sleeps, serial
// work >= 0.95 x the sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distlab/timing.hpp"
#include "distlab_testing.hpp"
#include "threads.hpp"

namespace {

using namespace std::chrono_literals;

/// Records how many probed sections run at once, on which threads, and in which order.
class Probe {
 public:
  void enter(int id) {
    const int now = ++active_;
    int seen = max_active_.load();
    while (now > seen && !max_active_.compare_exchange_weak(seen, now)) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    threads_.insert(std::this_thread::get_id());
    order_.push_back(id);
  }
  void leave() { --active_; }
  int max_active() const { return max_active_.load(); }
  std::set<std::thread::id> threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }
  std::vector<int> order() const {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
  mutable std::mutex mu_;
  std::set<std::thread::id> threads_;
  std::vector<int> order_;
};

std::vector<threads::Task> sleeping_tasks(Probe& probe, int n, std::chrono::milliseconds ms) {
  std::vector<threads::Task> tasks;
  for (int i = 0; i < n; ++i) {
    tasks.push_back([&probe, i, ms] {
      probe.enter(i);
      std::this_thread::sleep_for(ms);
      probe.leave();
    });
  }
  return tasks;
}

std::vector<double> uniform_data(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = u(gen);
  return v;
}

}  // namespace

// ---- 1. start and join -------------------------------------------------------------------------

TEST(StartJoin, RunParallelOverlapsTheTasks) {
  Probe probe;
  const int n = 4;
  const auto sleep = 150ms;
  distlab::Stopwatch sw;
  threads::run_parallel(sleeping_tasks(probe, n, sleep));
  const double elapsed = sw.elapsed_s();
  const double sum = n * 0.150;
  EXPECT_EQ(probe.order().size(), static_cast<std::size_t>(n)) << "every task must run once";
  EXPECT_LT(elapsed, 0.6 * sum) << "4 tasks sleeping 150 ms took " << elapsed * 1e3
                                << " ms: start all threads first, then join them all";
  EXPECT_GE(probe.max_active(), 2) << "the tasks never ran at the same time";
  EXPECT_EQ(probe.threads().count(std::this_thread::get_id()), 0u)
      << "tasks must run on new std::threads, not on the caller's thread";
}

TEST(StartJoin, RunSequentialDoesNotOverlap) {
  Probe probe;
  const int n = 4;
  distlab::Stopwatch sw;
  threads::run_sequential(sleeping_tasks(probe, n, 150ms));
  const double elapsed = sw.elapsed_s();
  const double sum = n * 0.150;
  EXPECT_GE(elapsed, 0.95 * sum) << "run_sequential finished in " << elapsed * 1e3
                                 << " ms: each thread must be joined before the next starts";
  EXPECT_EQ(probe.max_active(), 1) << "two tasks overlapped in run_sequential";
  EXPECT_EQ(probe.order(), (std::vector<int>{0, 1, 2, 3})) << "tasks must run in list order";
  EXPECT_EQ(probe.threads().count(std::this_thread::get_id()), 0u)
      << "tasks must run on new std::threads (started and joined one at a time)";
}

TEST(StartJoin, EmptyTaskListAndManyTasks) {
  EXPECT_NO_THROW(threads::run_parallel({}));
  EXPECT_NO_THROW(threads::run_sequential({}));
  std::atomic<int> count{0};
  std::vector<threads::Task> tasks(50, [&count] { ++count; });
  threads::run_parallel(tasks);
  EXPECT_EQ(count.load(), 50);
  threads::run_sequential(tasks);
  EXPECT_EQ(count.load(), 100);
}

// ---- 2. chunked partition and parallel sum -------------------------------------------------------

TEST(ChunkBounds, WorkedExample) {
  using R = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(threads::chunk_bounds(10, 3, 0), R(0, 4));
  EXPECT_EQ(threads::chunk_bounds(10, 3, 1), R(4, 7));
  EXPECT_EQ(threads::chunk_bounds(10, 3, 2), R(7, 10));
  EXPECT_EQ(threads::chunk_bounds(2, 4, 3), R(2, 2))
      << "more parts than items: empty chunks at the end";
  EXPECT_THROW(threads::chunk_bounds(10, 0, 0), std::invalid_argument);
  EXPECT_THROW(threads::chunk_bounds(10, 3, 3), std::invalid_argument);
  EXPECT_THROW(threads::chunk_bounds(10, 3, -1), std::invalid_argument);
}

TEST(ChunkBounds, ContiguousCoveringAndBalanced) {
  for (std::size_t n : {0u, 1u, 7u, 10u, 1000u, 1001u}) {
    for (int parts : {1, 2, 3, 4, 8, 16}) {
      std::size_t expect_begin = 0;
      for (int i = 0; i < parts; ++i) {
        const auto [b, e] = threads::chunk_bounds(n, parts, i);
        ASSERT_EQ(b, expect_begin) << "n=" << n << " parts=" << parts << " chunk " << i
                                   << " must start where chunk " << i - 1 << " ended";
        const std::size_t size = e - b;
        const std::size_t want = n / parts + (static_cast<std::size_t>(i) < n % parts ? 1 : 0);
        ASSERT_EQ(size, want) << "n=" << n << " parts=" << parts << " chunk " << i
                              << ": sizes differ by at most one, larger chunks first";
        expect_begin = e;
      }
      ASSERT_EQ(expect_begin, n) << "the chunks must cover all " << n << " items";
    }
  }
}

TEST(ParallelSum, MatchesSequentialSum) {
  const double eps = std::numeric_limits<double>::epsilon();
  for (std::size_t n : {0u, 1u, 7u, 1000u, 100003u}) {
    const auto data = uniform_data(n, 1234 + n);
    const double want = std::accumulate(data.begin(), data.end(), 0.0);
    double abs_sum = 0;
    for (double x : data) abs_sum += std::abs(x);
    const double tol = static_cast<double>(n + 1) * eps * abs_sum;
    for (int k : {1, 2, 3, 4, 8, 16}) {
      const double got = threads::parallel_sum(data, k);
      EXPECT_NEAR(got, want, tol) << "n=" << n << " n_threads=" << k;
    }
  }
}

TEST(ParallelSum, MoreThreadsThanElements) {
  const std::vector<double> data = {1.0, 2.0, 4.0};
  EXPECT_EQ(threads::parallel_sum(data, 16), 7.0);
  EXPECT_EQ(threads::parallel_sum(std::vector<double>{}, 5), 0.0);
  EXPECT_THROW(threads::parallel_sum(data, 0), std::invalid_argument);
}

// ---- 3. threads versus processes -----------------------------------------------------------------

TEST(Processes, CreationCostMeasuresBoth) {
  // A process costs several times a thread, but on a loaded machine one measurement can be
  // unlucky (a thread waiting for a core), so the comparison gets up to five attempts.
  threads::CreationCost c;
  for (int attempt = 0; attempt < 5; ++attempt) {
    c = threads::measure_creation_cost(40);
    ASSERT_EQ(c.n, 40);
    ASSERT_GT(c.thread_s, 0.0);
    ASSERT_GT(c.process_s, 0.0);
    ASSERT_LT(c.thread_s, 10.0);
    ASSERT_LT(c.process_s, 10.0);
    if (c.process_s > c.thread_s) break;
  }
  EXPECT_GT(c.process_s, c.thread_s)
      << "creating 40 processes (fork + waitpid) took " << c.process_s * 1e3
      << " ms but 40 threads took " << c.thread_s * 1e3
      << " ms, five times in a row; fork copies the page tables, so processes should cost more";
}

TEST(AddressSpaces, ChildProcessWriteIsInvisibleToParent) {
  for (auto [initial, written] : {std::pair{3, 77}, std::pair{0, 200}, std::pair{-5, 1}}) {
    const auto seen = threads::write_in_child_process(initial, written);
    EXPECT_EQ(seen.writer_saw, written) << "the child reads back its own write";
    EXPECT_EQ(seen.parent_saw, initial) << "the parent must still see its own copy (" << initial
                                        << ") after the child wrote " << written;
  }
  EXPECT_THROW(threads::write_in_child_process(0, 256), std::invalid_argument);
}

TEST(AddressSpaces, ThreadWriteIsVisibleToParent) {
  for (auto [initial, written] : {std::pair{3, 77}, std::pair{0, 200}, std::pair{-5, 123456}}) {
    const auto seen = threads::write_in_thread(initial, written);
    EXPECT_EQ(seen.writer_saw, written);
    EXPECT_EQ(seen.parent_saw, written)
        << "threads share memory: after join the parent sees " << written;
  }
}

// ---- 4. worker pool -----------------------------------------------------------------------------

TEST(ParallelFor, EveryIndexExactlyOnce) {
  for (std::size_t n : {0u, 1u, 7u, 1000u}) {
    for (int workers : {1, 2, 3, 8, 50}) {
      std::vector<std::atomic<int>> hits(n);
      threads::parallel_for(n, workers, [&](std::size_t i) { ++hits.at(i); });
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n << " with " << workers
                                     << " workers ran " << hits[i].load() << " times";
      }
    }
  }
}

TEST(ParallelFor, IsAPoolOfAtMostNWorkersRunningInParallel) {
  Probe probe;
  distlab::Stopwatch sw;
  threads::parallel_for(8, 4, [&](std::size_t i) {
    probe.enter(static_cast<int>(i));
    std::this_thread::sleep_for(100ms);
    probe.leave();
  });
  const double elapsed = sw.elapsed_s();
  EXPECT_LT(elapsed, 0.6 * 0.8) << "8 items of 100 ms on 4 workers took " << elapsed * 1e3 << " ms";
  EXPECT_GE(probe.max_active(), 2) << "items never ran at the same time";
  EXPECT_LE(probe.max_active(), 4) << "more than n_workers items ran at once";
  EXPECT_LE(probe.threads().size(), 4u) << "a pool of 4 workers must not use more than 4 threads";

  Probe many;
  threads::parallel_for(300, 3, [&](std::size_t i) {
    many.enter(static_cast<int>(i));
    many.leave();
  });
  EXPECT_LE(many.threads().size(), 3u)
      << "300 items on 3 workers ran on " << many.threads().size()
      << " threads: reuse the workers, do not start a thread per item";
}

TEST(ParallelFor, ReusesItsWorkersInsteadOfAThreadPerItem) {
  // Thread ids are reused once a thread has been joined, so count threads by a thread_local
  // mark instead: a thread that starts running items of this call has no mark yet.
  static thread_local bool marked = false;
  for (int call = 0; call < 2; ++call) {
    std::atomic<int> fresh{0};
    threads::parallel_for(300, 3, [&](std::size_t) {
      if (!marked) {
        marked = true;
        ++fresh;
      }
    });
    marked = false;  // in case items ran on this (the calling) thread
    EXPECT_LE(fresh.load(), 3)
        << "300 items on 3 workers ran on " << fresh.load()
        << " different threads: start n_workers threads once and let each "
           "take item after item, not a thread per item (or per wave of items)";
  }
}

TEST(ParallelFor, ExceptionReachesCaller) {
  std::atomic<int> ran{0};
  try {
    threads::parallel_for(100, 4, [&](std::size_t i) {
      ++ran;
      if (i == 17) throw std::runtime_error("item 17 failed");
    });
    FAIL() << "the exception thrown by item 17 did not reach the caller";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "item 17 failed");
  }
  EXPECT_THROW(threads::parallel_for(3, 0, [](std::size_t) {}), std::invalid_argument);
}

TEST(PoolFailure, WorkersStopTakingItemsAfterOneThrows) {
  // Item 0 throws at once; every other item takes 3 ms. After the failure each worker may finish
  // the item it holds, but must not claim new ones, so far fewer than all 600 items start.
  const std::size_t n = 600;
  std::atomic<int> started{0};
  try {
    threads::parallel_for(n, 4, [&](std::size_t i) {
      ++started;
      if (i == 0) throw std::runtime_error("item 0 failed");
      std::this_thread::sleep_for(3ms);
    });
    FAIL() << "the exception thrown by item 0 did not reach the caller";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "item 0 failed");
  }
  EXPECT_LT(started.load(), static_cast<int>(n / 2))
      << started.load() << " of " << n
      << " items started although item 0 threw first: after an item "
      << "throws, the workers must stop taking new items (check a shared flag before claiming the "
         "next)";
}

TEST(ParallelMap, RunsOnSeveralThreads) {
  Probe probe;
  std::vector<double> xs(6, 1.0);
  const auto ys = threads::parallel_map(
      xs,
      [&](double x) {
        probe.enter(0);
        std::this_thread::sleep_for(50ms);
        probe.leave();
        return x + 1.0;
      },
      3);
  EXPECT_EQ(ys, std::vector<double>(6, 2.0));
  EXPECT_GE(probe.threads().size(), 2u)
      << "6 items of 50 ms on 3 workers all ran on one thread: "
         "parallel_map must use a pool of n_workers (parallel_for)";
  EXPECT_LE(probe.threads().size(), 3u) << "more threads than n_workers";
}

TEST(ParallelMap, ResultsInInputOrder) {
  std::vector<double> xs(257);
  std::iota(xs.begin(), xs.end(), -100.0);
  for (int workers : {1, 2, 3, 8, 300}) {
    const auto ys = threads::parallel_map(
        xs, [](double x) { return x * x + 1.0; }, workers);
    ASSERT_EQ(ys.size(), xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      ASSERT_EQ(ys[i], xs[i] * xs[i] + 1.0) << "index " << i << " with " << workers << " workers";
    }
  }
}

TEST(ParallelMap, EmptyInputAndMoreWorkersThanItems) {
  EXPECT_TRUE(threads::parallel_map(
                  std::vector<double>{}, [](double x) { return x; }, 4)
                  .empty());
  const auto ys = threads::parallel_map(
      std::vector<double>{2.0, 3.0}, [](double x) { return -x; }, 16);
  EXPECT_EQ(ys, (std::vector<double>{-2.0, -3.0}));
}

TEST(ParallelMap, ExceptionInOneItemSurfaces) {
  std::vector<double> xs(64);
  std::iota(xs.begin(), xs.end(), 0.0);
  EXPECT_THROW(threads::parallel_map(
                   xs,
                   [](double x) -> double {
                     if (x == 40.0) throw std::domain_error("bad item");
                     return x;
                   },
                   4),
               std::domain_error);
}

// ---- 5. data generation -------------------------------------------------------------------------

TEST(Trajectories, MatchSequentialReferenceForAnyWorkerCount) {
  threads::OdeConfig cfg;
  cfg.n_trajectories = 37;
  cfg.steps = 50;
  cfg.seed = 7;
  const std::size_t len = static_cast<std::size_t>(cfg.steps) + 1;
  std::vector<double> want(cfg.n_trajectories * len);
  for (std::size_t i = 0; i < cfg.n_trajectories; ++i) {
    threads::simulate_trajectory(cfg, i, std::span<double>(want).subspan(i * len, len));
  }
  for (int workers : {1, 2, 3, 8, 64}) {
    const auto got = threads::generate_trajectories(cfg, workers);
    ASSERT_TRUE(distlab::testing::elements_near<double>(got, want))
        << "with " << workers
        << " workers: some row is not what simulate_trajectory gives for "
           "that trajectory alone (each item must fill exactly its own row, whatever the workers)";
  }
}

TEST(Trajectories, DifferentSeedsGiveDifferentData) {
  threads::OdeConfig a, b;
  a.n_trajectories = b.n_trajectories = 8;
  a.steps = b.steps = 5;
  b.seed = a.seed + 1;
  const auto da = threads::generate_trajectories(a, 2);
  const auto db = threads::generate_trajectories(b, 2);
  ASSERT_EQ(da.size(), 8u * 6u);
  EXPECT_NE(da, db);
  for (double x : da) EXPECT_TRUE(std::isfinite(x));
}
