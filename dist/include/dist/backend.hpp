// The backend interface: one small abstract class that the threads (fake_dist), Open MPI and
// NCCL engines implement. Student code never sees it; the free functions in <dist/dist.hpp>
// validate their arguments (ranks in range, gather/scatter sizes) and forward here, type-erased.
//
// Rules every implementation follows:
//   * rank() and size() never change after construction;
//   * all ranks call collectives in the same order with matching count/op/root;
//   * errors are thrown (dist::Error and subclasses), with the library's own message and file:line.
#pragma once

#include <cstddef>
#include <memory>

#include "dist/dist.hpp"

namespace dist::detail {

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // count = elements of `type`.
  virtual void send(const void* buf, std::size_t count, DataType type, int dst, int tag) = 0;
  virtual void recv(void* buf, std::size_t count, DataType type, int src, int tag) = 0;
  virtual Work isend(const void* buf, std::size_t count, DataType type, int dst, int tag) = 0;
  virtual Work irecv(void* buf, std::size_t count, DataType type, int src, int tag) = 0;
  virtual void barrier() = 0;

  virtual void broadcast(void* buf, std::size_t count, DataType type, int src) = 0;
  virtual void reduce(void* buf, std::size_t count, DataType type, ReduceOp op, int dst) = 0;
  virtual void all_reduce(void* buf, std::size_t count, DataType type, ReduceOp op) = 0;
  virtual Work all_reduce_async(void* buf, std::size_t count, DataType type, ReduceOp op) = 0;
  // count = elements per rank (in.size() for gather/all_gather, out.size() for scatter/reduce_scatter).
  virtual void gather(const void* in, void* out, std::size_t count, DataType type, int dst) = 0;
  virtual void all_gather(const void* in, void* out, std::size_t count, DataType type) = 0;
  virtual void scatter(const void* in, void* out, std::size_t count, DataType type, int src) = 0;
  virtual void reduce_scatter(const void* in, void* out, std::size_t count, DataType type,
                              ReduceOp op) = 0;

  virtual Stats stats() = 0;
  virtual void reset_stats() = 0;
  virtual double sim_time() { return 0.0; }
  virtual void sim_compute(double /*seconds*/, const char* /*label*/) {}
  virtual void sim_reduce(std::size_t /*bytes*/) {}
};

/// The backend of the calling rank (thread-local on the threads backend, process-wide under MPI/NCCL).
/// Throws dist::Error("... called outside dist::launch ...") when there is none.
BackendImpl& current();
/// Installs (or clears, with nullptr) the calling thread's backend; used by launchers only.
void set_current(BackendImpl* backend, const LaunchOptions* options);

/// Launchers, one per engine. The MPI and NCCL ones are defined only when built
/// (DISTLAB_HAVE_MPI / DISTLAB_HAVE_NCCL); otherwise launch() reports how to build them.
void launch_threads(const LaunchOptions& options, const std::function<void()>& body);
void launch_mpi(const LaunchOptions& options, const std::function<void()>& body);
void launch_nccl(const LaunchOptions& options, const std::function<void()>& body);

/// Elementwise inout = op(inout, in) for `count` elements of `type` (Avg accumulates as Sum).
void apply_op(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op);
/// Divides each element by `divisor` (for Avg).
void divide(void* buf, std::size_t count, DataType type, int divisor);

}  // namespace dist::detail
