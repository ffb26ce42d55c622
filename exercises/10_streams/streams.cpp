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
  DISTLAB_TODO("enqueue the collective on the communication stream, then mark its end there "
               "(README: task 1)");
}

bool AllReduceWork::is_completed() {
  DISTLAB_TODO("ask the device, without blocking, whether the collective is done");
}

void AllReduceWork::wait(Stream& compute) {
  DISTLAB_TODO("order the compute stream after the collective; the host must not block");
}

void AllReduceWork::synchronize() {
  DISTLAB_TODO("block the host until the collective is done");
}

double wait_for(AllReduceWork& work, Strategy s, Stream& compute, double poll_interval_s) {
  DISTLAB_TODO("wait the way `s` names and return the host's simulated time it cost (README: task "
               "1, the three strategies)");
}

// ---- Task 2 -------------------------------------------------------------------------------------

std::vector<AllReduceWork> backward_with_overlap(Replica& replica, Stream& compute, Stream& comm,
                                                 bool overlap) {
  std::vector<AllReduceWork> works;
  DISTLAB_TODO("launch backward last layer first; start each bucket's all-reduce once its "
               "gradients are all launched, ordered after them by an event (README: task 2)");
  return works;
}

// ---- Task 3 -------------------------------------------------------------------------------------

void optimizer_step(Replica& replica, Stream& compute, std::vector<AllReduceWork>& works) {
  DISTLAB_TODO("each bucket's update after its own all-reduce, without blocking the host (README: "
               "task 3)");
}

}  // namespace streams
