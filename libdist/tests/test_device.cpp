// The simulated device of the threads backend (<dist/device.hpp>): streams are in order and
// overlap each other on the simulated clock, events record/query/synchronize/wait with CUDA's
// semantics and times, the host blocks only where CUDA's host blocks, and the stream-race
// detector reports a missing dependency (naming both streams, both operations and the buffer)
// and stays quiet when the dependency is there.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <dist/device.hpp>
#include <dist/device_kernels.hpp>
#include <nlohmann/json.hpp>

#include "distlab_testing.hpp"

using namespace distlab::testing;
namespace dev = dist::device;

namespace {

constexpr double kMs = 1e-3;
constexpr double kEps = 1e-15;

/// A kernel of `seconds` that writes `value` into every element of `out`.
void fill(dev::Stream& s, dev::DeviceBuffer<float>& out, float value, double seconds,
          const std::string& name = "fill") {
  dev::launch(s, {name, seconds, {dev::writes(out)}}, [&] {
    for (float& x : out.span()) x = value;
  });
}

/// A kernel of `seconds`: out = in + 1.
void add_one(dev::Stream& s, const dev::DeviceBuffer<float>& in, dev::DeviceBuffer<float>& out,
             double seconds, const std::string& name = "add_one") {
  dev::launch(s, {name, seconds, {dev::reads(in), dev::writes(out)}}, [&] {
    auto src = in.cspan();
    auto dst = out.span();
    for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = src[i] + 1.0f;
  });
}

std::vector<float> to_host(const dev::DeviceBuffer<float>& b, dev::Stream& s) {
  std::vector<float> h(b.size());
  dev::memcpy_async(std::span<float>(h), b, s);
  s.synchronize();
  return h;
}

}  // namespace

TEST(Device, OneStreamRunsInOrderAndTheHostDoesNotBlockOnLaunch) {
  run_ranks(threads_options(1), [] {
    dev::Stream s("compute");
    dev::DeviceBuffer<float> a("a", 4), b("b", 4);
    fill(s, a, 2.0f, 1 * kMs);
    add_one(s, a, b, 2 * kMs);
    EXPECT_EQ(dist::sim_time(), 0.0);  // launches are asynchronous
    EXPECT_FALSE(s.query());
    s.synchronize();
    EXPECT_NEAR(dist::sim_time(), 3 * kMs, kEps);  // in order: 1 ms then 2 ms
    EXPECT_TRUE(s.query());
    EXPECT_TRUE(elements_near(to_host(b, s), std::vector<float>(4, 3.0f)));
  });
}

TEST(Device, StreamsOverlapOnTheSimulatedClock) {
  run_ranks(threads_options(2), [] {
    dev::Stream x("x"), y("y");
    dev::DeviceBuffer<float> a("a", 8), b("b", 8);
    fill(x, a, 1.0f, 3 * kMs);
    fill(y, b, 2.0f, 2 * kMs);
    y.synchronize();
    EXPECT_NEAR(dist::sim_time(), 2 * kMs, kEps);
    EXPECT_FALSE(x.query());
    dev::device_synchronize();
    EXPECT_NEAR(dist::sim_time(), 3 * kMs, kEps);  // max(3, 2), not 3 + 2
  });
}

TEST(Device, WorkStartsNoEarlierThanTheHostEnqueuedIt) {
  run_ranks(threads_options(1), [] {
    dev::Stream s("s");
    dev::DeviceBuffer<float> a("a", 1);
    dist::sim_compute(5 * kMs, "host work");
    fill(s, a, 1.0f, 1 * kMs);
    s.synchronize();
    EXPECT_NEAR(dist::sim_time(), 6 * kMs, kEps);
  });
}

TEST(Device, LaunchOverheadIsChargedToTheHostOnly) {
  run_ranks(threads_options(1), [] {
    dev::set_model({.launch_overhead_s = 10e-6});
    dev::Stream s("s");
    dev::DeviceBuffer<float> a("a", 1);
    fill(s, a, 1.0f, 1 * kMs);
    fill(s, a, 2.0f, 1 * kMs);
    EXPECT_NEAR(dist::sim_time(), 20e-6, kEps);
    s.synchronize();
    // The second kernel starts when the first ends (1 ms), after it was enqueued (20 us).
    EXPECT_NEAR(dist::sim_time(), 2 * kMs, kEps);
  });
}

