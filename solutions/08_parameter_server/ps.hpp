// 08_parameter_server: centralized training with parameter servers, synchronous, asynchronous
// and with bounded staleness, on 05's MLP and 06's batch sharding.
//
// Ranks 0 .. servers-1 are servers, the other ranks are workers (Layout). A worker computes a
// gradient on its own batches and PUSHES it to the servers; a server owns a consecutive shard of
// the flat parameter vector (every parameter of the model, in parameters() order), applies the
// SGD update to its shard and the workers PULL the new weights back (the two verbs of ps-lite).
//
// Your tasks, in order (see README.md):
//   1. Given: shard_range, which parameters each server owns (the split of 01's chunk_bounds and
//      03's and 04's shard_range).
//   2. Synchronous: push_gradients and pull_weights (worker side), server_step (server side):
//      every step the server averages all workers' gradients, so the weights equal 06's
//      all-reduce data parallelism.
//   3. Asynchronous: async_worker and async_server: the server applies each gradient as soon as
//      it arrives (dist::recv_any) and answers that worker alone; it records each update's
//      staleness.
//   4. Bounded staleness (SSP): ssp_may_proceed, and async_server holding back a worker that is
//      too far ahead of the slowest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "dist/dist.hpp"
#include "mlp.hpp"

namespace ps {

/// Message tags: a gradient can never be taken for weights.
inline constexpr int kGradTag = 11;     // synchronous: worker -> server j, shard j of a gradient
inline constexpr int kWeightsTag = 12;  // synchronous: server j -> worker, shard j of the weights
inline constexpr int kPushTag = 13;     // asynchronous: worker -> server, [gradient..., version]
inline constexpr int kReplyTag = 14;    // asynchronous: server -> worker, [weights..., version]
/// The version field of a reply that tells the worker to stop (instead of new weights).
inline constexpr float kStopVersion = -1.0f;

/// The ranks of a job: servers first, then workers.
struct Layout {
  int servers = 1;  // k: ranks 0 .. k-1
  int world = 2;    // dist::world_size()
  int workers() const { return world - servers; }
  bool is_server(int rank) const { return rank < servers; }
  int worker_index(int rank) const { return rank - servers; }  // 0 .. workers()-1
  int worker_rank(int index) const { return servers + index; }
};

/// Parameters [begin, end) of the flat parameter vector.
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

/// Given. Server `index`'s shard of n parameters over `parts` servers: consecutive shards in
/// server order that cover [0, n) exactly once, sizes differing by at most one, the larger ones
/// first (n = 10 over 3 servers: 4, 3, 3 parameters).
inline Range shard_range(std::size_t n, int parts, int index) {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = n / p, extra = n % p;
  const std::size_t begin = i * base + (i < extra ? i : extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// ---- Task 2: synchronous, k servers -----------------------------------------------------------

/// Worker: sends shard j of `grad` (shard_range(grad.size(), servers, j)) to server j, for every
/// server, with kGradTag. One message per server, nothing else.
void push_gradients(std::span<const float> grad, const Layout& layout);

/// Worker: receives shard j of the new weights from server j into the same positions of
/// `weights`, for every server, with kWeightsTag.
void pull_weights(std::span<float> weights, const Layout& layout);

/// Server: one synchronous step on its `shard` of the weights. Receives every worker's gradient
/// for this shard (kGradTag), averages them (the sum over the workers divided by the number of
/// workers, summed with dist::reduce_into), applies SGD (shard -= learning_rate * mean) and sends
/// the new shard to every worker (kWeightsTag). The parts are added in worker order (0, 1, ...)
/// whatever order they arrive in: float addition is not associative, and a fixed order gives the
/// same bits on every run and backend.
void server_step(std::span<float> shard, float learning_rate, const Layout& layout);

// ---- Tasks 3 and 4: asynchronous and bounded staleness (one server, rank 0) --------------------

/// How the asynchronous server runs.
struct AsyncOptions {
  int updates = 100;           // gradients the server applies; then it stops every worker
  int staleness = -1;          // SSP bound s: >= 0 bounded staleness, < 0 fully asynchronous
  float learning_rate = 0.1f;  // each gradient is applied on its own: w -= learning_rate * g
  /// When set, called after each applied update with the new version and weights (the kit's
  /// training log measures the test loss there; it costs no simulated time).
  std::function<void(int version, std::span<const float> weights)> on_update;
};

/// What the server saw, one entry per applied update, in order.
struct ServerLog {
  std::vector<int> source;     // the worker rank the gradient came from
  std::vector<int> staleness;  // server version when applied minus the version it was computed on
  std::vector<double> time;    // the server's sim_time() right after the update
  int max_lead = 0;  // the largest (pushes of a worker - pushes of the slowest) when released
};

/// Task 4. Bounded staleness: may a worker that has pushed `pushes` gradients compute its next
/// one while the slowest worker has pushed `slowest`? Yes when it is at most `staleness` pushes
/// ahead; always when staleness < 0. staleness 0 is lock-step (synchronous).
bool ssp_may_proceed(int pushes, int slowest, int staleness);

/// Task 3 (server, rank 0). The server's version is the number of updates applied so far (0 at
/// the start). What must hold:
///   * it applies exactly options.updates gradients to `weights`, each on its own, in the order the
///     pushes arrive from whichever worker (dist::recv_any, kPushTag); the log has one entry per
///     applied update, in that order (source, staleness, time; options.on_update after each);
///   * a worker that pushed waits for its reply (kReplyTag, [weights..., version]); replies go out
///     only right after an update, to the waiting workers that ssp_may_proceed lets go on, in
///     worker order; max_lead is the largest lead of a worker at the moment it is answered;
///   * no reply carries weights after the last update: then every worker gets exactly one stop
///     reply (version kStopVersion), the waiting ones at once in worker order, the others when
///     their next push arrives (that gradient is not applied).
/// Returns the log.
ServerLog async_server(std::span<float> weights, const AsyncOptions& options, const Layout& layout);

/// Computes a gradient of the model at `weights` into `grad` (the kit gives one: gradient_fn).
using GradientFn = std::function<void(std::span<const float> weights, std::span<float> grad)>;

/// Task 3 (worker). Starting from `weights` (version 0, the same on every rank), repeat: compute a
/// gradient at the current weights, push [gradient..., version it was computed on] to the server,
/// wait for the reply; stop when the reply says stop, otherwise continue from the weights and
/// version it carries. On return `weights` holds the last weights the worker was answered with
/// (the initial ones if no reply carried weights): a stop reply's weight slots are not taken.
/// Returns the number of gradients pushed.
int async_worker(std::span<float> weights, const GradientFn& gradient, const Layout& layout);

// ---- Given --------------------------------------------------------------------------------------

/// Every parameter of `model` in parameters() order, flattened (values or gradients).
std::vector<float> flat_values(const mlp::MLP& model);
std::vector<float> flat_grads(const mlp::MLP& model);
/// Writes a flat vector back into the parameters' values.
void set_values(mlp::MLP& model, std::span<const float> flat);

}  // namespace ps
