// The CUDA mapping of <dist/device.hpp> on the NCCL backend (one rank per process and GPU):
//   Stream            cudaStreamCreateWithFlags(cudaStreamNonBlocking)
//   Stream::synchronize / query / wait_event    cudaStreamSynchronize / cudaStreamQuery /
//                                               cudaStreamWaitEvent
//   Event             cudaEventCreate (timing on, for elapsed_seconds)
//   Event::record / query / synchronize         cudaEventRecord / cudaEventQuery /
//                                               cudaEventSynchronize
//   elapsed_seconds   cudaEventElapsedTime / 1000
//   device_synchronize  cudaDeviceSynchronize
//   DeviceBuffer      cudaMalloc (zeroed with cudaMemset), cudaFree
//   memcpy_async      cudaMemcpyAsync
//   all_reduce(buf, stream)  ncclAllReduce in place on the stream (the world's communicator)
//   all_gather(in, out, stream), reduce_scatter(in, out, stream)  ncclAllGather,
//                            ncclReduceScatter on the stream (the world's communicator)
//   fill, difference, axpy   the nvcc kernels of kernels.cu on the stream
// A kernel with a host body (dist::device::launch) cannot run here: it throws dist::Error naming
// <dist/device_kernels.hpp>. The cost model (DeviceModel) is the simulated device's: ignored.
// An Event never recorded is complete (query() true, synchronize() returns), as on CUDA.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "src/device_impl.hpp"

namespace dist::detail::nccl {

/// Whether a stream has finished all its work (cudaStreamQuery; a null stream has none). A
/// stream that is still busy, or in error, is not idle.
inline bool stream_idle(cudaStream_t s) {
  return s == nullptr || cudaStreamQuery(s) == cudaSuccess;
}

class CudaDevice final : public DeviceImpl {
 public:
  /// `comm`: the world's communicator; `before_collective`: what the backend must do before a
  /// collective is enqueued (launch its queued isend/irecv).
  CudaDevice(ncclComm_t comm, std::function<void()> before_collective);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;
  /// After a failure: the destructor then neither waits for the device nor frees its memory
  /// (work stuck in an aborted collective would never let it).
  void abandon() { abandoned_ = true; }
  /// Whether every stream of the device has finished its work (stream_idle).
  bool idle() const {
    for (cudaStream_t s : streams_) {
      if (!stream_idle(s)) return false;
    }
    return true;
  }

  int stream_create(const std::string& name) override;
  void stream_synchronize(int stream) override;
  bool stream_query(int stream) override;
  void stream_wait_event(int stream, int event) override;
  int event_create(const std::string& name) override;
  void event_record(int event, int stream) override;
  bool event_query(int event) override;
  void event_synchronize(int event) override;
  double elapsed_seconds(int start, int end) override;
  void device_synchronize() override;
  std::uint64_t buffer_create(const std::string& name, std::size_t bytes, std::size_t align,
                              void** data) override;
  void buffer_destroy(std::uint64_t id) noexcept override;
  void copy(int stream, device::detail::CopyKind kind, void* dst, const void* src,
            std::size_t bytes) override;
  void all_reduce(int stream, void* buf, std::size_t count, DataType type, ReduceOp op) override;
  void all_gather(int stream, const void* in, void* out, std::size_t count, DataType type) override;
  void reduce_scatter(int stream, const void* in, void* out, std::size_t count, DataType type,
                      ReduceOp op) override;
  void fill(int stream, float* x, std::size_t count, float value) override;
  void difference(int stream, const float* a, const float* b, float* out,
                  std::size_t count) override;
  void axpy(int stream, float alpha, const float* x, float* y, std::size_t count) override;

 private:
  struct EventSlot {
    cudaEvent_t event = nullptr;
    std::string name;
    bool recorded = false;
  };
  cudaStream_t stream_at(int handle) const;
  EventSlot& event_at(int handle);

  ncclComm_t comm_;
  std::function<void()> before_collective_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::string> stream_names_;
  std::vector<EventSlot> events_;
  std::map<std::uint64_t, void*> buffers_;
  std::uint64_t next_buffer_ = 1;
  bool abandoned_ = false;
};

}  // namespace dist::detail::nccl
