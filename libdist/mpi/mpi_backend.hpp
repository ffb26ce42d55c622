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
//   bf16               MPI has no bfloat16: moved as MPI_UINT16_T (two bytes each); reduced with
//                      user-defined MPI_Ops (one per ReduceOp) that combine two bf16 values in
//                      float and round back to bf16 (dist.hpp, struct bf16)
// Every operation is started non-blocking and waited on by polling (MpiJob::wait), so that a
// failed rank wakes the others (RankFailedError) and a hang becomes a TimeoutError after
// LaunchOptions::timeout. Every MPI call is checked (DIST_MPI_CHECK: MPI's error string, file:line).
//
// Tags: the element type is folded into the MPI tag (tag * kTypeCount + type), so a send and a recv that
// disagree on type never match (the wait times out, and the message names the cause) instead of
// silently reinterpreting bytes. A count mismatch is a MismatchError on the receiving rank.
//
// Stats: point-to-point messages and bytes are counted like the threads backend (when the send
// or recv is posted). Built-in collectives only count calls (builtin_collectives): their traffic
// is whatever algorithm MPI picked, which is not the one the threads backend documents.
// sim_time() is 0: a real network has no simulated clock (use wall time). trace_path is ignored.
//
// Files: mpi_backend.cpp (construction, helpers, Work, launch), mpi_p2p.cpp (point-to-point and
// barrier), mpi_collectives.cpp (built-in collectives), mpi_groups.cpp (new_group, split).
#pragma once

#include <mpi.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/backend.hpp"
#include "mpi_job.hpp"

namespace dist::detail::mpi {

MPI_Datatype mpi_type(DataType type);
/// The number of DataTypes folded into a tag.
inline constexpr int kTypeCount = 5;
/// Avg maps to the sum; the caller divides. bf16: a user-defined op (created on first use).
MPI_Op mpi_op(ReduceOp op, DataType type);
/// "fn(peer_name=peer, tag=t, count x type)", the name of a point-to-point call in messages.
std::string describe(const char* fn, const char* peer_name, int peer, int tag, std::size_t count,
                     DataType type);
/// "fn(count x type)", the name of a collective call in messages.
std::string describe_collective(const char* fn, std::size_t count, DataType type);

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
  explicit MpiBackend(const LaunchOptions& options);

  MpiJob& job() { return job_; }
  bool closed() const { return closed_; }
  /// Frees the groups' communicators; a Work used after this is an error (check_work_in_launch).
  void close();

  int rank() const override { return job_.rank(); }
  int size() const override { return job_.size(); }

  // point-to-point and barrier (mpi_p2p.cpp)
  void send(const void* buf, std::size_t count, DataType type, int dst, int tag,
            const Group& g) override;
  void recv(void* buf, std::size_t count, DataType type, int src, int tag, const Group& g) override;
  Work isend(const void* buf, std::size_t count, DataType type, int dst, int tag,
             const Group& g) override;
  Work irecv(void* buf, std::size_t count, DataType type, int src, int tag,
             const Group& g) override;
  int recv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override;
  Work irecv_any(void* buf, std::size_t count, DataType type, int tag, const Group& g) override;
  void barrier(const Group& g) override;

  // collectives (mpi_collectives.cpp)
  void broadcast(void* buf, std::size_t count, DataType type, int src, const Group& g) override;
  void reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst,
              const Group& g) override;
  void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op,
                  const Group& g) override;
  Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op,
                        const Group& g) override;
  void gather(const void* in, void* out, std::size_t count, DataType type, int dst,
              const Group& g) override;
  void all_gather(const void* in, void* out, std::size_t count, DataType type,
                  const Group& g) override;
  void scatter(const void* in, void* out, std::size_t count, DataType type, int src,
               const Group& g) override;
  void reduce_scatter(const void* in, void* out, std::size_t count, DataType type, ReduceOp op,
                      const Group& g) override;

  // groups (mpi_groups.cpp)
  std::shared_ptr<const GroupInfo> new_group(const std::vector<int>& ranks,
                                             const std::string& name) override;
  std::shared_ptr<const GroupInfo> split(int color, int key, const Group& parent,
                                         const std::string& name) override;

  // instrumentation; sim_time / sim_compute / sim_reduce: BackendImpl's defaults (0, no-ops), as
  // a real network has no simulated clock.
  Stats stats() override { return stats_; }
  void reset_stats() override { stats_ = fresh_stats(size()); }

 private:
  /// count as MPI's int, or an Error naming the call when it does not fit.
  int int_count(std::size_t count, const char* fn) const;
  /// The MPI tag of (tag, type): tag * kTypeCount + type, or an Error when tag is above MPI_TAG_UB's share.
  int mpi_tag(int tag, DataType type, const char* fn) const;
  /// MPI forbids overlapping send and receive buffers: returns in, or a copy of it in `copy`.
  const void* unalias(const void* in, std::size_t in_count, DataType type, const void* out,
                      std::size_t out_count, std::vector<char>& copy) const;
  MPI_Comm comm(const Group& g) const;
  static int world_of(const Group& g, int r) { return g.is_world() ? r : g.world_rank(r); }
  std::shared_ptr<const GroupInfo> describe_group(MPI_Comm c, const std::vector<int>& ranks,
                                                  const std::string& name);
  void begin_collective() {
    job_.poll_failures();
    ++stats_.builtin_collectives;
  }
  std::shared_ptr<MpiWork> isend_impl(const void* buf, std::size_t count, DataType type, int dst,
                                      int tag, const char* fn, const Group& g);
  std::shared_ptr<MpiWork> irecv_impl(void* buf, std::size_t count, DataType type, int src, int tag,
                                      const char* fn, const Group& g);

  MpiJob job_;
  std::map<int, MPI_Comm> comms_;  // the communicators of this process's groups, by group id
  int next_group_id_ = 1;
  Stats stats_;
  int max_tag_ = 0;
  bool closed_ = false;
};

}  // namespace dist::detail::mpi
