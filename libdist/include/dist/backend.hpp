// The backend interface: one small abstract class that the threads, Open MPI and NCCL backends
// implement. Student code never sees it; the free functions in <dist/dist.hpp>
// validate their arguments (ranks in range, gather/scatter sizes) and forward here, type-erased.
//
// Rules every implementation follows:
//   * rank() and size() never change after construction;
//   * all ranks call collectives in the same order with matching count/op/root;
//   * errors are thrown (dist::Error and subclasses), with the library's own message and file:line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/dist.hpp"

namespace dist::detail {

class DeviceImpl;  // src/device_impl.hpp: a real device (CUDA) behind <dist/device.hpp>

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // count = elements of `type`.
  virtual void send(const void* buf, std::size_t count, DataType type, int dst, int tag,
                    const Group& group) = 0;
  virtual void recv(void* buf, std::size_t count, DataType type, int src, int tag,
                    const Group& group) = 0;
  virtual Work isend(const void* buf, std::size_t count, DataType type, int dst, int tag,
                     const Group& group) = 0;
  virtual Work irecv(void* buf, std::size_t count, DataType type, int src, int tag,
                     const Group& group) = 0;
  // Receives from any source (the semantics per backend are at dist::recv_any); returns the source.
  virtual int recv_any(void* buf, std::size_t count, DataType type, int tag,
                       const Group& group) = 0;
  virtual Work irecv_any(void* buf, std::size_t count, DataType type, int tag,
                         const Group& group) = 0;
  virtual void barrier(const Group& group) = 0;

  virtual void broadcast(void* buf, std::size_t count, DataType type, int src,
                         const Group& group) = 0;
  virtual void reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst,
                      const Group& group) = 0;
  virtual void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op,
                          const Group& group) = 0;
  virtual Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op,
                                const Group& group) = 0;
  // count = elements per rank (in.size() for gather/all_gather, out.size() for scatter/reduce_scatter).
  virtual void gather(const void* in, void* out, std::size_t count, DataType type, int dst,
                      const Group& group) = 0;
  virtual void all_gather(const void* in, void* out, std::size_t count, DataType type,
                          const Group& group) = 0;
  virtual void scatter(const void* in, void* out, std::size_t count, DataType type, int src,
                       const Group& group) = 0;
  virtual void reduce_scatter(const void* in, void* out, std::size_t count, DataType type,
                              ReduceOp op, const Group& group) = 0;

  // Groups: `group` is never a non-member's (the free functions check); ranks are group ranks.
  // Creating one is collective over the parent; a rank outside the new group gets a description
  // with my_rank == -1.
  virtual std::shared_ptr<const GroupInfo> new_group(const std::vector<int>& ranks,
                                                     const std::string& name) = 0;
  virtual std::shared_ptr<const GroupInfo> split(int color, int key, const Group& parent,
                                                 const std::string& name) = 0;

  virtual Stats stats() = 0;
  virtual void reset_stats() = 0;
  virtual double sim_time() { return 0.0; }
  virtual void sim_compute(double /*seconds*/, const char* /*label*/) {}
  virtual void sim_reduce(std::size_t /*bytes*/) {}
  /// The backend's real device for <dist/device.hpp> (the NCCL backend's CUDA mapping); nullptr
  /// where there is none (the threads backend has its simulated device, threads/device.cpp).
  virtual DeviceImpl* device() { return nullptr; }
};

/// Where the code calling dist is (the `where` of the free functions, dist.hpp): set for the
/// duration of one dist call on the calling thread, so a backend can name the caller's file:line
/// in its reports. file is nullptr outside a dist call.
struct CallSite {
  const char* file = nullptr;
  unsigned line = 0;
};
CallSite call_site();
/// Sets the calling thread's call site for its lifetime (dist.cpp's free functions).
class CallSiteScope {
 public:
  explicit CallSiteScope(const ::dist::SourceLocation& where);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  CallSite saved_;
};
/// "exercises/07_pipeline/pipeline.cpp:80" (the path from the kit's top folder where it has
/// one: exercises/, solutions/, grader/, libdist/, support/), "" when file is nullptr.
std::string describe_call_site(const CallSite& site);

/// The backend of the calling rank (thread-local on the threads backend, process-wide under MPI/NCCL).
/// Throws dist::Error("... called outside dist::launch ...") when there is none.
BackendImpl& current();
/// The calling thread's backend and options, or nullptr outside launch.
BackendImpl* current_or_null();
const LaunchOptions* current_options();
/// Installs (or clears, with nullptr) the calling thread's backend; used by launchers only.
void set_current(BackendImpl* backend, const LaunchOptions* options);

/// Launchers, one per engine. The MPI and NCCL ones are defined only when built
/// (DISTLAB_HAVE_MPI / DISTLAB_HAVE_NCCL); otherwise launch() reports how to build them.
void launch_threads(const LaunchOptions& options, const std::function<void()>& body);
void launch_mpi(const LaunchOptions& options, const std::function<void()>& body);
void launch_nccl(const LaunchOptions& options, const std::function<void()>& body);

/// Runs `body` as one rank: installs `backend` (and the options dist::options() reports) for the
/// calling thread, runs the body, uninstalls. Returns the body's error, if any; `first_hand` is
/// false when the error is a RankFailedError (this rank was only woken by another's failure).
struct RankOutcome {
  std::exception_ptr error;
  bool first_hand = false;
};
RankOutcome run_rank_body(BackendImpl& backend, const LaunchOptions& options,
                          const std::function<void()>& body);

/// The message of an exception ("an exception not derived from std::exception" otherwise).
std::string what_of(std::exception_ptr error);
/// The same error with "rank R: " in front of its message (unless it already starts so). Types
/// derived from dist::Rethrowable keep their type; any other exception becomes a dist::Error.
std::exception_ptr with_rank_prefix(int rank, std::exception_ptr error);

/// Empty counters with the per-peer vectors sized for `world_size` ranks (reset_stats()).
Stats fresh_stats(int world_size);
/// Counts one message of `bytes` bytes that this rank sent to (or received from) `peer`.
enum class Direction { Sent, Received };
void count_message(Stats& stats, Direction direction, int peer, std::uint64_t bytes);

/// Throws dist::Error when a Work is used after its launch returned (`closed`); `what` names the
/// operation. The real engines check this on every is_completed() and wait().
void check_work_in_launch(bool closed, const std::string& what);

/// Elementwise inout = op(inout, in) for `count` elements of `type` (Avg accumulates as Sum).
void apply_op(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op);
/// Divides each element by `divisor` (for Avg).
void divide(void* buf, std::size_t count, DataType type, int divisor);

}  // namespace dist::detail
