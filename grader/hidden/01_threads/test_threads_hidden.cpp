// Hidden tests of 01_threads: edge cases, larger sizes and repetition.
#include <gtest/gtest.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <fstream>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "distlab/timing.hpp"
#include "distlab_testing.hpp"
#include "threads.hpp"

using namespace std::chrono_literals;

// A slow std::current_exception for HiddenParallelFor.TheFirstFailureIsKeptWhileItIsCaptured:
// this test program's own definition replaces libstdc++'s (the program's symbols come first) and
// forwards to it; while g_slow_capture is set, every call first sleeps 200 ms. That widens the gap
// between "is the error slot still empty?" and storing into it from nanoseconds to 200 ms, so two
// workers that fail 80 ms apart both find the slot empty unless the check and the store are one
// critical section. Only with libstdc++, whose exception_ptr functions live in the shared library.
#if defined(__GLIBCXX__)
#define DISTLAB_SLOW_CAPTURE 1
std::atomic<bool> g_slow_capture{false};
namespace std {
exception_ptr current_exception() noexcept {
  using Real = exception_ptr (*)() noexcept;
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "_ZSt17current_exceptionv"));
  if (real == nullptr) {  // no libstdc++ behind this program: nothing to forward to
    std::fputs("test_01_threads_hidden: libstdc++'s std::current_exception not found\n", stderr);
    std::abort();
  }
  if (g_slow_capture.load()) std::this_thread::sleep_for(200ms);
  return real();
}
}  // namespace std
#endif

// A counting pthread_create for HiddenProcesses.ThreadsAreStartedAndJoinedOneAtATime: this test
// program's own definition replaces the C library's (the program's symbols come first) and
// forwards to it; while g_count_threads is set, it counts the threads started and the ones alive
// (from the call that starts a thread until its function has returned, which is before a join of
// it returns), and each such thread first sleeps 5 ms, so a thread that is not joined before the
// next is started is still alive then, however fast the machine. Only with glibc on Linux.
#if defined(__linux__) && defined(__GLIBC__)
#define DISTLAB_COUNT_THREADS 1
std::atomic<bool> g_count_threads{false};
std::atomic<int> g_started_threads{0};
std::atomic<int> g_live_threads{0};
std::atomic<int> g_most_live_threads{0};
namespace {
struct CountedStart {
  void* (*fn)(void*);
  void* arg;
};
void* counted_start(void* p) {
  const CountedStart start = *static_cast<CountedStart*>(p);
  delete static_cast<CountedStart*>(p);
  std::this_thread::sleep_for(5ms);
  void* result = start.fn(start.arg);
  g_live_threads.fetch_sub(1);
  return result;
}
}  // namespace
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*),
                              void* arg) {
  using Real = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "pthread_create"));
  if (real == nullptr) {
    std::fputs("test_01_threads_hidden: the C library's pthread_create not found\n", stderr);
    std::abort();
  }
  if (!g_count_threads.load()) return real(thread, attr, fn, arg);
  const int live = g_live_threads.fetch_add(1) + 1;
  for (int most = g_most_live_threads.load();
       live > most && !g_most_live_threads.compare_exchange_weak(most, live);) {
  }
  g_started_threads.fetch_add(1);
  auto* start = new CountedStart{fn, arg};
  const int rc = real(thread, attr, counted_start, start);
  if (rc != 0) {
    delete start;
    g_live_threads.fetch_sub(1);
  }
  return rc;
}
#endif

TEST(HiddenStartJoin, EightSleepersOverlap) {
  std::atomic<int> ran{0};
  std::vector<threads::Task> tasks(8, [&ran] {
    std::this_thread::sleep_for(120ms);
    ++ran;
  });
  distlab::Stopwatch sw;
  threads::run_parallel(tasks);
  const double elapsed = sw.elapsed_s();
  EXPECT_EQ(ran.load(), 8);
  EXPECT_LT(elapsed, 0.6 * 8 * 0.120) << "8 tasks of 120 ms took " << elapsed * 1e3 << " ms";
}

// threads.hpp: "start ALL the threads first, then join them all": all the tasks run at the same
// time. Each task waits (until a shared deadline a few seconds away) for every task to have
// started, so running at most two or three at once shows as tasks that never met the others,
// and the test fails instead of hanging.
TEST(HiddenStartJoin, AllTasksRunAtOnce) {
  constexpr int n = 6;
  std::mutex mu;
  std::condition_variable cv;
  int started = 0, met = 0, most_seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + 4s;
  std::vector<threads::Task> tasks(n, [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++started;
    cv.notify_all();
    if (cv.wait_until(lock, deadline, [&] { return started == n; })) ++met;
    most_seen = std::max(most_seen, started);
  });
  threads::run_parallel(tasks);
  EXPECT_EQ(started, n);
  EXPECT_EQ(met, n) << "only " << met << " of " << n
                    << " tasks saw all the others running within 4 s (the most a task saw "
                       "started: "
                    << most_seen
                    << "): run_parallel must start ALL the threads before joining any of them";
}

