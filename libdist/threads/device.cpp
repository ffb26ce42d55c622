// The simulated device of the threads backend (<dist/device.hpp>): streams as in-order queues on
// the rank's simulated clock, events, device buffers, kernels and copies, and the host calls that
// block (synchronize) or not (everything else), as CUDA's do. The race detector that every
// enqueue consults is stream_race.cpp; the state is device_state.hpp.
//
// Times: an operation on stream s starts at max(s.tail, host clock) and ends `duration` later;
// s.tail becomes its end. Stream::wait_event(e) raises s.tail to e's time. The host's clock is
// the rank's clock (dist::sim_time()); synchronize advances it to the awaited time with a span
// named after the call, so the host time lost shows in the trace and in sim_time().
// Stream and event handles carry their rank in their id ((rank << 20) | index), so a handle
// used on another rank is an error rather than another rank's stream.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "src/device_impl.hpp"
#include "threads/device_state.hpp"
#include "threads/engine.hpp"

namespace dist::detail::threads {

namespace {

constexpr int kIndexBits = 20;

DeviceState& device_of(Rank& rk) {
  if (!rk.device) rk.device = std::make_shared<DeviceState>();
  return *rk.device;
}

std::string copy_name(device::detail::CopyKind kind) {
  switch (kind) {
    case device::detail::CopyKind::HostToDevice:
      return "memcpy_async (host to device)";
    case device::detail::CopyKind::DeviceToHost:
      return "memcpy_async (device to host)";
    case device::detail::CopyKind::DeviceToDevice:
      return "memcpy_async (device to device)";
  }
  return "memcpy_async";
}

}  // namespace

DeviceContext device_context(const char* call) {
  int r = -1;
  Engine* e = Engine::of_this_thread(r);
  if (!e) {
    throw Error(std::string("dist::device::") + call +
                ": the simulated device exists only inside dist::launch on the threads backend "
                "(Backend::Threads); call it from a rank's body");
  }
  return {e, r, device_of(e->rank_state(r))};
}

namespace {

int make_handle(int rank, std::size_t index) {
  return (rank << kIndexBits) | static_cast<int>(index);
}

std::size_t index_of(const DeviceContext& c, int handle, std::size_t count, const char* what) {
  const int owner = handle >> kIndexBits;
  const auto index = static_cast<std::size_t>(handle & ((1 << kIndexBits) - 1));
  if (owner != c.rank) {
    throw Error(std::string("a ") + what + " of rank " + std::to_string(owner) + " used on rank " +
                std::to_string(c.rank) +
                ": streams and events belong to the rank (device) that created them");
  }
  if (index >= count) throw Error(std::string("invalid ") + what + " handle");
  return index;
}

EventState& event_of(const DeviceContext& c, int handle) {
  return c.dev.events[index_of(c, handle, c.dev.events.size(), "event")];
}

double host_clock(const DeviceContext& c) { return c.engine->rank_state(c.rank).link.clock; }

void charge_launch(const DeviceContext& c) {
  if (c.dev.model.launch_overhead_s > 0) {
    c.engine->sim_compute(c.rank, c.dev.model.launch_overhead_s, "launch");
  }
}

}  // namespace

StreamState& stream_of(const DeviceContext& c, int handle) {
  return c.dev.streams[index_of(c, handle, c.dev.streams.size(), "stream")];
}

namespace {

/// The host blocks until simulated time `until`, then knows everything `clock` covers.
void host_wait(const DeviceContext& c, double until, const VectorClock& clock,
               const std::string& label) {
  const double now = host_clock(c);
  if (until > now) {
    c.engine->sim_compute(c.rank, until - now, label.c_str());
    // now + (until - now) can round to an ulp below `until`: the host would then not yet be at
    // the time it waited for (a query right after the synchronize could say "not done").
    double& host_now = c.engine->rank_state(c.rank).link.clock;
    if (host_now < until) host_now = until;
  }
  join(c.dev.host, clock);
}

void trace_span(const DeviceContext& c, const StreamState& s, const std::string& name, double t0,
                double t1, std::uint64_t bytes) {
  TraceEvent ev;
  ev.name = name;
  ev.t0 = t0;
  ev.t1 = t1;
  ev.bytes = bytes;
  ev.track = s.name;
  c.engine->trace(c.rank, std::move(ev));
}

}  // namespace

DeviceOp enqueue(const DeviceContext& c, int stream, const std::string& what,
                 const std::vector<device::detail::Access>& accesses,
                 const std::function<double(double start)>& run, std::uint64_t bytes,
                 bool traced_by_run) {
  const std::size_t index = index_of(c, stream, c.dev.streams.size(), "stream");
  const std::size_t agent = 1 + index;
  VectorClock clock = c.dev.streams[index].clock;
  join(clock, c.dev.host);
  if (clock.size() <= agent) clock.resize(agent + 1, 0);
  ++clock[agent];
  DeviceOp op;
  op.agent = agent;
  op.tick = clock[agent];
  op.what = what;
  op.stream = c.dev.streams[index].name;
  op.start = std::max(c.dev.streams[index].tail, host_clock(c));
  op.end = op.start;
  check_accesses(c.rank, c.dev, op, clock, accesses);  // before any data moves
  op.end = run(op.start);
  record_accesses(c.dev, op, accesses);
  StreamState& s = c.dev.streams[index];  // `run` may not create streams, but be safe
  s.clock = std::move(clock);
  s.tail = op.end;
  if (!traced_by_run) trace_span(c, s, what, op.start, op.end, bytes);
  charge_launch(c);
  return op;
}

}  // namespace dist::detail::threads

