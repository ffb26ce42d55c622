#include "program.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <stdexcept>

#include "dist/device.hpp"
#include "dist/dist.hpp"

namespace streams {

namespace {
// A one-letter name and a number ("s1", "k12"): appended, not prepended (GCC 12 warns about
// "s" + std::to_string(n) with -Wrestrict, a false positive).
std::string numbered(char letter, long long n) {
  std::string name(1, letter);
  name += std::to_string(n);
  return name;
}
}  // namespace

namespace dd = dist::device;

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::Kernel:
      return "kernel";
    case OpKind::Record:
      return "record";
    case OpKind::Wait:
      return "wait";
    case OpKind::SyncEvent:
      return "sync event";
    case OpKind::SyncStream:
      return "sync stream";
    case OpKind::Query:
      return "query";
    case OpKind::HostWork:
      return "host work";
  }
  return "?";
}

std::string Program::stream_name(int s) const {
  if (s >= 0 && static_cast<std::size_t>(s) < stream_names.size())
    return stream_names[static_cast<std::size_t>(s)];
  return numbered('s', s);
}

std::string Program::buffer_name(int b) const {
  if (b >= 0 && static_cast<std::size_t>(b) < buffer_names.size())
    return buffer_names[static_cast<std::size_t>(b)];
  return numbered('b', b);
}

void Program::validate() const {
  const auto bad = [](std::size_t i, const std::string& what) {
    throw std::invalid_argument("Program: op " + std::to_string(i) + ": " + what);
  };
  if (streams < 1 || events < 0 || buffers < 0)
    throw std::invalid_argument("Program: needs at least one stream, and counts >= 0");
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const bool needs_stream = op.kind == OpKind::Kernel || op.kind == OpKind::Record ||
                              op.kind == OpKind::Wait || op.kind == OpKind::SyncStream;
    const bool needs_event = op.kind == OpKind::Record || op.kind == OpKind::Wait ||
                             op.kind == OpKind::SyncEvent || op.kind == OpKind::Query;
    if (needs_stream && (op.stream < 0 || op.stream >= streams)) bad(i, "stream out of range");
    if (needs_event && (op.event < 0 || op.event >= events)) bad(i, "event out of range");
    if (op.seconds < 0) bad(i, "negative duration");
    for (int b : op.reads)
      if (b < 0 || b >= buffers) bad(i, "buffer out of range");
    for (int b : op.writes) {
      if (b < 0 || b >= buffers) bad(i, "buffer out of range");
      for (int r : op.reads)
        if (r == b) bad(i, "a kernel reads and writes buffer " + buffer_name(b));
    }
  }
}

Replayed replay(const Program& program) {
  program.validate();
  if (dist::sim_time() != 0.0)
    throw std::logic_error("replay: the host's clock must be 0 (call it first in the rank)");
  std::vector<dd::Stream> streams;
  std::vector<dd::Event> events;
  std::vector<dd::DeviceBuffer<float>> buffers;
  for (int s = 0; s < program.streams; ++s) streams.emplace_back(program.stream_name(s));
  for (int e = 0; e < program.events; ++e) events.emplace_back(numbered('e', e));
  for (int b = 0; b < program.buffers; ++b) buffers.emplace_back(program.buffer_name(b), 16);
  // The times are read through events of our own, recorded where the op's time is the event's
  // (a record captures max(stream's tail, host clock)); recording one changes no ordering.
  dd::Event origin("origin");
  origin.record(streams[0]);
  std::vector<std::pair<std::size_t, dd::Event>> timed;  // op index, its event
  Replayed out;
  const auto mark = [&](std::size_t i, int stream) {
    timed.emplace_back(i, dd::Event(numbered('t', i)));
    timed.back().second.record(streams[static_cast<std::size_t>(stream)]);
  };
  out.time.reserve(program.ops.size());
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    out.time.push_back(0);
    out.answer.push_back(-1);
    try {
      switch (op.kind) {
        case OpKind::Kernel: {
          dd::Kernel k{op.name, op.seconds, {}};
          for (int b : op.reads)
            k.accesses.push_back(dd::reads(buffers[static_cast<std::size_t>(b)]));
          for (int b : op.writes)
            k.accesses.push_back(dd::writes(buffers[static_cast<std::size_t>(b)]));
          dd::launch(streams[static_cast<std::size_t>(op.stream)], k, {});
          mark(i, op.stream);
          break;
        }
        case OpKind::Record:
          events[static_cast<std::size_t>(op.event)].record(
              streams[static_cast<std::size_t>(op.stream)]);
          mark(i, op.stream);
          break;
        case OpKind::Wait:
          streams[static_cast<std::size_t>(op.stream)].wait_event(
              events[static_cast<std::size_t>(op.event)]);
          mark(i, op.stream);
          break;
        case OpKind::SyncEvent:
          events[static_cast<std::size_t>(op.event)].synchronize();
          out.time.back() = dist::sim_time();
          break;
        case OpKind::SyncStream:
          streams[static_cast<std::size_t>(op.stream)].synchronize();
          out.time.back() = dist::sim_time();
          break;
        case OpKind::Query:
          out.answer.back() = events[static_cast<std::size_t>(op.event)].query() ? 1 : 0;
          out.time.back() = dist::sim_time();
          break;
        case OpKind::HostWork:
          dist::sim_compute(op.seconds, "host work");
          out.time.back() = dist::sim_time();
          break;
      }
    } catch (const dd::StreamRaceError& e) {
      out.race_op = static_cast<int>(i);
      out.race_message = e.what();
      out.time.pop_back();
      out.answer.pop_back();
      break;
    }
  }
  dd::device_synchronize();
  for (auto& [i, ev] : timed) out.time[i] = dd::elapsed_seconds(origin, ev);
  return out;
}

