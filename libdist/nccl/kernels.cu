// The CUDA kernels behind <dist/device_kernels.hpp> on the NCCL backend (declared in kernels.hpp).
// Compiled by nvcc into one object that libdist/CMakeLists.txt adds to distlab_dist. Element-wise,
// one grid-stride loop each, so any n runs with a bounded grid.
#include <algorithm>

#include "kernels.hpp"

namespace dist::detail::nccl::kernels {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(std::size_t n) {
  const std::size_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min<std::size_t>(wanted, 4096));
}

__global__ void fill_kernel(float* x, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

__global__ void difference_kernel(const float* a, const float* b, float* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] - b[i];
  }
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    y[i] += alpha * x[i];
  }
}

}  // namespace

cudaError_t fill(cudaStream_t stream, float* x, std::size_t n, float value) {
  if (n == 0) return cudaSuccess;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, value);
  return cudaGetLastError();
}

cudaError_t difference(cudaStream_t stream, const float* a, const float* b, float* out,
                       std::size_t n) {
  if (n == 0) return cudaSuccess;
  difference_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, out, n);
  return cudaGetLastError();
}

cudaError_t axpy(cudaStream_t stream, float alpha, const float* x, float* y, std::size_t n) {
  if (n == 0) return cudaSuccess;
  axpy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(alpha, x, y, n);
  return cudaGetLastError();
}

}  // namespace dist::detail::nccl::kernels
