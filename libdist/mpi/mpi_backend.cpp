// The Open MPI backend: this process is one rank of the job that mpirun started.
//
// Mapping (one function each for types and ops, see mpi_type / mpi_op):
//   send / recv        MPI_Issend / MPI_Irecv, then a polled wait (send is synchronous, like the
//                      threads backend: it returns once the matching recv has started taking it)
//   isend / irecv      MPI_Issend / MPI_Irecv; Work::is_completed = MPI_Test, wait = polled test
//   recv_any/irecv_any MPI_Irecv from MPI_ANY_SOURCE; the source is the status's MPI_SOURCE. Which
//                      message is taken depends on real timing (the threads backend's choice by
//                      simulated arrival is deterministic; this one is not): results may vary
//                      between runs. Counted as received from that source once complete.
//   barrier            MPI_Ibarrier
//   broadcast ...      MPI_Ibcast, MPI_Ireduce, MPI_Iallreduce, MPI_Igather, MPI_Iallgather,
//   reduce_scatter     MPI_Iscatter, MPI_Ireduce_scatter_block; Avg = MPI_SUM, then divide
// Every operation is started non-blocking and waited on by polling (MpiJob::wait), so that a
// failed rank wakes the others (RankFailedError) and a hang becomes a TimeoutError after
// LaunchOptions::timeout. Every MPI call is checked (DIST_MPI_CHECK: MPI's error string, file:line).
//
// Tags: the element type is folded into the MPI tag (tag * 4 + type), so a send and a recv that
// disagree on type never match (the wait times out, and the message names the cause) instead of
// silently reinterpreting bytes. A count mismatch is a MismatchError on the receiving rank.
//
// Stats: point-to-point messages and bytes are counted like the threads backend (when the send
// or recv is posted). Built-in collectives only count calls (builtin_collectives): their traffic
// is whatever algorithm MPI picked, which is not the one the threads backend documents.
// sim_time() is 0: a real network has no simulated clock (use wall time). trace_path is ignored.
#include <mpi.h>

#include <climits>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "dist/backend.hpp"
#include "mpi_job.hpp"

namespace dist::detail {
namespace {

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::Float32:
      return MPI_FLOAT;
    case DataType::Float64:
      return MPI_DOUBLE;
    case DataType::Int32:
      return MPI_INT32_T;
    case DataType::Int64:
      return MPI_INT64_T;
  }
  throw Error("mpi backend: unknown DataType");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return MPI_SUM;  // Avg: sum, then divide by world size
    case ReduceOp::Product:
      return MPI_PROD;
    case ReduceOp::Min:
      return MPI_MIN;
    case ReduceOp::Max:
      return MPI_MAX;
  }
  throw Error("mpi backend: unknown ReduceOp");
}

int type_index(DataType type) { return static_cast<int>(type); }  // 0..3, for tag folding

std::string describe(const char* fn, const char* peer_name, int peer, int tag, std::size_t count,
                     DataType type) {
  std::ostringstream os;
  os << fn << "(" << peer_name << "=" << peer << ", tag=" << tag << ", " << count << " x "
     << to_string(type) << ")";
  return os.str();
}

