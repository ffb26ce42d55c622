// The dist API on the Open MPI backend. Run under mpirun (CTest: `mpirun -np 2` and `-np 4`, label
// mpi); every process runs every test, and each test is one dist::launch on all of them, so all
// ranks must take the same path through the tests (skips depend only on the world size).
// Expectations are closed forms, the same ones the threads backend's tests use.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "dist/dist.hpp"
#include "distlab_testing.hpp"

namespace {

// Read when the program starts (an MPI singleton sets some of the launcher's variables itself).
const int g_job_size = std::max(1, distlab::testing::mpi_job_size());
const int g_job_rank = distlab::testing::mpi_job_rank();
int job_size() { return g_job_size; }
int job_rank() { return g_job_rank; }

dist::LaunchOptions mpi_options(int timeout_ms = 20000) {
  dist::LaunchOptions o;
  o.backend = dist::Backend::Mpi;
  o.world_size = job_size();
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

/// Runs body on this process's rank; an exception becomes a failure of this process's test.
void run(const std::function<void()>& body, int timeout_ms = 20000) {
  try {
    dist::launch(mpi_options(timeout_ms), body);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

using distlab::testing::elements_near;

// Rank r's input element i: small integers, exact in every type, so any summation order gives the
// same result (MPI's algorithms and the threads backend's must agree bit for bit).
template <typename T>
T input(int r, std::size_t i) {
  return static_cast<T>(r + 1 + static_cast<int>(i % 5));
}

template <typename T>
T expected(dist::ReduceOp op, int p, std::size_t i) {
  T acc = distlab::testing::fold_ranks<T>(op, p, [&](int r) { return input<T>(r, i); });
  if (op == dist::ReduceOp::Avg) acc = static_cast<T>(acc / static_cast<T>(p));
  return acc;
}

template <typename T>
std::vector<T> inputs(int r, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = input<T>(r, i);
  return v;
}

template <typename T>
std::vector<T> expecteds(dist::ReduceOp op, int p, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = expected<T>(op, p, i);
  return v;
}

// A message value that names its sender and position.
template <typename T>
T message_value(int src, std::size_t i) {
  return static_cast<T>(src * 1000 + static_cast<int>(i % 997));
}

constexpr std::size_t kCounts[] = {0, 1, 7, 1000, 1 << 16};
constexpr dist::ReduceOp kOps[] = {dist::ReduceOp::Sum, dist::ReduceOp::Product,
                                   dist::ReduceOp::Min, dist::ReduceOp::Max, dist::ReduceOp::Avg};

template <typename T>
class MpiTyped : public ::testing::Test {};
using Types = ::testing::Types<float, double, std::int32_t, std::int64_t>;
TYPED_TEST_SUITE(MpiTyped, Types);

// ---- the job ---------------------------------------------------------------------------------

TEST(Mpi, RankAndSizeAreThoseOfTheJob) {
  run([] {
    EXPECT_TRUE(dist::in_launch());
    EXPECT_EQ(dist::world_size(), job_size());
    EXPECT_EQ(dist::rank(), job_rank());
    EXPECT_EQ(dist::options().backend, dist::Backend::Mpi);
    EXPECT_EQ(dist::options().world_size, job_size());
    EXPECT_EQ(dist::sim_time(), 0.0);
  });
  EXPECT_FALSE(dist::in_launch());
}

// ---- point-to-point ---------------------------------------------------------------------------

TYPED_TEST(MpiTyped, RingOfIsendAndRecvDeliversEveryCount) {
  using T = TypeParam;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    for (int repeat = 0; repeat < 2; ++repeat) {
      for (std::size_t n : kCounts) {
        std::vector<T> out(n), in(n, T{-1});
        for (std::size_t i = 0; i < n; ++i) out[i] = message_value<T>(r, i);
        auto w = dist::isend(std::span<const T>(out), right, static_cast<int>(n % 7));
        dist::recv(std::span<T>(in), left, static_cast<int>(n % 7));
        w.wait();
        std::vector<T> want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = message_value<T>(left, i);
        EXPECT_TRUE(elements_near(in, want)) << "count " << n;
      }
    }
  });
}

TEST(Mpi, BlockingSendRecvBetweenPartners) {
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const int partner = r ^ 1;
    if (partner >= p) return;  // odd world size: the last rank sits this one out
    std::vector<double> out(100, 0.5 + r), in(100, -1.0);
    if (r % 2 == 0) {
      dist::send(std::span<const double>(out), partner);
      dist::recv(std::span<double>(in), partner);
    } else {
      dist::recv(std::span<double>(in), partner);
      dist::send(std::span<const double>(out), partner);
    }
    EXPECT_TRUE(elements_near(in, std::vector<double>(100, 0.5 + partner)));
  });
}