namespace dist::device {

namespace threads = ::dist::detail::threads;
using threads::device_context;
using threads::DeviceContext;

void set_model(const DeviceModel& m) {
  if (::dist::detail::real_device()) return;  // a real device has its own costs
  if (m.launch_overhead_s < 0 || m.h2d_Bps <= 0 || m.d2h_Bps <= 0 || m.d2d_Bps <= 0) {
    throw Error("set_model: launch_overhead_s must be >= 0 and every bandwidth > 0");
  }
  device_context("set_model").dev.model = m;
}
DeviceModel model() {
  if (::dist::detail::real_device()) return {};
  return device_context("model").dev.model;
}

namespace detail {

std::uint64_t buffer_create(const std::string& name, std::size_t bytes, std::size_t align,
                            void** data) {
  if (auto* real = ::dist::detail::real_device())
    return real->buffer_create(name, bytes, align, data);
  auto c = device_context("DeviceBuffer");
  auto& dev = c.dev;
  if (align > alignof(std::max_align_t)) throw Error("DeviceBuffer: unsupported alignment");
  // The rank in the high bits: another rank's buffer is never mistaken for one of this rank's.
  const std::uint64_t id = (static_cast<std::uint64_t>(c.rank + 1) << 40) | dev.next_buffer++;
  auto& b = dev.buffers[id];
  b.name = name;
  b.bytes = bytes;
  // max_align_t elements: the memory is aligned for every element type DeviceBuffer allows.
  b.memory.assign((bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t),
                  std::max_align_t{});
  std::memset(b.memory.data(), 0, b.memory.size() * sizeof(std::max_align_t));
  *data = b.memory.data();
  return id;
}

void buffer_destroy(std::uint64_t id) noexcept {
  if (auto* real = ::dist::detail::real_device()) {
    real->buffer_destroy(id);
    return;
  }
  int r = -1;
  auto* e = threads::Engine::of_this_thread(r);
  if (!e) return;
  auto& dev = e->rank_state(r).device;
  if (dev) dev->buffers.erase(id);
}

void check_body_access(std::uint64_t id, bool write) {
  if (::dist::detail::real_device()) {
    throw Error(
        "DeviceBuffer::span/cspan: on a CUDA device the memory is on the GPU and the host cannot "
        "touch it; move data with memcpy_async and compute with <dist/device_kernels.hpp>");
  }
  auto& dev = device_context("DeviceBuffer::span").dev;
  const std::string name = dev.buffers.count(id) ? dev.buffers[id].name : "?";
  if (!dev.body_accesses) {
    throw Error("device buffer '" + name +
                "' touched outside a kernel: its memory is on the device; use memcpy_async to "
                "move data, or launch a kernel that declares reads/writes of it");
  }
  for (const auto& a : *dev.body_accesses) {
    if (a.buffer == id && (a.write || !write)) return;
  }
  throw Error("kernel '" + dev.body_kernel + "' " + (write ? "writes" : "reads") +
              " device buffer '" + name + "' but does not declare it: add " +
              (write ? "writes(" : "reads(") + name + ") to its Kernel's accesses");
}

int stream_create(const std::string& name) {
  if (auto* real = ::dist::detail::real_device()) return real->stream_create(name);
  auto c = device_context("Stream");
  std::string shown = name;
  for (int k = 2; std::any_of(c.dev.streams.begin(), c.dev.streams.end(),
                              [&](const auto& s) { return s.name == shown; });
       ++k) {
    shown = name + "#" + std::to_string(k);
  }
  threads::StreamState s;
  s.name = shown;
  s.tail = threads::host_clock(c);
  c.dev.streams.push_back(std::move(s));
  return threads::make_handle(c.rank, c.dev.streams.size() - 1);
}

int event_create(const std::string& name) {
  if (auto* real = ::dist::detail::real_device()) return real->event_create(name);
  auto c = device_context("Event");
  threads::EventState e;
  e.name = name;
  c.dev.events.push_back(std::move(e));
  return threads::make_handle(c.rank, c.dev.events.size() - 1);
}

void copy(int stream, CopyKind kind, void* dst, const void* src, std::size_t bytes,
          std::uint64_t dst_buffer, std::uint64_t src_buffer) {
  if (auto* real = ::dist::detail::real_device()) return real->copy(stream, kind, dst, src, bytes);
  auto c = device_context("memcpy_async");
  const auto& m = c.dev.model;
  const double bw = kind == CopyKind::HostToDevice   ? m.h2d_Bps
                    : kind == CopyKind::DeviceToHost ? m.d2h_Bps
                                                     : m.d2d_Bps;
  std::vector<Access> accesses;
  if (src_buffer) accesses.push_back({src_buffer, false});
  if (dst_buffer) accesses.push_back({dst_buffer, true});
  threads::enqueue(
      c, stream, threads::copy_name(kind), accesses,
      [&](double start) {
        if (bytes) std::memmove(dst, src, bytes);
        return start + static_cast<double>(bytes) / bw;
      },
      bytes);
}

}  // namespace detail

void Stream::synchronize() {
  if (auto* real = ::dist::detail::real_device()) return real->stream_synchronize(id_);
  auto c = device_context("Stream::synchronize");
  auto& s = threads::stream_of(c, id_);
  threads::host_wait(c, s.tail, s.clock, "synchronize '" + s.name + "'");
}

bool Stream::query() {
  if (auto* real = ::dist::detail::real_device()) return real->stream_query(id_);
  auto c = device_context("Stream::query");
  auto& s = threads::stream_of(c, id_);
  if (s.tail > threads::host_clock(c)) return false;
  threads::join(c.dev.host, s.clock);
  return true;
}

void Stream::wait_event(const Event& e) {
  if (auto* real = ::dist::detail::real_device()) return real->stream_wait_event(id_, e.id());
  auto c = device_context("Stream::wait_event");
  auto& s = threads::stream_of(c, id_);
  auto& ev = threads::event_of(c, e.id());
  if (!ev.recorded) return;
  threads::join(s.clock, ev.clock);
  const double from = std::max(s.tail, threads::host_clock(c));
  if (ev.time > from) threads::trace_span(c, s, "wait event '" + ev.name + "'", from, ev.time, 0);
  s.tail = std::max(s.tail, ev.time);
}

void Event::record(Stream& st) {
  if (auto* real = ::dist::detail::real_device()) return real->event_record(id_, st.id());
  auto c = device_context("Event::record");
  auto& s = threads::stream_of(c, st.id());
  auto& ev = threads::event_of(c, id_);
  threads::join(s.clock, c.dev.host);
  ev.recorded = true;
  ev.time = std::max(s.tail, threads::host_clock(c));
  ev.clock = s.clock;
  ev.stream = s.name;
  threads::charge_launch(c);
}

bool Event::query() {
  if (auto* real = ::dist::detail::real_device()) return real->event_query(id_);
  auto c = device_context("Event::query");
  auto& ev = threads::event_of(c, id_);
  if (!ev.recorded) return true;
  if (ev.time > threads::host_clock(c)) return false;
  threads::join(c.dev.host, ev.clock);
  return true;
}

void Event::synchronize() {
  if (auto* real = ::dist::detail::real_device()) return real->event_synchronize(id_);
  auto c = device_context("Event::synchronize");
  auto& ev = threads::event_of(c, id_);
  if (!ev.recorded) return;
  threads::host_wait(c, ev.time, ev.clock, "synchronize event '" + ev.name + "'");
}

double elapsed_seconds(const Event& start, const Event& end) {
  if (auto* real = ::dist::detail::real_device())
    return real->elapsed_seconds(start.id(), end.id());
  auto c = device_context("elapsed_seconds");
  const auto& a = threads::event_of(c, start.id());
  const auto& b = threads::event_of(c, end.id());
  if (!a.recorded || !b.recorded) {
    throw Error("elapsed_seconds: event '" + (a.recorded ? b.name : a.name) +
                "' was never recorded");
  }
  const double now = threads::host_clock(c);
  if (a.time > now || b.time > now) {
    throw Error("elapsed_seconds: event '" + (a.time > now ? a.name : b.name) +
                "' is not complete yet (CUDA: cudaErrorNotReady): synchronize it first");
  }
  return b.time - a.time;
}

void device_synchronize() {
  if (auto* real = ::dist::detail::real_device()) return real->device_synchronize();
  auto c = device_context("device_synchronize");
  double until = threads::host_clock(c);
  threads::VectorClock all;
  for (const auto& s : c.dev.streams) {
    until = std::max(until, s.tail);
    threads::join(all, s.clock);
  }
  threads::host_wait(c, until, all, "device_synchronize");
}

void launch(Stream& s, const Kernel& k, const std::function<void()>& body) {
  if (::dist::detail::real_device()) {
    throw Error("launch: kernel '" + k.name +
                "': a host body cannot run on a CUDA device (the NCCL backend); use the kernels of "
                "<dist/device_kernels.hpp>, which run on both devices");
  }
  auto c = device_context("launch");
  if (k.seconds < 0) throw Error("launch: kernel '" + k.name + "' has a negative duration");
  threads::enqueue(
      c, s.id(), "kernel '" + k.name + "'", k.accesses,
      [&](double start) {
        c.dev.body_accesses = &k.accesses;
        c.dev.body_kernel = k.name;
        struct Reset {
          threads::DeviceState& d;
          ~Reset() { d.body_accesses = nullptr; }
        } reset{c.dev};
        if (body) body();
        return start + k.seconds;
      },
      0);
}

}  // namespace dist::device
