// Given code for 11_fsdp: the pieces the exercises (fsdp.hpp) work with. Nothing here is yours to
// change: the grader compiles this header from the kit, so the memory you hold is what the kit's
// containers hold, measured by the kit (the MemoryMeter below), never a number you report.
//
// The model is 05's MLP (bias-free linear layers, tanh, softmax cross-entropy). A unit is one
// layer's weight (out x in), flattened row-major to n = out * in floats and padded with zeros to
// padded(n, dp) floats, so it splits into dp equal shards of c = padded(n, dp) / dp floats:
//
//   unit u, n = 10, dp = 4:   padded = 12, c = 3
//     flat:   w0 w1 w2 | w3 w4 w5 | w6 w7 w8 | w9 0  0      <- the padding is zeros
//     shard:  rank 0     rank 1     rank 2     rank 3
//
// Each rank keeps only its shard of the weights, the gradients and Adam's two moments (4 c floats
// per unit, Shards); a unit's full weights exist on a rank only between the all-gather that
// builds them and the release that gives them back (UnitBuffers).
//
// bf16 communication (FsdpConfig::bf16_comm) moves bfloat16 (dist::bf16, dist.hpp: 2 bytes, 8
// significant bits) on the wire and in the full buffers, and keeps the shards and Adam in fp32:
//
//   w shard fp32 --to bf16--> bf16 copy --all-gather--> full weights bf16 --> kernels (fp32 math)
//   g shard fp32 <--exact---- bf16 mean <--reduce-scatter (mean)-- full gradient bf16 <-- backward
//
// The bf16 copies of a unit's shards exist only with the unit's bf16 full buffers (UnitBuffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dist/device.hpp"
#include "dist/dist.hpp"
#include "mlp.hpp"

namespace fsdp {

using dist::bf16;
using dist::device::DeviceBuffer;
using dist::device::Event;
using dist::device::Stream;
using Matrix = mlp::Matrix;
using Labels = mlp::Labels;

/// A half-open range [begin, end) of elements or rows.
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

/// dp * ceil(n / dp): n rounded up to a multiple of dp.
std::size_t padded(std::size_t n, int dp);

/// Part `index` of `parts` near-equal parts of [0, n) (03's and 09's split): a rank's rows of the
/// batch.
Range rows_of(std::size_t n, int parts, int index);

/// Adam (Kingma and Ba; PyTorch's torch.optim.Adam, no weight decay). With t the step number
/// (1 for the first step), for every element:
///   m <- beta1 m + (1 - beta1) g          v <- beta2 v + (1 - beta2) g^2
///   m_hat = m / (1 - beta1^t)            v_hat = v / (1 - beta2^t)
///   w <- w - learning_rate m_hat / (sqrt(v_hat) + eps)
/// m and v start at 0.
struct AdamConfig {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

/// One rank's shards of every unit, in device memory (sizes padded(n_u, dp) / dp each).
struct Shards {
  std::vector<DeviceBuffer<float>> w, g, m, v;  // indexed by unit
  /// Bytes they hold (4 shards per unit).
  std::int64_t bytes() const;
};

/// Conversion kernels on `s` ("to bf16 ..." and "to fp32 ..."), modelled as free (a real device
/// fuses them into the collective's copy): out[i] = bf16(in[i]), rounded to the nearest bf16
/// (dist.hpp), and out[i] = float(in[i]), exact. Sizes must match (else dist::Error).
void launch_convert(const DeviceBuffer<float>& in, DeviceBuffer<bf16>& out, Stream& s);
void launch_convert(const DeviceBuffer<bf16>& in, DeviceBuffer<float>& out, Stream& s);

/// One entry of the order log: what the host did, in program order.
struct LogEntry {
  enum Kind { Gather, Forward, Backward, Release } kind;
  int unit;
};

/// The full (gathered) buffers of the units, and the kit's memory meter. A unit's full weights
/// (acquire_weights) and full gradient (acquire_gradient) are device buffers of padded(n_u, dp)
/// zeroed floats that exist from acquire to release; the meter counts the bytes they hold, plus
/// the shards, and keeps the high-water mark. The _bf16 forms hold padded(n_u, dp) bf16 elements
/// instead, plus a bf16 buffer of one shard's size (c_u elements) that lives as long as they do:
/// the shard's bf16 copy a gather sends (weight_shard_bf16) or the mean a reduce-scatter receives
/// (gradient_shard_bf16). 2 bytes an element in the meter. A unit holds its full weights in one
/// type at a time, and release_weights / release_gradient free whichever it holds.
class UnitBuffers {
 public:
  /// padded_sizes: padded(n_u, dp) of every unit; shard_bytes: what the rank's Shards hold.
  UnitBuffers(std::vector<std::size_t> padded_sizes, std::int64_t shard_bytes, int dp);

  /// Allocates unit u's full weights (zeroed) and logs a Gather of u. dist::Error when u's weights
  /// are held already (release them first).
  DeviceBuffer<float>& acquire_weights(int u);
  /// Unit u's full weights; dist::Error when they are not held.
  DeviceBuffer<float>& weights(int u);
  bool holds_weights(int u) const;
  /// Frees unit u's full weights (logs a Release). dist::Error when they are not held.
  void release_weights(int u);

  /// Allocates unit u's full gradient (zeroed); dist::Error when held already.
  DeviceBuffer<float>& acquire_gradient(int u);
  DeviceBuffer<float>& gradient(int u);
  void release_gradient(int u);

