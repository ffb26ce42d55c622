// MUTANT pool_keeps_going_after_throw: parallel_for: after an item throws, the workers keep taking new items until every index is claimed (only the first exception is kept).
// 01_threads: see threads.hpp for what each function must do.
#include "threads.hpp"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "distlab/timing.hpp"
#include "distlab/todo.hpp"

namespace threads {

// ---------------------------------------------------------------------------------------------
// 1. Start and join.

void run_parallel(const std::vector<Task>& tasks) {
  // BEGIN SOLUTION: start one std::thread per task (all of them), then join them all
  std::vector<std::thread> workers;
  workers.reserve(tasks.size());
  for (const Task& task : tasks) workers.emplace_back(task);
  for (std::thread& w : workers) w.join();
  // END SOLUTION
}

void run_sequential(const std::vector<Task>& tasks) {
  // BEGIN SOLUTION: for each task: start a std::thread running it and join it before the next
  for (const Task& task : tasks) {
    std::thread worker(task);
    worker.join();
  }
  // END SOLUTION
}

// ---------------------------------------------------------------------------------------------
// 2. Chunked partition and parallel sum.

std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, int parts, int index) {
  if (parts < 1 || index < 0 || index >= parts) {
    throw std::invalid_argument("chunk_bounds: need parts >= 1 and 0 <= index < parts, got parts=" +
                                std::to_string(parts) + " index=" + std::to_string(index));
  }
  std::pair<std::size_t, std::size_t> range{0, 0};
  // BEGIN SOLUTION: base = n / parts, the first n % parts chunks get one extra item
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = n / p;
  const std::size_t extra = n % p;
  range.first = i * base + std::min(i, extra);
  range.second = range.first + base + (i < extra ? 1 : 0);
  // END SOLUTION
  return range;
}

double parallel_sum(std::span<const double> data, int n_threads) {
  if (n_threads < 1) {
    throw std::invalid_argument("parallel_sum: n_threads must be >= 1, got " +
                                std::to_string(n_threads));
  }
  double total = 0.0;
  // BEGIN SOLUTION: one partial sum per thread over chunk_bounds(data.size(), n_threads, t); join; add the partials in order
  std::vector<double> partial(static_cast<std::size_t>(n_threads), 0.0);
  std::vector<std::thread> workers;
  workers.reserve(partial.size());
  for (int t = 0; t < n_threads; ++t) {
    workers.emplace_back([&, t] {
      const auto [begin, end] = chunk_bounds(data.size(), n_threads, t);
      double s = 0.0;  // a local accumulator: no sharing while summing
      for (std::size_t k = begin; k < end; ++k) s += data[k];
      partial[static_cast<std::size_t>(t)] = s;
    });
  }
  for (std::thread& w : workers) w.join();
  for (double s : partial) total += s;
  // END SOLUTION
  return total;
}

// ---------------------------------------------------------------------------------------------
// 3. Threads versus processes.

CreationCost measure_creation_cost(int n) {
  if (n < 1) throw std::invalid_argument("measure_creation_cost: n must be >= 1");
  CreationCost cost;
  cost.n = n;
  // BEGIN SOLUTION: time n x (std::thread start + join), then n x (fork, child _exit(0), parent waitpid)
  distlab::Stopwatch sw;
  for (int i = 0; i < n; ++i) {
    std::thread t([] {});
    t.join();
  }
  cost.thread_s = sw.elapsed_s();

  sw.restart();
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
    }
    if (pid == 0) _exit(0);  // the child: only async-signal-safe calls after fork
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error("measure_creation_cost: a child process did not exit cleanly");
    }
  }
  cost.process_s = sw.elapsed_s();
  // END SOLUTION
  return cost;
}

WriteVisibility write_in_child_process(int initial, int written) {
  if (written < 0 || written > 255) {
    throw std::invalid_argument("write_in_child_process: written must be in [0, 255] (it travels "
                                "back as the child's exit status), got " +
                                std::to_string(written));
  }
  WriteVisibility seen;
  // BEGIN SOLUTION: fork; the child writes, reads back and _exit()s with what it read; the parent waitpid()s, then reads its own copy
  volatile int value = initial;  // volatile: really read memory, as a student would expect
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    value = written;
    _exit(value);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
    throw std::runtime_error("write_in_child_process: the child did not exit normally");
  }
  seen.writer_saw = WEXITSTATUS(status);
  seen.parent_saw = value;
  // END SOLUTION
  return seen;
}

