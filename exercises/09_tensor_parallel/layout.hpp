// Given code for 09_tensor_parallel: the types the exercises fill in (tp.hpp declares the
// functions). Nothing here is yours to change: the grader compiles this header from the kit, so
// the optimizer state lives in containers the kit declares and measures (see "Memory" below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/dist.hpp"
#include "mlp.hpp"

namespace tp {

using Matrix = mlp::Matrix;
using Labels = mlp::Labels;

/// A half-open range [begin, end) of features or elements.
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

/// Part `index` of `parts` near-equal parts of [0, n): sizes differ by at most one, the first
/// n % parts parts are the larger ones (03's, 04's and 08's split). The hidden features of a
/// tensor-parallel layer are split this way over the TP group.
Range shard_range(std::size_t n, int parts, int index);

/// The 2-D grid of p = tp x dp ranks (Task 2). The tp ranks of one model replica are consecutive
/// world ranks, the replicas in order of world rank (replica 0 first), so on a two-level network
/// with ranks_per_node = tp a TP group is one node and a DP group spans the nodes. Tp 2 x dp 2:
///
///              tp_rank 0   tp_rank 1          tp group = one row (one node), dp group = one column
///   dp_rank 0  rank 0      rank 1      <- node 0
///   dp_rank 1  rank 2      rank 3      <- node 1
///
/// A rank's tp_rank is its rank inside its TP group, its dp_rank its rank inside its DP group.
struct Grid {
  int tp = 1, dp = 1;
  int tp_rank = 0, dp_rank = 0;
  dist::Group tp_group;  // the tp ranks holding the shards of one replica (same dp_rank)
  dist::Group dp_group;  // the dp ranks holding the same shard (same tp_rank)
};

/// One Megatron MLP block on one rank of its TP group: a column-parallel linear layer
/// (in -> hidden, this rank's hidden features), the activation, a row-parallel linear layer
/// (hidden -> out, the same hidden features). Built by TpMLP from a full 05 model: column.value
/// holds rows `hidden` of the full first weight (hidden.size() x in); row.value holds columns
/// `hidden` of the full second weight (out x hidden.size()).
struct Block {
  mlp::Parameter column;
  mlp::Parameter row;
  Range hidden;
  mlp::Activation activation = mlp::Activation::Tanh;

  // Kept by block_forward for block_backward:
  const Matrix* x = nullptr;  // the block's input (B x in), the same on every TP rank
  Matrix z;                   // column output before the activation (B x hidden.size())
  Matrix a;                   // after the activation (B x hidden.size())
  Matrix y;                   // row output (B x out), summed over the TP group
  // Written by block_backward:
  Matrix da, dz;  // d loss / d a, d loss / d z (B x hidden.size())
  Matrix dx;      // d loss / d x (B x in), summed over the TP group; only when asked for
};

/// Adam (Kingma and Ba; PyTorch's torch.optim.Adam without weight decay), the optimizer of every
/// run of this module. Per parameter element, with the step counter t = 1, 2, ... counting
/// optimizer steps (one per training step, the same for every parameter), m and v starting at 0:
///   m <- beta1 m + (1 - beta1) g            (first moment, "exp_avg")
///   v <- beta2 v + (1 - beta2) g^2          (second moment, "exp_avg_sq")
///   w <- w - learning_rate * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
/// The divisions by 1 - beta^t are the bias correction (m and v start at 0). Its state is m and v:
/// 8 bytes per parameter element in float32, twice the weights themselves.
struct AdamConfig {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

/// Given: unsharded Adam (m and v of every parameter, full size, on every rank).
class Adam {
 public:
  Adam(std::vector<mlp::Parameter*> params, const AdamConfig& config);
  void step();
  /// Bytes of optimizer state this rank holds (the capacity of m and v).
  std::int64_t state_bytes() const;
  std::int64_t steps() const { return t_; }

