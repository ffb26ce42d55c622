// Built-in collectives on the threads backend. Every rank's call arrives in the slot of its n-th
// collective; the last arriver checks that the calls match and replays the documented schedule
// (schedules.cpp) to get every rank's clock and traffic. The data moves through shared memory:
// each rank moves its own part (or, with an async caller, the last arriver moves it all), and each
// rank applies its own results when it leaves.
#include <algorithm>
#include <cstring>

#include "threads/engine.hpp"

namespace dist::detail::threads {

namespace {
constexpr std::size_t kSmallTile = 8192;  // bytes per reduction tile
}  // namespace

std::shared_ptr<CollSlot> Engine::arrive_locked(int r, const CollCall& call, std::uint64_t seq) {
  if (failed_) throw_failure_locked();
  const int gid = call.group ? call.group->id : 0;
  auto& sp = slots_[{gid, seq}];
  if (!sp) {
    sp = std::make_shared<CollSlot>();
    sp->seq = seq;
    if (call.group) {
      sp->world = call.group->ranks;
    } else {
      sp->world.resize(static_cast<std::size_t>(p_));
      for (int q = 0; q < p_; ++q) sp->world[static_cast<std::size_t>(q)] = q;
    }
    sp->p = static_cast<int>(sp->world.size());
    sp->calls.resize(sp->world.size());
  }
  CollSlot& s = *sp;
  const int gr = group_rank_of(call, r);
  if (s.first_rank >= 0 && !call.same_as(s.calls[static_cast<std::size_t>(s.first_rank)])) {
    const std::string msg =
        collective_mismatch(seq, s.world[static_cast<std::size_t>(s.first_rank)],
                            s.calls[static_cast<std::size_t>(s.first_rank)], r, call);
    fail_locked(r, std::make_exception_ptr(MismatchError(msg)));
    throw MismatchError(msg);
  }
  s.calls[static_cast<std::size_t>(gr)] = call;
  if (s.first_rank < 0) s.first_rank = gr;
  s.any_async = s.any_async || call.async;
  ++s.arrived;
  auto keep = sp;
  if (s.arrived == s.p) {
    slots_.erase({gid, seq});
    finalize_slot_locked(*keep);
  }
  return keep;
}

void Engine::finalize_slot_locked(CollSlot& s) {
  const CollCall& c = s.calls[0];
  const int p = s.p;
  double start = 0;
  for (const auto& x : s.calls) start = std::max(start, x.link.clock);
  s.start = start;
  s.result.resize(static_cast<std::size_t>(p));
  for (int q = 0; q < p; ++q) {
    s.result[static_cast<std::size_t>(q)] = s.calls[static_cast<std::size_t>(q)].link;
    s.result[static_cast<std::size_t>(q)].clock = start;
  }
  replay(c.kind, p, c.root, c.count, size_of(c.type), opts_.network, s.result, s.msgs, s.world);
  if (c.kind == CollKind::NewGroup || c.kind == CollKind::Split) create_groups_locked(s);
  if (s.any_async) {
    if (c.kind != CollKind::Barrier) {
      for (int q = 0; q < p; ++q) exec_part(s, q);
    }
    s.done.store(true, std::memory_order_release);
  }
  // Published last: a blocking rank that spins on `ready` without the lock and finds the slot
  // has async callers returns at once, so the data must already have been moved.
  s.ready.store(true, std::memory_order_release);
  for (int w : s.world) {
    const Rank& x = rank_state(w);
    if (x.state == RunState::Blocked && x.pending.kind == Pending::Coll &&
        x.pending.slot.get() == &s)
      wake_locked(w);
  }
}

// new_group / split: every caller's description of the group it lands in. Ids come from one
// engine-wide counter (under the mutex), so every member of a new group sees the same id.
void Engine::create_groups_locked(CollSlot& s) {
  const int p = s.p;
  auto describe = [&](int id, std::vector<int> ranks, const std::string& name) {
    GroupInfo g;
    g.id = id;
    g.name = name;
    g.group_of.assign(static_cast<std::size_t>(p_), -1);
    for (std::size_t i = 0; i < ranks.size(); ++i)
      g.group_of[static_cast<std::size_t>(ranks[i])] = static_cast<int>(i);
    g.ranks = std::move(ranks);
    return g;
  };
  auto own = [&](GroupInfo g, int q) {
    g.my_rank = g.group_of[static_cast<std::size_t>(s.world[static_cast<std::size_t>(q)])];
    return std::make_shared<const GroupInfo>(std::move(g));
  };
  s.created.resize(static_cast<std::size_t>(p));
  if (s.calls[0].kind == CollKind::NewGroup) {
    const int id = next_gid_++;
    for (int q = 0; q < p; ++q) {
      const CollCall& c = s.calls[static_cast<std::size_t>(q)];
      s.created[static_cast<std::size_t>(q)] = own(describe(id, c.members, c.label), q);
    }
    return;
  }
  std::map<int, std::vector<int>> by_color;  // colour -> parent ranks, ordered by (key, rank)
  for (int q = 0; q < p; ++q) {
    const int color = s.calls[static_cast<std::size_t>(q)].color;
    if (color >= 0) by_color[color].push_back(q);
  }
  std::map<int, int> id_of;
  for (auto& [color, qs] : by_color) {
    std::stable_sort(qs.begin(), qs.end(), [&](int a, int b) {
      return s.calls[static_cast<std::size_t>(a)].key < s.calls[static_cast<std::size_t>(b)].key;
    });
    id_of[color] = next_gid_++;
  }
  for (int q = 0; q < p; ++q) {
    const CollCall& c = s.calls[static_cast<std::size_t>(q)];
    if (c.color < 0) {
      s.created[static_cast<std::size_t>(q)] = own(describe(-1, {}, c.label + "none"), q);
      continue;
    }
    std::vector<int> ranks;
    for (int x : by_color[c.color]) ranks.push_back(s.world[static_cast<std::size_t>(x)]);
    s.created[static_cast<std::size_t>(q)] =
        own(describe(id_of[c.color], std::move(ranks), c.label + std::to_string(c.color)), q);
  }
}

namespace {

// out[k] = op over inputs (in rank order) for `len` elements, written to every output.
void reduce_tiles(const std::vector<const std::byte*>& in, const std::vector<std::byte*>& out,
                  std::size_t len, DataType type, ReduceOp op, int p) {
  alignas(64) std::byte tile[kSmallTile];
  const std::size_t es = size_of(type);
  const std::size_t per = kSmallTile / es;
  for (std::size_t off = 0; off < len; off += per) {
    const std::size_t k = std::min(per, len - off);
    std::memcpy(tile, in[0] + off * es, k * es);
    for (std::size_t q = 1; q < in.size(); ++q) apply_op(tile, in[q] + off * es, k, type, op);
    if (op == ReduceOp::Avg) divide(tile, k, type, p);
    for (std::byte* o : out) std::memcpy(o + off * es, tile, k * es);
  }
}

void move_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}

}  // namespace

