// Public tests of 10_streams. Task 1: AllReduceWork's values equal the blocking all-reduce, wait()
// orders the compute stream without blocking the host, is_completed() never blocks, synchronize()
// blocks until the end; wait_for's host time and step time match the closed forms within 1%.
// Task 2: the overlapped step's values equal the synchronous step, the host never blocks, and
// the step time with and without overlap (and the time saved) match the formula within 1%.
// Task 3: the given update without the event is reported by the race detector; yours is not.
#include <gtest/gtest.h>

#include "streams_harness.hpp"

namespace {

using namespace streamtest;
using distlab::testing::contains;
using distlab::testing::elements_near;
using distlab::testing::expect_error;
using distlab::testing::run_ranks;

constexpr double kKernel = 1e-3;  // the kernel that writes the buffer before the all-reduce

/// On every rank: a kernel of kKernel seconds writes `buf` on compute (rank-dependent values), an
/// event orders comm after it, then the student's AllReduceWork on comm. Returns the time the
/// all-reduce ends.
double start_after_kernel(DeviceBuffer<float>& buf, Stream& compute, Stream& comm) {
  const int rank = dist::rank();
  dd::launch(compute, {"produce", kKernel, {dd::writes(buf)}}, [&] {
    auto v = buf.span();
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>(rank * 3 + 1) + 0.5f * static_cast<float>(i % 5);
  });
  Event ready("ready");
  ready.record(compute);
  comm.wait_event(ready);
  return kKernel +
         ring_seconds(static_cast<double>(buf.bytes()), dist::world_size(), dist::NetworkModel{});
}

// ---- Task 1: AllReduceWork ----------------------------------------------------------------------

void work_values(dist::ReduceOp op) {
  for (int p = 1; p <= 4; ++p) {
    run_ranks(threads_options(p), [&] {
      Stream compute("compute"), comm("comm");
      DeviceBuffer<float> buf("buf", 1000);
      start_after_kernel(buf, compute, comm);
      AllReduceWork work(buf, comm, op);
      work.synchronize();
      std::vector<float> got(buf.size()), want(buf.size());
      dd::memcpy_async(std::span<float>(got), buf, comm);
      comm.synchronize();
      for (std::size_t i = 0; i < want.size(); ++i)
        want[i] = static_cast<float>(dist::rank() * 3 + 1) + 0.5f * static_cast<float>(i % 5);
      dist::all_reduce(std::span<float>(want), op);
      EXPECT_TRUE(elements_near(got, want)) << "p=" << p << " rank " << dist::rank();
    });
  }
}

TEST(Work, ValuesEqualTheBlockingAllReduceAvg) { work_values(dist::ReduceOp::Avg); }
TEST(Work, ValuesEqualTheBlockingAllReduceSum) { work_values(dist::ReduceOp::Sum); }

TEST(Work, IsCompletedQueriesWithoutBlocking) {
  run_ranks(threads_options(2), [&] {
    Stream compute("compute"), comm("comm");
    DeviceBuffer<float> buf("buf", 4096);
    const double end = start_after_kernel(buf, compute, comm);
    AllReduceWork work(buf, comm);
    EXPECT_FALSE(work.is_completed()) << "the all-reduce ends at " << end * 1e3 << " ms";
    EXPECT_EQ(dist::sim_time(), 0.0) << "is_completed() must not block the host";
    dist::sim_compute(end * 0.99);
    EXPECT_FALSE(work.is_completed()) << "at 99% of the all-reduce's end";
    dist::sim_compute(end * 0.02);
    EXPECT_TRUE(work.is_completed()) << "past the all-reduce's end";
    EXPECT_NEAR(dist::sim_time(), end * 1.01, end * 1e-9);
  });
}

TEST(Work, WaitOrdersTheComputeStreamWithoutBlockingTheHost) {
  for (int p : {1, 2, 4}) {
    run_ranks(threads_options(p), [&] {
      Stream compute("compute"), comm("comm");
      DeviceBuffer<float> buf("buf", 4096), out("out", 4096);
      Event origin("origin"), end_ev("end");
      origin.record(compute);
      const double end = start_after_kernel(buf, compute, comm);
      AllReduceWork work(buf, comm);
      work.wait(compute);
      EXPECT_EQ(dist::sim_time(), 0.0) << "wait() blocked the host (p=" << p << ")";
      // Reading the result on compute is ordered (a missing order is a StreamRaceError).
      dd::launch(compute, {"consume", 2e-4, {dd::reads(buf), dd::writes(out)}}, [&] {
        auto o = out.span();
        const auto b = buf.cspan();
        for (std::size_t i = 0; i < o.size(); ++i) o[i] = b[i];
      });
      end_ev.record(compute);
      EXPECT_EQ(dist::sim_time(), 0.0) << "the host blocked (p=" << p << ")";
      end_ev.synchronize();
      EXPECT_TRUE(within_1pct(dd::elapsed_seconds(origin, end_ev), end + 2e-4))
          << "the consumer must start when the all-reduce ends (p=" << p << ")";
    });
  }
}

TEST(Work, SynchronizeBlocksTheHostUntilTheAllReduceEnds) {
  for (int p : {1, 3, 4}) {
    run_ranks(threads_options(p), [&] {
      Stream compute("compute"), comm("comm"), other("other");
      DeviceBuffer<float> buf("buf", 3000);
      const double end = start_after_kernel(buf, compute, comm);
      AllReduceWork work(buf, comm);
      work.synchronize();
      EXPECT_TRUE(within_1pct(dist::sim_time(), end)) << "host clock after synchronize, p=" << p;
      EXPECT_TRUE(work.is_completed());
      // After the host synchronized, any stream may read the result.
      dd::launch(other, {"read", 1e-4, {dd::reads(buf)}}, [] {});
    });
  }
}

TEST(Work, CompletesWithTheAllReduceNotWithLaterWorkOnComm) {
  // comm is busy after the all-reduce (a 5 ms kernel on another buffer), compute is busy past the
  // all-reduce's end for one consumer and idle for another: the work stands for the all-reduce
  // alone, so is_completed(), wait() and synchronize() follow its end, not comm's.
  for (int p : {2, 3}) {
    run_ranks(threads_options(p), [&] {
      Stream compute("compute"), comm("comm"), side("side");
      DeviceBuffer<float> buf("buf", 2048), other("other", 16), out("out", 2048);
      Event origin("origin"), first("first"), second("second");
      origin.record(compute);
      const double end = start_after_kernel(buf, compute, comm);
      AllReduceWork work(buf, comm);
      dd::launch(comm, {"later on comm", 5e-3, {dd::writes(other)}}, [] {});
      // compute busy until 3 ms with work of its own (past the all-reduce's end)
      dd::launch(compute, {"busy", 3e-3 - kKernel, {}}, [] {});
      work.wait(compute);
      dd::launch(compute, {"consume", 1e-4, {dd::reads(buf), dd::writes(out)}}, [] {});
      first.record(compute);
      // an idle stream: starts at the all-reduce's end, not at comm's
      work.wait(side);
      dd::launch(side, {"consume on side", 1e-4, {dd::reads(buf)}}, [] {});
      second.record(side);
      EXPECT_EQ(dist::sim_time(), 0.0) << "wait() blocked the host (p=" << p << ")";
      dist::sim_compute(end * 1.01);
      EXPECT_TRUE(work.is_completed())
          << "the all-reduce ended at " << end * 1e3 << " ms; comm's later kernel does not count";
      work.synchronize();
      EXPECT_NEAR(dist::sim_time(), end * 1.01, 1e-12)
          << "synchronize waited for comm's later work";
      dd::device_synchronize();
      EXPECT_TRUE(within_1pct(dd::elapsed_seconds(origin, first), 3e-3 + 1e-4))
          << "a busy compute stream: the consumer starts when compute is free (p=" << p << ")";
      EXPECT_TRUE(within_1pct(dd::elapsed_seconds(origin, second), end + 1e-4))
          << "an idle stream: the consumer starts when the all-reduce ends (p=" << p << ")";
    });
  }
}

TEST(Work, SynchronizeReturnsAtTheAllReduceEndWhileCommIsBusy) {
  run_ranks(threads_options(4), [&] {
    Stream compute("compute"), comm("comm");
    DeviceBuffer<float> buf("buf", 4096), other("other", 16);
    const double end = start_after_kernel(buf, compute, comm);
    AllReduceWork work(buf, comm);
    dd::launch(comm, {"later on comm", 4e-3, {dd::writes(other)}}, [] {});
    EXPECT_FALSE(work.is_completed());
    work.synchronize();
    EXPECT_TRUE(within_1pct(dist::sim_time(), end))
        << "synchronize() must block until this all-reduce ends, not until comm is idle";
  });
}

// ---- Task 1: wait_for ---------------------------------------------------------------------------

void waiting(Strategy s, int p) {
  const WaitingSetup w;
  const auto o = threads_options(p);
  const Expected e = expected_waiting(s, w, p, o.network);
  const auto results = run_waiting(s, w, o);
  for (int r = 0; r < p; ++r) {
    const auto& got = results[static_cast<std::size_t>(r)];
    EXPECT_TRUE(within_1pct(got.host_lost_s, e.lost))
        << to_string(s) << ": host time lost, p=" << p << " rank " << r;
    EXPECT_TRUE(within_1pct(got.step_s, e.step))
        << to_string(s) << ": step time, p=" << p << " rank " << r;
    const std::vector<float> want(w.floats, waiting_mean(p));
    EXPECT_TRUE(elements_near(got.grad, want, 1e-6)) << to_string(s) << " p=" << p;
  }
}

TEST(Waiting, SynchronizeLosesTheWholeWait) {
  waiting(Strategy::Synchronize, 1);
  waiting(Strategy::Synchronize, 4);
}
TEST(Waiting, PollLosesWholeIntervals) {
  waiting(Strategy::Poll, 2);
  waiting(Strategy::Poll, 4);
}
TEST(Waiting, StreamOrderLosesNothing) {
  waiting(Strategy::StreamOrder, 1);
  waiting(Strategy::StreamOrder, 4);
}

TEST(Waiting, PollingACompletedWorkLosesNothing) {
  run_ranks(threads_options(2), [&] {
    Stream compute("compute"), comm("comm");
    DeviceBuffer<float> buf("buf", 256);
    const double end = start_after_kernel(buf, compute, comm);
    AllReduceWork work(buf, comm);
    dist::sim_compute(end * 2);
    EXPECT_EQ(wait_for(work, Strategy::Poll, compute, 1e-4), 0.0);
    EXPECT_EQ(wait_for(work, Strategy::Synchronize, compute, 1e-4), 0.0);
  });
}

// ---- Task 2: overlap ----------------------------------------------------------------------------

TEST(Overlap, ValuesEqualTheSynchronousStep) {
  const StepConfig c = small_step();
  for (int p = 1; p <= 4; ++p) {
    const auto want = synchronous_params(c, p, 2);
    for (bool overlap : {true, false}) {
      const auto got = run_steps(c, overlap, 2, threads_options(p));
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(elements_near(got[static_cast<std::size_t>(r)].params, want))
            << "p=" << p << " rank " << r << (overlap ? " with" : " without") << " overlap";
      }
    }
  }
}

