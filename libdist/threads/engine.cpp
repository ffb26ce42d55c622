// The threads backend's core: rank states, blocking and waking, failure and deadlock detection,
// and each rank's lifetime (see engine.hpp for the concurrency rules).
#include "threads/engine.hpp"

#include <algorithm>

namespace dist::detail::threads {

Engine::Engine(const LaunchOptions& options, std::function<void()> body)
    : opts_(options), body_(std::move(body)), p_(options.world_size), wait_(options.world_size) {
  ranks_.reserve(static_cast<std::size_t>(p_));
  for (int r = 0; r < p_; ++r) {
    ranks_.push_back(std::make_unique<Rank>());
    reset_stats(r);
  }
  boxes_.resize(static_cast<std::size_t>(p_));
  any_recvs_.resize(static_cast<std::size_t>(p_));
  thread_done_.assign(static_cast<std::size_t>(p_), 0);
  tracing_ = !opts_.trace_path.empty();
}

std::exception_ptr Engine::first_error() {
  std::lock_guard<std::mutex> g(mu_);
  return first_error_;
}

// ---- blocking and waking ------------------------------------------------------------------------

void Engine::wake_locked(int r) {
  Rank& rk = rank_state(r);
  if (rk.state != RunState::Blocked) return;
  rk.state = RunState::Running;
  --blocked_;
  rk.signal.wake();
}

void Engine::wake_all_blocked_locked() {
  for (int r = 0; r < p_; ++r) wake_locked(r);
}

void Engine::throw_failure_locked() {
  if (deadlock_) throw DeadlockError(fail_msg_);
  throw RankFailedError(fail_msg_);
}

void Engine::throw_if_failed() {
  if (failed_flag_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(mu_);
    throw_failure_locked();
  }
}

void Engine::block(int r, std::unique_lock<std::mutex>& lk, const Pending& what,
                   const std::function<bool()>& ready) {
  Rank& me = rank_state(r);
  const auto start = SteadyClock::now();
  const auto deadline = start + opts_.timeout;
  for (;;) {
    if (ready()) return;
    if (failed_) throw_failure_locked();
    me.state = RunState::Blocked;
    me.pending = what;
    ++blocked_;
    const std::uint64_t seen = me.signal.current();
    check_deadlock_locked();
    if (me.state != RunState::Blocked) continue;  // a deadlock was found: failed_ is set
    lk.unlock();
    const bool woken = wait_.sleep_until_woken(me.signal, seen, deadline);
    lk.lock();
    if (me.state == RunState::Blocked) {  // nobody woke us: the timeout expired
      me.state = RunState::Running;
      --blocked_;
    }
    if (!woken && !ready() && !failed_ && SteadyClock::now() >= deadline) {
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
      std::string report = timeout_report_locked(r, waited);
      me.pending = {};
      throw TimeoutError(report);
    }
  }
}

// A rank polling is_completed() is running, so deadlock detection cannot see it; a poll loop
// that lasts longer than the timeout is reported like a wait that does.
void Engine::check_poll_timeout(int r, SteadyClock::time_point& first_poll,
                                const std::string& what) {
  const auto now = SteadyClock::now();
  if (first_poll == SteadyClock::time_point{}) first_poll = now;
  if (now - first_poll > opts_.timeout) {
    throw TimeoutError(poll_timeout_report(
        r, what, std::chrono::duration_cast<std::chrono::milliseconds>(now - first_poll)));
  }
}

// ---- failure and deadlock -----------------------------------------------------------------------

void Engine::fail_locked(int r, std::exception_ptr e) {
  if (!first_error_) first_error_ = with_rank_prefix(r, e);
  if (!failed_) {
    failed_ = true;
    failed_flag_.store(true, std::memory_order_release);
    fail_msg_ = "rank " + std::to_string(r) + " failed: " + what_of(e);
    wake_all_blocked_locked();
  }
}

void Engine::check_deadlock_locked() {
  if (failed_ || blocked_ == 0 || blocked_ + finished_ != p_) return;
  // Nothing else can happen now: the moment to decide receives from any source. Each decision
  // may wake a rank (then this is no deadlock) or not (then decide the next one).
  while (resolve_any_locked()) {
    if (failed_ || blocked_ + finished_ != p_) return;
  }
  int lowest = 0;
  while (rank_state(lowest).state == RunState::Finished) ++lowest;
  fail_msg_ = deadlock_report_locked();
  failed_ = true;
  deadlock_ = true;
  failed_flag_.store(true, std::memory_order_release);
  first_error_ = with_rank_prefix(lowest, std::make_exception_ptr(DeadlockError(fail_msg_)));
  wake_all_blocked_locked();
}

// ---- rank lifetime ------------------------------------------------------------------------------

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
        leaks += (leaks.empty() ? "" : ", ") +
                 a->slot->calls[static_cast<std::size_t>(a->grank)].describe();
      }
    }
    if (!leaks.empty()) error = std::make_exception_ptr(Error(leaked_work_report(leaks)));
  }
  std::lock_guard<std::mutex> g(mu_);
  if (error) fail_locked(r, error);
  // Withdraw this rank's unmatched operations: their buffers may be gone.
  for (const auto& op : me.outstanding) {
    if (!op->done.load(std::memory_order_relaxed)) withdraw_locked(r, *op);
  }
  me.outstanding.clear();
  me.outstanding_async.clear();
  me.pending = {};
  me.state = RunState::Finished;
  ++finished_;
  check_deadlock_locked();
}

namespace {
thread_local Engine* tls_engine = nullptr;
thread_local int tls_rank = -1;
}  // namespace

Engine* Engine::of_this_thread(int& r) {
  r = tls_rank;
  return tls_engine;
}

void Engine::run_rank(int r, BackendImpl& backend) {
  tls_engine = this;
  tls_rank = r;
  const RankOutcome outcome = run_rank_body(backend, opts_, body_);
  tls_engine = nullptr;
  try {
    finish_rank(r, outcome.error);
  } catch (...) {
    // finish_rank only reports through the engine; nothing may escape a rank's thread.
  }
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

void Engine::wait_for_ranks(std::vector<std::thread>& rank_threads) {
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
        for (int r : stuck) msg.append(" ").append(std::to_string(r));
        msg +=
            " did not return within " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(grace).count()) +
            " s after that failure: stuck in their own code, so their threads were left running)";
        first_error_ = std::make_exception_ptr(Error(msg));
      }
    }
  }
  for (int r = 0; r < p_; ++r) {
    auto& t = rank_threads[static_cast<std::size_t>(r)];
    if (!t.joinable()) continue;
    if (std::find(stuck.begin(), stuck.end(), r) != stuck.end()) {
      t.detach();
    } else {
      t.join();
    }
  }
  abandoned_ = !stuck.empty();
}

}  // namespace dist::detail::threads
