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
    case DataType::BFloat16:
      return "bf16";
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
    case DataType::BFloat16:
      return 2;
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

// The calling rank must belong to the group it calls on.
void check_member(const char* fn, const Group& group) {
  if (group.info() && group.info()->owner != &detail::current()) {
    throw Error("rank " + std::to_string(detail::current().rank()) + ": " + fn + " on group '" +
                group.name() +
                "': this Group was created by another rank or in another launch; each rank "
                "uses the Group its own new_group/split call returned, inside the same launch");
  }
  if (group.is_member()) return;
  std::ostringstream os;
  os << "rank " << detail::current().rank() << ": " << fn << " on group '" << group.name()
     << "': this rank is not a member of the group (world ranks";
  for (int w : group.world_ranks()) os << " " << w;
  os << "); only members may call on it";
  throw Error(os.str());
}

void check_peer(const char* fn, const char* what, int peer, const Group& group) {
  check_member(fn, group);
  const int n = group.size();
  if (peer < 0 || peer >= n) {
    std::ostringstream os;
    os << "rank " << detail::current().rank() << ": " << fn << "(" << what << "=" << peer
       << "): " << what << " must be a rank in [0, " << n << ")";
    if (!group.is_world()) os << " of group '" << group.name() << "' (group ranks)";
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

constexpr const char* kSizeIn = "world_size (or the group's size) x in.size()";
constexpr const char* kSizeOut = "world_size (or the group's size) x out.size()";

}  // namespace

// ---- groups ---------------------------------------------------------------------------------

int Group::rank() const { return info_ ? info_->my_rank : detail::current().rank(); }
int Group::size() const {
  return info_ ? static_cast<int>(info_->ranks.size()) : detail::current().size();
}

int Group::world_rank(int group_rank) const {
  if (group_rank < 0 || group_rank >= size()) {
    throw Error("Group::world_rank(" + std::to_string(group_rank) + "): group '" + name() +
                "' has ranks [0, " + std::to_string(size()) + ")");
  }
  return info_ ? info_->ranks[static_cast<std::size_t>(group_rank)] : group_rank;
}

int Group::group_rank(int world_rank) const {
  if (!info_) return world_rank >= 0 && world_rank < detail::current().size() ? world_rank : -1;
  if (world_rank < 0 || world_rank >= static_cast<int>(info_->group_of.size())) return -1;
  return info_->group_of[static_cast<std::size_t>(world_rank)];
}

std::vector<int> Group::world_ranks() const {
  if (info_) return info_->ranks;
  std::vector<int> all(static_cast<std::size_t>(detail::current().size()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

int rank(const Group& group) { return group.rank(); }
int world_size(const Group& group) { return group.size(); }

Group new_group(std::span<const int> ranks, const std::string& name) {
  auto& b = detail::current();
  std::vector<int> list(ranks.begin(), ranks.end());
  std::vector<char> seen(static_cast<std::size_t>(b.size()), 0);
  for (int w : list) {
    if (w < 0 || w >= b.size() || seen[static_cast<std::size_t>(w)]) {
      throw Error("rank " + std::to_string(b.rank()) + ": new_group: rank " + std::to_string(w) +
                  (w < 0 || w >= b.size()
                       ? " is not a world rank in [0, " + std::to_string(b.size()) + ")"
                       : " is listed twice") +
                  "; list distinct world ranks");
    }
    seen[static_cast<std::size_t>(w)] = 1;
  }
  if (list.empty()) throw Error("rank " + std::to_string(b.rank()) + ": new_group: empty list");
  std::string n = name;
  if (n.empty()) {
    n = "ranks{";
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i > 0) n += ',';
      n += std::to_string(list[i]);
    }
    n += "}";
  }
  return Group(b.new_group(list, n));
}

Group new_group(std::initializer_list<int> ranks, const std::string& name) {
  return new_group(std::span<const int>(ranks.begin(), ranks.size()), name);
}

Group split(int color, int key, const Group& parent, const std::string& name) {
  check_member("split", parent);
  if (color < 0 && color != kNoColor) {
    throw Error("rank " + std::to_string(detail::current().rank()) + ": split(color=" +
                std::to_string(color) + "): a colour is >= 0, or kNoColor to stay out");
  }
  return Group(
      detail::current().split(color, key, parent, name.empty() ? parent.name() + ".c" : name));
}

void barrier(const Group& group, ::dist::SourceLocation where) {
  const detail::CallSiteScope at(where);
  check_member("barrier", group);
  detail::current().barrier(group);
}

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

#define DIST_DEFINE(T)                                                                             \
  void send(std::span<const T> buf, int dst, int tag, const Group& g,                              \
            ::dist::SourceLocation where) {                                                        \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("send", "dst", dst, g);                                                             \
    check_tag("send", tag);                                                                        \
    detail::current().send(buf.data(), buf.size(), detail::data_type_of<T>(), dst, tag, g);        \
  }                                                                                                \
  void recv(std::span<T> buf, int src, int tag, const Group& g, ::dist::SourceLocation where) {    \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("recv", "src", src, g);                                                             \
    check_tag("recv", tag);                                                                        \
    detail::current().recv(buf.data(), buf.size(), detail::data_type_of<T>(), src, tag, g);        \
  }                                                                                                \
  Work isend(std::span<const T> buf, int dst, int tag, const Group& g,                             \
             ::dist::SourceLocation where) {                                                       \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("isend", "dst", dst, g);                                                            \
    check_tag("isend", tag);                                                                       \
    return detail::current().isend(buf.data(), buf.size(), detail::data_type_of<T>(), dst, tag,    \
                                   g);                                                             \
  }                                                                                                \
  Work irecv(std::span<T> buf, int src, int tag, const Group& g, ::dist::SourceLocation where) {   \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("irecv", "src", src, g);                                                            \
    check_tag("irecv", tag);                                                                       \
    return detail::current().irecv(buf.data(), buf.size(), detail::data_type_of<T>(), src, tag,    \
                                   g);                                                             \
  }                                                                                                \
  int recv_any(std::span<T> buf, int tag, const Group& g, ::dist::SourceLocation where) {          \
    const detail::CallSiteScope at(where);                                                         \
    check_member("recv_any", g);                                                                   \
    check_tag("recv_any", tag);                                                                    \
    return detail::current().recv_any(buf.data(), buf.size(), detail::data_type_of<T>(), tag, g);  \
  }                                                                                                \
  Work irecv_any(std::span<T> buf, int tag, const Group& g, ::dist::SourceLocation where) {        \
    const detail::CallSiteScope at(where);                                                         \
    check_member("irecv_any", g);                                                                  \
    check_tag("irecv_any", tag);                                                                   \
    return detail::current().irecv_any(buf.data(), buf.size(), detail::data_type_of<T>(), tag, g); \
  }                                                                                                \
  void broadcast(std::span<T> buf, int src, const Group& g, ::dist::SourceLocation where) {        \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("broadcast", "src", src, g);                                                        \
    detail::current().broadcast(buf.data(), buf.size(), detail::data_type_of<T>(), src, g);        \
  }                                                                                                \
  void reduce(std::span<T> buf, int dst, ReduceOp op, const Group& g,                              \
              ::dist::SourceLocation where) {                                                      \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("reduce", "dst", dst, g);                                                           \
    detail::current().reduce(buf.data(), buf.size(), detail::data_type_of<T>(), op, dst, g);       \
  }                                                                                                \
  void all_reduce(std::span<T> buf, ReduceOp op, const Group& g, ::dist::SourceLocation where) {   \
    const detail::CallSiteScope at(where);                                                         \
    check_member("all_reduce", g);                                                                 \
    detail::current().all_reduce(buf.data(), buf.size(), detail::data_type_of<T>(), op, g);        \
  }                                                                                                \
  Work all_reduce_async(std::span<T> buf, ReduceOp op, const Group& g,                             \
                        ::dist::SourceLocation where) {                                            \
    const detail::CallSiteScope at(where);                                                         \
    check_member("all_reduce_async", g);                                                           \
    return detail::current().all_reduce_async(buf.data(), buf.size(), detail::data_type_of<T>(),   \
                                              op, g);                                              \
  }                                                                                                \
  void gather(std::span<const T> in, std::span<T> out, int dst, const Group& g,                    \
              ::dist::SourceLocation where) {                                                      \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("gather", "dst", dst, g);                                                           \
    const bool root = g.rank() == dst;                                                             \
    if (root) check_size("gather", "out", out.size(), in.size() * g.size(), kSizeIn);              \
    detail::current().gather(in.data(), root ? out.data() : nullptr, in.size(),                    \
                             detail::data_type_of<T>(), dst, g);                                   \
  }                                                                                                \
  void all_gather(std::span<const T> in, std::span<T> out, const Group& g,                         \
                  ::dist::SourceLocation where) {                                                  \
    const detail::CallSiteScope at(where);                                                         \
    check_member("all_gather", g);                                                                 \
    check_size("all_gather", "out", out.size(), in.size() * g.size(), kSizeIn);                    \
    detail::current().all_gather(in.data(), out.data(), in.size(), detail::data_type_of<T>(), g);  \
  }                                                                                                \
  void scatter(std::span<const T> in, std::span<T> out, int src, const Group& g,                   \
               ::dist::SourceLocation where) {                                                     \
    const detail::CallSiteScope at(where);                                                         \
    check_peer("scatter", "src", src, g);                                                          \
    const bool root = g.rank() == src;                                                             \
    if (root) check_size("scatter", "in", in.size(), out.size() * g.size(), kSizeOut);             \
    detail::current().scatter(root ? in.data() : nullptr, out.data(), out.size(),                  \
                              detail::data_type_of<T>(), src, g);                                  \
  }                                                                                                \
  void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op, const Group& g,        \
                      ::dist::SourceLocation where) {                                              \
    const detail::CallSiteScope at(where);                                                         \
    check_member("reduce_scatter", g);                                                             \
    check_size("reduce_scatter", "in", in.size(), out.size() * g.size(), kSizeOut);                \
    detail::current().reduce_scatter(in.data(), out.data(), out.size(), detail::data_type_of<T>(), \
                                     op, g);                                                       \
  }                                                                                                \
  void reduce_into(std::span<T> inout, std::span<const T> in, ReduceOp op) {                       \
    if (inout.size() != in.size()) {                                                               \
      throw Error("reduce_into: inout has " + std::to_string(inout.size()) +                       \
                  " elements but in has " + std::to_string(in.size()) + "; they must match");      \
    }                                                                                              \
    detail::apply_op(inout.data(), in.data(), in.size(), detail::data_type_of<T>(), op);           \
    if (in_launch()) detail::current().sim_reduce(in.size_bytes());                                \
  }

DIST_DEFINE(float)
DIST_DEFINE(double)
DIST_DEFINE(std::int32_t)
DIST_DEFINE(std::int64_t)
DIST_DEFINE(bf16)
#undef DIST_DEFINE

}  // namespace dist
