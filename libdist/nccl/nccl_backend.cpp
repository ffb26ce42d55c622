// The NCCL backend: one rank per process and GPU. Plain C++ against the CUDA runtime API and NCCL
// (no .cu files, so nvcc is not needed to build it).
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
// it): test exchange code on the threads backend first.
//
// Every CUDA and NCCL call is checked; failures throw dist::Error with the library's own string
// (cudaGetErrorString, ncclGetErrorString + ncclGetLastError) and file:line.
// Stats: point-to-point counted as on the threads backend; built-in collectives count calls only.
// sim_time() is 0.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "dist/backend.hpp"
#ifdef DISTLAB_HAVE_MPI
#include "mpi/mpi_job.hpp"
#endif

namespace dist::detail {
namespace {

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << "CUDA call " << call << " failed: " << cudaGetErrorName(code) << ": "
     << cudaGetErrorString(code) << " (" << file << ":" << line << ")";
  throw Error(os.str());
}

[[noreturn]] void throw_nccl_error(ncclResult_t code, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << "NCCL call " << call << " failed: " << ncclGetErrorString(code);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') os << " (" << last << ")";
  os << " (" << file << ":" << line << ")";
  throw Error(os.str());
}

#define DIST_CUDA_CHECK(call)                                                 \
  do {                                                                        \
    const cudaError_t dist_cuda_rc_ = (call);                                 \
    if (dist_cuda_rc_ != cudaSuccess) {                                       \
      throw_cuda_error(dist_cuda_rc_, #call, __FILE__, __LINE__);             \
    }                                                                         \
  } while (0)

#define DIST_NCCL_CHECK(call)                                                 \
  do {                                                                        \
    const ncclResult_t dist_nccl_rc_ = (call);                                \
    if (dist_nccl_rc_ != ncclSuccess) {                                       \
      throw_nccl_error(dist_nccl_rc_, #call, __FILE__, __LINE__);             \
    }                                                                         \
  } while (0)

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
    case DataType::Int32: return ncclInt32;
    case DataType::Int64: return ncclInt64;
  }
  throw Error("nccl backend: unknown DataType");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Product: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
  }
  throw Error("nccl backend: unknown ReduceOp");
}

bool is_device_pointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // an unregistered host pointer may report an error: clear it
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