TEST(HiddenStartJoin, SequentialTwoSleepersAreSerial) {
  std::atomic<int> active{0}, max_active{0};
  std::vector<threads::Task> tasks(2, [&] {
    const int now = ++active;
    int seen = max_active.load();
    while (now > seen && !max_active.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(200ms);
    --active;
  });
  distlab::Stopwatch sw;
  threads::run_sequential(tasks);
  EXPECT_GE(sw.elapsed_s(), 0.95 * 0.4);
  EXPECT_EQ(max_active.load(), 1);
}

TEST(HiddenChunkBounds, HugeCountsDoNotOverflow) {
  const std::size_t n = 1'000'000'000'003ULL;
  std::size_t begin = 0;
  for (int i = 0; i < 7; ++i) {
    const auto [b, e] = threads::chunk_bounds(n, 7, i);
    ASSERT_EQ(b, begin);
    ASSERT_EQ(e - b, n / 7 + (static_cast<std::size_t>(i) < n % 7 ? 1 : 0));
    begin = e;
  }
  EXPECT_EQ(begin, n);
}

TEST(HiddenParallelSum, EveryThreadCountUpTo33) {
  std::vector<double> data(1001);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = (i % 2 ? -1.0 : 1.0) * static_cast<double>(i);
  const double want = std::accumulate(data.begin(), data.end(), 0.0);  // exact: integers
  for (int k = 1; k <= 33; ++k)
    EXPECT_EQ(threads::parallel_sum(data, k), want) << "n_threads=" << k;
}

TEST(HiddenParallelSum, LargeInputWithinRoundingBound) {
  std::vector<double> data(1 << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::sin(static_cast<double>(i)) * 1e6;
  const double want = std::accumulate(data.begin(), data.end(), 0.0);
  double abs_sum = 0;
  for (double x : data) abs_sum += std::abs(x);
  const double tol =
      static_cast<double>(data.size()) * std::numeric_limits<double>::epsilon() * abs_sum;
  for (int k : {2, 5, 16}) EXPECT_NEAR(threads::parallel_sum(data, k), want, tol) << k;
}

TEST(HiddenProcesses, SingleCreationAndBoundaryValues) {
  const auto c = threads::measure_creation_cost(1);
  EXPECT_EQ(c.n, 1);
  EXPECT_GT(c.process_s, 0.0);
  EXPECT_GT(c.thread_s, 0.0);
  EXPECT_THROW(threads::measure_creation_cost(0), std::invalid_argument);
  auto p = threads::write_in_child_process(9, 0);
  EXPECT_EQ(p.writer_saw, 0);
  EXPECT_EQ(p.parent_saw, 9);
  p = threads::write_in_child_process(9, 255);
  EXPECT_EQ(p.writer_saw, 255);
  EXPECT_EQ(p.parent_saw, 9);
  EXPECT_THROW(threads::write_in_child_process(0, -1), std::invalid_argument);
}

TEST(HiddenParallelFor, ManyItemsManyWorkersRepeated) {
  for (int rep = 0; rep < 5; ++rep) {
    const std::size_t n = 10000;
    std::vector<std::atomic<int>> hits(n);
    std::mutex mu;
    std::set<std::thread::id> ids;
    threads::parallel_for(n, 16, [&](std::size_t i) {
      ++hits[i];
      if (i % 97 == 0) {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
    });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
    EXPECT_LE(ids.size(), 16u);
  }
}

TEST(HiddenParallelFor, SeveralFailingItemsAndReuseAfterFailure) {
  for (int rep = 0; rep < 10; ++rep) {
    EXPECT_THROW(threads::parallel_for(200, 6,
                                       [](std::size_t i) {
                                         if (i % 10 == 3) throw std::out_of_range("item failed");
                                       }),
                 std::out_of_range);
  }
  std::atomic<long> sum{0};
  threads::parallel_for(100, 6, [&](std::size_t i) { sum += static_cast<long>(i); });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(HiddenParallelMap, SleepingItemsRunInParallel) {
  std::vector<double> xs(6, 1.0);
  distlab::Stopwatch sw;
  const auto ys = threads::parallel_map(
      xs,
      [](double x) {
        std::this_thread::sleep_for(100ms);
        return 2 * x;
      },
      3);
  EXPECT_LT(sw.elapsed_s(), 0.6 * 0.6);
  EXPECT_EQ(ys, std::vector<double>(6, 2.0));
}

TEST(HiddenTrajectories, LargerDataSetAndEdgeShapes) {
  threads::OdeConfig cfg;
  cfg.n_trajectories = 200;
  cfg.steps = 300;
  cfg.seed = 123456789;
  const auto ref = threads::generate_trajectories(cfg, 1);
  ASSERT_EQ(ref.size(), 200u * 301u);
  for (std::size_t i = 0; i < cfg.n_trajectories; ++i) {
    ASSERT_EQ(ref[i * 301], threads::initial_state(cfg, i)) << "row " << i << " starts at x0";
  }
  for (int w = 2; w <= 8; ++w) {
    ASSERT_TRUE(
        distlab::testing::elements_near<double>(threads::generate_trajectories(cfg, w), ref))
        << w << " workers";
  }
  threads::OdeConfig empty = cfg;
  empty.n_trajectories = 0;
  EXPECT_TRUE(threads::generate_trajectories(empty, 4).empty());
  threads::OdeConfig flat = cfg;
  flat.n_trajectories = 5;
  flat.steps = 0;
  const auto x0 = threads::generate_trajectories(flat, 3);
  ASSERT_EQ(x0.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(x0[i], threads::initial_state(flat, i));
}

// ---- promises observed where the order matters ---------------------------------------------------

// The sum parallel_sum documents (threads.hpp): thread t sums its chunk chunk_bounds(n, k, t) in
// index order starting from 0.0, and the partial sums are added in thread order (0, 1, ...).
namespace {
double documented_sum(const std::vector<double>& data, int k) {
  double total = 0.0;
  for (int t = 0; t < k; ++t) {
    const auto [b, e] = threads::chunk_bounds(data.size(), k, t);
    double s = 0.0;
    for (std::size_t i = b; i < e; ++i) s += data[i];
    total += s;
  }
  return total;
}
}  // namespace

TEST(HiddenParallelSum, PartialSumsAreAddedInThreadOrder) {
  // One element per chunk (or none), so each partial sum is exact and only the order in which the
  // partial sums are added decides the result: 1e16 + 1 rounds back to 1e16 in double.
  const std::vector<double> data = {1e16, 1.0, -1e16, 1.0, 1.0, 1e16, -1e16, 3.0};
  for (int k : {8, 11}) {
    const double want = documented_sum(data, k);
    double reversed = 0.0;
    for (auto it = data.rbegin(); it != data.rend(); ++it) reversed += *it;
    ASSERT_NE(want, reversed) << "the data must tell the orders apart";
    for (int rep = 0; rep < 20; ++rep) {
      ASSERT_EQ(threads::parallel_sum(data, k), want)
          << "n_threads=" << k << ": the partial sums must be added in thread order (0, 1, ...) "
          << "after joining, whatever order the threads finish in";
    }
  }
}

TEST(HiddenParallelSum, EachThreadSumsItsContiguousChunkInIndexOrder) {
  // threads.hpp: thread t sums chunk_bounds(n, n_threads, t) into its own partial sum (from 0.0,
  // in index order); the partial sums are added in thread order. Values of very different sizes,
  // so that the rounding of the total depends on which elements are grouped together: the result
  // must be that computation bit for bit, not another split of the elements (every element once,
  // which stays within the rounding bound) such as thread t taking t, t + k, t + 2k, ...
  std::vector<double> data(1003);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] =
        std::sin(static_cast<double>(i) * 1.7 + 0.3) * std::pow(10.0, static_cast<double>(i % 9));
  for (int k : {2, 3, 5, 7, 16, 33}) {
    const std::size_t nt = static_cast<std::size_t>(k);
    const double want = documented_sum(data, k);
    double round_robin = 0.0;
    for (std::size_t t = 0; t < nt; ++t) {
      double s = 0.0;
      for (std::size_t i = t; i < data.size(); i += nt) s += data[i];
      round_robin += s;
    }
    ASSERT_NE(want, round_robin) << "n_threads=" << k << ": the data must tell the groupings apart";
    ASSERT_NE(data.size() % nt, 0u) << "n_threads=" << k << ": the chunks must be uneven";
    for (int rep = 0; rep < 3; ++rep) {
      ASSERT_EQ(threads::parallel_sum(data, k), want)
          << "n_threads=" << k << " over " << data.size() << " values: thread t must sum its "
          << "contiguous chunk chunk_bounds(n, n_threads, t) in index order, starting from 0.0, "
          << "and the partial sums must be added in thread order";
    }
  }
}

// A page that stalls its first reader: it is mapped without access, and the SIGSEGV that the
// first read raises is answered by sleeping 100 ms, then opening the page, so the read goes on.
char* g_stall_page = nullptr;
std::size_t g_stall_size = 0;
struct sigaction g_old_segv;

void stall_then_open(int sig, siginfo_t* info, void*) {
  char* at = static_cast<char*>(info->si_addr);
  if (g_stall_page != nullptr && at >= g_stall_page && at < g_stall_page + g_stall_size) {
    const timespec pause{0, 100'000'000};
    nanosleep(&pause, nullptr);
    mprotect(g_stall_page, g_stall_size, PROT_READ | PROT_WRITE);
    return;
  }
  sigaction(sig, &g_old_segv, nullptr);  // any other fault: the usual crash, on return
}

TEST(HiddenParallelSum, PartialSumsAreAddedInThreadOrderWhenThreadZeroFinishesLast) {
  // Four chunks of one page each; thread 0's page stalls its first read for 100 ms, so thread 0
  // finishes long after threads 1..3. Partial sums 1, 1e16, -1e16, 0 give 0 in thread order
  // (1 + 1e16 rounds to 1e16) but 1 when thread 0's partial sum comes last.
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t per = page / sizeof(double);
  const int k = 4;
  void* mem = mmap(nullptr, k * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  double* data = static_cast<double*>(mem);
  std::fill(data, data + k * per, 0.0);
  data[0] = 1.0;
  data[per] = 1e16;
  data[2 * per] = -1e16;
  const double want = ((1.0 + 1e16) + -1e16) + 0.0;
  ASSERT_EQ(want, 0.0);
  struct sigaction act {};
  act.sa_sigaction = stall_then_open;
  act.sa_flags = SA_SIGINFO;
  sigemptyset(&act.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &act, &g_old_segv), 0);
  g_stall_size = page;
  g_stall_page = static_cast<char*>(mem);
  for (int rep = 0; rep < 3; ++rep) {
    ASSERT_EQ(mprotect(mem, page, PROT_NONE), 0);
    distlab::Stopwatch sw;
    const double got = threads::parallel_sum(std::span<const double>(data, k * per), k);
    EXPECT_EQ(got, want) << "the call took " << sw.elapsed_s() * 1e3
                         << " ms, thread 0 finishing last: the partial sums must be added in "
                            "thread order (0, 1, ...) after joining, not in the order the threads "
                            "finish";
  }
  g_stall_page = nullptr;
  sigaction(SIGSEGV, &g_old_segv, nullptr);
  munmap(mem, k * page);
}

TEST(HiddenProcesses, EveryChildIsReaped) {
  // After the calls no child of this process is left, not even a zombie: waitpid(-1, WNOHANG)
  // finds no child at all (ECHILD).
  (void)threads::measure_creation_cost(20);
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1)
      << "measure_creation_cost left a child process behind: waitpid for each child";
  EXPECT_EQ(errno, ECHILD);
  (void)threads::write_in_child_process(4, 8);
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1)
      << "write_in_child_process left a child process behind: wait for the child";
  EXPECT_EQ(errno, ECHILD);
}

TEST(HiddenProcesses, TheCallersOtherChildIsLeftAlone) {
  // "the parent waits for the child": for its own child, not for any child. The caller already
  // has a child of its own that has exited (a zombie, not yet reaped) when it calls; a function that
  // waits for "any child" reaps that one first and reports its exit status as the child's read.
  for (const bool creation_cost : {false, true}) {
    const pid_t other = fork();
    ASSERT_GE(other, 0) << "fork failed";
    if (other == 0) _exit(77);
    siginfo_t info{};
    ASSERT_EQ(waitid(P_PID, static_cast<id_t>(other), &info, WEXITED | WNOWAIT), 0);  // exited
    if (creation_cost) {
      const auto c = threads::measure_creation_cost(3);
      EXPECT_EQ(c.n, 3);
    } else {
      const auto p = threads::write_in_child_process(3, 42);
      EXPECT_EQ(p.writer_saw, 42) << "reported another child's exit status: wait for the pid that "
                                     "fork returned, not for any child";
      EXPECT_EQ(p.parent_saw, 3);
    }
    int status = 0;
    EXPECT_EQ(waitpid(other, &status, 0), other)
        << (creation_cost ? "measure_creation_cost" : "write_in_child_process")
        << " reaped a child it did not fork: wait for the pid that fork returned";
    if (WIFEXITED(status)) {
      EXPECT_EQ(WEXITSTATUS(status), 77);
    }
  }
}

// The children of this process right now (zombies included), over all its threads, read from
// /proc/self/task/<tid>/children; -1 where the kernel does not offer that file.
int children_now() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  bool any = false;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/children");
    if (!f) continue;
    any = true;
    for (long pid = 0; f >> pid;) ++n;
  }
  closedir(dir);
  return any ? n : -1;
}

