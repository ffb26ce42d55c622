// fake_dist: the thread-simulated backend. Ranks are threads of one process; see
// docs/fake_dist.md for the design (matching, synchronous send, deadlock detection, the
// simulated clock, the schedules of the built-in collectives and the trace).
//
// Concurrency in one paragraph: one engine mutex guards matching queues, collective slots and
// every rank's scheduling state (Running / Blocked / Finished). A rank that must wait marks
// itself Blocked under the mutex; whoever completes what it waits for marks it Running under the
// same mutex *before* waking it. So "every unfinished rank is Blocked" is an exact, race-free
// deadlock test, evaluated whenever a rank blocks or finishes. Waits spin briefly, then sleep on
// the rank's condition variable with the launch timeout. A rank's clock, link state, counters and
// trace belong to its own thread; built-in collectives compute everyone's results in the last
// arriver (under the mutex) and each rank applies its own when it leaves.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sched.h>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dist/backend.hpp"
#include "distlab/todo.hpp"
#include "schedules.hpp"

namespace dist::detail {
namespace fake {
namespace {

using SteadyClock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

std::string describe_count(std::size_t count, DataType type) {
  return std::to_string(count) + " " + to_string(type) + (count == 1 ? "" : "s");
}

std::string with_rank_prefix(int rank, const std::string& msg) {
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  if (msg.rfind(prefix, 0) == 0) return msg;
  return prefix + msg;
}

// ---- point-to-point operations ----------------------------------------------------------------

struct P2POp {
  bool is_send = false;
  bool blocking = false;  // send/recv (true) or isend/irecv (false); for messages only
  int owner = 0;          // the rank that posted it
  int peer = 0;           // dst for a send, src for a recv
  int tag = 0;
  const void* sbuf = nullptr;
  void* rbuf = nullptr;
  std::size_t count = 0;
  DataType type = DataType::Float32;
  double post_clock = 0;  // owner's clock when posted
  double ts = 0, cost = 0;  // set by the sender at post; copied into the recv at match
  std::atomic<bool> done{false};
  bool waited = false;     // owner thread only
  SteadyClock::time_point first_poll{};  // owner thread only: first is_completed() that said no
  std::string error;       // non-empty: mismatch (set before done)

  std::string describe() const {
    std::ostringstream os;
    if (!blocking) os << "wait on ";
    os << (blocking ? "" : "i") << (is_send ? "send(dst=" : "recv(src=") << peer << ", tag=" << tag << ", "
       << describe_count(count, type) << ")";
    return os.str();
  }
};

// ---- collectives --------------------------------------------------------------------------------

struct CollCall {
  CollKind kind = CollKind::Barrier;
  std::size_t count = 0;
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  bool async = false;
  const void* in = nullptr;
  void* out = nullptr;
  LinkState link;  // the caller's clock and link state on arrival

  bool has_op() const {
    return kind == CollKind::Reduce || kind == CollKind::AllReduce || kind == CollKind::ReduceScatter;
  }
  bool has_root() const {
    return kind == CollKind::Broadcast || kind == CollKind::Reduce || kind == CollKind::Gather ||
           kind == CollKind::Scatter;
  }
  bool same_as(const CollCall& o) const {
    return kind == o.kind && count == o.count && type == o.type && (!has_op() || op == o.op) &&
           (!has_root() || root == o.root);
  }
  std::string describe() const {
    std::ostringstream os;
    os << coll_name(kind) << (async && kind == CollKind::AllReduce ? "_async" : "") << "(";
    if (kind != CollKind::Barrier) {
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
    return os.str();
  }
};

struct CollSlot {
  std::uint64_t seq = 0;
  int p = 0;
  int arrived = 0;
  int first_rank = -1;
  bool any_async = false;
  std::atomic<bool> ready{false};   // all arrived; results computed (set under the engine mutex)
  std::atomic<bool> done{false};    // data moved (async: by the last arriver)
  std::vector<CollCall> calls;      // per rank
  std::vector<LinkState> result;    // per rank, after the schedule
  std::vector<std::vector<MsgRecord>> msgs;
  double start = 0;                 // max of the arrival clocks
  std::atomic<int> parts_done{0};   // parallel execution: ranks done with their part
};

// ---- trace --------------------------------------------------------------------------------------

struct TraceEvent {
  std::string name;
  double t0 = 0, t1 = 0;
  int peer = -1, tag = -1;
  std::uint64_t bytes = 0;
  std::uint64_t seq = 0;
  bool is_coll = false;
};

// ---- ranks ----------------------------------------------------------------------------------------

enum class RunState { Running, Blocked, Finished };

struct Pending {
  enum Kind { None, P2P, Coll } kind = None;
  std::shared_ptr<P2POp> op;
  std::shared_ptr<CollSlot> slot;
  std::uint64_t seq = 0;
  CollCall call;
};

struct AsyncColl;

struct alignas(64) Rank {
  // Guarded by the engine mutex.
  RunState state = RunState::Running;
  Pending pending;
  // Wake-up: a waker bumps `wake` (under the engine mutex) and notifies cv if `sleeping`.
  std::atomic<std::uint64_t> wake{0};
  std::atomic<bool> sleeping{false};
  std::atomic<int> cpu{-1};  // the CPU this rank's thread last ran a dist call on (a hint)
  std::mutex m;
  std::condition_variable cv;
  // Owned by the rank's thread.
  LinkState link;
  Stats stats;
  std::uint64_t coll_seq = 0;
  std::vector<std::shared_ptr<P2POp>> outstanding;       // isend/irecv not yet waited
  std::vector<std::shared_ptr<AsyncColl>> outstanding_async;
  std::vector<TraceEvent> trace;
};

struct Queues {
  std::deque<std::shared_ptr<P2POp>> sends, recvs;
};

constexpr std::size_t kSmallTile = 8192;  // bytes per reduction tile


// ---------------------------------------------------------------------------------------------------
class Engine {
 public:
  Engine(const LaunchOptions& options, std::function<void()> body)
      : opts_(options), body_(std::move(body)), p_(options.world_size) {
    ranks_.reserve(static_cast<std::size_t>(p_));
    for (int r = 0; r < p_; ++r) {
      auto rk = std::make_unique<Rank>();
      reset_stats_of(*rk);
      ranks_.push_back(std::move(rk));
    }
    boxes_.resize(static_cast<std::size_t>(p_));
    thread_done_.assign(static_cast<std::size_t>(p_), 0);
    tracing_ = !opts_.trace_path.empty();
    // Waits spin briefly (pause instruction), then yield, then sleep. With no more ranks than
    // hardware threads a partner is likely running, so spinning longer pays off; with more ranks
    // the waiter should give its core away quickly.
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const bool roomy = static_cast<unsigned>(p_) <= hw;
    spin_ = std::chrono::nanoseconds(roomy ? 5000 : 500);
    yield_ = std::chrono::microseconds(roomy ? 200 : 20);
  }

