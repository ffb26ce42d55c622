// The NCCL backend's point-to-point and collective calls (see nccl_backend.hpp).
#include "nccl/nccl_backend.hpp"

namespace dist::detail::nccl {

void NcclBackend::send(const void* buf, std::size_t count, DataType type, int dst, int) {
  auto op = queue_p2p(true, const_cast<void*>(buf), count, type, dst, "send");
  flush();
  wait_op(*op);
}

void NcclBackend::recv(void* buf, std::size_t count, DataType type, int src, int) {
  auto op = queue_p2p(false, buf, count, type, src, "recv");
  flush();
  wait_op(*op);
}

Work NcclBackend::isend(const void* buf, std::size_t count, DataType type, int dst, int) {
  return Work(std::make_shared<NcclWork>(
      shared_from_this(), queue_p2p(true, const_cast<void*>(buf), count, type, dst, "isend")));
}

Work NcclBackend::irecv(void* buf, std::size_t count, DataType type, int src, int) {
  return Work(std::make_shared<NcclWork>(shared_from_this(),
                                         queue_p2p(false, buf, count, type, src, "irecv")));
}

namespace {
[[noreturn]] void refuse_any_source(int rank, const char* fn) {
  throw Error("rank " + std::to_string(rank) + ": " + fn +
              ": the NCCL backend cannot receive from any source (ncclRecv must name its peer); "
              "run this program on the threads or MPI backend, or receive from each rank in turn "
              "with recv(src)");
}
}  // namespace

int NcclBackend::recv_any(void*, std::size_t, DataType, int) {
  refuse_any_source(rank_, "recv_any");
}

Work NcclBackend::irecv_any(void*, std::size_t, DataType, int) {
  refuse_any_source(rank_, "irecv_any");
}

void NcclBackend::barrier() {
  ++stats_.barriers;
  auto op = begin("barrier()");
  DIST_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_));
  record(*op);
  wait_op(*op);
}

void NcclBackend::broadcast(void* buf, std::size_t count, DataType type, int src) {
  ++stats_.builtin_collectives;
  auto op = begin("broadcast");
  void* d = stage(*op, buf, count * size_of(type), rank_ == src, true);
  DIST_NCCL_CHECK(ncclBroadcast(d, d, count, nccl_type(type), src, comm_, stream_));
  record(*op);
  wait_op(*op);
}

void NcclBackend::reduce(void* buf, std::size_t count, DataType type, ReduceOp op_kind, int dst) {
  ++stats_.builtin_collectives;
  auto op = begin("reduce");
  const bool host = !is_device_pointer(buf);
  void* d = stage(*op, buf, count * size_of(type), true, rank_ == dst);
  DIST_NCCL_CHECK(
      ncclReduce(d, d, count, nccl_type(type), effective_op(op_kind, host), dst, comm_, stream_));
  if (host && op_kind == ReduceOp::Avg && rank_ == dst) {
    op->after = [=, p = size_] { divide(buf, count, type, p); };
  }
  record(*op);
  wait_op(*op);
}

void NcclBackend::all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) {
  all_reduce_async(buf, count, type, op).wait();
}

Work NcclBackend::all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op_kind) {
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

void NcclBackend::gather(const void* in, void* out, std::size_t count, DataType type, int dst) {
  ++stats_.builtin_collectives;
  auto op = begin("gather");
  const std::size_t bytes = count * size_of(type);
  void* din = stage(*op, const_cast<void*>(in), bytes, true, false);
  if (rank_ == dst) {
    auto* dout = static_cast<char*>(stage(*op, out, bytes * size_, false, true));
    if (bytes > 0) {
      DIST_CUDA_CHECK(
          cudaMemcpyAsync(dout + bytes * rank_, din, bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (q != rank_)
        DIST_NCCL_CHECK(ncclRecv(dout + bytes * q, count, nccl_type(type), q, comm_, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupEnd());
  } else {
    DIST_NCCL_CHECK(ncclSend(din, count, nccl_type(type), dst, comm_, stream_));
  }
  record(*op);
  wait_op(*op);
}

void NcclBackend::all_gather(const void* in, void* out, std::size_t count, DataType type) {
  ++stats_.builtin_collectives;
  auto op = begin("all_gather");
  const std::size_t bytes = count * size_of(type);
  void* din = stage(*op, const_cast<void*>(in), bytes, true, false);
  void* dout = stage(*op, out, bytes * size_, false, true);
  DIST_NCCL_CHECK(ncclAllGather(din, dout, count, nccl_type(type), comm_, stream_));
  record(*op);
  wait_op(*op);
}

void NcclBackend::scatter(const void* in, void* out, std::size_t count, DataType type, int src) {
  ++stats_.builtin_collectives;
  auto op = begin("scatter");
  const std::size_t bytes = count * size_of(type);
  void* dout = stage(*op, out, bytes, false, true);
  if (rank_ == src) {
    const auto* din =
        static_cast<const char*>(stage(*op, const_cast<void*>(in), bytes * size_, true, false));
    if (bytes > 0) {
      DIST_CUDA_CHECK(
          cudaMemcpyAsync(dout, din + bytes * rank_, bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (q != rank_)
        DIST_NCCL_CHECK(ncclSend(din + bytes * q, count, nccl_type(type), q, comm_, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupEnd());
  } else {
    DIST_NCCL_CHECK(ncclRecv(dout, count, nccl_type(type), src, comm_, stream_));
  }
  record(*op);
  wait_op(*op);
}

void NcclBackend::reduce_scatter(const void* in, void* out, std::size_t count, DataType type,
                                 ReduceOp op_kind) {
  ++stats_.builtin_collectives;
  auto op = begin("reduce_scatter");
  const std::size_t bytes = count * size_of(type);
  const bool host = !is_device_pointer(out);
  void* din = stage(*op, const_cast<void*>(in), bytes * size_, true, false);
  void* dout = stage(*op, out, bytes, false, true);
  DIST_NCCL_CHECK(ncclReduceScatter(din, dout, count, nccl_type(type), effective_op(op_kind, host),
                                    comm_, stream_));
  if (host && op_kind == ReduceOp::Avg) {
    op->after = [=, p = size_] { divide(out, count, type, p); };
  }
  record(*op);
  wait_op(*op);
}

}  // namespace dist::detail::nccl
