// The NCCL backend: one rank per process and GPU. Plain C++ against the CUDA runtime API and NCCL
// (no .cu files, so nvcc is not needed to build it). Files: this header (checks, type and op
// maps, the backend class), nccl_backend.cpp (point-to-point and collectives), nccl_ops.cpp
// (buffers and completion), nccl_launch.cpp (the job and launch_nccl).
//
// Job: under mpirun, MPI gives rank and size and broadcasts the ncclUniqueId (needs the Open MPI
// backend built too); without mpirun the world size is 1. The device is local rank % GPUs seen
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or SLURM_LOCALID; else the rank).
//
// Buffers: a pointer that cudaPointerGetAttributes reports as device (or managed) memory is used
// directly; any other (host) buffer is staged through device memory allocated stream-ordered
// (cudaMallocAsync) on a separate copy stream, so every exercise runs unchanged on vectors.
// Host-staged Avg is Sum then a division on the host (bit-identical to the threads and MPI
// backends); device buffers use ncclAvg (for floats NCCL pre-scales, so the last bit may differ).
//
// Completion: each operation records a CUDA event on the communication stream. Work::is_completed
// polls it (cudaEventQuery); wait() polls it too (with the failure notices of the MPI job and
// LaunchOptions::timeout), then copies staged results back on the copy stream. On a timeout or an
// asynchronous NCCL error the communicator is aborted (ncclCommAbort), so nothing hangs.
//
// Point-to-point: NCCL has no tags; messages between two ranks match in the order they were posted
// (tags are accepted and ignored). isend/irecv are queued and launched together in one
// ncclGroupStart/End when the program next waits or calls any other operation, so the usual
// "post all isends and irecvs, then wait" exchange cannot deadlock on the single stream. A blocking
// send/recv launches the queue with itself. A count mismatch is not detected (NCCL does not report
// it): test exchange code on the threads backend first. recv_any/irecv_any are refused with a
// dist::Error (NCCL's ncclRecv must name its peer; there is no any-source receive to map them to).
//
// Every CUDA and NCCL call is checked; failures throw dist::Error with the library's own string
// (cudaGetErrorString, ncclGetErrorString + ncclGetLastError) and file:line.
// Stats: point-to-point counted as on the threads backend; built-in collectives count calls only.
// sim_time() is 0.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dist/backend.hpp"
#include "nccl/nccl_device.hpp"

namespace dist::detail::nccl {

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* call, const char* file,
                                          int line) {
  std::ostringstream os;
  os << "CUDA call " << call << " failed: " << cudaGetErrorName(code) << ": "
     << cudaGetErrorString(code) << " (" << file << ":" << line << ")";
  throw Error(os.str());
}

[[noreturn]] inline void throw_nccl_error(ncclResult_t code, const char* call, const char* file,
                                          int line) {
  std::ostringstream os;
  os << "NCCL call " << call << " failed: " << ncclGetErrorString(code);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') os << " (" << last << ")";
  os << " (" << file << ":" << line << ")";
  throw Error(os.str());
}

#define DIST_CUDA_CHECK(call)                                     \
  do {                                                            \
    const cudaError_t dist_cuda_rc_ = (call);                     \
    if (dist_cuda_rc_ != cudaSuccess) {                           \
      throw_cuda_error(dist_cuda_rc_, #call, __FILE__, __LINE__); \
    }                                                             \
  } while (0)

#define DIST_NCCL_CHECK(call)                                     \
  do {                                                            \
    const ncclResult_t dist_nccl_rc_ = (call);                    \
    if (dist_nccl_rc_ != ncclSuccess) {                           \
      throw_nccl_error(dist_nccl_rc_, #call, __FILE__, __LINE__); \
    }                                                             \
  } while (0)

inline ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::Float32:
      return ncclFloat32;
    case DataType::Float64:
      return ncclFloat64;
    case DataType::Int32:
      return ncclInt32;
    case DataType::Int64:
      return ncclInt64;
    case DataType::BFloat16:
      return ncclBfloat16;  // NCCL reduces bf16 on the GPU in its own order
  }
  throw Error("nccl backend: unknown DataType");
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Product:
      return ncclProd;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Avg:
      return ncclAvg;
  }
  throw Error("nccl backend: unknown ReduceOp");
}

inline bool is_device_pointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // an unregistered host pointer may report an error: clear it
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

/// One operation in flight: its completion event, the device copies of host buffers, and what to
/// do once it completed (copy staged results back, divide for Avg).
struct NcclOp {
  struct Staged {
    void* device = nullptr;
    void* host_out = nullptr;  // copy back here after completion (nullptr: input only)
    std::size_t bytes = 0;
  };
  cudaEvent_t event = nullptr;
  bool launched = false;  // false while a queued isend/irecv waits for its group
  bool done = false;
  std::exception_ptr error;
  std::vector<Staged> staged;
  std::function<void()> after;  // runs on the host after the copy-back
  std::string what;
};

class NcclBackend;

class NcclWork : public WorkImpl {
 public:
  NcclWork(std::shared_ptr<NcclBackend> backend, std::shared_ptr<NcclOp> op)
      : backend_(std::move(backend)), op_(std::move(op)) {}
  bool is_completed() override;
  void wait() override;

