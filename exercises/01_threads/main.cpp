// run_01_threads: tables that show what threads cost and what they buy.
//
//   ./distlab run 01_threads                    (about 10-20 s on a laptop)
//   ./distlab run 01_threads -- --max-workers 16 --large 8000
//
// Each section calls your functions; one that still throws "not implemented" is reported as such
// and the program goes on with the next section.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "distlab/todo.hpp"
#include "threads.hpp"

namespace {

struct Flags {
  int max_workers = 8;                // speedup tables go from 1 to this many workers
  int creation_n = 200;               // threads and processes created for the cost table
  long sum_n = 10'000'000;            // elements in the parallel sum
  long cpu_iterations = 160'000'000;  // total CPU-bound iterations, split over the threads
  int io_tasks = 8;                   // IO-bound tasks (each waits io_ms)
  int io_ms = 50;
  std::size_t tiny = 64;     // trajectories in the "tiny work" table (10 steps each)
  std::size_t large = 2000;  // trajectories in the "large work" table (steps each)
  int steps = 2000;
};

using distlab::section;

std::vector<int> worker_counts(int max_workers) {
  std::vector<int> out;
  for (int p = 1; p <= max_workers; ++p) out.push_back(p);
  return out;
}

/// Least-squares fit of Amdahl's law S(p) = 1 / (f + (1 - f) / p) for the serial fraction f.
/// Rewritten as 1/S - 1/p = f (1 - 1/p): a line through the origin in the unknown f.
double amdahl_serial_fraction(const std::vector<int>& ps, const std::vector<double>& speedups) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const double a = 1.0 - 1.0 / ps[i];
    num += (1.0 / speedups[i] - 1.0 / ps[i]) * a;
    den += a * a;
  }
  return den > 0 ? num / den : 0.0;
}