TEST(Mpi, TagsMatchOutOfOrder) {
  if (job_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  run([] {
    const int r = dist::rank();
    if (r == 0) {
      std::vector<std::int32_t> a{1, 1, 1}, b{2, 2};
      auto wa = dist::isend(std::span<const std::int32_t>(a), 1, /*tag=*/1);
      auto wb = dist::isend(std::span<const std::int32_t>(b), 1, /*tag=*/2);
      wb.wait();
      wa.wait();
    } else if (r == 1) {
      std::vector<std::int32_t> a(3), b(2);
      dist::recv(std::span<std::int32_t>(b), 0, 2);  // the later message first
      dist::recv(std::span<std::int32_t>(a), 0, 1);
      EXPECT_TRUE(elements_near(a, {1, 1, 1}));
      EXPECT_TRUE(elements_near(b, {2, 2}));
    }
  });
}

TEST(Mpi, RecvAnyTakesEveryRankOnceAndReturnsItsSource) {
  // Which source comes first depends on real timing under MPI: check the set, not the order.
  if (job_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  run([] {
    const int r = dist::rank();
    const int p = dist::world_size();
    std::vector<std::int32_t> x{r, 10 * r};
    if (r == 0) {
      std::vector<int> seen;
      const dist::Stats before = dist::stats();
      for (int k = 1; k < p; ++k) {
        const int src = k % 2 ? dist::recv_any(std::span<std::int32_t>(x), 6)
                              : dist::irecv_any(std::span<std::int32_t>(x), 6).source_rank();
        EXPECT_EQ(x[0], src);
        EXPECT_EQ(x[1], 10 * src);
        seen.push_back(src);
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int> all(static_cast<std::size_t>(p - 1));
      std::iota(all.begin(), all.end(), 1);
      EXPECT_EQ(seen, all);
      const dist::Stats after = dist::stats();
      for (int q = 1; q < p; ++q) {
        EXPECT_EQ(after.bytes_received_from[static_cast<std::size_t>(q)] -
                      before.bytes_received_from[static_cast<std::size_t>(q)],
                  8u);
      }
    } else {
      dist::send(std::span<const std::int32_t>(x), 0, 6);
    }
  });
}

TEST(Mpi, WorkCompletesAndMayBeWaitedTwice) {
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    std::vector<std::int64_t> out(10, r), in(10, -1);
    auto rw = dist::irecv(std::span<std::int64_t>(in), (r + p - 1) % p, 5);
    auto sw = dist::isend(std::span<const std::int64_t>(out), (r + 1) % p, 5);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(rw.is_completed() && sw.is_completed())) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "is_completed never became true";
    }
    rw.wait();
    rw.wait();
    sw.wait();
    EXPECT_TRUE(elements_near(in, std::vector<std::int64_t>(10, (r + p - 1) % p)));
    dist::Work empty;
    EXPECT_TRUE(empty.is_completed());
  });
}

// ---- built-in collectives ---------------------------------------------------------------------

TYPED_TEST(MpiTyped, BroadcastFromEveryRoot) {
  using T = TypeParam;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    for (int root = 0; root < p; ++root) {
      for (std::size_t n : kCounts) {
        std::vector<T> buf = r == root ? inputs<T>(root, n) : std::vector<T>(n, T{0});
        dist::broadcast(std::span<T>(buf), root);
        EXPECT_TRUE(elements_near(buf, inputs<T>(root, n))) << "root " << root << " count " << n;
      }
    }
  });
}

