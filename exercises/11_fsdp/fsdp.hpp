// 11_fsdp: fully sharded data parallelism (ZeRO-3), as PyTorch FSDP and DeepSpeed ZeRO-3 train
// large models.
//
// Every rank of the data-parallel group keeps 1/dp of every unit: its shard of the weights, of the
// gradients and of Adam's moments (model.hpp: the picture of a unit and its shards). A unit's full
// weights exist only while a kernel needs them: all-gathered on the communication stream before
// the unit computes, released after. Backward reduce-scatters each unit's full gradient so every
// rank ends with the mean gradient of its own shard, and Adam updates each shard where it lives.
//
// Your tasks, in order (README.md):
//   1. shard_unit: a rank's shard of a flattened unit (padding zero).
//   2. adam_update: Adam with bias correction on one shard.
//   3. Fsdp::forward / backward: gather before use, release after, reduce-scatter of gradients,
//      ordered by events between the compute and the communication stream.
//   4. Fsdp::forward / backward with prefetch: gathers issued up to `prefetch` units ahead.
//   5. Fsdp::step: Adam on every shard, each after its unit's reduce-scatter.
//   6. FsdpConfig::bf16_comm in forward and backward: the same passes communicating in bf16.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model.hpp"

namespace fsdp {

/// Task 1. Writes rank `rank`'s shard of a unit whose n = full.size() weights are flattened
/// row-major: the unit padded with zeros to padded(n, dp) elements, cut into dp equal shards of
/// c = padded(n, dp) / dp elements, shard r being elements [r c, (r + 1) c). shard.size() must be
/// c (else std::invalid_argument); every element of `shard` is written (padding positions: 0,
/// whatever the buffer held).
void shard_unit(std::span<const float> full, int dp, int rank, std::span<float> shard);

/// Task 2. One Adam step (model.hpp: AdamConfig, the update rule) on one shard: w, g, m, v of
/// equal sizes (else std::invalid_argument, thrown before anything is written: a refused call
/// changes nothing), t >= 1 the step number. Element-wise, so a shard's update equals the same
/// elements of the whole unit's update.
void adam_update(std::span<float> w, std::span<const float> g, std::span<float> m,
                 std::span<float> v, std::int64_t t, const AdamConfig& config);

/// The settings of FSDP (PyTorch FSDP2's names where it has them).
struct FsdpConfig {
  /// Units whose gathers may be in flight or done ahead of the unit that computes (0: none, a unit
  /// is gathered only when it is next). The window bounds the memory: with reshard_after_forward, at
  /// most prefetch + 1 units' full weights are held at once (and one full gradient in backward).
  int prefetch = 0;
  /// Release each unit's full weights after its forward (and gather them again in backward): less
  /// memory, more traffic. false: keep them from forward until the unit's backward is done.
  bool reshard_after_forward = true;
  /// Communicate in bf16 (PyTorch FSDP2: MixedPrecisionPolicy with param_dtype and reduce_dtype
  /// torch.bfloat16): the gathers and the reduce-scatters move bf16, half the bytes; the full
  /// buffers are bf16 (the _bf16 forms of UnitBuffers and of the kernels, 2 bytes an element in the
  /// meter); the shards w and g, Adam's moments and the update stay fp32.
  bool bf16_comm = false;
  AdamConfig adam{};
};

/// Tasks 3-5. One rank's FSDP training step on a Model, inside dist::launch (every rank of the
/// world is a data-parallel rank; dp = dist::world_size()).
///
/// Contract (what the tests observe):
///   * Values: after forward, loss (given), backward and step, the shards hold what one process
///     training the whole model with Adam on the whole batch holds (float32 rounding).
///   * Streams: every kernel (Model::launch_*) runs on `compute`; every collective (the stream
///     forms of dist::device::all_gather and reduce_scatter) on `comm`; an operation that uses a
///     buffer another stream wrote is ordered after it by an Event (the stream-race detector of the
///     simulated device reports a missing one). The host never blocks (no synchronize).
///   * Units run in order: forward 0 .. L-1, backward L-1 .. 0. A unit's full weights come from
///     UnitBuffers::acquire_weights (which logs the gather) filled by an all-gather of the weight
///     shards; its full gradient from acquire_gradient, reduce-scattered (the mean over the ranks)
///     into its gradient shard. Each full buffer is released as soon as the host has enqueued the
///     last operation that uses it (the release comes before the next unit's compute is launched).
///   * Window: when unit i (in the pass's order) is launched, the gathers of the next `prefetch`
///     units of the pass have been issued (as far as the pass goes; backward's window does not
///     reach into forward's and the reverse), and no gather is ever issued for a unit more than
///     `prefetch` ahead of the unit being launched. With reshard_after_forward false, backward
///     gathers nothing.
///   * Memory is reused, not conjured: a gather fills the memory the unit computed before it gives
///     back, so it starts only after the kernel of the unit launched last before the gather was
///     issued has ended (an event; the comm stream waits, the host does not): in forward the
///     previous unit's forward, in backward the previous unit's backward, and for backward's first
///     gathers the last unit's forward. Only forward's first prefetch + 1 gathers wait for
///     nothing. In bf16 that memory includes the bf16 copy of the shard the gather sends (held
///     with the full weights, model.hpp): it too is written only after that kernel has ended.
///     Graded is the order the streams give (the trace): a gather already queued on comm behind
///     an operation that waited for that kernel, or a later one, is ordered after it either way.
///   * Comm stream order: a pass issues its gathers, and backward a unit's reduce-scatter right
///     after launching the unit's backward, in program order on the one comm stream.
///   * step(): Adam (Model::launch_adam) on every unit's shards, in the order backward produced
///     the gradients (unit L-1 first), each after its own reduce-scatter and no other.
///   * Traffic per unit and step: the gathers (one per pass that gathers it) and one
///     reduce-scatter, each (dp - 1) / dp of the unit's padded bytes; nothing else.
///   * bf16_comm: the same passes, window, events and order, in bf16. Values are rounded to bf16
///     at exactly these points and nowhere else: each weight once, from this step's fp32 shard,
///     into the bf16 buffer its gather sends (UnitBuffers::weight_shard_bf16); each element of a
///     rank's full gradient once, by the bf16 backward kernel; the reduce-scatter's mean as dist's
///     bf16 reductions round (dist.hpp: each step in fp32, rounded to bf16). The mean
///     (UnitBuffers::gradient_shard_bf16) returns to the fp32 gradient shard exactly before the
///     unit's Adam starts. The kernels compute in fp32 from the bf16 weights; Adam is fp32
///     throughout. Traffic: 2 bytes an element instead of 4, so exactly half of fp32's bytes.
class Fsdp {
 public:
  Fsdp(Model& model, Shards& shards, UnitBuffers& buffers, Stream& compute, Stream& comm,
       const FsdpConfig& config);

  /// Every unit's forward (Model::launch_forward), gathering each unit's weights first.
  void forward();
  /// Every unit's backward (Model::launch_backward) and the reduce-scatter of its gradient.
  void backward();
  /// Adam on every shard (Model::launch_adam with this step's number: 1, 2, ...).
  void step();

  ~Fsdp();
  Fsdp(const Fsdp&) = delete;
  Fsdp& operator=(const Fsdp&) = delete;

  const FsdpConfig& config() const { return config_; }

  /// What forward, backward and step share beyond the members below (yours: defined in
  /// fsdp.cpp).
  struct State;

 private:
  // (maybe_unused: the stub's methods do not read them yet)
  [[maybe_unused]] Model& model_;
  [[maybe_unused]] Shards& shards_;
  [[maybe_unused]] UnitBuffers& buffers_;
  [[maybe_unused]] Stream& compute_;
  [[maybe_unused]] Stream& comm_;
  FsdpConfig config_;
  std::int64_t t_ = 0;  // steps taken
  std::unique_ptr<State> state_;
};

}  // namespace fsdp
