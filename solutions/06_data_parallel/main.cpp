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
// under the backward spans.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>

#include "datasets/loader.hpp"
#include "ddp.hpp"
#include "distlab/cli.hpp"
#include "dist/eigen.hpp"
#include "distlab/program.hpp"
#include "distlab/todo.hpp"

namespace {

struct SimResult {
  double step_s = 0;
  std::vector<dist::Stats> stats;
};

/// Runs `steps` data-parallel steps with modelled compute; returns rank 0's simulated seconds
/// per step and every rank's traffic.
SimResult simulate(dist::LaunchOptions launch, const mlp::Config& c, const datasets::Split& data,
                   dp::Sync mode, std::size_t cap, double flops, int steps) {
  SimResult res;
  res.stats.resize(static_cast<std::size_t>(launch.world_size));
  std::mutex mu;
  dist::launch(launch, [&] {
    const int rank = dist::rank();
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
    for (int s = 0; s < steps; ++s) {
      loader.load(dp::global_batch_index(s, rank, dist::world_size()), x, y);
      dp::dp_step(wrapper.sync(), model, opt, x, y, probs, dlogits, &compute);
    }
    const double t1 = dist::sim_time();
    const dist::Stats st = dist::stats();
    dist::barrier();
    std::lock_guard<std::mutex> g(mu);
    if (rank == 0) res.step_s = (t1 - t0) / steps;
    res.stats[static_cast<std::size_t>(rank)] = st;
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
    // Under mpirun every process runs main(): the config is printed by rank 0's process only.
    const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const char* mpi_size = std::getenv("OMPI_COMM_WORLD_SIZE");  // mpirun's size wins
    const bool lead = mpi_rank == nullptr || std::string(mpi_rank) == "0";
    if (lead) {
      std::printf("%sworld_size = %d\nsync = %s\n\n", mlp::describe(c).c_str(),
                  mpi_size != nullptr ? std::atoi(mpi_size) : launch.world_size,
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

    if (launch.backend != dist::Backend::Threads) {
      // The simulated steps and their traffic table need the simulated clock (threads backend).
      if (lead) std::printf("\n(simulated steps and traffic: run without --backend mpi)\n");
      return 0;
    }

    const mlp::MLP shape(c, c.seed);
    const dp::StepFlops flops = dp::step_flops(shape, c.batch_size);
    const auto params = shape.parameters();
    std::printf("\nsimulated step (compute modelled at %.0f GFLOP/s per rank, %d ranks):\n", gflops,
                launch.world_size);
    std::printf(
        "  compute per rank and step : forward %.1f MFLOP, backward %.1f MFLOP\n"
        "  (backward is less than 2x forward: the first layer, %.0f%% of the %lld "
        "parameters, has no input gradient)\n",
        flops.forward / 1e6, flops.backward_total() / 1e6,
        100.0 * static_cast<double>(params.front()->numel()) /
            static_cast<double>(shape.num_parameters()),
        static_cast<long long>(shape.num_parameters()));
    const SimResult after = simulate(launch, c, data, dp::Sync::Manual, 0, gflops * 1e9, sim_steps);
    std::printf("  all-reduce after backward : %8.3f ms\n", after.step_s * 1e3);
    launch.trace_path = trace;
    const SimResult overlap =
        simulate(launch, c, data, dp::Sync::MyDP, o.bucket_cap_bytes, gflops * 1e9, sim_steps);
    std::printf("  MyDP, overlapped buckets  : %8.3f ms  (bucket cap %.2f MiB)\n",
                overlap.step_s * 1e3, bucket_mib);
    std::printf("\ntraffic per rank over %d MyDP steps:\n", sim_steps);
    for (std::size_t r = 0; r < overlap.stats.size(); ++r) {
      const auto& s = overlap.stats[r];
      std::printf(
          "  rank %zu: sent %llu messages, %.2f MB | received %llu messages, %.2f MB | %llu "
          "collectives\n",
          r, static_cast<unsigned long long>(s.messages_sent),
          static_cast<double>(s.bytes_sent) / 1e6,
          static_cast<unsigned long long>(s.messages_received),
          static_cast<double>(s.bytes_received) / 1e6,
          static_cast<unsigned long long>(s.builtin_collectives));
    }
    if (!trace.empty()) std::printf("\ntrace of the MyDP steps written to %s\n", trace.c_str());
    return 0;
  });
}
