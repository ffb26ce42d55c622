// The CUDA kernels of <dist/device_kernels.hpp> (kernels.cu, compiled by nvcc): each launcher
// enqueues its kernel on `stream` (a grid-stride loop over n elements; nothing for n = 0) and
// returns cudaGetLastError(), for the caller to check.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace dist::detail::nccl::kernels {

cudaError_t fill(cudaStream_t stream, float* x, std::size_t n, float value);
cudaError_t difference(cudaStream_t stream, const float* a, const float* b, float* out,
                       std::size_t n);
cudaError_t axpy(cudaStream_t stream, float alpha, const float* x, float* y, std::size_t n);

}  // namespace dist::detail::nccl::kernels