int local_rank(int rank) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return rank;
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
  void init(const ncclUniqueId& id) {
    DIST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DIST_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    DIST_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(std::int32_t)));
    DIST_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }

  /// End of launch: destroy cleanly after success, abort after a failure (nothing may hang).
  void shutdown(bool failed) {
    if (comm_ != nullptr) {
      if (failed || aborted_) {
        ncclCommAbort(comm_);
      } else {
        flush();
        DIST_CUDA_CHECK(cudaStreamSynchronize(stream_));
        DIST_NCCL_CHECK(ncclCommDestroy(comm_));
      }
      comm_ = nullptr;
    }
    if (!failed) {
      if (scratch_) cudaFree(scratch_);
      if (stream_) cudaStreamDestroy(stream_);
      if (copy_stream_) cudaStreamDestroy(copy_stream_);
    }
    scratch_ = nullptr;
    stream_ = copy_stream_ = nullptr;
    closed_ = true;
  }
  ~NcclBackend() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
  }
  bool closed() const { return closed_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // ---- point-to-point -------------------------------------------------------------------------
  void send(const void* buf, std::size_t count, DataType type, int dst, int) override {
    auto op = queue_p2p(true, const_cast<void*>(buf), count, type, dst, "send");
    flush();
    wait_op(*op);
  }
  void recv(void* buf, std::size_t count, DataType type, int src, int) override {
    auto op = queue_p2p(false, buf, count, type, src, "recv");
    flush();
    wait_op(*op);
  }
  Work isend(const void* buf, std::size_t count, DataType type, int dst, int) override {
    return Work(std::make_shared<NcclWork>(
        shared_from_this(), queue_p2p(true, const_cast<void*>(buf), count, type, dst, "isend")));
  }
  Work irecv(void* buf, std::size_t count, DataType type, int src, int) override {
    return Work(std::make_shared<NcclWork>(shared_from_this(),
                                           queue_p2p(false, buf, count, type, src, "irecv")));
  }

  void barrier() override {
    ++stats_.barriers;
    auto op = begin("barrier()");
    DIST_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_));
    record(*op);
    wait_op(*op);
  }

  // ---- collectives ----------------------------------------------------------------------------
  void broadcast(void* buf, std::size_t count, DataType type, int src) override {
    ++stats_.builtin_collectives;
    auto op = begin("broadcast");
    void* d = stage(*op, buf, count * size_of(type), rank_ == src, true);
    DIST_NCCL_CHECK(ncclBroadcast(d, d, count, nccl_type(type), src, comm_, stream_));
    record(*op);
    wait_op(*op);
  }

  void reduce(void* buf, std::size_t count, DataType type, ReduceOp op_kind, int dst) override {
    ++stats_.builtin_collectives;
    auto op = begin("reduce");
    const bool host = !is_device_pointer(buf);
    void* d = stage(*op, buf, count * size_of(type), true, rank_ == dst);
    DIST_NCCL_CHECK(ncclReduce(d, d, count, nccl_type(type), effective_op(op_kind, host), dst,
                               comm_, stream_));
    if (host && op_kind == ReduceOp::Avg && rank_ == dst) {
      op->after = [=, p = size_] { divide(buf, count, type, p); };
    }
    record(*op);
    wait_op(*op);
  }

  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) override {
    all_reduce_async(buf, count, type, op).wait();
  }

  Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op_kind) override {
    ++stats_.builtin_collectives;
    auto op = begin("all_reduce");
    const bool host = !is_device_pointer(buf);
    void* d = stage(*op, buf, count * size_of(type), true, true);
    DIST_NCCL_CHECK(
        ncclAllReduce(d, d, count, nccl_type(type), effective_op(op_kind, host), comm_, stream_));
    if (host && op_kind == ReduceOp::Avg) {
      op->after = [=, p = size_] { divide(buf, count, type, p); };
    }
    record(*op);
    return Work(std::make_shared<NcclWork>(shared_from_this(), op));
  }

  void gather(const void* in, void* out, std::size_t count, DataType type, int dst) override {
    ++stats_.builtin_collectives;
    auto op = begin("gather");
    const std::size_t bytes = count * size_of(type);
    void* din = stage(*op, const_cast<void*>(in), bytes, true, false);
    if (rank_ == dst) {
      auto* dout = static_cast<char*>(stage(*op, out, bytes * size_, false, true));
      if (bytes > 0) {
        DIST_CUDA_CHECK(cudaMemcpyAsync(dout + bytes * rank_, din, bytes, cudaMemcpyDeviceToDevice,
                                        stream_));
      }
      DIST_NCCL_CHECK(ncclGroupStart());
      for (int q = 0; q < size_; ++q) {
        if (q != rank_) DIST_NCCL_CHECK(ncclRecv(dout + bytes * q, count, nccl_type(type), q, comm_, stream_));
      }
      DIST_NCCL_CHECK(ncclGroupEnd());
    } else {
      DIST_NCCL_CHECK(ncclSend(din, count, nccl_type(type), dst, comm_, stream_));
    }
    record(*op);
    wait_op(*op);
  }

  void all_gather(const void* in, void* out, std::size_t count, DataType type) override {
    ++stats_.builtin_collectives;
    auto op = begin("all_gather");
    const std::size_t bytes = count * size_of(type);
    void* din = stage(*op, const_cast<void*>(in), bytes, true, false);
    void* dout = stage(*op, out, bytes * size_, false, true);
    DIST_NCCL_CHECK(ncclAllGather(din, dout, count, nccl_type(type), comm_, stream_));
    record(*op);
    wait_op(*op);
  }

  void scatter(const void* in, void* out, std::size_t count, DataType type, int src) override {
    ++stats_.builtin_collectives;
    auto op = begin("scatter");
    const std::size_t bytes = count * size_of(type);
    void* dout = stage(*op, out, bytes, false, true);
    if (rank_ == src) {
      const auto* din = static_cast<const char*>(stage(*op, const_cast<void*>(in), bytes * size_, true, false));
      if (bytes > 0) {
        DIST_CUDA_CHECK(cudaMemcpyAsync(dout, din + bytes * rank_, bytes, cudaMemcpyDeviceToDevice,
                                        stream_));
      }
      DIST_NCCL_CHECK(ncclGroupStart());
      for (int q = 0; q < size_; ++q) {
        if (q != rank_) DIST_NCCL_CHECK(ncclSend(din + bytes * q, count, nccl_type(type), q, comm_, stream_));
      }
      DIST_NCCL_CHECK(ncclGroupEnd());
    } else {
      DIST_NCCL_CHECK(ncclRecv(dout, count, nccl_type(type), src, comm_, stream_));
    }
    record(*op);
    wait_op(*op);
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, DataType type,
                      ReduceOp op_kind) override {
    ++stats_.builtin_collectives;
    auto op = begin("reduce_scatter");
    const std::size_t bytes = count * size_of(type);
    const bool host = !is_device_pointer(out);
    void* din = stage(*op, const_cast<void*>(in), bytes * size_, true, false);
    void* dout = stage(*op, out, bytes, false, true);
    DIST_NCCL_CHECK(ncclReduceScatter(din, dout, count, nccl_type(type),
                                      effective_op(op_kind, host), comm_, stream_));
    if (host && op_kind == ReduceOp::Avg) {
      op->after = [=, p = size_] { divide(out, count, type, p); };
    }
    record(*op);
    wait_op(*op);
  }

  Stats stats() override { return stats_; }
  void reset_stats() override { stats_ = fresh_stats(size_); }

  // ---- completion -----------------------------------------------------------------------------

  /// Launches the queued isend/irecv as one group (see the file comment).
  void flush() {
    if (queue_.empty()) return;
    auto queued = std::move(queue_);
    queue_.clear();
    DIST_NCCL_CHECK(ncclGroupStart());
    for (const auto& q : queued) {
      if (q.is_send) {
        DIST_NCCL_CHECK(ncclSend(q.device, q.count, nccl_type(q.type), q.peer, comm_, stream_));
      } else {
        DIST_NCCL_CHECK(ncclRecv(q.device, q.count, nccl_type(q.type), q.peer, comm_, stream_));
      }
    }
    DIST_NCCL_CHECK(ncclGroupEnd());
    for (const auto& q : queued) record(*q.op);
  }

  /// True once op's event completed (then its results are copied back). Throws on errors.
  bool test_op(NcclOp& op) {
    if (op.done) return true;
    if (aborted_) {
      throw Error("rank " + std::to_string(rank_) + ": " + op.what +
                  ": the NCCL communicator was aborted after an earlier failure");
    }
    if (!op.launched) flush();
    const cudaError_t rc = cudaEventQuery(op.event);
    if (rc == cudaErrorNotReady) {
      check_async();
      return false;
    }
    if (rc != cudaSuccess) throw_cuda_error(rc, "cudaEventQuery", __FILE__, __LINE__);
    complete(op);
    return true;
  }

  void wait_op(NcclOp& op) {
    const auto start = std::chrono::steady_clock::now();
    unsigned spins = 0;
    while (!test_op(op)) {
      if (std::chrono::steady_clock::now() - start > timeout_) {
        abort_comm();
        std::ostringstream os;
        os << "rank " << rank_ << ": " << op.what << " waited longer than the timeout ("
           << timeout_.count()
           << " ms) on the nccl backend; the NCCL communicator was aborted. There is no deadlock "
              "diagnosis here: run the same program with --backend threads, which names the call "
              "every rank is blocked in. Common causes: a collective only some ranks called; "
              "point-to-point messages posted in a different order on the two ranks (NCCL has no "
              "tags). If the other ranks were only slow, raise LaunchOptions::timeout.";
        throw TimeoutError(os.str());
      }
      if (poll_failures_) {
        try {
          poll_failures_();
        } catch (...) {
          abort_comm();
          throw;
        }
      }
      if (++spins < 2000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    if (op.error) std::rethrow_exception(op.error);
  }

 private:
  struct QueuedP2P {
    bool is_send;
    void* device;
    std::size_t count;
    DataType type;
    int peer;
    std::shared_ptr<NcclOp> op;
  };

  ncclRedOp_t effective_op(ReduceOp op, bool host) const {
    // Host-staged Avg: Sum on the GPU, exact division on the host afterwards.
    return nccl_op(host && op == ReduceOp::Avg ? ReduceOp::Sum : op);
  }

  std::shared_ptr<NcclOp> begin(const char* what) {
    if (aborted_) {
      throw Error("rank " + std::to_string(rank_) + ": " + what +
                  ": the NCCL communicator was aborted after an earlier failure");
    }
    flush();  // keep program order: queued point-to-point goes first
    auto op = std::make_shared<NcclOp>();
    op->what = what;
    return op;
  }

  /// Device pointer for a user buffer: the buffer itself when it is device memory, else a
  /// stream-ordered device copy (filled from the host when `in`, copied back after when `out`).
  void* stage(NcclOp& op, void* buf, std::size_t bytes, bool in, bool out) {
    if (bytes == 0) return buf;
    if (is_device_pointer(buf)) return buf;
    void* d = nullptr;
    DIST_CUDA_CHECK(cudaMallocAsync(&d, bytes, copy_stream_));
    if (in) {
      DIST_CUDA_CHECK(cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, copy_stream_));
    }
    DIST_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));  // ready before the comm stream uses it
    op.staged.push_back({d, out ? buf : nullptr, bytes});
    return d;
  }

  void record(NcclOp& op) {
    DIST_CUDA_CHECK(cudaEventCreateWithFlags(&op.event, cudaEventDisableTiming));
    DIST_CUDA_CHECK(cudaEventRecord(op.event, stream_));
    op.launched = true;
  }

  void complete(NcclOp& op) {
    op.done = true;
    try {
      for (const auto& s : op.staged) {
        if (s.host_out) {
          DIST_CUDA_CHECK(cudaMemcpyAsync(s.host_out, s.device, s.bytes, cudaMemcpyDeviceToHost,
                                          copy_stream_));
        }
        DIST_CUDA_CHECK(cudaFreeAsync(s.device, copy_stream_));
      }
      DIST_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
      op.staged.clear();
      if (op.event) DIST_CUDA_CHECK(cudaEventDestroy(op.event));
      op.event = nullptr;
      if (op.after) op.after();
    } catch (...) {
      op.error = std::current_exception();
    }
  }

  void check_async() {
    ncclResult_t async = ncclSuccess;
    DIST_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      abort_comm();
      throw_nccl_error(async, "ncclCommGetAsyncError", __FILE__, __LINE__);
    }
  }

  void abort_comm() {
    if (comm_ != nullptr && !aborted_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    aborted_ = true;
  }

  std::shared_ptr<NcclOp> queue_p2p(bool is_send, void* buf, std::size_t count, DataType type,
                                    int peer, const char* fn) {
    if (aborted_) {
      throw Error("rank " + std::to_string(rank_) + ": " + fn +
                  ": the NCCL communicator was aborted after an earlier failure");
    }
    auto op = std::make_shared<NcclOp>();
    op->what = std::string(fn) + (is_send ? "(dst=" : "(src=") + std::to_string(peer) + ", " +
               std::to_string(count) + " x " + to_string(type) + ")";
    const std::size_t bytes = count * size_of(type);
    void* d = stage(*op, buf, bytes, is_send, !is_send);
    queue_.push_back({is_send, d, count, type, peer, op});
    count_message(stats_, is_send ? Direction::Sent : Direction::Received, peer, bytes);
    return op;
  }

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::function<void()> poll_failures_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  void* scratch_ = nullptr;
  bool aborted_ = false;
  bool closed_ = false;
  std::vector<QueuedP2P> queue_;
  Stats stats_;
};