TEST(Overlap, TheHostNeverBlocks) {
  const StepConfig c = small_step();
  for (bool overlap : {true, false}) {
    const auto got = run_steps(c, overlap, 1, threads_options(3));
    for (const auto& r : got)
      EXPECT_EQ(r.host_after_enqueue, 0.0) << "the host clock moved while the step was enqueued"
                                           << (overlap ? " (overlap)" : " (no overlap)");
  }
}

void step_time(bool overlap, int p) {
  const StepConfig c = small_step();
  const auto o = threads_options(p);
  const auto got = run_steps(c, overlap, 1, o);
  const double want = expected_step(c, p, o.network, overlap);
  for (int r = 0; r < p; ++r)
    EXPECT_TRUE(within_1pct(got[static_cast<std::size_t>(r)].step_s, want))
        << (overlap ? "overlapped" : "non-overlapped") << " step, p=" << p << " rank " << r;
}

TEST(Overlap, StepTimeMatchesTheFormula) {
  step_time(true, 2);
  step_time(true, 4);
}
TEST(Overlap, NoOverlapStepTimeMatchesTheFormula) {
  step_time(false, 2);
  step_time(false, 4);
}

TEST(Overlap, SavedTimeMatchesTheFormula) {
  const StepConfig c = small_step();
  const auto o = threads_options(4);
  const double with = run_steps(c, true, 1, o)[0].step_s;
  const double without = run_steps(c, false, 1, o)[0].step_s;
  const double want = expected_step(c, 4, o.network, false) - expected_step(c, 4, o.network, true);
  ASSERT_GT(want, 0.0);
  EXPECT_TRUE(within_1pct(without - with, want)) << "time saved by overlap";
}