  /// The same in bf16 (bf16 communication): acquire_weights_bf16 logs a Gather like
  /// acquire_weights; the others throw dist::Error unless the unit's buffers are held in bf16.
  DeviceBuffer<bf16>& acquire_weights_bf16(int u);
  DeviceBuffer<bf16>& weights_bf16(int u);
  DeviceBuffer<bf16>& weight_shard_bf16(int u);  // c_u elements, held with weights_bf16(u)
  DeviceBuffer<bf16>& acquire_gradient_bf16(int u);
  DeviceBuffer<bf16>& gradient_bf16(int u);
  DeviceBuffer<bf16>& gradient_shard_bf16(int u);  // c_u elements, held with gradient_bf16(u)

  /// Bytes held now (shards + full buffers) and the most held at any moment since reset_peak().
  std::int64_t live_bytes() const;
  std::int64_t peak_bytes() const { return peak_; }
  /// The peak's split: shard bytes, full weights and full gradients held at that moment.
  std::int64_t shard_bytes() const { return shard_bytes_; }
  std::int64_t peak_weight_bytes() const { return peak_weights_; }
  std::int64_t peak_gradient_bytes() const { return peak_gradients_; }
  void reset_peak();

  std::vector<LogEntry>& log() { return log_; }
  int num_units() const { return static_cast<int>(padded_.size()); }
  std::size_t padded_size(int u) const;

 private:
  void update_peak();
  std::size_t shard_of(std::size_t padded) const;
  std::vector<std::size_t> padded_;
  std::int64_t shard_bytes_;
  int dp_;
  std::vector<DeviceBuffer<float>> weights_, gradients_;
  std::vector<DeviceBuffer<bf16>> weights16_, gradients16_, weight_shards16_, gradient_shards16_;
  std::vector<bool> has_weights_, has_gradient_, weights_are_bf16_, gradient_is_bf16_;
  std::int64_t weight_bytes_ = 0, gradient_bytes_ = 0;
  std::int64_t peak_ = 0, peak_weights_ = 0, peak_gradients_ = 0;
  std::vector<LogEntry> log_;
};

/// 05's MLP on one rank of the data-parallel group, with its layers run as kernels on a stream
/// of the simulated device. The activations live on the host (kept between forward and backward);
/// the weights a kernel reads are the unit's full buffer.
class Model {
 public:
  /// flops_per_s: the modelled compute speed (a kernel of f FLOPs takes f / flops_per_s);
  /// adam_s_per_float: Adam's kernel time per shard element.
  Model(const mlp::Config& config, int dp, double flops_per_s = 50e9,
        double adam_s_per_float = 1e-10);

  int num_units() const { return config_.n_layers; }
  /// Unit u's elements n_u = out * in (unpadded) and its shape.
  std::size_t numel(int u) const;
  const mlp::Config& config() const { return config_; }
  int dp() const { return dp_; }

  /// Sets the rows of this rank for the next forward (B x dim_in) and their labels.
  void set_batch(const Matrix& x, const Labels& y);

  /// Unit u's forward: a kernel "forward u" on `s` that reads `weights` (unit u's full weights)
  /// and computes its output from unit u-1's (the batch for u = 0). Logs a Forward of u.
  void launch_forward(int u, const DeviceBuffer<float>& weights, Stream& s, UnitBuffers& log);
  /// The loss of this rank's rows and d loss / d logits (a kernel "loss" on `s`, free): call after
  /// every unit's forward was launched. Returns the loss.
  float launch_loss(Stream& s);
  /// Unit u's backward: a kernel "backward u" on `s` that reads `weights`, writes unit u's full
  /// gradient into `gradient` (padding zero) and the gradient of its input for unit u-1. Call
  /// for u = L-1 down to 0. Logs a Backward of u.
  void launch_backward(int u, const DeviceBuffer<float>& weights, DeviceBuffer<float>& gradient,
                       Stream& s, UnitBuffers& log);
  /// The bf16 forms (bf16 communication): the kernel reads the bf16 weights as floats (exact) and
  /// computes in fp32 as above; backward rounds each element of the unit's gradient to bf16 once,
  /// as it writes it. Same names, durations and log entries.
  void launch_forward(int u, const DeviceBuffer<bf16>& weights, Stream& s, UnitBuffers& log);
  void launch_backward(int u, const DeviceBuffer<bf16>& weights, DeviceBuffer<bf16>& gradient,
                       Stream& s, UnitBuffers& log);
  /// Adam on unit u's shards: a kernel "adam u" on `s` that reads g[u] and writes w[u], m[u],
  /// v[u], calling your adam_update (fsdp.hpp) with step number t.
  void launch_adam(int u, Shards& shards, std::int64_t t, const AdamConfig& config, Stream& s);

  /// Modelled kernel times (seconds) for `rows` rows of a batch.
  double forward_seconds(int u, std::size_t rows) const;
  double backward_seconds(int u, std::size_t rows) const;
  double adam_seconds(int u) const;

 private:
  mlp::Config config_;
  int dp_;
  double flops_per_s_, adam_s_per_float_;
  Matrix x_;
  Labels y_;
  std::vector<Matrix> z_, h_, dh_, dz_;
  Matrix probs_, dlogits_;
  Matrix w_, dw_;  // one unit's weights and gradient as a matrix (scratch, reused)
  void forward_body(int u, const float* w);
  void backward_body(int u, const float* w, float* dw);
};

}  // namespace fsdp
