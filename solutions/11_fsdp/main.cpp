// run_11_fsdp: 05's MLP trained with fully sharded data parallelism (your Fsdp) on simulated ranks,
// then one measured step per FSDP setting on the simulated clock.
//
//   ./distlab run 11_fsdp
//   ./distlab run 11_fsdp --solutions -- --world-size 4 --prefetch 1 --trace fsdp.json
//   ./distlab bench fsdp --plot fsdp.png        (--sweep: memory against dp, time against window)
//
// Prints rank 0's training log (05's lines), then the table: for each setting (prefetch window,
// reshard after forward or keep, fp32 or bf16 communication), the simulated step time, the bytes
// a rank sends and the meter's high-water mark per rank split into shards (w, g, m, v), full
// weights and full gradients (bf16: with the shard-sized bf16 buffer each holds), each measured
// and beside it the formula of docs/11_fsdp.md (the largest figure over the ranks).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "train.hpp"

namespace {

/// The largest figure over the ranks of one measured step.
fsdp::StepMeasure measure(const fsdp::TrainConfig& c, dist::LaunchOptions o,
                          const datasets::Split& data) {
  fsdp::StepMeasure x;
  std::mutex mu;
  o.trace_path.clear();
  dist::launch(o, [&] {
    const fsdp::StepMeasure m = fsdp::measured_step(c, data);
    std::lock_guard<std::mutex> g(mu);
    x.step_s = std::max(x.step_s, m.step_s);
    x.peak = std::max(x.peak, m.peak);
  });
  return x;
}

int run_sweep(fsdp::TrainConfig c, dist::LaunchOptions launch, const std::string& csv) {
  const datasets::Split data = mlp::make_data(c.model);
  std::FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (!csv.empty() && !out) throw std::runtime_error("cannot write " + csv);
  if (out) std::fprintf(out, "kind,name,x,y\n");
  std::int64_t n = 0;
  for (int u = 0; u < c.model.n_layers; ++u)
    n += static_cast<std::int64_t>(c.model.layer_in(u)) * c.model.layer_out(u);
  std::printf(
      "peak memory per rank (KiB) against dp, 8 units (DDP with Adam: 16 bytes per "
      "parameter, %.1f KiB):\n%4s %12s %12s %12s\n",
      static_cast<double>(16 * n) / 1024.0, "dp", "prefetch 0", "prefetch 1", "keep");
  for (int dp : {1, 2, 4, 8}) {
    dist::LaunchOptions o = launch;
    o.world_size = dp;
    double kib[3];
    int i = 0;
    for (auto [k, reshard] : {std::pair{0, true}, std::pair{1, true}, std::pair{0, false}}) {
      fsdp::TrainConfig x = c;
      x.fsdp.prefetch = k;
      x.fsdp.reshard_after_forward = reshard;
      kib[i] = static_cast<double>(measure(x, o, data).peak) / 1024.0;
      const char* name = i == 0 ? "prefetch0" : i == 1 ? "prefetch1" : "keep";
      if (out) std::fprintf(out, "memory,%s,%d,%.1f\n", name, dp, kib[i]);
      ++i;
    }
    if (out) std::fprintf(out, "memory,ddp,%d,%.1f\n", dp, static_cast<double>(16 * n) / 1024.0);
    std::printf("%4d %12.1f %12.1f %12.1f\n", dp, kib[0], kib[1], kib[2]);
  }
  std::printf("\nstep time (ms) against the prefetch window on %d ranks:\n%8s %12s %12s\n",
              launch.world_size, "prefetch", "reshard", "keep");
  for (int k = 0; k <= 4; ++k) {
    double ms[2];
    for (int keep = 0; keep < 2; ++keep) {
      fsdp::TrainConfig x = c;
      x.fsdp.prefetch = k;
      x.fsdp.reshard_after_forward = keep == 0;
      ms[keep] = measure(x, launch, data).step_s * 1e3;
      if (out) std::fprintf(out, "time,%s,%d,%.6f\n", keep ? "keep" : "reshard", k, ms[keep]);
    }
    std::printf("%8d %12.4f %12.4f\n", k, ms[0], ms[1]);
  }
  if (out) std::fclose(out);
  return 0;
}

}  // namespace

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
  app.add_flag(
      "--bf16", c.fsdp.bf16_comm,
      "communicate in bf16: gathers and reduce-scatters of 2-byte elements (training run)");
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
  bool sweep = false;
  std::string csv;
  app.add_flag("--sweep", sweep,
               "instead of training: the 8-unit model's peak memory per rank against dp (1, 2, 4, "
               "8) and its step time against the prefetch window (0 to 4) on the given ranks");
  app.add_option("--csv", csv, "with --sweep: write the points (kind, name, x, y) to this file");
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
    c.model.learning_rate = c.fsdp.adam.learning_rate;  // Adam's, shown in the config lines
    c.validate(launch.world_size);
    // The larger model of the table and the sweep: equal units, so the window shows in memory.
    fsdp::TrainConfig big = c;
    big.model.n_layers = 8;
    big.model.dim_in = 512;
    big.model.dim_hidden = 512;
    big.model.train_size = 256;
    big.model.test_size = 64;
    if (sweep) return run_sweep(big, launch, csv);
    const datasets::Split data = mlp::make_data(c.model);
    std::printf("%sdp = %d\nprefetch = %d\nreshard_after_forward = %s\nbf16_comm = %s\n\n",
                mlp::describe(c.model).c_str(), launch.world_size, c.fsdp.prefetch,
                c.fsdp.reshard_after_forward ? "true" : "false",
                c.fsdp.bf16_comm ? "true" : "false");
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
      std::printf("\nthe seed model (%d units, the first %d x %d the largest):\n", c.model.n_layers,
                  c.model.dim_hidden, c.model.dim_in);
      std::printf(
          "%s",
          fsdp::format_table(fsdp::comparison_table(c, launch, data), launch.world_size).c_str());
      std::printf("%s", fsdp::zero_formula_rows(c.model, launch.world_size).c_str());
      const datasets::Split big_data = mlp::make_data(big.model);
      std::printf("\n8 units (7 of 512 x 512, then 32 x 512), the same ranks and network:\n");
      std::printf(
          "%s", fsdp::format_table(fsdp::comparison_table(big, launch, big_data), launch.world_size)
                    .c_str());
      std::printf("%s", fsdp::zero_formula_rows(big.model, launch.world_size).c_str());
    }
    return 0;
  });
}
