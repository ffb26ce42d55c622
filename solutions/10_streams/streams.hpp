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
//      communication stream while backward goes on, never before its gradients are written.
//   3. optimizer_step: no update reads a gradient before its all-reduce wrote it (the given
//      optimizer_step_unordered breaks that, and the race detector says so).
//   4. analyze: the device's times and its race detector over a program written down as data
//      (program.hpp), worked out without a device: happens-before with vector clocks.
#pragma once

#include <vector>

#include "dist/device.hpp"
#include "dist/dist.hpp"
#include "program.hpp"

namespace streams {

using dist::device::DeviceBuffer;
using dist::device::Event;
using dist::device::Stream;

/// Task 1. The handle of an all-reduce running on a communication stream (torch's WorkNCCL).
///
/// The constructor starts the all-reduce of `buf` (`op` over all ranks, in place) on `comm`;
/// from then on the work stands for that all-reduce alone: not for work enqueued on `comm` before
/// it, nor after it. It never blocks the host. A collective: every rank constructs its
/// AllReduceWork at the same point of its sequence of collectives.
class AllReduceWork {
 public:
  AllReduceWork(DeviceBuffer<float>& buf, Stream& comm, dist::ReduceOp op = dist::ReduceOp::Avg);

  /// True once the all-reduce is done (at the host's current time), whatever else `comm` still
  /// has to do. Never blocks the host.
  bool is_completed();
  /// Work enqueued on `compute` from now on starts after the all-reduce (and after what
  /// `compute` already had), may read `buf`, and waits for nothing else; the host does not block.
  void wait(Stream& compute);
  /// Blocks the host until the all-reduce is done, and no longer (later work on `comm` does not
  /// count).
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

/// Task 2. The backward pass of one data-parallel step with 06's buckets, on the device. What
/// must hold afterwards:
///  * every layer's backward kernel (Replica::launch_backward) ran on `compute`, last layer
///    first;
///  * every bucket's all-reduce (Replica::all_reduce_bucket) runs on `comm`, in bucket order, and
///    reads none of the bucket's gradients before the kernel that writes it has run (the stream-
///    race detector checks it);
///  * with overlap, a bucket's all-reduce may start as soon as its last gradient is written, while
///    backward goes on; with overlap == false, no all-reduce starts before the whole backward is
///    done (the baseline the overlap is measured against);
///  * the host never blocked. Returns the buckets' works, in bucket order.
std::vector<AllReduceWork> backward_with_overlap(Replica& replica, Stream& compute, Stream& comm,
                                                 bool overlap = true);

/// Task 3. The optimizer step after backward_with_overlap: each bucket's update
/// (Replica::launch_sgd) on `compute`, buckets in order. Bucket b's update reads its gradients
/// only after bucket b's all-reduce has written them, and waits for nothing more: an update does
/// not wait for the all-reduces of later buckets. Never blocks the host.
void optimizer_step(Replica& replica, Stream& compute, std::vector<AllReduceWork>& works);

/// Task 4. What the device would do with a program, worked out without running it: the time of
/// every op and the first stream race, exactly as <dist/device.hpp> defines them (its header
/// comment: times, what blocks the host, the race detector), so that analyze(p) equals what
/// replay(p) observes on the simulated device (program.hpp).
struct ProgramRace {
  int op = -1;       // the op the detector refuses (the later one); -1: the program has no race
  int earlier = -1;  // the op it races with, enqueued before it on another stream
  int buffer = -1;   // the buffer they both touch
};
struct ProgramAnalysis {
  /// One entry per op before the race (every op when there is none), in program order:
  ///   Kernel: the simulated time it ends;
  ///   Record: the time the event completes;
  ///   Wait: the earliest time a kernel enqueued right after it on that stream could start;
  ///   SyncEvent, SyncStream, Query, HostWork: the host's clock after the call.
  std::vector<double> time;
  /// Per op before the race: what a Query returns (1 true, 0 false); -1 for every other op.
  std::vector<int> answer;
  ProgramRace race;
};
/// The rules (device.hpp's, restated as what must hold):
///  * Times. An op on a stream starts at the latest of: the end of the work before it on its
///    stream, the events that stream was told to wait for (their completion times), and the host's
///    clock when it was enqueued. An event completes when the work captured by its last record
///    does (a record on an idle stream: the host's clock then). A host synchronize moves the
///    host's clock to the end of the awaited work, never backwards; a query returns true when the
///    event's work is done at the host's current clock. An event never recorded is complete, and
///    waiting on it orders nothing. Enqueueing costs the host nothing.
///  * Order. Op A happens before op B when a chain of these links leads from A to B: program
///    order on one stream; a record captures what its stream had learnt, a wait
///    passes what the event captured to its stream; the host learns what a stream or event
///    covers when it synchronizes with it or a query returns true, and passes what it has learnt
///    to every op it enqueues afterwards.
///  * Races. A kernel races with an earlier kernel on another stream that touches a buffer it
///    touches, at least one of the two writing, when the earlier one does not happen before it.
///    The race is the first op in program order that has one. If that op has several, report the
///    first in this order: its accesses (its reads, then its writes, each in the order listed);
///    for one access, the buffer's last write before any read; among reads (for a write only),
///    the reads since the buffer's last write, one per stream (its latest), lowest stream
///    index first. The analysis stops at the race: nothing after it is run.
ProgramAnalysis analyze(const Program& program);

}  // namespace streams
