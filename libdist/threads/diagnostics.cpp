// The texts of the threads backend's errors: deadlock reports with a hint for the common patterns,
// timeouts, send/recv and collective mismatches, operations left pending. Each names the ranks
// and the calls involved and says what to do (docs/threads_backend.md, "Failure is loud and fast").
#include <sstream>

#include "threads/engine.hpp"

namespace dist::detail::threads {

std::string describe_count(std::size_t count, DataType type) {
  return std::to_string(count) + " " + to_string(type) + (count == 1 ? "" : "s");
}

std::string P2POp::describe() const {
  std::ostringstream os;
  if (!blocking) os << "wait on ";
  os << (blocking ? "" : "i");
  if (any_source && peer == kAnySource) {
    os << "recv_any(tag=" << tag;
  } else {
    os << (is_send ? "send(dst=" : any_source ? "recv_any(src=" : "recv(src=");
    if (group) {
      os << group->group_of[static_cast<std::size_t>(peer)] << " [world rank " << peer << "]";
    } else {
      os << peer;
    }
    os << ", tag=" << tag;
  }
  os << ", " << describe_count(count, type) << ")";
  if (group) os << " on group '" << group->name << "'";
  return os.str();
}

std::string CollCall::describe() const {
  std::ostringstream os;
  os << coll_name(kind) << (async && kind == CollKind::AllReduce ? "_async" : "") << "(";
  if (kind == CollKind::NewGroup) {
    os << "ranks {";
    for (std::size_t i = 0; i < members.size(); ++i) os << (i ? ", " : "") << members[i];
    os << "}";
  } else if (kind == CollKind::Split) {
    os << "color=" << color << ", key=" << key;
  } else if (kind != CollKind::Barrier) {
    os << describe_count(count, type);
    if (kind == CollKind::Gather || kind == CollKind::AllGather || kind == CollKind::Scatter ||
        kind == CollKind::ReduceScatter) {
      os << " per rank";
    }
    if (has_op()) os << ", " << to_string(op);
    if (kind == CollKind::Broadcast || kind == CollKind::Scatter) os << ", src=" << root;
    if (kind == CollKind::Reduce || kind == CollKind::Gather) os << ", dst=" << root;
  }
  os << ")";
  if (group) os << " on group '" << group->name << "'";
  return os.str();
}

std::string Engine::describe_pending_locked(int r) const {
  const Rank& rk = rank_state(r);
  // The caller's file:line: where a blocking call was made, or where the operation a wait is for
  // was started.
  auto at = [](const CallSite& site, bool started) {
    const std::string where = describe_call_site(site);
    return where.empty() ? where
                         : (started ? " (started at " : " at ") + where + (started ? ")" : "");
  };
  switch (rk.pending.kind) {
    case Pending::P2P:
      return rk.pending.op->describe() + at(rk.pending.op->site, !rk.pending.op->blocking);
    case Pending::Coll: {
      std::string s = rk.pending.call.async ? "wait on " : "";
      return s + rk.pending.call.describe() + " [collective call #" +
             std::to_string(rk.pending.seq) + "]" + at(rk.pending.call.site, rk.pending.call.async);
    }
    case Pending::None:
      break;
  }
  return "?";
}

std::string Engine::deadlock_report_locked() const {
  std::ostringstream os;
  os << "deadlock:";
  for (int q = 0; q < p_; ++q) {
    os << (q == 0 ? " " : "; ") << "rank " << q;
    if (rank_state(q).state == RunState::Finished) {
      os << " finished";
    } else {
      os << " blocked in " << describe_pending_locked(q);
    }
  }
  os << "." << deadlock_hint_locked();
  return os.str();
}

std::string Engine::deadlock_hint_locked() const {
  auto p2p = [&](int q) -> const P2POp* {
    const Rank& x = rank_state(q);
    return x.state == RunState::Blocked && x.pending.kind == Pending::P2P ? x.pending.op.get()
                                                                          : nullptr;
  };
  std::vector<std::string> hints;
  // Both sides of a pair send first.
  for (int a = 0; a < p_ && hints.empty(); ++a) {
    const P2POp* x = p2p(a);
    if (!x || !x->is_send) continue;
    const P2POp* y = p2p(x->peer);
    if (y && y->is_send) {
      hints.push_back("rank " + std::to_string(a) + " and rank " + std::to_string(x->peer) +
                      " both send first, and send is synchronous here (it returns only once the "
                      "matching recv took the data, as MPI may do for large messages): in an "
                      "exchange step start the send with isend, then recv, then wait on the send "
                      "(the 03 README, cost model section); ordering the calls by rank "
                      "parity is also correct but takes two message times per step");
    }
  }
  // An any-source recv that no rank sends to with its tag.
  for (int a = 0; a < p_ && hints.empty(); ++a) {
    const P2POp* x = p2p(a);
    if (!x || !x->any_source) continue;
    hints.push_back("rank " + std::to_string(a) + " waits in recv_any for a message with tag " +
                    std::to_string(x->tag) +
                    " and no rank has sent one: check the tag and that some rank still sends "
                    "to rank " +
                    std::to_string(a));
  }
  // A recv whose peer sends with another tag, or waits for a finished rank.
  for (int a = 0; a < p_; ++a) {
    const P2POp* x = p2p(a);
    if (!x || x->is_send || x->any_source) continue;
    if (rank_state(x->peer).state == RunState::Finished) {
      hints.push_back("rank " + std::to_string(a) + " waits for a message from rank " +
                      std::to_string(x->peer) +
                      ", which already finished: check that every recv has a matching send");
      break;
    }
    const P2POp* y = p2p(x->peer);
    if (y && y->is_send && y->peer == a && y->tag != x->tag) {
      hints.push_back("rank " + std::to_string(x->peer) + " sends to rank " + std::to_string(a) +
                      " with tag " + std::to_string(y->tag) + " but rank " + std::to_string(a) +
                      " receives with tag " + std::to_string(x->tag) +
                      ": messages match by (source, tag)");
      break;
    }
  }
  // A send and a recv that would match but were posted on different groups.
  for (int a = 0; a < p_ && hints.empty(); ++a) {
    const P2POp* x = p2p(a);
    if (!x || x->is_send || x->any_source) continue;
    const P2POp* y = p2p(x->peer);
    if (y && y->is_send && y->peer == a && y->tag == x->tag && y->gid != x->gid) {
      auto name = [](const P2POp* o) { return o->group ? o->group->name : std::string("world"); };
      hints.push_back("rank " + std::to_string(x->peer) + " sends to rank " + std::to_string(a) +
                      " on group '" + name(y) + "' but rank " + std::to_string(a) +
                      " receives on group '" + name(x) +
                      "': messages of different groups never match (pass the same Group)");
    }
  }
  // Members of one group waiting in collectives of different groups (or in different orders).
  for (int a = 0; a < p_ && hints.empty(); ++a) {
    const Rank& x = rank_state(a);
    if (x.state != RunState::Blocked || x.pending.kind != Pending::Coll) continue;
    const auto& g = x.pending.call.group;
    for (int b = 0; b < p_; ++b) {
      const Rank& y = rank_state(b);
      if (b == a || y.state != RunState::Blocked || y.pending.kind != Pending::Coll) continue;
      if (g && g->group_of[static_cast<std::size_t>(b)] < 0) continue;
      if (y.pending.slot == x.pending.slot) continue;
      hints.push_back("rank " + std::to_string(a) + " waits in " + x.pending.call.describe() +
                      " while rank " + std::to_string(b) + ", a member of " +
                      (g ? "group '" + g->name + "'" : std::string("the world")) + ", waits in " +
                      y.pending.call.describe() +
                      ": the members of each group must call its collectives (and create groups "
                      "from it) in the same order");
      break;
    }
  }
  // Collectives that only some ranks called.
  // (On a group: only its members count; the group is the first waiting rank's.)
  std::vector<int> in_coll, elsewhere, finished;
  std::shared_ptr<const GroupInfo> coll_group;
  for (int q = 0; q < p_; ++q) {
    const Rank& x = rank_state(q);
    if (x.state == RunState::Blocked && x.pending.kind == Pending::Coll) {
      coll_group = x.pending.call.group;
      break;
    }
  }
  for (int q = 0; q < p_; ++q) {
    const Rank& x = rank_state(q);
    if (coll_group && coll_group->group_of[static_cast<std::size_t>(q)] < 0) continue;
    if (x.state == RunState::Finished) {
      finished.push_back(q);
    } else if (x.pending.kind == Pending::Coll) {
      in_coll.push_back(q);
    } else {
      elsewhere.push_back(q);
    }
  }
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s;
  };
  if (!in_coll.empty() && (!elsewhere.empty() || !finished.empty())) {
    std::string s = "a collective that only some ranks called: rank(s) " + list(in_coll) +
                    " wait in a collective that ";
    if (!elsewhere.empty())
      s += "rank(s) " + list(elsewhere) + " (blocked in point-to-point calls) ";
    if (!elsewhere.empty() && !finished.empty()) s += "and ";
    if (!finished.empty()) s += "rank(s) " + list(finished) + " (already finished) ";
    s += "did not call; every rank must call the same collectives in the same order";
    hints.push_back(s);
  } else if (!finished.empty()) {
    hints.push_back("rank(s) " + list(finished) + " finished while the others still wait for them");
  }
  if (hints.empty()) {
    hints.push_back(
        "every unfinished rank waits for another: check that each send has a matching recv "
        "(same peers, same tag, posted in an order that lets both proceed)");
  }
  std::string out;
  for (const auto& h : hints) out += " Hint: " + h + ".";
  return out;
}

