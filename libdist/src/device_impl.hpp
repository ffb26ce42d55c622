// The device of a backend with real GPUs: the CUDA mapping of <dist/device.hpp> on the NCCL
// backend (nccl/nccl_device.cpp). The threads backend has its simulated device instead
// (threads/device.cpp), which every public function of <dist/device.hpp> uses unless
// real_device() returns one. Handles (streams, events) are indices into the device's own tables;
// buffer ids are the device's own. Every CUDA/NCCL call is checked (file:line, the library's text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dist/device.hpp"
#include "dist/dist.hpp"

namespace dist::detail {

class DeviceImpl {
 public:
  virtual ~DeviceImpl() = default;

  virtual int stream_create(const std::string& name) = 0;
  virtual void stream_synchronize(int stream) = 0;
  virtual bool stream_query(int stream) = 0;
  virtual void stream_wait_event(int stream, int event) = 0;

  virtual int event_create(const std::string& name) = 0;
  virtual void event_record(int event, int stream) = 0;
  virtual bool event_query(int event) = 0;
  virtual void event_synchronize(int event) = 0;
  virtual double elapsed_seconds(int start, int end) = 0;
  virtual void device_synchronize() = 0;

  virtual std::uint64_t buffer_create(const std::string& name, std::size_t bytes, std::size_t align,
                                      void** data) = 0;
  virtual void buffer_destroy(std::uint64_t id) noexcept = 0;
  virtual void copy(int stream, device::detail::CopyKind kind, void* dst, const void* src,
                    std::size_t bytes) = 0;

  /// ncclAllReduce in place on `stream` (the world's communicator).
  virtual void all_reduce(int stream, void* buf, std::size_t count, DataType type, ReduceOp op) = 0;
  /// ncclAllGather on `stream` (`count`: elements of `in`).
  virtual void all_gather(int stream, const void* in, void* out, std::size_t count,
                          DataType type) = 0;
  /// ncclReduceScatter on `stream` (`count`: elements of `out`).
  virtual void reduce_scatter(int stream, const void* in, void* out, std::size_t count,
                              DataType type, ReduceOp op) = 0;

  /// The kernels of <dist/device_kernels.hpp>, compiled by nvcc (nccl/kernels.cu).
  virtual void fill(int stream, float* x, std::size_t count, float value) = 0;
  virtual void difference(int stream, const float* a, const float* b, float* out,
                          std::size_t count) = 0;
  virtual void axpy(int stream, float alpha, const float* x, float* y, std::size_t count) = 0;

  /// current_stream(): a stream named "compute" made on first use, unless set.
  int current_stream = -1;
};

/// The calling rank's real device (the NCCL backend's), or nullptr (threads backend, MPI, or
/// outside a launch).
DeviceImpl* real_device();

}  // namespace dist::detail
