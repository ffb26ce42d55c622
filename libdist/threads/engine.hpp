// The threads backend: ranks are threads of one process; see docs/threads_backend.md.
//
// Concurrency in one paragraph: one engine mutex guards matching queues, collective slots and
// every rank's scheduling state (Running / Blocked / Finished). A rank that must wait marks
// itself Blocked under the mutex; whoever completes what it waits for marks it Running under the
// same mutex *before* waking it. So "every unfinished rank is Blocked" is an exact, race-free
// deadlock test, evaluated whenever a rank blocks or finishes. Waits spin briefly, then sleep
// (wait_policy.hpp) with the launch timeout. A rank's clock, link state, counters and trace
// belong to its own thread; built-in collectives compute everyone's results in the last arriver
// (under the mutex) and each rank applies its own when it leaves.
//
// One file per responsibility:
//   engine.cpp       rank states, blocking and waking, failure and deadlock detection, lifetime
//   wait_policy.hpp  spin / yield / sleep
//   link_model.hpp   the cost of a message on the simulated clock (also used by schedules.cpp)
//   p2p.cpp          posting, matching and completing send/recv/isend/irecv
//   any_source.cpp   recv_any/irecv_any: the deterministic choice (earliest simulated arrival)
//   collectives.cpp  built-in collectives: arrival, data movement, results
//   schedules.cpp    the message schedules the built-in collectives charge
//   diagnostics.cpp  the texts of deadlock, timeout and mismatch errors
//   trace.cpp        the Chrome trace (one track per rank, and one per stream of a rank's device)
//   device_state.hpp the simulated device of a rank: streams, events, buffers (<dist/device.hpp>)
//   device.cpp       streams and events on the simulated clock; host blocking; kernels and copies
//   stream_race.cpp  the stream-race detector (happens-before between streams, vector clocks)
//   device_collectives.cpp  collectives on a stream (all_reduce(buf, stream)) and their Work
//   launch.cpp       the per-rank BackendImpl and launch_threads()
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "dist/backend.hpp"
#include "threads/ops.hpp"

namespace dist::detail::threads {

enum class RunState { Running, Blocked, Finished };

/// What a Blocked rank waits for (for deadlock reports).
struct Pending {
  enum Kind { None, P2P, Coll } kind = None;
  std::shared_ptr<P2POp> op;
  std::shared_ptr<CollSlot> slot;
  std::uint64_t seq = 0;
  CollCall call;
};

struct DeviceState;  // device_state.hpp

struct alignas(64) Rank {
  // Guarded by the engine mutex.
  RunState state = RunState::Running;
  Pending pending;
  WakeSignal signal;         // bumped under the engine mutex by whoever wakes this rank
  std::atomic<int> cpu{-1};  // the CPU this rank's thread last ran a dist call on (a hint)
  // Owned by the rank's thread.
  LinkState link;
  Stats stats;
  std::map<int, std::uint64_t> coll_seq;            // per group id: the next collective's number
  std::vector<std::shared_ptr<P2POp>> outstanding;  // isend/irecv not yet waited
  std::vector<std::shared_ptr<AsyncColl>> outstanding_async;
  std::vector<TraceEvent> trace;
  std::shared_ptr<DeviceState> device;  // created on first use (device.cpp)
};

/// Unmatched sends and recvs of one (group, source, destination, tag).
struct Queues {
  std::deque<std::shared_ptr<P2POp>> sends, recvs;
};
struct BoxKey {
  int gid, src, tag;
  bool operator==(const BoxKey&) const = default;
};
struct BoxKeyHash {
  std::size_t operator()(const BoxKey& k) const {
    const std::uint64_t v = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.src)) << 32) |
                            static_cast<std::uint32_t>(k.tag);
    return std::hash<std::uint64_t>{}(v ^
                                      (static_cast<std::uint64_t>(k.gid) * 0x9E3779B97F4A7C15ull));
  }
};

class Engine {
 public:
  Engine(const LaunchOptions& options, std::function<void()> body);

  const LaunchOptions& options() const { return opts_; }
  int size() const { return p_; }
  Rank& rank_state(int r) { return *ranks_[static_cast<std::size_t>(r)]; }
  const Rank& rank_state(int r) const { return *ranks_[static_cast<std::size_t>(r)]; }

  /// The engine and rank of the calling thread while it runs a rank's body (else nullptr).
  static Engine* of_this_thread(int& r);

  // rank lifetime (engine.cpp)
  void run_rank(int r, BackendImpl& backend);
  void abort_start(int started, const std::string& why);
  void wait_for_ranks(std::vector<std::thread>& rank_threads);
  std::exception_ptr first_error();