std::string describe_collective(const char* fn, std::size_t count, DataType type) {
  std::ostringstream os;
  os << fn << "(" << count << " x " << to_string(type) << ")";
  return os.str();
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

class MpiBackend;

/// A Work over one MPI_Request. on_done runs once, after completion (count checks, Avg division).
class MpiWork : public WorkImpl {
 public:
  MpiWork(std::shared_ptr<MpiBackend> backend, MPI_Request req, std::string what,
          std::function<void(const MPI_Status&)> on_done)
      : backend_(std::move(backend)),
        req_(req),
        what_(std::move(what)),
        on_done_(std::move(on_done)) {}
  bool is_completed() override;
  void wait() override;
  int source_rank() override;
  /// Makes this the handle of an any-source receive (its source is read from the status).
  void set_any_source() { any_source_ = true; }

 private:
  void complete(const MPI_Status& status);

  std::shared_ptr<MpiBackend> backend_;
  MPI_Request req_;
  std::string what_;
  std::function<void(const MPI_Status&)> on_done_;
  bool done_ = false;
  bool any_source_ = false;
  int source_ = -1;
  std::exception_ptr error_;
};

class MpiBackend : public BackendImpl, public std::enable_shared_from_this<MpiBackend> {
 public:
  explicit MpiBackend(const LaunchOptions& options) : job_(options.timeout, "mpi") {
    int* tag_ub = nullptr;
    int flag = 0;
    DIST_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
    max_tag_ = (flag && tag_ub) ? (*tag_ub - 3) / 4 : (32767 - 3) / 4;
    reset_stats();
  }

  mpi::MpiJob& job() { return job_; }
  bool closed() const { return closed_; }
  void close() { closed_ = true; }

  int rank() const override { return job_.rank(); }
  int size() const override { return job_.size(); }

  // ---- point-to-point -------------------------------------------------------------------
  void send(const void* buf, std::size_t count, DataType type, int dst, int tag) override {
    isend_impl(buf, count, type, dst, tag, "send")->wait();
  }
  void recv(void* buf, std::size_t count, DataType type, int src, int tag) override {
    irecv_impl(buf, count, type, src, tag, "recv")->wait();
  }
  Work isend(const void* buf, std::size_t count, DataType type, int dst, int tag) override {
    return Work(isend_impl(buf, count, type, dst, tag, "isend"));
  }
  Work irecv(void* buf, std::size_t count, DataType type, int src, int tag) override {
    return Work(irecv_impl(buf, count, type, src, tag, "irecv"));
  }
  int recv_any(void* buf, std::size_t count, DataType type, int tag) override {
    auto work = irecv_impl(buf, count, type, MPI_ANY_SOURCE, tag, "recv_any");
    return work->source_rank();  // waits
  }
  Work irecv_any(void* buf, std::size_t count, DataType type, int tag) override {
    return Work(irecv_impl(buf, count, type, MPI_ANY_SOURCE, tag, "irecv_any"));
  }

  void barrier() override {
    ++stats_.barriers;
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ibarrier(job_.comm(), &req));
    job_.wait(req, "barrier()");
  }

  // ---- collectives --------------------------------------------------------------------------
  void broadcast(void* buf, std::size_t count, DataType type, int src) override {
    begin_collective();
    MPI_Request req;
    DIST_MPI_CHECK(
        MPI_Ibcast(buf, int_count(count, "broadcast"), mpi_type(type), src, job_.comm(), &req));
    job_.wait(req, describe_collective("broadcast", count, type));
  }

  void reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst) override {
    begin_collective();
    MPI_Request req;
    const bool root = rank() == dst;
    DIST_MPI_CHECK(MPI_Ireduce(root ? MPI_IN_PLACE : buf, root ? buf : nullptr,
                               int_count(count, "reduce"), mpi_type(type), mpi_op(op), dst,
                               job_.comm(), &req));
    job_.wait(req, describe_collective("reduce", count, type));
    if (root && op == ReduceOp::Avg) divide(buf, count, type, size());
  }

  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) override {
    all_reduce_async(buf, count, type, op).wait();
  }

  Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op) override {
    begin_collective();
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, int_count(count, "all_reduce"), mpi_type(type),
                                  mpi_op(op), job_.comm(), &req));
    const int p = size();
    return Work(std::make_shared<MpiWork>(shared_from_this(), req,
                                          describe_collective("all_reduce", count, type),
                                          [=](const MPI_Status&) {
                                            if (op == ReduceOp::Avg) divide(buf, count, type, p);
                                          }));
  }

  void gather(const void* in, void* out, std::size_t count, DataType type, int dst) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count, type, out, count * static_cast<std::size_t>(size()), copy);
    const int n = int_count(count, "gather");
    MPI_Request req;
    DIST_MPI_CHECK(
        MPI_Igather(in, n, mpi_type(type), out, n, mpi_type(type), dst, job_.comm(), &req));
    job_.wait(req, describe_collective("gather", count, type));
  }

  void all_gather(const void* in, void* out, std::size_t count, DataType type) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count, type, out, count * static_cast<std::size_t>(size()), copy);
    const int n = int_count(count, "all_gather");
    MPI_Request req;
    DIST_MPI_CHECK(
        MPI_Iallgather(in, n, mpi_type(type), out, n, mpi_type(type), job_.comm(), &req));
    job_.wait(req, describe_collective("all_gather", count, type));
  }

  void scatter(const void* in, void* out, std::size_t count, DataType type, int src) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count * static_cast<std::size_t>(size()), type, out, count, copy);
    const int n = int_count(count, "scatter");
    MPI_Request req;
    DIST_MPI_CHECK(
        MPI_Iscatter(in, n, mpi_type(type), out, n, mpi_type(type), src, job_.comm(), &req));
    job_.wait(req, describe_collective("scatter", count, type));
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, DataType type,
                      ReduceOp op) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count * static_cast<std::size_t>(size()), type, out, count, copy);
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, int_count(count, "reduce_scatter"),
                                             mpi_type(type), mpi_op(op), job_.comm(), &req));
    job_.wait(req, describe_collective("reduce_scatter", count, type));
    if (op == ReduceOp::Avg) divide(out, count, type, size());
  }

  // ---- instrumentation ----------------------------------------------------------------------
  Stats stats() override { return stats_; }
  void reset_stats() override { stats_ = fresh_stats(size()); }
  // sim_time / sim_compute / sim_reduce: BackendImpl's defaults (0, no-ops) -- no simulated clock.

 private:
  int int_count(std::size_t count, const char* fn) const {
    if (count > static_cast<std::size_t>(INT_MAX)) {
      throw Error("rank " + std::to_string(rank()) + ": " + fn + ": " + std::to_string(count) +
                  " elements is more than MPI's int count allows (" + std::to_string(INT_MAX) +
                  "): split the buffer into smaller calls");
    }
    return static_cast<int>(count);
  }

  int mpi_tag(int tag, DataType type, const char* fn) const {
    if (tag > max_tag_) {
      throw Error("rank " + std::to_string(rank()) + ": " + fn + "(tag=" + std::to_string(tag) +
                  "): the MPI backend supports tags up to " + std::to_string(max_tag_));
    }
    return tag * 4 + type_index(type);
  }

  // MPI forbids overlapping send and receive buffers; copy the input when they overlap.
  const void* unalias(const void* in, std::size_t in_count, DataType type, const void* out,
                      std::size_t out_count, std::vector<char>& copy) const {
    const std::size_t in_bytes = in_count * size_of(type);
    if (!overlaps(in, in_bytes, out, out_count * size_of(type))) return in;
    copy.assign(static_cast<const char*>(in), static_cast<const char*>(in) + in_bytes);
    return copy.data();
  }

  void begin_collective() {
    job_.poll_failures();
    ++stats_.builtin_collectives;
  }

  std::shared_ptr<MpiWork> isend_impl(const void* buf, std::size_t count, DataType type, int dst,
                                      int tag, const char* fn) {
    job_.poll_failures();
    const int n = int_count(count, fn);
    MPI_Request req;
    DIST_MPI_CHECK(
        MPI_Issend(buf, n, mpi_type(type), dst, mpi_tag(tag, type, fn), job_.comm(), &req));
    count_message(stats_, Direction::Sent, dst, count * size_of(type));
    return std::make_shared<MpiWork>(shared_from_this(), req,
                                     describe(fn, "dst", dst, tag, count, type), nullptr);
  }

  std::shared_ptr<MpiWork> irecv_impl(void* buf, std::size_t count, DataType type, int src, int tag,
                                      const char* fn) {
    job_.poll_failures();
    const int n = int_count(count, fn);
    MPI_Request req;
    DIST_MPI_CHECK(
        MPI_Irecv(buf, n, mpi_type(type), src, mpi_tag(tag, type, fn), job_.comm(), &req));
    const bool any = src == MPI_ANY_SOURCE;
    // An any-source receive is counted once its source is known (on completion).
    if (!any) count_message(stats_, Direction::Received, src, count * size_of(type));
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
            count_message(*stats, Direction::Received, status.MPI_SOURCE, count * size_of(type));
          }
        });
    if (any) work->set_any_source();
    return work;
  }

  mpi::MpiJob job_;
  Stats stats_;
  int max_tag_ = 0;
  bool closed_ = false;
};

