// 01_threads: threads and processes, start and join, creation cost, separate address spaces,
// a worker pool for a parallel map, and parallel data generation (seeded ODE trajectories).
//
// Everything here is plain C++20 (std::thread) and POSIX (fork, waitpid); no dist yet.
// Functions marked "TODO" are yours (threads.cpp); "given" ones are written for you.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace threads {

using Task = std::function<void()>;

// ---------------------------------------------------------------------------------------------
// 1. Start and join.

/// TODO. Runs every task on its own std::thread: start ALL the threads first, then join them all,
/// so the tasks overlap in time (four tasks that each sleep 150 ms take about 150 ms).
/// Tasks must not throw. Returns once every task has finished.
void run_parallel(const std::vector<Task>& tasks);

/// TODO. Runs every task on its own std::thread, but joins each thread before starting the next,
/// so no two tasks overlap (four 150 ms sleeps take about 600 ms). This is the classic mistake of
/// writing `std::thread(task).join()` inside the loop; here you write it on purpose.
void run_sequential(const std::vector<Task>& tasks);

// ---------------------------------------------------------------------------------------------
// 2. Splitting work: a chunked partition and a parallel sum.

/// TODO. The half-open range [begin, end) of chunk `index` when `n` items are split into `parts`
/// contiguous chunks whose sizes differ by at most one (the first n % parts chunks get one more).
/// Requires parts >= 1 and 0 <= index < parts (else throws std::invalid_argument). Chunks may be
/// empty when parts > n. Example: n = 10, parts = 3 -> [0,4) [4,7) [7,10).
std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, int parts, int index);

/// TODO. Sum of `data` computed by `n_threads` threads, thread t summing chunk_bounds(n, n_threads,
/// t) into its own partial sum; the partial sums are added in thread order after joining.
/// Any n_threads >= 1 works, including more threads than elements (else std::invalid_argument).
/// The result equals the sequential sum up to rounding: |got - exact| <= n * eps * sum |x_i|.
double parallel_sum(std::span<const double> data, int n_threads);

// ---------------------------------------------------------------------------------------------
// 3. Threads versus processes.

/// Seconds spent creating and finishing `n` threads and `n` processes, one after another.
struct CreationCost {
  int n = 0;
  double thread_s = 0;   // total: n x (std::thread start + join)
  double process_s = 0;  // total: n x (fork + child _exit(0) + waitpid)
  double ratio() const { return thread_s > 0 ? process_s / thread_s : 0.0; }
};

/// TODO. Times n threads (each started and joined in turn, doing nothing) and n processes (each
/// fork()ed; the child calls _exit(0) at once; the parent waitpid()s for it). Throws
/// std::runtime_error if fork fails or a child does not exit with status 0. n >= 1.
CreationCost measure_creation_cost(int n);

/// What the writer and the parent each saw after the writer changed a shared-looking variable.
struct WriteVisibility {
  int writer_saw = 0;  // the value the writer (child process or thread) read back after writing
  int parent_saw = 0;  // the value the parent read after the writer finished
};

/// TODO. A local int holds `initial`. fork(): the child sets it to `written`, reads it back and
/// reports what it read as its exit status (so 0 <= written <= 255); the parent waits for the
/// child, then reads its own copy. Returns {what the child read, what the parent read}: the child's
/// write is invisible to the parent, because a process has its own address space.
/// Throws std::invalid_argument when written is outside [0, 255], std::runtime_error when fork fails.
WriteVisibility write_in_child_process(int initial, int written);

/// TODO. The same with a std::thread instead of a process: the thread writes `written` to the
/// parent's variable and reads it back; after join the parent reads it. Threads share memory, so
/// the parent sees the write.
WriteVisibility write_in_thread(int initial, int written);

// ---------------------------------------------------------------------------------------------
// 4. A worker pool and a parallel map.

/// TODO. Calls body(i) once for every i in [0, n_items) on a pool of n_workers std::threads
/// (at most n_workers threads, never one thread per item): each worker repeatedly takes the next
/// unclaimed index from a shared std::atomic counter until none is left. If body throws, the
/// workers stop taking new items, all threads are joined, and the first exception is rethrown to
/// the caller (std::exception_ptr). n_items == 0 returns at once; n_workers < 1 throws
/// std::invalid_argument; n_workers > n_items is fine. (Counts of 2^31 items and more are not
/// graded: a test cannot run that many calls in its time.)
void parallel_for(std::size_t n_items, int n_workers, const std::function<void(std::size_t)>& body);

/// TODO. out[i] = fn(inputs[i]) computed on a pool of n_workers (use parallel_for). Results are in
/// input order whatever the schedule; an exception thrown by fn reaches the caller. n_workers < 1
/// throws std::invalid_argument, even when inputs is empty.
std::vector<double> parallel_map(std::span<const double> inputs,
                                 const std::function<double(double)>& fn, int n_workers);

// ---------------------------------------------------------------------------------------------
// 5. Data generation in parallel: trajectories of dx/dt = -x t - x^2 + sin(x) by RK4.

struct OdeConfig {
  std::size_t n_trajectories = 256;  // how many initial states
  int steps = 200;                   // RK4 steps per trajectory (each row has steps + 1 values)
  double dt = 0.01;                  // step size
  std::uint64_t seed = 42;           // one seed for the whole data set
  double x0_lo = 0.0;                // initial states are uniform in [x0_lo, x0_hi); x = 0 is a
  double x0_hi = 3.0;                // fixed point and x > 0 stays bounded, while a negative
                                     // start can run off to -infinity in finite time (x' ~ -x^2)
};

/// Given. The right-hand side f(x, t) = -x t - x^2 + sin(x).
double ode_rhs(double x, double t);

/// Given. One classical Runge-Kutta (RK4) step from (x, t) with step dt.
double rk4_step(double x, double t, double dt);

/// Given. The SplitMix64 mixer: a bijection on 64-bit integers that scrambles its input well.
std::uint64_t splitmix64(std::uint64_t x);

/// Given. Initial state of trajectory `item`: drawn from a generator seeded with a mix of
/// (seed, item) only. Per-item seeding is what makes the data set identical for any number of
/// workers and any schedule: item 17 gets the same x0 whoever computes it, and whenever.
double initial_state(const OdeConfig& config, std::size_t item);

/// Given. Writes the trajectory of `item` (steps + 1 values, starting at initial_state(item), t=0)
/// into `row`, which must hold config.steps + 1 values.
void simulate_trajectory(const OdeConfig& config, std::size_t item, std::span<double> row);

/// TODO. All trajectories, row-major: n_trajectories rows of (steps + 1) values, row i written by
/// simulate_trajectory(config, i, ...), computed on n_workers (use parallel_for). The result must
/// be bit-for-bit identical for every n_workers. n_workers < 1 throws std::invalid_argument.
std::vector<double> generate_trajectories(const OdeConfig& config, int n_workers);

// ---------------------------------------------------------------------------------------------
// 6. CPU-bound and IO-bound work (given; the program times them with 1..8 threads).

/// Given. Pure computation for about `iterations` x a few nanoseconds; returns a value that
/// depends on every iteration so the compiler cannot drop the loop.
double cpu_bound_work(long iterations);

/// Given. Waits like a program blocked on a disk or the network (sleeps `milliseconds`).
void io_bound_work(int milliseconds);

}  // namespace threads