TEST(Device, EventQueryAndSynchronizeFollowTheSimulatedClock) {
  run_ranks(threads_options(1), [] {
    dev::Stream s("s");
    dev::Event never("never"), done("done");
    EXPECT_TRUE(never.query());  // never recorded: complete (cudaEventQuery)
    never.synchronize();
    EXPECT_EQ(dist::sim_time(), 0.0);
    dev::DeviceBuffer<float> a("a", 1);
    fill(s, a, 1.0f, 4 * kMs);
    done.record(s);
    EXPECT_FALSE(done.query());
    dist::sim_compute(3 * kMs, "host");
    EXPECT_FALSE(done.query());  // host at 3 ms, kernel ends at 4 ms
    dist::sim_compute(1.5 * kMs, "host");
    EXPECT_TRUE(done.query());
    EXPECT_NEAR(dist::sim_time(), 4.5 * kMs, kEps);  // query never blocks

    dev::Event e2("e2");
    fill(s, a, 2.0f, 2 * kMs);  // starts at 4.5 ms (host time), ends 6.5 ms
    e2.record(s);
    e2.synchronize();
    EXPECT_NEAR(dist::sim_time(), 6.5 * kMs, kEps);
  });
}

TEST(Device, SynchronizeLeavesTheHostExactlyAtTheAwaitedTime) {
  // From host time a, a synchronize until b adds b - a, and a + (b - a) rounds below b for these
  // two (sums of durations as a program makes them): the host must still be at b afterwards, so
  // that the awaited work is complete (query() true, elapsed_seconds() defined).
  run_ranks(threads_options(1), [] {
    const double a = 0.00020312500000000002, b = 0.000875;
    ASSERT_LT(a + (b - a), b);
    dev::Stream s("s");
    dev::Event origin("origin"), done("done");
    origin.record(s);
    dev::DeviceBuffer<float> buf("buf", 1);
    fill(s, buf, 1.0f, b);
    done.record(s);
    dist::sim_compute(a, "host");
    s.synchronize();
    EXPECT_EQ(dist::sim_time(), b);
    EXPECT_TRUE(done.query());
    EXPECT_EQ(dev::elapsed_seconds(origin, done), b);
  });
}

TEST(Device, ElapsedSecondsBetweenEvents) {
  run_ranks(threads_options(1), [] {
    dev::Stream s("s");
    dev::Event start("start"), end("end");
    dev::DeviceBuffer<float> a("a", 1);
    fill(s, a, 1.0f, 1 * kMs);
    start.record(s);
    fill(s, a, 2.0f, 2.5 * kMs);
    end.record(s);
    EXPECT_THROW((void)dev::elapsed_seconds(start, end), dist::Error);  // not complete yet
    end.synchronize();
    EXPECT_NEAR(dev::elapsed_seconds(start, end), 2.5 * kMs, kEps);
  });
}

TEST(Device, StreamWaitEventOrdersWithoutBlockingTheHost) {
  run_ranks(threads_options(1), [] {
    dev::Stream comm("comm"), compute("compute");
    dev::Event ready("ready");
    dev::DeviceBuffer<float> grad("grad", 4), out("out", 4);
    fill(comm, grad, 5.0f, 2 * kMs);
    ready.record(comm);
    compute.wait_event(ready);
    EXPECT_EQ(dist::sim_time(), 0.0);  // the host did not wait
    add_one(compute, grad, out, 1 * kMs);
    EXPECT_EQ(dist::sim_time(), 0.0);
    compute.synchronize();
    EXPECT_NEAR(dist::sim_time(), 3 * kMs, kEps);  // 2 ms on comm, then 1 ms on compute
    EXPECT_TRUE(elements_near(to_host(out, compute), std::vector<float>(4, 6.0f)));
  });
}

