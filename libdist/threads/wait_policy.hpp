// How a rank of the threads backend waits: spin briefly (pause instruction), then yield, then
// sleep on its condition variable until woken or the deadline. With no more ranks than hardware
// threads a partner is likely running, so spinning longer pays off; with more ranks the waiter
// gives its core away quickly (8 or 64 ranks on 2 cores must run well, docs/threads_backend.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <sched.h>
#include <thread>

namespace dist::detail::threads {

using SteadyClock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// A rank's wake-up signal. A waker bumps `ticket` and notifies the condition variable when the
/// rank sleeps; the rank sleeps only while the ticket is the one it read before deciding to wait.
struct WakeSignal {
  std::atomic<std::uint64_t> ticket{0};
  std::atomic<bool> sleeping{false};
  std::mutex m;
  std::condition_variable cv;

  std::uint64_t current() const { return ticket.load(std::memory_order_relaxed); }
  void wake() {
    ticket.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> g(m);
      cv.notify_one();
    }
  }
};

class WaitPolicy {
 public:
  explicit WaitPolicy(int ranks) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const bool roomy = static_cast<unsigned>(ranks) <= hw;
    spin_ = std::chrono::nanoseconds(roomy ? 5000 : 500);
    yield_ = std::chrono::microseconds(roomy ? 200 : 20);
  }

  /// Spins (pause), then yields, until ready() or the budget is used up; returns ready(). With
  /// `peer_cpu` (the CPU the rank that will complete the wait last ran on) equal to this thread's
  /// CPU, spinning cannot help (it would only delay the peer), so the wait yields at once.
  template <typename Ready>
  bool spin_until(Ready&& ready, const std::atomic<int>* peer_cpu = nullptr) const {
    const auto start = SteadyClock::now();
    const int mine = peer_cpu != nullptr ? sched_getcpu() : -1;
    auto colocated = [&] { return mine >= 0 && peer_cpu->load(std::memory_order_relaxed) == mine; };
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

  /// Spins, then sleeps until `signal` moves past `seen` or the deadline; false on timeout.
  bool sleep_until_woken(WakeSignal& signal, std::uint64_t seen,
                         SteadyClock::time_point deadline) const {
    if (spin_until([&] { return signal.ticket.load(std::memory_order_acquire) != seen; }))
      return true;
    signal.sleeping.store(true, std::memory_order_seq_cst);
    bool woken;
    {
      std::unique_lock<std::mutex> g(signal.m);
      woken = signal.cv.wait_until(
          g, deadline, [&] { return signal.ticket.load(std::memory_order_seq_cst) != seen; });
    }
    signal.sleeping.store(false, std::memory_order_relaxed);
    return woken;
  }

 private:
  std::chrono::nanoseconds spin_{0};
  std::chrono::nanoseconds yield_{0};
};

}  // namespace dist::detail::threads