// ---- Task 3: the missing event ------------------------------------------------------------------

TEST(Race, TheUpdateWithoutTheEventIsReported) {
  const StepConfig c = small_step();
  const std::string msg = expect_error<dd::StreamRaceError>(threads_options(2), [&] {
    StepResult r;
    step_body(c, true, 1, r, true);
  });
  EXPECT_TRUE(contains(msg, "'comm'")) << msg;
  EXPECT_TRUE(contains(msg, "'compute'")) << msg;
  EXPECT_TRUE(contains(msg, "'grads bucket 0'")) << msg;
}

TEST(Race, OptimizerStepPassesTheDetectorAndDoesNotWaitForLaterBuckets) {
  StepConfig c = small_step();
  c.sgd_s_per_float = 40e-9;  // updates long enough that waiting for every bucket shows
  const auto o = threads_options(4);
  const auto got = run_steps(c, true, 1, o);
  const double want = expected_step(c, 4, o.network, true);
  EXPECT_TRUE(within_1pct(got[0].step_s, want)) << "update b starts when all-reduce b ends";
}

// ---- Task 4: analyze ----------------------------------------------------------------------------

/// Two streams (0 "compute", 1 "comm"), one buffer "grad", one event: docs/device.md's example.
Program two_streams(std::vector<Op> ops) {
  Program p;
  p.streams = 2;
  p.events = 1;
  p.buffers = 1;
  p.stream_names = {"compute", "comm"};
  p.buffer_names = {"grad"};
  p.ops = std::move(ops);
  return p;
}