WriteVisibility write_in_thread(int initial, int written) {
  WriteVisibility seen;
  // BEGIN SOLUTION: a std::thread writes the parent's variable and reads it back; join; the parent reads it
  int value = initial;
  std::thread writer([&] {
    value = written;
    seen.writer_saw = value;
  });
  writer.join();  // join makes the thread's writes visible to us (happens-before)
  seen.parent_saw = value;
  // END SOLUTION
  return seen;
}

// ---------------------------------------------------------------------------------------------
// 4. Worker pool and parallel map.

void parallel_for(std::size_t n_items, int n_workers,
                  const std::function<void(std::size_t)>& body) {
  if (n_workers < 1) {
    throw std::invalid_argument("parallel_for: n_workers must be >= 1, got " +
                                std::to_string(n_workers));
  }
  if (n_items == 0) return;
  // BEGIN SOLUTION: min(n_workers, n_items) threads take indices from a std::atomic counter; keep the first exception, stop, join, rethrow
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto worker = [&] {
    while (!failed.load(std::memory_order_relaxed)) {
      const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_items) return;
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    }
  };
  const std::size_t n_threads = std::min(static_cast<std::size_t>(n_workers), n_items);
  std::vector<std::thread> pool;
  pool.reserve(n_threads);
  for (std::size_t t = 0; t < n_threads; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
  // END SOLUTION
}

std::vector<double> parallel_map(std::span<const double> inputs,
                                 const std::function<double(double)>& fn, int n_workers) {
  std::vector<double> out(inputs.size());
  // BEGIN SOLUTION: parallel_for over the indices; item i writes out[i] = fn(inputs[i])
  parallel_for(inputs.size(), n_workers, [&](std::size_t i) { out[i] = fn(inputs[i]); });
  // END SOLUTION
  return out;
}

// ---------------------------------------------------------------------------------------------
// 5. Data generation.

double ode_rhs(double x, double t) { return -x * t - x * x + std::sin(x); }

double rk4_step(double x, double t, double dt) {
  const double k1 = ode_rhs(x, t);
  const double k2 = ode_rhs(x + 0.5 * dt * k1, t + 0.5 * dt);
  const double k3 = ode_rhs(x + 0.5 * dt * k2, t + 0.5 * dt);
  const double k4 = ode_rhs(x + dt * k3, t + dt);
  return x + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4);
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

double initial_state(const OdeConfig& config, std::size_t item) {
  // A generator per item, seeded from (seed, item) alone; 53 random bits -> a double in [0, 1).
  std::mt19937_64 gen(splitmix64(splitmix64(config.seed) ^ static_cast<std::uint64_t>(item)));
  const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;
  return config.x0_lo + (config.x0_hi - config.x0_lo) * u;
}

void simulate_trajectory(const OdeConfig& config, std::size_t item, std::span<double> row) {
  const auto len = static_cast<std::size_t>(config.steps) + 1;
  if (row.size() != len) {
    throw std::invalid_argument("simulate_trajectory: row holds " + std::to_string(row.size()) +
                                " values, need steps + 1 = " + std::to_string(len));
  }
  double x = initial_state(config, item);
  row[0] = x;
  for (int s = 0; s < config.steps; ++s) {
    x = rk4_step(x, s * config.dt, config.dt);
    row[static_cast<std::size_t>(s) + 1] = x;
  }
}

std::vector<double> generate_trajectories(const OdeConfig& config, int n_workers) {
  if (config.steps < 0) throw std::invalid_argument("generate_trajectories: steps must be >= 0");
  const auto len = static_cast<std::size_t>(config.steps) + 1;
  std::vector<double> data(config.n_trajectories * len);
  // BEGIN SOLUTION: parallel_for over the trajectories; item i fills row i (a span of len values) with simulate_trajectory
  parallel_for(config.n_trajectories, n_workers, [&](std::size_t i) {
    simulate_trajectory(config, i, std::span<double>(data).subspan(i * len, len));
  });
  // END SOLUTION
  return data;
}

// ---------------------------------------------------------------------------------------------
// 6. CPU-bound and IO-bound work.

double cpu_bound_work(long iterations) {
  double x = 0.5;
  for (long i = 0; i < iterations; ++i) x = x * 3.9 * (1.0 - x);  // the logistic map: chaotic
  return x;
}

void io_bound_work(int milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
}

}  // namespace threads