  // point-to-point (p2p.cpp)
  std::shared_ptr<P2POp> post(int r, bool is_send, bool blocking, const void* sbuf, void* rbuf,
                              std::size_t count, DataType type, int peer, int tag,
                              const std::shared_ptr<const GroupInfo>& group = nullptr);
  void wait_p2p(int r, const std::shared_ptr<P2POp>& op);
  // receives from any source (any_source.cpp); post() with peer == kAnySource starts one
  bool p2p_completed(int r, const std::shared_ptr<P2POp>& op);

  // collectives (collectives.cpp)
  // `call.group` picks the group (null: the world); returns the slot (new_group/split read it).
  std::shared_ptr<CollSlot> collective(int r, CollCall call);
  std::shared_ptr<AsyncColl> collective_async(int r, CollCall call);
  void wait_async(int r, AsyncColl& a);
  bool async_completed(AsyncColl& a);
  void sim_compute(int r, double seconds, const char* label);
  void sim_reduce(int r, std::size_t bytes);

  void reset_stats(int r) { rank_state(r).stats = fresh_stats(p_); }

  // trace (trace.cpp)
  void trace(int r, TraceEvent ev);
  void write_trace();

 private:
  // All *_locked functions need mu_ held.
  // engine.cpp
  void block(int r, std::unique_lock<std::mutex>& lk, const Pending& what,
             const std::function<bool()>& ready);
  void wake_locked(int r);
  void wake_all_blocked_locked();
  [[noreturn]] void throw_failure_locked();
  void throw_if_failed();
  void fail_locked(int r, std::exception_ptr e);
  void check_deadlock_locked();
  void finish_rank(int r, std::exception_ptr error);
  void check_poll_timeout(int r, SteadyClock::time_point& first_poll, const std::string& what);
  // diagnostics.cpp
  std::string describe_pending_locked(int r) const;
  std::string deadlock_report_locked() const;
  std::string deadlock_hint_locked() const;
  std::string timeout_report_locked(int r, std::chrono::milliseconds waited) const;
  std::string poll_timeout_report(int r, const std::string& what,
                                  std::chrono::milliseconds polled) const;
  static std::string send_recv_mismatch(const P2POp& send, const P2POp& recv);
  static std::string any_source_conflict(int r, const P2POp& posted, const P2POp& pending);
  static std::string collective_mismatch(std::uint64_t seq, int first_rank, const CollCall& first,
                                         int r, const CollCall& call);
  static std::string leaked_work_report(const std::string& leaks);
  // p2p.cpp
  void match_locked(const std::shared_ptr<P2POp>& send, const std::shared_ptr<P2POp>& recv);
  void complete_p2p(int r, P2POp& op);
  void withdraw_locked(int r, const P2POp& op);
  Queues& queues_locked(int gid, int src, int dst, int tag);
  // any_source.cpp
  void post_any_locked(int r, const std::shared_ptr<P2POp>& op);
  void check_any_conflict_locked(int r, const P2POp& op) const;
  bool resolve_any_locked();
  bool try_resolve_for_poll(const std::shared_ptr<P2POp>& op);
  // collectives.cpp
  std::shared_ptr<CollSlot> arrive_locked(int r, const CollCall& call, std::uint64_t seq);
  void finalize_slot_locked(CollSlot& slot);
  void create_groups_locked(CollSlot& slot);
  void exec_part(const CollSlot& slot, int gr);
  void wait_parts(CollSlot& slot);
  void apply_result(int r, const CollSlot& slot, bool async);
  static int group_rank_of(const CollCall& call, int r) {
    return call.group ? call.group->my_rank : r;
  }

  LaunchOptions opts_;
  std::function<void()> body_;
  int p_;
  bool tracing_ = false;
  WaitPolicy wait_;

  std::mutex mu_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  int blocked_ = 0, finished_ = 0;
  bool failed_ = false, deadlock_ = false;
  std::atomic<bool> failed_flag_{false};  // mirrors failed_ for lock-free polls
  std::string fail_msg_;
  std::exception_ptr first_error_;
  std::vector<std::unordered_map<BoxKey, Queues, BoxKeyHash>> boxes_;  // [dst][(gid, src, tag)]
  std::vector<std::vector<std::shared_ptr<P2POp>>> any_recvs_;         // [dst]: unmatched, in order
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<CollSlot>> slots_;  // (gid, seq)
  int next_gid_ = 1;  // group ids; 0 is the world
  // launch bookkeeping
  int threads_done_ = 0;
  std::vector<char> thread_done_;
  bool abandoned_ = false;
  std::condition_variable done_cv_;
};

}  // namespace dist::detail::threads
