// The message schedules of the built-in collectives, replayed through the alpha-beta link model.
//
// The threads backend moves the data of a built-in collective through shared memory, but charges
// the simulated clock and the traffic counters exactly as if the documented algorithm had run with
// send/recv (docs/threads_backend.md lists every schedule). replay() computes, for every rank, its
// finish time, its new link-free times and the list of messages it sent and received.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/dist.hpp"
#include "threads/link_model.hpp"

namespace dist::detail::threads {

enum class CollKind {
  Barrier,
  Broadcast,
  Reduce,
  AllReduce,
  Gather,
  AllGather,
  Scatter,
  ReduceScatter,
  NewGroup,  // creating a group: no messages, no time
  Split
};
const char* coll_name(CollKind kind);

/// One message a rank sent (sent = true, peer = destination) or received (peer = source).
struct MsgRecord {
  int peer;
  std::uint64_t bytes;
  bool sent;
};

/// Replays the schedule of `kind` on p ranks. `state` holds every rank's state on entry (clock =
/// the collective's start time) and is updated in place; `msgs[r]` receives rank r's messages
/// (cleared first). `count` is the collective's count (elements per rank for gather/all_gather/
/// scatter/reduce_scatter, the buffer's elements otherwise); `elem` its element size in bytes.
/// On a group, rank i of the schedule is world rank world[i] (the network model prices each
/// message between world ranks); `world` empty means the world itself. msgs name schedule ranks.
void replay(CollKind kind, int p, int root, std::size_t count, std::size_t elem,
            const NetworkModel& net, std::vector<LinkState>& state,
            std::vector<std::vector<MsgRecord>>& msgs, const std::vector<int>& world = {});

/// Ring chunking of `count` elements into p chunks: the first count % p chunks get one more.
inline std::size_t chunk_len(std::size_t count, int p, int i) {
  const auto up = static_cast<std::size_t>(p);
  return count / up + (static_cast<std::size_t>(i) < count % up ? 1 : 0);
}
inline std::size_t chunk_off(std::size_t count, int p, int i) {
  const auto up = static_cast<std::size_t>(p);
  const auto ui = static_cast<std::size_t>(i);
  return ui * (count / up) + (ui < count % up ? ui : count % up);
}

}  // namespace dist::detail::threads
