// The simulated clock against hand-computed alpha-beta times, link serialisation, the two-level
// network, textbook algorithms written with send/recv against their closed forms (Thakur,
// Rabenseifner & Gropp 2005), the built-ins' documented costs, determinism, and the trace file.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cstring>
#include <map>
#include <set>
#include <unistd.h>

#include "distlab_testing.hpp"

using namespace distlab::testing;

namespace {

constexpr double kAlpha = 1e-6;   // s per message
constexpr double kBw = 1e9;       // bytes/s: 1000 bytes take 1e-6 s
constexpr double kGammaBw = 2e9;  // reduction bytes/s

dist::LaunchOptions clock_opts(int p, double reduce_Bps = 0) {
  auto o = threads_options(p);
  o.network.latency_s = kAlpha;
  o.network.bandwidth_Bps = kBw;
  o.network.reduce_Bps = reduce_Bps;
  return o;
}

// Runs body on p ranks and returns every rank's sim_time() at the end.
std::vector<double> final_times(const dist::LaunchOptions& o, const std::function<void()>& body) {
  std::vector<double> t(static_cast<std::size_t>(o.world_size), -1);
  run_ranks(o, [&] {
    body();
    t[static_cast<std::size_t>(dist::rank())] = dist::sim_time();
  });
  return t;
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

#define EXPECT_TIME(got, want) \
  EXPECT_NEAR((got), (want), 1e-12 * std::max(1.0, std::abs(want) * 1e6))

TEST(Clock, OneMessage) {
  const auto t = final_times(clock_opts(2), [] {
    std::vector<float> x(250);  // 1000 bytes: alpha + 1000 beta = 2 us
    if (dist::rank() == 0) {
      dist::send(std::span<const float>(x), 1);
    } else {
      dist::recv(std::span<float>(x), 0);
    }
  });
  EXPECT_TIME(t[0], 2e-6);
  EXPECT_TIME(t[1], 2e-6);
}

TEST(Clock, RecvCompletesAtMaxOfOwnClockAndArrival) {
  const auto t = final_times(clock_opts(2), [] {
    std::vector<float> x(250);
    if (dist::rank() == 0) {
      dist::sim_compute(3e-6);
      dist::send(std::span<const float>(x), 1);  // starts at 3 us, arrives at 5 us
    } else {
      dist::sim_compute(10e-6);
      dist::recv(std::span<float>(x), 0);  // already arrived: stays at 10 us
      dist::recv(std::span<float>(x), 0);  // sent at 5 us (after the first), arrives at 7 us
    }
    if (dist::rank() == 0) dist::send(std::span<const float>(x), 1);
  });
  EXPECT_TIME(t[0], 7e-6);
  EXPECT_TIME(t[1], 10e-6);
}

TEST(Clock, OutgoingLinkSerialisesTransfers) {
  const auto t = final_times(clock_opts(3), [] {
    std::vector<float> a(250), b(250);
    if (dist::rank() == 0) {
      dist::Work w1 = dist::isend(std::span<const float>(a), 1);
      dist::Work w2 = dist::isend(std::span<const float>(b), 2);  // waits for the out-link: 2..4 us
      w1.wait();
      w2.wait();
    } else {
      dist::recv(std::span<float>(a), 0);
    }
  });
  EXPECT_TIME(t[0], 4e-6);
  EXPECT_TIME(t[1], 2e-6);
  EXPECT_TIME(t[2], 4e-6);
}

TEST(Clock, IncomingLinkSerialisesInTheOrderRecvsComplete) {
  const auto t = final_times(clock_opts(3), [] {
    std::vector<float> a(250), b(250);
    if (dist::rank() == 0) {
      dist::Work from1 = dist::irecv(std::span<float>(a), 1);
      dist::Work from2 = dist::irecv(std::span<float>(b), 2);
      from2.wait();  // first in: 0..2 us
      from1.wait();  // second: 2..4 us
    } else {
      dist::send(std::span<const float>(a), 0);
    }
  });
  EXPECT_TIME(t[0], 4e-6);
  EXPECT_TIME(t[1], 2e-6);
  EXPECT_TIME(t[2], 2e-6);
}

TEST(Clock, TwoLevelNetwork) {
  auto o = threads_options(4);
  o.network =
      dist::NetworkModel::two_level(2);  // inside: 1 us + b/100e9; between: 20 us + b/1.25e9
  const auto t = final_times(o, [] {
    std::vector<float> x(2500);  // 10000 bytes
    if (dist::rank() == 0) {
      dist::send(std::span<const float>(x), 1);  // 1 us + 0.1 us
      dist::send(std::span<const float>(x), 2);  // 20 us + 8 us, after the first
    } else if (dist::rank() != 3) {
      dist::recv(std::span<float>(x), 0);
    }
  });
  EXPECT_TIME(t[0], 1.1e-6 + 28e-6);
  EXPECT_TIME(t[1], 1.1e-6);
  EXPECT_TIME(t[2], 1.1e-6 + 28e-6);
  EXPECT_TIME(t[3], 0.0);
}

TEST(Clock, SimComputeSimReduceAndBarrier) {
  const int p = 5;
  const auto t = final_times(clock_opts(p, kGammaBw), [] {
    dist::sim_compute(dist::rank() * 1e-3, "work");
    dist::sim_reduce(2000);  // 1 us at 2 GB/s
    dist::barrier();
  });
  for (int r = 0; r < p; ++r) EXPECT_TIME(t[static_cast<std::size_t>(r)], 4e-3 + 1e-6);
}

TEST(Clock, SimComputeRejectsNegativeTime) {
  expect_error<dist::Error>(threads_options(1), [] { dist::sim_compute(-1.0); });
}

// ---- textbook algorithms written with send/recv -------------------------------------------------------

TEST(ClosedForms, NaiveBroadcast) {
  for (int p : {2, 3, 5, 8}) {
    const std::size_t n = 1000;  // floats: 4000 bytes
    const auto t = final_times(clock_opts(p), [&] {
      std::vector<float> x(n);
      if (dist::rank() == 0) {
        for (int q = 1; q < dist::world_size(); ++q) dist::send(std::span<const float>(x), q);
      } else {
        dist::recv(std::span<float>(x), 0);
      }
    });
    EXPECT_TIME(max_of(t), (p - 1) * (kAlpha + 4000 / kBw)) << "p=" << p;
  }
}

TEST(ClosedForms, BinomialBroadcastWithSendRecv) {
  for (int p : {2, 3, 4, 5, 8, 13}) {
    const auto t = final_times(clock_opts(p), [&] {
      std::vector<float> x(1000);
      const int r = dist::rank();
      int mask = 1;
      while (mask < p && !(r & mask)) mask <<= 1;  // the lowest set bit of r (MPICH order)
      if (r != 0) dist::recv(std::span<float>(x), r - mask);
      for (mask >>= 1; mask > 0; mask >>= 1) {
        if (r + mask < p) dist::send(std::span<const float>(x), r + mask);
      }
    });
    EXPECT_TIME(max_of(t), std::ceil(std::log2(p)) * (kAlpha + 4000 / kBw)) << "p=" << p;
  }
}

// A student's ring all-reduce: reduce-scatter then all-gather, isend right / recv left / wait.
void ring_all_reduce(std::span<float> buf) {
  const int p = dist::world_size(), r = dist::rank();
  const std::size_t chunk = buf.size() / static_cast<std::size_t>(p);
  std::vector<float> tmp(chunk);
  auto at = [&](int c) {
    return buf.subspan(static_cast<std::size_t>((c % p + p) % p) * chunk, chunk);
  };
  for (int s = 0; s < p - 1; ++s) {
    dist::Work w = dist::isend(std::span<const float>(at(r - s - 1)), (r + 1) % p);
    dist::recv(std::span<float>(tmp), (r + p - 1) % p);
    dist::reduce_into(at(r - s - 2), std::span<const float>(tmp), dist::ReduceOp::Sum);
    w.wait();
  }
  for (int s = 0; s < p - 1; ++s) {
    dist::Work w = dist::isend(std::span<const float>(at(r - s)), (r + 1) % p);
    dist::recv(at(r - s - 1), (r + p - 1) % p);
    w.wait();
  }
}

TEST(ClosedForms, RingAllReduceWithSendRecvEqualsTheBuiltIn) {
  for (int p : {2, 3, 4, 8}) {
    const std::size_t n = 240 * static_cast<std::size_t>(p);  // floats, divisible by p
    const double bytes = 4.0 * static_cast<double>(n);
    const double want = 2 * (p - 1) * (kAlpha + bytes / p / kBw) + (p - 1) * (bytes / p / kGammaBw);
    std::vector<double> student(static_cast<std::size_t>(p)), builtin(static_cast<std::size_t>(p));
    std::vector<dist::Stats> s_student(static_cast<std::size_t>(p)),
        s_builtin(static_cast<std::size_t>(p));
    RankLog failures;
    run_ranks(clock_opts(p, kGammaBw), [&] {
      const auto r = static_cast<std::size_t>(dist::rank());
      std::vector<float> v(n, static_cast<float>(r + 1));
      ring_all_reduce(v);
      if (v[n - 1] != static_cast<float>(p * (p + 1) / 2))
        failures.fail(dist::rank(), "student ring wrong");
      student[r] = dist::sim_time();
      s_student[r] = dist::stats();
      dist::barrier();
      dist::reset_stats();
      const double t0 = dist::sim_time();
      dist::all_reduce(std::span<float>(v));
      builtin[r] = dist::sim_time() - t0;
      s_builtin[r] = dist::stats();
    });
    failures.check();
    for (int r = 0; r < p; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      EXPECT_TIME(student[ur], want) << "p=" << p << " rank " << r;
      EXPECT_TIME(builtin[ur], want) << "p=" << p << " rank " << r;
      EXPECT_EQ(s_student[ur].bytes_sent_to, s_builtin[ur].bytes_sent_to) << "p=" << p;
      EXPECT_EQ(s_student[ur].messages_received_from, s_builtin[ur].messages_received_from)
          << "p=" << p;
    }
  }
}

// ---- built-ins against their documented costs --------------------------------------------------------

struct BuiltinCase {
  const char* name;
  std::function<void(std::size_t n)> call;  // n = elements (per rank for the gather family)
};

TEST(ClosedForms, BuiltinCollectivesChargeTheirDocumentedCosts) {
  const std::size_t n = 400;  // floats = 1600 bytes
  const double nb = 1600;
  for (int p : {2, 4, 8}) {
    const double lg = std::log2(p);
    auto time_of = [&](const std::function<void()>& body) {
      return final_times(clock_opts(p, kGammaBw), [&] {
        dist::sim_compute(dist::rank() *
                          1e-6);  // start times differ: the collective starts at the max
        body();
      });
    };
    const double start = (p - 1) * 1e-6;
    auto t = time_of([&] {
      std::vector<float> x(n);
      dist::broadcast(std::span<float>(x), 1);
    });
    EXPECT_TIME(max_of(t), start + lg * (kAlpha + nb / kBw)) << "broadcast p=" << p;
    t = time_of([&] {
      std::vector<float> x(n);
      dist::reduce(std::span<float>(x), 0);
    });
    EXPECT_TIME(t[0], start + lg * (kAlpha + nb / kBw + nb / kGammaBw)) << "reduce p=" << p;
    t = time_of([&] {
      std::vector<float> x(n * static_cast<std::size_t>(p));
      dist::all_reduce(std::span<float>(x));
    });
    const double total = nb * p;
    for (double ti : t)
      EXPECT_TIME(ti,
                  start + 2 * (p - 1) * (kAlpha + total / p / kBw) + (p - 1) * total / p / kGammaBw)
          << "all_reduce p=" << p;
    t = time_of([&] {
      std::vector<float> in(n), out(n * static_cast<std::size_t>(p));
      dist::gather(std::span<const float>(in), std::span<float>(out), 0);
    });
    EXPECT_TIME(t[0], start + lg * kAlpha + (p - 1) * nb / kBw) << "gather p=" << p;
    t = time_of([&] {
      std::vector<float> in(n * static_cast<std::size_t>(p)), out(n);
      dist::scatter(std::span<const float>(in), std::span<float>(out), 0);
    });
    EXPECT_TIME(max_of(t), start + lg * kAlpha + (p - 1) * nb / kBw) << "scatter p=" << p;
    t = time_of([&] {
      std::vector<float> in(n), out(n * static_cast<std::size_t>(p));
      dist::all_gather(std::span<const float>(in), std::span<float>(out));
    });
    for (double ti : t)
      EXPECT_TIME(ti, start + (p - 1) * (kAlpha + nb / kBw)) << "all_gather p=" << p;
    t = time_of([&] {
      std::vector<float> in(n * static_cast<std::size_t>(p)), out(n);
      dist::reduce_scatter(std::span<const float>(in), std::span<float>(out));
    });
    for (double ti : t)
      EXPECT_TIME(ti, start + (p - 1) * (kAlpha + nb / kBw + nb / kGammaBw))
          << "reduce_scatter p=" << p;
  }
}

TEST(ClosedForms, BuiltinOnTwoLevelNetworkUsesTheSlowLinks) {
  // Ring all-reduce on 4 ranks, 2 per node: every step has a message crossing nodes (1 -> 2 and
  // 3 -> 0), so each step costs the inter-node time.
  auto o = threads_options(4);
  o.network = dist::NetworkModel::two_level(2);
  const std::size_t n = 4000;  // floats: chunks of 1000 floats = 4000 bytes
  const auto t = final_times(o, [&] {
    std::vector<float> x(n);
    dist::all_reduce(std::span<float>(x));
  });
  const double step = 20e-6 + 4000 / 1.25e9;
  for (double ti : t) EXPECT_TIME(ti, 6 * step);
}

// ---- determinism and trace -------------------------------------------------------------------------------

std::vector<double> irregular_program_times() {
  auto o = clock_opts(6, kGammaBw);
  o.network = dist::NetworkModel::two_level(3);
  return final_times(o, [] {
    const int r = dist::rank(), p = dist::world_size();
    std::vector<std::vector<float>> out, in;
    std::vector<dist::Work> works;
    for (int k = 1; k < p; ++k) {
      out.emplace_back(static_cast<std::size_t>(100 * ((r + k) % 4 + 1)), 1.f);
      in.emplace_back(
          static_cast<std::size_t>(100 * (((r - k + p) % p + k) % 4 + 1)));  // what (r-k) sends
    }
    for (int k = 1; k < p; ++k)
      works.push_back(dist::isend(std::span<const float>(out[static_cast<std::size_t>(k - 1)]),
                                  (r + k) % p, k));
    for (int k = p - 1; k >= 1; --k)
      dist::recv(std::span<float>(in[static_cast<std::size_t>(k - 1)]), (r - k + p) % p, k);
    dist::wait_all(works);
    dist::sim_compute(1e-6 * r);
    std::vector<float> v(1234, 1.f);
    dist::all_reduce(std::span<float>(v));
    dist::Work w = dist::all_reduce_async(std::span<float>(v));
    dist::sim_compute(3e-6);
    w.wait();
    dist::broadcast(std::span<float>(v), 2);
  });
}

TEST(Determinism, BitIdenticalTimesAcrossRuns) {
  const auto first = irregular_program_times();
  for (int run_index = 0; run_index < 3; ++run_index) {
    const auto again = irregular_program_times();
    for (std::size_t r = 0; r < first.size(); ++r) {
      EXPECT_EQ(std::memcmp(&first[r], &again[r], sizeof(double)), 0)
          << "rank " << r << ": " << first[r] << " vs " << again[r];
    }
  }
}

TEST(Trace, ValidChromeTraceWithOneTrackPerRank) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("threads_backend_trace_" + std::to_string(::getpid()) + ".json");
  auto o = clock_opts(3);
  o.trace_path = path.string();
  run_ranks(o, [] {
    std::vector<float> x(10);
    if (dist::rank() == 0) dist::send(std::span<const float>(x), 1);
    if (dist::rank() == 1) dist::recv(std::span<float>(x), 0);
    dist::sim_compute(1e-6, "forward");
    dist::all_reduce(std::span<float>(x));
    dist::barrier();
  });
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "no trace written at " << path;
  nlohmann::json doc;
  ASSERT_NO_THROW(doc = nlohmann::json::parse(f));
  std::filesystem::remove(path);
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::set<int> tracks;
  std::set<std::string> names;
  std::map<int, int> spans_per_rank;
  for (const auto& ev : doc["traceEvents"]) {
    if (ev["ph"] == "M" && ev["name"] == "thread_name") tracks.insert(ev["tid"].get<int>());
    if (ev["ph"] == "X") {
      names.insert(
          ev["name"].get<std::string>().substr(0, ev["name"].get<std::string>().find('(')));
      ++spans_per_rank[ev["tid"].get<int>()];
      EXPECT_GE(ev["dur"].get<double>(), 0.0);
      EXPECT_GE(ev["ts"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(tracks, (std::set<int>{0, 1, 2}));
  for (const char* n : {"send", "recv", "forward", "all_reduce", "barrier"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(spans_per_rank[2], 3);  // forward, all_reduce, barrier
}

TEST(Trace, WrittenAlsoWhenLaunchFails) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("threads_backend_trace_fail_" + std::to_string(::getpid()) + ".json");
  auto o = clock_opts(2);
  o.trace_path = path.string();
  expect_error<dist::DeadlockError>(o, [] {
    std::vector<float> x(1);
    dist::sim_compute(1e-6);
    dist::recv(std::span<float>(x), 1 - dist::rank());
  });
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  nlohmann::json doc;
  EXPECT_NO_THROW(doc = nlohmann::json::parse(f));
  EXPECT_TRUE(doc.contains("traceEvents"));
  std::filesystem::remove(path);
}

}  // namespace
