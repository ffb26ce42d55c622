// run_08_parameter_server: 05's MLP trained through parameter servers on simulated ranks.
//
//   ./distlab run 08_parameter_server -- --mode sync|async|ssp --staleness S --straggler 4
//   ./distlab run 08_parameter_server --solutions --world-size 5 -- --mode sync --servers 2
//   ./distlab run 08_parameter_server --solutions -- --compare --straggler 4
//   ./distlab run 08_parameter_server --solutions -- --sweep [--csv FILE]
//
// Ranks 0..k-1 are servers, the others workers (--world-size 5 with one server: 4 workers).
// Prints the training log (gradients applied, simulated time, held-out loss), the simulated time
// to reach --target-loss, and for async/ssp the staleness histogram. --compare runs the three
// modes with the same straggler; --sweep prints the simulated time of one synchronous step vs
// the number of workers for one server, k servers and the ring all-reduce (06), with the
// formulas. --csv FILE writes what --compare and --sweep measured (for `./distlab bench ps`).
// --trace FILE writes the run's Chrome trace (the server's link is the hot spot). Under mpirun
// (--backend mpi) the modes run on the job's processes and report wall time; rank 0's process
// prints.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <stdexcept>

#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "distlab/todo.hpp"
#include "train.hpp"

namespace {

struct Outcome {
  ps::RunResult result;        // sim_s: simulated seconds, or wall seconds under mpirun
  double time_to_target = -1;  // the same clock; -1: not reached
};

/// Trains in one mode. simulated: times on the simulated clock (threads backend); otherwise
/// (mpirun, one rank a process) wall time. The run's time and the time to the target loss reach
/// rank 0 by all-reduces (the log lives on the rank that evaluates: a worker in sync mode).
Outcome run_mode(dist::LaunchOptions launch, const ps::PSConfig& c, const datasets::Split& data,
                 float target, bool print, bool simulated) {
  Outcome out;
  std::mutex mu;
  dist::launch(launch, [&] {
    const distlab::Stopwatch sw;
    std::vector<double> wall_at;  // this rank's wall seconds at each of its log points
    ps::RunResult r = ps::train_ps(c, data, [&](const ps::LogPoint& p) {
      wall_at.push_back(sw.elapsed_s());
      if (print) {
        std::printf("gradients %6d | %s %9.3f ms | test_loss %.4f\n", p.gradients,
                    simulated ? "sim time " : "wall time",
                    (simulated ? p.sim_s : wall_at.back()) * 1e3, p.test_loss);
        std::fflush(stdout);
      }
    });
    double times[2] = {simulated ? r.sim_s : sw.elapsed_s(), INFINITY};  // run (max), target (min)
    for (std::size_t i = 0; i < r.log.size(); ++i) {
      if (r.log[i].test_loss <= target) {
        times[1] = simulated ? r.log[i].sim_s : wall_at[i];
        break;
      }
    }
    dist::all_reduce(std::span<double>(times, 1), dist::ReduceOp::Max);
    dist::all_reduce(std::span<double>(times + 1, 1), dist::ReduceOp::Min);
    std::lock_guard<std::mutex> g(mu);
    if (!r.log.empty()) out.result.log = r.log;
    if (dist::rank() == 0) {
      out.result.server = r.server;
      out.result.weights = r.weights;
      out.result.sim_s = simulated ? r.sim_s : times[0];
      out.time_to_target = std::isinf(times[1]) ? -1 : times[1];
    }
  });
  return out;
}

void print_outcome(const ps::PSConfig& c, int workers, const Outcome& o, float target,
                   bool simulated) {
  const char* clock = simulated ? "simulated time" : "wall time";
  std::printf("%s for %d gradients: %.3f ms\n", clock, c.gradients(workers), o.result.sim_s * 1e3);
  if (o.time_to_target >= 0) {
    std::printf("%s to test_loss <= %.3f: %.3f ms\n", clock, target, o.time_to_target * 1e3);
  } else {
    std::printf("test_loss <= %.3f not reached (at the log points)\n", target);
  }
  if (c.mode != ps::Mode::Sync) {
    const auto& s = o.result.server;
    double mean = 0;
    for (int x : s.staleness) mean += x;
    if (!s.staleness.empty()) mean /= static_cast<double>(s.staleness.size());
    std::printf(
        "staleness of the %zu updates (mean %.2f, largest lead over the slowest worker %d):\n%s",
        s.staleness.size(), mean, s.max_lead, ps::staleness_histogram(s.staleness).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  ps::PSConfig c;
  c.model.niters = 100;
  c.model.log_every = 10;
  std::string mode = "sync";
  double compute_ms = 1.0;
  float target = 3.3f;
  bool compare = false, sweep = false;
  std::string csv_path;
  CLI::App app{
      "08_parameter_server: synchronous, asynchronous and bounded-staleness SGD through "
      "parameter servers"};
  auto launch_flags = distlab::add_launch_options(app);
  app.add_option("--mode", mode, "sync, async or ssp")
      ->check(CLI::IsMember({"sync", "async", "ssp"}));
  app.add_option("--servers", c.servers, "k servers (sync)")->check(CLI::PositiveNumber);
  app.add_option("--staleness", c.staleness, "SSP bound s (ssp)")->check(CLI::NonNegativeNumber);
  app.add_option("--straggler", c.straggler, "compute factor of the last worker (>= 1)");
  app.add_option("--compute-ms", compute_ms, "simulated ms of one gradient on a worker")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--target-loss", target, "report the simulated time to this held-out loss");
  app.add_flag("--compare", compare, "run sync, async and ssp with the same straggler");
  app.add_flag("--sweep", sweep, "step time vs workers: one server, k servers, ring");
  app.add_option("--csv", csv_path, "write the --compare / --sweep measurements here");
  app.add_option("--niters", c.model.niters, "synchronous steps (async/ssp: as many gradients)")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-size", c.model.batch_size, "rows per gradient")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr,--learning-rate", c.model.learning_rate, "SGD step size")
      ->check(CLI::PositiveNumber);
  app.add_option("--dim-hidden", c.model.dim_hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--n-layers", c.model.n_layers, "linear layers")->check(CLI::PositiveNumber);
  app.add_option("--seed", c.model.seed, "seed");
  app.add_option("--log-every", c.model.log_every, "steps (x workers gradients) between log lines")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  return distlab::run_main([&]() -> int {
    dist::LaunchOptions launch = launch_flags->resolve();
    // Under mpirun every process runs main(): the job's size wins, rank 0's process prints the
    // config and the outcome, and times are wall times (there is no simulated clock).
    launch.world_size = distlab::job_size_or(launch.world_size);
    const bool lead = distlab::lead_process();
    const bool simulated = launch.backend == dist::Backend::Threads;
    if (!simulated && !csv_path.empty()) {
      if (lead) {
        std::fprintf(stderr,
                     "run_08_parameter_server: --csv records the simulated clock: use --backend "
                     "threads for it\n");
      }
      return 2;
    }
    c.mode = mode == "sync" ? ps::Mode::Sync : mode == "async" ? ps::Mode::Async : ps::Mode::Ssp;
    c.compute_s = compute_ms * 1e-3;
    std::FILE* csv = nullptr;
    if (!csv_path.empty()) {
      csv = std::fopen(csv_path.c_str(), "w");
      if (!csv) throw std::runtime_error("cannot write " + csv_path);
      std::fprintf(csv, "kind,name,x,y\n");
    }
    const datasets::Split data = mlp::make_data(c.model);
    const mlp::MLP shape(c.model, c.model.seed);
    const auto n = static_cast<std::size_t>(shape.num_parameters());

    if (!sweep || compare) {
      std::vector<ps::Mode> modes = {c.mode};
      if (compare) modes = {ps::Mode::Sync, ps::Mode::Async, ps::Mode::Ssp};
      for (ps::Mode m : modes) {
        ps::PSConfig cm = c;
        cm.mode = m;
        cm.validate(launch.world_size);
        const ps::Layout layout = cm.layout(launch.world_size);
        if (lead) {
          std::printf("%smode = %s\nworld_size = %d (%d server(s), %d workers)\n",
                      compare ? "\n" : mlp::describe(cm.model).c_str(), ps::to_string(m),
                      launch.world_size, layout.servers, layout.workers());
          if (m == ps::Mode::Ssp) std::printf("staleness bound = %d\n", cm.staleness);
          if (simulated) {
            std::printf("compute per gradient = %.3f ms (last worker x %.1f), parameters = %zu\n\n",
                        compute_ms, cm.straggler, n);
          } else {
            std::printf(
                "compute per gradient: real (--compute-ms and --straggler charge the simulated "
                "clock only),\nparameters = %zu\n\n",
                n);
          }
        }
        std::fflush(stdout);
        const Outcome o = run_mode(launch, cm, data, target, true, simulated);
        if (lead) print_outcome(cm, layout.workers(), o, target, simulated);
        if (csv) {
          for (const auto& p : o.result.log) {
            std::fprintf(csv, "loss,%s,%.9g,%.6g\n", ps::to_string(m), p.sim_s, p.test_loss);
          }
        }
      }
    }

    if (sweep && !simulated) {
      // The sweep is a simulation: it runs on the threads backend, in rank 0's process.
      if (!lead) return 0;
      std::printf(
          "\n(--sweep runs on the simulated network of the threads backend, in rank 0's "
          "process)\n");
    }
    if (sweep) {
      const dist::NetworkModel net = launch.network;
      std::printf(
          "\none synchronous step, %zu floats (%.2f MB), free compute: simulated ms vs "
          "workers w (measured / formula)\n",
          n, static_cast<double>(n) * 4e-6);
      std::printf("%3s | %-21s | %-21s | %-21s | %-21s | %s\n", "w", "1 server", "2 servers",
                  "4 servers", "ring all-reduce", "server link MB/step vs ring per rank");
      for (int w = 1; w <= 8; ++w) {
        std::printf("%3d", w);
        for (int k : {1, 2, 4}) {
          const double t = ps::measure_server_step(w, k, n, net);
          const double f = ps::formula_server_step(w, k, n, net);
          std::printf(" | %9.4f / %9.4f", t * 1e3, f * 1e3);
          if (csv) std::fprintf(csv, "step,server%d,%d,%.9g\n", k, w, t);
        }
        const double t = ps::measure_ring_step(w, n, net);
        std::printf(" | %9.4f / %9.4f", t * 1e3, ps::formula_ring_step(w, n, net) * 1e3);
        if (csv) std::fprintf(csv, "step,ring,%d,%.9g\n", w, t);
        // One server receives w gradients and sends w weight vectors; a ring rank sends
        // 2 (w-1)/w of the vector.
        std::printf(" | %.2f in + %.2f out vs %.2f out\n", w * n * 4e-6, w * n * 4e-6,
                    2.0 * (w - 1) / w * n * 4e-6);
        std::fflush(stdout);
      }
      // More servers shorten every message but add one to the chain of messages: the step time
      // falls, then rises again. Where it turns is the student's to find (README, question 1).
      const int w = 8;
      std::printf(
          "\none synchronous step with w = %d workers vs servers k: simulated ms "
          "(measured / formula)\n",
          w);
      std::printf("%4s | %-21s | %s\n", "k", "step", "server j's link MB/step");
      int best_k = 1;
      double best = 0;
      for (int k : {1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64}) {
        const double t = ps::measure_server_step(w, k, n, net);
        const double f = ps::formula_server_step(w, k, n, net);
        if (k == 1 || t < best) best = t, best_k = k;
        std::printf("%4d | %9.4f / %9.4f | %.3f in + %.3f out\n", k, t * 1e3, f * 1e3,
                    w * static_cast<double>(ps::shard_range(n, k, 0).size()) * 4e-6,
                    w * static_cast<double>(ps::shard_range(n, k, 0).size()) * 4e-6);
        if (csv) std::fprintf(csv, "servers,w%d,%d,%.9g\n", w, k, t);
        std::fflush(stdout);
      }
      std::printf("fastest of these: k = %d servers, %.4f ms\n", best_k, best * 1e3);
    }
    if (csv) std::fclose(csv);
    return 0;
  });
}
