// dist::device kernels: a few element-wise kernels that run on both devices of <dist/device.hpp>.
//
// On the simulated device (threads backend) each is a launch() of a kernel named after the
// function, taking `sim_seconds` of the stream's simulated time and declaring what it reads and
// writes (so the stream-race detector checks it). On a CUDA device (NCCL backend) each is a real
// kernel compiled by nvcc (libdist/nccl/kernels.cu) enqueued on the stream, and `sim_seconds` is
// ignored (the GPU takes what it takes). Ranges are in elements; they must lie inside the buffers.
// `name` names the kernel in race reports and traces (default: the function's name).
#pragma once

#include <cstddef>
#include <string>

#include "dist/device.hpp"

namespace dist::device {

/// x[i] = value for every element of x.
void fill(DeviceBuffer<float>& x, float value, Stream& s, double sim_seconds = 0,
          const std::string& name = "fill");

/// out[i] = a[i] - b[i] for i in [offset, offset + count) (a, b, out of equal sizes; out may not
/// be a or b).
void difference(const DeviceBuffer<float>& a, const DeviceBuffer<float>& b,
                DeviceBuffer<float>& out, std::size_t offset, std::size_t count, Stream& s,
                double sim_seconds = 0, const std::string& name = "difference");

/// y[i] += alpha * x[i] for every element (x, y of equal sizes): an SGD step is
/// axpy(-learning_rate, grads, params).
void axpy(float alpha, const DeviceBuffer<float>& x, DeviceBuffer<float>& y, Stream& s,
          double sim_seconds = 0, const std::string& name = "axpy");

}  // namespace dist::device
