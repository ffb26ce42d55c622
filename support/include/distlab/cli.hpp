// The launch flags of <distlab/args.hpp> added to a program's own CLI11 app (the program links
// CLI11::CLI11 itself; distlab::support keeps CLI11 private):
//
//   CLI::App app{"03_collectives: student collectives next to the built-ins"};
//   auto flags = distlab::add_launch_options(app);   // --world-size, --backend, --trace ...
//   app.add_option("--sizes", sizes, "...");
//   CLI11_PARSE(app, argc, argv);
//   dist::launch(flags->resolve(), [&] { ... });
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

#include "distlab/args.hpp"

namespace distlab {

/// Binds the launch flags to `app`; resolve() the result after parsing.
inline std::shared_ptr<LaunchFlags> add_launch_options(CLI::App& app) {
  auto f = std::make_shared<LaunchFlags>();
  app.add_option("-n,--world-size", f->world_size, "number of ranks (threads backend)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--backend", f->backend, "threads, mpi or nccl")
      ->check(CLI::IsMember({"threads", "mpi", "nccl"}));
  app.add_option("--trace", f->trace,
                 "write a Chrome trace (Perfetto) of the simulated clock here");
  app.add_option("--network", f->network, "simulated network: flat or two-level")
      ->check(CLI::IsMember({"flat", "two-level"}));
  app.add_option("--ranks-per-node", f->ranks_per_node, "ranks per node for --network two-level")
      ->check(CLI::Range(1, 4096));
  app.add_option("--timeout-ms", f->timeout_ms, "longest wait before an error")
      ->check(CLI::Range(1L, 86400000L));
  app.add_option("--latency", f->latency_s, "simulated seconds per message (alpha)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--bandwidth", f->bandwidth_Bps, "simulated link bandwidth in bytes/s (1/beta)")
      ->check(CLI::PositiveNumber);
  app.add_option("--reduce-bandwidth", f->reduce_Bps,
                 "simulated local reduction speed in bytes/s (1/gamma; 0 = free)")
      ->check(CLI::NonNegativeNumber);
  return f;
}

}  // namespace distlab
