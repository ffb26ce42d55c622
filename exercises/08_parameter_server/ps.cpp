// 08_parameter_server: your TODOs. The given helpers (flattening the model) are at the end.
#include "ps.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "distlab/todo.hpp"

namespace ps {

void push_gradients(std::span<const float> grad, const Layout& layout) {
  DISTLAB_TODO("give every server its own part of this worker's gradient, one message each "
               "(ps.hpp, Task 2: which part, which tag)");
}

void pull_weights(std::span<float> weights, const Layout& layout) {
  DISTLAB_TODO("collect every server's part of the new weights into its place (ps.hpp, Task 2)");
}

void server_step(std::span<float> shard, float learning_rate, const Layout& layout) {
  DISTLAB_TODO("one synchronous step of a server: gather every worker's gradient for this shard, "
               "average, update, and send the shard back to everyone (ps.hpp, Task 2; README: why "
               "the mean equals 06's all-reduce)");
}

bool ssp_may_proceed(int pushes, int slowest, int staleness) {
  DISTLAB_TODO("the bounded-staleness rule of ps.hpp (Task 4), including the unbounded case");
}

ServerLog async_server(std::span<float> weights, const AsyncOptions& options,
                       const Layout& layout) {
  DISTLAB_TODO("the asynchronous server of ps.hpp (Tasks 3 and 4): apply each push as it arrives, "
               "log it, answer the workers the staleness bound lets go on, then stop everyone");
}

int async_worker(std::span<float> weights, const GradientFn& gradient, const Layout& /*layout*/) {
  DISTLAB_TODO("the asynchronous worker of ps.hpp (Task 3): compute, push with the version the "
               "gradient was computed on, wait for the answer, until told to stop");
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
