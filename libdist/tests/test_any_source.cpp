// Receives from any source (recv_any / irecv_any) on the threads backend: the earliest simulated
// arrival wins (ties: the lowest source rank) whatever the wall-clock order of the sends, so the
// result is the same on every run; deadlocks, mismatches, counters, the clock and the trace
// cover them like every other receive.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "distlab_testing.hpp"

using namespace distlab::testing;

namespace {

dist::LaunchOptions any_opts(int p) {
  dist::LaunchOptions o = threads_options(p);
  o.network.latency_s = 1e-6;
  o.network.bandwidth_Bps = 1e9;
  return o;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(AnySource, EarliestSimulatedArrivalWinsWhateverTheWallClockOrder) {
  // Rank q computes delay[q] simulated seconds, then sends its rank to 0. In wall time the
  // ranks send in the reverse order of their simulated arrivals.
  const std::vector<double> delay = {0, 3e-3, 2e-3, 1e-3};
  const std::vector<int> wall_ms = {0, 0, 40, 80};
  std::vector<int> order;
  run_ranks(any_opts(4), [&] {
    const int r = dist::rank();
    std::vector<std::int32_t> x(1, r);
    if (r == 0) {
      for (int k = 0; k < 3; ++k) {
        const int src = dist::recv_any(std::span<std::int32_t>(x), 5);
        EXPECT_EQ(x[0], src) << "the data must come from the source recv_any returned";
        order.push_back(src);
      }
    } else {
      sleep_ms(wall_ms[static_cast<std::size_t>(r)]);
      dist::sim_compute(delay[static_cast<std::size_t>(r)]);
      dist::send(std::span<const std::int32_t>(x), 0, 5);
    }
  });
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1}));
}

TEST(AnySource, TiesGoToTheLowestSourceRank) {
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int> order;
    run_ranks(any_opts(5), [&] {
      const int r = dist::rank();
      std::vector<float> x(8, static_cast<float>(r));
      if (r == 0) {
        for (int k = 0; k < 4; ++k) order.push_back(dist::recv_any(std::span<float>(x)));
      } else {
        sleep_ms(10 * (4 - r));  // the highest rank sends first in wall time
        dist::send(std::span<const float>(x), 0);
      }
    });
    EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4})) << "repetition " << rep;
  }
}

TEST(AnySource, OnlyTheTagMatchesAndDataArrivesIntact) {
  run_ranks(any_opts(3), [&] {
    const int r = dist::rank();
    if (r == 0) {
      std::vector<double> a(3), b(3);
      // Rank 2's tag-1 message arrives before rank 1's tag-2 one, but recv_any(tag 2) skips it.
      EXPECT_EQ(dist::recv_any(std::span<double>(b), 2), 1);
      EXPECT_EQ(dist::recv_any(std::span<double>(a), 1), 2);
      EXPECT_EQ(a, (std::vector<double>{2, 20, 200}));
      EXPECT_EQ(b, (std::vector<double>{1, 10, 100}));
    } else {
      const double v = r;
      std::vector<double> x = {v, 10 * v, 100 * v};
      if (r == 1) dist::sim_compute(1e-3);
      dist::send(std::span<const double>(x), 0, r == 1 ? 2 : 1);
    }
  });
}

