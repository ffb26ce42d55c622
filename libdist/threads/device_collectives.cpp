// Collectives on a stream of the simulated device (<dist/device.hpp>: all_reduce(buf, stream),
// all_reduce_async(buf, stream), all_gather(in, out, stream), reduce_scatter(in, out, stream)) and the current stream that their Work::wait() orders.
//
// A stream collective is the engine's built-in collective run with the rank's clock set to the
// time the stream reaches it: it meets the other ranks' calls (same order rule, same schedule,
// same counters) and the time it ends becomes the stream's tail; the host's clock is then put
// back, so the host did not wait. Its trace spans move to the stream's track. Its Work is an
// event recorded after it: is_completed() queries it, wait() makes the current stream wait on it.
// On a real device (the NCCL backend: src/device_impl.hpp) every call here goes to it instead, and
// the Work is the same: an event recorded (cudaEventRecord) after ncclAllReduce on the stream.
#include <algorithm>
#include <functional>
#include <vector>

#include "dist/backend.hpp"
#include "src/device_impl.hpp"
#include "threads/device_state.hpp"
#include "threads/engine.hpp"

namespace dist::detail::threads {
namespace {

class StreamCollectiveWork final : public WorkImpl {
 public:
  explicit StreamCollectiveWork(int event) : event_(event) {}
  bool is_completed() override { return device::Event::from_id(event_).query(); }
  void wait() override { device::current_stream().wait_event(device::Event::from_id(event_)); }

 private:
  int event_;
};

}  // namespace
}  // namespace dist::detail::threads

namespace dist::device {

namespace threads = ::dist::detail::threads;

Stream current_stream() {
  if (auto* real = ::dist::detail::real_device()) {
    if (real->current_stream < 0) real->current_stream = Stream("compute").id();
    return Stream::from_id(real->current_stream);
  }
  auto c = threads::device_context("current_stream");
  if (c.dev.current_stream < 0) c.dev.current_stream = Stream("compute").id();
  return Stream::from_id(c.dev.current_stream);
}

void set_current_stream(const Stream& s) {
  if (auto* real = ::dist::detail::real_device()) {
    real->current_stream = s.id();
    return;
  }
  auto c = threads::device_context("set_current_stream");
  (void)threads::stream_of(c, s.id());  // a stream of this rank
  c.dev.current_stream = s.id();
}

namespace detail {

void all_reduce_on(int stream, void* buf, std::size_t count, DataType type, ReduceOp op,
                   std::uint64_t buffer) {
  if (auto* real = ::dist::detail::real_device())
    return real->all_reduce(stream, buf, count, type, op);
  auto c = threads::device_context("all_reduce");
  threads::Rank& rk = c.engine->rank_state(c.rank);
  const std::string track = threads::stream_of(c, stream).name;  // checks the handle too
  threads::enqueue(
      c, stream, "all_reduce", {{buffer, true}},
      [&](double start) {
        const double host = rk.link.clock;
        const std::size_t first_span = rk.trace.size();
        rk.link.clock = start;
        try {
          ::dist::detail::current().all_reduce(buf, count, type, op, Group{});  // the world
        } catch (...) {
          rk.link.clock = std::max(host, rk.link.clock);
          throw;
        }
        const double end = rk.link.clock;
        rk.link.clock = host;
        for (std::size_t i = first_span; i < rk.trace.size(); ++i) rk.trace[i].track = track;
        return end;
      },
      count * size_of(type), true);
}

namespace {
/// Runs `collective` as a stream operation: the engine's built-in collective with the rank's clock
/// at the stream's start time, its end the stream's tail, the host's clock put back.
void stream_collective(const char* what, int stream,
                       const std::vector<device::detail::Access>& accesses, std::uint64_t bytes,
                       const std::function<void()>& collective) {
  auto c = threads::device_context(what);
  threads::Rank& rk = c.engine->rank_state(c.rank);
  const std::string track = threads::stream_of(c, stream).name;  // checks the handle too
  threads::enqueue(
      c, stream, what, accesses,
      [&](double start) {
        const double host = rk.link.clock;
        const std::size_t first_span = rk.trace.size();
        rk.link.clock = start;
        try {
          collective();
        } catch (...) {
          rk.link.clock = std::max(host, rk.link.clock);
          throw;
        }
        const double end = rk.link.clock;
        rk.link.clock = host;
        for (std::size_t i = first_span; i < rk.trace.size(); ++i) rk.trace[i].track = track;
        return end;
      },
      bytes, true);
}
}  // namespace

void all_gather_on(int stream, const void* in, void* out, std::size_t count, DataType type,
                   std::uint64_t in_buffer, std::uint64_t out_buffer) {
  if (auto* real = ::dist::detail::real_device())
    return real->all_gather(stream, in, out, count, type);
  const auto p = static_cast<std::size_t>(::dist::world_size());
  stream_collective("all_gather", stream, {{in_buffer, false}, {out_buffer, true}},
                    p * count * size_of(type),
                    [&] { ::dist::detail::current().all_gather(in, out, count, type, Group{}); });
}

void reduce_scatter_on(int stream, const void* in, void* out, std::size_t count, DataType type,
                       ReduceOp op, std::uint64_t in_buffer, std::uint64_t out_buffer) {
  if (auto* real = ::dist::detail::real_device())
    return real->reduce_scatter(stream, in, out, count, type, op);
  const auto p = static_cast<std::size_t>(::dist::world_size());
  stream_collective(
      "reduce_scatter", stream, {{in_buffer, false}, {out_buffer, true}}, p * count * size_of(type),
      [&] { ::dist::detail::current().reduce_scatter(in, out, count, type, op, Group{}); });
}

Work all_reduce_async_on(int stream, void* buf, std::size_t count, DataType type, ReduceOp op,
                         std::uint64_t buffer) {
  all_reduce_on(stream, buf, count, type, op, buffer);
  Event done("all_reduce done");
  Stream s = Stream::from_id(stream);
  done.record(s);
  return Work(std::make_shared<threads::StreamCollectiveWork>(done.id()));
}

}  // namespace detail
}  // namespace dist::device
