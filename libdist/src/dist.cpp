// The student-facing free functions of <dist/dist.hpp>: argument checks common to every engine,
// then a type-erased call on the calling rank's backend (src/backend.cpp: what engines share).
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "dist/backend.hpp"

namespace dist {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Product:
      return "product";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
  }
  return "?";
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::Threads:
      return "threads";
    case Backend::Mpi:
      return "mpi";
    case Backend::Nccl:
      return "nccl";
  }
  return "?";
}

const char* to_string(DataType type) {
  switch (type) {
    case DataType::Float32:
      return "float";
    case DataType::Float64:
      return "double";
    case DataType::Int32:
      return "int32";
    case DataType::Int64:
      return "int64";
  }
  return "?";
}

std::size_t size_of(DataType type) {
  switch (type) {
    case DataType::Float32:
      return 4;
    case DataType::Float64:
      return 8;
    case DataType::Int32:
      return 4;
    case DataType::Int64:
      return 8;
  }
  return 0;
}

double NetworkModel::message_cost(int src, int dst, std::size_t bytes) const {
  const bool inter = ranks_per_node > 0 && src / ranks_per_node != dst / ranks_per_node;
  const double alpha = inter ? inter_node_latency_s : latency_s;
  const double bw = inter ? inter_node_bandwidth_Bps : bandwidth_Bps;
  return alpha + (bw > 0 ? static_cast<double>(bytes) / bw : 0.0);
}

double NetworkModel::reduce_cost(std::size_t bytes) const {
  return reduce_Bps > 0 ? static_cast<double>(bytes) / reduce_Bps : 0.0;
}

NetworkModel NetworkModel::flat() { return NetworkModel{}; }

NetworkModel NetworkModel::two_level(int ranks_per_node) {
  if (ranks_per_node < 1) {
    throw Error("NetworkModel::two_level: ranks_per_node must be >= 1, got " +
                std::to_string(ranks_per_node));
  }
  NetworkModel m;
  m.latency_s = 1e-6;  // inside a node: NVLink/shared-memory-like
  m.bandwidth_Bps = 100e9;
  m.ranks_per_node = ranks_per_node;
  m.inter_node_latency_s = 20e-6;  // between nodes: a 10 Gb/s Ethernet-like link
  m.inter_node_bandwidth_Bps = 1.25e9;
  return m;
}

// ---- launching ------------------------------------------------------------------------------

void launch(const LaunchOptions& options, const std::function<void()>& body) {
  if (detail::current_or_null() != nullptr) {
    throw Error("dist::launch called from inside a rank: launch once, from main() or a test");
  }
  if (options.world_size < 1) {
    throw Error("dist::launch: world_size must be at least 1, got " +
                std::to_string(options.world_size));
  }
  if (options.timeout.count() <= 0) {
    throw Error("dist::launch: timeout must be positive, got " +
                std::to_string(options.timeout.count()) + " ms");
  }
  switch (options.backend) {
    case Backend::Threads:
      detail::launch_threads(options, body);
      return;
    case Backend::Mpi:
      detail::launch_mpi(options, body);
      return;
    case Backend::Nccl:
      detail::launch_nccl(options, body);
      return;
  }
}

void launch(int world_size, const std::function<void()>& body) {
  LaunchOptions options;
  options.world_size = world_size;
  launch(options, body);
}

bool in_launch() { return detail::current_or_null() != nullptr; }
int rank() { return detail::current().rank(); }
int world_size() { return detail::current().size(); }

const LaunchOptions& options() {
  detail::current();  // throws outside launch
  return *detail::current_options();
}

int detail::WorkImpl::source_rank() {
  throw Error(
      "Work::source_rank(): only a handle from irecv_any has a source (this one names its peer "
      "itself)");
}

int Work::source_rank() {
  if (!impl_) throw Error("Work::source_rank(): an empty Work has no source");
  return impl_->source_rank();
}

void wait_all(std::span<Work> works) {
  for (auto& w : works) w.wait();
}

// ---- argument checks ------------------------------------------------------------------------
namespace {

void check_peer(const char* fn, const char* what, int peer) {
  auto& b = detail::current();
  if (peer < 0 || peer >= b.size()) {
    std::ostringstream os;
    os << "rank " << b.rank() << ": " << fn << "(" << what << "=" << peer << "): " << what
       << " must be a rank in [0, " << b.size() << ")";
    throw Error(os.str());
  }
}

void check_tag(const char* fn, int tag) {
  if (tag < 0) {
    throw Error("rank " + std::to_string(detail::current().rank()) + ": " + fn +
                "(tag=" + std::to_string(tag) + "): tags must be >= 0");
  }
}

void check_size(const char* fn, const char* buffer, std::size_t got, std::size_t want,
                const char* rule) {
  if (got != want) {
    std::ostringstream os;
    os << "rank " << detail::current().rank() << ": " << fn << ": " << buffer << " has " << got
       << " elements but must have " << want << " (" << rule << ")";
    throw Error(os.str());
  }
}

template <typename T>
constexpr DataType type_of() {
  if constexpr (std::is_same_v<T, float>)
    return DataType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::Float64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DataType::Int32;
  else
    return DataType::Int64;
}

}  // namespace

void barrier() { detail::current().barrier(); }

Stats stats() { return detail::current().stats(); }
void reset_stats() { detail::current().reset_stats(); }
double sim_time() { return detail::current().sim_time(); }

