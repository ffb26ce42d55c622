// The Open MPI backend's built-in collectives (see mpi_backend.hpp for the mapping).
#include "mpi_backend.hpp"

namespace dist::detail::mpi {

void MpiBackend::broadcast(void* buf, std::size_t count, DataType type, int src, const Group& g) {
  begin_collective();
  MPI_Request req;
  DIST_MPI_CHECK(
      MPI_Ibcast(buf, int_count(count, "broadcast"), mpi_type(type), src, comm(g), &req));
  job_.wait(req, describe_collective("broadcast", count, type));
}

void MpiBackend::reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst,
                        const Group& g) {
  begin_collective();
  MPI_Request req;
  const bool root = g.rank() == dst;
  DIST_MPI_CHECK(MPI_Ireduce(root ? MPI_IN_PLACE : buf, root ? buf : nullptr,
                             int_count(count, "reduce"), mpi_type(type), mpi_op(op, type), dst,
                             comm(g), &req));
  job_.wait(req, describe_collective("reduce", count, type));
  if (root && op == ReduceOp::Avg) divide(buf, count, type, g.size());
}

void MpiBackend::all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op,
                            const Group& g) {
  all_reduce_async(buf, count, type, op, g).wait();
}

Work MpiBackend::all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op,
                                  const Group& g) {
  begin_collective();
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, int_count(count, "all_reduce"), mpi_type(type),
                                mpi_op(op, type), comm(g), &req));
  const int p = g.size();
  return Work(std::make_shared<MpiWork>(shared_from_this(), req,
                                        describe_collective("all_reduce", count, type),
                                        [=](const MPI_Status&) {
                                          if (op == ReduceOp::Avg) divide(buf, count, type, p);
                                        }));
}

void MpiBackend::gather(const void* in, void* out, std::size_t count, DataType type, int dst,
                        const Group& g) {
  begin_collective();
  std::vector<char> copy;
  in = unalias(in, count, type, out, count * static_cast<std::size_t>(g.size()), copy);
  const int n = int_count(count, "gather");
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Igather(in, n, mpi_type(type), out, n, mpi_type(type), dst, comm(g), &req));
  job_.wait(req, describe_collective("gather", count, type));
}

void MpiBackend::all_gather(const void* in, void* out, std::size_t count, DataType type,
                            const Group& g) {
  begin_collective();
  std::vector<char> copy;
  in = unalias(in, count, type, out, count * static_cast<std::size_t>(g.size()), copy);
  const int n = int_count(count, "all_gather");
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Iallgather(in, n, mpi_type(type), out, n, mpi_type(type), comm(g), &req));
  job_.wait(req, describe_collective("all_gather", count, type));
}

void MpiBackend::scatter(const void* in, void* out, std::size_t count, DataType type, int src,
                         const Group& g) {
  begin_collective();
  std::vector<char> copy;
  in = unalias(in, count * static_cast<std::size_t>(g.size()), type, out, count, copy);
  const int n = int_count(count, "scatter");
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Iscatter(in, n, mpi_type(type), out, n, mpi_type(type), src, comm(g), &req));
  job_.wait(req, describe_collective("scatter", count, type));
}

void MpiBackend::reduce_scatter(const void* in, void* out, std::size_t count, DataType type,
                                ReduceOp op, const Group& g) {
  begin_collective();
  std::vector<char> copy;
  in = unalias(in, count * static_cast<std::size_t>(g.size()), type, out, count, copy);
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, int_count(count, "reduce_scatter"),
                                           mpi_type(type), mpi_op(op, type), comm(g), &req));
  job_.wait(req, describe_collective("reduce_scatter", count, type));
  if (op == ReduceOp::Avg) divide(out, count, type, g.size());
}

}  // namespace dist::detail::mpi
