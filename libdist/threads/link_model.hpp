// The link model of the simulated clock, written once: the engine's point-to-point path and the
// schedules of the built-in collectives (schedules.cpp) both move messages through these three
// steps. The contract is stated at dist::sim_time() in <dist/dist.hpp>; the theory (Hockney's
// alpha-beta model, LogGOPSim-style link serialisation) is in docs/threads_backend.md.
#pragma once

#include <algorithm>

namespace dist::detail::threads {

/// Per-rank state of the link model: the rank's clock and when its links become free.
struct LinkState {
  double clock = 0;
  double out_free = 0;  // the outgoing link is busy until then
  double in_free = 0;   // the incoming link is busy until then
};

/// One message on the wire: when it left the sender (ts) and how long it occupies a link (cost =
/// NetworkModel::message_cost(src, dst, bytes) = alpha + bytes * beta).
struct Transfer {
  double ts = 0;
  double cost = 0;
};

/// Step 1, the sender posts the message (send or isend) at its clock t: it starts once the
/// sender's outgoing link is free, ts = max(t, out_free), and holds that link until ts + cost.
inline Transfer post_message(LinkState& sender, double cost) {
  const double ts = std::max(sender.clock, sender.out_free);
  sender.out_free = ts + cost;
  return {ts, cost};
}

/// Step 2, the send returns (a blocking send, or wait() on the isend): the sender's clock becomes
/// max(clock, ts + cost).
inline void finish_send(LinkState& sender, const Transfer& m) {
  sender.clock = std::max(sender.clock, m.ts + m.cost);
}

/// Step 3, the receiver completes the recv (recv returns, or wait() on the irecv), in the order
/// its recvs complete: the message takes the incoming link once it is free, ti = max(ts, in_free),
/// holds it until ti + cost (the arrival), and the receiver's clock becomes max(clock, arrival).
inline void receive_message(LinkState& receiver, const Transfer& m) {
  const double ti = std::max(m.ts, receiver.in_free);
  receiver.in_free = ti + m.cost;
  receiver.clock = std::max(receiver.clock, ti + m.cost);
}

}  // namespace dist::detail::threads