TEST(HiddenProcesses, OneChildAtATime) {
  // "n processes, one after another": each child is forked, exits and is reaped before the next is
  // forked, so this process never has two children at once (zombies count: a child not yet
  // waitpid()ed is still a child). A watcher thread counts them while 300 are timed.
  if (children_now() < 0) GTEST_SKIP() << "/proc/self/task/*/children is not available here";
  // A std::jthread: stopped and joined however the test leaves its scope, so a function under test
  // that throws (a stub's "not implemented") is reported as a failure, not std::terminate.
  std::atomic<int> most{0};
  std::jthread watcher([&](const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      const int n = children_now();
      if (n > most.load()) most.store(n);
    }
  });
  (void)threads::measure_creation_cost(300);
  watcher.request_stop();
  watcher.join();
  EXPECT_LE(most.load(), 1) << "measure_creation_cost had " << most.load()
                            << " children at once: fork, _exit and waitpid one process after "
                               "another";
}

// The number of threads of this process now (/proc/self/status), -1 where it cannot be read.
int threads_now() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "Threads:") {
      int n = -1;
      f >> n;
      return n;
    }
    std::getline(f, key);
  }
  return -1;
}

TEST(HiddenTrajectories, ComputedOnNWorkers) {
  // "computed on n_workers (use parallel_for)": while 2000 trajectories of 1000 steps are
  // computed with 4 workers, this process has 4 threads more than before (a watcher counts them).
  const int before = threads_now();
  if (before < 0) GTEST_SKIP() << "/proc/self/status is not available here";
  threads::OdeConfig cfg;
  cfg.n_trajectories = 2000;
  cfg.steps = 1000;
  std::atomic<int> most{0};
  std::jthread watcher([&](const std::stop_token& stop) {  // stopped and joined on a throw too
    while (!stop.stop_requested()) most.store(std::max(most.load(), threads_now()));
  });
  const auto got = threads::generate_trajectories(cfg, 4);
  watcher.request_stop();
  watcher.join();
  ASSERT_EQ(got.size(), cfg.n_trajectories * static_cast<std::size_t>(cfg.steps + 1));
  EXPECT_GE(most.load() - (before + 1), 4)
      << "at most " << most.load() - (before + 1) << " threads worked on the trajectories; with 4 "
      << "workers, parallel_for's pool has 4";
}