Program random_program(std::uint64_t seed, int ops, int streams, int events, int buffers,
                       bool ordered) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  Program p;
  p.streams = streams;
  p.events = events;
  p.buffers = buffers;
  std::vector<int> last_writer(static_cast<std::size_t>(buffers), -1);  // stream
  // Durations are multiples of 1/64 ms (binary fractions): the sums are exact.
  const auto duration = [&] { return static_cast<double>(1 + pick(64)) / 64 * 1e-3; };
  int kernels = 0;
  while (static_cast<int>(p.ops.size()) < ops) {
    const int r = pick(100);
    Op op;
    if (r < 45) {
      op.kind = OpKind::Kernel;
      op.stream = pick(streams);
      op.seconds = duration();
      op.name = numbered('k', kernels++);
      for (int b = 0; b < buffers; ++b) {
        const int a = pick(6);
        if (a == 0) op.reads.push_back(b);
        if (a == 1) op.writes.push_back(b);
      }
      if (ordered && events > 0) {
        for (int b = 0; b < buffers; ++b) {
          const int w = last_writer[static_cast<std::size_t>(b)];
          const bool touches = std::count(op.reads.begin(), op.reads.end(), b) +
                                   std::count(op.writes.begin(), op.writes.end(), b) >
                               0;
          if (touches && w >= 0 && w != op.stream) {
            Op rec;
            rec.kind = OpKind::Record;
            rec.stream = w;
            rec.event = pick(events);
            Op wait;
            wait.kind = OpKind::Wait;
            wait.stream = op.stream;
            wait.event = rec.event;
            p.ops.push_back(rec);
            p.ops.push_back(wait);
          }
        }
      }
      for (int b : op.writes) last_writer[static_cast<std::size_t>(b)] = op.stream;
    } else if (r < 60) {
      op.kind = OpKind::Record;
      op.stream = pick(streams);
      op.event = events > 0 ? pick(events) : -1;
      if (events == 0) continue;
    } else if (r < 75) {
      op.kind = OpKind::Wait;
      op.stream = pick(streams);
      op.event = events > 0 ? pick(events) : -1;
      if (events == 0) continue;
    } else if (r < 80) {
      op.kind = OpKind::SyncEvent;
      if (events == 0) continue;
      op.event = pick(events);
    } else if (r < 84) {
      op.kind = OpKind::SyncStream;
      op.stream = pick(streams);
    } else if (r < 92) {
      op.kind = OpKind::Query;
      if (events == 0) continue;
      op.event = pick(events);
    } else {
      op.kind = OpKind::HostWork;
      op.seconds = duration();
    }
    p.ops.push_back(op);
  }
  p.ops.resize(static_cast<std::size_t>(ops));
  return p;
}

std::string listing(const Program& p) {
  std::ostringstream o;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    char head[32];
    std::snprintf(head, sizeof head, "%3zu  ", i);
    o << head;
    switch (op.kind) {
      case OpKind::Kernel:
        o << op.name << " on " << p.stream_name(op.stream) << " (" << op.seconds * 1e3 << " ms)";
        if (!op.reads.empty()) {
          o << " reads";
          for (int b : op.reads) o << ' ' << p.buffer_name(b);
        }
        if (!op.writes.empty()) {
          o << " writes";
          for (int b : op.writes) o << ' ' << p.buffer_name(b);
        }
        break;
      case OpKind::Record:
        o << "record e" << op.event << " on " << p.stream_name(op.stream);
        break;
      case OpKind::Wait:
        o << p.stream_name(op.stream) << " waits on e" << op.event;
        break;
      case OpKind::SyncEvent:
        o << "host synchronizes e" << op.event;
        break;
      case OpKind::SyncStream:
        o << "host synchronizes " << p.stream_name(op.stream);
        break;
      case OpKind::Query:
        o << "host queries e" << op.event;
        break;
      case OpKind::HostWork:
        o << "host works " << op.seconds * 1e3 << " ms";
        break;
    }
    o << '\n';
  }
  return o.str();
}

}  // namespace streams