std::string Engine::timeout_report_locked(int r, std::chrono::milliseconds waited) const {
  std::ostringstream os;
  os << "timeout: rank " << r << " waited " << waited.count() << " ms in "
     << describe_pending_locked(r) << " (LaunchOptions::timeout is " << opts_.timeout.count()
     << " ms). Other ranks:";
  for (int q = 0; q < p_; ++q) {
    if (q == r) continue;
    const Rank& o = rank_state(q);
    os << (q == 0 || (q == 1 && r == 0) ? " " : "; ") << "rank " << q << " ";
    if (o.state == RunState::Finished) {
      os << "finished";
    } else if (o.state == RunState::Blocked) {
      os << "blocked in " << describe_pending_locked(q);
    } else {
      os << "running its own code (not inside dist)";
    }
  }
  os << ". A rank busy or stuck in its own code keeps the others waiting; raise the timeout "
        "(--timeout-ms) only if the work is legitimately that slow";
  return os.str();
}

std::string Engine::poll_timeout_report(int r, const std::string& what,
                                        std::chrono::milliseconds polled) const {
  return "timeout: rank " + std::to_string(r) + " polled is_completed() on " + what + " for " +
         std::to_string(polled.count()) + " ms without completion (LaunchOptions::timeout is " +
         std::to_string(opts_.timeout.count()) +
         " ms); check that the matching call is made, or call wait() so a deadlock is reported";
}

