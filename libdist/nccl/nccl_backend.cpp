// The NCCL backend's point-to-point and collective calls (see nccl_backend.hpp).
#include <algorithm>

#include "nccl/nccl_backend.hpp"

namespace dist::detail::nccl {

void NcclBackend::send(const void* buf, std::size_t count, DataType type, int dst, int,
                       const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  auto op = queue_p2p(true, const_cast<void*>(buf), count, type, dst, "send", comm,
                      g.is_world() ? dst : g.world_rank(dst));
  flush();
  wait_op(*op);
}

void NcclBackend::recv(void* buf, std::size_t count, DataType type, int src, int, const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  auto op =
      queue_p2p(false, buf, count, type, src, "recv", comm, g.is_world() ? src : g.world_rank(src));
  flush();
  wait_op(*op);
}

Work NcclBackend::isend(const void* buf, std::size_t count, DataType type, int dst, int,
                        const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  return Work(std::make_shared<NcclWork>(
      shared_from_this(), queue_p2p(true, const_cast<void*>(buf), count, type, dst, "isend", comm,
                                    g.is_world() ? dst : g.world_rank(dst))));
}

Work NcclBackend::irecv(void* buf, std::size_t count, DataType type, int src, int, const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  return Work(std::make_shared<NcclWork>(shared_from_this(),
                                         queue_p2p(false, buf, count, type, src, "irecv", comm,
                                                   g.is_world() ? src : g.world_rank(src))));
}

namespace {
[[noreturn]] void refuse_any_source(int rank, const char* fn) {
  throw Error("rank " + std::to_string(rank) + ": " + fn +
              ": the NCCL backend cannot receive from any source (ncclRecv must name its peer); "
              "run this program on the threads or MPI backend, or receive from each rank in turn "
              "with recv(src)");
}
}  // namespace

int NcclBackend::recv_any(void*, std::size_t, DataType, int, const Group&) {
  refuse_any_source(rank_, "recv_any");
}

Work NcclBackend::irecv_any(void*, std::size_t, DataType, int, const Group&) {
  refuse_any_source(rank_, "irecv_any");
}

void NcclBackend::barrier(const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.barriers;
  auto op = begin("barrier()");
  DIST_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm, stream_));
  record(*op);
  wait_op(*op);
}

void NcclBackend::broadcast(void* buf, std::size_t count, DataType type, int src, const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.builtin_collectives;
  auto op = begin("broadcast");
  void* d = stage(*op, buf, count * size_of(type), grank == src, true);
  DIST_NCCL_CHECK(ncclBroadcast(d, d, count, nccl_type(type), src, comm, stream_));
  record(*op);
  wait_op(*op);
}

void NcclBackend::reduce(void* buf, std::size_t count, DataType type, ReduceOp op_kind, int dst,
                         const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.builtin_collectives;
  auto op = begin("reduce");
  const bool host = !is_device_pointer(buf);
  void* d = stage(*op, buf, count * size_of(type), true, grank == dst);
  DIST_NCCL_CHECK(
      ncclReduce(d, d, count, nccl_type(type), effective_op(op_kind, host), dst, comm, stream_));
  if (host && op_kind == ReduceOp::Avg && grank == dst) {
    op->after = [=, p = gsize] { divide(buf, count, type, p); };
  }
  record(*op);
  wait_op(*op);
}

void NcclBackend::all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op,
                             const Group& g) {
  all_reduce_async(buf, count, type, op, g).wait();
}

Work NcclBackend::all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op_kind,
                                   const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.builtin_collectives;
  auto op = begin("all_reduce");
  const bool host = !is_device_pointer(buf);
  void* d = stage(*op, buf, count * size_of(type), true, true);
  DIST_NCCL_CHECK(
      ncclAllReduce(d, d, count, nccl_type(type), effective_op(op_kind, host), comm, stream_));
  if (host && op_kind == ReduceOp::Avg) {
    op->after = [=, p = gsize] { divide(buf, count, type, p); };
  }
  record(*op);
  return Work(std::make_shared<NcclWork>(shared_from_this(), op));
}