void Engine::exec_part(const CollSlot& s, int r) {  // r: a rank of the slot's group
  const CollCall& c = s.calls[static_cast<std::size_t>(r)];
  const std::size_t es = size_of(c.type);
  const int p = s.p;
  auto in_of = [&](int q) {
    return static_cast<const std::byte*>(s.calls[static_cast<std::size_t>(q)].in);
  };
  auto out_of = [&](int q) {
    return static_cast<std::byte*>(s.calls[static_cast<std::size_t>(q)].out);
  };
  const std::size_t off = chunk_off(c.count, p, r);
  const std::size_t len = chunk_len(c.count, p, r);
  switch (c.kind) {
    case CollKind::Barrier:
    case CollKind::NewGroup:
    case CollKind::Split:
      break;
    case CollKind::Broadcast:
      // Rank r copies chunk r of the root's buffer into every other rank's buffer.
      if (len == 0) break;
      for (int q = 0; q < p; ++q) {
        if (q != c.root) std::memcpy(out_of(q) + off * es, out_of(c.root) + off * es, len * es);
      }
      break;
    case CollKind::Reduce:
    case CollKind::AllReduce: {
      // Rank r reduces chunk r over all buffers (in rank order) and writes it to the root's
      // buffer (reduce) or to every buffer (all_reduce).
      if (len == 0) break;
      std::vector<const std::byte*> in(static_cast<std::size_t>(p));
      for (int q = 0; q < p; ++q) in[static_cast<std::size_t>(q)] = in_of(q) + off * es;
      std::vector<std::byte*> out;
      if (c.kind == CollKind::Reduce) {
        out.push_back(out_of(c.root) + off * es);
      } else {
        for (int q = 0; q < p; ++q) out.push_back(out_of(q) + off * es);
      }
      reduce_tiles(in, out, len, c.type, c.op, p);
      break;
    }
    case CollKind::Gather:
      move_bytes(out_of(c.root) + static_cast<std::size_t>(r) * c.count * es, in_of(r),
                 c.count * es);
      break;
    case CollKind::AllGather:
      for (int q = 0; q < p; ++q) {
        move_bytes(out_of(q) + static_cast<std::size_t>(r) * c.count * es, in_of(r), c.count * es);
      }
      break;
    case CollKind::Scatter:
      move_bytes(out_of(r), in_of(c.root) + static_cast<std::size_t>(r) * c.count * es,
                 c.count * es);
      break;
    case CollKind::ReduceScatter: {
      if (c.count == 0) break;
      std::vector<const std::byte*> in(static_cast<std::size_t>(p));
      for (int q = 0; q < p; ++q)
        in[static_cast<std::size_t>(q)] = in_of(q) + static_cast<std::size_t>(r) * c.count * es;
      reduce_tiles(in, {out_of(r)}, c.count, c.type, c.op, p);
      break;
    }
  }
}

void Engine::wait_parts(CollSlot& s) {
  const int n = s.parts_done.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (n == s.p) {
    s.parts_done.notify_all();
    return;
  }
  if (wait_.spin_until([&] { return s.parts_done.load(std::memory_order_acquire) == s.p; })) return;
  for (;;) {
    const int v = s.parts_done.load(std::memory_order_acquire);
    if (v == s.p) return;
    s.parts_done.wait(v, std::memory_order_acquire);
  }
}

