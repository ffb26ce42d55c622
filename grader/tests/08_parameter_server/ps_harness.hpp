// Shared by the public, hidden and MPI tests of 08_parameter_server: synchronous parameter-server
// training against the single-process oracle (the mean gradient over the workers' batches, what
// 06's all-reduce data parallelism computes), the closed forms of the traffic and the simulated
// step, and the asynchronous runs.
//
// Values tolerance: per weight |ps - oracle| <= 1e-6 + 1e-4 |oracle| after every step. Summing
// the workers' gradients in another order changes only the float rounding (relative ~1e-7),
// while a mean over the wrong count moves every update by a factor.
#pragma once

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "data_parallel.hpp"
#include "datasets/loader.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"
#include "ps.hpp"
#include "train.hpp"

namespace pstest {

inline constexpr double kRelTol = 1e-4, kAbsTol = 1e-6;

/// A small model with 31*13 + 13*13 + 13*5 = 637 parameters: uneven shards over 2 and 3 servers.
inline mlp::Config small_config(int batch_size = 8) {
  mlp::Config c;
  c.n_layers = 3;
  c.dim_in = 31;
  c.dim_hidden = 13;
  c.n_classes = 5;
  c.train_size = 512;
  c.test_size = 256;
  c.batch_size = batch_size;
  c.learning_rate = 0.2f;
  c.seed = 7;
  return c;
}

inline std::size_t num_params(const mlp::Config& c) {
  return static_cast<std::size_t>(mlp::MLP(c, c.seed).num_parameters());
}

/// The oracle: one process, `workers` batches per step (batch dp::global_batch_index(s, w,
/// workers) for worker w), the mean of their gradients, one SGD step. Weights after each step.
inline std::vector<std::vector<float>> oracle(const mlp::Config& c, const datasets::Split& data,
                                              int workers, int steps) {
  mlp::MLP model(c, c.seed + 2);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  std::vector<std::vector<float>> out;
  std::vector<float> w = ps::flat_values(model);
  for (int s = 0; s < steps; ++s) {
    std::vector<double> mean(w.size(), 0.0);
    for (int k = 0; k < workers; ++k) {
      ps::set_values(model, w);
      loader.load(dp::global_batch_index(s, k, workers), x, y);
      const mlp::Matrix& logits = model.forward(x);
      mlp::softmax_cross_entropy_forward(logits, y, probs);
      mlp::softmax_cross_entropy_backward(probs, y, dlogits);
      model.backward(dlogits);
      const std::vector<float> g = ps::flat_grads(model);
      for (std::size_t i = 0; i < g.size(); ++i) mean[i] += g[i];
    }
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] -= c.learning_rate * static_cast<float>(mean[i] / workers);
    }
    out.push_back(w);
  }
  return out;
}

/// What one rank of a synchronous run held after each step: a worker the whole weight vector
/// (offset 0), a server its shard (offset = the shard's begin).
struct RankRecord {
  std::size_t offset = 0;
  std::vector<std::vector<float>> after_step;
  dist::Stats stats;  // over the whole run (after a barrier and reset_stats)
  double step_s = 0;  // simulated seconds of the run / steps (this rank)
};

struct SyncRun {
  std::vector<RankRecord> ranks;  // by rank (under MPI: only this process's rank is filled)
};