TEST(HiddenTrajectories, FewerThanOneWorkerThrowsInvalidArgument) {
  // threads.hpp: "n_workers < 1 throws std::invalid_argument." Not one worker in its place: 0 and
  // -3 workers are errors of the caller, whatever the number of trajectories.
  threads::OdeConfig cfg;
  cfg.n_trajectories = 3;
  cfg.steps = 5;
  for (int workers : {0, -3}) {
    EXPECT_THROW(threads::generate_trajectories(cfg, workers), std::invalid_argument)
        << "n_workers = " << workers << " must throw std::invalid_argument, not run on one worker";
  }
  EXPECT_EQ(threads::generate_trajectories(cfg, 1).size(), 18u) << "n_workers = 1 is valid";
  cfg.n_trajectories = 0;  // no work at all: the worker count is still checked
  for (int workers : {0, -3}) {
    EXPECT_THROW(threads::generate_trajectories(cfg, workers), std::invalid_argument)
        << "n_workers = " << workers << " with 0 trajectories must throw std::invalid_argument";
  }
  EXPECT_TRUE(threads::generate_trajectories(cfg, 2).empty())
      << "0 trajectories on 2 workers is valid and gives an empty data set";
}

// A thread that wakes every 30 us for as long as it lives: each wake-up preempts whichever worker
// runs, at a random point of what it does, so interleavings that need a worker stopped between two
// of its steps happen even where the test gets a single CPU.
class Interrupter {
 public:
  Interrupter()
      : thread_([this] {
          while (!done_.load(std::memory_order_relaxed)) {
            timespec pause{0, 30000};
            nanosleep(&pause, nullptr);
          }
        }) {}
  Interrupter(const Interrupter&) = delete;
  Interrupter& operator=(const Interrupter&) = delete;
  ~Interrupter() {
    done_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

TEST(HiddenTrajectories, RowIIsItemIWhileWorkersRace) {
  // "row i written by simulate_trajectory(config, i, ...)": with thousands of tiny trajectories
  // (2 values each) the workers claim items concurrently, so the order in which items START is
  // not their index order. Data written in any order other than row i = item i differs from
  // one worker's, bit for bit. Repeated with 2, 3, 4 and 8 workers for about a second.
  threads::OdeConfig cfg;
  cfg.n_trajectories = 3000;
  cfg.steps = 1;
  cfg.seed = 2024;
  const auto ref = threads::generate_trajectories(cfg, 1);
  ASSERT_EQ(ref.size(), 6000u);
  for (std::size_t i = 0; i < cfg.n_trajectories; ++i) {
    ASSERT_EQ(ref[2 * i], threads::initial_state(cfg, i)) << "row " << i << " starts at x0";
  }
  const Interrupter interrupter;
  const distlab::Stopwatch sw;
  int runs = 0;
  while (sw.elapsed_s() < 1.0 || runs < 8) {
    for (int w : {2, 3, 4, 8}) {
      ++runs;
      const auto got = threads::generate_trajectories(cfg, w);
      ASSERT_EQ(got.size(), ref.size()) << w << " workers";
      for (std::size_t i = 0; i < cfg.n_trajectories; ++i) {
        ASSERT_TRUE(got[2 * i] == ref[2 * i] && got[2 * i + 1] == ref[2 * i + 1])
            << "run " << runs << ", " << w << " workers: row " << i << " is (" << got[2 * i] << ", "
            << got[2 * i + 1] << "), expected item " << i << "'s (" << ref[2 * i] << ", "
            << ref[2 * i + 1] << "); row i must hold item i whichever worker computes it and "
            << "whenever";
      }
    }
  }
}

TEST(HiddenTrajectories, RowIHoldsItemIWhenItemsAreTiny) {
  // Trajectories of 0 steps (one value each: initial_state(i)) take nanoseconds, so the workers
  // claim items all the time and in any interleaving: row i must still hold item i, whichever
  // worker computed it and whenever (a row chosen by arrival, not by i, shows here).
  threads::OdeConfig cfg;
  cfg.n_trajectories = std::size_t{1} << 19;
  cfg.steps = 0;
  cfg.seed = 7;
  for (int rep = 0; rep < 3; ++rep) {
    const auto got = threads::generate_trajectories(cfg, 8);
    ASSERT_EQ(got.size(), cfg.n_trajectories);
    std::size_t wrong = 0, first_wrong = 0;
    for (std::size_t i = 0; i < cfg.n_trajectories; ++i) {
      if (got[i] != threads::initial_state(cfg, i) && wrong++ == 0) first_wrong = i;
    }
    ASSERT_EQ(wrong, 0u) << wrong << " of " << cfg.n_trajectories << " rows do not hold their own "
                         << "item's trajectory (the first: row " << first_wrong
                         << "): row i is written by simulate_trajectory(config, i, ...)";
  }
}

// A child that calls exit() instead of _exit() runs the parent's exit handlers (and flushes the
// stdio buffers it copied): one handler, registered once, writes a byte to a pipe when it runs in
// a process other than this one.
int g_exit_pipe = -1;
pid_t g_test_pid = 0;
void mark_exit_in_child() {
  if (getpid() != g_test_pid && g_exit_pipe >= 0) {
    const char x = 'x';
    (void)!write(g_exit_pipe, &x, 1);
  }
}

TEST(HiddenProcesses, ChildrenLeaveAtOnceWithoutTheParentsExitHandlers) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  g_test_pid = getpid();
  g_exit_pipe = fds[1];
  static const bool registered = std::atexit(mark_exit_in_child) == 0;
  ASSERT_TRUE(registered);
  (void)threads::measure_creation_cost(5);
  (void)threads::write_in_child_process(4, 8);
  g_exit_pipe = -1;
  close(fds[1]);
  char buf[64];
  const ssize_t got = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  EXPECT_LE(got, 0) << got
                    << " child process(es) ran the parent's exit handlers: the child "
                       "must leave with _exit(0) at once (exit() runs atexit handlers and "
                       "flushes the stdio buffers it copied from the parent)";
}

TEST(HiddenProcesses, ThreadAndProcessTimesAreDisjointPartsOfTheCall) {
  // "n threads and n processes, one after another": the two totals time two disjoint stretches of
  // one call, so together they never exceed the wall time of the whole call (measured around it,
  // same steady clock). A process total that kept counting from the start of the threads holds
  // thread_s twice; 200 threads take milliseconds, far above the clock's overhead.
  for (int rep = 0; rep < 5; ++rep) {
    distlab::Stopwatch wall;
    const auto c = threads::measure_creation_cost(200);
    const double call_s = wall.elapsed_s();
    ASSERT_GT(c.thread_s, 0.0);
    ASSERT_GT(c.process_s, 0.0);
    EXPECT_LE(c.thread_s + c.process_s, call_s + 1e-4)
        << "thread_s " << c.thread_s * 1e3 << " ms + process_s " << c.process_s * 1e3
        << " ms exceed the " << call_s * 1e3 << " ms the whole call took: each total must time "
        << "only its own loop (restart the clock between the threads and the processes)";
    // The other side: both are TOTALS of n creations, so together they cover nearly all of the
    // call (only the clock restarts lie outside them); a per-creation average covers 1/n of it.
    EXPECT_GE(c.thread_s + c.process_s, 0.5 * call_s)
        << "thread_s " << c.thread_s * 1e3 << " ms + process_s " << c.process_s * 1e3
        << " ms cover less than half of the " << call_s * 1e3 << " ms the call took: each is "
        << "the total of n creations, not an average";
  }
}

TEST(HiddenParallelMap, ResultsInInputOrderWhenLaterItemsFinishFirst) {
  // Item i sleeps (n - i) x 8 ms: with 4 workers the items finish roughly in reverse order.
  std::vector<double> xs(12);
  std::iota(xs.begin(), xs.end(), 1.0);
  const auto ys = threads::parallel_map(
      xs,
      [&](double x) {
        std::this_thread::sleep_for(std::chrono::milliseconds(8 * (13 - static_cast<int>(x))));
        return 10 * x;
      },
      4);
  ASSERT_EQ(ys.size(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(ys[i], 10 * xs[i]) << "index " << i
                                 << ": out[i] must be fn(inputs[i]) whatever "
                                    "order the items finish in";
  }
}

// How many tasks the current thread has run (a fresh thread starts at 0, even when the system
// hands it the id of a thread that was joined before).
thread_local int g_tasks_on_this_thread = 0;

TEST(HiddenStartJoin, EveryTaskOnItsOwnThread) {
  // run_parallel and run_sequential: "Runs every task on its own std::thread": no thread runs two
  // of the tasks, and none runs on the caller.
  for (bool parallel : {true, false}) {
    std::atomic<int> reused{0}, on_caller{0};
    const std::thread::id caller = std::this_thread::get_id();
    std::vector<threads::Task> tasks(5, [&] {
      if (++g_tasks_on_this_thread > 1) ++reused;
      if (std::this_thread::get_id() == caller) ++on_caller;
    });
    g_tasks_on_this_thread = 0;
    if (parallel) {
      threads::run_parallel(tasks);
    } else {
      threads::run_sequential(tasks);
    }
    const char* fn = parallel ? "run_parallel" : "run_sequential";
    EXPECT_EQ(reused.load(), 0) << fn
                                << ": a thread ran several tasks; each task gets its own "
                                   "std::thread";
    EXPECT_EQ(on_caller.load(), 0) << fn << ": a task ran on the calling thread";
  }
}

TEST(HiddenParallelFor, ThePoolsThreadsRunTheItemsNotTheCaller) {
  // "on a pool of n_workers std::threads": every body(i) runs on a worker thread, also with one
  // worker, and at most n_workers distinct threads run them.
  for (int workers : {1, 2, 3}) {
    std::mutex mu;
    std::set<std::thread::id> ids;
    threads::parallel_for(40, workers, [&](std::size_t) {
      std::this_thread::sleep_for(1ms);
      std::lock_guard<std::mutex> g(mu);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u)
        << workers << " worker(s): an item ran on the calling thread; the pool's threads run them";
    EXPECT_LE(ids.size(), static_cast<std::size_t>(workers)) << workers << " worker(s)";
  }
}

TEST(HiddenParallelFor, TheFirstThrownNotTheLowestItemIsRethrown) {
  // Item 0 fails late, item 3 at once: the first exception thrown is item 3's, and that one
  // reaches the caller (not the lowest failing index).
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int> started{0};
    try {
      threads::parallel_for(4, 4, [&](std::size_t i) {
        ++started;
        distlab::Stopwatch wait;
        while (started.load() < 4 && wait.elapsed_s() < 5.0) std::this_thread::yield();
        if (i == 3) throw std::logic_error("item 3 failed first");
        std::this_thread::sleep_for(80ms);
        if (i == 0) throw std::runtime_error("item 0 failed later");
      });
      ADD_FAILURE() << "parallel_for returned although items threw";
    } catch (const std::logic_error& e) {
      EXPECT_STREQ(e.what(), "item 3 failed first");
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rethrew '" << e.what() << "', not the first exception thrown (item 3's)";
    }
  }
}

TEST(HiddenParallelFor, TheFirstOfSeveralDifferentFailuresIsRethrown) {
  // Four items run at once on four workers (each waits until all four have started). Item 0
  // throws first; items 1..3, already running, throw three other kinds of exception 80 ms later.
  // The caller must get item 0's exception, of its own type.
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int> started{0};
    auto all_started = [&] {
      ++started;
      distlab::Stopwatch wait;
      while (started.load() < 4 && wait.elapsed_s() < 5.0) std::this_thread::yield();
    };
    try {
      threads::parallel_for(4, 4, [&](std::size_t i) {
        all_started();
        if (i == 0) throw std::runtime_error("item 0 failed first");
        std::this_thread::sleep_for(80ms);
        if (i == 1) throw std::logic_error("item 1 failed later");
        if (i == 2) throw 2;
        throw std::string("item 3 failed later");
      });
      ADD_FAILURE() << "no exception reached the caller";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "item 0 failed first");
    } catch (...) {
      ADD_FAILURE() << "the caller got a later failure, not the first one (item 0's "
                       "std::runtime_error): keep the first exception_ptr, never overwrite it";
    }
    ASSERT_EQ(started.load(), 4);
  }
}

TEST(HiddenParallelFor, TheFirstFailureIsKeptWhileItIsCaptured) {
  // As above, item 0 fails first and items 1..3 fail 80 ms later, but now capturing an exception
  // (std::current_exception) takes 200 ms (the replacement at the top of this file), so the later
  // failures arrive while the first one is still being stored. A check of the slot and a store
  // that are not one critical section (under the mutex) let a later failure see the slot empty
  // and overwrite item 0's exception.
#if !defined(DISTLAB_SLOW_CAPTURE)
  GTEST_SKIP() << "needs libstdc++ (std::current_exception is slowed down by replacing it)";
#else
  struct SlowCapture {  // on for one call, off again however the call ends
    SlowCapture() { g_slow_capture.store(true); }
    ~SlowCapture() { g_slow_capture.store(false); }
  };
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int> started{0};
    try {
      SlowCapture slow;
      threads::parallel_for(4, 4, [&](std::size_t i) {
        ++started;
        distlab::Stopwatch wait;
        while (started.load() < 4 && wait.elapsed_s() < 5.0) std::this_thread::yield();
        if (i == 0) throw std::runtime_error("item 0 failed first");
        std::this_thread::sleep_for(80ms);
        throw std::logic_error("item " + std::to_string(i) + " failed 80 ms later");
      });
      ADD_FAILURE() << "no exception reached the caller";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "item 0 failed first");
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the caller got '" << e.what() << "', not the first failure (item 0's): "
                    << "a later failure overwrote it while it was being stored; check that the "
                       "error slot is empty and store into it under one lock";
    }
    ASSERT_EQ(started.load(), 4);
  }
#endif
}