TEST(Device, WaitEventCapturesTheEventAsRecordedWhenCalled) {
  run_ranks(threads_options(1), [] {
    dev::Stream a("a"), b("b");
    dev::Event e("e");
    dev::DeviceBuffer<float> x("x", 1), y("y", 1), z("z", 1);
    fill(a, x, 1.0f, 1 * kMs);
    e.record(a);
    b.wait_event(e);
    fill(a, y, 1.0f, 5 * kMs);
    e.record(a);  // re-recording does not change what b already waits for
    fill(b, z, 1.0f, 1 * kMs);
    b.synchronize();
    EXPECT_NEAR(dist::sim_time(), 2 * kMs, kEps);
  });
}

TEST(Device, RaceDetectorNamesBothStreamsOperationsBufferAndTheMissingWait) {
  const std::string msg = expect_error<dev::StreamRaceError>(threads_options(2), [] {
    dev::Stream comm("comm"), compute("compute");
    dev::DeviceBuffer<float> grad("grad", 16), w("weights", 16);
    fill(comm, grad, 1.0f, 2 * kMs, "all_reduce_grad");
    add_one(compute, grad, w, 1 * kMs, "sgd_step");  // no wait on comm: a race
  });
  for (const char* part : {"stream race", "buffer 'grad'", "kernel 'sgd_step'", "stream 'compute'",
                           "reads", "kernel 'all_reduce_grad'", "stream 'comm'", "writes",
                           "record an event on 'comm'", "wait_event", "64 bytes"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\nin: " << msg;
  }
}

TEST(Device, RaceDetectorCatchesAWriteThatMayOvertakeARead) {
  const std::string msg = expect_error<dev::StreamRaceError>(threads_options(1), [] {
    dev::Stream comm("comm"), compute("compute");
    dev::DeviceBuffer<float> grad("grad", 4), w("w", 4);
    add_one(compute, grad, w, 1 * kMs, "sgd_step");
    fill(comm, grad, 1.0f, 1 * kMs, "next_all_reduce");  // overwrites grad while it is read
  });
  EXPECT_NE(msg.find("kernel 'next_all_reduce' on stream 'comm' writes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kernel 'sgd_step' on stream 'compute' reads"), std::string::npos) << msg;
}

TEST(Device, RaceDetectorIsQuietWhenTheDependencyIsThere) {
  run_ranks(threads_options(2), [] {
    dev::Stream comm("comm"), compute("compute");
    dev::DeviceBuffer<float> grad("grad", 4), w("w", 4), v("v", 4);
    dev::Event ready("ready"), used("used");
    // 1. stream wait on an event
    fill(comm, grad, 1.0f, 1 * kMs);
    ready.record(comm);
    compute.wait_event(ready);
    add_one(compute, grad, w, 1 * kMs);
    // 2. the reverse direction: comm overwrites grad only after compute read it
    used.record(compute);
    comm.wait_event(used);
    fill(comm, grad, 7.0f, 1 * kMs);
    // 3. the host synchronized with comm before enqueuing on compute
    comm.synchronize();
    add_one(compute, grad, v, 1 * kMs);
    // 4. a query that said "done" orders too (comm first waits until compute has read grad)
    used.record(compute);
    comm.wait_event(used);
    fill(comm, grad, 9.0f, 1 * kMs);
    dist::sim_compute(10 * kMs, "host");
    ASSERT_TRUE(comm.query());
    add_one(compute, grad, w, 1 * kMs);
    // 5. one stream never races with itself
    fill(compute, v, 3.0f, 1 * kMs);
    add_one(compute, v, v, 1 * kMs);
    dev::device_synchronize();
    EXPECT_TRUE(elements_near(to_host(w, compute), std::vector<float>(4, 10.0f)));
    EXPECT_TRUE(elements_near(to_host(v, compute), std::vector<float>(4, 4.0f)));
  });
}

TEST(Device, AQueryThatSaysNotDoneOrdersNothing) {
  const std::string msg = expect_error<dev::StreamRaceError>(threads_options(1), [] {
    dev::Stream comm("comm"), compute("compute");
    dev::DeviceBuffer<float> grad("grad", 4), w("w", 4);
    fill(comm, grad, 1.0f, 1 * kMs);
    EXPECT_FALSE(comm.query());
    add_one(compute, grad, w, 1 * kMs);
  });
  EXPECT_NE(msg.find("buffer 'grad'"), std::string::npos) << msg;
}

TEST(Device, CopiesAreTimedByTheirDirectionsBandwidth) {
  run_ranks(threads_options(1), [] {
    dev::set_model({.h2d_Bps = 1e9, .d2h_Bps = 2e9, .d2d_Bps = 4e9});
    dev::Stream s("s");
    std::vector<float> host(1000, 2.0f), back(1000);  // 4000 bytes
    dev::DeviceBuffer<float> a("a", 1000), b("b", 1000);
    dev::memcpy_async(a, std::span<const float>(host), s);  // 4 us
    dev::memcpy_async(b, a, s);                             // 1 us
    dev::memcpy_async(std::span<float>(back), b, s);        // 2 us
    EXPECT_EQ(dist::sim_time(), 0.0);
    s.synchronize();
    EXPECT_NEAR(dist::sim_time(), 7e-6, 1e-18);
    EXPECT_TRUE(elements_near(back, host));
  });
}

TEST(Device, KernelsTouchOnlyWhatTheyDeclare) {
  std::string msg = expect_error<dist::Error>(threads_options(1), [] {
    dev::Stream s("s");
    dev::DeviceBuffer<float> a("a", 1), b("b", 1);
    dev::launch(s, {"sneaky", 1e-6, {dev::reads(a)}}, [&] { b.span()[0] = 1; });
  });
  EXPECT_NE(msg.find("kernel 'sneaky' writes device buffer 'b' but does not declare it"),
            std::string::npos)
      << msg;
  msg = expect_error<dist::Error>(threads_options(1), [] {
    dev::Stream s("s");
    dev::DeviceBuffer<float> a("a", 1);
    dev::launch(s, {"reader", 1e-6, {dev::reads(a)}}, [&] { a.span()[0] = 1; });
  });
  EXPECT_NE(msg.find("writes device buffer 'a'"), std::string::npos) << msg;
  msg = expect_error<dist::Error>(threads_options(1), [] {
    dev::DeviceBuffer<float> a("a", 1);
    (void)a.cspan();
  });
  EXPECT_NE(msg.find("touched outside a kernel"), std::string::npos) << msg;
}

TEST(Device, HandlesBelongToTheirRankAndTheDeviceToALaunch) {
  EXPECT_THROW(dev::Stream("outside"), dist::Error);
  std::shared_ptr<dev::Stream> shared;
  std::string msg = expect_error<dist::Error>(threads_options(2), [&] {
    if (dist::rank() == 0) shared = std::make_shared<dev::Stream>("rank0");
    dist::barrier();
    if (dist::rank() == 1) shared->synchronize();
    dist::barrier();
  });
  EXPECT_NE(msg.find("a stream of rank 0 used on rank 1"), std::string::npos) << msg;
  std::shared_ptr<dev::DeviceBuffer<float>> buf;
  msg = expect_error<dist::Error>(threads_options(2), [&] {
    dev::DeviceBuffer<float> mine("mine", 1);
    if (dist::rank() == 0) buf = std::make_shared<dev::DeviceBuffer<float>>("rank0_buf", 1);
    dist::barrier();
    dev::Stream s("s");
    if (dist::rank() == 1) fill(s, *buf, 1.0f, 1e-6);
    dist::barrier();
    if (dist::rank() == 0) buf.reset();
  });
  EXPECT_NE(msg.find("uses a buffer that no longer exists (or belongs to another rank)"),
            std::string::npos)
      << msg;
}

TEST(Device, TraceHasOneTrackPerStreamPerRank) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("device_trace_" + std::to_string(getpid()) + ".json"))
                               .string();
  dist::LaunchOptions o = threads_options(2);
  o.trace_path = path;
  run_ranks(o, [] {
    dev::Stream comm("comm"), compute("compute");
    dev::Event e("grads");
    dev::DeviceBuffer<float> g("g", 4), w("w", 4);
    fill(comm, g, 1.0f, 2 * kMs, "all_reduce");
    e.record(comm);
    compute.wait_event(e);
    add_one(compute, g, w, 1 * kMs, "step");
    compute.synchronize();
  });
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::filesystem::remove(path);
  std::map<std::string, int> tid_of;
  std::map<int, std::set<std::string>> spans;
  std::map<int, std::pair<double, double>> times;
  for (const auto& ev : doc["traceEvents"]) {
    if (ev["ph"] == "M" && ev["name"] == "thread_name")
      tid_of[ev["args"]["name"].get<std::string>()] = ev["tid"].get<int>();
    if (ev["ph"] == "X") {
      spans[ev["tid"].get<int>()].insert(ev["name"].get<std::string>());
      if (ev["name"] == "wait event 'grads'")
        times[ev["tid"].get<int>()] = {ev["ts"].get<double>(), ev["dur"].get<double>()};
    }
  }
  for (int r = 0; r < 2; ++r) {
    const std::string rk = "rank " + std::to_string(r);
    ASSERT_TRUE(tid_of.count(rk + " stream comm")) << rk;
    ASSERT_TRUE(tid_of.count(rk + " stream compute")) << rk;
    const int comm = tid_of[rk + " stream comm"], compute = tid_of[rk + " stream compute"];
    EXPECT_NE(comm, compute);
    EXPECT_TRUE(spans[comm].count("kernel 'all_reduce'"));
    EXPECT_TRUE(spans[compute].count("kernel 'step'"));
    EXPECT_TRUE(spans[compute].count("wait event 'grads'"));  // event waits are visible
    EXPECT_NEAR(times[compute].first, 0.0, 1e-9);
    EXPECT_NEAR(times[compute].second, 2000.0, 1e-6);               // microseconds
    EXPECT_TRUE(spans[tid_of[rk]].count("synchronize 'compute'"));  // the host's lost time
  }
}