/// The student's analysis must equal the closed form (`ms` per op, the race) and the device.
void expect_analysis(const Program& p, const std::vector<double>& ms, int race_op, int earlier,
                     int buffer, const std::vector<int>& answers = {}) {
  const ProgramAnalysis got = analyze(p);
  ASSERT_EQ(got.time.size(), ms.size()) << "one time per op before the race\n" << listing(p);
  for (std::size_t i = 0; i < ms.size(); ++i)
    EXPECT_NEAR(got.time[i], ms[i] * 1e-3, 1e-12) << "op " << i << "\n" << listing(p);
  ASSERT_EQ(got.answer.size(), ms.size()) << listing(p);
  for (std::size_t i = 0; i < ms.size(); ++i) {
    const int want = i < answers.size() ? answers[i] : -1;
    EXPECT_EQ(got.answer[i], want) << "op " << i << "\n" << listing(p);
  }
  EXPECT_EQ(got.race.op, race_op) << listing(p);
  if (race_op >= 0) {
    EXPECT_EQ(got.race.earlier, earlier) << listing(p);
    EXPECT_EQ(got.race.buffer, buffer) << listing(p);
  }
  // the closed form above is also what the device does
  const std::string diff = analysis_mismatch(p, got, device_replay(p), true, true);
  EXPECT_TRUE(diff.empty()) << diff;
}

TEST(Analyze, TimesOfHandWrittenPrograms) {
  // 2 ms kernel writes grad on comm, event, compute waits, 1 ms kernel reads it, host syncs.
  expect_analysis(two_streams({kernel("produce", 1, 2, {}, {0}), record(0, 1), wait_on(0, 0),
                               kernel("consume", 0, 1, {0}, {}), host_op(OpKind::SyncStream, 0)}),
                  {2, 2, 2, 3, 3}, -1, -1, -1);
  // compute busy for 5 ms before the wait: the consumer starts when compute is free.
  expect_analysis(
      two_streams({kernel("produce", 1, 2, {}, {0}), record(0, 1), kernel("busy", 0, 5, {}, {}),
                   wait_on(0, 0), kernel("consume", 0, 1, {0}, {}), host_op(OpKind::SyncEvent, 0)}),
      {2, 2, 5, 5, 6, 2}, -1, -1, -1);
  // host work before enqueueing: a kernel starts no earlier than the host's clock.
  expect_analysis(two_streams({host_op(OpKind::HostWork, 0, 1.5), kernel("k", 1, 2, {}, {0}),
                               record(0, 0), host_op(OpKind::SyncStream, 1)}),
                  {1.5, 3.5, 1.5, 3.5}, -1, -1, -1);
  // the host is past the event (3 ms of its own work): a synchronize never moves it backwards,
  // and a wait's stream starts no earlier than the host's clock.
  expect_analysis(
      two_streams({kernel("produce", 1, 2, {}, {0}), record(0, 1), host_op(OpKind::HostWork, 0, 3),
                   host_op(OpKind::SyncEvent, 0), host_op(OpKind::SyncStream, 1), wait_on(0, 0),
                   kernel("consume", 0, 1, {0}, {})}),
      {2, 2, 3, 3, 3, 3, 4}, -1, -1, -1);
}