  const LaunchOptions& options() const { return opts_; }
  int size() const { return p_; }
  Rank& rank_state(int r) { return *ranks_[static_cast<std::size_t>(r)]; }
  bool tracing() const { return tracing_; }

  void run_rank(int r);
  void abort_start(int started, const std::string& why);
  void wait_for_ranks(std::vector<std::thread>& threads);
  void write_trace();
  std::exception_ptr first_error() {
    std::lock_guard<std::mutex> g(mu_);
    return first_error_;
  }

  // point-to-point
  std::shared_ptr<P2POp> post(int r, bool is_send, bool blocking, const void* sbuf, void* rbuf,
                              std::size_t count, DataType type, int peer, int tag);
  void wait_p2p(int r, const std::shared_ptr<P2POp>& op);
  bool p2p_completed(int r, const std::shared_ptr<P2POp>& op);
  void check_poll_timeout(int r, SteadyClock::time_point& first_poll, const std::string& what);

  // collectives
  void collective(int r, CollCall call);
  std::shared_ptr<AsyncColl> collective_async(int r, CollCall call);
  void wait_async(int r, AsyncColl& a);
  bool async_completed(AsyncColl& a);

  void sim_compute(int r, double seconds, const char* label);
  void sim_reduce(int r, std::size_t bytes);
  void reset_stats_of(Rank& rk) {
    const auto n = static_cast<std::size_t>(p_);
    rk.stats = Stats{};
    rk.stats.messages_sent_to.assign(n, 0);
    rk.stats.bytes_sent_to.assign(n, 0);
    rk.stats.messages_received_from.assign(n, 0);
    rk.stats.bytes_received_from.assign(n, 0);
  }

 private:
  friend struct AsyncColl;
  // All *_locked functions need mu_ held.
  template <typename Ready>
  void block(int r, std::unique_lock<std::mutex>& lk, const Pending& what, Ready&& ready);
  bool sleep_until_woken(Rank& me, std::uint64_t seq, SteadyClock::time_point deadline);
  void wake_locked(int r);
  void wake_all_blocked_locked();
  [[noreturn]] void throw_failure_locked();
  void check_deadlock_locked();
  std::string describe_pending_locked(int r) const;
  std::string deadlock_hint_locked() const;
  void fail_locked(int r, std::exception_ptr e);
  void match_locked(const std::shared_ptr<P2POp>& send, const std::shared_ptr<P2POp>& recv);
  std::shared_ptr<CollSlot> arrive_locked(int r, const CollCall& call, std::uint64_t seq);
  void finalize_slot_locked(CollSlot& slot);
  void exec_part(const CollSlot& slot, int r);
  void wait_parts(CollSlot& slot);
  void apply_result(int r, const CollSlot& slot, bool async);
  void finish_rank(int r, std::exception_ptr error);
  void account_recv(int r, P2POp& op);
  void complete_p2p(int r, P2POp& op);

  LaunchOptions opts_;
  std::function<void()> body_;
  int p_;
  bool tracing_ = false;
  std::chrono::nanoseconds spin_{0}, yield_{0};