TYPED_TEST(MpiTyped, AllReduceEveryOpTwice) {
  using T = TypeParam;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    for (int repeat = 0; repeat < 2; ++repeat) {
      for (auto op : kOps) {
        for (std::size_t n : kCounts) {
          auto buf = inputs<T>(r, n);
          dist::all_reduce(std::span<T>(buf), op);
          EXPECT_TRUE(elements_near(buf, expecteds<T>(op, p, n)))
              << to_string(op) << " count " << n;
          auto buf2 = inputs<T>(r, n);
          auto w = dist::all_reduce_async(std::span<T>(buf2), op);
          w.wait();
          EXPECT_TRUE(elements_near(buf2, expecteds<T>(op, p, n)))
              << "async " << to_string(op) << " count " << n;
        }
      }
    }
  });
}

TYPED_TEST(MpiTyped, ReduceToEveryRoot) {
  using T = TypeParam;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    for (int root = 0; root < p; ++root) {
      for (auto op : kOps) {
        const std::size_t n = 1000;
        auto buf = inputs<T>(r, n);
        dist::reduce(std::span<T>(buf), root, op);
        if (r == root) {
          EXPECT_TRUE(elements_near(buf, expecteds<T>(op, p, n)))
              << to_string(op) << " root " << root;
        }
      }
    }
  });
}

TYPED_TEST(MpiTyped, GatherScatterAllGatherReduceScatter) {
  using T = TypeParam;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const auto up = static_cast<std::size_t>(p);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
      std::vector<T> all(n * up);  // rank q's block: inputs<T>(q, n)
      for (int q = 0; q < p; ++q) {
        auto block = inputs<T>(q, n);
        std::copy(block.begin(), block.end(), all.begin() + static_cast<std::ptrdiff_t>(n * q));
      }
      const auto mine = inputs<T>(r, n);
      for (int root = 0; root < p; ++root) {
        std::vector<T> out(r == root ? n * up : 0);
        dist::gather(std::span<const T>(mine), std::span<T>(out), root);
        if (r == root) {
          EXPECT_TRUE(elements_near(out, all)) << "gather root " << root;
        }

        std::vector<T> part(n);
        std::vector<T> src = r == root ? all : std::vector<T>{};
        dist::scatter(std::span<const T>(src), std::span<T>(part), root);
        EXPECT_TRUE(elements_near(part, mine)) << "scatter root " << root;
      }
      std::vector<T> everything(n * up);
      dist::all_gather(std::span<const T>(mine), std::span<T>(everything));
      EXPECT_TRUE(elements_near(everything, all)) << "all_gather count " << n;

      for (auto op : kOps) {
        // Every rank contributes p blocks; block q of rank r is inputs(r, n) shifted by q.
        std::vector<T> in(n * up), out(n);
        for (int q = 0; q < p; ++q) {
          for (std::size_t i = 0; i < n; ++i) in[n * q + i] = input<T>(r, i + q);
        }
        dist::reduce_scatter(std::span<const T>(in), std::span<T>(out), op);
        std::vector<T> want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = expected<T>(op, p, i + r);
        EXPECT_TRUE(elements_near(out, want))
            << "reduce_scatter " << to_string(op) << " count " << n;
      }
    }
  });
}

// ---- instrumentation --------------------------------------------------------------------------

