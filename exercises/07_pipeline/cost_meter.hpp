// Given code for 07_pipeline: the cost model every stage charges to the simulated clock, and the
// meter of stashed activation bytes. Both are local to this module (they live here, not in dist).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dist/dist.hpp"
#include "mlp.hpp"

namespace pp {

/// Modelled compute time of the MLP's layers (the simulated clock's sim_compute):
///   forward of layer i on `rows` rows  = 2 * rows * in_i * out_i FLOPs / flops_per_s
///   backward of layer i                = 2 x its forward (dW = dy^T x and dx = dy W)
/// Activations and the loss are free. One stage charges the sum over its layers in one span.
/// A simplification: the first stage is charged its first layer's dx too, which its backward does
/// not compute (the input is data), so that equal stages cost the same and the schedules' closed
/// forms stay simple; the real first stage is lighter by 2 * rows * in_0 * out_0 FLOPs.
struct CostModel {
  double flops_per_s = 50e9;  // modelled speed of every stage

  double forward_seconds(const mlp::Config& c, int layer, std::int64_t rows) const {
    return 2.0 * static_cast<double>(rows) * c.layer_in(layer) * c.layer_out(layer) / flops_per_s;
  }
  double backward_seconds(const mlp::Config& c, int layer, std::int64_t rows) const {
    return 2.0 * forward_seconds(c, layer, rows);
  }
};

/// Stashed activations of one rank: the tensors a forward keeps for its backward. add() when a
/// microbatch's stash is created, remove() when its backward has used it. Keeps the current and
/// peak bytes and microbatches, and every change with its simulated time (for the trace's counter
/// track and the timeline).
class ActivationMeter {
 public:
  struct Sample {
    double t;            // simulated seconds
    std::int64_t bytes;  // stashed bytes after the change
  };

  void add(std::int64_t bytes) {
    bytes_ += bytes;
    ++microbatches_;
    peak_bytes_ = std::max(peak_bytes_, bytes_);
    peak_microbatches_ = std::max(peak_microbatches_, microbatches_);
    record();
  }
  void remove(std::int64_t bytes) {
    if (bytes > bytes_ || microbatches_ == 0) {
      throw std::logic_error("ActivationMeter::remove: more released than stashed");
    }
    bytes_ -= bytes;
    --microbatches_;
    record();
  }
  /// Forgets the peaks and samples (the current stash stays).
  void reset_peak() {
    peak_bytes_ = bytes_;
    peak_microbatches_ = microbatches_;
    samples_.clear();
  }

  std::int64_t bytes() const { return bytes_; }
  int microbatches() const { return microbatches_; }
  std::int64_t peak_bytes() const { return peak_bytes_; }
  int peak_microbatches() const { return peak_microbatches_; }
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  void record() { samples_.push_back({dist::in_launch() ? dist::sim_time() : 0.0, bytes_}); }

  std::int64_t bytes_ = 0;
  int microbatches_ = 0;
  std::int64_t peak_bytes_ = 0;
  int peak_microbatches_ = 0;
  std::vector<Sample> samples_;
};

}  // namespace pp
