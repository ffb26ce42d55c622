// The operations the threads backend keeps in flight: point-to-point messages, collective calls
// and the slot where all ranks' calls of one collective meet, and trace events.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/backend.hpp"
#include "dist/dist.hpp"
#include "threads/link_model.hpp"
#include "threads/schedules.hpp"
#include "threads/wait_policy.hpp"

namespace dist::detail::threads {

/// The peer of an any-source recv before it is matched.
inline constexpr int kAnySource = -1;

/// A send or recv posted by `owner`; matched by (source, tag) in FIFO order (p2p.cpp), or, for
/// an any-source recv, by the earliest simulated arrival (any_source.cpp).
struct P2POp {
  bool is_send = false;
  bool blocking = false;    // send/recv (true) or isend/irecv (false); for messages only
  int owner = 0;            // the rank that posted it
  int peer = 0;             // dst for a send, src for a recv (kAnySource until an any-source
                            // recv is matched, then its source)
  bool any_source = false;  // recv_any / irecv_any (any_source.cpp)
  int tag = 0;
  int gid = 0;                             // the group it was posted on (0: the world)
  std::shared_ptr<const GroupInfo> group;  // null: the world (peer is a world rank either way)
  const void* sbuf = nullptr;
  void* rbuf = nullptr;
  std::size_t count = 0;
  DataType type = DataType::Float32;
  double post_clock = 0;  // owner's clock when posted
  Transfer wire;          // set by the sender at post; copied into the recv at match
  std::atomic<bool> done{false};
  bool waited = false;                   // owner thread only
  SteadyClock::time_point first_poll{};  // owner thread only: first is_completed() that said no
  std::string error;                     // non-empty: mismatch (set before done)
  CallSite site;                         // the caller's file:line (dist.hpp's `where`)

  std::size_t bytes() const { return count * size_of(type); }
  /// "send(dst=1, tag=0, 16 floats)"; "wait on isend(...)" for a non-blocking one;
  /// "recv_any(tag=0, 16 floats)" for an unmatched any-source recv (diagnostics.cpp).
  std::string describe() const;
};

/// One rank's call of a collective.
struct CollCall {
  CollKind kind = CollKind::Barrier;
  std::size_t count = 0;
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  bool async = false;
  const void* in = nullptr;
  void* out = nullptr;
  LinkState link;                          // the caller's clock and link state on arrival
  std::shared_ptr<const GroupInfo> group;  // the group it runs on (null: the world)
  // Creating groups: new_group's world ranks; split's colour and key; the new group's name.
  std::vector<int> members;
  int color = 0, key = 0;
  std::string label;
  CallSite site;  // the caller's file:line (dist.hpp's `where`)

  bool has_op() const {
    return kind == CollKind::Reduce || kind == CollKind::AllReduce ||
           kind == CollKind::ReduceScatter;
  }
  bool has_root() const {
    return kind == CollKind::Broadcast || kind == CollKind::Reduce || kind == CollKind::Gather ||
           kind == CollKind::Scatter;
  }
  bool same_as(const CollCall& o) const {
    if (kind == CollKind::NewGroup) return o.kind == kind && members == o.members;
    if (kind == CollKind::Split) return o.kind == kind;
    return kind == o.kind && count == o.count && type == o.type && (!has_op() || op == o.op) &&
           (!has_root() || root == o.root);
  }
  /// "all_reduce(16 floats, sum)", "... on group 'tp0'" on a group (diagnostics.cpp).
  std::string describe() const;
};

/// Where the calls of one collective (the seq-th of every rank) meet (collectives.cpp).
struct CollSlot {
  std::uint64_t seq = 0;
  int p = 0;               // ranks taking part; calls, result and msgs are indexed by group rank
  std::vector<int> world;  // world rank of each group rank
  int arrived = 0;
  int first_rank = -1;
  bool any_async = false;
  std::atomic<bool> ready{false};  // all arrived; results computed (set under the engine mutex)
  std::atomic<bool> done{false};   // data moved (async: by the last arriver)
  std::vector<CollCall> calls;     // per rank
  std::vector<LinkState> result;   // per rank, after the schedule
  std::vector<std::vector<MsgRecord>> msgs;
  double start = 0;                // max of the arrival clocks
  std::atomic<int> parts_done{0};  // parallel execution: ranks done with their part
  std::vector<std::shared_ptr<const GroupInfo>> created;  // new_group/split: per group rank
};

class Engine;

/// An all_reduce_async in flight on one rank.
struct AsyncColl {
  Engine* engine = nullptr;
  int rank = 0;   // world rank
  int grank = 0;  // its rank in the slot's group
  std::shared_ptr<CollSlot> slot;
  bool applied = false;  // owner thread only
  SteadyClock::time_point first_poll{};
};

/// One span of a rank's trace track (trace.cpp).
struct TraceEvent {
  std::string name;
  double t0 = 0, t1 = 0;
  int peer = -1, tag = -1;
  std::uint64_t bytes = 0;
  std::uint64_t seq = 0;
  bool is_coll = false;
  std::string track;  // "" = the rank's own track; else a stream of its device (trace.cpp)
  std::string group;  // the group's name; empty on the world
};

/// "16 floats", "1 int32".
std::string describe_count(std::size_t count, DataType type);

}  // namespace dist::detail::threads