TEST(Analyze, RacesOfHandWrittenPrograms) {
  // the missing wait: consume (op 2) races with produce (op 0) on grad
  expect_analysis(two_streams({kernel("produce", 1, 2, {}, {0}), record(0, 1),
                               kernel("consume", 0, 1, {0}, {})}),
                  {2, 2}, 2, 0, 0);
  // a write that may overtake a read still in flight on another stream
  expect_analysis(two_streams({kernel("read", 0, 2, {0}, {}), kernel("overwrite", 1, 1, {}, {0})}),
                  {2}, 1, 0, 0);
  // ordered by an event, the same write is fine
  expect_analysis(two_streams({kernel("read", 0, 2, {0}, {}), record(0, 0), wait_on(1, 0),
                               kernel("overwrite", 1, 1, {}, {0})}),
                  {2, 2, 2, 3}, -1, -1, -1);
  // two reads never race; the same stream never races
  expect_analysis(two_streams({kernel("r0", 0, 1, {0}, {}), kernel("r1", 1, 1, {0}, {}),
                               kernel("w0", 1, 1, {}, {0})}),
                  {1, 1}, 2, 0, 0);
}

TEST(Analyze, HostSynchronizeAndQueryOrder) {
  // the host synchronizes comm, then enqueues: ordered through the host
  expect_analysis(two_streams({kernel("produce", 1, 2, {}, {0}), host_op(OpKind::SyncStream, 1),
                               kernel("consume", 0, 1, {0}, {})}),
                  {2, 2, 3}, -1, -1, -1);
  // the host synchronizes an event that covers the producer: ordered through the host as well
  expect_analysis(two_streams({kernel("produce", 1, 2, {}, {0}), record(0, 1),
                               host_op(OpKind::SyncEvent, 0), kernel("consume", 0, 1, {0}, {})}),
                  {2, 2, 2, 3}, -1, -1, -1);
  // a query that returned true orders; one that returned false does not
  expect_analysis(two_streams({kernel("produce", 1, 2, {}, {0}), record(0, 1),
                               host_op(OpKind::Query, 0), host_op(OpKind::HostWork, 0, 1.5),
                               host_op(OpKind::Query, 0), host_op(OpKind::HostWork, 0, 1),
                               host_op(OpKind::Query, 0), kernel("consume", 0, 1, {0}, {})}),
                  {2, 2, 0, 1.5, 1.5, 2.5, 2.5, 3.5}, -1, -1, -1, {-1, -1, 0, -1, 0, -1, 1});
  expect_analysis(
      two_streams({kernel("produce", 1, 2, {}, {0}), record(0, 1), host_op(OpKind::Query, 0),
                   host_op(OpKind::HostWork, 0, 1.5), kernel("consume", 0, 1, {0}, {})}),
      {2, 2, 0, 1.5}, 4, 0, 0, {-1, -1, 0});
  // an event never recorded: complete, and waiting on it orders nothing
  expect_analysis(
      two_streams({kernel("produce", 1, 2, {}, {0}), host_op(OpKind::Query, 0),
                   host_op(OpKind::SyncEvent, 0), wait_on(0, 0), kernel("consume", 0, 1, {0}, {})}),
      {2, 0, 0, 0}, 4, 0, 0, {-1, 1});
  // what the host learnt travels through a record on a stream that has run nothing since: the
  // host synchronized comm, then records e0 on an idle compute; a third stream waits on e0 and
  // may read what comm wrote.
  Program three = two_streams({kernel("produce", 1, 2, {}, {0}), host_op(OpKind::SyncStream, 1),
                               record(0, 0), wait_on(2, 0), kernel("consume", 2, 1, {0}, {})});
  three.streams = 3;
  three.stream_names.push_back("side");
  expect_analysis(three, {2, 2, 2, 2, 3}, -1, -1, -1);
}

void random_programs(std::uint64_t first_seed, int count, int ops, int streams, int events,
                     int buffers, bool times, bool races) {
  int raced = 0, clean = 0;
  for (int k = 0; k < count; ++k) {
    const std::uint64_t seed = first_seed + static_cast<std::uint64_t>(k);
    const Program p = random_program(seed, ops, streams, events, buffers, k % 2 == 0);
    const Replayed want = device_replay(p);
    (want.race_op >= 0 ? raced : clean) += 1;
    if (times && !races && want.race_op >= 0) continue;  // times: programs without a race
    const std::string diff = analysis_mismatch(p, analyze(p), want, times, races);
    ASSERT_TRUE(diff.empty()) << "seed " << seed << ": " << diff;
  }
  // both kinds of programs were tried, each a fair share
  EXPECT_GE(raced, count / 5) << raced << " of " << count << " programs race";
  EXPECT_GE(clean, count / 5) << clean << " of " << count << " programs have no race";
}

TEST(Analyze, TimesEqualTheDeviceOnRandomPrograms) {
  random_programs(1000, 150, 24, 2, 2, 2, true, false);
}
TEST(Analyze, RacesEqualTheDetectorOnRandomPrograms) {
  random_programs(5000, 150, 24, 3, 2, 3, false, true);
}

}  // namespace
