// The CUDA mapping of <dist/device.hpp> (see nccl_device.hpp): every call checked, the CUDA or
// NCCL error string and file:line in the dist::Error it throws.
#include "nccl/nccl_device.hpp"

#include "nccl/kernels.hpp"
#include "nccl/nccl_backend.hpp"

namespace dist::detail::nccl {

CudaDevice::CudaDevice(ncclComm_t comm, std::function<void()> before_collective)
    : comm_(comm), before_collective_(std::move(before_collective)) {}

CudaDevice::~CudaDevice() {
  // Destroying a stream or an event with work pending is allowed: CUDA releases them when the
  // work is done. Memory is freed after the device is idle (never after a failure: abandon()).
  if (abandoned_) return;
  cudaDeviceSynchronize();
  for (auto& [id, p] : buffers_) cudaFree(p);
  for (auto& e : events_) cudaEventDestroy(e.event);
  for (cudaStream_t s : streams_) cudaStreamDestroy(s);
}

cudaStream_t CudaDevice::stream_at(int handle) const {
  if (handle < 0 || static_cast<std::size_t>(handle) >= streams_.size()) {
    throw Error("invalid stream handle (streams belong to the rank that created them)");
  }
  return streams_[static_cast<std::size_t>(handle)];
}

CudaDevice::EventSlot& CudaDevice::event_at(int handle) {
  if (handle < 0 || static_cast<std::size_t>(handle) >= events_.size()) {
    throw Error("invalid event handle (events belong to the rank that created them)");
  }
  return events_[static_cast<std::size_t>(handle)];
}

int CudaDevice::stream_create(const std::string& name) {
  cudaStream_t s = nullptr;
  DIST_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  streams_.push_back(s);
  stream_names_.push_back(name);
  return static_cast<int>(streams_.size() - 1);
}

void CudaDevice::stream_synchronize(int stream) {
  DIST_CUDA_CHECK(cudaStreamSynchronize(stream_at(stream)));
}

bool CudaDevice::stream_query(int stream) {
  const cudaError_t rc = cudaStreamQuery(stream_at(stream));
  if (rc == cudaErrorNotReady) return false;
  if (rc != cudaSuccess) throw_cuda_error(rc, "cudaStreamQuery", __FILE__, __LINE__);
  return true;
}

void CudaDevice::stream_wait_event(int stream, int event) {
  EventSlot& e = event_at(event);
  if (!e.recorded) return;  // waiting on an event never recorded orders nothing
  DIST_CUDA_CHECK(cudaStreamWaitEvent(stream_at(stream), e.event, 0));
}

int CudaDevice::event_create(const std::string& name) {
  EventSlot e;
  e.name = name;
  DIST_CUDA_CHECK(cudaEventCreate(&e.event));
  events_.push_back(std::move(e));
  return static_cast<int>(events_.size() - 1);
}

void CudaDevice::event_record(int event, int stream) {
  EventSlot& e = event_at(event);
  DIST_CUDA_CHECK(cudaEventRecord(e.event, stream_at(stream)));
  e.recorded = true;
}

bool CudaDevice::event_query(int event) {
  EventSlot& e = event_at(event);
  if (!e.recorded) return true;
  const cudaError_t rc = cudaEventQuery(e.event);
  if (rc == cudaErrorNotReady) return false;
  if (rc != cudaSuccess) throw_cuda_error(rc, "cudaEventQuery", __FILE__, __LINE__);
  return true;
}

void CudaDevice::event_synchronize(int event) {
  EventSlot& e = event_at(event);
  if (e.recorded) DIST_CUDA_CHECK(cudaEventSynchronize(e.event));
}

double CudaDevice::elapsed_seconds(int start, int end) {
  EventSlot& a = event_at(start);
  EventSlot& b = event_at(end);
  if (!a.recorded || !b.recorded) {
    throw Error("elapsed_seconds: event '" + (a.recorded ? b.name : a.name) +
                "' was never recorded");
  }
  float ms = 0;
  DIST_CUDA_CHECK(cudaEventElapsedTime(&ms, a.event, b.event));
  return static_cast<double>(ms) * 1e-3;
}

void CudaDevice::device_synchronize() { DIST_CUDA_CHECK(cudaDeviceSynchronize()); }

std::uint64_t CudaDevice::buffer_create(const std::string& /*name*/, std::size_t bytes,
                                        std::size_t /*align*/, void** data) {
  void* p = nullptr;
  if (bytes > 0) {
    DIST_CUDA_CHECK(cudaMalloc(&p, bytes));  // 256-byte aligned: every element type
    DIST_CUDA_CHECK(cudaMemset(p, 0, bytes));
  }
  const std::uint64_t id = next_buffer_++;
  buffers_[id] = p;
  *data = p;
  return id;
}

void CudaDevice::buffer_destroy(std::uint64_t id) noexcept {
  const auto it = buffers_.find(id);
  if (it == buffers_.end()) return;
  // cudaFree waits for the device's work on the memory to finish (it synchronizes).
  if (it->second && !abandoned_) cudaFree(it->second);
  buffers_.erase(it);
}

void CudaDevice::copy(int stream, device::detail::CopyKind kind, void* dst, const void* src,
                      std::size_t bytes) {
  const cudaMemcpyKind k = kind == device::detail::CopyKind::HostToDevice ? cudaMemcpyHostToDevice
                           : kind == device::detail::CopyKind::DeviceToHost
                               ? cudaMemcpyDeviceToHost
                               : cudaMemcpyDeviceToDevice;
  if (bytes == 0) return;
  DIST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, stream_at(stream)));
}

void CudaDevice::all_reduce(int stream, void* buf, std::size_t count, DataType type, ReduceOp op) {
  if (before_collective_) before_collective_();
  DIST_NCCL_CHECK(
      ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), comm_, stream_at(stream)));
}

void CudaDevice::all_gather(int stream, const void* in, void* out, std::size_t count,
                            DataType type) {
  if (before_collective_) before_collective_();
  DIST_NCCL_CHECK(ncclAllGather(in, out, count, nccl_type(type), comm_, stream_at(stream)));
}

void CudaDevice::reduce_scatter(int stream, const void* in, void* out, std::size_t count,
                                DataType type, ReduceOp op) {
  if (before_collective_) before_collective_();
  DIST_NCCL_CHECK(
      ncclReduceScatter(in, out, count, nccl_type(type), nccl_op(op), comm_, stream_at(stream)));
}

void CudaDevice::fill(int stream, float* x, std::size_t count, float value) {
  DIST_CUDA_CHECK(kernels::fill(stream_at(stream), x, count, value));
}

void CudaDevice::difference(int stream, const float* a, const float* b, float* out,
                            std::size_t count) {
  DIST_CUDA_CHECK(kernels::difference(stream_at(stream), a, b, out, count));
}

void CudaDevice::axpy(int stream, float alpha, const float* x, float* y, std::size_t count) {
  DIST_CUDA_CHECK(kernels::axpy(stream_at(stream), alpha, x, y, count));
}

}  // namespace dist::detail::nccl
