// Shared by the public and hidden tests of 10_streams: the closed forms (computed here, not by
// the module's given code), the synchronous reference of the data-parallel step, and runners that
// collect each rank's results on the simulated device.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "distlab_testing.hpp"
#include "replica.hpp"
#include "streams.hpp"

namespace streamtest {

using namespace streams;
namespace dd = dist::device;
using distlab::testing::threads_options;

/// Ring all-reduce of `bytes` on p ranks (threads_backend.md): 2(p-1)(alpha + bytes/p beta)
/// + (p-1) bytes/p gamma.
inline double ring_seconds(double bytes, int p, const dist::NetworkModel& net) {
  if (p <= 1) return 0;
  double t = 2.0 * (p - 1) * (net.latency_s + bytes / p / net.bandwidth_Bps);
  if (net.reduce_Bps > 0) t += (p - 1) * bytes / p / net.reduce_Bps;
  return t;
}

/// |got - want| <= 1% of |want| (and exact when want is 0).
inline ::testing::AssertionResult within_1pct(double got, double want) {
  if (std::abs(got - want) <= 0.01 * std::abs(want) + 1e-15) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << got * 1e3 << " ms, expected " << want * 1e3 << " ms (within 1%)";
}

/// The waiting experiment's closed forms (README, task 1).
struct Expected {
  double lost = 0, step = 0;
};
inline Expected expected_waiting(Strategy s, const WaitingSetup& w, int p,
                                 const dist::NetworkModel& net) {
  const double done =
      w.backward_s + ring_seconds(static_cast<double>(w.floats * sizeof(float)), p, net);
  Expected e;
  if (s == Strategy::Synchronize) e.lost = done;
  if (s == Strategy::Poll) {
    const double polls = std::ceil(done / w.poll_interval_s * (1 - 1e-12));
    e.lost = polls * w.poll_interval_s;
  }
  e.step = std::max(done, e.lost + w.host_work_s) + w.optimizer_s;
  return e;
}

/// Runs the waiting experiment on p ranks; every rank's result.
inline std::vector<WaitingResult> run_waiting(Strategy s, const WaitingSetup& w,
                                              const dist::LaunchOptions& o) {
  std::vector<WaitingResult> out(static_cast<std::size_t>(o.world_size));
  std::mutex mu;
  distlab::testing::run_ranks(o, [&] {
    WaitingResult r = measure_waiting(s, w);
    std::lock_guard<std::mutex> g(mu);
    out[static_cast<std::size_t>(dist::rank())] = std::move(r);
  });
  return out;
}

/// Every element of the waiting experiment's all-reduced gradient: the mean of rank + 1.
inline float waiting_mean(int p) {
  float sum = 0;
  for (int r = 0; r < p; ++r) sum += static_cast<float>(r + 1);
  return sum / static_cast<float>(p);
}

/// The layout the replica builds: 06's rule, computed here (layer indices per bucket).
inline std::vector<std::vector<int>> expected_buckets(const StepConfig& c) {
  std::vector<std::vector<int>> b;
  std::size_t bytes = 0;
  for (int l = static_cast<int>(c.layer_floats.size()) - 1; l >= 0; --l) {
    const std::size_t s = c.layer_floats[static_cast<std::size_t>(l)] * sizeof(float);
    if (b.empty() || bytes + s > c.bucket_cap_bytes) {
      b.emplace_back();
      bytes = 0;
    }
    b.back().push_back(l);
    bytes += s;
  }
  return b;
}

/// The step's closed form (README, task 2): C_b, R_b = max(R_{b-1}, C_b or C_last) + T_b,
/// S_b = max(S_{b-1}, R_b) + sgd_b from S = C_last.
inline double expected_step(const StepConfig& c, int p, const dist::NetworkModel& net,
                            bool overlap) {
  const auto buckets = expected_buckets(c);
  std::vector<double> complete;
  double t = 0;
  for (const auto& b : buckets) {
    for (int l : b) t += c.backward_s_per_float * static_cast<double>(c.layer_floats[l]);
    complete.push_back(t);
  }
  double reduced = 0, step = t;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    double floats = 0;
    for (int l : buckets[b]) floats += static_cast<double>(c.layer_floats[l]);
    reduced = std::max(reduced, overlap ? complete[b] : t) + ring_seconds(floats * 4, p, net);
    step = std::max(step, reduced) + c.sgd_s_per_float * floats;
  }
  return step;
}