  // Spins (pause), then yields, until ready() or the spin budget is used up. With `peer` >= 0
  // (the rank that will complete the wait) and that rank last seen on this very CPU, spinning
  // cannot help (it would only delay the peer), so the wait yields at once.
  template <typename Ready>
  bool spin_until(Ready&& ready, int peer = -1) const {
    const auto start = SteadyClock::now();
    const int mine = peer >= 0 ? sched_getcpu() : -1;
    auto colocated = [&] { return mine >= 0 && ranks_[static_cast<std::size_t>(peer)]->cpu.load(std::memory_order_relaxed) == mine; };
    if (!colocated()) {
      for (unsigned i = 1;; ++i) {
        if (ready()) return true;
        cpu_relax();
        if ((i & 31) == 0 && (SteadyClock::now() - start > spin_ || colocated())) break;
      }
    }
    while (SteadyClock::now() - start < yield_) {
      if (ready()) return true;
      std::this_thread::yield();
    }
    return ready();
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  int blocked_ = 0, finished_ = 0;
  bool failed_ = false, deadlock_ = false;
  std::atomic<bool> failed_flag_{false};  // mirrors failed_ for lock-free polls
  std::string fail_msg_;
  std::exception_ptr first_error_;
  std::vector<std::unordered_map<std::uint64_t, Queues>> boxes_;  // [dst][(src, tag)]
  std::map<std::uint64_t, std::shared_ptr<CollSlot>> slots_;
  // launch bookkeeping
  int threads_done_ = 0;
  std::vector<char> thread_done_;
  bool abandoned_ = false;
  std::condition_variable done_cv_;
};

std::uint64_t box_key(int src, int tag) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(src)) << 32) |
         static_cast<std::uint32_t>(tag);
}

struct AsyncColl {
  Engine* engine = nullptr;
  int rank = 0;
  std::shared_ptr<CollSlot> slot;
  bool applied = false;  // owner thread only
  SteadyClock::time_point first_poll{};
};

// ---- waiting ------------------------------------------------------------------------------------

bool Engine::sleep_until_woken(Rank& me, std::uint64_t seq, SteadyClock::time_point deadline) {
  if (spin_until([&] { return me.wake.load(std::memory_order_acquire) != seq; })) return true;
  me.sleeping.store(true, std::memory_order_seq_cst);
  bool woken;
  {
    std::unique_lock<std::mutex> g(me.m);
    woken = me.cv.wait_until(g, deadline, [&] { return me.wake.load(std::memory_order_seq_cst) != seq; });
  }
  me.sleeping.store(false, std::memory_order_relaxed);
  return woken;
}

void Engine::wake_locked(int r) {
  Rank& rk = rank_state(r);
  if (rk.state != RunState::Blocked) return;
  rk.state = RunState::Running;
  --blocked_;
  rk.wake.fetch_add(1, std::memory_order_seq_cst);
  if (rk.sleeping.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> g(rk.m);
    rk.cv.notify_one();
  }
}

void Engine::wake_all_blocked_locked() {
  for (int r = 0; r < p_; ++r) wake_locked(r);
}

void Engine::throw_failure_locked() {
  if (deadlock_) throw DeadlockError(fail_msg_);
  throw RankFailedError(fail_msg_);
}

template <typename Ready>
void Engine::block(int r, std::unique_lock<std::mutex>& lk, const Pending& what, Ready&& ready) {
  Rank& me = rank_state(r);
  const auto start = SteadyClock::now();
  const auto deadline = start + opts_.timeout;
  for (;;) {
    if (ready()) return;
    if (failed_) throw_failure_locked();
    me.state = RunState::Blocked;
    me.pending = what;
    ++blocked_;
    const std::uint64_t seq = me.wake.load(std::memory_order_relaxed);
    check_deadlock_locked();
    if (me.state != RunState::Blocked) continue;  // a deadlock was found: failed_ is set
    lk.unlock();
    const bool woken = sleep_until_woken(me, seq, deadline);
    lk.lock();
    if (me.state == RunState::Blocked) {  // nobody woke us: the timeout expired
      me.state = RunState::Running;
      --blocked_;
    }
    if (!woken && !ready() && !failed_ && SteadyClock::now() >= deadline) {
      std::ostringstream os;
      os << "timeout: rank " << r << " waited "
         << std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start).count()
         << " ms in " << describe_pending_locked(r) << " (LaunchOptions::timeout is " << opts_.timeout.count()
         << " ms). Other ranks:";
      for (int q = 0; q < p_; ++q) {
        if (q == r) continue;
        const Rank& o = *ranks_[static_cast<std::size_t>(q)];
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
      me.pending = {};
      throw TimeoutError(os.str());
    }
  }
}

// ---- failure and deadlock -----------------------------------------------------------------------

std::string Engine::describe_pending_locked(int r) const {
  const Rank& rk = *ranks_[static_cast<std::size_t>(r)];
  switch (rk.pending.kind) {
    case Pending::P2P: return rk.pending.op->describe();
    case Pending::Coll: {
      std::string s = rk.pending.call.async ? "wait on " : "";
      return s + rk.pending.call.describe() + " [collective call #" + std::to_string(rk.pending.seq) + "]";
    }
    case Pending::None: break;
  }
  return "?";
}

std::exception_ptr prefixed(int r, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const DeadlockError& x) {
    return std::make_exception_ptr(DeadlockError(with_rank_prefix(r, x.what())));
  } catch (const TimeoutError& x) {
    return std::make_exception_ptr(TimeoutError(with_rank_prefix(r, x.what())));
  } catch (const MismatchError& x) {
    return std::make_exception_ptr(MismatchError(with_rank_prefix(r, x.what())));
  } catch (const RankFailedError& x) {
    return std::make_exception_ptr(RankFailedError(with_rank_prefix(r, x.what())));
  } catch (const Error& x) {
    return std::make_exception_ptr(Error(with_rank_prefix(r, x.what())));
  } catch (const distlab::NotImplemented& x) {
    return std::make_exception_ptr(distlab::NotImplemented(with_rank_prefix(r, x.what())));
  } catch (const std::exception& x) {
    return std::make_exception_ptr(Error(with_rank_prefix(r, x.what())));
  } catch (...) {
    return std::make_exception_ptr(Error(with_rank_prefix(r, "an exception not derived from std::exception")));
  }
}

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

void Engine::fail_locked(int r, std::exception_ptr e) {
  if (!first_error_) first_error_ = prefixed(r, e);
  if (!failed_) {
    failed_ = true;
    failed_flag_.store(true, std::memory_order_release);
    fail_msg_ = "rank " + std::to_string(r) + " failed: " + what_of(e);
    wake_all_blocked_locked();
  }
}

std::string Engine::deadlock_hint_locked() const {
  auto rk = [&](int q) -> const Rank& { return *ranks_[static_cast<std::size_t>(q)]; };
  auto p2p = [&](int q) -> const P2POp* {
    const Rank& x = rk(q);
    return x.state == RunState::Blocked && x.pending.kind == Pending::P2P ? x.pending.op.get() : nullptr;
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
  // A recv whose peer sends with another tag, or waits for a finished rank.
  for (int a = 0; a < p_; ++a) {
    const P2POp* x = p2p(a);
    if (!x || x->is_send) continue;
    if (rk(x->peer).state == RunState::Finished) {
      hints.push_back("rank " + std::to_string(a) + " waits for a message from rank " + std::to_string(x->peer) +
                      ", which already finished: check that every recv has a matching send");
      break;
    }
    const P2POp* y = p2p(x->peer);
    if (y && y->is_send && y->peer == a && y->tag != x->tag) {
      hints.push_back("rank " + std::to_string(x->peer) + " sends to rank " + std::to_string(a) + " with tag " +
                      std::to_string(y->tag) + " but rank " + std::to_string(a) + " receives with tag " +
                      std::to_string(x->tag) + ": messages match by (source, tag)");
      break;
    }
  }
  // Collectives that only some ranks called.
  std::vector<int> in_coll, elsewhere, finished;
  for (int q = 0; q < p_; ++q) {
    const Rank& x = rk(q);
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
    if (!elsewhere.empty()) s += "rank(s) " + list(elsewhere) + " (blocked in point-to-point calls) ";
    if (!elsewhere.empty() && !finished.empty()) s += "and ";
    if (!finished.empty()) s += "rank(s) " + list(finished) + " (already finished) ";
    s += "did not call; every rank must call the same collectives in the same order";
    hints.push_back(s);
  } else if (!finished.empty()) {
    hints.push_back("rank(s) " + list(finished) + " finished while the others still wait for them");
  }
  if (hints.empty()) {
    hints.push_back("every unfinished rank waits for another: check that each send has a matching recv "
                    "(same peers, same tag, posted in an order that lets both proceed)");
  }
  std::string out;
  for (const auto& h : hints) out += " Hint: " + h + ".";
  return out;
}

void Engine::check_deadlock_locked() {
  if (failed_ || blocked_ == 0 || blocked_ + finished_ != p_) return;
  std::ostringstream os;
  os << "deadlock:";
  int lowest = -1;
  bool first = true;
  for (int q = 0; q < p_; ++q) {
    const Rank& x = *ranks_[static_cast<std::size_t>(q)];
    os << (first ? " " : "; ") << "rank " << q;
    first = false;
    if (x.state == RunState::Finished) {
      os << " finished";
    } else {
      if (lowest < 0) lowest = q;
      os << " blocked in " << describe_pending_locked(q);
    }
  }
  os << "." << deadlock_hint_locked();
  failed_ = true;
  deadlock_ = true;
  failed_flag_.store(true, std::memory_order_release);
  fail_msg_ = os.str();
  first_error_ = std::make_exception_ptr(DeadlockError(with_rank_prefix(lowest, fail_msg_)));
  wake_all_blocked_locked();
}

// ---- point-to-point -------------------------------------------------------------------------------

void Engine::match_locked(const std::shared_ptr<P2POp>& s, const std::shared_ptr<P2POp>& rv) {
  if (s->type != rv->type || s->count != rv->count) {
    std::ostringstream os;
    os << "send/recv mismatch: rank " << s->owner << " sends " << describe_count(s->count, s->type) << " to rank "
       << rv->owner << " (tag " << s->tag << ") but rank " << rv->owner << " receives "
       << describe_count(rv->count, rv->type) << " from rank " << s->owner << " (tag " << rv->tag
       << "); a send and its recv must have the same element type and count";
    s->error = rv->error = os.str();
  } else {
    const std::size_t bytes = s->count * size_of(s->type);
    if (bytes > 0) std::memcpy(rv->rbuf, s->sbuf, bytes);
    rv->ts = s->ts;
    rv->cost = s->cost;
  }
  s->done.store(true, std::memory_order_release);
  rv->done.store(true, std::memory_order_release);
  wake_locked(s->owner);
  wake_locked(rv->owner);
}

std::shared_ptr<P2POp> Engine::post(int r, bool is_send, bool blocking, const void* sbuf, void* rbuf,
                                    std::size_t count, DataType type, int peer, int tag) {
  Rank& me = rank_state(r);
  me.cpu.store(sched_getcpu(), std::memory_order_relaxed);
  auto op = std::make_shared<P2POp>();
  op->is_send = is_send;
  op->blocking = blocking;
  op->owner = r;
  op->peer = peer;
  op->tag = tag;
  op->sbuf = sbuf;
  op->rbuf = rbuf;
  op->count = count;
  op->type = type;
  op->post_clock = me.link.clock;
  if (is_send) {
    const std::size_t bytes = count * size_of(type);
    op->cost = opts_.network.message_cost(r, peer, bytes);
    op->ts = std::max(me.link.clock, me.link.out_free);
    me.link.out_free = op->ts + op->cost;
    auto& s = me.stats;
    s.messages_sent += 1;
    s.bytes_sent += bytes;
    s.messages_sent_to[static_cast<std::size_t>(peer)] += 1;
    s.bytes_sent_to[static_cast<std::size_t>(peer)] += bytes;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    if (failed_) throw_failure_locked();
    if (is_send) {
      auto& q = boxes_[static_cast<std::size_t>(peer)][box_key(r, tag)];
      if (!q.recvs.empty()) {
        auto rv = std::move(q.recvs.front());
        q.recvs.pop_front();
        match_locked(op, rv);
      } else {
        q.sends.push_back(op);
      }
    } else {
      auto& q = boxes_[static_cast<std::size_t>(r)][box_key(peer, tag)];
      if (!q.sends.empty()) {
        auto sd = std::move(q.sends.front());
        q.sends.pop_front();
        match_locked(sd, op);
      } else {
        q.recvs.push_back(op);
      }
    }
    if (!op->error.empty()) fail_locked(r, std::make_exception_ptr(MismatchError(op->error)));
  }
  if (!blocking) me.outstanding.push_back(op);
  return op;
}

void Engine::account_recv(int r, P2POp& op) {
  Rank& me = rank_state(r);
  const double ti = std::max(op.ts, me.link.in_free);
  me.link.in_free = ti + op.cost;
  me.link.clock = std::max(me.link.clock, ti + op.cost);
  const std::size_t bytes = op.count * size_of(op.type);
  auto& s = me.stats;
  s.messages_received += 1;
  s.bytes_received += bytes;
  s.messages_received_from[static_cast<std::size_t>(op.peer)] += 1;
  s.bytes_received_from[static_cast<std::size_t>(op.peer)] += bytes;
}

void Engine::complete_p2p(int r, P2POp& op) {
  Rank& me = rank_state(r);
  op.waited = true;
  if (!op.error.empty()) return;
  if (op.is_send) {
    me.link.clock = std::max(me.link.clock, op.ts + op.cost);
  } else {
    account_recv(r, op);
  }
  if (tracing_) {
    TraceEvent ev;
    ev.name = op.is_send ? (op.blocking ? "send" : "isend") : (op.blocking ? "recv" : "irecv");
    ev.t0 = op.post_clock;
    ev.t1 = me.link.clock;
    ev.peer = op.peer;
    ev.tag = op.tag;
    ev.bytes = op.count * size_of(op.type);
    me.trace.push_back(std::move(ev));
  }
}

void Engine::wait_p2p(int r, const std::shared_ptr<P2POp>& op) {
  // Spin briefly without the mutex (the partner is usually about to match), then block.
  if (!spin_until([&] { return op->done.load(std::memory_order_acquire); }, op->peer)) {
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
  if (failed_flag_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(mu_);
    throw_failure_locked();
  }
  check_poll_timeout(r, op->first_poll, op->describe().substr(8));
  return false;
}

// A rank polling is_completed() is running, so deadlock detection cannot see it; a poll loop
// that lasts longer than the timeout is reported like a wait that does.
void Engine::check_poll_timeout(int r, SteadyClock::time_point& first_poll, const std::string& what) {
  const auto now = SteadyClock::now();
  if (first_poll == SteadyClock::time_point{}) first_poll = now;
  if (now - first_poll > opts_.timeout) {
    throw TimeoutError("timeout: rank " + std::to_string(r) + " polled is_completed() on " + what + " for " +
                       std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - first_poll).count()) +
                       " ms without completion (LaunchOptions::timeout is " + std::to_string(opts_.timeout.count()) +
                       " ms); check that the matching call is made, or call wait() so a deadlock is reported");
  }
}

// ---- collectives ------------------------------------------------------------------------------------

std::shared_ptr<CollSlot> Engine::arrive_locked(int r, const CollCall& call, std::uint64_t seq) {
  if (failed_) throw_failure_locked();
  auto& sp = slots_[seq];
  if (!sp) {
    sp = std::make_shared<CollSlot>();
    sp->seq = seq;
    sp->p = p_;
    sp->calls.resize(static_cast<std::size_t>(p_));
  }
  CollSlot& s = *sp;
  if (s.first_rank >= 0 && !call.same_as(s.calls[static_cast<std::size_t>(s.first_rank)])) {
    const CollCall& other = s.calls[static_cast<std::size_t>(s.first_rank)];
    std::ostringstream os;
    os << "collective mismatch at collective call #" << seq << ": rank " << s.first_rank << " called "
       << other.describe() << " but rank " << r << " called " << call.describe()
       << "; every rank must call the same collectives (barrier included) in the same order, with the same "
          "count, type, op and root";
    const std::string msg = os.str();
    fail_locked(r, std::make_exception_ptr(MismatchError(msg)));
    throw MismatchError(msg);
  }
  s.calls[static_cast<std::size_t>(r)] = call;
  if (s.first_rank < 0) s.first_rank = r;
  s.any_async = s.any_async || call.async;
  ++s.arrived;
  auto keep = sp;
  if (s.arrived == p_) {
    slots_.erase(seq);
    finalize_slot_locked(*keep);
  }
  return keep;
}

void Engine::finalize_slot_locked(CollSlot& s) {
  const CollCall& c = s.calls[0];
  double start = 0;
  for (const auto& x : s.calls) start = std::max(start, x.link.clock);
  s.start = start;
  s.result.resize(static_cast<std::size_t>(p_));
  for (int q = 0; q < p_; ++q) {
    s.result[static_cast<std::size_t>(q)] = s.calls[static_cast<std::size_t>(q)].link;
    s.result[static_cast<std::size_t>(q)].clock = start;
  }
  replay(c.kind, p_, c.root, c.count, size_of(c.type), opts_.network, s.result, s.msgs);
  if (s.any_async) {
    if (c.kind != CollKind::Barrier) {
      for (int q = 0; q < p_; ++q) exec_part(s, q);
    }
    s.done.store(true, std::memory_order_release);
  }
  // Published last: a blocking rank that spins on `ready` without the lock and finds the slot
  // has async callers returns at once, so the data must already have been moved.
  s.ready.store(true, std::memory_order_release);
  for (int q = 0; q < p_; ++q) {
    const Rank& x = *ranks_[static_cast<std::size_t>(q)];
    if (x.state == RunState::Blocked && x.pending.kind == Pending::Coll && x.pending.slot.get() == &s) wake_locked(q);
  }
}

// out[k] = op over inputs (in rank order) for `len` elements, written to every output.
void reduce_tiles(const std::vector<const std::byte*>& in, const std::vector<std::byte*>& out, std::size_t len,
                  DataType type, ReduceOp op, int p) {
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

void Engine::exec_part(const CollSlot& s, int r) {
  const CollCall& c = s.calls[static_cast<std::size_t>(r)];
  const std::size_t es = size_of(c.type);
  const int p = p_;
  auto in_of = [&](int q) { return static_cast<const std::byte*>(s.calls[static_cast<std::size_t>(q)].in); };
  auto out_of = [&](int q) { return static_cast<std::byte*>(s.calls[static_cast<std::size_t>(q)].out); };
  const std::size_t off = chunk_off(c.count, p, r);
  const std::size_t len = chunk_len(c.count, p, r);
  switch (c.kind) {
    case CollKind::Barrier:
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
      move_bytes(out_of(c.root) + static_cast<std::size_t>(r) * c.count * es, in_of(r), c.count * es);
      break;
    case CollKind::AllGather:
      for (int q = 0; q < p; ++q) {
        move_bytes(out_of(q) + static_cast<std::size_t>(r) * c.count * es, in_of(r), c.count * es);
      }
      break;
    case CollKind::Scatter:
      move_bytes(out_of(r), in_of(c.root) + static_cast<std::size_t>(r) * c.count * es, c.count * es);
      break;
    case CollKind::ReduceScatter: {
      if (c.count == 0) break;
      std::vector<const std::byte*> in(static_cast<std::size_t>(p));
      for (int q = 0; q < p; ++q) in[static_cast<std::size_t>(q)] = in_of(q) + static_cast<std::size_t>(r) * c.count * es;
      reduce_tiles(in, {out_of(r)}, c.count, c.type, c.op, p);
      break;
    }
  }
}

void Engine::wait_parts(CollSlot& s) {
  const int n = s.parts_done.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (n == p_) {
    s.parts_done.notify_all();
    return;
  }
  if (spin_until([&] { return s.parts_done.load(std::memory_order_acquire) == p_; })) return;
  for (;;) {
    const int v = s.parts_done.load(std::memory_order_acquire);
    if (v == p_) return;
    s.parts_done.wait(v, std::memory_order_acquire);
  }
}

void Engine::apply_result(int r, const CollSlot& s, bool async) {
  Rank& me = rank_state(r);
  const CollCall& c = s.calls[static_cast<std::size_t>(r)];
  const LinkState& res = s.result[static_cast<std::size_t>(r)];
  if (async || s.any_async) {
    me.link.clock = std::max(me.link.clock, res.clock);
  } else {
    me.link = res;
  }
  auto& st = me.stats;
  for (const MsgRecord& m : s.msgs[static_cast<std::size_t>(r)]) {
    const auto peer = static_cast<std::size_t>(m.peer);
    if (m.sent) {
      st.messages_sent += 1;
      st.bytes_sent += m.bytes;
      st.messages_sent_to[peer] += 1;
      st.bytes_sent_to[peer] += m.bytes;
    } else {
      st.messages_received += 1;
      st.bytes_received += m.bytes;
      st.messages_received_from[peer] += 1;
      st.bytes_received_from[peer] += m.bytes;
    }
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
    me.trace.push_back(std::move(ev));
  }
}

void Engine::collective(int r, CollCall call) {
  Rank& me = rank_state(r);
  const std::uint64_t seq = me.coll_seq++;
  call.link = me.link;
  std::shared_ptr<CollSlot> slot;
  {
    std::unique_lock<std::mutex> lk(mu_);
    slot = arrive_locked(r, call, seq);
  }
  // Spin briefly without the mutex (the common case: the others arrive within microseconds),
  // then block (where deadlock detection and the timeout apply).
  if (!spin_until([&] { return slot->ready.load(std::memory_order_acquire); })) {
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
    exec_part(*slot, r);
    wait_parts(*slot);
  }
  apply_result(r, *slot, false);
}

std::shared_ptr<AsyncColl> Engine::collective_async(int r, CollCall call) {
  Rank& me = rank_state(r);
  const std::uint64_t seq = me.coll_seq++;
  call.link = me.link;
  call.async = true;
  auto a = std::make_shared<AsyncColl>();
  a->engine = this;
  a->rank = r;
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
    what.call = slot->calls[static_cast<std::size_t>(r)];
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
  if (failed_flag_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(mu_);
    throw_failure_locked();
  }
  check_poll_timeout(a.rank, a.first_poll, a.slot->calls[static_cast<std::size_t>(a.rank)].describe());
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
    me.trace.push_back(std::move(ev));
  }
}

void Engine::sim_reduce(int r, std::size_t bytes) {
  const double c = opts_.network.reduce_cost(bytes);
  if (c > 0) sim_compute(r, c, "reduce");
}

// ---- rank lifetime --------------------------------------------------------------------------------

void Engine::finish_rank(int r, std::exception_ptr error) {
  Rank& me = rank_state(r);
  if (!error) {
    std::string leaks;
    for (const auto& op : me.outstanding) {
      if (op->done.load(std::memory_order_acquire)) {
        if (!op->waited) complete_p2p(r, *op);
      } else {
        leaks += (leaks.empty() ? "" : ", ") + op->describe().substr(8);  // drop "wait on "
      }
    }
    for (const auto& a : me.outstanding_async) {
      if (a->slot->done.load(std::memory_order_acquire)) {
        if (!a->applied) {
          a->applied = true;
          apply_result(r, *a->slot, true);
        }
      } else {
        leaks += (leaks.empty() ? "" : ", ") + a->slot->calls[static_cast<std::size_t>(r)].describe();
      }
    }
    if (!leaks.empty()) {
      error = std::make_exception_ptr(Error(
          "returned from the rank's body while these operations were still pending: " + leaks +
          "; call wait() on every Work (dist::wait_all) before the buffers go away"));
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  if (error) fail_locked(r, error);
  // Withdraw this rank's unmatched operations: their buffers may be gone.
  for (const auto& op : me.outstanding) {
    if (op->done.load(std::memory_order_relaxed)) continue;
    auto& box = op->is_send ? boxes_[static_cast<std::size_t>(op->peer)][box_key(r, op->tag)]
                            : boxes_[static_cast<std::size_t>(r)][box_key(op->peer, op->tag)];
    auto& q = op->is_send ? box.sends : box.recvs;
    auto it = std::find(q.begin(), q.end(), op);
    if (it != q.end()) q.erase(it);
  }
  me.outstanding.clear();
  me.outstanding_async.clear();
  me.pending = {};
  me.state = RunState::Finished;
  ++finished_;
  check_deadlock_locked();
}

// ---- the per-rank backend object ----------------------------------------------------------------


class P2PWork final : public WorkImpl {
 public:
  P2PWork(Engine* e, int r, std::shared_ptr<P2POp> op) : e_(e), r_(r), op_(std::move(op)) {}
  bool is_completed() override { return e_->p2p_completed(r_, op_); }
  void wait() override { e_->wait_p2p(r_, op_); }

 private:
  Engine* e_;
  int r_;
  std::shared_ptr<P2POp> op_;
};

class AsyncWork final : public WorkImpl {
 public:
  explicit AsyncWork(std::shared_ptr<AsyncColl> a) : a_(std::move(a)) {}
  bool is_completed() override { return a_->engine->async_completed(*a_); }
  void wait() override { a_->engine->wait_async(a_->rank, *a_); }

 private:
  std::shared_ptr<AsyncColl> a_;
};

class RankBackend final : public BackendImpl {
 public:
  RankBackend(Engine* e, int r) : e_(e), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return e_->size(); }

  void send(const void* buf, std::size_t count, DataType type, int dst, int tag) override {
    auto op = e_->post(r_, true, true, buf, nullptr, count, type, dst, tag);
    e_->wait_p2p(r_, op);
  }
  void recv(void* buf, std::size_t count, DataType type, int src, int tag) override {
    auto op = e_->post(r_, false, true, nullptr, buf, count, type, src, tag);
    e_->wait_p2p(r_, op);
  }
  Work isend(const void* buf, std::size_t count, DataType type, int dst, int tag) override {
    return Work(std::make_shared<P2PWork>(e_, r_, e_->post(r_, true, false, buf, nullptr, count, type, dst, tag)));
  }
  Work irecv(void* buf, std::size_t count, DataType type, int src, int tag) override {
    return Work(std::make_shared<P2PWork>(e_, r_, e_->post(r_, false, false, nullptr, buf, count, type, src, tag)));
  }
  void barrier() override { e_->collective(r_, make(CollKind::Barrier, nullptr, nullptr, 0, DataType::Float32)); }

  void broadcast(void* buf, std::size_t count, DataType type, int src) override {
    auto c = make(CollKind::Broadcast, buf, buf, count, type);
    c.root = src;
    e_->collective(r_, c);
  }
  void reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst) override {
    auto c = make(CollKind::Reduce, buf, buf, count, type);
    c.op = op;
    c.root = dst;
    e_->collective(r_, c);
  }
  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) override {
    auto c = make(CollKind::AllReduce, buf, buf, count, type);
    c.op = op;
    e_->collective(r_, c);
  }
  Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op) override {
    auto c = make(CollKind::AllReduce, buf, buf, count, type);
    c.op = op;
    return Work(std::make_shared<AsyncWork>(e_->collective_async(r_, c)));
  }
  void gather(const void* in, void* out, std::size_t count, DataType type, int dst) override {
    auto c = make(CollKind::Gather, in, out, count, type);
    c.root = dst;
    e_->collective(r_, c);
  }
  void all_gather(const void* in, void* out, std::size_t count, DataType type) override {
    e_->collective(r_, make(CollKind::AllGather, in, out, count, type));
  }
  void scatter(const void* in, void* out, std::size_t count, DataType type, int src) override {
    auto c = make(CollKind::Scatter, in, out, count, type);
    c.root = src;
    e_->collective(r_, c);
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DataType type, ReduceOp op) override {
    auto c = make(CollKind::ReduceScatter, in, out, count, type);
    c.op = op;
    e_->collective(r_, c);
  }

  Stats stats() override { return e_->rank_state(r_).stats; }
  void reset_stats() override { e_->reset_stats_of(e_->rank_state(r_)); }
  double sim_time() override { return e_->rank_state(r_).link.clock; }
  void sim_compute(double seconds, const char* label) override { e_->sim_compute(r_, seconds, label); }
  void sim_reduce(std::size_t bytes) override { e_->sim_reduce(r_, bytes); }

 private:
  static CollCall make(CollKind kind, const void* in, void* out, std::size_t count, DataType type) {
    CollCall c;
    c.kind = kind;
    c.in = in;
    c.out = out;
    c.count = count;
    c.type = type;
    return c;
  }
  Engine* e_;
  int r_;
};