TEST(Mpi, StatsCountPointToPointAndBuiltinCalls) {
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    std::vector<float> out(250, 1.0f), in(250);
    std::vector<float> once(4, 1.0f);
    dist::all_reduce(std::span<float>(once));  // counted before the reset, not after
    dist::reset_stats();
    auto w = dist::isend(std::span<const float>(out), right, 3);
    dist::recv(std::span<float>(in), left, 3);
    w.wait();
    dist::all_reduce(std::span<float>(once));
    dist::broadcast(std::span<float>(once), 0);
    dist::barrier();
    const dist::Stats s = dist::stats();
    EXPECT_EQ(s.messages_sent, 1u);
    EXPECT_EQ(s.bytes_sent, 1000u);
    EXPECT_EQ(s.messages_received, 1u);
    EXPECT_EQ(s.bytes_received, 1000u);
    ASSERT_EQ(s.bytes_sent_to.size(), static_cast<std::size_t>(p));
    EXPECT_EQ(s.bytes_sent_to[static_cast<std::size_t>(right)], 1000u);
    EXPECT_EQ(s.messages_received_from[static_cast<std::size_t>(left)], 1u);
    EXPECT_EQ(s.builtin_collectives, 2u);
    EXPECT_EQ(s.barriers, 1u);
  });
}

// ---- process groups (MPI_Comm_split) -----------------------------------------------------------

// Parity groups ({0, 2, ...} and {1, 3, ...}) ordered by descending world rank, a reversed copy of
// the world, and every collective's value on them; p2p and recv_any in group ranks; counters in
// world ranks.
TEST(Mpi, GroupsSplitByColourAndKeyCarryCollectivesAndMessages) {
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const dist::Group par = dist::split(r % 2, -r, {}, "par");
    std::vector<int> want;
    for (int q = p - 1; q >= 0; --q) {
      if (q % 2 == r % 2) want.push_back(q);
    }
    ASSERT_EQ(par.world_ranks(), want);
    EXPECT_EQ(par.name(), "par" + std::to_string(r % 2));
    const int gp = par.size(), me = par.rank();
    EXPECT_EQ(par.world_rank(me), r);

    std::vector<double> x = {1.0 * r, 2.0};
    dist::all_reduce(std::span<double>(x), dist::ReduceOp::Sum, par);
    double sum = 0;
    for (int w : want) sum += w;
    EXPECT_EQ(x[0], sum);
    EXPECT_EQ(x[1], 2.0 * gp);

    std::vector<std::int32_t> in = {r}, all(static_cast<std::size_t>(gp));
    dist::all_gather(std::span<const std::int32_t>(in), std::span<std::int32_t>(all), par);
    EXPECT_EQ(std::vector<int>(all.begin(), all.end()), want);

    std::vector<float> b = {me == gp - 1 ? 42.f : 0.f};
    dist::broadcast(std::span<float>(b), gp - 1, par);
    EXPECT_EQ(b[0], 42.f);

    std::vector<std::int64_t> out = {r}, got = {-1};
    dist::reset_stats();
    auto w = dist::isend(std::span<const std::int64_t>(out), (me + 1) % gp, 5, par);
    dist::recv(std::span<std::int64_t>(got), (me + gp - 1) % gp, 5, par);
    w.wait();
    EXPECT_EQ(got[0], par.world_rank((me + gp - 1) % gp));
    const dist::Stats s = dist::stats();
    EXPECT_EQ(s.bytes_sent_to[static_cast<std::size_t>(par.world_rank((me + 1) % gp))], 8u);

    // recv_any on the reversed world returns a group rank.
    const dist::Group rev = dist::new_group([&] {
      std::vector<int> v(static_cast<std::size_t>(p));
      for (int q = 0; q < p; ++q) v[static_cast<std::size_t>(q)] = p - 1 - q;
      return v;
    }());
    EXPECT_EQ(rev.rank(), p - 1 - r);
    if (p >= 2) {
      std::vector<float> one = {1.f};
      if (rev.rank() == 1) dist::send(std::span<const float>(one), 0, 2, rev);
      if (rev.rank() == 0) {
        EXPECT_EQ(dist::recv_any(std::span<float>(one), 2, rev), 1);
      }
    }
    dist::barrier(rev);
  });
}

