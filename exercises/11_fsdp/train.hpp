// Given code for 11_fsdp: one rank's training with your Fsdp (the trainer), the single-process
// Adam training it must equal, the measured step, and the formulas the program's table and the
// tests compare with (docs/11_fsdp.md derives them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/classification.hpp"
#include "datasets/loader.hpp"
#include "fsdp.hpp"

namespace fsdp {

/// The settings of a run: dp = world_size() ranks, each with batch_size / dp rows of every batch.
struct TrainConfig {
  mlp::Config model;               // 05's model and data (batch_size a multiple of dp)
  FsdpConfig fsdp;                 // prefetch window, reshard after forward, Adam
  double flops_per_s = 50e9;       // modelled compute speed of one rank
  double adam_s_per_float = 1e-9;  // Adam's kernel time per shard element
  /// Throws std::invalid_argument saying which field is wrong, for dp ranks.
  void validate(int dp) const;
};

/// One rank's training state (inside dist::launch): the model, this rank's shards (made with your
/// shard_unit from the seeded full model, seed model.seed + 2), the full buffers and their meter,
/// the two streams ("compute", "comm") and your Fsdp.
class Trainer {
 public:
  Trainer(const TrainConfig& config, const datasets::Split& data);
  /// Step t (0, 1, ...): global batch t (seed model.seed + 3), this rank's rows rows_of(B, dp,
  /// rank); forward, loss, backward, step, then device_synchronize. Returns this rank's loss.
  float step(std::int64_t t);
  /// Every unit's full weights, unpadded (collective: all-gathers the shards on the host).
  std::vector<std::vector<float>> full_weights();

  Model& model() { return model_; }
  Shards& shards() { return shards_; }
  UnitBuffers& buffers() { return buffers_; }
  Stream& compute() { return compute_; }
  Stream& comm() { return comm_; }

 private:
  TrainConfig config_;
  datasets::BatchLoader loader_;
  Model model_;
  Stream compute_, comm_;
  Shards shards_;
  UnitBuffers buffers_;
  Fsdp fsdp_;
  Matrix x_, xs_;
  Labels y_, ys_;
};

/// The same training on one process: 05's MLP (seed model.seed + 2) on every row of each batch,
/// Adam on whole weights. Returns every unit's weights after `steps` steps.
std::vector<std::vector<float>> reference_weights(const TrainConfig& config,
                                                  const datasets::Split& data, int steps);

/// The same steps with bf16 communication on p ranks, on one process rounding at the points
/// Fsdp's bf16 contract names (fsdp.hpp): every step, each weight rounded to bf16 once; for each
/// rank r in turn, Model's own kernels (the bf16 forms) on rows_of(B, p, r) of the batch, the
/// rank's full gradient rounded to bf16 by the backward kernel; their fold over r = 0 .. p-1, each
/// step in fp32 rounded to bf16 (the threads backend's order), the mean rounded once more; then
/// your adam_update in fp32 on the whole unit. Returns every unit's weights after `steps` steps.
std::vector<std::vector<float>> reference_weights_bf16(const TrainConfig& config,
                                                       const datasets::Split& data, int steps,
                                                       int p);

/// One measured step on one rank, after one warm-up step: from a barrier, the simulated seconds
/// until the rank's device is idle, its traffic and calls to built-in collectives, and the
/// meter's high-water mark (UnitBuffers) during the step.
struct StepMeasure {
  double step_s = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t collectives = 0;
  std::int64_t peak = 0, shards = 0, peak_weights = 0, peak_gradients = 0;
};
StepMeasure measured_step(const TrainConfig& config, const datasets::Split& data);

// ---- the formulas (docs/11_fsdp.md) -----------------------------------------------------------

/// Floats of unit u's shard: c_u = padded(n_u, p) / p.
std::size_t shard_floats(const mlp::Config& model, int u, int p);
/// Bytes of an element on the wire and in the full buffers: e = 2 with bf16_comm, else 4.
std::size_t element_bytes(const TrainConfig& config);
/// The ring all-gather of c elements of e bytes per rank: (p - 1) (alpha + e c beta).
double gather_seconds(std::size_t c, int p, const dist::NetworkModel& net, std::size_t e = 4);
/// The ring reduce-scatter to c elements of e bytes per rank: (p - 1) (alpha + e c beta + e c
/// gamma).
double reduce_scatter_seconds(std::size_t c, int p, const dist::NetworkModel& net,
                              std::size_t e = 4);
/// The step's simulated time under the contract of Fsdp: the operations in the order the
/// contract issues them, each starting at the later of its stream's previous end and the end of
/// the operation it waits for (forward: its gather; backward: its gather; reduce-scatter: its
/// backward; Adam: its reduce-scatter); the step ends when both streams are idle.
double step_formula(const TrainConfig& config, int p, const dist::NetworkModel& net);
/// Bytes one rank sends per step: (gathers per unit + 1) * sum_u (p - 1) e c_u, gathers per unit
/// 2 with reshard_after_forward, else 1 (e = 4, bf16_comm 2: half).
std::uint64_t bytes_formula(const TrainConfig& config, int p);
/// Calls to built-in collectives per step: (gathers per unit + 1) * L.
std::uint64_t collectives_formula(const TrainConfig& config, int p);
/// The meter's high-water mark (bytes) under the contract: shards 16 sum_u c_u, plus the most
/// full buffers held at once: with reshard_after_forward, the largest over backward positions of
/// the window's weights (that position and the next `prefetch`) plus that unit's gradient; without,
/// every unit's weights plus the last unit's gradient. A full unit is 4 p c_u bytes; with
/// bf16_comm 2 (p + 1) c_u (the bf16 full buffer and the shard-sized bf16 buffer held with it).
std::int64_t memory_formula(const TrainConfig& config, int p);

/// The program's table: one row per FSDP setting, the maximum over ranks of each figure, with the
/// formulas beside.
struct TableRow {
  std::string label;
  TrainConfig config;
  StepMeasure max;
  double step_formula_s = 0;
  std::uint64_t bytes_formula = 0;
  std::int64_t memory_formula = 0;
};
std::vector<TableRow> comparison_table(const TrainConfig& config, const dist::LaunchOptions& launch,
                                       const datasets::Split& data);
std::string format_table(const std::vector<TableRow>& rows, int p);
/// DDP, ZeRO-1 and ZeRO-2 with Adam on the same units, from their formulas (09 measures them):
/// bytes sent per rank and step sum_u 2 (p - 1) 4 c_u (a ring all-reduce, or reduce-scatter plus
/// all-gather, of each padded unit); weights 4N; gradients 4N (DDP, ZeRO-1) or 4 sum_u c_u
/// (ZeRO-2, steady state: the full gradient of one unit at a time comes on top); Adam's state 8N
/// (DDP) or 8 sum_u c_u (ZeRO).
std::string zero_formula_rows(const mlp::Config& model, int p);

}  // namespace fsdp