void speedup_table(const char* what, const std::vector<int>& ps,
                   const std::function<double(int)>& seconds_with) {
  std::printf("  %s\n", what);
  std::printf("  %8s %12s %9s %11s\n", "workers", "time [ms]", "speedup", "efficiency");
  std::vector<double> speedups;
  double t1 = 0;
  for (int p : ps) {
    const double t = seconds_with(p);
    if (p == ps.front()) t1 = t;
    const double s = t1 / t;
    speedups.push_back(s);
    std::printf("  %8d %12.2f %9.2f %10.0f%%\n", p, t * 1e3, s, 100.0 * s / p);
  }
  // Fit only up to the core count: past it the plateau comes from the hardware, not the program.
  const int cores = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<int> fit_ps;
  std::vector<double> fit_s;
  for (std::size_t i = 0; i < ps.size() && ps[i] <= cores; ++i) {
    fit_ps.push_back(ps[i]);
    fit_s.push_back(speedups[i]);
  }
  const double f = amdahl_serial_fraction(fit_ps, fit_s);
  std::printf("  (fitted on 1..%d workers, the logical cores)\n",
              fit_ps.empty() ? 0 : fit_ps.back());
  if (f >= 1.0) {
    std::printf(
        "  Amdahl fit: f = %.2f >= 1: more workers make it slower. Starting and joining\n"
        "  threads costs more than the work; Amdahl's law (which ignores overhead) does not fit.\n",
        f);
  } else if (f > 1e-3) {
    std::printf("  Amdahl fit: serial fraction f = %.3f -> best possible speedup 1/f = %.1f\n", f,
                1.0 / f);
  } else {
    std::printf("  Amdahl fit: serial fraction f = %.4f (almost perfectly parallel)\n", f);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"01_threads: start/join, threads vs processes, worker pools, speedup and overhead"};
  Flags fl;
  app.add_option("--max-workers", fl.max_workers, "largest worker count in the tables")
      ->check(CLI::Range(1, 256));
  app.add_option("--creation-n", fl.creation_n, "threads and processes to create")
      ->check(CLI::Range(1, 100000));
  app.add_option("--sum-n", fl.sum_n, "elements in the parallel sum")
      ->check(CLI::Range(1L, 1L << 31));
  app.add_option("--cpu-iterations", fl.cpu_iterations, "CPU-bound iterations in total")
      ->check(CLI::Range(1L, 1L << 40));
  app.add_option("--io-ms", fl.io_ms, "milliseconds each IO-bound task waits")
      ->check(CLI::Range(1, 10000));
  app.add_option("--tiny", fl.tiny, "trajectories in the tiny-work table")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--large", fl.large, "trajectories in the large-work table")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--steps", fl.steps, "RK4 steps per trajectory in the large-work table")
      ->check(CLI::Range(1, 1 << 24));
  CLI11_PARSE(app, argc, argv);

  const unsigned hw = std::thread::hardware_concurrency();
  std::printf(
      "01_threads: this machine reports %u hardware threads (logical cores; with SMT two "
      "logical cores share one physical core)\n",
      hw);
  const auto ps = worker_counts(fl.max_workers);

  section("1. start all then join all, versus start and join one at a time", [&] {
    const int n = 4, ms = 100;
    std::vector<threads::Task> tasks(n, [=] { threads::io_bound_work(ms); });
    distlab::Stopwatch sw;
    threads::run_parallel(tasks);
    const double par = sw.elapsed_s();
    sw.restart();
    threads::run_sequential(tasks);
    const double seq = sw.elapsed_s();
    std::printf("  %d tasks that each sleep %d ms\n", n, ms);
    std::printf("  %-16s %10.1f ms   (about one sleep)\n", "run_parallel", par * 1e3);
    std::printf("  %-16s %10.1f ms   (about the sum of the sleeps)\n", "run_sequential", seq * 1e3);
  });

  section("2. creating threads versus processes", [&] {
    const auto c = threads::measure_creation_cost(fl.creation_n);
    std::printf("  %-10s %8s %12s %14s\n", "what", "count", "total [ms]", "each [us]");
    std::printf("  %-10s %8d %12.2f %14.1f\n", "thread", c.n, c.thread_s * 1e3,
                c.thread_s / c.n * 1e6);
    std::printf("  %-10s %8d %12.2f %14.1f\n", "process", c.n, c.process_s * 1e3,
                c.process_s / c.n * 1e6);
    std::printf(
        "  a process costs %.1f x a thread (fork copies the page tables; exit and waitpid "
        "tear them down)\n",
        c.ratio());
  });

  section("3. separate address spaces", [&] {
    const auto p = threads::write_in_child_process(1, 42);
    const auto t = threads::write_in_thread(1, 42);
    std::printf("  variable starts at 1; the writer sets it to 42\n");
    std::printf("  %-16s writer saw %3d, parent saw %3d\n", "child process", p.writer_saw,
                p.parent_saw);
    std::printf("  %-16s writer saw %3d, parent saw %3d\n", "thread", t.writer_saw, t.parent_saw);
  });

  section("4. CPU-bound versus IO-bound work split over threads (C++: no GIL, both speed up)", [&] {
    const std::vector<int> ks = {1, 2, 4, 8};
    std::printf("  %8s %16s %9s %16s %9s\n", "threads", "CPU-bound [ms]", "speedup",
                "IO-bound [ms]", "speedup");
    double cpu1 = 0, io1 = 0;
    for (int k : ks) {
      std::vector<threads::Task> cpu_tasks, io_tasks;
      std::vector<double> sink(static_cast<std::size_t>(k));
      for (int i = 0; i < k; ++i) {
        cpu_tasks.push_back([&, i] {
          sink[static_cast<std::size_t>(i)] = threads::cpu_bound_work(fl.cpu_iterations / k);
        });
      }
      // The IO-bound tasks are spread over k threads: thread i does every k-th wait.
      for (int i = 0; i < k; ++i) {
        io_tasks.push_back([&, i] {
          for (int j = i; j < fl.io_tasks; j += k) threads::io_bound_work(fl.io_ms);
        });
      }
      distlab::Stopwatch sw;
      threads::run_parallel(cpu_tasks);
      const double cpu = sw.elapsed_s();
      sw.restart();
      threads::run_parallel(io_tasks);
      const double io = sw.elapsed_s();
      if (k == 1) cpu1 = cpu, io1 = io;
      std::printf("  %8d %16.1f %9.2f %16.1f %9.2f\n", k, cpu * 1e3, cpu1 / cpu, io * 1e3,
                  io1 / io);
    }
    std::printf(
        "  CPU-bound stops improving at the number of cores; IO-bound keeps improving until\n"
        "  every wait overlaps. Python threads would show no CPU-bound speedup (the GIL).\n");
  });

  section("5. parallel sum: chunked partition", [&] {
    std::vector<double> data(static_cast<std::size_t>(fl.sum_n));
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = 1.0 / static_cast<double>(i + 1);
    const double want = std::accumulate(data.begin(), data.end(), 0.0);
    std::printf("  sum of 1/i for i = 1..%ld, sequential %.15f\n", fl.sum_n, want);
    std::printf("  %8s %12s %22s %12s\n", "threads", "time [ms]", "sum", "difference");
    for (int k : {1, 2, 4, 8, 64}) {
      distlab::Stopwatch sw;
      const double got = threads::parallel_sum(data, k);
      std::printf("  %8d %12.2f %22.15f %12.1e\n", k, sw.elapsed_s() * 1e3, got, got - want);
    }
    std::printf(
        "  memory-bound: more threads than memory channels help little; rounding differs\n"
        "  slightly because the additions happen in another order.\n");
  });

  section("6. worker pool: parallel_map", [&] {
    std::vector<double> xs = {0, 1, 2, 3, 4, 5, 6, 7};
    const auto ys = threads::parallel_map(
        xs, [](double x) { return x * x; }, 3);
    std::printf("  squares of 0..7 on 3 workers:");
    for (double y : ys) std::printf(" %g", y);
    std::printf("  (input order, whatever the schedule)\n");
    try {
      threads::parallel_map(
          xs,
          [](double x) -> double {
            if (x == 5) throw std::runtime_error("item 5 failed");
            return x;
          },
          3);
      std::printf("  an exception in item 5 was lost!\n");
    } catch (const distlab::NotImplemented&) {
      throw;
    } catch (const std::exception& e) {
      std::printf("  an exception in one item reaches the caller: \"%s\"\n", e.what());
    }
  });

  section("7. data generation in parallel: RK4 trajectories of dx/dt = -x t - x^2 + sin(x)", [&] {
    auto table = [&](const char* what, threads::OdeConfig cfg, int repeats) {
      const auto reference = threads::generate_trajectories(cfg, 1);
      bool identical = true;
      speedup_table(what, ps, [&](int p) {
        std::vector<double> out;
        const auto times =
            distlab::time_runs([&] { out = threads::generate_trajectories(cfg, p); }, repeats, 0);
        identical = identical && out == reference;
        return distlab::median(times);
      });
      std::printf("  results bit-for-bit identical for every worker count: %s\n",
                  identical ? "yes" : "NO (per-item seeding broken?)");
    };
    threads::OdeConfig tiny;
    tiny.n_trajectories = fl.tiny;
    tiny.steps = 10;
    table(
        ("tiny work: " + std::to_string(fl.tiny) + " trajectories x 10 steps (overhead dominates)")
            .c_str(),
        tiny, 15);
    threads::OdeConfig large;
    large.n_trajectories = fl.large;
    large.steps = fl.steps;
    table(("large work: " + std::to_string(fl.large) + " trajectories x " +
           std::to_string(fl.steps) + " steps")
              .c_str(),
          large, 1);
    std::printf(
        "  Past %u workers (the logical cores) more threads only add switching: "
        "oversubscription.\n",
        hw);
  });
  return 0;
}