TEST(AnySource, ClockAndCountersFollowTheChosenMessage) {
  // Rank 1 sends 1000 floats at t = 0: they arrive at alpha + 4000 beta = 5 us. Rank 2 sends 10
  // floats at t = 1 us: they arrive at 1 + alpha + 40 beta = 2.04 us. Rank 2's is taken first
  // although rank 1 sent earlier; rank 1's then takes rank 0's incoming link after it.
  auto o = any_opts(3);
  std::vector<int> order;
  std::vector<double> clocks;
  dist::Stats st;
  run_ranks(o, [&] {
    const int r = dist::rank();
    if (r == 0) {
      std::vector<float> small(10), big(1000);
      order.push_back(dist::recv_any(std::span<float>(small), 7));
      clocks.push_back(dist::sim_time());
      order.push_back(dist::recv_any(std::span<float>(big), 7));
      clocks.push_back(dist::sim_time());
      st = dist::stats();
    } else if (r == 1) {
      std::vector<float> big(1000, 1.f);
      dist::send(std::span<const float>(big), 0, 7);
    } else {
      std::vector<float> small(10, 2.f);
      dist::sim_compute(1e-6);
      dist::send(std::span<const float>(small), 0, 7);
    }
  });
  ASSERT_EQ(order, (std::vector<int>{2, 1}));
  const double alpha = o.network.latency_s, beta = 1.0 / o.network.bandwidth_Bps;
  const double first = 1e-6 + alpha + 40 * beta;
  // The big message left at 0 but takes the incoming link after the small one: max(0, first).
  const double second = std::max(alpha + 4000 * beta, first + alpha + 4000 * beta);
  ASSERT_EQ(clocks.size(), 2u);
  EXPECT_NEAR(clocks[0], first, 1e-12);
  EXPECT_NEAR(clocks[1], second, 1e-12);
  EXPECT_EQ(st.messages_received, 2u);
  EXPECT_EQ(st.bytes_received_from[1], 4000u);
  EXPECT_EQ(st.bytes_received_from[2], 40u);
  EXPECT_EQ(st.messages_received_from[1], 1u);
  EXPECT_EQ(st.messages_received_from[2], 1u);
}

TEST(AnySource, IrecvAnyGivesItsSourceAndOtherHandlesHaveNone) {
  run_ranks(any_opts(3), [&] {
    const int r = dist::rank();
    std::vector<std::int64_t> x(2, r);
    if (r == 0) {
      dist::Work w = dist::irecv_any(std::span<std::int64_t>(x), 3);
      EXPECT_EQ(w.source_rank(), 2);  // waits
      EXPECT_EQ(x[0], 2);
      w.wait();  // waiting again is fine
      EXPECT_EQ(w.source_rank(), 2);
      EXPECT_EQ(dist::recv_any(std::span<std::int64_t>(x), 3), 1);
      std::vector<std::int64_t> y(2);
      dist::Work plain = dist::irecv(std::span<std::int64_t>(y), 1, 4);
      EXPECT_THROW((void)plain.source_rank(), dist::Error);
      plain.wait();
      EXPECT_THROW((void)dist::Work().source_rank(), dist::Error);
    } else {
      if (r == 1) dist::sim_compute(1e-3);
      dist::send(std::span<const std::int64_t>(x), 0, 3);
      if (r == 1) dist::send(std::span<const std::int64_t>(x), 0, 4);
    }
  });
}

TEST(AnySource, PollingIsCompletedEndsOnceTheOthersWait) {
  run_ranks(any_opts(3), [&] {
    const int r = dist::rank();
    std::vector<float> x(4, static_cast<float>(r));
    if (r == 0) {
      dist::Work w = dist::irecv_any(std::span<float>(x));
      while (!w.is_completed()) std::this_thread::yield();
      EXPECT_EQ(w.source_rank(), 1);
      EXPECT_EQ(dist::recv_any(std::span<float>(x)), 2);
    } else {
      sleep_ms(20 * r);
      dist::send(std::span<const float>(x), 0);
    }
  });
}

/// A small asynchronous server: rank 0 answers whichever worker's request arrives first with a
/// counter; workers compute for seeded, different simulated times. Returns the order in which
/// the server served the workers and every rank's final clock.
std::pair<std::vector<int>, std::vector<double>> serve(unsigned wall_seed) {
  const int p = 5, rounds = 6;
  std::vector<int> served;
  std::vector<double> clocks(p);
  std::mutex mu;
  run_ranks(any_opts(p), [&] {
    const int r = dist::rank();
    std::mt19937 wall(wall_seed * 31u + static_cast<unsigned>(r));
    std::vector<std::int32_t> msg(2);
    if (r == 0) {
      std::int32_t version = 0;
      for (int k = 0; k < (p - 1) * rounds; ++k) {
        const int src = dist::recv_any(std::span<std::int32_t>(msg), 1);
        served.push_back(src);
        msg = {++version, src};
        dist::send(std::span<const std::int32_t>(msg), src, 2);
      }
    } else {
      for (int k = 0; k < rounds; ++k) {
        sleep_ms(static_cast<int>(wall() % 4));
        dist::sim_compute(1e-4 * r + 1e-5 * ((k * 7 + r * 3) % 5));
        msg = {k, r};
        dist::send(std::span<const std::int32_t>(msg), 0, 1);
        dist::recv(std::span<std::int32_t>(msg), 0, 2);
      }
    }
    std::lock_guard<std::mutex> g(mu);
    clocks[static_cast<std::size_t>(r)] = dist::sim_time();
  });
  return {served, clocks};
}

