// 10_streams: asynchronous work on a device, the way a NCCL process group completes it.
//
// A GPU runs work in streams (in-order queues) while the host goes on; an event recorded in a
// stream completes when the work before it does. A NCCL process group runs each collective on a
// communication stream and records an event after it: Work::wait() makes the compute stream wait
// on that event (the host does not block), is_completed() queries it, and only an explicit
// synchronize blocks the host. On the threads backend the same calls run on a simulated device
// (<dist/device.hpp>, docs/device.md) with a clock and a stream-race detector.
//
// Your tasks, in order (see README.md):
//   1. AllReduceWork: start an all-reduce on a communication stream and wait for it three ways;
//      wait_for: the host time each way of waiting costs.
//   2. backward_with_overlap: 06's bucketed backward, each bucket's all-reduce on the
//      communication stream as soon as the bucket is complete, ordered after its gradients.
//   3. optimizer_step: the update of each bucket ordered after that bucket's all-reduce (the
//      given optimizer_step_unordered forgets it, and the race detector says so).
#pragma once

#include <vector>

#include "dist/device.hpp"
#include "dist/dist.hpp"

namespace streams {

using dist::device::DeviceBuffer;
using dist::device::Event;
using dist::device::Stream;

/// Task 1. The handle of an all-reduce running on a communication stream (torch's WorkNCCL).
///
/// The constructor enqueues the all-reduce of `buf` (`op` over all ranks, in place) on `comm` and
/// records `done_` on `comm` after it; it never blocks the host. A collective: every rank
/// constructs its AllReduceWork at the same point of its sequence of collectives.
class AllReduceWork {
 public:
  AllReduceWork(DeviceBuffer<float>& buf, Stream& comm, dist::ReduceOp op = dist::ReduceOp::Avg);

  /// True once the all-reduce is done (at the host's current time). Never blocks the host.
  bool is_completed();
  /// Work enqueued on `compute` from now on starts after the all-reduce: the host does not block.
  void wait(Stream& compute);
  /// Blocks the host until the all-reduce is done.
  void synchronize();

 private:
  Event done_;
};

/// How the host waits for an all-reduce before work that reads its result.
enum class Strategy {
  Synchronize,  // block the host (AllReduceWork::synchronize)
  Poll,         // a loop: while not complete, spend poll_interval_s of host time (a busy wait)
  StreamOrder,  // order the compute stream after it (AllReduceWork::wait); the host goes on
};
const char* to_string(Strategy s);

/// Task 1. Waits for `work` the way `s` says, so that work enqueued on `compute` afterwards may
/// read the all-reduced buffer. Poll: query the work; while it is not complete, charge
/// poll_interval_s of host time (dist::sim_compute, span name "poll") and query again.
/// Returns the host time the wait cost: the rank's simulated clock (dist::sim_time()) after
/// minus before.
double wait_for(AllReduceWork& work, Strategy s, Stream& compute, double poll_interval_s);

class Replica;

/// Task 2. The backward pass of one data-parallel step with 06's buckets, on the device:
/// launches every layer's backward kernel on `compute`, last layer first
/// (Replica::launch_backward), and, as soon as a bucket's last gradient has been launched, its
/// all-reduce on `comm` (Replica::all_reduce_bucket), ordered after the kernels that wrote the
/// bucket by an event, so it runs while backward goes on. With overlap == false, every bucket's
/// all-reduce starts only after the whole backward (the baseline the overlap is measured
/// against). Never blocks the host. Returns the buckets' works, in bucket order.
std::vector<AllReduceWork> backward_with_overlap(Replica& replica, Stream& compute, Stream& comm,
                                                 bool overlap = true);

/// Task 3. The optimizer step after backward_with_overlap: each bucket's update
/// (Replica::launch_sgd) on `compute`, ordered after that bucket's all-reduce, buckets in order.
/// Never blocks the host; an update does not wait for the all-reduces of later buckets.
void optimizer_step(Replica& replica, Stream& compute, std::vector<AllReduceWork>& works);

}  // namespace streams
