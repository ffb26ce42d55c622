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
//   groups             new_group: MPI_Comm_split of the world (after checking every rank passed the
//                      same list); split: MPI_Comm_split of the parent; a call on a group uses its
//                      communicator, so ranks are the communicator's ranks (= group ranks)
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
#include <map>
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
  void close() {
    closed_ = true;
    for (auto& [id, c] : comms_) MPI_Comm_free(&c);
    comms_.clear();
  }

  int rank() const override { return job_.rank(); }
  int size() const override { return job_.size(); }

  // ---- point-to-point -------------------------------------------------------------------
  void send(const void* buf, std::size_t count, DataType type, int dst, int tag,
            const Group& g) override {
    isend_impl(buf, count, type, dst, tag, "send", g)->wait();
  }
  void recv(void* buf, std::size_t count, DataType type, int src, int tag,
            const Group& g) override {
    irecv_impl(buf, count, type, src, tag, "recv", g)->wait();
  }
  Work isend(const void* buf, std::size_t count, DataType type, int dst, int tag,
             const Group& g) override {
    return Work(isend_impl(buf, count, type, dst, tag, "isend", g));
  }
  Work irecv(void* buf, std::size_t count, DataType type, int src, int tag,
             const Group& g) override {
    return Work(irecv_impl(buf, count, type, src, tag, "irecv", g));
  }
  int recv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override {
    auto work = irecv_impl(buf, count, type, MPI_ANY_SOURCE, tag, "recv_any", g);
    return work->source_rank();  // waits; a rank of the group's communicator
  }
  Work irecv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override {
    return Work(irecv_impl(buf, count, type, MPI_ANY_SOURCE, tag, "irecv_any", g));
  }

  void barrier(const Group& g) override {
    ++stats_.barriers;
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ibarrier(comm(g), &req));
    job_.wait(req, "barrier()");
  }

  // ---- collectives --------------------------------------------------------------------------
  void broadcast(void* buf, std::size_t count, DataType type, int src, const Group& g) override {
    begin_collective();
    MPI_Request req;
    DIST_MPI_CHECK(
        MPI_Ibcast(buf, int_count(count, "broadcast"), mpi_type(type), src, comm(g), &req));
    job_.wait(req, describe_collective("broadcast", count, type));
  }

  void reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst,
              const Group& g) override {
    begin_collective();
    MPI_Request req;
    const bool root = g.rank() == dst;
    DIST_MPI_CHECK(MPI_Ireduce(root ? MPI_IN_PLACE : buf, root ? buf : nullptr,
                               int_count(count, "reduce"), mpi_type(type), mpi_op(op), dst, comm(g),
                               &req));
    job_.wait(req, describe_collective("reduce", count, type));
    if (root && op == ReduceOp::Avg) divide(buf, count, type, g.size());
  }

  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op,
                  const Group& g) override {
    all_reduce_async(buf, count, type, op, g).wait();
  }

  Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op,
                        const Group& g) override {
    begin_collective();
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, int_count(count, "all_reduce"), mpi_type(type),
                                  mpi_op(op), comm(g), &req));
    const int p = g.size();
    return Work(std::make_shared<MpiWork>(shared_from_this(), req,
                                          describe_collective("all_reduce", count, type),
                                          [=](const MPI_Status&) {
                                            if (op == ReduceOp::Avg) divide(buf, count, type, p);
                                          }));
  }

  void gather(const void* in, void* out, std::size_t count, DataType type, int dst,
              const Group& g) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count, type, out, count * static_cast<std::size_t>(g.size()), copy);
    const int n = int_count(count, "gather");
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Igather(in, n, mpi_type(type), out, n, mpi_type(type), dst, comm(g), &req));
    job_.wait(req, describe_collective("gather", count, type));
  }

  void all_gather(const void* in, void* out, std::size_t count, DataType type,
                  const Group& g) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count, type, out, count * static_cast<std::size_t>(g.size()), copy);
    const int n = int_count(count, "all_gather");
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Iallgather(in, n, mpi_type(type), out, n, mpi_type(type), comm(g), &req));
    job_.wait(req, describe_collective("all_gather", count, type));
  }

  void scatter(const void* in, void* out, std::size_t count, DataType type, int src,
               const Group& g) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count * static_cast<std::size_t>(g.size()), type, out, count, copy);
    const int n = int_count(count, "scatter");
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Iscatter(in, n, mpi_type(type), out, n, mpi_type(type), src, comm(g), &req));
    job_.wait(req, describe_collective("scatter", count, type));
  }

  void reduce_scatter(const void* in, void* out, std::size_t count, DataType type, ReduceOp op,
                      const Group& g) override {
    begin_collective();
    std::vector<char> copy;
    in = unalias(in, count * static_cast<std::size_t>(g.size()), type, out, count, copy);
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ireduce_scatter_block(in, out, int_count(count, "reduce_scatter"),
                                             mpi_type(type), mpi_op(op), comm(g), &req));
    job_.wait(req, describe_collective("reduce_scatter", count, type));
    if (op == ReduceOp::Avg) divide(out, count, type, g.size());
  }

  // ---- groups ----------------------------------------------------------------------------------
  // new_group: MPI_Comm_split of the world (every rank calls it; non-members pass MPI_UNDEFINED),
  // after an all-gather of a hash of the list so that different lists are a MismatchError.
  std::shared_ptr<const GroupInfo> new_group(const std::vector<int>& ranks,
                                             const std::string& name) override {
    job_.poll_failures();
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the list
    for (int w : ranks) h = (h ^ static_cast<std::uint32_t>(w)) * 1099511628211ull;
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size()));
    DIST_MPI_CHECK(MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, job_.comm()));
    for (int q = 0; q < size(); ++q) {
      if (all[static_cast<std::size_t>(q)] != all[0]) {
        throw MismatchError("rank " + std::to_string(rank()) + ": new_group: rank 0 and rank " +
                            std::to_string(q) +
                            " passed different lists of ranks; every rank must pass the same "
                            "list (collective call)");
      }
    }
    int index = -1;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank()) index = static_cast<int>(i);
    }
    MPI_Comm c = MPI_COMM_NULL;
    DIST_MPI_CHECK(
        MPI_Comm_split(job_.comm(), index >= 0 ? 0 : MPI_UNDEFINED, index >= 0 ? index : 0, &c));
    return describe_group(c, ranks, name);
  }

  // split: MPI_Comm_split of the parent's communicator (same colour/key semantics).
  std::shared_ptr<const GroupInfo> split(int color, int key, const Group& parent,
                                         const std::string& name) override {
    job_.poll_failures();
    MPI_Comm c = MPI_COMM_NULL;
    DIST_MPI_CHECK(MPI_Comm_split(comm(parent), color >= 0 ? color : MPI_UNDEFINED, key, &c));
    std::vector<int> ranks;
    if (c != MPI_COMM_NULL) {
      int n = 0;
      DIST_MPI_CHECK(MPI_Comm_size(c, &n));
      ranks.resize(static_cast<std::size_t>(n));
      const int me = rank();
      DIST_MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, ranks.data(), 1, MPI_INT, c));
    }
    return describe_group(c, ranks, name + (color >= 0 ? std::to_string(color) : "none"));
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

  MPI_Comm comm(const Group& g) const {
    return g.is_world() ? job_.comm() : comms_.at(g.info()->id);
  }
  static int world_of(const Group& g, int r) { return g.is_world() ? r : g.world_rank(r); }

  std::shared_ptr<const GroupInfo> describe_group(MPI_Comm c, const std::vector<int>& ranks,
                                                  const std::string& name) {
    auto info = std::make_shared<GroupInfo>();
    info->id = next_group_id_++;
    info->name = name;
    info->ranks = ranks;
    info->group_of.assign(static_cast<std::size_t>(size()), -1);
    for (std::size_t i = 0; i < ranks.size(); ++i)
      info->group_of[static_cast<std::size_t>(ranks[i])] = static_cast<int>(i);
    info->my_rank = info->group_of[static_cast<std::size_t>(rank())];
    info->owner = this;
    if (c != MPI_COMM_NULL) comms_[info->id] = c;
    return info;
  }

  void begin_collective() {
    job_.poll_failures();
    ++stats_.builtin_collectives;
  }

  std::shared_ptr<MpiWork> isend_impl(const void* buf, std::size_t count, DataType type, int dst,
                                      int tag, const char* fn, const Group& g) {
    job_.poll_failures();
    const int n = int_count(count, fn);
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Issend(buf, n, mpi_type(type), dst, mpi_tag(tag, type, fn), comm(g), &req));
    count_message(stats_, Direction::Sent, world_of(g, dst), count * size_of(type));
    return std::make_shared<MpiWork>(shared_from_this(), req,
                                     describe(fn, "dst", dst, tag, count, type), nullptr);
  }

  std::shared_ptr<MpiWork> irecv_impl(void* buf, std::size_t count, DataType type, int src, int tag,
                                      const char* fn, const Group& g) {
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

  mpi::MpiJob job_;
  std::map<int, MPI_Comm> comms_;  // the communicators of this process's groups, by group id
  int next_group_id_ = 1;
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
