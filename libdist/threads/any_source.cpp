// Receives from any source on the threads backend (recv_any / irecv_any), made deterministic.
//
// A real network delivers whichever message reaches the receiver first, so an any-source receive
// depends on timing. Here the engine picks by the simulated clock instead: among the unmatched
// sends with the receive's tag, the one whose message arrives first (ts + cost: the time it left
// its sender's link plus its cost, link_model.hpp), ties to the lowest source rank.
//
// When may it choose? A rank that is still running its own code may yet post a send that arrives
// earlier. So the choice waits until nothing else can happen: every unfinished rank is blocked in
// dist (the moment check_deadlock_locked() looks at; a rank polling is_completed() on its own
// any-source receive counts as waiting). Then no new send can appear before some pending receive
// is decided, and deciding the globally earliest one first is safe: everything a woken rank does
// afterwards happens at or after that arrival on the simulated clock. One decision at a time: it
// may wake a rank, which runs until it blocks again. Since each rank's program is deterministic
// and every decision depends only on simulated times, the sources, values and simulated times
// are the same on every run and machine.
//
// Several pending any-source receives of one rank with the same tag are decided in the order they
// were posted. A pending any-source receive and a recv(src, tag) with the same tag on one rank
// are refused (any_source_conflict): which one takes a message would depend on timing elsewhere.
#include <algorithm>
#include <limits>

#include "threads/engine.hpp"

namespace dist::detail::threads {

void Engine::post_any_locked(int r, const std::shared_ptr<P2POp>& op) {
  any_recvs_[static_cast<std::size_t>(r)].push_back(op);
}

void Engine::check_any_conflict_locked(int r, const P2POp& op) const {
  const auto& anys = any_recvs_[static_cast<std::size_t>(r)];
  if (op.any_source) {
    for (const auto& [key, q] : boxes_[static_cast<std::size_t>(r)]) {
      for (const auto& rv : q.recvs) {
        if (rv->tag == op.tag && rv->gid == op.gid) throw Error(any_source_conflict(r, op, *rv));
      }
    }
  } else {
    for (const auto& any : anys) {
      if (any->tag == op.tag && any->gid == op.gid) throw Error(any_source_conflict(r, op, *any));
    }
  }
}

bool Engine::resolve_any_locked() {
  struct Choice {
    double arrival = std::numeric_limits<double>::infinity();
    int dst = -1, src = -1;
    std::size_t index = 0;  // into any_recvs_[dst]
  } best;
  for (int d = 0; d < p_; ++d) {
    const auto& anys = any_recvs_[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < anys.size(); ++i) {
      const int tag = anys[i]->tag;
      const int gid = anys[i]->gid;
      // Only the first pending any-source recv of each (group, tag) may take a message now.
      if (std::any_of(
              anys.begin(), anys.begin() + static_cast<std::ptrdiff_t>(i),
              [&](const auto& earlier) { return earlier->tag == tag && earlier->gid == gid; })) {
        continue;
      }
      for (int s = 0; s < p_; ++s) {  // world ranks; a group's members keep their order
        auto& box = boxes_[static_cast<std::size_t>(d)];
        auto it = box.find(BoxKey{gid, s, tag});
        if (it == box.end() || it->second.sends.empty()) continue;
        const Transfer& w = it->second.sends.front()->wire;
        const double arrival = w.ts + w.cost;
        // Strictly earlier wins; on a tie the lower destination, then the lower source (the loops
        // visit them in increasing order).
        if (arrival < best.arrival) best = {arrival, d, s, i};
      }
    }
  }
  if (best.dst < 0) return false;
  auto& anys = any_recvs_[static_cast<std::size_t>(best.dst)];
  std::shared_ptr<P2POp> rv = anys[best.index];
  anys.erase(anys.begin() + static_cast<std::ptrdiff_t>(best.index));
  Queues& q = queues_locked(rv->gid, best.src, best.dst, rv->tag);
  std::shared_ptr<P2POp> s = std::move(q.sends.front());
  q.sends.pop_front();
  rv->peer = best.src;
  match_locked(s, rv);
  if (!rv->error.empty()) fail_locked(best.dst, std::make_exception_ptr(MismatchError(rv->error)));
  return true;
}

bool Engine::try_resolve_for_poll(const std::shared_ptr<P2POp>& op) {
  std::lock_guard<std::mutex> g(mu_);
  if (failed_) throw_failure_locked();
  // The polling rank is running; every other one must be waiting for the choice to be final.
  while (!op->done.load(std::memory_order_relaxed) && !failed_ && blocked_ + finished_ == p_ - 1 &&
         resolve_any_locked()) {
  }
  if (failed_) throw_failure_locked();
  return op->done.load(std::memory_order_relaxed);
}

}  // namespace dist::detail::threads