// ---- collectives on a stream --------------------------------------------------------------------

namespace {

/// The simulated time of a blocking dist::all_reduce of n floats started at clock 0.
double blocking_all_reduce_time(int p, std::size_t n) {
  std::vector<double> t(static_cast<std::size_t>(p));
  run_ranks(threads_options(p), [&] {
    std::vector<float> x(n, 1.0f);
    dist::all_reduce(std::span<float>(x));
    t[static_cast<std::size_t>(dist::rank())] = dist::sim_time();
  });
  return t[0];
}

/// buf = rank + 1 everywhere, by a kernel of `seconds` on `s`.
void fill_rank(dev::Stream& s, dev::DeviceBuffer<float>& buf, double seconds) {
  fill(s, buf, static_cast<float>(dist::rank() + 1), seconds, "backward");
}

}  // namespace

TEST(DeviceCollectives, AsyncAllReduceWaitOrdersTheComputeStreamNotTheHost) {
  constexpr int p = 4;
  constexpr std::size_t n = 1 << 16;
  const double t_ar = blocking_all_reduce_time(p, n);
  ASSERT_GT(t_ar, 0.0);
  run_ranks(threads_options(p), [&] {
    dev::Stream comm("comm");
    dev::Stream compute = dev::current_stream();
    dev::DeviceBuffer<float> grad("grad", n), out("out", n);
    fill_rank(comm, grad, 0.0);
    const auto before = dist::stats().builtin_collectives;
    dist::Work work = dev::all_reduce_async(grad, comm);
    EXPECT_EQ(dist::stats().builtin_collectives, before + 1);
    EXPECT_FALSE(work.is_completed());
    work.wait();
    EXPECT_EQ(dist::sim_time(), 0.0);                  // the host never blocked
    add_one(compute, grad, out, 1 * kMs, "sgd_step");  // ordered after the all-reduce: no race
    EXPECT_EQ(dist::sim_time(), 0.0);
    compute.synchronize();
    EXPECT_NEAR(dist::sim_time(), t_ar + 1 * kMs, 1e-12);
    EXPECT_TRUE(work.is_completed());
    const float sum = p * (p + 1) / 2.0f;
    EXPECT_TRUE(elements_near(to_host(out, compute), std::vector<float>(n, sum + 1.0f)));
  });
}

