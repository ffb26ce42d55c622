// Schedules of the built-in collectives (see docs/threads_backend.md, "Built-in collectives").
//
// Each schedule is the send/recv program a student would write, run in lock step through the
// same link model as real messages (link_model.hpp: post, finish the send, receive); ring steps
// are "isend to the right, recv from the left (reduce), wait for the isend".
#include "threads/schedules.hpp"

#include <algorithm>

namespace dist::detail::threads {

const char* coll_name(CollKind kind) {
  switch (kind) {
    case CollKind::Barrier:
      return "barrier";
    case CollKind::Broadcast:
      return "broadcast";
    case CollKind::Reduce:
      return "reduce";
    case CollKind::AllReduce:
      return "all_reduce";
    case CollKind::Gather:
      return "gather";
    case CollKind::AllGather:
      return "all_gather";
    case CollKind::Scatter:
      return "scatter";
    case CollKind::ReduceScatter:
      return "reduce_scatter";
    case CollKind::NewGroup:
      return "new_group";
    case CollKind::Split:
      return "split";
  }
  return "?";
}

namespace {

struct Msg {
  int src, dst;
  std::uint64_t bytes;
  Transfer wire;
};

class Replay {
 public:
  Replay(const NetworkModel& net, std::vector<LinkState>& st,
         std::vector<std::vector<MsgRecord>>& msgs, const std::vector<int>& world)
      : net_(net), st_(st), msgs_(msgs), world_(world) {}

  // The sender posts the message (send or isend): reserves its out-link.
  Msg post(int s, int d, std::uint64_t bytes) {
    const Transfer wire =
        post_message(st_[s], net_.message_cost(w(s), w(d), static_cast<std::size_t>(bytes)));
    msgs_[s].push_back({d, bytes, true});
    return {s, d, bytes, wire};
  }
  // The receiver's recv completes: reserves its in-link, advances its clock.
  void receive(const Msg& m) {
    receive_message(st_[m.dst], m.wire);
    msgs_[m.dst].push_back({m.src, m.bytes, false});
  }
  // The sender's send returns (blocking send, or wait on the isend).
  void sender_done(const Msg& m) { finish_send(st_[m.src], m.wire); }
  void reduce(int r, std::uint64_t bytes) {
    st_[r].clock += net_.reduce_cost(static_cast<std::size_t>(bytes));
  }
  // One blocking send matched by one blocking recv.
  void send_recv(int s, int d, std::uint64_t bytes) {
    const Msg m = post(s, d, bytes);
    sender_done(m);
    receive(m);
  }

