// run_06_data_parallel: data-parallel training of 05's MLP on simulated ranks.
//
//   ./distlab run 06_data_parallel --world-size 4 [--trace FILE]
//   ./distlab run 06_data_parallel --solutions --world-size 4 --trace dp.json
//   ./distlab run 06_data_parallel -- --sync manual --niters 300
//
// Prints rank 0's training log (train_loss is the mean over ranks, test_loss on held-out rows),
// then a few steps on the simulated clock with modelled compute (--gflops), with gradients
// all-reduced after backward and with MyDP's overlap, and each rank's traffic. --trace writes the
// Chrome trace (Perfetto, chrome://tracing) of those simulated steps: see MyDP's all-reduces run
// under the backward spans. Under mpirun (./distlab run 06_data_parallel --backend mpi -n 4) the
// same steps run on the job's processes: rank 0's process prints the log, their wall time and one
// table of every rank's figures.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>

#include "datasets/loader.hpp"
#include "ddp.hpp"
#include "distlab/cli.hpp"
#include "dist/eigen.hpp"
#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "distlab/todo.hpp"

namespace {

struct SimResult {
  double step_s = 0;               // rank 0's simulated seconds per step (threads backend)
  std::vector<dist::Stats> stats;  // every rank's traffic (gathered to rank 0)
  std::vector<double> wall_s;      // every rank's wall seconds per step (gathered to rank 0)
};

/// Runs `steps` data-parallel steps with modelled compute; returns rank 0's simulated seconds
/// per step and every rank's traffic and wall time per step. The per-rank figures reach rank 0
/// by a gather, so under mpirun (one rank a process) rank 0's process holds them all.
SimResult simulate(dist::LaunchOptions launch, const mlp::Config& c, const datasets::Split& data,
                   dp::Sync mode, std::size_t cap, double flops, int steps) {
  SimResult res;
  dist::launch(launch, [&] {
    const int rank = dist::rank();
    const auto p = static_cast<std::size_t>(dist::world_size());
    mlp::MLP model(c, c.seed + 2 + static_cast<std::uint64_t>(rank));
    dp::ComputeModel compute(model, c.batch_size, flops);
    const dp::SyncWrapper wrapper(model, mode, cap);
    mlp::SGD opt(model.parameters(), c.learning_rate);
    const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
    mlp::Matrix x, probs, dlogits;
    mlp::Labels y;
    dist::barrier();
    dist::reset_stats();
    const double t0 = dist::sim_time();
    const distlab::Stopwatch sw;
    for (int s = 0; s < steps; ++s) {
      loader.load(dp::global_batch_index(s, rank, dist::world_size()), x, y);
      dp::dp_step(wrapper.sync(), model, opt, x, y, probs, dlogits, &compute);
    }
    const double wall = sw.elapsed_s() / steps;
    const double t1 = dist::sim_time();
    const dist::Stats st = dist::stats();
    constexpr std::size_t kFields = 5;
    const std::vector<std::int64_t> mine{static_cast<std::int64_t>(st.messages_sent),
                                         static_cast<std::int64_t>(st.bytes_sent),
                                         static_cast<std::int64_t>(st.messages_received),
                                         static_cast<std::int64_t>(st.bytes_received),
                                         static_cast<std::int64_t>(st.builtin_collectives)};
    std::vector<std::int64_t> all(rank == 0 ? kFields * p : 0);
    std::vector<double> walls(rank == 0 ? p : 0);
    dist::gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all), 0);
    dist::gather(std::span<const double>(&wall, 1), std::span<double>(walls), 0);
    if (rank != 0) return;
    res.step_s = (t1 - t0) / steps;
    res.wall_s = walls;
    res.stats.resize(p);
    for (std::size_t r = 0; r < p; ++r) {
      dist::Stats& s = res.stats[r];
      s.messages_sent = static_cast<std::uint64_t>(all[r * kFields]);
      s.bytes_sent = static_cast<std::uint64_t>(all[r * kFields + 1]);
      s.messages_received = static_cast<std::uint64_t>(all[r * kFields + 2]);
      s.bytes_received = static_cast<std::uint64_t>(all[r * kFields + 3]);
      s.builtin_collectives = static_cast<std::uint64_t>(all[r * kFields + 4]);
    }
  });
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  mlp::Config c;
  c.niters =
      300;  // 300 steps x 4 ranks = 1200 batches: the seed config's data, in well under a minute
  std::string sync = "mydp";
  double bucket_mib = 1.0;
  double gflops = 80.0;
  int sim_steps = 3;
  CLI::App app{"06_data_parallel: data-parallel training of the MLP, and MyDP's overlap"};
  auto launch_flags = distlab::add_launch_options(app);
  app.add_option("--sync", sync, "kit, manual or mydp")
      ->check(CLI::IsMember({"kit", "manual", "mydp"}));
  app.add_option("--bucket-mib", bucket_mib, "MyDP bucket cap in MiB");
  app.add_option("--gflops", gflops, "modelled compute speed per rank for the simulated steps");
  app.add_option("--sim-steps", sim_steps, "simulated steps per variant")
      ->check(CLI::PositiveNumber);
  app.add_option("--niters", c.niters, "training steps")->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", c.batch_size, "rows per rank per step")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr,--learning-rate", c.learning_rate, "SGD step size")
      ->check(CLI::PositiveNumber);
  app.add_option("--dim-hidden", c.dim_hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--n-layers", c.n_layers, "linear layers")->check(CLI::PositiveNumber);
  app.add_option("--seed", c.seed, "seed");
  app.add_option("--log-every", c.log_every, "steps between log lines")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  return distlab::run_main([&]() -> int {
    dist::LaunchOptions launch = launch_flags->resolve();
    const std::string trace = launch.trace_path;
    launch.trace_path.clear();  // the trace covers the simulated steps only
    dp::RunOptions o;
    o.sync = sync == "kit" ? dp::Sync::Kit : sync == "manual" ? dp::Sync::Manual : dp::Sync::MyDP;
    o.bucket_cap_bytes = static_cast<std::size_t>(bucket_mib * (1 << 20));
    const datasets::Split data = mlp::make_data(c);
    // Under mpirun every process runs main(): rank 0's process prints the config and the
    // tables, the job's size is the world size, and there is no simulated clock.
    const bool lead = distlab::lead_process();
    const bool simulated = launch.backend == dist::Backend::Threads;
    const int p = distlab::job_size_or(launch.world_size);
    if (lead) {
      std::printf("%sworld_size = %d\nsync = %s\n\n", mlp::describe(c).c_str(), p,
                  dp::to_string(o.sync));
    }
    std::fflush(stdout);
    dist::launch(launch, [&] {
      dp::train_data_parallel(c, data, o, [](const mlp::LogLine& l) {
        // Step 0's line times that one step alone (cold caches, first allocations); later lines give
        // the median of the steps since the previous line.
        std::printf("step %d | train_loss %.4f | test_loss %.4f | step time %.3f ms%s\n", l.step,
                    l.train_loss, l.test_loss, l.step_ms,
                    l.step == 0 ? " (step 0 alone: a cold step)" : "");
        std::fflush(stdout);
      });
    });

    const mlp::MLP shape(c, c.seed);
    const dp::StepFlops flops = dp::step_flops(shape, c.batch_size);
    const auto params = shape.parameters();
    if (simulated) {
      std::printf("\nsimulated step (compute modelled at %.0f GFLOP/s per rank, %d ranks):\n",
                  gflops, p);
    } else if (lead) {
      std::printf(
          "\nmeasured step (wall time on this machine, %d processes; the compute is real: "
          "--gflops and\nthe simulated clock are the threads backend's):\n",
          p);
    }
    if (lead) {
      std::printf(
          "  compute per rank and step : forward %.1f MFLOP, backward %.1f MFLOP\n"
          "  (backward is less than 2x forward: the first layer, %.0f%% of the %lld "
          "parameters, has no input gradient)\n",
          flops.forward / 1e6, flops.backward_total() / 1e6,
          100.0 * static_cast<double>(params.front()->numel()) /
              static_cast<double>(shape.num_parameters()),
          static_cast<long long>(shape.num_parameters()));
    }
    // simulated: rank 0's simulated time; mpirun: the slowest rank's wall time
    auto step_ms = [simulated](const SimResult& r) {
      if (simulated) return r.step_s * 1e3;
      return r.wall_s.empty() ? 0.0 : *std::max_element(r.wall_s.begin(), r.wall_s.end()) * 1e3;
    };
    const SimResult after = simulate(launch, c, data, dp::Sync::Manual, 0, gflops * 1e9, sim_steps);
    if (lead) std::printf("  all-reduce after backward : %8.3f ms\n", step_ms(after));
    launch.trace_path = trace;
    const SimResult overlap =
        simulate(launch, c, data, dp::Sync::MyDP, o.bucket_cap_bytes, gflops * 1e9, sim_steps);
    if (!lead) return 0;  // mpirun: rank 0's process holds every rank's figures
    std::printf("  MyDP, overlapped buckets  : %8.3f ms  (bucket cap %.2f MiB)\n", step_ms(overlap),
                bucket_mib);
    if (simulated) {
      std::printf("\ntraffic per rank over %d MyDP steps:\n", sim_steps);
    } else {
      std::printf(
          "\nper rank over %d MyDP steps (MPI moves the built-in collectives' bytes itself: "
          "dist counts\nthe calls, not their bytes):\n",
          sim_steps);
    }
    for (std::size_t r = 0; r < overlap.stats.size(); ++r) {
      const auto& s = overlap.stats[r];
      if (simulated) {
        std::printf(
            "  rank %zu: sent %llu messages, %.2f MB | received %llu messages, %.2f MB | %llu "
            "collectives\n",
            r, static_cast<unsigned long long>(s.messages_sent),
            static_cast<double>(s.bytes_sent) / 1e6,
            static_cast<unsigned long long>(s.messages_received),
            static_cast<double>(s.bytes_received) / 1e6,
            static_cast<unsigned long long>(s.builtin_collectives));
      } else {
        std::printf("  rank %zu: %8.3f ms per step (wall) | %llu collectives\n", r,
                    overlap.wall_s[r] * 1e3,
                    static_cast<unsigned long long>(s.builtin_collectives));
      }
    }
    if (!trace.empty()) {
      std::printf(simulated ? "\ntrace of the MyDP steps written to %s\n"
                            : "\n--trace %s: not written (a trace records the simulated clock: "
                              "use --backend threads)\n",
                  trace.c_str());
    }
    return 0;
  });
}
