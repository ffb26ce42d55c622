#include "distlab/args.hpp"

#include "distlab/cli.hpp"

namespace distlab {

dist::LaunchOptions LaunchFlags::resolve() const {
  dist::LaunchOptions o;
  o.world_size = world_size;
  if (backend == "threads") {
    o.backend = dist::Backend::Threads;
  } else if (backend == "mpi") {
    o.backend = dist::Backend::Mpi;
  } else if (backend == "nccl") {
    o.backend = dist::Backend::Nccl;
  } else {
    throw dist::Error("unknown backend '" + backend + "': use threads, mpi or nccl");
  }
  if (network == "flat") {
    o.network = dist::NetworkModel::flat();
  } else if (network == "two-level") {
    o.network = dist::NetworkModel::two_level(ranks_per_node);
  } else {
    throw dist::Error("unknown network '" + network + "': use flat or two-level");
  }
  if (latency_s >= 0) o.network.latency_s = latency_s;
  if (bandwidth_Bps >= 0) o.network.bandwidth_Bps = bandwidth_Bps;
  if (reduce_Bps >= 0) o.network.reduce_Bps = reduce_Bps;
  o.trace_path = trace;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  // Under a launcher the job decides the size and the backend defaults to MPI.
  if (backend == "threads" && dist::started_by_mpirun()) o.backend = dist::Backend::Mpi;
  return o;
}

dist::LaunchOptions options_from_args(int argc, char** argv) {
  CLI::App app{"dist launch options"};
  app.allow_extras();
  app.set_help_flag();  // --help belongs to the program, not to us
  auto flags = add_launch_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    throw dist::Error(std::string("bad launch option: ") + e.what() +
                      " (use --world-size N --backend threads|mpi|nccl --trace FILE "
                      "--network flat|two-level --ranks-per-node G --timeout-ms MS --latency S "
                      "--bandwidth BPS --reduce-bandwidth BPS)");
  }
  return flags->resolve();
}

}  // namespace distlab
