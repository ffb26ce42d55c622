// Given code for 08_parameter_server (see train.hpp).
#include "train.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

#include "data_parallel.hpp"

namespace ps {

const char* to_string(Mode m) {
  switch (m) {
    case Mode::Sync:
      return "sync";
    case Mode::Async:
      return "async";
    case Mode::Ssp:
      return "ssp";
  }
  return "?";
}

void PSConfig::validate(int world) const {
  model.validate();
  const int k = mode == Mode::Sync ? servers : 1;
  if (k < 1) throw std::invalid_argument("servers must be >= 1, got " + std::to_string(servers));
  if (world - k < 1) {
    throw std::invalid_argument(
        "world size " + std::to_string(world) + " leaves no worker beside " + std::to_string(k) +
        " server(s): use --world-size " + std::to_string(k + 1) + " or more");
  }
  if (!(compute_s >= 0)) throw std::invalid_argument("compute_s must be >= 0");
  if (!(straggler >= 1)) throw std::invalid_argument("straggler must be >= 1");
  if (mode == Mode::Ssp && staleness < 0) {
    throw std::invalid_argument("ssp needs a staleness bound >= 0 (async is the unbounded case)");
  }
}

GradientSource::GradientSource(const PSConfig& config, const datasets::Split& data, int worker,
                               int workers, double factor)
    : model_(config.model, config.model.seed + 2),
      loader_(data.train, config.model.batch_size, config.model.seed + 3),
      worker_(worker),
      workers_(workers),
      seconds_(config.compute_s * factor) {}

void GradientSource::operator()(std::span<const float> weights, std::span<float> grad) {
  set_values(model_, weights);
  loader_.load(dp::global_batch_index(t_++, worker_, workers_), x_, y_);
  const mlp::Matrix& logits = model_.forward(x_);
  last_loss_ = mlp::softmax_cross_entropy_forward(logits, y_, probs_);
  mlp::softmax_cross_entropy_backward(probs_, y_, dlogits_);
  model_.backward(dlogits_);
  const std::vector<float> g = flat_grads(model_);
  std::copy(g.begin(), g.end(), grad.begin());
  dist::sim_compute(seconds_, "gradient");
}

double compute_factor(const PSConfig& config, const Layout& layout, int worker) {
  return worker == layout.workers() - 1 ? config.straggler : 1.0;
}

RunResult train_ps(const PSConfig& config, const datasets::Split& data,
                   const std::function<void(const LogPoint&)>& out) {
  const int rank = dist::rank();
  const Layout layout = config.layout(dist::world_size());
  config.validate(layout.world);
  const int workers = layout.workers();
  mlp::MLP model(config.model, config.model.seed + 2);
  std::vector<float> weights = flat_values(model);
  RunResult res;
  auto log_point = [&](int gradients, double t, std::span<const float> w) {
    set_values(model, w);
    LogPoint p{gradients, t, mlp::evaluate_loss(model, data.test)};
    res.log.push_back(p);
    if (out) out(p);
  };
  dist::barrier();
  const double t0 = dist::sim_time();
  if (config.mode == Mode::Sync) {
    const int steps = config.model.niters;
    if (layout.is_server(rank)) {
      const Range r = shard_range(weights.size(), layout.servers, rank);
      std::span<float> shard(weights.data() + r.begin, r.size());
      for (int s = 0; s < steps; ++s) server_step(shard, config.model.learning_rate, layout);
    } else {
      const int w = layout.worker_index(rank);
      GradientSource source(config, data, w, workers, compute_factor(config, layout, w));
      std::vector<float> grad(weights.size());
      if (w == 0) log_point(0, 0, weights);
      for (int s = 0; s < steps; ++s) {
        source(weights, grad);
        push_gradients(grad, layout);
        pull_weights(weights, layout);
        const bool last = s + 1 == steps;
        if (w == 0 && ((s + 1) % config.model.log_every == 0 || last)) {
          log_point((s + 1) * workers, dist::sim_time() - t0, weights);
        }
      }
    }
    // Every worker holds the final weights; the run ends when the last one has them.
    std::vector<double> end{dist::sim_time() - t0};
    dist::all_reduce(std::span<double>(end), dist::ReduceOp::Max);
    res.sim_s = end[0];
  } else {
    AsyncOptions o;
    o.updates = config.gradients(workers);
    o.staleness = config.mode == Mode::Ssp ? config.staleness : -1;
    o.learning_rate = config.model.learning_rate;
    if (rank == 0) {
      const int every = config.model.log_every * workers;
      log_point(0, 0, weights);
      o.on_update = [&](int version, std::span<const float> w) {
        if (version % every == 0 || version == o.updates) {
          log_point(version, dist::sim_time() - t0, w);
        }
      };
      res.server = async_server(weights, o, layout);
      res.sim_s = res.server.time.empty() ? 0 : res.server.time.back() - t0;
    } else {
      const int w = layout.worker_index(rank);
      GradientSource source(config, data, w, workers, compute_factor(config, layout, w));
      async_worker(weights, source.fn(), layout);
    }
    // The server's weights are the result.
    dist::broadcast(std::span<float>(weights), 0);
  }
  res.weights = weights;
  return res;
}

// ---- the three layouts on the simulated clock ------------------------------------------------

double measure_server_step(int workers, int servers, std::size_t n, const dist::NetworkModel& net) {
  dist::LaunchOptions o;
  o.world_size = workers + servers;
  o.network = net;
  double step = 0;
  std::mutex mu;
  dist::launch(o, [&] {
    const Layout layout{servers, dist::world_size()};
    std::vector<float> weights(n, 1.0f), grad(n, 0.5f);
    dist::barrier();
    const double t0 = dist::sim_time();
    if (layout.is_server(dist::rank())) {
      const Range r = shard_range(n, servers, dist::rank());
      server_step(std::span<float>(weights.data() + r.begin, r.size()), 0.1f, layout);
    } else {
      push_gradients(grad, layout);
      pull_weights(weights, layout);
    }
    const double t = dist::sim_time() - t0;
    std::lock_guard<std::mutex> g(mu);
    step = std::max(step, t);
  });
  return step;
}

double measure_ring_step(int workers, std::size_t n, const dist::NetworkModel& net) {
  dist::LaunchOptions o;
  o.world_size = workers;
  o.network = net;
  double step = 0;
  std::mutex mu;
  dist::launch(o, [&] {
    std::vector<float> grad(n, 0.5f);
    dist::barrier();
    const double t0 = dist::sim_time();
    dist::all_reduce(std::span<float>(grad), dist::ReduceOp::Avg);
    const double t = dist::sim_time() - t0;
    std::lock_guard<std::mutex> g(mu);
    step = std::max(step, t);
  });
  return step;
}

double formula_server_step(int workers, int servers, std::size_t n, const dist::NetworkModel& net) {
  const double c = net.latency_s + static_cast<double>(n / static_cast<std::size_t>(servers)) *
                                       4.0 / net.bandwidth_Bps;
  return (2.0 * workers + servers - 1) * c;
}

double formula_ring_step(int workers, std::size_t n, const dist::NetworkModel& net) {
  if (workers == 1) return 0;
  const double chunk = static_cast<double>(n) / workers * 4.0;
  return 2.0 * (workers - 1) * (net.latency_s + chunk / net.bandwidth_Bps);
}

std::string staleness_histogram(const std::vector<int>& staleness) {
  if (staleness.empty()) return "";
  const int top = *std::max_element(staleness.begin(), staleness.end());
  std::vector<int> count(static_cast<std::size_t>(top + 1), 0);
  for (int s : staleness) ++count[static_cast<std::size_t>(s)];
  const int most = *std::max_element(count.begin(), count.end());
  std::string out;
  char line[64];
  for (int s = 0; s <= top; ++s) {
    const int c = count[static_cast<std::size_t>(s)];
    std::snprintf(line, sizeof line, "staleness %3d: %6d ", s, c);
    out += line;
    out += std::string(static_cast<std::size_t>(most > 0 ? (c * 50 + most - 1) / most : 0), '#');
    out += '\n';
  }
  return out;
}

}  // namespace ps
