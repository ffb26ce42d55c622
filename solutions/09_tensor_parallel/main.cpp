// run_09_tensor_parallel: 05's MLP trained on a tp x dp grid of simulated ranks: Megatron tensor
// parallelism inside a node, data parallelism across nodes, optionally a ZeRO sharded optimizer.
//
//   ./distlab run 09_tensor_parallel -- --tp 2 --dp 2 --zero 1
//   ./distlab run 09_tensor_parallel -- --tp 4 --dp 1 --trace tp.json
//
// Prints rank 0's training log (05's lines: train_loss over the whole batch, test_loss on held-out
// rows, step time = median wall time of a step), then one step on the simulated clock of a
// two-level network (nodes of --ranks-per-node ranks, default tp: one TP group per node; or
// --network flat): its time, each rank's memory of weights, gradients and optimizer state, and the
// comparison table DDP / TP / TP+DP / ZeRO-1 / ZeRO-2 on the same ranks and network (every figure
// measured: the bytes from dist's counters, the memory from the containers' sizes).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "train.hpp"

int main(int argc, char** argv) {
  tp::TpConfig c;
  c.model.niters = 300;
  c.model.learning_rate = 1e-3f;  // Adam's usual step size
  double gflops = 50.0;
  bool table = true;
  CLI::App app{"09_tensor_parallel: tensor x data parallelism and ZeRO on a two-level network"};
  auto launch_flags = distlab::add_launch_options(app);
  launch_flags->network = "two-level";  // this program's default: nodes of tp ranks (below)
  launch_flags->ranks_per_node = 0;
  app.add_option("--tp", c.tp, "tensor-parallel ranks per replica")->check(CLI::PositiveNumber);
  app.add_option("--dp", c.dp, "data-parallel replicas")->check(CLI::PositiveNumber);
  app.add_option("--zero", c.zero, "ZeRO stage: 0 (off), 1 or 2")->check(CLI::Range(0, 2));
  app.add_option("--gflops", gflops, "modelled compute speed per rank (GFLOP/s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--beta1", c.beta1, "Adam's first-moment decay")->check(CLI::Range(0.0, 0.999));
  app.add_option("--beta2", c.beta2, "Adam's second-moment decay")->check(CLI::Range(0.0, 0.9999));
  app.add_option("--niters", c.model.niters, "training steps")->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", c.model.batch_size, "rows per step")->check(CLI::PositiveNumber);
  app.add_option("--lr,--learning-rate", c.model.learning_rate, "Adam's step size")
      ->check(CLI::PositiveNumber);
  app.add_option("--n-layers", c.model.n_layers, "linear layers (even)")
      ->check(CLI::PositiveNumber);
  app.add_option("--dim-hidden", c.model.dim_hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--seed", c.model.seed, "seed");
  app.add_option("--log-every", c.model.log_every, "steps between log lines")
      ->check(CLI::PositiveNumber);
  app.add_flag("!--no-table", table, "skip the DDP / TP / TP+DP / ZeRO comparison table");
  CLI11_PARSE(app, argc, argv);

  return distlab::run_main([&]() -> int {
    if (launch_flags->ranks_per_node <= 0) launch_flags->ranks_per_node = c.tp;
    dist::LaunchOptions launch = launch_flags->resolve();
    launch.world_size = c.tp * c.dp;
    if (const char* job = std::getenv("OMPI_COMM_WORLD_SIZE"))
      launch.world_size = std::atoi(job);  // mpirun's size wins
    c.flops_per_s = gflops * 1e9;
    c.validate(launch.world_size);
    const std::string trace = launch.trace_path;
    launch.trace_path.clear();  // the trace covers the simulated step only
    const datasets::Split data = mlp::make_data(c.model);
    const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const bool printer = mpi_rank == nullptr || std::string(mpi_rank) == "0";
    if (printer) {
      std::printf(
          "%soptimizer = Adam (beta1 %g, beta2 %g, eps %g)\ntp = %d\ndp = %d\nzero = %d\n\n",
          mlp::describe(c.model).c_str(), c.beta1, c.beta2, c.eps, c.tp, c.dp, c.zero);
    }
    std::fflush(stdout);
    dist::launch(launch, [&] {
      tp::train_tp(c, data, [](const mlp::LogLine& l) {
        std::printf("step %d | train_loss %.4f | test_loss %.4f | step time %.3f ms\n", l.step,
                    l.train_loss, l.test_loss, l.step_ms);
        std::fflush(stdout);
      });
    });
    if (launch.backend != dist::Backend::Threads) return 0;  // the clock is the threads backend's

    const dist::NetworkModel& net = launch.network;
    char links[160];
    if (net.ranks_per_node > 0) {
      std::snprintf(links, sizeof links,
                    "nodes of %d ranks: inside %.0f us + %.2f GB/s, between %.0f us + %.2f GB/s",
                    net.ranks_per_node, net.latency_s * 1e6, net.bandwidth_Bps / 1e9,
                    net.inter_node_latency_s * 1e6, net.inter_node_bandwidth_Bps / 1e9);
    } else {
      std::snprintf(links, sizeof links, "flat network: %.0f us + %.2f GB/s", net.latency_s * 1e6,
                    net.bandwidth_Bps / 1e9);
    }
    std::printf("\nsimulated step (%s; compute at %.0f GFLOP/s per rank; %s):\n", c.name().c_str(),
                gflops, links);
    launch.trace_path = trace;
    std::vector<tp::StepMeasure> ranks(static_cast<std::size_t>(launch.world_size));
    std::mutex mu;
    dist::launch(launch, [&] {
      const tp::StepMeasure m = tp::measured_step(c, data);
      std::lock_guard<std::mutex> g(mu);
      ranks[static_cast<std::size_t>(dist::rank())] = m;
    });
    double step_s = 0;
    for (const auto& m : ranks) step_s = std::max(step_s, m.step_s);
    std::printf("  step time %.3f ms (the slowest rank)\n", step_s * 1e3);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const tp::StepMeasure& m = ranks[r];
      std::printf(
          "  rank %zu (tp %zu, dp %zu): weights %.1f KiB | gradients %.1f KiB | Adam m and v "
          "%.1f KiB | scratch %.1f KiB | sent %.1f KiB (TP group %.1f, DP group %.1f)\n",
          r, r % static_cast<std::size_t>(c.tp), r / static_cast<std::size_t>(c.tp),
          static_cast<double>(m.memory.weights) / 1024.0,
          static_cast<double>(m.memory.gradients) / 1024.0,
          static_cast<double>(m.memory.optimizer_state) / 1024.0,
          static_cast<double>(m.memory.scratch) / 1024.0,
          static_cast<double>(m.bytes_sent) / 1024.0, static_cast<double>(m.bytes_tp) / 1024.0,
          static_cast<double>(m.bytes_dp) / 1024.0);
    }
    if (!trace.empty()) std::printf("  trace of the simulated step written to %s\n", trace.c_str());
    if (table) {
      launch.trace_path.clear();
      std::printf(
          "\none step per rank on the same %d ranks and network (the largest figure over the "
          "ranks; memory in KiB; the optimizer state is Adam's m and v):\n",
          launch.world_size);
      const std::vector<tp::TableRow> rows = tp::comparison_table(c, launch, data);
      std::printf("%s", tp::format_table(rows).c_str());
      std::printf("\n%s", tp::format_adam_table(rows).c_str());
    }
    return 0;
  });
}