TEST(Mpi, NewGroupWithDifferentListsIsAMismatchOnEveryRank) {
  if (job_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::string msg;
  try {
    dist::launch(mpi_options(), [] {
      dist::new_group(dist::rank() == 0 ? std::vector<int>{0} : std::vector<int>{1});
    });
    ADD_FAILURE() << "expected a MismatchError";
  } catch (const dist::MismatchError& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error: " << e.what();
  }
  EXPECT_NE(msg.find("new_group"), std::string::npos) << msg;
}

// ---- failures are loud, on every rank, and never hang ------------------------------------------

TEST(Mpi, ErrorOnOneRankReachesEveryRankQuickly) {
  const int p = job_size();
  const int bad = p - 1;
  const auto start = std::chrono::steady_clock::now();
  try {
    dist::launch(mpi_options(20000), [bad] {
      if (dist::rank() == bad) throw std::runtime_error("boom on purpose");
      std::vector<float> x(4);
      dist::recv(std::span<float>(x), bad);  // would wait forever without the failure notice
    });
    ADD_FAILURE() << "launch returned normally although rank " << bad << " threw";
  } catch (const dist::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(bad) + ": boom on purpose"), std::string::npos)
        << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "the other ranks should be woken by the failure, not by the 20 s timeout";
  // The process can launch again after a failed launch.
  run([] {
    std::vector<std::int32_t> one{1};
    dist::all_reduce(std::span<std::int32_t>(one));
    EXPECT_EQ(one[0], dist::world_size());
  });
}