struct NotAStdException {
  int code;
};

TEST(HiddenParallelFor, ExceptionsNotDerivedFromStdExceptionReachTheCaller) {
  try {
    threads::parallel_for(50, 3, [](std::size_t i) {
      if (i == 7) throw NotAStdException{7};
    });
    ADD_FAILURE() << "the exception thrown by item 7 did not reach the caller";
  } catch (const NotAStdException& e) {
    EXPECT_EQ(e.code, 7);
  }
  try {
    threads::parallel_for(5, 2, [](std::size_t i) {
      if (i == 3) throw 3;
    });
    ADD_FAILURE() << "the int thrown by item 3 did not reach the caller";
  } catch (int code) {
    EXPECT_EQ(code, 3);
  }
}

TEST(HiddenParallelMap, ExceptionsNotDerivedFromStdExceptionReachTheCaller) {
  std::vector<double> xs(20, 1.0);
  xs[13] = -1.0;
  try {
    (void)threads::parallel_map(
        xs,
        [](double x) -> double {
          if (x < 0) throw NotAStdException{13};
          return x;
        },
        4);
    ADD_FAILURE() << "the exception thrown by fn did not reach the caller";
  } catch (const NotAStdException& e) {
    EXPECT_EQ(e.code, 13);
  }
}

TEST(HiddenParallelMap, BadWorkerCountThrowsEvenForEmptyInput) {
  // threads.hpp: n_workers < 1 throws std::invalid_argument, even when inputs is empty (the pool's
  // size is checked whatever the amount of work).
  const std::vector<double> none;
  const std::vector<double> three = {1.0, 2.0, 3.0};
  for (int w : {0, -1, -7}) {
    EXPECT_THROW((void)threads::parallel_map(
                     none, [](double x) { return x; }, w),
                 std::invalid_argument)
        << "parallel_map of an empty input with n_workers=" << w;
    EXPECT_THROW((void)threads::parallel_map(
                     three, [](double x) { return x; }, w),
                 std::invalid_argument)
        << "parallel_map of 3 inputs with n_workers=" << w;
  }
  EXPECT_TRUE(threads::parallel_map(
                  none, [](double x) { return x; }, 1)
                  .empty())
      << "n_workers=1 is valid, so an empty input gives an empty output";
}