bool MpiWork::is_completed() {
  if (done_ || error_) return true;
  check_work_in_launch(backend_->closed(), what_);
  int flag = 0;
  MPI_Status status;
  const int rc = MPI_Test(&req_, &flag, &status);
  if (rc != MPI_SUCCESS) {
    try {
      mpi::throw_mpi_error(rc, ("MPI_Test for " + what_).c_str(), __FILE__, __LINE__);
    } catch (...) {
      error_ = std::current_exception();
    }
    return true;
  }
  if (flag) {
    complete(status);
    return true;
  }
  backend_->job().poll_failures();
  return false;
}

void MpiWork::wait() {
  if (!done_ && !error_) {
    check_work_in_launch(backend_->closed(), what_);
    MPI_Status status;
    try {
      backend_->job().wait(req_, what_, &status);
    } catch (const RankFailedError&) {
      throw;  // not this operation's own error: another rank failed (may be waited on again)
    } catch (const TimeoutError&) {
      throw;
    } catch (...) {
      error_ = std::current_exception();
    }
    if (!error_) complete(status);
  }
  if (error_) std::rethrow_exception(error_);
}

int MpiWork::source_rank() {
  if (!any_source_) return WorkImpl::source_rank();
  wait();
  return source_;
}

void MpiWork::complete(const MPI_Status& status) {
  done_ = true;
  if (any_source_) source_ = status.MPI_SOURCE;
  if (on_done_) {
    try {
      on_done_(status);
    } catch (...) {
      error_ = std::current_exception();
    }
  }
}

}  // namespace

void launch_mpi(const LaunchOptions& options, const std::function<void()>& body) {
  mpi::check_job_size(options, "mpi");
  mpi::ensure_initialized();
  auto backend = std::make_shared<MpiBackend>(options);
  LaunchOptions effective = options;  // what dist::options() reports inside the body
  effective.world_size = backend->size();
  effective.backend = Backend::Mpi;

  const RankOutcome outcome = run_rank_body(*backend, effective, body);
  backend->close();  // a Work used after this point is an error (check_work_in_launch)
  mpi::conclude(backend->job(), outcome);
}

}  // namespace dist::detail
