// What this build contains (see backend_info.hpp). Compiled always; the MPI and NCCL parts only
// when those backends are built (DISTLAB_HAVE_MPI / DISTLAB_HAVE_NCCL).
#include "backend_info.hpp"

#include <cstdio>
#include <string>

#ifdef DISTLAB_HAVE_MPI
#include <mpi.h>
#endif
#ifdef DISTLAB_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace dist::detail {

std::vector<BackendInfo> backend_info() {
  std::vector<BackendInfo> out;
  out.push_back({"threads", true, true, "thread-simulated ranks (always built)", {}});

  BackendInfo m{"mpi", false, false, "", {}};
#ifdef DISTLAB_HAVE_MPI
  {
    // Both calls are allowed before MPI_Init.
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0, major = 0, minor = 0;
    MPI_Get_library_version(lib, &len);
    MPI_Get_version(&major, &minor);
    std::string text(lib, static_cast<std::size_t>(len));
    if (auto nl = text.find_first_of("\r\n,"); nl != std::string::npos) text.resize(nl);
    m.built = m.usable = true;
    m.detail = text + " (MPI standard " + std::to_string(major) + "." + std::to_string(minor) + ")";
  }
#else
  m.detail =
      "Open MPI was not found when CMake configured (Debian: apt-get install "
      "libopenmpi-dev openmpi-bin, then reconfigure) or DISTLAB_WITH_MPI=OFF";
#endif
  out.push_back(m);

  BackendInfo n{"nccl", false, false, "", {}};
#ifdef DISTLAB_HAVE_NCCL
  {
    n.built = true;
    int nccl = 0, runtime = 0, driver = 0;
    ncclGetVersion(&nccl);
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    const int nccl_major = nccl >= 10000 ? nccl / 10000 : nccl / 1000;
    const int nccl_minor = nccl >= 10000 ? (nccl % 10000) / 100 : (nccl % 1000) / 100;
    const int nccl_patch = nccl % 100;
    n.detail = "NCCL " + std::to_string(nccl_major) + "." + std::to_string(nccl_minor) + "." +
               std::to_string(nccl_patch) + ", CUDA runtime " + std::to_string(runtime / 1000) +
               "." + std::to_string((runtime % 1000) / 10);
    n.detail += driver > 0 ? ", CUDA driver " + std::to_string(driver / 1000) + "." +
                                 std::to_string((driver % 1000) / 10)
                           : ", no CUDA driver";
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
      n.detail += std::string("; no GPU usable: cudaGetDeviceCount: ") + cudaGetErrorString(rc);
      cudaGetLastError();  // clear the sticky error
    } else if (count == 0) {
      n.detail += "; no GPU seen";
    } else {
      n.usable = true;
      for (int d = 0; d < count; ++d) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
        char line[320];
        std::snprintf(line, sizeof line, "%d: %s, %.1f GiB, compute capability %d.%d", d, prop.name,
                      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024), prop.major,
                      prop.minor);
        n.devices.emplace_back(line);
      }
    }
  }
#else
  n.detail =
      "the CUDA toolkit with NCCL was not found when CMake configured (nvcc, "
      "cuda_runtime_api.h, nccl.h and libnccl under /usr/local/cuda or CUDAToolkit_ROOT) or "
      "DISTLAB_WITH_NCCL=OFF";
#endif
  out.push_back(n);
  return out;
}

}  // namespace dist::detail