TEST(HiddenParallelFor, IdleWorkersTakeTheNextItemSoTheLoadBalances) {
  // Item 0 sleeps 600 ms, the 59 others 20 ms each. Workers that take the next unclaimed index
  // share the short items among the three other workers (about 400 ms), so the worker holding
  // item 0 runs few others; a fixed split (chunks or strides) gives it about 14 more.
  std::mutex mu;
  std::vector<std::thread::id> who(60);
  distlab::Stopwatch sw;
  threads::parallel_for(60, 4, [&](std::size_t i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      who[i] = std::this_thread::get_id();
    }
    std::this_thread::sleep_for(i == 0 ? 600ms : 20ms);
  });
  const double elapsed = sw.elapsed_s();
  const auto with_item_0 = std::count(who.begin() + 1, who.end(), who[0]);
  EXPECT_LE(with_item_0, 4) << "the worker that held the 600 ms item 0 also ran " << with_item_0
                            << " of the 59 short items: each worker must take the next unclaimed "
                               "index when it is free, not a fixed share of the items";
  EXPECT_LT(elapsed, 0.6 + 0.2) << "60 items on 4 workers took " << elapsed * 1e3 << " ms";
}

TEST(HiddenParallelFor, EveryIndexOnceUnderHeavyContention) {
  // Items that do nothing, so the workers spend their time claiming indices: a claim that is not
  // one atomic read-modify-write (a load, then a store) hands some index to two workers, or
  // skips one, often enough to show in millions of claims.
  const std::size_t n = 1u << 22;
  std::vector<std::uint8_t> hits(n);
  const Interrupter interrupter;
  for (int rep = 0; rep < 4; ++rep) {
    std::fill(hits.begin(), hits.end(), std::uint8_t{0});
    threads::parallel_for(n, 8, [&](std::size_t i) {
      std::atomic_ref<std::uint8_t>(hits[i]).fetch_add(1, std::memory_order_relaxed);
    });
    const auto once = std::count(hits.begin(), hits.end(), std::uint8_t{1});
    ASSERT_EQ(static_cast<std::size_t>(once), n)
        << n - static_cast<std::size_t>(once)
        << " indices ran twice or never: claim each index with one atomic fetch_add";
  }
}

