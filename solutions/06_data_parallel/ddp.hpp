// Given code for 06_data_parallel: the kit's data-parallel wrapper (the counterpart of torch's
// DistributedDataParallel that task 1 uses before you write your own), a model of compute time
// for the simulated clock, and the data-parallel training loop.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <variant>
#include <vector>

#include "data_parallel.hpp"
#include "datasets/classification.hpp"
#include "mlp.hpp"

namespace dp {

/// The kit's wrapper: broadcasts rank 0's weights at construction; finish_gradient_sync()
/// averages each gradient with a blocking all-reduce after backward (no hooks, no overlap).
class KitDDP {
 public:
  explicit KitDDP(mlp::MLP& model);
  void finish_gradient_sync();

 private:
  mlp::MLP& model_;
};

/// The matrix-product FLOPs of one training step of `model` on `batch` rows (activations, loss and
/// the optimizer are not counted). Layer i with W_i of out x in: forward 2 B in out; backward
/// 2 B in out for dW_i, plus 2 B in out for dx_i on every layer but the first, whose input gradient
/// backward never computes (the input is data). So backward = 2 x forward - 2 B |W_0|.
struct StepFlops {
  double forward = 0;
  std::vector<double> backward;  // per parameter, in parameters() order
  double backward_total() const;
};
StepFlops step_flops(const mlp::MLP& model, int batch);

/// Charges modelled compute time to the simulated clock (dist::sim_compute): registers a hook on
/// every parameter that charges its layer's backward (step_flops: dW, and dx except for the first
/// layer) at `flops_per_s`. Register it BEFORE wrapping the model, so the compute is charged
/// before a wrapper's hook starts communication. Call charge_forward() for the forward pass.
class ComputeModel {
 public:
  ComputeModel(mlp::MLP& model, int batch_size, double flops_per_s);
  ~ComputeModel();
  ComputeModel(const ComputeModel&) = delete;
  ComputeModel& operator=(const ComputeModel&) = delete;
  void charge_forward() const;

 private:
  mlp::MLP& model_;
  int batch_size_;
  double flops_per_s_;
  std::vector<int> handles_;
};

/// How the gradients of a data-parallel step are synchronised.
enum class Sync { Kit, Manual, MyDP };
const char* to_string(Sync s);

/// Who synchronises the gradients of a data-parallel step: all_reduce_gradients after backward
/// (ManualAllReduce), the kit's DDP or the student's MyDP.
struct ManualAllReduce {};
using GradientSync = std::variant<ManualAllReduce, KitDDP*, MyDP*>;

/// The gradient synchronisation `mode` names for this rank's model: builds the kit's DDP or MyDP
/// (with `bucket_cap_bytes`) around it; for Manual, broadcasts rank 0's weights itself (what the
/// wrappers do when they are built). sync() is what dp_step takes; keep this alive as long.
class SyncWrapper {
 public:
  SyncWrapper(mlp::MLP& model, Sync mode, std::size_t bucket_cap_bytes);
  ~SyncWrapper();
  GradientSync sync() const;

 private:
  std::unique_ptr<KitDDP> kit_;
  std::unique_ptr<MyDP> mine_;
};

/// One data-parallel training step on this rank's batch (x, y): forward, loss, backward,
/// gradient sync by `sync`, SGD. Returns this rank's batch loss.
float dp_step(const GradientSync& sync, mlp::MLP& model, mlp::SGD& opt, const mlp::Matrix& x,
              const mlp::Labels& y, mlp::Matrix& probs, mlp::Matrix& dlogits,
              const ComputeModel* compute = nullptr);

struct RunOptions {
  Sync sync = Sync::MyDP;
  std::size_t bucket_cap_bytes = 1u << 20;  // MyDP's bucket cap
  double compute_flops_per_s = 0;           // > 0: model compute time on the simulated clock
};

/// Runs on every rank (inside dist::launch): each rank builds its model from seed
/// config.seed + 2 + rank (different on purpose: the wrapper's broadcast must fix that), wraps
/// it, and trains config.niters steps on its shard of the batches (global_batch_index). Rank 0
/// evaluates the held-out loss; train_loss is the mean over ranks. Calls `out` on rank 0 with
/// every log line, returns the log (rank 0) and copies the trained weights into *trained if set (a model of
/// the same config).
std::vector<mlp::LogLine> train_data_parallel(
    const mlp::Config& config, const datasets::Split& data, const RunOptions& options,
    const std::function<void(const mlp::LogLine&)>& out = {}, mlp::MLP* trained = nullptr);

}  // namespace dp
