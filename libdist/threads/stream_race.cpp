// The stream-race detector of the simulated device (see device_state.hpp for the vector clocks).
//
// For every buffer it keeps the last write and, per agent, the latest read since that write.
// A new access by an operation on stream S races with
//   * the last write, if it was on another stream and S's clock lacks its tick (read or write
//     after an unordered write);
//   * a read since that write on another stream whose tick S's clock lacks, if the new access
//     writes (a write that may overtake a read still in flight).
// Operations on one stream never race (a stream is in order). The report names both operations,
// both streams, the buffer and the dependency that would order them, like ThreadSanitizer's.
#include <sstream>

#include "threads/device_state.hpp"

namespace dist::detail::threads {

void join(VectorClock& a, const VectorClock& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (std::size_t i = 0; i < b.size(); ++i) a[i] = std::max(a[i], b[i]);
}

namespace {

std::string us(double seconds) {
  std::ostringstream o;
  o.precision(6);
  o << seconds * 1e6 << " us";
  return o.str();
}

std::string race_report(int rank, const DeviceBufferState& buf, const DeviceOp& later,
                        bool later_writes, const DeviceOp& earlier, bool earlier_writes) {
  std::ostringstream o;
  o << "stream race on rank " << rank << ", buffer '" << buf.name << "' (" << buf.bytes
    << " bytes):\n  " << later.what << " on stream '" << later.stream << "' "
    << (later_writes ? "writes" : "reads") << " it (would start at simulated " << us(later.start)
    << ")\n  while " << earlier.what << " on stream '" << earlier.stream << "' "
    << (earlier_writes ? "writes" : "reads") << " it (enqueued before it, simulated "
    << us(earlier.start) << " to " << us(earlier.end) << "),\n  and nothing orders " << earlier.what
    << " before " << later.what << ".\n  Missing dependency: record an event on '" << earlier.stream
    << "' after " << earlier.what << " and make '" << later.stream
    << "' wait on it (Stream::wait_event) before enqueuing " << later.what
    << ", or synchronize the host with '" << earlier.stream << "' before enqueuing it.";
  return o.str();
}

bool ordered_before(const DeviceOp& earlier, const VectorClock& clock) {
  return tick_of(clock, earlier.agent) >= earlier.tick;
}

}  // namespace

void check_accesses(int rank, const DeviceState& dev, const DeviceOp& op, const VectorClock& clock,
                    const std::vector<device::detail::Access>& accesses) {
  for (const auto& a : accesses) {
    auto it = dev.buffers.find(a.buffer);
    if (it == dev.buffers.end()) {
      throw Error(op.what + " on stream '" + op.stream +
                  "' uses a buffer that no longer exists (or belongs to another rank)");
    }
    const DeviceBufferState& b = it->second;
    if (b.has_write && b.last_write.agent != op.agent && !ordered_before(b.last_write, clock)) {
      throw device::StreamRaceError(race_report(rank, b, op, a.write, b.last_write, true));
    }
    if (a.write) {
      for (const auto& [agent, rd] : b.reads_since_write) {
        if (agent != op.agent && !ordered_before(rd, clock)) {
          throw device::StreamRaceError(race_report(rank, b, op, true, rd, false));
        }
      }
    }
  }
}

void record_accesses(DeviceState& dev, const DeviceOp& op,
                     const std::vector<device::detail::Access>& accesses) {
  for (const auto& a : accesses) {
    DeviceBufferState& b = dev.buffers[a.buffer];
    if (a.write) {
      b.has_write = true;
      b.last_write = op;
      b.reads_since_write.clear();
    } else {
      b.reads_since_write[op.agent] = op;
    }
  }
}

}  // namespace dist::detail::threads