bool NcclWork::is_completed() {
  check_work_in_launch(backend_->closed() && !op_->done, op_->what);
  return backend_->test_op(*op_);
}

void NcclWork::wait() {
  check_work_in_launch(backend_->closed() && !op_->done, op_->what);
  backend_->wait_op(*op_);
}

}  // namespace

void launch_nccl(const LaunchOptions& options, const std::function<void()>& body) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    std::string why = rc != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc)
                                        : std::string("cudaGetDeviceCount found 0 devices");
    cudaGetLastError();
    throw Error("--backend nccl: no CUDA GPU visible (" + why +
                "): run on a machine with an NVIDIA GPU and driver, or use --backend threads or mpi");
  }

  int rank = 0, size = 1;
  std::function<void()> poll_failures;
#ifdef DISTLAB_HAVE_MPI
  std::unique_ptr<mpi::MpiJob> job;
  if (dist::started_by_mpirun()) {
    mpi::ensure_initialized();
    job = std::make_unique<mpi::MpiJob>(options.timeout, "nccl");
    rank = job->rank();
    size = job->size();
    poll_failures = [j = job.get()] { j->poll_failures(); };
  }
#else
  if (dist::started_by_mpirun()) {
    throw Error("--backend nccl under mpirun needs the Open MPI backend too (it gives ranks and "
                "broadcasts the NCCL id): install libopenmpi-dev, reconfigure and rebuild");
  }
