// dist::device: streams, events and device buffers, the asynchronous model of a GPU.
//
// Names and semantics follow CUDA's runtime API (and torch.cuda's Stream/Event, which wrap it):
//   dist::device                    CUDA                            torch.cuda
//   Stream s("comm")                cudaStreamCreate                Stream()
//   s.synchronize()                 cudaStreamSynchronize           Stream.synchronize()
//   s.query()                       cudaStreamQuery                 Stream.query()
//   s.wait_event(e)                 cudaStreamWaitEvent             Stream.wait_event(e)
//   Event e("grads_ready")          cudaEventCreate                 Event()
//   e.record(s)                     cudaEventRecord                 Event.record(s)
//   e.query()                       cudaEventQuery                  Event.query()
//   e.synchronize()                 cudaEventSynchronize            Event.synchronize()
//   elapsed_seconds(start, end)     cudaEventElapsedTime (in ms)    start.elapsed_time(end) (ms)
//   device_synchronize()            cudaDeviceSynchronize           torch.cuda.synchronize()
//   DeviceBuffer<T> b("grad", n)    cudaMalloc                      torch.empty(n, device="cuda")
//   memcpy_async(dst, src, s)       cudaMemcpyAsync (pinned host)   Tensor.copy_(non_blocking=True)
//   launch(s, {name, secs, ...}, f) kernel<<<grid, block, 0, s>>>   an op on the current stream
//
// Which host calls block, exactly as in CUDA:
//   * never block the host: launch, memcpy_async, Event::record, Stream::wait_event, the
//     stream forms of the collectives (all_reduce(buf, stream) below), query();
//   * block the host until the work they name is done: Stream::synchronize (all work enqueued
//     on the stream so far), Event::synchronize (the work before the record), device_synchronize
//     (every stream of this rank). Work::wait() of all_reduce_async(buf, stream) below does not
//     block the host: it orders the current stream after the collective.
//   * an Event never recorded is complete (query() true, synchronize() returns at once, waiting
//     on it orders nothing); recording again replaces what the event stands for.
//
// The simulated device (threads backend). Every rank has its own device. Each stream is an in-order
// queue on the rank's simulated clock: an operation starts at the latest of the end of the stream's
// previous operation, the host's clock when it was enqueued and the events the stream was told to
// wait for, and lasts its modelled time (a kernel: the seconds it is given; a copy: bytes / the
// DeviceModel's bandwidth of its direction). Different streams overlap freely. The host's clock is
// dist::sim_time(): enqueueing costs DeviceModel::launch_overhead_s of it; synchronize moves it to
// the end of the awaited work (shown as a span in the trace) and that is the host time lost.
// query() is true when the work is done at the host's current simulated time. The data effect of
// every operation happens when it is enqueued (in program order); the times are what a device
// running the streams concurrently would take. A program whose results could
// differ on a real device is exactly one with a stream race, which the device reports:
//
// The stream-race detector. Two operations on different streams that touch the same buffer, at
// least one of them writing, must be ordered: the later one's stream waited (wait_event) on an
// event recorded after the earlier one, or the host synchronized with the earlier one (a
// synchronize, or a query() that returned true) before enqueuing the later one. Otherwise the
// later one throws dist::device::StreamRaceError naming the buffer, both operations, both streams
// and the dependency that is missing. Kernels declare what they read and write (reads(b),
// writes(b)); inside the kernel's body, b.span() (writes) and b.cspan() (reads or writes) are
// the buffer's memory, and touching a buffer the kernel did not declare is an error.
//
// Not modelled: the legacy default stream (every operation names its stream), host memory
// written by a device-to-host copy (read it only after synchronizing: the detector does not watch
// host memory), stream priorities, and memory capacity.
//
// A stream collective (all_reduce(buf, stream)) takes part in the rank's sequence of collectives
// like any other: every rank calls collectives in the same order, stream forms included. On the
// simulated device its data moves when it is enqueued, so a rank enqueues it only when the other
// ranks can reach their matching call without waiting for this rank (as with a blocking one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/dist.hpp"