std::string Engine::send_recv_mismatch(const P2POp& s, const P2POp& rv) {
  std::ostringstream os;
  os << "send/recv mismatch: rank " << s.owner << " sends " << describe_count(s.count, s.type)
     << " to rank " << rv.owner << " (tag " << s.tag << ") but rank " << rv.owner << " receives "
     << describe_count(rv.count, rv.type) << " from rank " << s.owner << " (tag " << rv.tag
     << "); a send and its recv must have the same element type and count";
  return os.str();
}

std::string Engine::any_source_conflict(int r, const P2POp& posted, const P2POp& pending) {
  std::ostringstream os;
  os << "rank " << r << " posted " << posted.describe() << " while its " << pending.describe()
     << " is pending with the same tag: which of the two takes the next "
     << "message with that tag would depend on timing on a real network (MPI matches in posting "
     << "order); wait for one before posting the other, or use distinct tags";
  return os.str();
}

std::string Engine::collective_mismatch(std::uint64_t seq, int first_rank, const CollCall& first,
                                        int r, const CollCall& call) {
  std::ostringstream os;
  os << "collective mismatch at collective call #" << seq << ": rank " << first_rank << " called "
     << first.describe() << " but rank " << r << " called " << call.describe()
     << "; every rank must call the same collectives (barrier included) in the same order, with "
        "the same "
        "count, type, op and root";
  return os.str();
}

std::string Engine::leaked_work_report(const std::string& leaks) {
  return "returned from the rank's body while these operations were still pending: " + leaks +
         "; call wait() on every Work (dist::wait_all) before the buffers go away";
}

}  // namespace dist::detail::threads
