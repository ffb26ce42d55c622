// distlab_info: which dist backends this build contains, their library versions and the GPUs
// seen. Used by `./distlab doctor`. Plain text by default; --json for programs.
//   threads: built
//   mpi: built (Open MPI v4.1.4 (MPI standard 3.1))
//   nccl: built, no GPU (NCCL 2.28.9, CUDA runtime 13.0, no CUDA driver; no GPU usable: ...)
// Exit status 0 always (a missing backend is information, not an error).
#include <cstring>
#include <iostream>

#include <nlohmann/json.hpp>

#include "../src/backend_info.hpp"

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  if (argc > 1 && !json) {
    std::cerr << "usage: distlab_info [--json]\n";
    return 2;
  }
  const auto infos = dist::detail::backend_info();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& b : infos) {
      out.push_back({{"name", b.name},
                     {"built", b.built},
                     {"usable", b.usable},
                     {"detail", b.detail},
                     {"devices", b.devices}});
    }
    std::cout << nlohmann::json{{"backends", out}}.dump(2) << "\n";
    return 0;
  }
  for (const auto& b : infos) {
    std::cout << b.name << ": "
              << (!b.built   ? "not built"
                  : b.usable ? "built"
                             : "built, not usable here")
              << " (" << b.detail << ")\n";
    for (const auto& d : b.devices) std::cout << "  gpu " << d << "\n";
  }
  return 0;
}
