// The NCCL backend's communicator, buffers and completion: staging host buffers through device
// memory, CUDA events per operation, the grouped launch of queued isend/irecv, waits with the
// timeout and the MPI job's failure notices, and aborting the communicator (see nccl_backend.hpp).
#include <thread>

#include "nccl/nccl_backend.hpp"

namespace dist::detail::nccl {

void NcclBackend::init(const ncclUniqueId& id) {
  DIST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DIST_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  DIST_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(std::int32_t)));
  DIST_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
}

void NcclBackend::shutdown(bool failed) {
  const bool failure = failed || aborted_;
  // The device's streams, events and buffers go before the communicator.
  if (!failure) device_.reset();
  for (auto& [id, c] : comms_) {
    if (failure) {
      ncclCommAbort(c);
    } else {
      ncclCommDestroy(c);
    }
  }
  comms_.clear();
  if (comm_ != nullptr) {
    if (failure) {
      ncclCommAbort(comm_);
    } else {
      flush();
      DIST_CUDA_CHECK(cudaStreamSynchronize(stream_));
      DIST_NCCL_CHECK(ncclCommDestroy(comm_));
    }
    comm_ = nullptr;
  }
  // After a failure, work stuck in an aborted collective may never finish, and freeing memory
  // waits for the whole device. When every stream is idle (the failure came from the host or was
  // refused by NCCL, or the abort ended NCCL's kernels), nothing can still use the memory:
  // everything is released as after a success, the staging of operations that never completed
  // too. Otherwise it is left (a process that failed this way should exit).
  const bool release = !failure || (stream_idle(stream_) && stream_idle(copy_stream_) &&
                                    (!device_ || device_->idle()));
  if (device_ && !release) device_->abandon();
  device_.reset();
  if (release) {
    for (void* p : staged_) cudaFree(p);  // of ops that failed before completing
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    if (copy_stream_) cudaStreamDestroy(copy_stream_);
  }
  staged_.clear();
  cudaGetLastError();  // a query's cudaErrorNotReady is not an error of this launch
  scratch_ = nullptr;
  stream_ = copy_stream_ = nullptr;
  closed_ = true;
}

void NcclBackend::flush() {
  if (queue_.empty()) return;
  auto queued = std::move(queue_);
  queue_.clear();
  DIST_NCCL_CHECK(ncclGroupStart());
  for (const auto& q : queued) {
    if (q.is_send) {
      DIST_NCCL_CHECK(ncclSend(q.device, q.count, nccl_type(q.type), q.peer, q.comm, stream_));
    } else {
      DIST_NCCL_CHECK(ncclRecv(q.device, q.count, nccl_type(q.type), q.peer, q.comm, stream_));
    }
  }
  DIST_NCCL_CHECK(ncclGroupEnd());
  for (const auto& q : queued) record(*q.op);
}

bool NcclBackend::test_op(NcclOp& op) {
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

void NcclBackend::wait_op(NcclOp& op) {
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

ncclRedOp_t NcclBackend::effective_op(ReduceOp op, bool host) const {
  // Host-staged Avg: Sum on the GPU, exact division on the host afterwards.
  return nccl_op(host && op == ReduceOp::Avg ? ReduceOp::Sum : op);
}

std::shared_ptr<NcclOp> NcclBackend::begin(const char* what) {
  if (aborted_) {
    throw Error("rank " + std::to_string(rank_) + ": " + what +
                ": the NCCL communicator was aborted after an earlier failure");
  }
  flush();  // keep program order: queued point-to-point goes first
  auto op = std::make_shared<NcclOp>();
  op->what = what;
  return op;
}

void* NcclBackend::stage(NcclOp& op, void* buf, std::size_t bytes, bool in, bool out) {
  if (bytes == 0) return buf;
  if (is_device_pointer(buf)) return buf;
  void* d = nullptr;
  DIST_CUDA_CHECK(cudaMallocAsync(&d, bytes, copy_stream_));
  if (in) {
    DIST_CUDA_CHECK(cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, copy_stream_));
  }
  DIST_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));  // ready before the comm stream uses it
  staged_.insert(d);
  op.staged.push_back({d, out ? buf : nullptr, bytes});
  return d;
}

void NcclBackend::record(NcclOp& op) {
  DIST_CUDA_CHECK(cudaEventCreateWithFlags(&op.event, cudaEventDisableTiming));
  DIST_CUDA_CHECK(cudaEventRecord(op.event, stream_));
  op.launched = true;
}

void NcclBackend::complete(NcclOp& op) {
  op.done = true;
  try {
    for (const auto& s : op.staged) {
      if (s.host_out) {
        DIST_CUDA_CHECK(
            cudaMemcpyAsync(s.host_out, s.device, s.bytes, cudaMemcpyDeviceToHost, copy_stream_));
      }
      DIST_CUDA_CHECK(cudaFreeAsync(s.device, copy_stream_));
      staged_.erase(s.device);
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

void NcclBackend::check_async() {
  ncclResult_t async = ncclSuccess;
  DIST_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    abort_comm();
    throw_nccl_error(async, "ncclCommGetAsyncError", __FILE__, __LINE__);
  }
}

void NcclBackend::abort_comm() {
  if (!aborted_) {
    for (auto& [id, c] : comms_) ncclCommAbort(c);
    comms_.clear();
  }
  if (comm_ != nullptr && !aborted_) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  aborted_ = true;
}

std::shared_ptr<NcclOp> NcclBackend::queue_p2p(bool is_send, void* buf, std::size_t count,
                                               DataType type, int peer, const char* fn,
                                               ncclComm_t comm, int world_peer) {
  if (aborted_) {
    throw Error("rank " + std::to_string(rank_) + ": " + fn +
                ": the NCCL communicator was aborted after an earlier failure");
  }
  auto op = std::make_shared<NcclOp>();
  op->what = std::string(fn) + (is_send ? "(dst=" : "(src=") + std::to_string(peer) + ", " +
             std::to_string(count) + " x " + to_string(type) + ")";
  const std::size_t bytes = count * size_of(type);
  void* d = stage(*op, buf, bytes, is_send, !is_send);
  queue_.push_back({is_send, d, count, type, peer, op, comm});
  count_message(stats_, is_send ? Direction::Sent : Direction::Received, world_peer, bytes);
  return op;
}

}  // namespace dist::detail::nccl