void sim_compute(double seconds, const char* label) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    throw Error("sim_compute: seconds must be finite and >= 0, got " + std::to_string(seconds));
  }
  detail::current().sim_compute(seconds, label ? label : "compute");
}

void sim_reduce(std::size_t bytes) { detail::current().sim_reduce(bytes); }

#define DIST_DEFINE(T)                                                                           \
  void send(std::span<const T> buf, int dst, int tag) {                                          \
    check_peer("send", "dst", dst);                                                              \
    check_tag("send", tag);                                                                      \
    detail::current().send(buf.data(), buf.size(), type_of<T>(), dst, tag);                      \
  }                                                                                              \
  void recv(std::span<T> buf, int src, int tag) {                                                \
    check_peer("recv", "src", src);                                                              \
    check_tag("recv", tag);                                                                      \
    detail::current().recv(buf.data(), buf.size(), type_of<T>(), src, tag);                      \
  }                                                                                              \
  Work isend(std::span<const T> buf, int dst, int tag) {                                         \
    check_peer("isend", "dst", dst);                                                             \
    check_tag("isend", tag);                                                                     \
    return detail::current().isend(buf.data(), buf.size(), type_of<T>(), dst, tag);              \
  }                                                                                              \
  Work irecv(std::span<T> buf, int src, int tag) {                                               \
    check_peer("irecv", "src", src);                                                             \
    check_tag("irecv", tag);                                                                     \
    return detail::current().irecv(buf.data(), buf.size(), type_of<T>(), src, tag);              \
  }                                                                                              \
  int recv_any(std::span<T> buf, int tag) {                                                      \
    check_tag("recv_any", tag);                                                                  \
    return detail::current().recv_any(buf.data(), buf.size(), type_of<T>(), tag);                \
  }                                                                                              \
  Work irecv_any(std::span<T> buf, int tag) {                                                    \
    check_tag("irecv_any", tag);                                                                 \
    return detail::current().irecv_any(buf.data(), buf.size(), type_of<T>(), tag);               \
  }                                                                                              \
  void broadcast(std::span<T> buf, int src) {                                                    \
    check_peer("broadcast", "src", src);                                                         \
    detail::current().broadcast(buf.data(), buf.size(), type_of<T>(), src);                      \
  }                                                                                              \
  void reduce(std::span<T> buf, int dst, ReduceOp op) {                                          \
    check_peer("reduce", "dst", dst);                                                            \
    detail::current().reduce(buf.data(), buf.size(), type_of<T>(), op, dst);                     \
  }                                                                                              \
  void all_reduce(std::span<T> buf, ReduceOp op) {                                               \
    detail::current().all_reduce(buf.data(), buf.size(), type_of<T>(), op);                      \
  }                                                                                              \
  Work all_reduce_async(std::span<T> buf, ReduceOp op) {                                         \
    return detail::current().all_reduce_async(buf.data(), buf.size(), type_of<T>(), op);         \
  }                                                                                              \
  void gather(std::span<const T> in, std::span<T> out, int dst) {                                \
    check_peer("gather", "dst", dst);                                                            \
    auto& b = detail::current();                                                                 \
    if (b.rank() == dst) {                                                                       \
      check_size("gather", "out", out.size(), in.size() * b.size(), "world_size x in.size()");   \
    }                                                                                            \
    b.gather(in.data(), b.rank() == dst ? out.data() : nullptr, in.size(), type_of<T>(), dst);   \
  }                                                                                              \
  void all_gather(std::span<const T> in, std::span<T> out) {                                     \
    auto& b = detail::current();                                                                 \
    check_size("all_gather", "out", out.size(), in.size() * b.size(), "world_size x in.size()"); \
    b.all_gather(in.data(), out.data(), in.size(), type_of<T>());                                \
  }                                                                                              \
  void scatter(std::span<const T> in, std::span<T> out, int src) {                               \
    check_peer("scatter", "src", src);                                                           \
    auto& b = detail::current();                                                                 \
    if (b.rank() == src) {                                                                       \
      check_size("scatter", "in", in.size(), out.size() * b.size(), "world_size x out.size()");  \
    }                                                                                            \
    b.scatter(b.rank() == src ? in.data() : nullptr, out.data(), out.size(), type_of<T>(), src); \
  }                                                                                              \
  void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op) {                    \
    auto& b = detail::current();                                                                 \
    check_size("reduce_scatter", "in", in.size(), out.size() * b.size(),                         \
               "world_size x out.size()");                                                       \
    b.reduce_scatter(in.data(), out.data(), out.size(), type_of<T>(), op);                       \
  }                                                                                              \
  void reduce_into(std::span<T> inout, std::span<const T> in, ReduceOp op) {                     \
    if (inout.size() != in.size()) {                                                             \
      throw Error("reduce_into: inout has " + std::to_string(inout.size()) +                     \
                  " elements but in has " + std::to_string(in.size()) + "; they must match");    \
    }                                                                                            \
    detail::apply_op(inout.data(), in.data(), in.size(), type_of<T>(), op);                      \
    if (in_launch()) detail::current().sim_reduce(in.size_bytes());                              \
  }

DIST_DEFINE(float)
DIST_DEFINE(double)
DIST_DEFINE(std::int32_t)
DIST_DEFINE(std::int64_t)
#undef DIST_DEFINE

}  // namespace dist
