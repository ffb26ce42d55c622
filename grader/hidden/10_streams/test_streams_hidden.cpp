// Hidden tests of 10_streams: other world sizes, counts, reduce ops, polling intervals, bucket
// caps (one bucket per layer, one bucket for all) and networks, against the same closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "distlab_trace.hpp"
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

TEST(HiddenWaiting, BusyComputeStreamDoesNotLengthenTheHostsWait) {
  // compute still has an 8 ms kernel queued past the all-reduce's end. The host waits for the
  // all-reduce alone: Synchronize ends at its end (not when compute drains), Poll at the first
  // poll at or after it, StreamOrder at once; a copy enqueued on compute afterwards reads the
  // all-reduced values (the race detector checks that it is ordered after the all-reduce).
  const double busy = 8e-3, kernel = 1e-3, q = 1e-4;
  for (int p : {2, 4}) {
    for (Strategy s : {Strategy::Synchronize, Strategy::Poll, Strategy::StreamOrder}) {
      run_ranks(threads_options(p), [&] {
        Stream compute("compute"), comm("comm");
        DeviceBuffer<float> buf("buf", 4096), other("other", 64);
        Event origin("origin"), ready("ready"), queued("queued"), consumed("consumed");
        origin.record(compute);
        dd::launch(compute, {"produce", kernel, {dd::writes(buf)}}, [&] {
          for (float& x : buf.span()) x = static_cast<float>(dist::rank() + 1);
        });
        ready.record(compute);
        comm.wait_event(ready);
        const double end =
            kernel + ring_seconds(static_cast<double>(buf.bytes()), p, dist::NetworkModel{});
        ASSERT_LT(end * 2, kernel + busy) << "the test needs compute busy well past the end";
        AllReduceWork work(buf, comm);
        dd::launch(compute, {"busy", busy, {dd::writes(other)}}, [] {});
        queued.record(compute);
        const double cost = wait_for(work, s, compute, q);
        const double want = s == Strategy::Synchronize ? end
                            : s == Strategy::Poll      ? std::ceil(end / q * (1 - 1e-12)) * q
                                                       : 0.0;
        EXPECT_TRUE(within_1pct(cost, want))
            << to_string(s) << ", p=" << p << ": the host waits for the all-reduce (ends at "
            << end * 1e3 << " ms) and no longer; compute's queued kernel ends at "
            << (kernel + busy) * 1e3 << " ms";
        EXPECT_TRUE(within_1pct(dist::sim_time(), want)) << to_string(s) << ", p=" << p;
        EXPECT_FALSE(queued.query())
            << to_string(s) << ", p=" << p << ": compute's queued kernel is still running";
        std::vector<float> got(buf.size());
        dd::memcpy_async(std::span<float>(got), buf, compute);
        consumed.record(compute);
        consumed.synchronize();
        EXPECT_GE(dd::elapsed_seconds(origin, consumed), kernel + busy)
            << to_string(s) << ", p=" << p << ": the copy is queued behind compute's kernel";
        EXPECT_TRUE(elements_near(got, std::vector<float>(got.size(), waiting_mean(p))))
            << to_string(s) << ", p=" << p;
      });
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

TEST(HiddenWaiting, PollSpansAreNamedPollInTheTrace) {
  // streams.hpp: Poll charges each interval with dist::sim_compute, span name "poll": the host
  // track of the Chrome trace shows the busy wait as ceil(T / q) spans named "poll", each q long,
  // back to back from the start until the all-reduce (T) is complete.
  const int p = 2;
  const std::size_t floats = 3u << 14;
  dist::LaunchOptions o = threads_options(p);
  o.trace_path = ::testing::TempDir() + "distlab_10_poll_spans.json";
  const double t = ring_seconds(static_cast<double>(floats * sizeof(float)), p, o.network);
  const double q = t / 6.3;  // not a whole number of intervals
  const auto polls = static_cast<std::size_t>(std::ceil(t / q * (1 - 1e-12)));
  run_ranks(o, [&] {
    Stream compute("compute"), comm("comm");
    DeviceBuffer<float> buf("grad", floats);
    AllReduceWork work(buf, comm);
    wait_for(work, Strategy::Poll, compute, q);
  });
  std::vector<distlab::testing::TraceSpan> poll;
  for (const auto& sp : distlab::testing::trace_spans(o.trace_path, "rank 0"))
    if (sp.name == "poll") poll.push_back(sp);
  ASSERT_EQ(poll.size(), polls) << "the host track of rank 0 must show the busy wait as one span "
                                   "named \"poll\" per interval: "
                                << polls << " intervals of " << q << " s for an all-reduce of " << t
                                << " s";
  for (std::size_t k = 0; k < poll.size(); ++k) {
    EXPECT_TRUE(within_1pct(poll[k].t0, static_cast<double>(k) * q)) << "poll span " << k;
    EXPECT_TRUE(within_1pct(poll[k].t1 - poll[k].t0, q)) << "poll span " << k << " lasts q";
  }
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

TEST(HiddenOverlap, BusyComputeStreamShiftsTheWholeStep) {
  // compute is busy for 0.3 ms with earlier work when the step is enqueued: backward starts
  // after it, and so does every all-reduce (each waits for its gradients, which come later);
  // the step is the formula's, 0.3 ms later, with and without overlap.
  const StepConfig c = small_step();
  const double busy = 0.3e-3;
  for (int p : {2, 4}) {
    const auto o = threads_options(p);
    for (bool overlap : {true, false}) {
      const auto got = run_steps(c, overlap, 1, o, busy);
      EXPECT_TRUE(within_1pct(got[0].step_s, busy + expected_step(c, p, o.network, overlap)))
          << "p=" << p << (overlap ? " overlap" : " no overlap");
      EXPECT_EQ(got[0].host_after_enqueue, 0.0);
      EXPECT_TRUE(elements_near(got[0].params, synchronous_params(c, p, 1))) << "p=" << p;
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

// ---- Task 4 -------------------------------------------------------------------------------------

Program program(int streams, int events, int buffers, std::vector<Op> ops) {
  Program p;
  p.streams = streams;
  p.events = events;
  p.buffers = buffers;
  p.ops = std::move(ops);
  return p;
}

/// The student's race must be (op, earlier, buffer), and agree with the device's detector.
void expect_race(const Program& p, int op, int earlier, int buffer) {
  const ProgramAnalysis got = analyze(p);
  EXPECT_EQ(got.race.op, op) << listing(p);
  EXPECT_EQ(got.race.earlier, earlier) << listing(p);
  EXPECT_EQ(got.race.buffer, buffer) << listing(p);
  EXPECT_EQ(got.time.size(), static_cast<std::size_t>(op)) << "stop at the race\n" << listing(p);
  const std::string diff = analysis_mismatch(p, got, device_replay(p), true, true);
  EXPECT_TRUE(diff.empty()) << diff;
}

TEST(HiddenAnalyze, TieBreaksOfSeveralRaces) {
  // reads are checked in the order listed: b1 before b0
  expect_race(program(2, 1, 2,
                      {kernel("w0", 1, 1, {}, {0}), kernel("w1", 1, 1, {}, {1}),
                       kernel("r", 0, 1, {1, 0}, {})}),
              2, 1, 1);
  // writes are checked in the order listed too: b1 before b0
  expect_race(program(2, 1, 2,
                      {kernel("w0", 1, 1, {}, {0}), kernel("w1", 1, 1, {}, {1}),
                       kernel("ww", 0, 1, {}, {1, 0})}),
              2, 1, 1);
  // reads before writes
  expect_race(program(2, 1, 2,
                      {kernel("w0", 1, 1, {}, {0}), kernel("w1", 1, 1, {}, {1}),
                       kernel("rw", 0, 1, {1}, {0})}),
              2, 1, 1);
  // for a write: the unordered last write before an unordered read since it
  expect_race(program(3, 1, 1,
                      {kernel("w", 1, 1, {}, {0}), record(0, 1), wait_on(2, 0),
                       kernel("r", 2, 1, {0}, {}), kernel("w2", 0, 1, {}, {0})}),
              4, 0, 0);
  // among reads: the lowest stream index first, its latest read
  expect_race(program(4, 1, 1,
                      {kernel("r3", 3, 1, {0}, {}), kernel("r2", 2, 1, {0}, {}),
                       kernel("r2b", 2, 1, {0}, {}), kernel("w", 0, 1, {}, {0})}),
              3, 2, 0);
  // the last write, not an older one on a lower stream: s0 writes, s1 (ordered after it) writes
  // again, and an unordered kernel on s2 writes, then (variant) reads: it races with s1's write
  for (const bool reads : {false, true}) {
    const std::vector<int> none, b0 = {0};
    expect_race(program(3, 1, 1,
                        {kernel("w0", 0, 1, {}, {0}), record(0, 0), wait_on(1, 0),
                         kernel("w1", 1, 1, {}, {0}),
                         kernel("x", 2, 1, reads ? b0 : none, reads ? none : b0)}),
                4, 3, 0);
  }
}

TEST(HiddenAnalyze, RecordAgainAndChainsOfEvents) {
  // recording again replaces what the event stands for: e0 now stands for an idle compute
  expect_race(program(3, 1, 1,
                      {kernel("produce", 1, 2, {}, {0}), record(0, 1), record(0, 0), wait_on(2, 0),
                       kernel("consume", 2, 1, {0}, {})}),
              4, 0, 0);
  // order passes along a chain: s1 -> e0 -> s2 -> e1 -> s0 (transitive), times add up
  const Program chain = program(3, 2, 1,
                                {kernel("produce", 1, 2, {}, {0}), record(0, 1), wait_on(2, 0),
                                 kernel("mid", 2, 1.5, {}, {}), record(1, 2), wait_on(0, 1),
                                 kernel("consume", 0, 1, {0}, {}), host_op(OpKind::SyncStream, 0)});
  const ProgramAnalysis got = analyze(chain);
  EXPECT_EQ(got.race.op, -1) << listing(chain);
  const std::vector<double> ms = {2, 2, 2, 3.5, 3.5, 3.5, 4.5, 4.5};
  ASSERT_EQ(got.time.size(), ms.size());
  for (std::size_t i = 0; i < ms.size(); ++i) EXPECT_NEAR(got.time[i], ms[i] * 1e-3, 1e-12) << i;
  // the host learns through a synchronize of a third stream that waited: it orders the consumer
  expect_race(program(3, 1, 2,
                      {kernel("produce", 1, 2, {}, {0}), record(0, 1), wait_on(2, 0),
                       host_op(OpKind::SyncStream, 2), kernel("ok", 0, 1, {0}, {}),
                       kernel("w", 1, 1, {}, {1}), kernel("bad", 0, 1, {1}, {})}),
              6, 5, 1);
  // the same through a synchronize of an event recorded on that third stream after it waited:
  // the record captured what s2 had learnt from e0 (produce on s1), so the host learns it too
  expect_race(program(3, 2, 2,
                      {kernel("produce", 1, 2, {}, {0}), record(0, 1), wait_on(2, 0), record(1, 2),
                       host_op(OpKind::SyncEvent, 1), kernel("ok", 0, 1, {0}, {}),
                       kernel("w", 1, 1, {}, {1}), kernel("bad", 0, 1, {1}, {})}),
              7, 6, 1);
  // what the host learns adds up: an event of s2 is recorded before anything of s1 is known; the
  // host then learns produce (on s1) by synchronizing s1, then synchronizes that older event of
  // s2; the kernel it enqueues after both is still ordered after produce
  expect_race(program(3, 1, 2,
                      {kernel("other", 2, 1, {}, {}), record(0, 2),
                       kernel("produce", 1, 2, {}, {0}), host_op(OpKind::SyncStream, 1),
                       host_op(OpKind::SyncEvent, 0), kernel("ok", 0, 1, {0}, {}),
                       kernel("w", 1, 1, {}, {1}), kernel("bad", 0, 1, {1}, {})}),
              7, 6, 1);
  // the same through a query that returns true of an event recorded on that third stream: the
  // record captured what s2 had learnt from e0 (produce on s1), so the host learns it too
  expect_race(program(3, 2, 2,
                      {kernel("produce", 1, 2, {}, {0}), record(0, 1), wait_on(2, 0), record(1, 2),
                       host_op(OpKind::HostWork, 0, 3), host_op(OpKind::Query, 1),
                       kernel("ok", 0, 1, {0}, {}), kernel("w", 1, 1, {}, {1}),
                       kernel("bad", 0, 1, {1}, {})}),
              8, 7, 1);
}

/// A random program whose cross-stream accesses are ordered mostly through the host: before a
/// kernel on stream s touches a buffer last written (or, for a write, read since) on stream t, the
/// generator picks one of: record on t and wait on s; synchronize t (often after host work, so
/// that t is already idle); record on t and synchronize the event; record on t, host work and a
/// query (which orders only when it returns true); or nothing (a race). Kernels land on busy and
/// idle streams alike.
Program host_ordered_program(std::uint64_t seed, int ops, int streams, int events, int buffers) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const auto duration = [&] { return static_cast<double>(1 + pick(64)) / 64 * 1e-3; };
  const auto host_work = [&] {
    Op op;
    op.kind = OpKind::HostWork;
    op.seconds = duration() * (1 + pick(3));
    return op;
  };
  Program p = program(streams, events, buffers, {});
  std::vector<int> last_writer(static_cast<std::size_t>(buffers), -1);
  std::vector<std::vector<bool>> readers(static_cast<std::size_t>(buffers),
                                         std::vector<bool>(static_cast<std::size_t>(streams)));
  int kernels = 0;
  while (static_cast<int>(p.ops.size()) < ops) {
    const int r = pick(100);
    if (r < 60) {
      const int s = pick(streams);
      Op k = kernel("k" + std::to_string(kernels++), s, duration() * 1e3, {}, {});
      for (int b = 0; b < buffers; ++b) {
        const int a = pick(4);
        if (a == 0) k.reads.push_back(b);
        if (a == 1) k.writes.push_back(b);
      }
      std::vector<bool> needed(static_cast<std::size_t>(streams));
      for (int b : k.reads) {
        const int w = last_writer[static_cast<std::size_t>(b)];
        if (w >= 0 && w != s) needed[static_cast<std::size_t>(w)] = true;
      }
      for (int b : k.writes) {
        const int w = last_writer[static_cast<std::size_t>(b)];
        if (w >= 0 && w != s) needed[static_cast<std::size_t>(w)] = true;
        for (int t = 0; t < streams; ++t)
          if (t != s && readers[static_cast<std::size_t>(b)][static_cast<std::size_t>(t)])
            needed[static_cast<std::size_t>(t)] = true;
      }
      for (int t = 0; t < streams; ++t) {
        if (!needed[static_cast<std::size_t>(t)]) continue;
        const int e = pick(events);
        switch (pick(20)) {
          case 0:
            break;  // left unordered: a race
          case 1:
          case 2:
          case 3:
          case 4:
            p.ops.push_back(record(e, t));
            p.ops.push_back(wait_on(s, e));
            break;
          case 5:
          case 6:
          case 7:
          case 8:
          case 9:
          case 10:
            if (pick(2) == 0) p.ops.push_back(host_work());
            p.ops.push_back(host_op(OpKind::SyncStream, t));
            break;
          case 11:
          case 12:
          case 13:
          case 14:
            p.ops.push_back(record(e, t));
            if (pick(2) == 0) p.ops.push_back(host_work());
            p.ops.push_back(host_op(OpKind::SyncEvent, e));
            break;
          default:
            p.ops.push_back(record(e, t));
            p.ops.push_back(host_work());
            p.ops.push_back(host_op(OpKind::Query, e));
            break;
        }
      }
      for (int b : k.reads)
        readers[static_cast<std::size_t>(b)][static_cast<std::size_t>(s)] = true;
      for (int b : k.writes) {
        last_writer[static_cast<std::size_t>(b)] = s;
        readers[static_cast<std::size_t>(b)].assign(static_cast<std::size_t>(streams), false);
      }
      p.ops.push_back(k);
    } else if (r < 70) {
      p.ops.push_back(host_work());
    } else if (r < 80) {
      p.ops.push_back(host_op(OpKind::SyncStream, pick(streams)));
    } else if (r < 90) {
      p.ops.push_back(record(pick(events), pick(streams)));
    } else {
      p.ops.push_back(wait_on(pick(streams), pick(events)));
    }
  }
  return p;
}

TEST(HiddenAnalyze, ManyStreamsLongPrograms) {
  for (int k = 0; k < 60; ++k) {
    const std::uint64_t seed = 90000 + static_cast<std::uint64_t>(k);
    const Program p = random_program(seed, 120, 4, 3, 4, k % 3 != 0);
    const std::string diff = analysis_mismatch(p, analyze(p), device_replay(p), true, true);
    ASSERT_TRUE(diff.empty()) << "seed " << seed << ": " << diff;
  }
  // ordered through the host: synchronizes of idle and busy streams, kernels on busy streams
  for (int k = 0; k < 120; ++k) {
    const std::uint64_t seed = 91000 + static_cast<std::uint64_t>(k);
    const Program p = host_ordered_program(seed, 60 + k % 5 * 20, 2 + k % 3, 2, 1 + k % 3);
    const std::string diff = analysis_mismatch(p, analyze(p), device_replay(p), true, true);
    ASSERT_TRUE(diff.empty()) << "host-ordered seed " << seed << ": " << diff;
  }
}

TEST(HiddenAnalyze, HostOrderIdleAndBusyStreams) {
  // streams.hpp: the host learns what a stream covers when it synchronizes with it, and passes
  // it to every op it enqueues afterwards.
  // A synchronize of a stream that is already idle (the host's clock is past its work) still
  // teaches the host: the reader on s1 is ordered after the writer on s0.
  const Program idle = program(2, 1, 1,
                               {kernel("w", 0, 1, {}, {0}), host_op(OpKind::HostWork, 0, 3),
                                host_op(OpKind::SyncStream, 0), kernel("r", 1, 1, {0}, {})});
  const ProgramAnalysis a = analyze(idle);
  EXPECT_EQ(a.race.op, -1) << "the synchronize of idle s0 orders r after w\n" << listing(idle);
  const std::vector<double> ms_idle = {1, 3, 3, 4};
  ASSERT_EQ(a.time.size(), ms_idle.size()) << listing(idle);
  for (std::size_t i = 0; i < ms_idle.size(); ++i)
    EXPECT_NEAR(a.time[i], ms_idle[i] * 1e-3, 1e-12) << "op " << i << "\n" << listing(idle);
  // The same through an event already complete when the host synchronizes with it.
  const Program idle_event =
      program(2, 1, 1,
              {kernel("w", 0, 1, {}, {0}), record(0, 0), host_op(OpKind::HostWork, 0, 3),
               host_op(OpKind::SyncEvent, 0), kernel("r", 1, 1, {0}, {})});
  EXPECT_EQ(analyze(idle_event).race.op, -1) << listing(idle_event);
  // A kernel enqueued on a busy stream after a synchronize takes in what the host has learnt:
  // s1 is still running 'long' (until 5 ms) when the host, at 2 ms, enqueues r after
  // synchronizing s0.
  const Program busy = program(2, 1, 1,
                               {kernel("w", 0, 2, {}, {0}), kernel("long", 1, 5, {}, {}),
                                host_op(OpKind::SyncStream, 0), kernel("r", 1, 1, {0}, {})});
  const ProgramAnalysis b = analyze(busy);
  EXPECT_EQ(b.race.op, -1) << "r on busy s1 is ordered after w through the host\n" << listing(busy);
  const std::vector<double> ms_busy = {2, 5, 2, 6};
  ASSERT_EQ(b.time.size(), ms_busy.size()) << listing(busy);
  for (std::size_t i = 0; i < ms_busy.size(); ++i)
    EXPECT_NEAR(b.time[i], ms_busy[i] * 1e-3, 1e-12) << "op " << i << "\n" << listing(busy);
  // ... and a later unordered write on s0 still races with r (the order runs one way only).
  const Program busy_race = [&] {
    Program q = busy;
    q.ops.push_back(kernel("w2", 0, 1, {}, {0}));
    return q;
  }();
  expect_race(busy_race, 4, 3, 0);
  // "a query returns true when the event's work is done at the host's current clock", and then
  // the host learns what it covers: at exactly the completion time too (w ends at 2 ms, the host's
  // clock is 2 ms when it asks), so r on s1 is ordered after w.
  const Program query_at_end =
      program(2, 1, 1,
              {kernel("w", 0, 2, {}, {0}), record(0, 0), host_op(OpKind::HostWork, 0, 2),
               host_op(OpKind::Query, 0), kernel("r", 1, 1, {0}, {})});
  const ProgramAnalysis qa = analyze(query_at_end);
  EXPECT_EQ(qa.race.op, -1)
      << "a query at exactly the event's completion time returns true and orders r after w\n"
      << listing(query_at_end);
  ASSERT_EQ(qa.answer.size(), query_at_end.ops.size()) << listing(query_at_end);
  EXPECT_EQ(qa.answer[3], 1) << "the query at 2 ms of an event complete at 2 ms\n"
                             << listing(query_at_end);
  for (const Program* p : {&idle, &idle_event, &busy, &busy_race, &query_at_end}) {
    const std::string diff = analysis_mismatch(*p, analyze(*p), device_replay(*p), true, true);
    EXPECT_TRUE(diff.empty()) << diff;
  }
}

TEST(HiddenAnalyze, EmptyHostOnlyAndZeroLengthPrograms) {
  const ProgramAnalysis none = analyze(program(1, 0, 0, {}));
  EXPECT_TRUE(none.time.empty());
  EXPECT_TRUE(none.answer.empty());
  EXPECT_EQ(none.race.op, -1);
  const Program host = program(
      2, 1, 0,
      {host_op(OpKind::HostWork, 0, 1), host_op(OpKind::Query, 0), host_op(OpKind::SyncEvent, 0),
       host_op(OpKind::SyncStream, 1), record(0, 1), host_op(OpKind::Query, 0)});
  const std::string diff = analysis_mismatch(host, analyze(host), device_replay(host), true, true);
  EXPECT_TRUE(diff.empty()) << diff;
  // zero-length kernels still race, and still order
  expect_race(program(2, 1, 1, {kernel("w", 1, 0, {}, {0}), kernel("r", 0, 0, {0}, {})}), 1, 0, 0);
  const Program zero = program(
      2, 1, 1,
      {kernel("w", 1, 0, {}, {0}), record(0, 1), wait_on(0, 0), kernel("r", 0, 0, {0}, {})});
  const std::string d2 = analysis_mismatch(zero, analyze(zero), device_replay(zero), true, true);
  EXPECT_TRUE(d2.empty()) << d2;
}

/// The names of rank 0's spans on one stream of the Chrome trace, in time order.
std::vector<std::string> rank0_stream(const std::string& path, const std::string& stream) {
  std::vector<std::string> out;
  for (const auto& sp : distlab::testing::trace_spans(path, "rank 0 stream " + stream))
    out.push_back(sp.name);
  return out;
}

TEST(HiddenOverlap, BackwardLastLayerFirstAndOneWaitPerBucket) {
  // streams.hpp: every layer's backward kernel runs on compute, last layer first (with and without
  // overlap); docs/10_streams.md: comm is told about the gradients once per bucket with overlap,
  // once or once per bucket without, no more often.
  const StepConfig c = small_step();
  const std::size_t layers = c.layer_floats.size(), buckets = expected_buckets(c).size();
  for (bool overlap : {true, false}) {
    dist::LaunchOptions o = threads_options(2);
    o.trace_path = ::testing::TempDir() + "distlab_10_order_" + std::to_string(overlap) + ".json";
    run_steps(c, overlap, 1, o);
    std::vector<std::string> backward;
    for (const std::string& name : rank0_stream(o.trace_path, "compute"))
      if (name.find("'backward ") != std::string::npos) backward.push_back(name);
    ASSERT_EQ(backward.size(), layers) << (overlap ? "overlap" : "no overlap");
    for (std::size_t k = 0; k < layers; ++k) {
      EXPECT_EQ(backward[k], "kernel 'backward " + std::to_string(layers - 1 - k) + "'")
          << (overlap ? "overlap" : "no overlap") << ": backward kernel " << k
          << " on compute; the layers go last layer first";
    }
    std::size_t waits = 0;
    for (const std::string& name : rank0_stream(o.trace_path, "comm"))
      if (name.rfind("wait event", 0) == 0) ++waits;
    if (overlap) {
      EXPECT_EQ(waits, buckets) << "comm waits on an event once per bucket (" << buckets
                                << " buckets), no more often";
    } else {
      // the one constraint (the end of backward) may be stated once or once per bucket
      EXPECT_GE(waits, 1U) << "without overlap comm still has to wait for the end of backward";
      EXPECT_LE(waits, buckets) << "without overlap comm waits at most once per bucket (" << buckets
                                << " buckets)";
    }
  }
}

}  // namespace