 private:
  const NetworkModel& net_;
  std::vector<LinkState>& st_;
  std::vector<std::vector<MsgRecord>>& msgs_;
  const std::vector<int>& world_;
  int w(int r) const { return world_.empty() ? r : world_[static_cast<std::size_t>(r)]; }
};

int mod(int a, int p) { return ((a % p) + p) % p; }

// One ring step: every rank r isends bytes_of(r) to r+1, receives from r-1 (and reduces what it
// received when `reduce`), then waits for its isend.
template <typename BytesOf>
void ring_step(Replay& rp, int p, BytesOf bytes_of, bool reduce) {
  std::vector<Msg> m(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    m[static_cast<std::size_t>(r)] = rp.post(r, mod(r + 1, p), bytes_of(r));
  for (int r = 0; r < p; ++r) {
    const Msg& in = m[static_cast<std::size_t>(mod(r - 1, p))];
    rp.receive(in);
    if (reduce) rp.reduce(r, in.bytes);
  }
  for (int r = 0; r < p; ++r) rp.sender_done(m[static_cast<std::size_t>(r)]);
}

}  // namespace

void replay(CollKind kind, int p, int root, std::size_t count, std::size_t elem,
            const NetworkModel& net, std::vector<LinkState>& st,
            std::vector<std::vector<MsgRecord>>& msgs, const std::vector<int>& world) {
  msgs.assign(static_cast<std::size_t>(p), {});
  Replay rp(net, st, msgs, world);
  const std::uint64_t n = static_cast<std::uint64_t>(count) * elem;  // bytes of the buffer / block
  auto abs_rank = [&](int vr) { return mod(vr + root, p); };
  auto chunk_bytes = [&](int i) {
    return static_cast<std::uint64_t>(chunk_len(count, p, mod(i, p))) * elem;
  };
  switch (kind) {
    case CollKind::Barrier:
    case CollKind::NewGroup:
    case CollKind::Split:
      break;
    case CollKind::Broadcast:
      // Binomial tree, relative ranks vr = (r - root) mod p: in the round of `mask`
      // (1, 2, 4, ...), every vr < mask sends the whole buffer to vr + mask.
      for (int mask = 1; mask < p; mask <<= 1) {
        for (int vr = 0; vr < mask && vr + mask < p; ++vr)
          rp.send_recv(abs_rank(vr), abs_rank(vr + mask), n);
      }
      break;
    case CollKind::Reduce:
      // Binomial tree: in the round of `mask`, every vr with vr % (2 mask) == mask sends its
      // partial result to vr - mask, which reduces it.
      for (int mask = 1; mask < p; mask <<= 1) {
        for (int vr = mask; vr < p; vr += 2 * mask) {
          rp.send_recv(abs_rank(vr), abs_rank(vr - mask), n);
          rp.reduce(abs_rank(vr - mask), n);
        }
      }
      break;
    case CollKind::Gather:
      // Binomial tree like reduce; vr sends the blocks of vr .. min(vr + mask, p) - 1.
      for (int mask = 1; mask < p; mask <<= 1) {
        for (int vr = mask; vr < p; vr += 2 * mask) {
          const auto blocks = static_cast<std::uint64_t>(std::min(vr + mask, p) - vr);
          rp.send_recv(abs_rank(vr), abs_rank(vr - mask), blocks * n);
        }
      }
      break;
    case CollKind::Scatter: {
      // Binomial tree from the top: in the round of `mask` (largest power of two < p, then
      // halving), every vr with vr % (2 mask) == 0 sends the blocks of vr + mask ..
      // min(vr + 2 mask, p) - 1 to vr + mask.
      int top = 1;
      while (top < p) top <<= 1;
      for (int mask = top >> 1; mask >= 1; mask >>= 1) {
        for (int vr = 0; vr + mask < p; vr += 2 * mask) {
          const auto blocks = static_cast<std::uint64_t>(std::min(vr + 2 * mask, p) - (vr + mask));
          rp.send_recv(abs_rank(vr), abs_rank(vr + mask), blocks * n);
        }
      }
      break;
    }
    case CollKind::AllGather:
      // Ring: in step s (0 .. p-2) rank r sends block (r - s) mod p to r + 1.
      for (int s = 0; s + 1 < p; ++s)
        ring_step(
            rp, p, [&](int) { return n; }, false);
      break;
    case CollKind::ReduceScatter:
      // Ring: in step s rank r sends its partial chunk (r - s - 1) mod p to r + 1, which reduces
      // it into its own; after p - 1 steps rank r holds chunk r.
      for (int s = 0; s + 1 < p; ++s)
        ring_step(
            rp, p, [&](int) { return n; }, true);
      break;
    case CollKind::AllReduce:
      // Ring: the reduce-scatter above on chunks of count / p elements (the first count % p
      // chunks one larger), then the all-gather ring: in step s rank r sends chunk (r - s) mod p.
      for (int s = 0; s + 1 < p; ++s)
        ring_step(
            rp, p, [&](int r) { return chunk_bytes(r - s - 1); }, true);
      for (int s = 0; s + 1 < p; ++s)
        ring_step(
            rp, p, [&](int r) { return chunk_bytes(r - s); }, false);
      break;
  }
}

}  // namespace dist::detail::threads