namespace dist::device {

/// Two operations on different streams touch one buffer without an ordering between them.
struct StreamRaceError : RankError<StreamRaceError, Error> {
  using RankError::RankError;
};

/// The cost model of the simulated device (per rank; set_model() applies to later enqueues).
struct DeviceModel {
  double launch_overhead_s = 0;  // host time each enqueue (kernel, copy, record, collective) costs
  double h2d_Bps = 25e9;         // host-to-device copies (PCIe 4.0 x16, pinned memory)
  double d2h_Bps = 25e9;         // device-to-host copies
  double d2d_Bps = 1e12;         // copies inside device memory
};
void set_model(const DeviceModel& model);
DeviceModel model();

namespace detail {
/// What one operation does to one buffer (built by reads()/writes()).
struct Access {
  std::uint64_t buffer = 0;
  bool write = false;
};
void all_reduce_on(int stream, void* buf, std::size_t count, DataType type, ReduceOp op,
                   std::uint64_t buffer);
Work all_reduce_async_on(int stream, void* buf, std::size_t count, DataType type, ReduceOp op,
                         std::uint64_t buffer);
void all_gather_on(int stream, const void* in, void* out, std::size_t count, DataType type,
                   std::uint64_t in_buffer, std::uint64_t out_buffer);
void reduce_scatter_on(int stream, const void* in, void* out, std::size_t count, DataType type,
                       ReduceOp op, std::uint64_t in_buffer, std::uint64_t out_buffer);
/// Allocates `bytes` zeroed bytes of device memory aligned to `align`; *data: the pointer.
std::uint64_t buffer_create(const std::string& name, std::size_t bytes, std::size_t align,
                            void** data);
void buffer_destroy(std::uint64_t id) noexcept;
/// Throws unless the kernel body now running declared this access.
void check_body_access(std::uint64_t id, bool write);
int stream_create(const std::string& name);
int event_create(const std::string& name);
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
void copy(int stream, CopyKind kind, void* dst, const void* src, std::size_t bytes,
          std::uint64_t dst_buffer, std::uint64_t src_buffer);
}  // namespace detail

/// A buffer in device memory: `count` elements of T, zero-initialised. Move-only, like a
/// cudaMalloc'd pointer with an owner. `name` appears in race reports and the trace. The device
/// owns the memory (on the simulated device, host memory kept with the buffer's race history).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(const std::string& name, std::size_t count) : count_(count) {
    void* p = nullptr;
    id_ = detail::buffer_create(name, count * sizeof(T), alignof(T), &p);
    data_ = static_cast<T*>(p);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), count_(o.count_), id_(o.id_) {
    o.id_ = 0;
    o.data_ = nullptr;
    o.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (id_) detail::buffer_destroy(id_);
      data_ = o.data_;
      count_ = o.count_;
      id_ = o.id_;
      o.id_ = 0;
      o.data_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (id_) detail::buffer_destroy(id_);
  }

  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  std::uint64_t id() const { return id_; }
  /// The memory, inside the body of a kernel that declared writes(*this).
  std::span<T> span() {
    detail::check_body_access(id_, true);
    return {data_, count_};
  }
  /// The memory, inside the body of a kernel that declared reads(*this) or writes(*this).
  std::span<const T> cspan() const {
    detail::check_body_access(id_, false);
    return {data_, count_};
  }
  /// The device pointer, for the library's copies and collectives (no access check).
  T* raw() { return data_; }
  const T* raw() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
  std::uint64_t id_ = 0;
};

template <typename T>
detail::Access reads(const DeviceBuffer<T>& b) {
  return {b.id(), false};
}
template <typename T>
detail::Access writes(DeviceBuffer<T>& b) {
  return {b.id(), true};
}

class Event;

/// An in-order queue of device work on this rank. A cheap handle (copies name the same stream);
/// usable only on the rank that created it.
class Stream {
 public:
  explicit Stream(const std::string& name = "stream") : id_(detail::stream_create(name)) {}
  /// Blocks the host until every operation enqueued on this stream so far is done.
  void synchronize();
  /// True when every operation enqueued so far is done (never blocks).
  bool query();
  /// Work enqueued on this stream from now on starts after the work `e` was recorded after.
  /// Never blocks the host.
  void wait_event(const Event& e);
  int id() const { return id_; }
  /// The stream a handle id() names (for the library).
  static Stream from_id(int id) { return Stream(id, 0); }

 private:
  Stream(int id, int /*tag*/) : id_(id) {}
  int id_;
};

/// A marker in a stream: it completes when the work enqueued on the stream before record() does.
class Event {
 public:
  explicit Event(const std::string& name = "event") : id_(detail::event_create(name)) {}
  /// Captures the work enqueued on `s` so far. Never blocks the host.
  void record(Stream& s);
  /// True when the captured work is done (or the event was never recorded). Never blocks.
  bool query();
  /// Blocks the host until the captured work is done.
  void synchronize();
  int id() const { return id_; }
  /// The event a handle id() names (for the library).
  static Event from_id(int id) { return Event(id, 0); }

 private:
  Event(int id, int /*tag*/) : id_(id) {}
  int id_;
};

/// Seconds of simulated device time between two completed events (cudaEventElapsedTime, but in
/// seconds like every time in dist). Throws dist::Error if either was never recorded or is not
/// complete yet (CUDA: cudaErrorNotReady).
double elapsed_seconds(const Event& start, const Event& end);

/// Blocks the host until every stream of this rank is idle.
void device_synchronize();

/// A kernel: its name (trace, race reports), its modelled duration and the buffers it touches.
struct Kernel {
  std::string name;
  double seconds = 0;
  std::vector<detail::Access> accesses;
};
/// Enqueues `body` as kernel `k` on `s`. Never blocks the host. On the simulated device `body`
/// runs now (see the header comment) and may touch only the buffers `k` declares.
void launch(Stream& s, const Kernel& k, const std::function<void()>& body);