TEST(AnySource, TheSameProgramGivesTheSameOrderAndTimesOnEveryRun) {
  const auto first = serve(1);
  ASSERT_EQ(first.first.size(), 24u);
  EXPECT_EQ(first.first.front(), 1) << "rank 1 computes least: its request arrives first";
  for (unsigned seed = 2; seed <= 6; ++seed) {
    const auto again = serve(seed);
    EXPECT_EQ(again.first, first.first) << "the served order changed with the wall-clock timing";
    EXPECT_EQ(again.second, first.second) << "the simulated clocks changed";
  }
}

TEST(AnySource, NoSenderIsADeadlockNamingTheAnySourceReceive) {
  const std::string msg = expect_error<dist::DeadlockError>(any_opts(2), [] {
    std::vector<float> x(3);
    if (dist::rank() == 0) {
      (void)dist::recv_any(std::span<float>(x), 9);
    } else {
      dist::send(std::span<const float>(x), 0, 8);
    }
  });
  EXPECT_TRUE(contains(msg, "recv_any(tag=9, 3 floats)")) << msg;
  EXPECT_TRUE(contains(msg, "send(dst=0, tag=8")) << msg;
}

TEST(AnySource, SizeMismatchIsReportedWithBothRanks) {
  const std::string msg = expect_error<dist::MismatchError>(any_opts(2), [] {
    if (dist::rank() == 0) {
      std::vector<float> x(4);
      (void)dist::recv_any(std::span<float>(x));
    } else {
      std::vector<float> x(3);
      dist::send(std::span<const float>(x), 0);
    }
  });
  EXPECT_TRUE(contains(msg, "rank 1 sends 3 floats")) << msg;
  EXPECT_TRUE(contains(msg, "receives 4 floats")) << msg;
}

TEST(AnySource, AnySourceAndNamedReceiveOnTheSameTagAreRefused) {
  const std::string msg = expect_error<dist::Error>(any_opts(2), [] {
    std::vector<float> x(1), y(1);
    if (dist::rank() == 0) {
      dist::Work w = dist::irecv_any(std::span<float>(x), 1);
      dist::recv(std::span<float>(y), 1, 1);
      w.wait();
    } else {
      dist::send(std::span<const float>(x), 0, 1);
      dist::send(std::span<const float>(x), 0, 1);
    }
  });
  EXPECT_TRUE(contains(msg, "same tag")) << msg;
}

TEST(AnySource, TraceNamesTheSource) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("threads_backend_any_" + std::to_string(::getpid()) + ".json");
  auto o = any_opts(3);
  o.trace_path = path.string();
  run_ranks(o, [] {
    std::vector<float> x(2);
    if (dist::rank() == 0) {
      (void)dist::recv_any(std::span<float>(x));
      (void)dist::recv_any(std::span<float>(x));
    } else {
      if (dist::rank() == 1) dist::sim_compute(1e-3);
      dist::send(std::span<const float>(x), 0);
    }
  });
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::filesystem::remove(path);
  std::vector<int> sources;
  for (const auto& ev : doc["traceEvents"]) {
    if (ev["ph"] == "X" && ev["name"] == "recv_any")
      sources.push_back(ev["args"]["src"].get<int>());
  }
  EXPECT_EQ(sources, (std::vector<int>{2, 1}));
}

TEST(AnySource, NegativeTagIsAnError) {
  const std::string msg = expect_error<dist::Error>(any_opts(1), [] {
    std::vector<float> x(1);
    (void)dist::recv_any(std::span<float>(x), -1);
  });
  EXPECT_TRUE(contains(msg, "tags must be >= 0")) << msg;
}

}  // namespace
