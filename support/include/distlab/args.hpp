// The launch flags every module program shares, without a command-line library in sight:
//
//   int main(int argc, char** argv) {
//     dist::launch(distlab::options_from_args(argc, argv), [] { ... });
//   }
//
// A program with flags of its own adds these to its CLI11 app with <distlab/cli.hpp>.
#pragma once

#include <string>

#include "dist/dist.hpp"

namespace distlab {

/// The launch flags and their defaults (a negative network number keeps the model's own).
struct LaunchFlags {
  int world_size = 4;               // -n, --world-size N
  std::string backend = "threads";  // --backend threads|mpi|nccl
  std::string trace;                // --trace FILE
  std::string network = "flat";     // --network flat|two-level
  int ranks_per_node = 4;           // --ranks-per-node G (two-level)
  long timeout_ms = 30000;          // --timeout-ms MS
  double latency_s = -1;            // --latency S: alpha of every link (two-level: inside a node)
  double bandwidth_Bps = -1;  // --bandwidth BPS: 1/beta of every link (two-level: inside a node)
  double reduce_Bps = -1;     // --reduce-bandwidth BPS: 1/gamma, local reduction speed

  /// The options these flags describe (throws dist::Error for an unknown backend or network).
  /// Under a launcher (dist::started_by_mpirun()) the backend defaults to Mpi.
  dist::LaunchOptions resolve() const;
};

/// Reads -n/--world-size N, --backend threads|mpi|nccl, --trace FILE, --timeout-ms MS,
/// --network flat|two-level, --ranks-per-node G, --latency S, --bandwidth BPS and
/// --reduce-bandwidth BPS. Unknown arguments are left for the program; a malformed known one
/// throws dist::Error saying why.
dist::LaunchOptions options_from_args(int argc, char** argv);

}  // namespace distlab
