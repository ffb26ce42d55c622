// 08_parameter_server: your TODOs. The given helpers (flattening the model) are at the end.
#include "ps.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "distlab/todo.hpp"

namespace ps {

void push_gradients(std::span<const float> grad, const Layout& layout) {
  // BEGIN SOLUTION: give every server its own part of this worker's gradient, one message each
  //   (ps.hpp, Task 2: which part, which tag)
  for (int j = 0; j < layout.servers; ++j) {
    const Range r = shard_range(grad.size(), layout.servers, j);
    dist::send(grad.subspan(r.begin, r.size()), j, kGradTag);
  }
  // END SOLUTION
}

void pull_weights(std::span<float> weights, const Layout& layout) {
  // BEGIN SOLUTION: collect every server's part of the new weights into its place (ps.hpp, Task 2)
  for (int j = 0; j < layout.servers; ++j) {
    const Range r = shard_range(weights.size(), layout.servers, j);
    dist::recv(weights.subspan(r.begin, r.size()), j, kWeightsTag);
  }
  // END SOLUTION
}

void server_step(std::span<float> shard, float learning_rate, const Layout& layout) {
  // BEGIN SOLUTION: one synchronous step of a server: gather every worker's gradient for this
  //   shard, average, update, and send the shard back to everyone (ps.hpp, Task 2; README: why
  //   the mean equals 06's all-reduce)
  const int workers = layout.workers();
  std::vector<float> sum(shard.size(), 0.0f), part(shard.size());
  for (int w = 0; w < workers; ++w) {
    dist::recv(std::span<float>(part), layout.worker_rank(w), kGradTag);
    dist::reduce_into(std::span<float>(sum), std::span<const float>(part), dist::ReduceOp::Sum);
  }
  for (std::size_t i = 0; i < shard.size(); ++i) {
    shard[i] -= learning_rate * (sum[i] / static_cast<float>(workers));
  }
  for (int w = 0; w < workers; ++w) {
    dist::send(std::span<const float>(shard.data(), shard.size()), layout.worker_rank(w),
               kWeightsTag);
  }
  // END SOLUTION
}

bool ssp_may_proceed(int pushes, int slowest, int staleness) {
  // BEGIN SOLUTION: the bounded-staleness rule of ps.hpp (Task 4), including the unbounded case
  return staleness < 0 || pushes - slowest <= staleness;
  // END SOLUTION
}

ServerLog async_server(std::span<float> weights, const AsyncOptions& options,
                       const Layout& layout) {
  // BEGIN SOLUTION: the asynchronous server of ps.hpp (Tasks 3 and 4): apply each push as it
  //   arrives, log it, answer the workers the staleness bound lets go on, then stop everyone
  const std::size_t n = weights.size();
  const int workers = layout.workers();
  std::vector<float> msg(n + 1);
  std::vector<int> pushes(static_cast<std::size_t>(workers), 0);
  std::vector<char> waiting(static_cast<std::size_t>(workers), 0);
  ServerLog log;
  int version = 0;
  auto reply = [&](int w, float v) {
    std::copy(weights.begin(), weights.end(), msg.begin());
    msg[n] = v;
    dist::send(std::span<const float>(msg), layout.worker_rank(w), kReplyTag);
  };
  while (version < options.updates) {
    const int src = dist::recv_any(std::span<float>(msg), kPushTag);
    const int w = layout.worker_index(src);
    log.staleness.push_back(version - static_cast<int>(msg[n]));
    for (std::size_t i = 0; i < n; ++i) weights[i] -= options.learning_rate * msg[i];
    ++version;
    ++pushes[static_cast<std::size_t>(w)];
    waiting[static_cast<std::size_t>(w)] = 1;
    log.source.push_back(src);
    log.time.push_back(dist::sim_time());
    if (options.on_update) options.on_update(version, weights);
    if (version == options.updates) break;
    const int slowest = *std::min_element(pushes.begin(), pushes.end());
    for (int q = 0; q < workers; ++q) {
      const auto k = static_cast<std::size_t>(q);
      if (waiting[k] && ssp_may_proceed(pushes[k], slowest, options.staleness)) {
        waiting[k] = 0;
        log.max_lead = std::max(log.max_lead, pushes[k] - slowest);
        reply(q, static_cast<float>(version));
      }
    }
  }
  int still_computing = 0;
  for (int q = 0; q < workers; ++q) {
    if (waiting[static_cast<std::size_t>(q)]) {
      reply(q, kStopVersion);
    } else {
      ++still_computing;
    }
  }
  for (; still_computing > 0; --still_computing) {
    const int src = dist::recv_any(std::span<float>(msg), kPushTag);
    reply(layout.worker_index(src), kStopVersion);
  }
  return log;
  // END SOLUTION
}

int async_worker(std::span<float> weights, const GradientFn& gradient, const Layout& /*layout*/) {
  // BEGIN SOLUTION: the asynchronous worker of ps.hpp (Task 3): compute, push with the version
  //   the gradient was computed on, wait for the answer, until told to stop
  const std::size_t n = weights.size();
  std::vector<float> msg(n + 1), grad(n);
  float version = 0;
  int pushed = 0;
  for (;;) {
    gradient(std::span<const float>(weights.data(), n), std::span<float>(grad));
    std::copy(grad.begin(), grad.end(), msg.begin());
    msg[n] = version;
    dist::send(std::span<const float>(msg), 0, kPushTag);
    ++pushed;
    dist::recv(std::span<float>(msg), 0, kReplyTag);
    if (msg[n] == kStopVersion) break;
    std::copy(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(n), weights.begin());
    version = msg[n];
  }
  return pushed;
  // END SOLUTION
}

// =============================================================================================
// Given code.

std::vector<float> flat_values(const mlp::MLP& model) {
  std::vector<float> out;
  for (const mlp::Parameter* p : model.parameters())
    out.insert(out.end(), p->value.data(), p->value.data() + p->numel());
  return out;
}

std::vector<float> flat_grads(const mlp::MLP& model) {
  std::vector<float> out;
  for (const mlp::Parameter* p : model.parameters())
    out.insert(out.end(), p->grad.data(), p->grad.data() + p->numel());
  return out;
}

void set_values(mlp::MLP& model, std::span<const float> flat) {
  std::size_t at = 0;
  for (mlp::Parameter* p : model.parameters()) {
    const auto n = static_cast<std::size_t>(p->numel());
    if (at + n > flat.size()) {
      throw std::invalid_argument("ps::set_values: " + std::to_string(flat.size()) +
                                  " values for a model of more parameters");
    }
    std::memcpy(p->value.data(), flat.data() + at, n * sizeof(float));
    at += n;
  }
  if (at != flat.size()) {
    throw std::invalid_argument("ps::set_values: " + std::to_string(flat.size()) +
                                " values for a model of " + std::to_string(at) + " parameters");
  }
}

}  // namespace ps
