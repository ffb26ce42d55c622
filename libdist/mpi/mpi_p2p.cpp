// The Open MPI backend's point-to-point calls and barrier (see mpi_backend.hpp for the mapping).
#include <sstream>

#include "mpi_backend.hpp"

namespace dist::detail::mpi {

void MpiBackend::send(const void* buf, std::size_t count, DataType type, int dst, int tag,
                      const Group& g) {
  isend_impl(buf, count, type, dst, tag, "send", g)->wait();
}

void MpiBackend::recv(void* buf, std::size_t count, DataType type, int src, int tag,
                      const Group& g) {
  irecv_impl(buf, count, type, src, tag, "recv", g)->wait();
}

Work MpiBackend::isend(const void* buf, std::size_t count, DataType type, int dst, int tag,
                       const Group& g) {
  return Work(isend_impl(buf, count, type, dst, tag, "isend", g));
}

Work MpiBackend::irecv(void* buf, std::size_t count, DataType type, int src, int tag,
                       const Group& g) {
  return Work(irecv_impl(buf, count, type, src, tag, "irecv", g));
}

int MpiBackend::recv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) {
  auto work = irecv_impl(buf, count, type, MPI_ANY_SOURCE, tag, "recv_any", g);
  return work->source_rank();  // waits; a rank of the group's communicator
}

Work MpiBackend::irecv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) {
  return Work(irecv_impl(buf, count, type, MPI_ANY_SOURCE, tag, "irecv_any", g));
}

void MpiBackend::barrier(const Group& g) {
  ++stats_.barriers;
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Ibarrier(comm(g), &req));
  job_.wait(req, "barrier()");
}

std::shared_ptr<MpiWork> MpiBackend::isend_impl(const void* buf, std::size_t count, DataType type,
                                                int dst, int tag, const char* fn, const Group& g) {
  job_.poll_failures();
  const int n = int_count(count, fn);
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Issend(buf, n, mpi_type(type), dst, mpi_tag(tag, type, fn), comm(g), &req));
  count_message(stats_, Direction::Sent, world_of(g, dst), count * size_of(type));
  return std::make_shared<MpiWork>(shared_from_this(), req,
                                   describe(fn, "dst", dst, tag, count, type), nullptr);
}

std::shared_ptr<MpiWork> MpiBackend::irecv_impl(void* buf, std::size_t count, DataType type,
                                                int src, int tag, const char* fn, const Group& g) {
  job_.poll_failures();
  const int n = int_count(count, fn);
  MPI_Request req;
  DIST_MPI_CHECK(MPI_Irecv(buf, n, mpi_type(type), src, mpi_tag(tag, type, fn), comm(g), &req));
  const bool any = src == MPI_ANY_SOURCE;
  // An any-source receive is counted once its source is known (on completion).
  if (!any) count_message(stats_, Direction::Received, world_of(g, src), count * size_of(type));
  const Group group = g;
  std::string what = any ? std::string(fn) + "(tag=" + std::to_string(tag) + ", " +
                               std::to_string(count) + " x " + to_string(type) + ")"
                         : describe(fn, "src", src, tag, count, type);
  const int me = rank();
  Stats* stats = &stats_;
  auto work =
      std::make_shared<MpiWork>(shared_from_this(), req, what, [=](const MPI_Status& status) {
        int got = 0;
        DIST_MPI_CHECK(MPI_Get_count(&status, mpi_type(type), &got));
        if (got != n) {
          std::ostringstream os;
          os << "rank " << me << ": " << what << ": rank " << status.MPI_SOURCE << " sent " << got
             << " elements but this recv expects " << n
             << ": a send and its recv must agree on element type and count";
          throw MismatchError(os.str());
        }
        if (any) {
          count_message(*stats, Direction::Received, world_of(group, status.MPI_SOURCE),
                        count * size_of(type));
        }
      });
  if (any) work->set_any_source();
  return work;
}

}  // namespace dist::detail::mpi