void NcclBackend::gather(const void* in, void* out, std::size_t count, DataType type, int dst,
                         const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.builtin_collectives;
  auto op = begin("gather");
  const std::size_t bytes = count * size_of(type);
  void* din = stage(*op, const_cast<void*>(in), bytes, true, false);
  if (grank == dst) {
    auto* dout = static_cast<char*>(stage(*op, out, bytes * gsize, false, true));
    if (bytes > 0) {
      DIST_CUDA_CHECK(
          cudaMemcpyAsync(dout + bytes * grank, din, bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < gsize; ++q) {
      if (q != grank)
        DIST_NCCL_CHECK(ncclRecv(dout + bytes * q, count, nccl_type(type), q, comm, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupEnd());
  } else {
    DIST_NCCL_CHECK(ncclSend(din, count, nccl_type(type), dst, comm, stream_));
  }
  record(*op);
  wait_op(*op);
}

void NcclBackend::all_gather(const void* in, void* out, std::size_t count, DataType type,
                             const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.builtin_collectives;
  auto op = begin("all_gather");
  const std::size_t bytes = count * size_of(type);
  void* din = stage(*op, const_cast<void*>(in), bytes, true, false);
  void* dout = stage(*op, out, bytes * gsize, false, true);
  DIST_NCCL_CHECK(ncclAllGather(din, dout, count, nccl_type(type), comm, stream_));
  record(*op);
  wait_op(*op);
}

void NcclBackend::scatter(const void* in, void* out, std::size_t count, DataType type, int src,
                          const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.builtin_collectives;
  auto op = begin("scatter");
  const std::size_t bytes = count * size_of(type);
  void* dout = stage(*op, out, bytes, false, true);
  if (grank == src) {
    const auto* din =
        static_cast<const char*>(stage(*op, const_cast<void*>(in), bytes * gsize, true, false));
    if (bytes > 0) {
      DIST_CUDA_CHECK(
          cudaMemcpyAsync(dout, din + bytes * grank, bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < gsize; ++q) {
      if (q != grank)
        DIST_NCCL_CHECK(ncclSend(din + bytes * q, count, nccl_type(type), q, comm, stream_));
    }
    DIST_NCCL_CHECK(ncclGroupEnd());
  } else {
    DIST_NCCL_CHECK(ncclRecv(dout, count, nccl_type(type), src, comm, stream_));
  }
  record(*op);
  wait_op(*op);
}

void NcclBackend::reduce_scatter(const void* in, void* out, std::size_t count, DataType type,
                                 ReduceOp op_kind, const Group& g) {
  [[maybe_unused]] const ncclComm_t comm = comm_of(g);
  [[maybe_unused]] const int gsize = g.size(), grank = g.rank();
  ++stats_.builtin_collectives;
  auto op = begin("reduce_scatter");
  const std::size_t bytes = count * size_of(type);
  const bool host = !is_device_pointer(out);
  void* din = stage(*op, const_cast<void*>(in), bytes * gsize, true, false);
  void* dout = stage(*op, out, bytes, false, true);
  DIST_NCCL_CHECK(ncclReduceScatter(din, dout, count, nccl_type(type), effective_op(op_kind, host),
                                    comm, stream_));
  if (host && op_kind == ReduceOp::Avg) {
    op->after = [=, p = gsize] { divide(out, count, type, p); };
  }
  record(*op);
  wait_op(*op);
}

// ---- groups -------------------------------------------------------------------------------------
// ncclCommSplit of the parent's communicator. Each rank first all-gathers (colour, key, world rank)
// over the parent, so that it knows the members of its new group and their order (ncclCommSplit's:
// by key, then parent rank) without asking NCCL; new_group also checks that all lists agree.

std::shared_ptr<const GroupInfo> NcclBackend::split_impl(int color, int key, const Group& parent,
                                                         const std::string& name,
                                                         std::uint64_t list_hash) {
  const int p = parent.size();
  // (colour, key, world rank, the list's hash in two halves) of every parent rank.
  const std::int64_t mine[4] = {color, key, rank_, static_cast<std::int64_t>(list_hash)};
  std::vector<std::int64_t> all(4 * static_cast<std::size_t>(p));
  all_gather(mine, all.data(), 4, DataType::Int64, parent);
  --stats_.builtin_collectives;  // creating a group is not a built-in collective call
  for (int q = 0; q < p; ++q) {
    if (all[4 * static_cast<std::size_t>(q) + 3] != all[3]) {
      throw MismatchError("rank " + std::to_string(rank_) + ": new_group: world ranks " +
                          std::to_string(all[2]) + " and " +
                          std::to_string(all[4 * static_cast<std::size_t>(q) + 2]) +
                          " passed different lists of ranks; every rank must pass the same list");
    }
  }
  std::vector<int> members;  // parent ranks of my colour, by (key, parent rank)
  if (color >= 0) {
    for (int q = 0; q < p; ++q) {
      if (all[4 * static_cast<std::size_t>(q)] == color) members.push_back(q);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all[4 * static_cast<std::size_t>(a) + 1] < all[4 * static_cast<std::size_t>(b) + 1];
    });
  }
  auto info = std::make_shared<GroupInfo>();
  info->id = next_group_id_++;
  info->name = name + (color >= 0 ? std::to_string(color) : std::string("none"));
  info->group_of.assign(static_cast<std::size_t>(size_), -1);
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int w = static_cast<int>(all[4 * static_cast<std::size_t>(members[i]) + 2]);
    info->ranks.push_back(w);
    info->group_of[static_cast<std::size_t>(w)] = static_cast<int>(i);
  }
  info->my_rank = info->group_of[static_cast<std::size_t>(rank_)];
  info->owner = this;
  flush();
  ncclComm_t c = nullptr;
  DIST_NCCL_CHECK(
      ncclCommSplit(comm_of(parent), color >= 0 ? color : NCCL_SPLIT_NOCOLOR, key, &c, nullptr));
  if (c != nullptr) comms_[info->id] = c;
  return info;
}

std::shared_ptr<const GroupInfo> NcclBackend::new_group(const std::vector<int>& ranks,
                                                        const std::string& name) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the list
  for (int w : ranks) h = (h ^ static_cast<std::uint32_t>(w)) * 1099511628211ull;
  int index = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank_) index = static_cast<int>(i);
  }
  auto info = split_impl(index >= 0 ? 0 : kNoColor, index, Group{}, "", h);
  auto named = std::make_shared<GroupInfo>(*info);
  named->name = name;
  return named;
}

std::shared_ptr<const GroupInfo> NcclBackend::split(int color, int key, const Group& parent,
                                                    const std::string& name) {
  return split_impl(color, key, parent, name, 0);
}

ncclComm_t NcclBackend::comm_of(const Group& g) const {
  return g.is_world() ? comm_ : comms_.at(g.info()->id);
}

}  // namespace dist::detail::nccl