void Engine::apply_result(int r, const CollSlot& s, bool async) {
  Rank& me = rank_state(r);
  const CollCall& c0 = s.calls[static_cast<std::size_t>(s.first_rank)];
  const int gr = c0.group ? c0.group->group_of[static_cast<std::size_t>(r)] : r;
  const CollCall& c = s.calls[static_cast<std::size_t>(gr)];
  const LinkState& res = s.result[static_cast<std::size_t>(gr)];
  if (c.kind == CollKind::NewGroup || c.kind == CollKind::Split) return;  // free, not counted
  if (async || s.any_async) {
    me.link.clock = std::max(me.link.clock, res.clock);
  } else {
    me.link = res;
  }
  auto& st = me.stats;
  for (const MsgRecord& m : s.msgs[static_cast<std::size_t>(gr)]) {
    count_message(st, m.sent ? Direction::Sent : Direction::Received,
                  s.world[static_cast<std::size_t>(m.peer)], m.bytes);
  }
  if (c.kind == CollKind::Barrier) {
    st.barriers += 1;
  } else {
    st.builtin_collectives += 1;
  }
  if (tracing_) {
    TraceEvent ev;
    ev.name = c.describe();
    ev.t0 = c.link.clock;
    ev.t1 = me.link.clock;
    ev.seq = s.seq;
    ev.is_coll = true;
    ev.bytes = c.count * size_of(c.type);
    if (c.group) ev.group = c.group->name;
    trace(r, std::move(ev));
  }
}

std::shared_ptr<CollSlot> Engine::collective(int r, CollCall call) {
  Rank& me = rank_state(r);
  call.site = call_site();
  const std::uint64_t seq = me.coll_seq[call.group ? call.group->id : 0]++;
  call.link = me.link;
  std::shared_ptr<CollSlot> slot;
  {
    std::unique_lock<std::mutex> lk(mu_);
    slot = arrive_locked(r, call, seq);
  }
  // Spin briefly without the mutex (the common case: the others arrive within microseconds),
  // then block (where deadlock detection and the timeout apply).
  if (!wait_.spin_until([&] { return slot->ready.load(std::memory_order_acquire); })) {
    std::unique_lock<std::mutex> lk(mu_);
    {
      Pending what;
      what.kind = Pending::Coll;
      what.slot = slot;
      what.seq = seq;
      what.call = call;
      block(r, lk, what, [&] { return slot->ready.load(std::memory_order_acquire); });
    }
  }
  if (!slot->any_async && call.kind != CollKind::Barrier) {
    exec_part(*slot, group_rank_of(call, r));
    wait_parts(*slot);
  }
  apply_result(r, *slot, false);
  return slot;
}

std::shared_ptr<AsyncColl> Engine::collective_async(int r, CollCall call) {
  Rank& me = rank_state(r);
  call.site = call_site();
  const std::uint64_t seq = me.coll_seq[call.group ? call.group->id : 0]++;
  call.link = me.link;
  call.async = true;
  auto a = std::make_shared<AsyncColl>();
  a->engine = this;
  a->rank = r;
  a->grank = group_rank_of(call, r);
  {
    std::lock_guard<std::mutex> g(mu_);
    a->slot = arrive_locked(r, call, seq);
  }
  me.outstanding_async.push_back(a);
  return a;
}

void Engine::wait_async(int r, AsyncColl& a) {
  auto& slot = a.slot;
  if (!slot->done.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lk(mu_);
    Pending what;
    what.kind = Pending::Coll;
    what.slot = slot;
    what.seq = slot->seq;
    what.call = slot->calls[static_cast<std::size_t>(a.grank)];
    block(r, lk, what, [&] { return slot->done.load(std::memory_order_relaxed); });
  }
  if (!a.applied) {
    a.applied = true;
    apply_result(r, *slot, true);
    auto& v = rank_state(r).outstanding_async;
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& x) { return x.get() == &a; });
    if (it != v.end()) v.erase(it);
  }
}

bool Engine::async_completed(AsyncColl& a) {
  if (a.slot->done.load(std::memory_order_acquire)) return true;
  throw_if_failed();
  check_poll_timeout(a.rank, a.first_poll,
                     a.slot->calls[static_cast<std::size_t>(a.grank)].describe());
  return false;
}

// ---- simulated compute ------------------------------------------------------------------------------

void Engine::sim_compute(int r, double seconds, const char* label) {
  Rank& me = rank_state(r);
  const double t0 = me.link.clock;
  me.link.clock += seconds;
  if (tracing_) {
    TraceEvent ev;
    ev.name = label;
    ev.t0 = t0;
    ev.t1 = me.link.clock;
    trace(r, std::move(ev));
  }
}

void Engine::sim_reduce(int r, std::size_t bytes) {
  const double c = opts_.network.reduce_cost(bytes);
  if (c > 0) sim_compute(r, c, "reduce");
}

}  // namespace dist::detail::threads
