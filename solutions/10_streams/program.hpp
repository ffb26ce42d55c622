// Given code for 10_streams, task 4: a device program written down as data (what the host
// enqueued, in order), the same program replayed on the simulated device (its times and the
// race detector are the oracle task 4 is graded against), random programs and a text listing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace streams {

/// One call the host made, in program order.
enum class OpKind {
  Kernel,      // a kernel on `stream`: `seconds` long, reads `reads`, writes `writes`
  Record,      // Event::record: `event` on `stream`
  Wait,        // Stream::wait_event: `stream` waits on `event`
  SyncEvent,   // Event::synchronize: the host blocks on `event`
  SyncStream,  // Stream::synchronize: the host blocks on `stream`
  Query,       // Event::query on `event` (the host does not block)
  HostWork,    // dist::sim_compute: `seconds` of the host's own work
};
const char* to_string(OpKind k);

struct Op {
  OpKind kind = OpKind::Kernel;
  int stream = -1;          // Kernel, Record, Wait, SyncStream
  int event = -1;           // Record, Wait, SyncEvent, Query
  double seconds = 0;       // Kernel, HostWork
  std::vector<int> reads;   // Kernel: buffer indices it reads
  std::vector<int> writes;  // Kernel: buffer indices it writes (none of them also in reads)
  std::string name;         // Kernel: its name ("k3")
};

/// A program: `streams` streams, `events` events and `buffers` buffers, all created before the
/// first op (every stream idle, every event never recorded, every buffer never touched; the
/// host's clock 0), then `ops` in the order the host called them.
struct Program {
  int streams = 2, events = 1, buffers = 1;
  std::vector<Op> ops;
  std::vector<std::string> stream_names;  // empty: "s0", "s1", ...
  std::vector<std::string> buffer_names;  // empty: "b0", "b1", ...
  std::string stream_name(int s) const;
  std::string buffer_name(int b) const;
  /// Throws std::invalid_argument naming the op when an index is out of range, a duration is
  /// negative, or a kernel reads and writes the same buffer.
  void validate() const;
};

/// What the simulated device did with a program (replay), op by op.
struct Replayed {
  std::vector<double> time;  // task 4's times (streams.hpp, ProgramAnalysis::time), per op
  std::vector<int> answer;   // Query: 1 true, 0 false; other ops -1
  int race_op = -1;          // the op the race detector refused (-1: none); ops after it not run
  std::string race_message;  // the detector's report
};
/// Runs `program` on this rank's simulated device with <dist/device.hpp> (inside dist::launch,
/// threads backend; the host's clock must be 0, and the program's streams, events and buffers are
/// new), and catches the first StreamRaceError.
Replayed replay(const Program& program);

/// A random program (deterministic in `seed`): `ops` ops over `streams` streams, `events` events,
/// `buffers` buffers. `ordered`: kernels on another stream than a buffer's last writer are
/// preceded by the wait that orders them (a program without races, though not guaranteed).
Program random_program(std::uint64_t seed, int ops, int streams, int events, int buffers,
                       bool ordered);

/// One line per op: "  3  k3 on s1 (0.5 ms) reads b0 writes b1".
std::string listing(const Program& program);

}  // namespace streams
