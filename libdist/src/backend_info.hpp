// Private to distlab: which engines this build of distlab::dist contains, with library versions,
// for `distlab_info` (dist/tools/) and `./distlab doctor`.
#pragma once

#include <string>
#include <vector>

namespace dist::detail {

struct BackendInfo {
  std::string name;                  // "threads", "mpi", "nccl"
  bool built = false;                // compiled into this build
  bool usable = false;               // built and able to run here (NCCL: a GPU is visible)
  std::string detail;                // versions when built; why not otherwise
  std::vector<std::string> devices;  // NCCL: the GPUs seen ("0: NVIDIA H100 80GB HBM3, 79.1 GiB")
};

/// One entry per backend, in the order threads, mpi, nccl. Does not initialise MPI.
std::vector<BackendInfo> backend_info();

}  // namespace dist::detail
