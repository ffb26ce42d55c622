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
  // BEGIN SOLUTION: start the all-reduce on `comm`; afterwards the work stands for it alone
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
  // BEGIN SOLUTION: backward on compute, last layer first; each bucket's all-reduce on comm,
  //   never before its gradients are written, as early as that allows (README: task 2, what must
  //   hold)
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
  // BEGIN SOLUTION: every update reads its bucket only after that bucket's all-reduce, and waits
  //   for nothing more; the host never blocks (README: task 3)
  for (int b = 0; b < replica.num_buckets(); ++b) {
    works[static_cast<std::size_t>(b)].wait(compute);
    replica.launch_sgd(b, compute);
  }
  // END SOLUTION
}

// ---- Task 4 -------------------------------------------------------------------------------------

// BEGIN SOLUTION DECL: helpers of analyze, if you want some (README: task 4)
namespace {

using Clock = std::vector<std::uint64_t>;  // what an agent knows: agent -> the ticks it has seen

void join_into(Clock& a, const Clock& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);
}

struct Access {  // one op's access to a buffer, as the history remembers it
  int op = -1;
  std::size_t agent = 0;
  std::uint64_t tick = 0;
};

struct History {
  Access last_write;
  std::map<std::size_t, Access> reads;  // since the last write: per agent, its latest
};

bool happens_before(const Access& a, const Clock& c) { return c[a.agent] >= a.tick; }

}  // namespace
// END SOLUTION

ProgramAnalysis analyze(const Program& program) {
  program.validate();
  ProgramAnalysis out;
  // BEGIN SOLUTION: the device's times and its happens-before order, op by op; stop at the
  //   first race (README: task 4; header: the rules)
  const std::size_t agents = 1 + static_cast<std::size_t>(program.streams);  // 0 = the host
  Clock host(agents, 0);
  double host_time = 0;
  std::vector<Clock> stream_clock(agents - 1, Clock(agents, 0));
  std::vector<double> tail(agents - 1, 0);
  struct EventState {
    bool recorded = false;
    double time = 0;
    Clock clock;
  };
  std::vector<EventState> events(static_cast<std::size_t>(program.events));
  std::vector<History> history(static_cast<std::size_t>(program.buffers));

  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    const auto s = static_cast<std::size_t>(op.stream);
    double time = 0;
    int answer = -1;
    switch (op.kind) {
      case OpKind::Kernel: {
        Clock c = stream_clock[s];
        join_into(c, host);
        const std::size_t agent = 1 + s;
        ++c[agent];
        const Access me{static_cast<int>(i), agent, c[agent]};
        const auto race = [&](const Access& other, int buffer) {
          out.race = {static_cast<int>(i), other.op, buffer};
        };
        const auto check = [&](int b, bool write) {
          const History& h = history[static_cast<std::size_t>(b)];
          if (h.last_write.op >= 0 && h.last_write.agent != agent &&
              !happens_before(h.last_write, c)) {
            race(h.last_write, b);
            return false;
          }
          if (write) {
            for (const auto& [a, rd] : h.reads) {
              if (a != agent && !happens_before(rd, c)) {
                race(rd, b);
                return false;
              }
            }
          }
          return true;
        };
        for (int b : op.reads)
          if (!check(b, false)) return out;
        for (int b : op.writes)
          if (!check(b, true)) return out;
        for (int b : op.reads) history[static_cast<std::size_t>(b)].reads[agent] = me;
        for (int b : op.writes) {
          history[static_cast<std::size_t>(b)].last_write = me;
          history[static_cast<std::size_t>(b)].reads.clear();
        }
        stream_clock[s] = c;
        tail[s] = std::max(tail[s], host_time) + op.seconds;
        time = tail[s];
        break;
      }
      case OpKind::Record: {
        EventState& e = events[static_cast<std::size_t>(op.event)];
        join_into(stream_clock[s], host);
        e.recorded = true;
        e.time = std::max(tail[s], host_time);
        e.clock = stream_clock[s];
        time = e.time;
        break;
      }
      case OpKind::Wait: {
        const EventState& e = events[static_cast<std::size_t>(op.event)];
        if (e.recorded) {
          join_into(stream_clock[s], e.clock);
          tail[s] = std::max(tail[s], e.time);
        }
        time = std::max(tail[s], host_time);
        break;
      }
      case OpKind::SyncEvent: {
        const EventState& e = events[static_cast<std::size_t>(op.event)];
        if (e.recorded) {
          host_time = std::max(host_time, e.time);
          join_into(host, e.clock);
        }
        time = host_time;
        break;
      }
      case OpKind::SyncStream:
        host_time = std::max(host_time, tail[s]);
        join_into(host, stream_clock[s]);
        time = host_time;
        break;
      case OpKind::Query: {
        const EventState& e = events[static_cast<std::size_t>(op.event)];
        answer = 1;
        if (e.recorded && e.time > host_time) answer = 0;
        if (answer == 1 && e.recorded) join_into(host, e.clock);
        time = host_time;
        break;
      }
      case OpKind::HostWork:
        host_time += op.seconds;
        time = host_time;
        break;
    }
    out.time.push_back(time);
    out.answer.push_back(answer);
  }
  // END SOLUTION
  return out;
}

}  // namespace streams