 private:
  std::shared_ptr<NcclBackend> backend_;
  std::shared_ptr<NcclOp> op_;
};

class NcclBackend : public BackendImpl, public std::enable_shared_from_this<NcclBackend> {
 public:
  NcclBackend(int rank, int size, std::chrono::milliseconds timeout,
              const std::function<void()>& poll_failures)
      : rank_(rank), size_(size), timeout_(timeout), poll_failures_(poll_failures) {
    reset_stats();
  }

  /// Joins the communicator; id comes from rank 0 (broadcast by the caller).
  void init(const ncclUniqueId& id);

  /// End of launch: destroy cleanly after success, abort after a failure (nothing may hang).
  void shutdown(bool failed);
  ~NcclBackend() override {
    if (device_) device_->abandon();
    device_.reset();
    for (auto& [id, c] : comms_) ncclCommAbort(c);
    if (comm_ != nullptr) ncclCommAbort(comm_);
  }
  bool closed() const { return closed_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // ---- point-to-point -------------------------------------------------------------------------
  void send(const void* buf, std::size_t count, DataType type, int dst, int,
            const Group& g) override;
  void recv(void* buf, std::size_t count, DataType type, int src, int, const Group& g) override;
  Work isend(const void* buf, std::size_t count, DataType type, int dst, int,
             const Group& g) override;
  Work irecv(void* buf, std::size_t count, DataType type, int src, int, const Group& g) override;
  /// NCCL has no receive from any source: both throw dist::Error saying what to do instead.
  int recv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override;
  Work irecv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override;
  void barrier(const Group& g) override;

  // ---- collectives ----------------------------------------------------------------------------
  void broadcast(void* buf, std::size_t count, DataType type, int src, const Group& g) override;
  void reduce(void* buf, std::size_t count, DataType type, ReduceOp op_kind, int dst,
              const Group& g) override;
  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op,
                  const Group& g) override;
  Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op_kind,
                        const Group& g) override;
  void gather(const void* in, void* out, std::size_t count, DataType type, int dst,
              const Group& g) override;
  void all_gather(const void* in, void* out, std::size_t count, DataType type,
                  const Group& g) override;
  void scatter(const void* in, void* out, std::size_t count, DataType type, int src,
               const Group& g) override;
  void reduce_scatter(const void* in, void* out, std::size_t count, DataType type, ReduceOp op_kind,
                      const Group& g) override;

  // ---- groups: ncclCommSplit (nccl_backend.cpp) ----------------------------------------------
  std::shared_ptr<const GroupInfo> new_group(const std::vector<int>& ranks,
                                             const std::string& name) override;
  std::shared_ptr<const GroupInfo> split(int color, int key, const Group& parent,
                                         const std::string& name) override;

  Stats stats() override { return stats_; }
  void reset_stats() override { stats_ = fresh_stats(size_); }

  /// <dist/device.hpp> on this GPU (nccl_device.hpp), made on first use.
  DeviceImpl* device() override {
    if (!device_) device_ = std::make_unique<CudaDevice>(comm_, [this] { flush(); });
    return device_.get();
  }

  // ---- completion -----------------------------------------------------------------------------

  /// Launches the queued isend/irecv as one group (see the file comment).
  void flush();

  /// True once op's event completed (then its results are copied back). Throws on errors.
  bool test_op(NcclOp& op);
  void wait_op(NcclOp& op);

 private:
  struct QueuedP2P {
    bool is_send;
    void* device;
    std::size_t count;
    DataType type;
    int peer;
    std::shared_ptr<NcclOp> op;
    ncclComm_t comm;
  };

  ncclRedOp_t effective_op(ReduceOp op, bool host) const;

  std::shared_ptr<NcclOp> begin(const char* what);

  /// Device pointer for a user buffer: the buffer itself when it is device memory, else a
  /// stream-ordered device copy (filled from the host when `in`, copied back after when `out`).
  void* stage(NcclOp& op, void* buf, std::size_t bytes, bool in, bool out);
  void record(NcclOp& op);
  void complete(NcclOp& op);
  void check_async();
  void abort_comm();

  // peer: a rank of `comm`; world_peer: the same rank in the world (for the counters).
  std::shared_ptr<NcclOp> queue_p2p(bool is_send, void* buf, std::size_t count, DataType type,
                                    int peer, const char* fn, ncclComm_t comm, int world_peer);
  ncclComm_t comm_of(const Group& g) const;
  std::shared_ptr<const GroupInfo> split_impl(int color, int key, const Group& parent,
                                              const std::string& name, std::uint64_t list_hash);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::function<void()> poll_failures_;
  ncclComm_t comm_ = nullptr;
  std::map<int, ncclComm_t> comms_;  // the communicators of this process's groups, by group id
  int next_group_id_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  void* scratch_ = nullptr;
  std::set<void*> staged_;  // staging memory not yet freed (an op that never completed holds some)
  bool aborted_ = false;
  bool closed_ = false;
  std::vector<QueuedP2P> queue_;
  Stats stats_;
  std::unique_ptr<CudaDevice> device_;
};

}  // namespace dist::detail::nccl