/// Synchronous parameter-server training: `servers` servers, `workers` workers, `steps` steps,
/// compute free. dist::launch with test_options (threads, or MPI under mpirun: then the job's
/// size wins and workers = size - servers).
inline SyncRun run_sync(const mlp::Config& c, const datasets::Split& data, int workers, int servers,
                        int steps, const dist::NetworkModel& net = dist::NetworkModel{}) {
  SyncRun run;
  dist::LaunchOptions o = distlab::testing::test_options(workers + servers, 20000);
  o.network = net;
  run.ranks.resize(static_cast<std::size_t>(std::max(o.world_size, 16)));
  std::mutex mu;
  distlab::testing::run_ranks(o, [&] {
    const int rank = dist::rank();
    const ps::Layout layout{servers, dist::world_size()};
    ps::PSConfig pc;
    pc.model = c;
    pc.compute_s = 0;
    mlp::MLP model(c, c.seed + 2);
    std::vector<float> w = ps::flat_values(model);
    RankRecord rec;
    dist::barrier();
    dist::reset_stats();
    const double t0 = dist::sim_time();
    if (layout.is_server(rank)) {
      const ps::Range r = ps::shard_range(w.size(), servers, rank);
      rec.offset = r.begin;
      std::vector<float> shard(w.begin() + static_cast<std::ptrdiff_t>(r.begin),
                               w.begin() + static_cast<std::ptrdiff_t>(r.end));
      for (int s = 0; s < steps; ++s) {
        ps::server_step(shard, c.learning_rate, layout);
        rec.after_step.push_back(shard);
      }
    } else {
      const int k = layout.worker_index(rank);
      ps::GradientSource source(pc, data, k, layout.workers(), 1.0);
      std::vector<float> grad(w.size());
      for (int s = 0; s < steps; ++s) {
        source(w, grad);
        ps::push_gradients(grad, layout);
        ps::pull_weights(w, layout);
        rec.after_step.push_back(w);
      }
    }
    rec.step_s = (dist::sim_time() - t0) / steps;
    rec.stats = dist::stats();
    dist::barrier();
    std::lock_guard<std::mutex> g(mu);
    run.ranks[static_cast<std::size_t>(rank)] = std::move(rec);
  });
  return run;
}

/// Every recorded rank's values after every step against the oracle.
inline void expect_sync_values(const SyncRun& run, const std::vector<std::vector<float>>& ref,
                               int first_rank, int end_rank, const std::string& what) {
  for (int r = first_rank; r < end_rank; ++r) {
    const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
    ASSERT_EQ(rec.after_step.size(), ref.size()) << what << ", rank " << r;
    for (std::size_t s = 0; s < ref.size(); ++s) {
      const std::vector<float>& got = rec.after_step[s];
      ASSERT_LE(rec.offset + got.size(), ref[s].size()) << what << ", rank " << r;
      std::vector<float> want(
          ref[s].begin() + static_cast<std::ptrdiff_t>(rec.offset),
          ref[s].begin() + static_cast<std::ptrdiff_t>(rec.offset + got.size()));
      ASSERT_TRUE(distlab::testing::elements_near(got, want, kRelTol, kAbsTol))
          << what << ", rank " << r << (rec.offset > 0 || r == 0 ? " (server shard)" : "")
          << ", after step " << s + 1;
    }
  }
}

inline std::string sync_name(int workers, int servers) {
  return std::to_string(workers) + " workers, " + std::to_string(servers) + " server(s)";
}

/// An asynchronous (or bounded-staleness) run with compute: rank 0 serves, the others work.
struct AsyncRun {
  ps::ServerLog log;
  std::vector<float> weights;  // the server's final weights
  std::vector<int> pushed;     // per worker: gradients pushed (async_worker's return)
  std::vector<double> done_s;  // per worker: its simulated clock when async_worker returned
  std::vector<dist::Stats> stats;
  std::vector<int> update_versions;                // what options.on_update was called with
  std::vector<std::vector<float>> update_weights;  // (version, weights), in call order
};

