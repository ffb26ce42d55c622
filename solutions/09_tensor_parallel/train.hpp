// Given code for 09_tensor_parallel: the tensor-parallel model (05's MLP cut into Megatron blocks),
// one rank's training step on the grid (DDP, TP, TP+DP, ZeRO-1, ZeRO-2), the memory each rank holds
// (measured from the containers, never self-reported) and the measured step of the program's table.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "datasets/classification.hpp"
#include "datasets/loader.hpp"
#include "tp.hpp"

namespace tp {

/// The settings of a run: p = tp x dp ranks.
struct TpConfig {
  mlp::Config model;   // 05's model, data and settings; n_layers must be even
  int tp = 1;          // tensor-parallel ranks per replica (TP group size)
  int dp = 1;          // replicas (DP group size); the batch is split over them
  int zero = 0;        // 0: all-reduce the gradients (average_gradients); 1, 2: ZeRO stage
  float beta1 = 0.9f;  // Adam's moment decays and eps (learning rate: model.learning_rate)
  float beta2 = 0.999f;
  float eps = 1e-8f;
  double flops_per_s = 50e9;  // modelled compute speed of one rank (the simulated clock)
  /// Throws std::invalid_argument saying which field is wrong, for `world` ranks.
  void validate(int world) const;
  AdamConfig adam() const { return AdamConfig{model.learning_rate, beta1, beta2, eps}; }
  std::string name() const;  // "tp 2 x dp 2, zero 1"
};

/// 05's MLP as blocks of (column-parallel, row-parallel) layers on one rank of a TP group.
/// Between blocks the activation works on the replicated block output. Charges the modelled
/// compute of this rank's shards to the simulated clock (forward 2 B (in h_j + h_j out) FLOPs per
/// block, backward twice that) when flops_per_s > 0.
class TpMLP {
 public:
  /// Slices this rank's shards out of the full model (every rank builds the same full model).
  TpMLP(const mlp::MLP& full, const Grid& grid, double flops_per_s = 0);
  const Matrix& forward(const Matrix& x);
  void backward(const Matrix& dlogits);
  /// column and row weight of every block, in forward order.
  std::vector<mlp::Parameter*> parameters();
  std::vector<Block>& blocks() { return blocks_; }
  const Grid& grid() const { return grid_; }
  void set_flops_per_s(double f) { flops_per_s_ = f; }

 private:
  Grid grid_;
  double flops_per_s_;
  std::vector<Block> blocks_;
  std::vector<Matrix> h_, dh_;  // activation of block k's output (input of block k+1)
};

/// Bytes one rank holds, read from the containers (capacity of the optimizer's vectors, sizes of
/// the parameters' matrices).
struct Memory {
  std::int64_t weights = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer_state = 0;
  std::int64_t scratch = 0;  // ZeRO's one-parameter communication buffer
};

/// One rank's training state, built inside dist::launch (collective: makes the grid).
class Trainer {
 public:
  Trainer(const TpConfig& config, const datasets::Split& data);
  /// Step t: global batch t of the loader (seed model.seed + 3), this DP rank's rows
  /// shard_range(B, dp, dp_rank), forward, loss, backward, the gradient exchange (average_gradients
  /// or ZeRO) and the update. Returns the loss of this rank's rows.
  float step(std::int64_t t);
  /// Held-out loss of the current weights (collective over the TP group; free on the clock).
  float test_loss(const datasets::Dataset& test, int chunk = 500);
  Memory memory() const;
  TpMLP& model() { return model_; }
  const Grid& grid() const { return model_.grid(); }
  const ZeroOptimizer* zero() const { return zero_.get(); }

 private:
  TpConfig config_;
  datasets::BatchLoader loader_;
  TpMLP model_;
  std::unique_ptr<Adam> adam_;
  std::unique_ptr<ZeroOptimizer> zero_;
  Matrix x_, xs_, probs_, dlogits_;
  Labels y_, ys_;
};

/// Trains config on every rank (inside dist::launch) for model.niters steps; rank 0 calls `out`
/// with 05's log lines (train_loss: the mean over the whole batch, test_loss: held-out).
std::vector<mlp::LogLine> train_tp(const TpConfig& config, const datasets::Split& data,
                                   const std::function<void(const mlp::LogLine&)>& out = {});

/// One measured step on one rank, after one warm-up step (so every buffer exists and ZeRO-2 has
/// freed its full gradients): from a barrier, the simulated seconds until this rank finished and
/// the bytes it sent, to its TP group, to its DP group and elsewhere; then its memory.
struct StepMeasure {
  double step_s = 0;
  std::uint64_t bytes_sent = 0, bytes_tp = 0, bytes_dp = 0, bytes_other = 0;
  Memory memory;
};
StepMeasure measured_step(const TpConfig& config, const datasets::Split& data);

/// The program's table: one row per configuration, the maximum over ranks of each figure.
struct TableRow {
  std::string label;  // "DDP", "TP", "TP+DP", "ZeRO-1", "ZeRO-2"
  TpConfig config;
  StepMeasure max;
};
/// Runs measured_step for DDP (1 x p), TP (p x 1), TP+DP (tp x dp), ZeRO-1 and ZeRO-2 (tp x dp)
/// with p = tp x dp, each on the same network, and returns the rows.
std::vector<TableRow> comparison_table(const TpConfig& config, const dist::LaunchOptions& launch,
                                       const datasets::Split& data);
std::string format_table(const std::vector<TableRow>& rows);
/// Adam's state per rank for the same rows, from the measured memory: params = weights / 4 (the
/// elements of this rank's shards), updated = optimizer state / 8 (the elements whose m and v this
/// rank keeps), sharded = updated / params, m+v KiB = 8 updated / 1024, and what the same run
/// would hold in mixed precision (fp16 weights and gradients, fp32 master weights, m and v):
/// (2 params + 2 grads + 12 updated) / 1024 KiB, grads = params (zero 0, 1) or updated (zero 2).
std::string format_adam_table(const std::vector<TableRow>& rows);

}  // namespace tp
