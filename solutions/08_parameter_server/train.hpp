// Given code for 08_parameter_server: the workers' gradients (05's model on 06's batch
// sharding, with modelled compute time), the training runs of the three modes, and the
// simulated step of the three layouts (one server, k servers, ring all-reduce).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "datasets/classification.hpp"
#include "datasets/loader.hpp"
#include "ps.hpp"

namespace ps {

enum class Mode { Sync, Async, Ssp };
const char* to_string(Mode m);

/// The settings of a run. The ranks are Layout{servers, world_size}: async and ssp use 1 server.
struct PSConfig {
  mlp::Config model;        // 05's model, data and SGD settings; niters = synchronous steps
  Mode mode = Mode::Sync;   // sync, async or ssp
  int servers = 1;          // k servers (sync only)
  int staleness = 2;        // the SSP bound s (ssp only)
  double compute_s = 1e-3;  // simulated seconds of one gradient on a worker of factor 1
  double straggler = 1.0;   // compute factor of the LAST worker (4 = four times slower)
  /// Gradients a run computes in all: niters x workers (sync: niters steps of every worker;
  /// async / ssp: that many updates, so every mode processes the same number of gradients).
  int gradients(int workers) const { return model.niters * workers; }
  /// Throws std::invalid_argument saying which field is wrong (for `world` ranks).
  void validate(int world) const;
  Layout layout(int world) const { return Layout{mode == Mode::Sync ? servers : 1, world}; }
};

/// Worker `worker`'s gradients: its t-th call loads global batch dp::global_batch_index(t, worker,
/// workers) (06's sharding), computes the model's gradient at the given weights (05's forward,
/// loss, backward) and charges compute_s x factor to the simulated clock (span "gradient").
class GradientSource {
 public:
  GradientSource(const PSConfig& config, const datasets::Split& data, int worker, int workers,
                 double factor);
  void operator()(std::span<const float> weights, std::span<float> grad);
  GradientFn fn() {
    return [this](std::span<const float> w, std::span<float> g) { (*this)(w, g); };
  }
  float last_loss() const { return last_loss_; }

 private:
  mlp::MLP model_;
  datasets::BatchLoader loader_;
  int worker_, workers_;
  double seconds_;
  std::int64_t t_ = 0;
  mlp::Matrix x_, probs_, dlogits_;
  mlp::Labels y_;
  float last_loss_ = 0;
};

/// The compute factor of worker w: 1, or config.straggler for the last worker.
double compute_factor(const PSConfig& config, const Layout& layout, int worker);

/// A point of a run's log: after `gradients` gradients applied, the simulated time then and the
/// held-out loss of the weights.
struct LogPoint {
  int gradients = 0;
  double sim_s = 0;
  float test_loss = 0;
};

struct RunResult {
  std::vector<LogPoint> log;   // every model.log_every steps (sync) / log_every x workers updates
  ServerLog server;            // async and ssp: the server's log
  std::vector<float> weights;  // the final weights
  double sim_s = 0;            // simulated time when the last update was applied
};

/// Trains in config.mode on every rank (inside dist::launch): every rank builds the model from
/// seed model.seed + 2 (so all start equal); sync: server j keeps shard j and runs server_step,
/// workers compute, push_gradients, pull_weights; async / ssp: rank 0 runs async_server, the
/// workers async_worker. Calls `out` for every log point on the rank that measures it (sync:
/// the first worker, async: the server). Returns the result on rank 0 (weights: on every rank).
RunResult train_ps(const PSConfig& config, const datasets::Split& data,
                   const std::function<void(const LogPoint&)>& out = {});

/// One synchronous step of every layout on n floats with free compute, from a barrier: the
/// simulated seconds until the last rank holds the new weights.
///   one server, w workers:  2 w (alpha + n beta)                   world w + 1
///   k servers (k | n):      (2 w + k - 1)(alpha + (n / k) beta)    world w + k
///   ring all-reduce:        2 (w - 1)(alpha + (n / w) beta)        world w (dist::all_reduce)
/// The measured values are what the program prints and plots; the formulas are the tests'.
double measure_server_step(int workers, int servers, std::size_t n, const dist::NetworkModel& net);
double measure_ring_step(int workers, std::size_t n, const dist::NetworkModel& net);
double formula_server_step(int workers, int servers, std::size_t n, const dist::NetworkModel& net);
double formula_ring_step(int workers, std::size_t n, const dist::NetworkModel& net);

/// "staleness 0: 12 ####" lines, one per value from 0 to the largest.
std::string staleness_histogram(const std::vector<int>& staleness);

}  // namespace ps