 private:
  std::vector<mlp::Parameter*> params_;
  AdamConfig config_;
  std::int64_t t_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

/// Task 3: ZeRO over the data-parallel group (stage 1 shards the optimizer state, stage 2 also the
/// gradients), per parameter. Each parameter of n elements is padded with zeros to
/// padded(n, dp) = dp * ceil(n / dp) elements (reduce_scatter and all_gather take equal chunks),
/// and DP rank d owns chunk d: elements [d c, (d + 1) c) of the padded parameter, c = padded / dp
/// (shard()). The padding is never a real weight: its gradient is 0 and its weight stays 0.
///
///   stage 1: after backward, step() reduce-scatters each parameter's padded gradient (the mean over
///            the DP group) into grad_shard_[i], every gradient before the first update (as stage
///            2's hooks have by then), applies Adam (AdamConfig) to this rank's chunk of the
///            weights with its chunks of m and v, and all-gathers the weights.
///   stage 2: the constructor registers a hook on every parameter: as soon as backward has written
///            a gradient, the hook reduce-scatters it into grad_shard_[i] and frees the full
///            gradient (p.grad becomes 0 x 0); step() then updates and all-gathers.
///
/// Hooks are 05's (mlp.hpp: Parameter::add_hook returns a handle; the destructor, given, passes
/// each handle in hooks_ to remove_hook, so hooks_[i] must be parameter i's). dist's all_gather
/// takes its input as a separate buffer or in place, as this rank's chunk at its place in the
/// output (and reduce_scatter its output at its place in the input): the same values, traffic
/// and time either way.
///
/// The result equals unsharded Adam on the whole batch (to float32 rounding): the step counter
/// counts calls of step(), once per training step, whatever the number of parameters or hooks.
///
/// Memory (what the kit measures, from the containers below, never from your own count):
///   optimizer state = m_ and v_ (c floats each per parameter on every DP rank: 8 c bytes),
///   gradients       = every parameter's grad plus grad_shard_,
///   scratch         = scratch_, one padded parameter at a time (communication buffer).
class ZeroOptimizer {
 public:
  /// Collective over nothing (no communication): every rank of the DP group builds one.
  /// stage must be 1 or 2 (else std::invalid_argument).
  ZeroOptimizer(std::vector<mlp::Parameter*> params, const AdamConfig& config,
                const dist::Group& dp, int stage);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  /// One optimizer step (collective over the DP group).
  void step();

  /// dp * ceil(n / dp): n rounded up to a multiple of dp.
  static std::size_t padded(std::size_t n, int dp);
  /// This rank's chunk of parameter i, in padded element indices.
  Range shard(std::size_t i) const;
  int stage() const { return stage_; }

  // Measured by the kit (the containers' real sizes, in bytes).
  std::int64_t state_bytes() const;
  std::int64_t gradient_bytes() const;
  std::int64_t scratch_bytes() const;
  /// The moment chunks, for the tests (m()[i], v()[i]: this rank's chunk of parameter i).
  const std::vector<std::vector<float>>& m() const { return m_; }
  const std::vector<std::vector<float>>& v() const { return v_; }
  /// Optimizer steps taken (Adam's t after the last step()).
  std::int64_t steps() const { return t_; }

 private:
  /// Reduce-scatters parameter i's gradient (mean over the DP group) into grad_shard_[i].
  void reduce_gradient(std::size_t i);

  std::vector<mlp::Parameter*> params_;
  AdamConfig config_;
  dist::Group dp_;
  int stage_;
  std::int64_t t_ = 0;                          // Adam's step counter (optimizer steps taken)
  std::vector<std::vector<float>> m_, v_;       // optimizer state: c floats each per parameter
  std::vector<std::vector<float>> grad_shard_;  // the reduced gradient chunk of each parameter
  std::vector<float> scratch_;                  // one padded parameter (sizes: padded())
  std::vector<int> hooks_;                      // stage 2: hook handles, removed on destruction
};

}  // namespace tp