TEST(DeviceCollectives, SkippingTheWaitIsAStreamRace) {
  const std::string msg = expect_error<dev::StreamRaceError>(threads_options(2), [] {
    dev::Stream comm("comm");
    dev::Stream compute = dev::current_stream();
    dev::DeviceBuffer<float> grad("grad", 8), out("out", 8);
    fill_rank(comm, grad, 0.0);
    dist::Work work = dev::all_reduce_async(grad, comm);
    add_one(compute, grad, out, 1 * kMs, "sgd_step");  // work.wait() forgotten
    work.wait();
  });
  for (const char* part : {"buffer 'grad'", "kernel 'sgd_step' on stream 'compute' reads",
                           "all_reduce on stream 'comm' writes", "record an event on 'comm'"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\nin: " << msg;
  }
}

TEST(DeviceCollectives, PollingIsCompletedCostsHostTimeStreamOrderingDoesNot) {
  constexpr int p = 2;
  constexpr std::size_t n = 1 << 14;
  const double t_ar = blocking_all_reduce_time(p, n);
  run_ranks(threads_options(p), [&] {
    dev::Stream comm("comm");
    dev::DeviceBuffer<float> grad("grad", n);
    dist::Work work = dev::all_reduce_async(grad, comm);
    int polls = 0;
    while (!work.is_completed()) {
      dist::sim_compute(1e-6, "poll");
      ++polls;
    }
    EXPECT_GE(dist::sim_time(), t_ar);
    EXPECT_LT(dist::sim_time(), t_ar + 1e-6 + 1e-12);
    EXPECT_EQ(polls, static_cast<int>(std::ceil(t_ar / 1e-6 - 1e-9)));
  });
}

TEST(DeviceCollectives, ComputeOverlapsTheCollectiveAndItStartsWhenEveryStreamReachesIt) {
  constexpr int p = 2;
  constexpr std::size_t n = 1 << 16;
  const double t_ar = blocking_all_reduce_time(p, n);
  run_ranks(threads_options(p), [&] {
    dev::Stream comm("comm");
    dev::Stream compute = dev::current_stream();
    dev::DeviceBuffer<float> grad("grad", n), other("other", n);
    // Rank 1's comm stream is busy 2 ms first: everyone's all-reduce starts at 2 ms.
    fill_rank(comm, grad, dist::rank() == 1 ? 2 * kMs : 0.0);
    dist::Work work = dev::all_reduce_async(grad, comm);
    fill(compute, other, 1.0f, 3 * kMs, "backward_rest");  // independent: overlaps
    work.wait();
    compute.synchronize();
    EXPECT_NEAR(dist::sim_time(), std::max(3 * kMs, 2 * kMs + t_ar), 1e-12);
    comm.synchronize();
    EXPECT_NEAR(dist::sim_time(), std::max(3 * kMs, 2 * kMs + t_ar), 1e-12);
  });
}

// all_gather(in, out, s) and reduce_scatter(in, out, s, op) on a stream: values in rank order, the
// ring's time (docs/threads_backend.md) started when the last rank's stream reaches the call, the
// host never blocks, traffic as the blocking built-ins, `in` read and `out` written on the stream.
TEST(DeviceCollectives, AllGatherAndReduceScatterOnAStream) {
  for (int p : {1, 3, 4}) {
    constexpr std::size_t c = 1000;  // floats per rank
    const dist::NetworkModel net;
    const double ring = (p - 1) * net.message_cost(0, p > 1 ? 1 : 0, c * sizeof(float));
    run_ranks(threads_options(p), [&] {
      dev::Stream comm("comm"), compute("compute");
      const auto pc = static_cast<std::size_t>(p) * c;
      dev::DeviceBuffer<float> shard("shard", c), full("full", pc), grad("grad", pc),
          reduced("reduced", c);
      fill_rank(compute, shard, 1 * kMs);
      dev::Event written("written");
      written.record(compute);
      comm.wait_event(written);
      dist::reset_stats();
      dev::all_gather(shard, full, comm);
      EXPECT_EQ(dist::sim_time(), 0.0);  // never blocks the host
      dev::launch(comm, {"grad", 0.0, {dev::writes(grad)}}, [&] {
        auto g = grad.span();
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = static_cast<float>(i % 7) + static_cast<float>(dist::rank());
      });
      dev::reduce_scatter(grad, reduced, comm, dist::ReduceOp::Sum);
      EXPECT_EQ(dist::sim_time(), 0.0);
      const dist::Stats st = dist::stats();
      EXPECT_EQ(st.builtin_collectives, 2u);
      EXPECT_EQ(st.bytes_sent, 2u * static_cast<std::uint64_t>(p - 1) * c * sizeof(float));
      comm.synchronize();
      EXPECT_NEAR(dist::sim_time(), 1 * kMs + 2 * ring, 1e-12) << "p=" << p;
      const std::vector<float> got = to_host(full, compute);
      for (std::size_t i = 0; i < pc; ++i)
        ASSERT_EQ(got[i], static_cast<float>(i / c + 1)) << "all_gather element " << i;
      const std::vector<float> red = to_host(reduced, compute);
      for (std::size_t k = 0; k < c; ++k) {
        const std::size_t i = static_cast<std::size_t>(dist::rank()) * c + k;
        const float want =
            static_cast<float>(p) * static_cast<float>(i % 7) + static_cast<float>(p * (p - 1) / 2);
        ASSERT_EQ(red[k], want) << "reduce_scatter element " << k;
      }
    });
  }
}

TEST(DeviceCollectives, AllGatherSizesAndItsRaces) {
  std::string msg = expect_error<dist::Error>(threads_options(2), [] {
    dev::Stream comm("comm");
    dev::DeviceBuffer<float> in("in", 3), out("out", 5);
    dev::all_gather(in, out, comm);
  });
  EXPECT_NE(msg.find("world_size() * in.size() = 6"), std::string::npos) << msg;
  msg = expect_error<dist::Error>(threads_options(2), [] {
    dev::Stream comm("comm");
    dev::DeviceBuffer<float> in("in", 5), out("out", 3);
    dev::reduce_scatter(in, out, comm);
  });
  EXPECT_NE(msg.find("world_size() * out.size() = 6"), std::string::npos) << msg;
  // The gather reads a shard a kernel on another stream wrote, with no event between them.
  msg = expect_error<dev::StreamRaceError>(threads_options(2), [] {
    dev::Stream comm("comm"), compute("compute");
    dev::DeviceBuffer<float> shard("shard", 4), full("full", 8);
    fill_rank(compute, shard, 1 * kMs);
    dev::all_gather(shard, full, comm);
  });
  for (const char* part : {"buffer 'shard'", "all_gather on stream 'comm' reads"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\nin: " << msg;
}

// <dist/device_kernels.hpp> on the simulated device: values, durations, names, declared accesses.
TEST(DeviceKernels, ValuesTimesAndTheRaceDetectorSeeThem) {
  run_ranks(threads_options(1), [&] {
    dev::Stream a("a"), b("b");
    dev::DeviceBuffer<float> x("x", 10), y("y", 10), z("z", 10);
    dev::Event done("done");
    dev::fill(x, 2.0f, a, 1 * kMs);
    done.record(a);
    b.wait_event(done);
    dev::axpy(3.0f, x, y, b, 2 * kMs);           // y = 6
    dev::difference(y, x, z, 2, 5, b, 1 * kMs);  // z[2..7) = 4, the rest 0
    b.synchronize();
    EXPECT_NEAR(dist::sim_time(), 4 * kMs, kEps);
    const auto got = to_host(z, b);
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], i >= 2 && i < 7 ? 4.0f : 0.0f) << "index " << i;
    EXPECT_THROW(dev::difference(y, x, z, 6, 5, b), dist::Error);  // past the end
  });
  const std::string msg = expect_error<dev::StreamRaceError>(threads_options(1), [] {
    dev::Stream a("a"), b("b");
    dev::DeviceBuffer<float> x("x", 10), y("y", 10);
    dev::fill(x, 1.0f, a, 1 * kMs, "produce");
    dev::axpy(-0.5f, x, y, b, 1 * kMs, "sgd");  // no event: reads x while 'a' writes it
  });
  EXPECT_TRUE(contains(msg, "'sgd'") && contains(msg, "'produce'") && contains(msg, "'x'")) << msg;
}