#if defined(DISTLAB_COUNT_THREADS)
TEST(HiddenProcesses, ThreadsAreStartedAndJoinedOneAtATime) {
  // "Times n threads (each started and joined in turn, doing nothing)": thread i is joined before
  // thread i + 1 is started, so at most one of the timed threads is alive at a time. The counting
  // pthread_create above keeps each started thread alive 5 ms, so threads started together (all
  // started, then all joined) overlap.
  const int n = 20;
  g_started_threads.store(0);
  g_count_threads.store(true);
  std::thread([] {}).join();  // does this program's pthread_create see std::thread's starts?
  g_count_threads.store(false);
  if (g_started_threads.load() != 1) GTEST_SKIP() << "pthread_create cannot be counted here";
  g_started_threads.store(0);
  g_live_threads.store(0);
  g_most_live_threads.store(0);
  g_count_threads.store(true);
  const threads::CreationCost c = threads::measure_creation_cost(n);
  g_count_threads.store(false);
  ASSERT_EQ(g_started_threads.load(), n)
      << "measure_creation_cost(" << n << ") must start n std::threads, each started and joined";
  EXPECT_EQ(g_live_threads.load(), 0) << "every timed thread must have finished (joined)";
  EXPECT_EQ(g_most_live_threads.load(), 1)
      << g_most_live_threads.load() << " of the timed threads were alive at once: start one "
      << "thread, join it, then start the next (each started and joined in turn)";
  EXPECT_GE(c.thread_s, n * 5e-3) << "each timed thread lived 5 ms here";
}
#endif

