#include "distlab/args.hpp"

#include <cstdlib>

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
  o.trace_path = trace;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  // Under mpirun the job decides the size and the backend defaults to MPI.
  if (backend == "threads" && std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    o.backend = dist::Backend::Mpi;
  }
  return o;
}

std::shared_ptr<LaunchFlags> add_launch_options(CLI::App& app) {
  auto f = std::make_shared<LaunchFlags>();
  app.add_option("-n,--world-size", f->world_size, "number of ranks (threads backend)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--backend", f->backend, "threads, mpi or nccl")
      ->check(CLI::IsMember({"threads", "mpi", "nccl"}));
  app.add_option("--trace", f->trace, "write a Chrome trace (Perfetto) of the simulated clock here");
  app.add_option("--network", f->network, "simulated network: flat or two-level")
      ->check(CLI::IsMember({"flat", "two-level"}));
  app.add_option("--ranks-per-node", f->ranks_per_node, "ranks per node for --network two-level")
      ->check(CLI::Range(1, 4096));
  app.add_option("--timeout-ms", f->timeout_ms, "longest wait before an error")
      ->check(CLI::Range(1L, 86400000L));
  return f;
}

}  // namespace distlab

namespace dist {

LaunchOptions options_from_args(int argc, char** argv) {
  CLI::App app{"dist launch options"};
  app.allow_extras();
  app.set_help_flag();  // --help belongs to the program, not to us
  auto flags = distlab::add_launch_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    throw Error(std::string("bad launch option: ") + e.what() +
                " (use --world-size N --backend threads|mpi|nccl --trace FILE "
                "--network flat|two-level --ranks-per-node G --timeout-ms MS)");
  }
  return flags->resolve();
}

}  // namespace dist
