// Hidden tests of 10_streams: other world sizes, counts, reduce ops, polling intervals, bucket
// caps (one bucket per layer, one bucket for all) and networks, against the same closed forms.
#include <gtest/gtest.h>

#include "streams_harness.hpp"

namespace {

using namespace streamtest;
using distlab::testing::contains;
using distlab::testing::elements_near;
using distlab::testing::expect_error;
using distlab::testing::run_ranks;

TEST(HiddenWork, ValuesOtherWorldSizesCountsAndOps) {
  for (int p : {5, 8}) {
    for (std::size_t n : {1u, 7u, 1001u}) {
      for (dist::ReduceOp op : {dist::ReduceOp::Max, dist::ReduceOp::Min, dist::ReduceOp::Avg}) {
        run_ranks(threads_options(p), [&] {
          Stream compute("compute"), comm("comm");
          DeviceBuffer<float> buf("buf", n);
          std::vector<float> want(n), got(n);
          for (std::size_t i = 0; i < n; ++i)
            want[i] = static_cast<float>((dist::rank() * 7 + static_cast<int>(i)) % 11) - 3.0f;
          dd::memcpy_async(buf, std::span<const float>(want), comm);
          AllReduceWork work(buf, comm, op);
          work.wait(compute);
          dd::memcpy_async(std::span<float>(got), buf, compute);
          compute.synchronize();
          dist::all_reduce(std::span<float>(want), op);
          EXPECT_TRUE(elements_near(got, want)) << "p=" << p << " n=" << n;
        });
      }
    }
  }
}

TEST(HiddenWork, CompletesWithTheCollectiveNotBefore) {
  for (int p : {2, 5}) {
    run_ranks(threads_options(p), [&] {
      Stream compute("compute"), comm("comm");
      DeviceBuffer<float> buf("buf", 1u << 16);
      const double t = ring_seconds(static_cast<double>(buf.bytes()), p, dist::NetworkModel{});
      AllReduceWork work(buf, comm);
      EXPECT_FALSE(work.is_completed()) << "at time 0 the all-reduce (" << t << " s) runs";
      EXPECT_EQ(dist::sim_time(), 0.0);
      Event origin("origin"), after("after");
      origin.record(compute);
      work.wait(compute);
      after.record(compute);
      EXPECT_EQ(dist::sim_time(), 0.0) << "wait() blocked the host";
      work.synchronize();
      EXPECT_TRUE(within_1pct(dist::sim_time(), t)) << "p=" << p;
      EXPECT_TRUE(within_1pct(dd::elapsed_seconds(origin, after), t)) << "p=" << p;
    });
  }
}

void hidden_waiting(Strategy s, int p, const WaitingSetup& w, const dist::LaunchOptions& o) {
  const Expected e = expected_waiting(s, w, p, o.network);
  const auto results = run_waiting(s, w, o);
  for (int r = 0; r < p; ++r) {
    const auto& got = results[static_cast<std::size_t>(r)];
    EXPECT_TRUE(within_1pct(got.host_lost_s, e.lost)) << to_string(s) << " lost, p=" << p;
    EXPECT_TRUE(within_1pct(got.step_s, e.step)) << to_string(s) << " step, p=" << p;
  }
}

TEST(HiddenWaiting, OtherIntervalsNetworksAndWorldSizes) {
  WaitingSetup w;
  w.floats = 3u << 14;
  w.backward_s = 0.4e-3;
  w.host_work_s = 0.3e-3;
  w.optimizer_s = 0.1e-3;
  for (int p : {3, 5}) {
    auto o = threads_options(p);
    o.network.reduce_Bps = 20e9;
    o.network.latency_s = 20e-6;
    for (double q : {7e-6, 333e-6, 5e-3}) {
      w.poll_interval_s = q;
      for (Strategy s : {Strategy::Synchronize, Strategy::Poll, Strategy::StreamOrder})
        hidden_waiting(s, p, w, o);
    }
  }
}

TEST(HiddenWaiting, PollOnTheExactEnd) {
  // p = 1: the all-reduce is free, the wait ends exactly at the backward kernel's end, a whole
  // number of intervals (binary fractions: no rounding): the poll at that instant sees it complete.
  WaitingSetup w;
  w.backward_s = 1.0 / 1024;
  w.poll_interval_s = 1.0 / 4096;
  hidden_waiting(Strategy::Poll, 1, w, threads_options(1));
}

TEST(HiddenOverlap, BucketCapsValuesAndTimes) {
  StepConfig c = small_step();
  for (std::size_t cap : {std::size_t{0}, std::size_t{1} << 30, std::size_t{20000}}) {
    c.bucket_cap_bytes = cap;
    for (int p : {5, 8}) {
      const auto o = threads_options(p);
      const auto want = synchronous_params(c, p, 2);
      for (bool overlap : {true, false}) {
        const auto got = run_steps(c, overlap, 2, o);
        EXPECT_TRUE(elements_near(got[0].params, want)) << "cap " << cap << " p=" << p;
        EXPECT_TRUE(elements_near(got[static_cast<std::size_t>(p - 1)].params, want));
        EXPECT_TRUE(within_1pct(got[0].step_s, expected_step(c, p, o.network, overlap)))
            << "cap " << cap << " p=" << p << (overlap ? " overlap" : " no overlap");
        EXPECT_EQ(got[0].host_after_enqueue, 0.0);
      }
    }
  }
}

TEST(HiddenOverlap, SlowAndFastNetworks) {
  StepConfig c = small_step();
  c.layer_floats = {2048, 2048, 512, 512, 4096, 1024, 1024};
  c.bucket_cap_bytes = 10000;
  for (double bw : {1e8, 1e12}) {
    auto o = threads_options(4);
    o.network.bandwidth_Bps = bw;
    for (bool overlap : {true, false}) {
      const auto got = run_steps(c, overlap, 1, o);
      EXPECT_TRUE(within_1pct(got[1].step_s, expected_step(c, 4, o.network, overlap)))
          << "bandwidth " << bw << (overlap ? " overlap" : " no overlap");
    }
  }
}

TEST(HiddenRace, UnorderedReportedOnEveryWorldSizeFixedPasses) {
  StepConfig c = small_step();
  c.bucket_cap_bytes = 0;
  for (int p : {1, 3}) {
    const std::string msg = expect_error<dd::StreamRaceError>(threads_options(p), [&] {
      StepResult r;
      step_body(c, true, 1, r, true);
    });
    EXPECT_TRUE(contains(msg, "'grads bucket 0'")) << msg;
    EXPECT_TRUE(contains(msg, "sgd bucket 0")) << msg;
    const auto got = run_steps(c, true, 3, threads_options(p));
    EXPECT_TRUE(elements_near(got[0].params, synchronous_params(c, p, 3))) << "p=" << p;
  }
}

}  // namespace
