// Point-to-point on the threads backend: send/recv/isend/irecv are posted into per-(source, tag)
// FIFO queues of the destination, matched there, and completed by their owner. Receives from any
// source wait beside the queues until the engine decides them (any_source.cpp).
// send is synchronous: it returns only once the matching recv took the data
// (docs/threads_backend.md).
#include <algorithm>
#include <cstring>

#include "threads/engine.hpp"

namespace dist::detail::threads {

Queues& Engine::queues_locked(int gid, int src, int dst, int tag) {
  return boxes_[static_cast<std::size_t>(dst)][BoxKey{gid, src, tag}];
}

void Engine::withdraw_locked(int r, const P2POp& op) {
  if (op.any_source) {
    auto& v = any_recvs_[static_cast<std::size_t>(r)];
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& x) { return x.get() == &op; });
    if (it != v.end()) v.erase(it);
    return;
  }
  auto& box = op.is_send ? queues_locked(op.gid, r, op.peer, op.tag)
                         : queues_locked(op.gid, op.peer, r, op.tag);
  auto& q = op.is_send ? box.sends : box.recvs;
  auto it = std::find_if(q.begin(), q.end(), [&](const auto& x) { return x.get() == &op; });
  if (it != q.end()) q.erase(it);
}

void Engine::match_locked(const std::shared_ptr<P2POp>& s, const std::shared_ptr<P2POp>& rv) {
  if (s->type != rv->type || s->count != rv->count) {
    s->error = rv->error = send_recv_mismatch(*s, *rv);
  } else {
    if (s->bytes() > 0) std::memcpy(rv->rbuf, s->sbuf, s->bytes());
    rv->wire = s->wire;
  }
  s->done.store(true, std::memory_order_release);
  rv->done.store(true, std::memory_order_release);
  wake_locked(s->owner);
  wake_locked(rv->owner);
}

std::shared_ptr<P2POp> Engine::post(int r, bool is_send, bool blocking, const void* sbuf,
                                    void* rbuf, std::size_t count, DataType type, int peer, int tag,
                                    const std::shared_ptr<const GroupInfo>& group) {
  Rank& me = rank_state(r);
  me.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  auto op = std::make_shared<P2POp>();
  op->is_send = is_send;
  op->blocking = blocking;
  op->owner = r;
  op->peer = peer;
  op->tag = tag;
  op->gid = group ? group->id : 0;
  op->group = group;
  op->sbuf = sbuf;
  op->rbuf = rbuf;
  op->count = count;
  op->type = type;
  op->post_clock = me.link.clock;
  op->any_source = !is_send && peer == kAnySource;
  op->site = call_site();
  if (is_send) {
    op->wire = post_message(me.link, opts_.network.message_cost(r, peer, op->bytes()));
    count_message(me.stats, Direction::Sent, peer, op->bytes());
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    if (failed_) throw_failure_locked();
    if (!is_send) check_any_conflict_locked(r, *op);
    if (op->any_source) {
      post_any_locked(r, op);
      if (!blocking) me.outstanding.push_back(op);
      return op;
    }
    // A send waits in its destination's queue for (r, tag); a recv in its own for (peer, tag).
    Queues& q =
        is_send ? queues_locked(op->gid, r, peer, tag) : queues_locked(op->gid, peer, r, tag);
    auto& partners = is_send ? q.recvs : q.sends;
    if (partners.empty()) {
      (is_send ? q.sends : q.recvs).push_back(op);
    } else {
      auto partner = std::move(partners.front());
      partners.pop_front();
      is_send ? match_locked(op, partner) : match_locked(partner, op);
    }
    if (!op->error.empty()) fail_locked(r, std::make_exception_ptr(MismatchError(op->error)));
  }
  if (!blocking) me.outstanding.push_back(op);
  return op;
}

void Engine::complete_p2p(int r, P2POp& op) {
  Rank& me = rank_state(r);
  op.waited = true;
  if (!op.error.empty()) return;
  if (op.is_send) {
    finish_send(me.link, op.wire);
  } else {
    receive_message(me.link, op.wire);
    count_message(me.stats, Direction::Received, op.peer, op.bytes());
  }
  if (tracing_) {
    TraceEvent ev;
    ev.name = op.is_send ? (op.blocking ? "send" : "isend") : (op.blocking ? "recv" : "irecv");
    if (op.any_source) ev.name += "_any";
    ev.t0 = op.post_clock;
    ev.t1 = me.link.clock;
    ev.peer = op.peer;
    ev.tag = op.tag;
    ev.bytes = op.bytes();
    if (op.group) ev.group = op.group->name;
    trace(r, std::move(ev));
  }
}

void Engine::wait_p2p(int r, const std::shared_ptr<P2POp>& op) {
  // Spin briefly without the mutex (the partner is usually about to match), then block.
  // An any-source recv is decided only when every other rank waits: no spinning for it.
  if (op->any_source ? !op->done.load(std::memory_order_acquire)
                     : !wait_.spin_until([&] { return op->done.load(std::memory_order_acquire); },
                                         &rank_state(op->peer).cpu)) {
    std::unique_lock<std::mutex> lk(mu_);
    Pending what;
    what.kind = Pending::P2P;
    what.op = op;
    block(r, lk, what, [&] { return op->done.load(std::memory_order_relaxed); });
  }
  if (!op->waited) {
    complete_p2p(r, *op);
    if (!op->blocking) {
      auto& v = rank_state(r).outstanding;
      auto it = std::find(v.begin(), v.end(), op);
      if (it != v.end()) v.erase(it);
    }
  }
  if (!op->error.empty()) throw MismatchError(op->error);
}

bool Engine::p2p_completed(int r, const std::shared_ptr<P2POp>& op) {
  if (op->done.load(std::memory_order_acquire)) return true;
  throw_if_failed();
  if (op->any_source && try_resolve_for_poll(op)) return true;
  check_poll_timeout(r, op->first_poll, op->describe().substr(8));  // drop "wait on "
  return false;
}

}  // namespace dist::detail::threads
