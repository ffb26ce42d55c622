#include "streams.hpp"

#include "dist/device.hpp"
#include "distlab/todo.hpp"
#include "replica.hpp"

namespace streams {

const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::Synchronize:
      return "synchronize";
    case Strategy::Poll:
      return "poll";
    case Strategy::StreamOrder:
      return "stream order";
  }
  return "?";
}

// ---- Task 1 -------------------------------------------------------------------------------------

AllReduceWork::AllReduceWork(DeviceBuffer<float>& buf, Stream& comm, dist::ReduceOp op)
    : done_("all_reduce done") {
  // BEGIN SOLUTION: enqueue the collective on the communication stream, then mark its end there
  //   (README: task 1)
  dist::device::all_reduce(buf, comm, op);
  done_.record(comm);
  // END SOLUTION
}

bool AllReduceWork::is_completed() {
  // BEGIN SOLUTION: ask the device, without blocking, whether the collective is done
  return done_.query();
  // END SOLUTION
}

void AllReduceWork::wait(Stream& compute) {
  // BEGIN SOLUTION: order the compute stream after the collective; the host must not block
  compute.wait_event(done_);
  // END SOLUTION
}

void AllReduceWork::synchronize() {
  // BEGIN SOLUTION: block the host until the collective is done
  done_.synchronize();
  // END SOLUTION
}

double wait_for(AllReduceWork& work, Strategy s, Stream& compute, double poll_interval_s) {
  // BEGIN SOLUTION: wait the way `s` names and return the host's simulated time it cost
  //   (README: task 1, the three strategies)
  const double before = dist::sim_time();
  switch (s) {
    case Strategy::Synchronize:
      work.synchronize();
      break;
    case Strategy::Poll:
      while (!work.is_completed()) dist::sim_compute(poll_interval_s, "poll");
      break;
    case Strategy::StreamOrder:
      work.wait(compute);
      break;
  }
  return dist::sim_time() - before;
  // END SOLUTION
}

// ---- Task 2 -------------------------------------------------------------------------------------

std::vector<AllReduceWork> backward_with_overlap(Replica& replica, Stream& compute, Stream& comm,
                                                 bool overlap) {
  std::vector<AllReduceWork> works;
  // BEGIN SOLUTION: launch backward last layer first; start each bucket's all-reduce once its
  //   gradients are all launched, ordered after them by an event (README: task 2)
  Event grads_ready("grads ready");
  const auto start = [&](int bucket) {
    grads_ready.record(compute);
    comm.wait_event(grads_ready);
    works.push_back(replica.all_reduce_bucket(bucket, comm));
  };
  for (int layer = replica.num_layers() - 1; layer >= 0; --layer) {
    replica.launch_backward(layer, compute);
    const int b = replica.bucket_of(layer);
    if (overlap && replica.buckets()[static_cast<std::size_t>(b)].back() == layer) start(b);
  }
  if (!overlap) {
    for (int b = 0; b < replica.num_buckets(); ++b) start(b);
  }
  // END SOLUTION
  return works;
}

// ---- Task 3 -------------------------------------------------------------------------------------

void optimizer_step(Replica& replica, Stream& compute, std::vector<AllReduceWork>& works) {
  // BEGIN SOLUTION: each bucket's update after its own all-reduce, without blocking the host
  //   (README: task 3)
  for (int b = 0; b < replica.num_buckets(); ++b) {
    works[static_cast<std::size_t>(b)].wait(compute);
    replica.launch_sgd(b, compute);
  }
  // END SOLUTION
}

}  // namespace streams