/// What one rank saw in `steps` data-parallel steps with the student's functions.
struct StepResult {
  double step_s = 0;               // the first step, from launch to the device idle
  double host_after_enqueue = -1;  // the host clock once the first step is enqueued
  std::vector<float> params;       // after the last step, layer 0 first
  std::vector<Span> spans;         // the first step's
};

/// Runs `steps` steps on every rank: backward_with_overlap then optimizer_step (or the given
/// optimizer_step_unordered).
inline void step_body(const StepConfig& c, bool overlap, int steps, StepResult& out,
                      bool unordered = false, double busy_s = 0) {
  Stream compute("compute"), comm("comm");
  Replica replica(c, compute);
  const double t0 = dist::sim_time();
  // compute busy with earlier work of its own (a forward pass) when the step is enqueued
  if (busy_s > 0) dd::launch(compute, {"busy", busy_s, {}}, [] {});
  for (int s = 0; s < steps; ++s) {
    std::vector<AllReduceWork> works = backward_with_overlap(replica, compute, comm, overlap);
    if (unordered) {
      optimizer_step_unordered(replica, compute);
    } else {
      optimizer_step(replica, compute, works);
    }
    if (s == 0) {
      out.host_after_enqueue = dist::sim_time() - t0;
      dd::device_synchronize();
      out.step_s = dist::sim_time() - t0;
      out.spans = replica.spans();
    }
  }
  out.params = replica.parameters(compute);
}

inline std::vector<StepResult> run_steps(const StepConfig& c, bool overlap, int steps,
                                         const dist::LaunchOptions& o, double busy_s = 0) {
  std::vector<StepResult> out(static_cast<std::size_t>(o.world_size));
  distlab::testing::run_ranks(o, [&] {
    StepResult r;
    step_body(c, overlap, steps, r, false, busy_s);
    out[static_cast<std::size_t>(dist::rank())] = std::move(r);
  });
  return out;
}

/// The synchronous reference: `steps` SGD steps on host vectors with a blocking all-reduce of
/// each layer's gradient (mean), run on p ranks; rank 0's parameters.
inline std::vector<float> synchronous_params(const StepConfig& c, int p, int steps) {
  std::vector<float> out;
  std::mutex mu;
  distlab::testing::run_ranks(threads_options(p), [&] {
    std::vector<std::vector<float>> params(c.layer_floats.size());
    for (std::size_t l = 0; l < params.size(); ++l) {
      params[l].resize(c.layer_floats[l]);
      for (std::size_t i = 0; i < params[l].size(); ++i)
        params[l][i] = Replica::initial(static_cast<int>(l), i);
    }
    for (int s = 0; s < steps; ++s) {
      for (std::size_t l = 0; l < params.size(); ++l) {
        std::vector<float> g(params[l].size());
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = params[l][i] - Replica::target(dist::rank(), static_cast<int>(l), i);
        dist::all_reduce(std::span<float>(g), dist::ReduceOp::Avg);
        for (std::size_t i = 0; i < g.size(); ++i) params[l][i] -= c.learning_rate * g[i];
      }
    }
    if (dist::rank() == 0) {
      std::lock_guard<std::mutex> g(mu);
      for (const auto& v : params) out.insert(out.end(), v.begin(), v.end());
    }
  });
  return out;
}

/// A small step: uneven layers, four buckets, compute and communication of similar size.
inline StepConfig small_step() {
  StepConfig c;
  c.layer_floats = {4096, 1024, 1024, 1024, 1024, 512};
  c.bucket_cap_bytes = 8192;  // buckets {5,4}, {3,2}, {1}, {0}
  c.backward_s_per_float = 20e-9;
  c.sgd_s_per_float = 2e-9;
  return c;
}

}  // namespace streamtest

