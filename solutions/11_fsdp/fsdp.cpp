#include "fsdp.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "distlab/todo.hpp"

namespace fsdp {

void shard_unit(std::span<const float> full, int dp, int rank, std::span<float> shard) {
  // BEGIN SOLUTION: copy this rank's equal part of the zero-padded unit into shard, padding 0
  //   (header: shard_unit; model.hpp: the picture of a unit and its shards)
  const std::size_t c = padded(full.size(), dp) / static_cast<std::size_t>(dp);
  if (shard.size() != c) {
    throw std::invalid_argument("shard_unit: shard has " + std::to_string(shard.size()) +
                                " elements, the shard of " + std::to_string(full.size()) +
                                " over " + std::to_string(dp) + " ranks has " + std::to_string(c));
  }
  const std::size_t begin = static_cast<std::size_t>(rank) * c;
  for (std::size_t k = 0; k < c; ++k) {
    shard[k] = begin + k < full.size() ? full[begin + k] : 0.0f;
  }
  // END SOLUTION
}

void adam_update(std::span<float> w, std::span<const float> g, std::span<float> m,
                 std::span<float> v, std::int64_t t, const AdamConfig& config) {
  // BEGIN SOLUTION: one Adam step with bias correction on every element (model.hpp: AdamConfig)
  if (g.size() != w.size() || m.size() != w.size() || v.size() != w.size()) {
    throw std::invalid_argument("adam_update: w, g, m and v must have equal sizes");
  }
  const float c1 = 1.0f - std::pow(config.beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(config.beta2, static_cast<float>(t));
  for (std::size_t k = 0; k < w.size(); ++k) {
    m[k] = config.beta1 * m[k] + (1.0f - config.beta1) * g[k];
    v[k] = config.beta2 * v[k] + (1.0f - config.beta2) * g[k] * g[k];
    const float m_hat = m[k] / c1;
    const float v_hat = v[k] / c2;
    w[k] -= config.learning_rate * m_hat / (std::sqrt(v_hat) + config.eps);
  }
  // END SOLUTION
}

struct Fsdp::State {
  // BEGIN SOLUTION DECL: whatever forward, backward and step share, e.g. per unit
  std::vector<Event> gathered;  // recorded on comm after unit u's all-gather
  std::vector<Event> computed;  // recorded on compute after unit u's forward, then its backward
  std::vector<Event> reduced;   // recorded on comm after unit u's reduce-scatter
  bool bf16_comm = false;       // FsdpConfig::bf16_comm, for the helpers
  // END SOLUTION
};

Fsdp::Fsdp(Model& model, Shards& shards, UnitBuffers& buffers, Stream& compute, Stream& comm,
           const FsdpConfig& config)
    : model_(model),
      shards_(shards),
      buffers_(buffers),
      compute_(compute),
      comm_(comm),
      config_(config),
      state_(std::make_unique<State>()) {
  if (config_.prefetch < 0) throw std::invalid_argument("FsdpConfig::prefetch must be >= 0");
  // BEGIN SOLUTION: whatever the passes need to order the two streams, one per unit
  const auto units = static_cast<std::size_t>(model_.num_units());
  for (std::size_t u = 0; u < units; ++u) {
    state_->gathered.emplace_back("gathered " + std::to_string(u));
    state_->computed.emplace_back("computed " + std::to_string(u));
    state_->reduced.emplace_back("reduced " + std::to_string(u));
  }
  state_->bf16_comm = config_.bf16_comm;
  // END SOLUTION
}

Fsdp::~Fsdp() = default;

// BEGIN SOLUTION DECL: helpers of your own, if you want them
namespace {
/// Acquires and all-gathers unit u's weights on comm, after unit `after`'s kernel (-1: none); in
/// bf16 from the shard's bf16 copy made on comm just before.
void gather(int u, int after, Shards& shards, UnitBuffers& buffers, Stream& comm, Fsdp::State& st) {
  if (after >= 0) comm.wait_event(st.computed[static_cast<std::size_t>(after)]);
  if (st.bf16_comm) {
    DeviceBuffer<bf16>& full = buffers.acquire_weights_bf16(u);
    launch_convert(shards.w[static_cast<std::size_t>(u)], buffers.weight_shard_bf16(u), comm);
    dist::device::all_gather(buffers.weight_shard_bf16(u), full, comm);
    st.gathered[static_cast<std::size_t>(u)].record(comm);
    return;
  }
  DeviceBuffer<float>& full = buffers.acquire_weights(u);
  dist::device::all_gather(shards.w[static_cast<std::size_t>(u)], full, comm);
  st.gathered[static_cast<std::size_t>(u)].record(comm);
}
}  // namespace
// END SOLUTION

void Fsdp::forward() {
  // BEGIN SOLUTION: every unit's forward on compute, its weights gathered on comm before (within
  //   the prefetch window; bf16 with bf16_comm) and released after (header: the contract of Fsdp)
  const int units = model_.num_units();
  int issued = 0;  // units 0 .. issued-1 have been gathered in this pass
  for (int u = 0; u < units; ++u) {
    for (; issued < units && issued <= u + config_.prefetch; ++issued)
      gather(issued, u - 1, shards_, buffers_, comm_, *state_);
    compute_.wait_event(state_->gathered[static_cast<std::size_t>(u)]);
    if (config_.bf16_comm)
      model_.launch_forward(u, buffers_.weights_bf16(u), compute_, buffers_);
    else
      model_.launch_forward(u, buffers_.weights(u), compute_, buffers_);
    state_->computed[static_cast<std::size_t>(u)].record(compute_);
    if (config_.reshard_after_forward) buffers_.release_weights(u);
  }
  // END SOLUTION
}

void Fsdp::backward() {
  // BEGIN SOLUTION: every unit's backward on compute, last unit first, each full gradient (bf16
  //   with bf16_comm) reduce-scattered on comm into the unit's fp32 gradient shard (header: Fsdp)
  const int units = model_.num_units();
  int issued = 0;  // positions 0 .. issued-1 of the backward order have been gathered
  for (int q = 0; q < units; ++q) {
    const int u = units - 1 - q;
    const auto uu = static_cast<std::size_t>(u);
    if (config_.reshard_after_forward) {
      for (; issued < units && issued <= q + config_.prefetch; ++issued)
        gather(units - 1 - issued, q > 0 ? u + 1 : units - 1, shards_, buffers_, comm_, *state_);
      compute_.wait_event(state_->gathered[uu]);
    }
    if (config_.bf16_comm) {
      DeviceBuffer<bf16>& grad = buffers_.acquire_gradient_bf16(u);
      model_.launch_backward(u, buffers_.weights_bf16(u), grad, compute_, buffers_);
      state_->computed[uu].record(compute_);
      buffers_.release_weights(u);
      comm_.wait_event(state_->computed[uu]);
      dist::device::reduce_scatter(grad, buffers_.gradient_shard_bf16(u), comm_,
                                   dist::ReduceOp::Avg);
      launch_convert(buffers_.gradient_shard_bf16(u), shards_.g[uu], comm_);
      state_->reduced[uu].record(comm_);
      buffers_.release_gradient(u);
      continue;
    }
    DeviceBuffer<float>& grad = buffers_.acquire_gradient(u);
    model_.launch_backward(u, buffers_.weights(u), grad, compute_, buffers_);
    state_->computed[uu].record(compute_);
    buffers_.release_weights(u);
    comm_.wait_event(state_->computed[uu]);
    dist::device::reduce_scatter(grad, shards_.g[uu], comm_, dist::ReduceOp::Avg);
    state_->reduced[uu].record(comm_);
    buffers_.release_gradient(u);
  }
  // END SOLUTION
}

void Fsdp::step() {
  ++t_;
  // BEGIN SOLUTION: Adam on every unit's shards on compute, unit L-1 first, each after its own
  //   reduce-scatter (header: the contract of Fsdp)
  for (int u = model_.num_units() - 1; u >= 0; --u) {
    compute_.wait_event(state_->reduced[static_cast<std::size_t>(u)]);
    model_.launch_adam(u, shards_, t_, config_.adam, compute_);
  }
  // END SOLUTION
}

}  // namespace fsdp