TEST(HiddenParallelFor, TwoCallsAtOnceEachCallEveryIndexOfTheirOwnRangeOnce) {
  // "Calls body(i) once for every i in [0, n_items)": two parallel_for calls running at the same
  // time (from two threads) are independent: each calls its own body once for every index of its
  // own range. Every body waits until both calls have begun, so the two pools run together.
  const std::size_t sizes[2] = {120, 90};
  std::vector<std::atomic<int>> counts[2] = {std::vector<std::atomic<int>>(sizes[0]),
                                             std::vector<std::atomic<int>>(sizes[1])};
  std::atomic<bool> begun[2] = {false, false};
  std::atomic<bool> gave_up{false};
  std::exception_ptr errors[2];
  auto call = [&](int k) {
    const auto ku = static_cast<std::size_t>(k);
    try {
      threads::parallel_for(sizes[ku], 3, [&, ku](std::size_t i) {
        begun[ku].store(true);
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (!(begun[0].load() && begun[1].load())) {
          if (std::chrono::steady_clock::now() > deadline) {
            gave_up.store(true);
            break;
          }
          std::this_thread::sleep_for(100us);
        }
        if (i < sizes[ku]) counts[ku][i].fetch_add(1);
        std::this_thread::sleep_for(200us);
      });
    } catch (...) {
      errors[ku] = std::current_exception();
    }
  };
  std::thread a(call, 0), b(call, 1);
  a.join();
  b.join();
  ASSERT_FALSE(gave_up.load()) << "the two calls never ran at the same time (waited 10 s)";
  for (int k = 0; k < 2; ++k) {
    const auto ku = static_cast<std::size_t>(k);
    EXPECT_FALSE(errors[ku]) << "call " << k << " threw";
    int wrong = 0;
    std::size_t first_wrong = 0;
    for (std::size_t i = 0; i < sizes[ku]; ++i) {
      if (counts[ku][i].load() != 1 && wrong++ == 0) first_wrong = i;
    }
    EXPECT_EQ(wrong, 0) << "call " << k << " (" << sizes[ku] << " items, running at the same time "
                        << "as another parallel_for): " << wrong << " indices were not called "
                        << "exactly once (index " << first_wrong << " " << counts[ku][first_wrong]
                        << " times); each call needs its own counter, not one shared by all calls";
  }
}