namespace streamtest {

/// Runs `program` on a fresh one-rank simulated device (the oracle of task 4).
inline Replayed device_replay(const Program& program) {
  Replayed out;
  distlab::testing::run_ranks(threads_options(1), [&] { out = replay(program); });
  return out;
}

/// Empty when the student's analysis equals what the device did; else the first difference, with
/// the program's listing.
inline std::string analysis_mismatch(const Program& p, const ProgramAnalysis& got,
                                     const Replayed& want, bool times, bool races) {
  std::ostringstream o;
  const auto name = [&](int i) {
    return i >= 0 && static_cast<std::size_t>(i) < p.ops.size()
               ? "op " + std::to_string(i) + " (" +
                     to_string(p.ops[static_cast<std::size_t>(i)].kind) + " " +
                     p.ops[static_cast<std::size_t>(i)].name + ")"
               : "op " + std::to_string(i);
  };
  if (races) {
    if (got.race.op != want.race_op) {
      o << "race: you report " << (got.race.op < 0 ? "none" : name(got.race.op))
        << ", the device's detector " << (want.race_op < 0 ? "none" : name(want.race_op));
      if (want.race_op >= 0) o << ":\n" << want.race_message;
    } else if (want.race_op >= 0) {
      const auto& earlier =
          got.race.earlier >= 0 && static_cast<std::size_t>(got.race.earlier) < p.ops.size()
              ? p.ops[static_cast<std::size_t>(got.race.earlier)].name
              : std::string("?");
      if (!distlab::testing::contains(want.race_message, "while kernel '" + earlier + "'") ||
          !distlab::testing::contains(want.race_message,
                                      "buffer '" + p.buffer_name(got.race.buffer) + "'")) {
        o << "race at " << name(want.race_op) << ": you name " << name(got.race.earlier)
          << " and buffer " << p.buffer_name(got.race.buffer) << "; the detector says:\n"
          << want.race_message;
      }
    }
  }
  if (o.str().empty() && times) {
    const std::size_t n = want.time.size();
    if (got.time.size() != n || got.answer.size() != n) {
      o << "time and answer must have one entry per op before the race (" << n << "), got "
        << got.time.size() << " and " << got.answer.size();
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        if (std::abs(got.time[i] - want.time[i]) > 1e-12 + 1e-9 * std::abs(want.time[i])) {
          o << name(static_cast<int>(i)) << ": time " << got.time[i] * 1e3 << " ms, the device "
            << want.time[i] * 1e3 << " ms";
          break;
        }
        if (got.answer[i] != want.answer[i]) {
          o << name(static_cast<int>(i)) << ": answer " << got.answer[i] << ", the device "
            << want.answer[i];
          break;
        }
      }
    }
  }
  if (!o.str().empty()) o << "\nthe program:\n" << listing(p);
  return o.str();
}

/// A kernel op (for hand-written programs).
inline Op kernel(const std::string& name, int stream, double ms, std::vector<int> reads,
                 std::vector<int> writes) {
  Op op;
  op.kind = OpKind::Kernel;
  op.name = name;
  op.stream = stream;
  op.seconds = ms * 1e-3;
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  return op;
}
inline Op host_op(OpKind kind, int stream_or_event, double ms = 0) {
  Op op;
  op.kind = kind;
  if (kind == OpKind::SyncStream) op.stream = stream_or_event;
  if (kind == OpKind::SyncEvent || kind == OpKind::Query) op.event = stream_or_event;
  op.seconds = ms * 1e-3;
  return op;
}
inline Op record(int event, int stream) {
  Op op;
  op.kind = OpKind::Record;
  op.event = event;
  op.stream = stream;
  return op;
}
inline Op wait_on(int stream, int event) {
  Op op;
  op.kind = OpKind::Wait;
  op.event = event;
  op.stream = stream;
  return op;
}

}  // namespace streamtest