/// `factors`, when given: worker k's compute factor (one per worker) instead of
/// ps::compute_factor (the straggler the last worker).
inline AsyncRun run_async(const mlp::Config& c, const datasets::Split& data, int workers,
                          int updates, int staleness, double compute_s, double straggler,
                          const std::vector<double>& factors = {}) {
  AsyncRun run;
  run.pushed.assign(static_cast<std::size_t>(workers), -1);
  run.done_s.assign(static_cast<std::size_t>(workers), -1.0);
  run.stats.resize(static_cast<std::size_t>(workers + 1));
  std::mutex mu;
  distlab::testing::run_ranks(distlab::testing::threads_options(workers + 1, 20000), [&] {
    const int rank = dist::rank();
    const ps::Layout layout{1, dist::world_size()};
    ps::PSConfig pc;
    pc.model = c;
    pc.compute_s = compute_s;
    pc.straggler = straggler;
    mlp::MLP model(c, c.seed + 2);
    std::vector<float> w = ps::flat_values(model);
    dist::barrier();
    dist::reset_stats();
    if (rank == 0) {
      ps::AsyncOptions o;
      o.updates = updates;
      o.staleness = staleness;
      o.learning_rate = c.learning_rate;
      std::vector<int> versions;
      std::vector<std::vector<float>> seen;
      o.on_update = [&](int version, std::span<const float> weights) {
        versions.push_back(version);
        seen.emplace_back(weights.begin(), weights.end());
      };
      ps::ServerLog log = ps::async_server(w, o, layout);
      std::lock_guard<std::mutex> g(mu);
      run.log = std::move(log);
      run.weights = w;
      run.update_versions = std::move(versions);
      run.update_weights = std::move(seen);
    } else {
      const int k = layout.worker_index(rank);
      const double factor = factors.empty() ? ps::compute_factor(pc, layout, k)
                                            : factors[static_cast<std::size_t>(k)];
      ps::GradientSource source(pc, data, k, layout.workers(), factor);
      const int n = ps::async_worker(w, source.fn(), layout);
      const double done = dist::sim_time();
      std::lock_guard<std::mutex> g(mu);
      run.pushed[static_cast<std::size_t>(k)] = n;
      run.done_s[static_cast<std::size_t>(k)] = done;
    }
    const dist::Stats st = dist::stats();
    std::lock_guard<std::mutex> g(mu);
    run.stats[static_cast<std::size_t>(rank)] = st;
  });
  return run;
}

/// The asynchronous oracle: replays the server's log in one process. Update i comes from worker
/// w = source - 1 and is that worker's t-th gradient (batch dp::global_batch_index(t, w,
/// workers)), computed at weights version i - staleness_i; the server applies it on its own
/// (w -= learning_rate * g). Returns the weights after the last update; an impossible staleness
/// (negative or beyond the start) is a test failure.
inline std::vector<float> replay_async(const mlp::Config& c, const datasets::Split& data,
                                       int workers, const ps::ServerLog& log) {
  mlp::MLP model(c, c.seed + 2);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  std::vector<std::vector<float>> versions{ps::flat_values(model)};
  std::vector<std::int64_t> t(static_cast<std::size_t>(workers), 0);
  for (std::size_t i = 0; i < log.source.size(); ++i) {
    const int w = log.source[i] - 1;
    const int v = static_cast<int>(i) - log.staleness[i];
    if (w < 0 || w >= workers || v < 0 || v > static_cast<int>(i)) {
      ADD_FAILURE() << "update " << i << ": source " << log.source[i] << ", staleness "
                    << log.staleness[i] << " is impossible";
      return {};
    }
    ps::set_values(model, versions[static_cast<std::size_t>(v)]);
    loader.load(dp::global_batch_index(t[static_cast<std::size_t>(w)]++, w, workers), x, y);
    const mlp::Matrix& logits = model.forward(x);
    mlp::softmax_cross_entropy_forward(logits, y, probs);
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    model.backward(dlogits);
    const std::vector<float> g = ps::flat_grads(model);
    std::vector<float> next = versions.back();
    for (std::size_t j = 0; j < next.size(); ++j) next[j] -= c.learning_rate * g[j];
    versions.push_back(std::move(next));
  }
  return versions.back();
}

/// The lead of each update's worker over the slowest, replayed from the order of the sources:
/// when worker w's t-th push arrives, it computed that gradient after being released with
/// t-1 pushes while the slowest had at most min(pushes) -- the SSP invariant is
/// (t-1) - min over the others' pushes at that moment <= s.
inline int replayed_max_lead(const ps::ServerLog& log, int workers) {
  std::vector<int> pushes(static_cast<std::size_t>(workers), 0);
  int lead = 0;
  for (int src : log.source) {
    const auto k = static_cast<std::size_t>(src - 1);
    const int before = pushes[k];
    const int slowest = *std::min_element(pushes.begin(), pushes.end());
    lead = std::max(lead, before - slowest);
    ++pushes[k];
  }
  return lead;
}

}  // namespace pstest
