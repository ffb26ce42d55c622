// 06_data_parallel: train 05's MLP on several ranks, the way PyTorch's DistributedDataParallel
// does, and prove it equals single-process training.
//
// Every rank holds a full replica of the model. In each step rank r computes gradients on its own
// batch; averaging the gradients over the ranks gives exactly the gradient of the union of the
// batches (one batch world_size times larger), so after the SGD step all replicas are identical
// again -- provided they started identical (broadcast rank 0's weights once).
//
// Your tasks, in order (see README.md):
//   1. global_batch_index: which batch rank r trains on at step s (the kit's DDP wrapper, ddp.hpp,
//      then trains data-parallel).
//   2. check_parameter_closeness: are all replicas still the same?
//   3. all_reduce_gradients: manual data parallelism, averaging gradients after backward.
//   4. MyDP: broadcast at construction, gradient hooks that start asynchronous all-reduces of
//      buckets of gradients while backward is still running, and finish_gradient_sync.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/dist.hpp"
#include "mlp.hpp"

namespace dp {

/// Task 1. Batch sharding: the global batch that rank `rank` trains on at step `step`. The ranks
/// take the batches i with i % world_size == rank, and at step s they together cover the batches
/// [s*world_size, (s+1)*world_size), each exactly once -- what one process with a
/// world_size-times-larger batch would see.
std::int64_t global_batch_index(std::int64_t step, int rank, int world_size);

/// Task 2. True on every rank when every rank's parameters equal rank 0's within rtol:
/// |x_r - x_0| <= rtol * max(|x_r|, |x_0|) for every element (so a NaN on any rank is never
/// close: every comparison with a NaN is false). Rank 0 gathers all ranks'
/// parameters (dist::gather) and decides; the answer reaches every rank (dist::broadcast).
/// A collective: every rank must call it. One gather and one broadcast on every world size, one
/// rank included.
bool check_parameter_closeness(const mlp::MLP& model, float rtol);

/// Task 3. After backward: replace every gradient by its mean over the ranks (not the sum: the
/// loss is a mean over the batch, so the global loss is the mean over the ranks' losses). The
/// mean is dist's Avg, the sum divided by the number of ranks, checked bit for bit (a product
/// with 1/p can differ in the last bit for p = 3, 5, 6, 7).
void all_reduce_gradients(mlp::MLP& model);

/// PyTorch's default bucket size (25 MiB).
inline constexpr std::size_t kDefaultBucketCap = 25u << 20;

/// Task 4. A data-parallel wrapper with gradient bucketing and communication/computation overlap.
///
/// Buckets are built from the parameters in REVERSE order (the order backward produces their
/// gradients), the same on every rank: a bucket takes parameters while its size in bytes stays
/// <= bucket_cap_bytes; a parameter that does not fit starts the next bucket (a bucket always
/// holds at least one parameter, so cap 0 means one bucket per parameter).
///
/// During backward, each parameter's hook copies its gradient into its bucket's flat buffer;
/// when the last gradient of a bucket arrives, the hook starts dist::all_reduce_async (mean) on
/// the buffer and backward goes on while it runs. finish_gradient_sync() waits for every bucket
/// and copies the averaged gradients back, before the optimizer step.
class MyDP {
 public:
  /// Builds the buckets, registers a hook on every parameter, and calls broadcast_parameters().
  /// A collective: every rank constructs its MyDP at the same point.
  explicit MyDP(mlp::MLP& model, std::size_t bucket_cap_bytes = kDefaultBucketCap);
  /// Removes the hooks.
  ~MyDP();
  MyDP(const MyDP&) = delete;
  MyDP& operator=(const MyDP&) = delete;

  /// Rank 0's parameter values to every rank (in place): one dist::broadcast from rank 0 per
  /// parameter, of the parameter's own storage, never a flattened copy of the model.
  void broadcast_parameters();
  /// Waits for every bucket's all-reduce and writes the mean gradients back into the parameters.
  /// Call after backward, before the optimizer step. Throws if some bucket was never started
  /// (a gradient hook did not fire: was backward called?).
  void finish_gradient_sync();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  /// Parameter indices (into model.parameters()) of each bucket, buckets in launch order.
  std::vector<std::vector<int>> bucket_layout() const;
  mlp::MLP& model() { return model_; }

 private:
  struct Bucket {
    std::vector<int> params;    // parameter indices, in the order their gradients arrive
    std::vector<float> buffer;  // the bucket's gradients, flattened
    int ready = 0;              // gradients copied in during this backward
    dist::Work work;            // the bucket's all-reduce in flight
    bool launched = false;
  };

  /// Fills buckets_, bucket_of_ and offset_ from the parameters and the cap.
  void build_buckets();
  /// The hook of parameter `index`: copy its gradient in; start the bucket's all-reduce when full.
  void on_gradient_ready(int index);

  mlp::MLP& model_;
  std::vector<mlp::Parameter*> params_;
  [[maybe_unused]] std::size_t bucket_cap_bytes_;  // (maybe_unused: the stub never reads it)
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;       // parameter index -> bucket index
  std::vector<std::size_t> offset_;  // parameter index -> offset (floats) in its bucket
  std::vector<int> hook_handles_;
};

}  // namespace dp