TEST(Mpi, CountMismatchIsAMismatchErrorOnEveryRank) {
  if (job_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (std::size_t recv_count : {4u, 16u}) {  // shorter and longer than the 8 sent
    EXPECT_THROW(
        {
          try {
            dist::launch(mpi_options(10000), [recv_count] {
              if (dist::rank() == 0) {
                std::vector<float> x(8, 1.0f);
                dist::send(std::span<const float>(x), 1);
              } else if (dist::rank() == 1) {
                std::vector<float> x(recv_count);
                dist::recv(std::span<float>(x), 0);
              }
            });
          } catch (const dist::MismatchError& e) {
            EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
            throw;
          }
        },
        dist::MismatchError)
        << "recv of " << recv_count << " elements for a send of 8";
  }
}

TEST(Mpi, DeadlockBecomesATimeoutThatPointsToTheThreadsBackend) {
  if (job_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const auto start = std::chrono::steady_clock::now();
  try {
    dist::launch(mpi_options(1000), [] {
      const int r = dist::rank();
      if (r > 1) return;
      std::vector<double> x(3);
      dist::recv(std::span<double>(x), 1 - r);  // both wait for the other: a deadlock
    });
    ADD_FAILURE() << "launch returned normally from a deadlock";
  } catch (const dist::TimeoutError& e) {
    const std::string what = e.what();
    // Whichever of ranks 0 and 1 timed out first wakes the other, so either may be reported.
    EXPECT_TRUE(what.find("rank 0: recv(src=1") != std::string::npos ||
                what.find("rank 1: recv(src=0") != std::string::npos)
        << what;
    EXPECT_NE(what.find("--backend threads"), std::string::npos) << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a dist::TimeoutError, got: " << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// ---- bf16 -------------------------------------------------------------------------------------

// bf16 on MPI: moved as two-byte elements, reduced by the backend's user-defined ops in float,
// rounded to bf16 (dist.hpp). Small integers are exact in bf16 whatever MPI's order; with two
// ranks the order cannot matter, so a sum that needs rounding is the float sum rounded once.
TEST(Mpi, Bf16MovesAndReducesWithHalfTheBytesOfFloat) {
  using dist::bf16;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const std::size_t n = 1001;  // odd
    auto in = [](int q, std::size_t i) { return bf16(static_cast<float>(q + 1 + (i % 5))); };
    std::vector<bf16> a(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = in(r, i);
    dist::all_reduce(std::span<bf16>(a));
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q) want += static_cast<float>(in(q, i));
      ASSERT_EQ(static_cast<float>(a[i]), want) << "i=" << i;
    }
    for (dist::ReduceOp op : {dist::ReduceOp::Min, dist::ReduceOp::Max, dist::ReduceOp::Avg}) {
      std::vector<bf16> b(n);
      for (std::size_t i = 0; i < n; ++i) b[i] = bf16(-static_cast<float>(in(r, i)));
      dist::all_reduce(std::span<bf16>(b), op);
      for (std::size_t i = 0; i < n; ++i) {
        float lo = 0, hi = -1e9f, sum = 0;
        for (int q = 0; q < p; ++q) {
          const float x = -static_cast<float>(in(q, i));
          lo = std::min(lo, x);
          hi = std::max(hi, x);
          sum += x;
        }
        const float want = op == dist::ReduceOp::Min   ? lo
                           : op == dist::ReduceOp::Max ? hi
                                                       : static_cast<float>(bf16(sum / p));
        ASSERT_EQ(static_cast<float>(b[i]), want) << dist::to_string(op) << " i=" << i;
      }
    }
    if (p == 2) {
      std::vector<bf16> c(n), rs(n);
      std::vector<bf16> c2(2 * n);
      auto v = [](int q, std::size_t i) {
        return bf16(1.0f + 0.37f * static_cast<float>(q) + 0.0131f * static_cast<float>(i % 97));
      };
      for (std::size_t i = 0; i < n; ++i) c[i] = v(r, i);
      for (std::size_t i = 0; i < 2 * n; ++i) c2[i] = v(r, i);
      dist::all_reduce(std::span<bf16>(c));
      dist::reduce_scatter(std::span<const bf16>(c2), std::span<bf16>(rs));
      for (std::size_t i = 0; i < n; ++i) {
        const float want =
            static_cast<float>(bf16(static_cast<float>(v(0, i)) + static_cast<float>(v(1, i))));
        ASSERT_EQ(static_cast<float>(c[i]), want) << "i=" << i;
        const std::size_t g = static_cast<std::size_t>(r) * n + i;
        ASSERT_EQ(static_cast<float>(rs[i]), static_cast<float>(bf16(static_cast<float>(v(0, g)) +
                                                                     static_cast<float>(v(1, g)))))
            << "reduce_scatter i=" << g;
      }
    }
    std::vector<bf16> mine(n), all(n * static_cast<std::size_t>(p));
    for (std::size_t i = 0; i < n; ++i) mine[i] = bf16(static_cast<float>(r) + 0.5f);
    dist::all_gather(std::span<const bf16>(mine), std::span<bf16>(all));
    for (std::size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ(static_cast<float>(all[i]), static_cast<float>(i / n) + 0.5f) << "i=" << i;
    }
    dist::reset_stats();
    std::vector<bf16> got(n);
    auto w = dist::isend(std::span<const bf16>(mine), (r + 1) % p);
    dist::recv(std::span<bf16>(got), (r + p - 1) % p);
    w.wait();
    EXPECT_EQ(static_cast<float>(got[n - 1]), static_cast<float>((r + p - 1) % p) + 0.5f);
    EXPECT_EQ(dist::stats().bytes_sent, 2 * n);  // half of the 4n bytes of float
  });
}

TEST(Mpi, WithoutMpirunOnlyWorldSizeOneRuns) {
  if (job_size() > 1) GTEST_SKIP() << "checks the message shown outside mpirun";
  // Under `mpirun -np 1` the job has one rank, so world size 3 is ignored; outside mpirun
  // (a singleton) it is refused with a message that says how to start the job.
  dist::LaunchOptions o = mpi_options();
  o.world_size = 3;
  const bool under_mpirun = dist::started_by_mpirun();
  try {
    dist::launch(o, [] {});
    EXPECT_TRUE(under_mpirun) << "world size 3 without mpirun should be refused";
  } catch (const dist::Error& e) {
    EXPECT_FALSE(under_mpirun) << e.what();
    EXPECT_NE(std::string(e.what()).find("mpirun -np 3"), std::string::npos) << e.what();
  }
}

// Only rank 0 prints gtest's full output; other ranks print their failures, prefixed.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::printf("[rank %d] %s:%d: Failure\n%s\n", rank_,
                  result.file_name() ? result.file_name() : "?", result.line_number(),
                  result.summary());
      std::fflush(stdout);
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = job_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
