// The simulated device of one rank (<dist/device.hpp>): its streams, events and buffers, and
// what the stream-race detector knows. Owned by the rank's thread (Rank::device); no locking.
//
// Happens-before is tracked with vector clocks over the rank's agents: agent 0 is the host,
// agent 1 + i is stream i. Each operation on a stream ticks that stream's entry; a stream learns
// what the host knows when the host enqueues on it, what an event captured when it waits on the
// event; the host learns a stream's (an event's) clock when it synchronizes with it or a query()
// says it is done. Operation A is ordered before operation B iff B's clock has A's tick.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dist/device.hpp"

namespace dist::detail::threads {

class Engine;

using VectorClock = std::vector<std::uint64_t>;  // indexed by agent; missing entries are 0

/// max(a, b) entrywise, into a.
void join(VectorClock& a, const VectorClock& b);
inline std::uint64_t tick_of(const VectorClock& c, std::size_t agent) {
  return agent < c.size() ? c[agent] : 0;
}

/// One operation as the race detector and its reports remember it.
struct DeviceOp {
  std::size_t agent = 0;      // 0 = host, 1 + i = stream i
  std::uint64_t tick = 0;     // its agent's entry after it was enqueued
  std::string what;           // "kernel 'sgd_step'", "all_reduce", "memcpy_async (device to host)"
  std::string stream;         // the stream's name
  double start = 0, end = 0;  // simulated times
};

struct DeviceBufferState {
  std::string name;
  std::size_t bytes = 0;
  bool has_write = false;
  DeviceOp last_write;
  std::map<std::size_t, DeviceOp> reads_since_write;  // by agent: its latest read
  std::vector<std::max_align_t> memory;  // the buffer's bytes (never resized after creation)
};

struct StreamState {
  std::string name;
  double tail = 0;  // simulated time its last operation ends (or an awaited event completes)
  VectorClock clock;
};

struct EventState {
  std::string name;
  bool recorded = false;
  double time = 0;  // when the captured work is done
  VectorClock clock;
  std::string stream;  // where it was last recorded
};

struct DeviceState {
  device::DeviceModel model;
  std::vector<StreamState> streams;
  std::vector<EventState> events;
  std::map<std::uint64_t, DeviceBufferState> buffers;
  std::uint64_t next_buffer = 1;
  VectorClock host;  // what the host knows is done
  // The kernel whose body runs now (check_body_access), or none.
  const std::vector<device::detail::Access>* body_accesses = nullptr;
  std::string body_kernel;
  int current_stream = -1;  // a Stream handle, or -1: "compute", made on first use
};

/// The calling rank's engine, rank and device (created on first use). Throws dist::Error outside
/// a threads-backend rank.
struct DeviceContext {
  Engine* engine;
  int rank;
  DeviceState& dev;
};
DeviceContext device_context(const char* call);

/// device.cpp: the stream a handle names (throws if it is another rank's or invalid).
StreamState& stream_of(const DeviceContext& c, int handle);

/// device.cpp: enqueues one operation on `stream` (a handle): checks it for races, then runs
/// `run(start)`, which moves the data and returns the simulated time the operation ends (it
/// starts at max(stream's tail, host clock)); traces it (unless `traced_by_run`) and charges
/// the launch overhead.
DeviceOp enqueue(const DeviceContext& c, int stream, const std::string& what,
                 const std::vector<device::detail::Access>& accesses,
                 const std::function<double(double start)>& run, std::uint64_t bytes,
                 bool traced_by_run = false);

/// stream_race.cpp: throws device::StreamRaceError if one of `op`'s accesses races with a
/// buffer's history. `clock` is the op's stream clock (with the op's own tick).
void check_accesses(int rank, const DeviceState& dev, const DeviceOp& op, const VectorClock& clock,
                    const std::vector<device::detail::Access>& accesses);
/// stream_race.cpp: adds `op`'s accesses (with its final times) to the buffers' histories.
void record_accesses(DeviceState& dev, const DeviceOp& op,
                     const std::vector<device::detail::Access>& accesses);

}  // namespace dist::detail::threads