#endif
  if (!dist::started_by_mpirun() && options.world_size != 1) {
    throw Error("--backend nccl runs one rank per process and GPU, started by mpirun: run `mpirun -np " +
                std::to_string(options.world_size) +
                " PROGRAM --backend nccl ...`; without mpirun only --world-size 1 runs");
  }

  DIST_CUDA_CHECK(cudaSetDevice(local_rank(rank) % devices));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0) DIST_NCCL_CHECK(ncclGetUniqueId(&id));
#ifdef DISTLAB_HAVE_MPI
  if (job && size > 1) {
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ibcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, job->comm(), &req));
    job->wait(req, "broadcast of the NCCL unique id");
  }
#endif
  auto backend = std::make_shared<NcclBackend>(rank, size, options.timeout, poll_failures);
  backend->init(id);

  LaunchOptions effective = options;
  effective.world_size = size;
  effective.backend = Backend::Nccl;
  RankOutcome outcome = run_rank_body(*backend, effective, body);
  try {
    backend->shutdown(outcome.error != nullptr);
  } catch (...) {
    if (!outcome.error) outcome = {std::current_exception(), true};
  }
#ifdef DISTLAB_HAVE_MPI
  if (job) {
    mpi::conclude(*job, outcome);
    return;
  }
#endif
  if (outcome.error) std::rethrow_exception(with_rank_prefix(rank, outcome.error));
}

}  // namespace dist::detail
