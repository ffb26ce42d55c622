// Command-line parsing for the module programs, on CLI11.
//
//   CLI::App app{"03_collectives: student collectives next to the built-ins"};
//   auto opts = distlab::add_launch_options(app);   // --world-size, --backend, --trace, --network ...
//   app.add_option("--sizes", sizes, "...");
//   CLI11_PARSE(app, argc, argv);
//   dist::launch(opts->resolve(), [&] { ... });
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "dist/dist.hpp"

namespace distlab {

/// The launch flags every program shares, bound to a CLI11 app.
struct LaunchFlags {
  int world_size = 4;
  std::string backend = "threads";
  std::string trace;
  std::string network = "flat";
  int ranks_per_node = 4;
  long timeout_ms = 30000;
  /// The options these flags describe (throws dist::Error for an unknown backend or network).
  dist::LaunchOptions resolve() const;
};

std::shared_ptr<LaunchFlags> add_launch_options(CLI::App& app);

}  // namespace distlab
