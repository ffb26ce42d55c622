// run_11_fsdp: 05's MLP trained with fully sharded data parallelism (your Fsdp) on simulated ranks,
// then one measured step per FSDP setting on the simulated clock.
//
//   ./distlab run 11_fsdp
//   ./distlab run 11_fsdp --solutions -- --world-size 4 --prefetch 1 --trace fsdp.json
//
// Prints rank 0's training log (05's lines), then the table: for each setting (prefetch window,
// reshard after forward or keep), the simulated step time, the bytes a rank sends and the meter's
// high-water mark per rank split into shards (w, g, m, v), full weights and full gradients, each
// measured and beside it the formula of docs/11_fsdp.md (the largest figure over the ranks).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "train.hpp"

int main(int argc, char** argv) {
  fsdp::TrainConfig c;
  c.model.niters = 200;
  c.model.batch_size = 64;
  c.model.log_every = 50;
  double gflops = 50.0;
  bool table = true;
  CLI::App app{"11_fsdp: fully sharded data parallelism (ZeRO-3) with prefetch and Adam"};
  auto launch_flags = distlab::add_launch_options(app);
  app.add_option("--prefetch", c.fsdp.prefetch, "units gathered ahead (training run)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("!--keep", c.fsdp.reshard_after_forward,
               "keep the full weights from forward to backward (training run)");
  app.add_option("--gflops", gflops, "modelled compute speed per rank (GFLOP/s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--niters", c.model.niters, "training steps")->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", c.model.batch_size, "rows per step")->check(CLI::PositiveNumber);
  app.add_option("--lr,--learning-rate", c.fsdp.adam.learning_rate, "Adam's step size")
      ->check(CLI::PositiveNumber);
  app.add_option("--n-layers", c.model.n_layers, "linear layers (units)")
      ->check(CLI::PositiveNumber);
  app.add_option("--dim-hidden", c.model.dim_hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--seed", c.model.seed, "seed");
  app.add_flag("!--no-table", table, "skip the table of FSDP settings");
  CLI11_PARSE(app, argc, argv);

  return distlab::run_main([&]() -> int {
    dist::LaunchOptions launch = launch_flags->resolve();
    if (launch.backend != dist::Backend::Threads) {
      std::fprintf(stderr,
                   "11_fsdp runs on the threads backend's simulated device only (its kernels have "
                   "host bodies): drop --backend\n");
      return 2;
    }
    c.flops_per_s = gflops * 1e9;
    c.validate(launch.world_size);
    const datasets::Split data = mlp::make_data(c.model);
    std::printf("%sdp = %d\nprefetch = %d\nreshard_after_forward = %s\n\n",
                mlp::describe(c.model).c_str(), launch.world_size, c.fsdp.prefetch,
                c.fsdp.reshard_after_forward ? "true" : "false");
    std::fflush(stdout);
    const std::string trace = launch.trace_path;
    launch.trace_path.clear();
    dist::launch(launch, [&] {
      fsdp::Trainer trainer(c, data);
      mlp::TrainingLog log(c.model, dist::rank() == 0 ? [](const mlp::LogLine& l) {
        std::printf("step %d | train_loss %.4f | test_loss %.4f | step time %.3f ms\n", l.step,
                    l.train_loss, l.test_loss, l.step_ms);
        std::fflush(stdout);
      } : std::function<void(const mlp::LogLine&)>{});
      for (int step = 0; step < c.model.niters; ++step) {
        distlab::Stopwatch sw;
        float loss = trainer.step(step);
        const double ms = sw.elapsed_ms();
        dist::all_reduce(std::span<float>(&loss, 1), dist::ReduceOp::Avg);
        log.add(loss, ms);
        if (log.due(step)) {
          const std::vector<std::vector<float>> w = trainer.full_weights();
          if (dist::rank() == 0) {
            mlp::MLP m(c.model, c.model.seed + 2);
            std::vector<mlp::Parameter*> params = m.parameters();
            for (std::size_t u = 0; u < params.size(); ++u) {
              std::copy(w[u].begin(), w[u].end(), params[u]->value.data());
            }
            log.write(step, log.mean_loss(), mlp::evaluate_loss(m, data.test));
          } else {
            log.skip();
          }
        }
      }
    });
    if (!trace.empty()) {
      launch.trace_path = trace;
      dist::launch(launch, [&] { (void)fsdp::measured_step(c, data); });
      std::printf("trace of one measured step written to %s\n", trace.c_str());
      launch.trace_path.clear();
    }
    if (table) {
      const dist::NetworkModel& net = launch.network;
      std::printf(
          "\none step per rank on %d ranks (flat network %.0f us + %.2f GB/s, %.0f GFLOP/s per "
          "rank; the largest figure over the ranks, measured, formula beside; KiB):\n",
          launch.world_size, net.latency_s * 1e6, net.bandwidth_Bps / 1e9, gflops);
      std::printf("%s", fsdp::format_table(fsdp::comparison_table(c, launch, data),
                                           launch.world_size)
                            .c_str());
    }
    return 0;
  });
}