/// cudaMemcpyAsync from pinned host memory, to it, and inside the device. Sizes must match.
template <typename T>
void memcpy_async(DeviceBuffer<T>& dst, std::span<const T> src, Stream& s) {
  if (src.size() != dst.size()) throw Error("memcpy_async: sizes differ (host to device)");
  detail::copy(s.id(), detail::CopyKind::HostToDevice, dst.raw(), src.data(), dst.bytes(), dst.id(),
               0);
}
template <typename T>
void memcpy_async(std::span<T> dst, const DeviceBuffer<T>& src, Stream& s) {
  if (src.size() != dst.size()) throw Error("memcpy_async: sizes differ (device to host)");
  detail::copy(s.id(), detail::CopyKind::DeviceToHost, dst.data(), src.raw(), src.bytes(), 0,
               src.id());
}
template <typename T>
void memcpy_async(DeviceBuffer<T>& dst, const DeviceBuffer<T>& src, Stream& s) {
  if (src.size() != dst.size()) throw Error("memcpy_async: sizes differ (device to device)");
  detail::copy(s.id(), detail::CopyKind::DeviceToDevice, dst.raw(), src.raw(), src.bytes(),
               dst.id(), src.id());
}

// ---------------------------------------------------------------------------------------------
// Collectives on a stream (the way a NCCL process group runs them).

/// The stream that Work::wait() of a stream collective orders (torch.cuda.current_stream()):
/// per rank, a stream named "compute" made on first use, unless set_current_stream chose another.
Stream current_stream();
void set_current_stream(const Stream& s);

/// ncclAllReduce(buf, buf, ..., s): the all-reduce of `buf` over all ranks, enqueued on `s`.
/// Never blocks the host. It starts when `s` reaches it on every rank (the latest of the ranks'
/// start times) and takes the time dist::all_reduce documents; it writes `buf` on stream `s`, so
/// other streams must wait on an event recorded after it before they touch `buf`.
template <typename T>
void all_reduce(DeviceBuffer<T>& buf, Stream& s, ReduceOp op = ReduceOp::Sum) {
  detail::all_reduce_on(s.id(), buf.raw(), buf.size(), ::dist::detail::data_type_of<T>(), op,
                        buf.id());
}

/// ncclAllGather(in, out, ..., s): rank r's `in` lands at out[r * in.size(), (r + 1) * in.size()),
/// enqueued on `s`. out.size() must be world_size() * in.size() (else dist::Error). Never blocks
/// the host. Like all_reduce(buf, s): it starts when `s` reaches it on every rank, takes the time
/// dist::all_gather documents (ring), reads `in` and writes `out` on stream `s`.
template <typename T>
void all_gather(const DeviceBuffer<T>& in, DeviceBuffer<T>& out, Stream& s) {
  if (out.size() != in.size() * static_cast<std::size_t>(::dist::world_size()))
    throw Error("device::all_gather: out has " + std::to_string(out.size()) +
                " elements; it must have world_size() * in.size() = " +
                std::to_string(in.size() * static_cast<std::size_t>(::dist::world_size())));
  detail::all_gather_on(s.id(), in.raw(), out.raw(), in.size(), ::dist::detail::data_type_of<T>(),
                        in.id(), out.id());
}

/// ncclReduceScatter(in, out, ..., s): rank r gets the reduction (`op`) over the ranks of chunk r,
/// in[r * out.size(), (r + 1) * out.size()), enqueued on `s`. in.size() must be world_size() *
/// out.size() (else dist::Error). Never blocks the host; it takes the time dist::reduce_scatter
/// documents (ring), reads `in` and writes `out` on stream `s`.
template <typename T>
void reduce_scatter(const DeviceBuffer<T>& in, DeviceBuffer<T>& out, Stream& s,
                    ReduceOp op = ReduceOp::Sum) {
  if (in.size() != out.size() * static_cast<std::size_t>(::dist::world_size()))
    throw Error("device::reduce_scatter: in has " + std::to_string(in.size()) +
                " elements; it must have world_size() * out.size() = " +
                std::to_string(out.size() * static_cast<std::size_t>(::dist::world_size())));
  detail::reduce_scatter_on(s.id(), in.raw(), out.raw(), out.size(),
                            ::dist::detail::data_type_of<T>(), op, in.id(), out.id());
}

/// What dist::all_reduce_async is on a NCCL process group: all_reduce(buf, comm, op), then an
/// event recorded on `comm` after it. The Work: is_completed() queries the event (never blocks);
/// wait() makes current_stream() wait on the event (Stream::wait_event): the host does not
/// block, and work enqueued on the current stream afterwards may use `buf`. To block the host,
/// synchronize the stream (or an event recorded after the collective) instead.
template <typename T>
[[nodiscard]] Work all_reduce_async(DeviceBuffer<T>& buf, Stream& comm,
                                    ReduceOp op = ReduceOp::Sum) {
  return detail::all_reduce_async_on(comm.id(), buf.raw(), buf.size(),
                                     ::dist::detail::data_type_of<T>(), op, buf.id());
}

}  // namespace dist::device