void Engine::run_rank(int r) {
  RankBackend backend(this, r);
  set_current(&backend, &opts_);
  std::exception_ptr error;
  try {
    body_();
  } catch (...) {
    error = std::current_exception();
  }
  try {
    finish_rank(r, error);
  } catch (...) {
    // finish_rank only reports through the engine; nothing may escape a rank's thread.
  }
  set_current(nullptr, nullptr);
  std::lock_guard<std::mutex> g(mu_);
  thread_done_[static_cast<std::size_t>(r)] = 1;
  ++threads_done_;
  done_cv_.notify_all();
}

void Engine::abort_start(int started, const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  fail_locked(0, std::make_exception_ptr(Error(why)));
  for (int r = started; r < p_; ++r) {
    rank_state(r).state = RunState::Finished;
    ++finished_;
    thread_done_[static_cast<std::size_t>(r)] = 1;
    ++threads_done_;
  }
}

void Engine::wait_for_ranks(std::vector<std::thread>& threads) {
  std::vector<int> stuck;
  {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return threads_done_ == p_ || failed_; });
    if (threads_done_ < p_) {
      // A rank failed: the others are woken with an error as soon as they are (or next enter) a
      // dist call. One that stays in its own code longer than this grace period is abandoned.
      const auto grace = opts_.timeout + std::chrono::seconds(5);
      if (!done_cv_.wait_for(lk, grace, [&] { return threads_done_ == p_; })) {
        for (int r = 0; r < p_; ++r) {
          if (!thread_done_[static_cast<std::size_t>(r)]) stuck.push_back(r);
        }
        std::string msg = what_of(first_error_) + " (and rank(s)";
        for (int r : stuck) msg += " " + std::to_string(r);
        msg += " did not return within " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(grace).count()) +
               " s after that failure: stuck in their own code, so their threads were left running)";
        first_error_ = std::make_exception_ptr(Error(msg));
      }
    }
  }
  for (int r = 0; r < p_; ++r) {
    auto& t = threads[static_cast<std::size_t>(r)];
    if (!t.joinable()) continue;
    if (std::find(stuck.begin(), stuck.end(), r) != stuck.end()) {
      t.detach();
    } else {
      t.join();
    }
  }
  abandoned_ = !stuck.empty();
}

