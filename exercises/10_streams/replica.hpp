// Given code for 10_streams: a data-parallel replica on the device (06's buckets, with the
// gradients and parameters in device buffers and every layer's backward a kernel), the optimizer
// step with the classic bug, the waiting experiment of task 1, the formulas and the text timeline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/device.hpp"
#include "dist/dist.hpp"
#include "streams.hpp"

namespace streams {

/// One span of a text timeline: a row (a stream, or "host"), a label, simulated seconds.
struct Span {
  std::string row;
  std::string label;
  double t0 = 0, t1 = 0;
};
/// Rows in the order given, one character per column: the label at the start of each span,
/// '=' through it, '.' where the row is idle.
std::string render_timeline(const std::vector<Span>& spans, const std::vector<std::string>& rows,
                            int columns = 96);

/// The step of tasks 2 and 3.
struct StepConfig {
  std::vector<std::size_t> layer_floats = {262144, 65536, 65536, 65536,
                                           65536,  65536, 65536, 65536};  // layer 0 first
  std::size_t bucket_cap_bytes = 512u << 10;  // 06's rule: reverse order, <= cap, >= 1 layer
  double backward_s_per_float = 2e-9;         // a layer's backward kernel: seconds per parameter
  double sgd_s_per_float = 2e-10;             // a bucket's update kernel: seconds per parameter
  float learning_rate = 0.1f;
};

/// One rank's replica: parameters (identical on every rank), this rank's targets and the gradients
/// in device buffers, one buffer of each per bucket. Layer l's gradient is params - target(rank,
/// l): the mean over the ranks is what one process with every rank's data would compute. The
/// kernels are those of <dist/device_kernels.hpp>, so the replica runs on the simulated device
/// and on a GPU (NCCL backend) alike.
class Replica {
 public:
  /// Builds the buckets and uploads the parameters and targets on `compute` (it synchronizes it).
  Replica(const StepConfig& config, Stream& compute);

  int num_layers() const { return static_cast<int>(config_.layer_floats.size()); }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  /// Layer indices of each bucket, buckets in launch order, each in the order backward produces
  /// the gradients (the last layer first).
  const std::vector<std::vector<int>>& buckets() const { return buckets_; }
  int bucket_of(int layer) const { return bucket_of_.at(static_cast<std::size_t>(layer)); }
  const StepConfig& config() const { return config_; }

  /// Layer `layer`'s backward: a kernel on `compute` ("backward <layer>") that reads its bucket's
  /// parameters and targets and writes its gradients into its bucket's buffer
  /// (backward_s_per_float x its size on the simulated device).
  void launch_backward(int layer, Stream& compute);
  /// Bucket `bucket`'s all-reduce (mean) on `comm`, through your AllReduceWork.
  AllReduceWork all_reduce_bucket(int bucket, Stream& comm);
  /// Bucket `bucket`'s SGD update: a kernel on `compute` ("sgd bucket <bucket>") that reads its
  /// gradients and writes its parameters (sgd_s_per_float x its size on the simulated device).
  void launch_sgd(int bucket, Stream& compute);

  DeviceBuffer<float>& gradients(int bucket) { return grads_.at(static_cast<std::size_t>(bucket)); }
  std::size_t bucket_floats(int bucket) const;
  double backward_seconds(int layer) const;
  double sgd_seconds(int bucket) const;
  /// Every parameter, layer 0 first (copied to the host on `s`, which it synchronizes).
  std::vector<float> parameters(Stream& s);
  /// The spans of everything launched so far (rows "compute" and "comm"). Call after
  /// synchronizing the device.
  std::vector<Span> spans() const;

  /// The gradient target of layer `layer`, element `i`, on rank `rank` (exposed for the tests).
  static float target(int rank, int layer, std::size_t i);
  /// The initial parameter of layer `layer`, element `i`.
  static float initial(int layer, std::size_t i);

 private:
  struct Pending {
    std::string row, label;
    Event begin, end;
  };
  void mark(const std::string& row, const std::string& label, Event begin, Stream& s);

  StepConfig config_;
  std::vector<std::vector<int>> buckets_;
  std::vector<int> bucket_of_;
  std::vector<std::size_t> offset_;  // layer -> offset (floats) in its bucket's buffers
  std::vector<DeviceBuffer<float>> params_, grads_, targets_;
  Event origin_;
  std::vector<Pending> pending_;
};

/// The classic bug (task 3): every bucket's update launched on `compute` right after backward,
/// with no event between the all-reduces on the communication stream and the updates. The values
/// come out right on the simulated device; on a GPU the update may read gradients the all-reduce
/// is still writing. The race detector reports it.
void optimizer_step_unordered(Replica& replica, Stream& compute);

/// Task 1's experiment, on every rank (inside dist::launch): a backward kernel writes the gradient
/// (rank + 1 everywhere) on "compute"; the all-reduce (AllReduceWork) runs on "comm" after it; the host waits the
/// strategy's way (wait_for), then does host_work_s of its own work (loading the next batch) and
/// launches the optimizer kernel that reads the gradient.
struct WaitingSetup {
  std::size_t floats = 1u << 20;  // the gradient
  double backward_s = 1e-3;       // the kernel that writes it
  double poll_interval_s = 150e-6;
  double host_work_s = 1e-3;     // host work after the wait
  double optimizer_s = 0.25e-3;  // the kernel that reads the all-reduced gradient
};
struct WaitingResult {
  double host_lost_s = 0;   // what wait_for returned
  double step_s = 0;        // the rank's clock once the device is idle
  std::vector<float> grad;  // the all-reduced gradient
  std::vector<Span> spans;  // rows "compute", "comm", "host"
};
WaitingResult measure_waiting(Strategy s, const WaitingSetup& w);

/// The simulated time of dist::all_reduce (ring) of `bytes` on p ranks: 2(p-1)(alpha + bytes/p
/// beta) + (p-1) bytes/p gamma (threads_backend.md), exact when p divides bytes.
double all_reduce_seconds(std::size_t bytes, int p, const dist::NetworkModel& net);

/// The formulas of the waiting experiment: host time lost and step time for each strategy.
struct WaitingFormula {
  double host_lost_s = 0, step_s = 0;
};
WaitingFormula waiting_formula(Strategy s, const WaitingSetup& w, int p,
                               const dist::NetworkModel& net);

/// The formula of the step of tasks 2 and 3 (every launch free): bucket b's gradients are
/// complete at C_b (the sum of the backward kernels up to its last layer); its all-reduce ends at
/// R_b = max(R_{b-1}, C_b) + T_b with overlap, max(R_{b-1}, C_last) + T_b without; the updates
/// run on compute after backward: S_b = max(S_{b-1}, R_b) + sgd_b, from S = C_last. The step
/// ends at S of the last bucket.
double step_formula(const Replica& replica, int p, const dist::NetworkModel& net, bool overlap);

}  // namespace streams
