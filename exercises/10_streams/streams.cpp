#include "streams.hpp"

#include <algorithm>
#include <cstdint>
#include <map>

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
  DISTLAB_TODO("start the all-reduce on `comm`; afterwards the work stands for it alone (README: "
               "task 1)");
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
  DISTLAB_TODO("backward on compute, last layer first; each bucket's all-reduce on comm, never "
               "before its gradients are written, as early as that allows (README: task 2, what "
               "must hold)");
  return works;
}

// ---- Task 3 -------------------------------------------------------------------------------------

void optimizer_step(Replica& replica, Stream& compute, std::vector<AllReduceWork>& works) {
  DISTLAB_TODO("every update reads its bucket only after that bucket's all-reduce, and waits for "
               "nothing more; the host never blocks (README: task 3)");
}

// ---- Task 4 -------------------------------------------------------------------------------------

// TODO: helpers of analyze, if you want some (README: task 4)

ProgramAnalysis analyze(const Program& program) {
  program.validate();
  ProgramAnalysis out;
  DISTLAB_TODO("the device's times and its happens-before order, op by op; stop at the first race "
               "(README: task 4; header: the rules)");
  return out;
}

}  // namespace streams