void Engine::write_trace() {
  if (!tracing_) return;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0},
                    {"args", {{"name", "fake_dist (" + std::to_string(p_) + " ranks, simulated clock)"}}}});
  for (int r = 0; r < p_; ++r) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"sort_index", r}}}});
    if (abandoned_ && !thread_done_[static_cast<std::size_t>(r)]) continue;
    for (const TraceEvent& ev : rank_state(r).trace) {
      nlohmann::json args = nlohmann::json::object();
      if (ev.peer >= 0) args[ev.name.find("send") != std::string::npos ? "dst" : "src"] = ev.peer;
      if (ev.tag >= 0) args["tag"] = ev.tag;
      if (ev.bytes > 0 || ev.peer >= 0 || ev.is_coll) args["bytes"] = ev.bytes;
      if (ev.is_coll) args["collective_call"] = ev.seq;
      const std::string cat = ev.is_coll ? "collective" : (ev.peer >= 0 ? "p2p" : "compute");
      events.push_back({{"name", ev.name}, {"cat", cat}, {"ph", "X"}, {"pid", 0}, {"tid", r},
                        {"ts", ev.t0 * 1e6}, {"dur", (ev.t1 - ev.t0) * 1e6}, {"args", args}});
    }
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ns"},
                        {"otherData", {{"clock", "simulated (fake_dist alpha-beta model), microseconds"}}}};
  std::ofstream f(opts_.trace_path);
  if (!f) throw Error("cannot write the trace to '" + opts_.trace_path + "': check that the folder exists");
  f << doc.dump() << "\n";
  if (!f) throw Error("writing the trace to '" + opts_.trace_path + "' failed");
}

}  // namespace
}  // namespace fake

// ---- entry point ----------------------------------------------------------------------------------

void launch_threads(const LaunchOptions& options, const std::function<void()>& body) {
  auto engine = std::make_shared<fake::Engine>(options, body);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(options.world_size));
  for (int r = 0; r < options.world_size; ++r) {
    try {
      threads.emplace_back([engine, r] { engine->run_rank(r); });
    } catch (const std::system_error& e) {
      engine->abort_start(r, "could not start thread " + std::to_string(r) + " of " +
                                 std::to_string(options.world_size) + ": " + e.what() +
                                 "; use a smaller world size");
      break;
    }
  }
  threads.resize(static_cast<std::size_t>(options.world_size));
  engine->wait_for_ranks(threads);
  std::exception_ptr error = engine->first_error();
  try {
    engine->write_trace();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dist::detail
