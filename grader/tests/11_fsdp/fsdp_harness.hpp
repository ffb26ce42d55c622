// Shared by the public and hidden tests of 11_fsdp: small models whose units do not divide by dp,
// runners that train on the simulated device and collect every rank's results, and the closed
// forms (computed here from the header's and README's statements, not by the module's code).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "distlab_testing.hpp"
#include "fsdp.hpp"
#include "train.hpp"

namespace fsdptest {

using namespace fsdp;
using distlab::testing::threads_options;

/// Units 9 -> 7 -> 7 -> 7 -> 3: 63, 49, 49 and 21 weights (none a multiple of 2 or 4; 49 not of 3).
inline mlp::Config small_model(int n_layers = 4) {
  mlp::Config c;
  c.n_layers = n_layers;
  c.dim_in = 9;
  c.dim_hidden = 7;
  c.n_classes = 3;
  c.train_size = 480;
  c.test_size = 24;
  c.batch_size = 120;  // a multiple of 1 to 6 and 8
  c.seed = 5;
  return c;
}

inline TrainConfig config_of(int prefetch, bool reshard, mlp::Config model = small_model()) {
  TrainConfig c;
  c.model = model;
  c.fsdp.prefetch = prefetch;
  c.fsdp.reshard_after_forward = reshard;
  c.fsdp.adam.learning_rate = 1e-2f;
  c.fsdp.adam.eps = 1e-3f;  // near the gradients' size: a sum instead of the mean shows
  c.flops_per_s = 1e9;      // kernels of microseconds: comparable to the gathers
  c.adam_s_per_float = 1e-8;
  return c;
}

inline std::size_t numel(const mlp::Config& c, int u) {
  return static_cast<std::size_t>(c.layer_in(u)) * static_cast<std::size_t>(c.layer_out(u));
}
/// c_u = ceil(n_u / p): the shard of the unit padded to a multiple of p.
inline std::size_t shard_of(const mlp::Config& c, int u, int p) {
  return (numel(c, u) + static_cast<std::size_t>(p) - 1) / static_cast<std::size_t>(p);
}

/// What each rank saw in one run.
struct RankResult {
  std::vector<std::vector<float>> weights;  // full, unpadded, after the steps
  StepMeasure measure;                      // of the last step (steps >= 2)
  std::vector<LogEntry> log;                // the order log of the last step
  std::vector<float> losses;
};

/// Trains `steps` steps on p ranks; with steps >= 2 the last one is measured like measured_step.
/// trace: where the threads backend writes the run's Chrome trace ("": none).
inline std::vector<RankResult> run(const TrainConfig& config, int p, int steps,
                                   dist::NetworkModel net = {}, const std::string& trace = "") {
  const datasets::Split data = mlp::make_data(config.model);
  std::vector<RankResult> out(static_cast<std::size_t>(p));
  std::mutex mu;
  dist::LaunchOptions o = threads_options(p);
  o.network = net;
  o.trace_path = trace;
  distlab::testing::run_ranks(o, [&] {
    Trainer trainer(config, data);
    RankResult r;
    for (int t = 0; t < steps; ++t) {
      const bool last = t == steps - 1 && steps >= 2;
      if (last) {
        dist::barrier();
        dist::reset_stats();
        trainer.buffers().reset_peak();
        trainer.buffers().log().clear();
      }
      const double t0 = dist::sim_time();
      r.losses.push_back(trainer.step(t));
      if (last) {
        r.measure.step_s = dist::sim_time() - t0;
        const dist::Stats s = dist::stats();
        r.measure.bytes_sent = s.bytes_sent;
        r.measure.collectives = s.builtin_collectives;
        r.measure.peak = trainer.buffers().peak_bytes();
        r.log = trainer.buffers().log();
      }
    }
    r.weights = trainer.full_weights();
    std::lock_guard<std::mutex> g(mu);
    out[static_cast<std::size_t>(dist::rank())] = std::move(r);
  });
  return out;
}

/// Weights within the float32 rounding of a different summation order: Adam's step is at most
/// about learning_rate per element and step, and the ranks' gradients are summed in another order
/// than the whole batch's, so each element may differ by a few ulps of its gradient amplified by
/// 1 / sqrt(v_hat): tol = 1e-4 * learning_rate * steps + 1e-6 |w|.
inline ::testing::AssertionResult weights_near(const std::vector<std::vector<float>>& got,
                                               const std::vector<std::vector<float>>& want,
                                               float lr, int steps) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " units, expected " << want.size();
  for (std::size_t u = 0; u < want.size(); ++u) {
    if (got[u].size() != want[u].size())
      return ::testing::AssertionFailure()
             << "unit " << u << ": " << got[u].size() << " weights, expected " << want[u].size();
    for (std::size_t i = 0; i < want[u].size(); ++i) {
      const double tol = 1e-4 * lr * steps + 1e-6 * std::abs(want[u][i]);
      if (!(std::abs(got[u][i] - want[u][i]) <= tol))
        return ::testing::AssertionFailure()
               << "unit " << u << " weight " << i << ": " << got[u][i] << ", expected "
               << want[u][i] << " (single-process Adam), tolerance " << tol;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- closed forms ------------------------------------------------------------------------------

/// Bytes of an element on the wire and in the full buffers: bf16 2, fp32 4.
inline std::size_t elem(const TrainConfig& c) { return c.fsdp.bf16_comm ? 2 : 4; }

/// Gathers per unit and step: 2 with reshard_after_forward (forward and backward), else 1.
inline int gathers_per_unit(const TrainConfig& c) { return c.fsdp.reshard_after_forward ? 2 : 1; }

/// Bytes a rank sends per step: per unit, each gather and the reduce-scatter move (p-1)/p of the
/// unit's padded bytes: (p - 1) * e c_u (e = 4 bytes, bf16 2).
inline std::uint64_t expected_bytes(const TrainConfig& c, int p) {
  std::uint64_t b = 0;
  for (int u = 0; u < c.model.n_layers; ++u)
    b += static_cast<std::uint64_t>(gathers_per_unit(c) + 1) * static_cast<std::uint64_t>(p - 1) *
         elem(c) * shard_of(c.model, u, p);
  return b;
}

/// The meter's high-water mark: the shards (4 per unit) plus the most full buffers the contract
/// holds at once (README: Memory). bf16: a full buffer is 2 (p + 1) c_u bytes (2 bytes an element,
/// with a shard-sized bf16 buffer held as long as it is).
inline std::int64_t expected_peak(const TrainConfig& c, int p) {
  const int L = c.model.n_layers, k = c.fsdp.prefetch;
  auto full = [&](int u) {
    const std::size_t pieces = static_cast<std::size_t>(p) + (c.fsdp.bf16_comm ? 1 : 0);
    return static_cast<std::int64_t>(elem(c) * pieces * shard_of(c.model, u, p));
  };
  std::int64_t shards = 0, every = 0;
  for (int u = 0; u < L; ++u) {
    shards += static_cast<std::int64_t>(16 * shard_of(c.model, u, p));
    every += full(u);
  }
  std::int64_t most = 0;
  if (!c.fsdp.reshard_after_forward) {  // backward at unit u: weights of units 0 .. u, u's gradient
    (void)every;
    std::int64_t held = 0;
    for (int u = 0; u < L; ++u) {
      held += full(u);
      most = std::max(most, held + full(u));
    }
    return shards + most;
  }
  for (int u = 0; u < L; ++u) {  // forward: units u .. u+k
    std::int64_t held = 0;
    for (int j = u; j <= std::min(u + k, L - 1); ++j) held += full(j);
    most = std::max(most, held);
  }
  for (int u = L - 1; u >= 0; --u) {  // backward: units u .. u-k and u's gradient
    std::int64_t held = full(u);
    for (int j = u; j >= std::max(u - k, 0); --j) held += full(j);
    most = std::max(most, held);
  }
  return shards + most;
}

/// Kernel and collective times of the small model on p ranks (model.hpp's cost model).
struct Times {
  std::vector<double> gather, reduce_scatter, forward, backward, adam;
};
inline Times times_of(const TrainConfig& c, int p, const dist::NetworkModel& net) {
  Times t;
  const double rows = c.model.batch_size / p;
  for (int u = 0; u < c.model.n_layers; ++u) {
    const double bytes =
        static_cast<double>(elem(c)) * static_cast<double>(shard_of(c.model, u, p));
    const double msg = p > 1 ? net.latency_s + bytes / net.bandwidth_Bps : 0;
    t.gather.push_back((p - 1) * msg);
    t.reduce_scatter.push_back((p - 1) *
                               (msg + (net.reduce_Bps > 0 && p > 1 ? bytes / net.reduce_Bps : 0)));
    const double f = 2.0 * rows * static_cast<double>(numel(c.model, u)) / c.flops_per_s;
    t.forward.push_back(f);
    t.backward.push_back(u == 0 ? f : 2 * f);
    t.adam.push_back(c.adam_s_per_float * static_cast<double>(shard_of(c.model, u, p)));
  }
  return t;
}

/// The step without prefetch, reshard after forward: every gather waits for the kernel before it,
/// so nothing overlaps but the reduce-scatter of unit 0 with the Adam kernels before it (units
/// L-1 .. 1):
///   sum_u (2 G_u + F_u + B_u) + sum_{u >= 1} R_u + max(R_0, sum_{u >= 1} A_u) + A_0.
inline double expected_step_no_prefetch(const TrainConfig& c, int p,
                                        const dist::NetworkModel& net) {
  const Times t = times_of(c, p, net);
  double s = 0, adam_rest = 0;
  for (int u = 0; u < c.model.n_layers; ++u) {
    s += 2 * t.gather[u] + t.forward[u] + t.backward[u];
    if (u >= 1) {
      s += t.reduce_scatter[u];
      adam_rest += t.adam[u];
    }
  }
  return s + std::max(t.reduce_scatter[0], adam_rest) + t.adam[0];
}

/// The two-stream schedule of the contract (README: Simulated time): every operation starts when
/// its stream is free and what it waits for has ended.
inline double expected_step(const TrainConfig& c, int p, const dist::NetworkModel& net) {
  const Times t = times_of(c, p, net);
  const int L = c.model.n_layers, k = c.fsdp.prefetch;
  double comp = 0, comm = 0;
  std::vector<double> ready(static_cast<std::size_t>(L), 0.0), reduced(ready);
  // Every gather but forward's first k + 1 starts once the kernel launched before it has ended
  // (it fills the memory that unit gave back).
  int next = 0;
  double previous = 0;
  for (int u = 0; u < L; ++u) {
    for (; next < L && next <= u + k; ++next)
      ready[next] = comm = std::max(comm, previous) + t.gather[next];
    previous = comp = std::max(comp, ready[u]) + t.forward[u];
  }
  next = L - 1;  // backward's first gathers wait for the last forward kernel (previous)
  for (int u = L - 1; u >= 0; --u) {
    double wait = 0;
    if (c.fsdp.reshard_after_forward) {
      for (; next >= 0 && next >= u - k; --next)
        ready[next] = comm = std::max(comm, previous) + t.gather[next];
      wait = ready[u];
    }
    previous = comp = std::max(comp, wait) + t.backward[u];
    reduced[u] = comm = std::max(comm, comp) + t.reduce_scatter[u];
  }
  for (int u = L - 1; u >= 0; --u) comp = std::max(comp, reduced[u]) + t.adam[u];
  return std::max(comp, comm);
}

inline ::testing::AssertionResult time_near(double got, double want) {
  if (std::abs(got - want) <= 1e-9 * std::abs(want) + 1e-15) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "step " << got * 1e6 << " us, expected " << want * 1e6 << " us";
}

}  // namespace fsdptest
