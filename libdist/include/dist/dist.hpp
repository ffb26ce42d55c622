// dist: the one communication API every distlab exercise is written against.
//
// Names mirror torch.distributed; argument order and meaning mirror NCCL:
//   * counts are elements, never bytes (a std::span carries its own count and type);
//   * a collective given one buffer works in place;
//   * `src`, `dst` and `root` are ranks in [0, world_size()), or, in a call given a Group, ranks
//     of that group in [0, group.size()) (see "Process groups" below).
// Buffers are std::span of float, double, int32_t, int64_t or dist::bf16, so std::vector and
// contiguous Eigen storage pass directly (see <dist/eigen.hpp> for a helper that turns a matrix into
// a span).
//
// Contract for every backend (threads, Open MPI, NCCL):
//   * rank() and world_size() never change inside launch();
//   * every rank calls collectives in the same order, with the same count, op and root;
//     a mismatch is reported as an error naming the ranks and the calls, never a hang.
//   * every function throws dist::Error (or a subclass) on failure; nothing calls exit().
#pragma once

#include <bit>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/source_location.hpp"

namespace dist {

/// Reduction operators. Avg is Sum followed by division by the number of ranks taking part
/// (world_size, or the group's size; integer types: truncating).
enum class ReduceOp { Sum, Product, Min, Max, Avg };

/// Which engine runs the ranks.
enum class Backend { Threads, Mpi, Nccl };

/// bfloat16 ("brain float"): the upper 16 bits of an IEEE float (1 sign, 8 exponent, 7 mantissa
/// bits). Same range as float, about 3 significant decimal digits: between 1 and 2 the bf16 values
/// are 2^-7 apart, so rounding changes a number by at most 2^-8 of its size. Half the bytes of
/// float on every wire: what mixed-precision training communicates.
///   * bf16(x) rounds the float x to the nearest bf16, ties to the one with an even last bit; a
///     NaN stays a NaN (quiet), infinities stay infinities, and floats too large for that rounding
///     become infinities as IEEE rounding does;
///   * float(b) is exact (every bf16 is a float);
///   * there is no arithmetic on bf16: convert to float, compute, convert back; == compares the
///     bit patterns (so +0 and -0 differ, and a NaN equals itself).
/// Reductions of bf16 buffers (reduce, all_reduce, reduce_scatter, reduce_into) compute each step
/// in float and round the result to bf16: one step combines one incoming bf16 value with the bf16
/// accumulator, so a sum over p ranks is rounded p-1 times (Avg: once more, after the division).
/// The threads backend combines in group-rank order 0, 1, ..., p-1; Open MPI and NCCL choose
/// their own order, so their bf16 sums may differ from it in the last bits.
struct bf16 {
  std::uint16_t bits = 0;

  constexpr bf16() = default;
  constexpr explicit bf16(float x) : bits(round(x)) {}
  constexpr explicit operator float() const {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  /// The bf16 whose bit pattern is `b`.
  static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
  friend constexpr bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }

 private:
  static constexpr std::uint16_t round(float x) {
    const auto u = std::bit_cast<std::uint32_t>(x);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign, force quiet
    }
    const std::uint32_t lsb = (u >> 16) & 1u;
    return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
  }
};
static_assert(sizeof(bf16) == 2, "bf16 must be two bytes");

/// Element types a buffer may hold (the span's element type picks it; students never name it).
enum class DataType { Float32, Float64, Int32, Int64, BFloat16 };

const char* to_string(ReduceOp op);
const char* to_string(Backend backend);
const char* to_string(DataType type);
std::size_t size_of(DataType type);

namespace detail {
/// The DataType of an element type the API takes (float, double, int32_t, int64_t, bf16).
template <typename T>
constexpr DataType data_type_of() {
  if constexpr (std::is_same_v<T, float>)
    return DataType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::Float64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DataType::Int32;
  else if constexpr (std::is_same_v<T, bf16>)
    return DataType::BFloat16;
  else {
    static_assert(std::is_same_v<T, std::int64_t>, "float, double, int32_t, int64_t or bf16");
    return DataType::Int64;
  }
}
}  // namespace detail

/// The simulated network of the threads backend (Hockney / alpha-beta model, see sim_time()).
/// Flat by default; with ranks_per_node > 0 it is two-level: ranks r and q share a node when
/// r / ranks_per_node == q / ranks_per_node, and messages between nodes use the inter_node_* link.
struct NetworkModel {
  double latency_s = 5e-6;      // alpha: per message
  double bandwidth_Bps = 10e9;  // 1/beta: per byte, per rank's link, each direction
  double reduce_Bps = 0;        // 1/gamma: local reduction speed; 0 = free
  int ranks_per_node = 0;       // 0 = flat network; > 0 = two-level (nodes of this many ranks)
  double inter_node_latency_s = 20e-6;       // alpha between nodes (two-level only)
  double inter_node_bandwidth_Bps = 1.25e9;  // 1/beta between nodes (two-level only)

  /// Seconds one message of `bytes` bytes occupies the link from `src` to `dst`: alpha + bytes*beta.
  double message_cost(int src, int dst, std::size_t bytes) const;
  /// Seconds to reduce `bytes` bytes locally (0 when reduce_Bps == 0).
  double reduce_cost(std::size_t bytes) const;

  static NetworkModel flat();                         // the defaults above
  static NetworkModel two_level(int ranks_per_node);  // fast links inside a node, slow between
};

struct LaunchOptions {
  int world_size = 4;  // ignored under mpirun (the job's size wins)
  Backend backend = Backend::Threads;
  NetworkModel network{};
  std::chrono::milliseconds timeout{30000};  // a wait longer than this is an error, never a hang
  std::string trace_path;                    // write a Chrome trace JSON here ("" = off)
};

/// True when this process is one rank of a job that a launcher started: Open MPI's mpirun
/// (OMPI_COMM_WORLD_SIZE), MPICH/Hydra and other PMI launchers (PMI_SIZE, PMI_RANK), PMIx
/// (PMIX_RANK) or Slurm's srun (SLURM_STEP_NUM_TASKS). Read once, when the program starts.
/// The launch flags (--world-size, --backend ...) are parsed by distlab::options_from_args
/// (<distlab/args.hpp>, the support library); under such a launcher the backend defaults to Mpi.
bool started_by_mpirun();

// ---------------------------------------------------------------------------------------------
// Errors. Every message names the rank(s) involved and says what to do.
/// An error that dist::launch rethrows with the failing rank in front of its message, keeping its
/// type (dist::Error and its subclasses; the support library's NotImplemented). Derive from
/// RankError<Self, Base> to make another type behave so.
struct Rethrowable {
  virtual ~Rethrowable() = default;
  /// The same kind of exception with another message.
  virtual std::exception_ptr with_message(const std::string& message) const = 0;
};

namespace detail {
struct NoMixin {};
}  // namespace detail

template <typename Self, typename Base>
struct RankError
    : Base,
      std::conditional_t<std::is_base_of_v<Rethrowable, Base>, detail::NoMixin, Rethrowable> {
  using Base::Base;
  std::exception_ptr with_message(const std::string& message) const override {
    return std::make_exception_ptr(Self(message));
  }
};

/// The base of every error dist throws.
struct Error : RankError<Error, std::runtime_error> {
  using RankError::RankError;
};
/// Every unfinished rank blocked in dist with nothing able to complete.
struct DeadlockError : RankError<DeadlockError, Error> {
  using RankError::RankError;
};
/// One wait lasted longer than LaunchOptions::timeout.
struct TimeoutError : RankError<TimeoutError, Error> {
  using RankError::RankError;
};
/// Send/recv size or type mismatch; collectives that do not match.
struct MismatchError : RankError<MismatchError, Error> {
  using RankError::RankError;
};
/// Another rank threw: this rank was woken with this error.
struct RankFailedError : RankError<RankFailedError, Error> {
  using RankError::RankError;
};

// ---------------------------------------------------------------------------------------------
// Launching ranks.

/// Runs body on every rank. Threads: spawns world_size threads, each one rank. Mpi/Nccl: this
/// process is one rank of the job that mpirun started. After all ranks stop, rethrows the first
/// rank's error (its message starts with "rank R: ") so a test or main() sees it. No thread is
/// left running when launch returns. Must not be called from inside a rank.
void launch(const LaunchOptions& options, const std::function<void()>& body);
void launch(int world_size, const std::function<void()>& body);

/// True on a thread (or process) that is currently a rank inside launch().
bool in_launch();
int rank();
int world_size();
/// The options this launch was started with (network model, timeout, backend).
const LaunchOptions& options();

// ---------------------------------------------------------------------------------------------
// Process groups (sub-communicators): torch.distributed's new_group, MPI_Comm_split and
// ncclCommSplit. Every point-to-point call and built-in collective takes an optional Group as its
// last argument; the default, Group{}, is the world. Inside a call on a group, ranks are group
// ranks: `dst`, `src`, `root`, the source recv_any returns, and the order of gather/all_gather/
// scatter/reduce_scatter blocks. Messages and collectives of different groups never match each
// other (a send on group g matches only a recv on g). Stats and the simulated clock stay per
// world rank: the per-peer counters are indexed by world rank whatever the group.
//
// Creating a group is itself collective over its parent: every rank of the parent calls it, in the
// same order relative to the parent's other collectives; different arguments where they must agree
// (new_group's list) are a MismatchError. A rank outside the new group gets a Group with
// is_member() false; any call on it throws dist::Error. Creation charges nothing to the simulated
// clock and counts no traffic (the threads backend; real backends pay their own setup).

namespace detail {
/// What a group is, shared by the copies of one Group on one rank (backends keep their native
/// communicators, keyed by `id`).
struct GroupInfo {
  int id = 0;                   // unique among the groups of a launch on the threads backend
  std::string name;             // shown in errors and on trace events
  std::vector<int> ranks;       // world rank of each group rank, in group-rank order
  std::vector<int> group_of;    // group rank of each world rank, -1 outside the group
  int my_rank = -1;             // the calling rank's group rank, -1 when not a member
  const void* owner = nullptr;  // the rank's backend that created it (one launch, one rank)
};
}  // namespace detail

/// A set of ranks that communicate on their own. Copies are cheap and share one description.
/// A Group is valid only on the rank, and inside the launch, that created it.
class Group {
 public:
  /// The world (every rank, group ranks = world ranks).
  Group() = default;
  explicit Group(std::shared_ptr<const detail::GroupInfo> info) : info_(std::move(info)) {}

  bool is_world() const { return !info_; }
  /// Whether the calling rank belongs to the group (always true for the world).
  bool is_member() const { return !info_ || info_->my_rank >= 0; }
  /// The calling rank's rank in the group; -1 when it is not a member.
  int rank() const;
  /// The number of ranks in the group.
  int size() const;
  /// "world" or the name given at creation.
  std::string name() const { return info_ ? info_->name : "world"; }
  /// The world rank of group rank `group_rank` (dist::Error when out of range).
  int world_rank(int group_rank) const;
  /// The group rank of world rank `world_rank`, -1 when it is not a member.
  int group_rank(int world_rank) const;
  /// The world ranks of the group, in group-rank order.
  std::vector<int> world_ranks() const;
  const detail::GroupInfo* info() const { return info_.get(); }
  const std::shared_ptr<const detail::GroupInfo>& shared_info() const { return info_; }

 private:
  std::shared_ptr<const detail::GroupInfo> info_;
};

/// The world as a Group (the same as Group{}).
inline Group world() { return Group{}; }

/// A group of the given world ranks, group rank i being ranks[i] (distinct, in [0, world_size())).
/// Collective over the world: every rank calls it with the same list, members or not.
/// `name` defaults to the list, e.g. "ranks{0,2}".
Group new_group(std::span<const int> ranks, const std::string& name = "");
Group new_group(std::initializer_list<int> ranks, const std::string& name = "");

/// Passing this colour to split() leaves the rank out of every new group (MPI_UNDEFINED).
inline constexpr int kNoColor = -1;
/// Splits `parent` by colour: the parent ranks that pass the same colour (>= 0) form one group,
/// ordered by key, ties by parent rank. Collective over the parent (every parent rank calls it).
/// Each new group is named `name` + colour ("<parent name>.c" + colour by default).
Group split(int color, int key, const Group& parent = Group{}, const std::string& name = "");

/// The calling rank's rank in `group` (-1 when not a member) and the group's size.
int rank(const Group& group);
int world_size(const Group& group);

// ---------------------------------------------------------------------------------------------
// Asynchronous handles.

namespace detail {
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  virtual bool is_completed() = 0;
  virtual void wait() = 0;
  /// The rank an any-source receive took its message from (waits first); others throw.
  virtual int source_rank();
};
}  // namespace detail

/// Handle to an operation in flight. wait() blocks until it is done and rethrows its error;
/// waiting twice is fine. A default-constructed Work is already complete.
/// Destroying an unfinished Work does not cancel it: wait on it before the buffer goes away.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkImpl> impl) : impl_(std::move(impl)) {}
  bool is_completed() { return !impl_ || impl_->is_completed(); }
  void wait() {
    if (impl_) impl_->wait();
  }
  /// For a handle from irecv_any: waits for the receive, then returns the rank the message came
  /// from (torch.distributed's Work._source_rank()). Any other handle: dist::Error.
  int source_rank();

 private:
  std::shared_ptr<detail::WorkImpl> impl_;
};

/// Waits for every handle in order.
void wait_all(std::span<Work> works);

// ---------------------------------------------------------------------------------------------
// Point-to-point. Matching is by (source, tag), first-in first-out; the only wildcard is the
// source of recv_any / irecv_any (below).
// send is synchronous: it returns only once the matching recv has taken the data (the threads
// backend enforces this, so code that relies on buffered sends deadlocks there, loudly).
// A send and its recv must agree on element type and count; otherwise both ranks get a
// MismatchError naming both ranks and both sizes.
//
// Receiving from any source: recv_any(buf, tag) takes one message with `tag` from whichever rank
// sent it and returns that rank; irecv_any(buf, tag) is its asynchronous form (the source:
// Work::source_rank(), after or instead of wait()). Which message is taken, per backend:
//   * threads: deterministic. Among the unmatched messages with that tag, the one that arrives
//     first on the simulated clock (the time it leaves its sender plus its cost, as sim_time()
//     models it), ties to the lowest source rank. The engine decides only once the choice can no
//     longer change: when every other rank is waiting in dist (or has finished), so a program
//     gives the same sources, values and simulated times on every run and machine. A pending
//     recv_any with tag t and a recv(src, t) on the same rank at the same time are an error (real
//     MPI would match them in posting order, which depends on timing): use distinct tags.
//   * Open MPI: MPI_ANY_SOURCE: the first message to reach the process, so results depend on
//     real timing and may differ between runs.
//   * NCCL: not supported (NCCL has no receive from any source): dist::Error.

// Every call below (and barrier and the built-in collectives) takes a last, defaulted argument
// `where`: the caller's file and line (::dist::SourceLocation), filled in by the compiler; never
// pass it. The threads backend names it in deadlock and timeout reports ("rank 0 blocked in
// send(...) at exercises/07_pipeline/pipeline.cpp:80"); the MPI and NCCL backends ignore it.

#define DIST_DECLARE_P2P(T)                                                                       \
  void send(std::span<const T> buf, int dst, int tag = 0, const Group& group = {},                \
            ::dist::SourceLocation where = ::dist::SourceLocation::current());                    \
  void recv(std::span<T> buf, int src, int tag = 0, const Group& group = {},                      \
            ::dist::SourceLocation where = ::dist::SourceLocation::current());                    \
  [[nodiscard]] Work isend(std::span<const T> buf, int dst, int tag = 0, const Group& group = {}, \
                           ::dist::SourceLocation where = ::dist::SourceLocation::current());     \
  [[nodiscard]] Work irecv(std::span<T> buf, int src, int tag = 0, const Group& group = {},       \
                           ::dist::SourceLocation where = ::dist::SourceLocation::current());     \
  int recv_any(std::span<T> buf, int tag = 0, const Group& group = {},                            \
               ::dist::SourceLocation where = ::dist::SourceLocation::current());                 \
  [[nodiscard]] Work irecv_any(std::span<T> buf, int tag = 0, const Group& group = {},            \
                               ::dist::SourceLocation where = ::dist::SourceLocation::current());
DIST_DECLARE_P2P(float)
DIST_DECLARE_P2P(double)
DIST_DECLARE_P2P(std::int32_t)
DIST_DECLARE_P2P(std::int64_t)
DIST_DECLARE_P2P(bf16)
#undef DIST_DECLARE_P2P

/// Blocks until every rank (of the group) has called barrier().
void barrier(const Group& group = {},
             ::dist::SourceLocation where = ::dist::SourceLocation::current());

// ---------------------------------------------------------------------------------------------
// Built-in collectives (the "library" ones; the exercises re-implement them from send/recv).
// Each documents the algorithm whose traffic and simulated time it reports on the threads
// backend (p = the group's size, world_size() by default; n = bytes of the buffer; alpha/beta/gamma
// from NetworkModel, between the world ranks that each message joins):
//   broadcast       binomial tree            ceil(log2 p) rounds of (alpha + n beta)
//   reduce          binomial tree            ceil(log2 p) rounds of (alpha + n beta + n gamma)
//   all_reduce      ring: reduce-scatter + all-gather, 2(p-1) steps of (alpha + n/p beta)
//                   (+ (p-1) n/p gamma)
//   gather          binomial tree            ceil(log2 p) alpha + (p-1)/p n_total beta
//   all_gather      ring                     (p-1) steps of (alpha + n_in beta)
//   scatter         binomial tree            ceil(log2 p) alpha + (p-1)/p n_total beta
//   reduce_scatter  ring                     (p-1) steps of (alpha + n_out beta + n_out gamma)
// See docs/threads_backend.md (section 5.1) for the exact per-rank message lists.

#define DIST_DECLARE_COLLECTIVES(T)                                                            \
  void broadcast(std::span<T> buf, int src, const Group& group = {},                           \
                 ::dist::SourceLocation where = ::dist::SourceLocation::current());            \
  void reduce(std::span<T> buf, int dst, ReduceOp op = ReduceOp::Sum, const Group& group = {}, \
              ::dist::SourceLocation where = ::dist::SourceLocation::current());               \
  void all_reduce(std::span<T> buf, ReduceOp op = ReduceOp::Sum, const Group& group = {},      \
                  ::dist::SourceLocation where = ::dist::SourceLocation::current());           \
  [[nodiscard]] Work all_reduce_async(                                                         \
      std::span<T> buf, ReduceOp op = ReduceOp::Sum, const Group& group = {},                  \
      ::dist::SourceLocation where = ::dist::SourceLocation::current());                       \
  /* out: size*in.size() elements on dst, ignored (may be empty) elsewhere */                  \
  void gather(std::span<const T> in, std::span<T> out, int dst, const Group& group = {},       \
              ::dist::SourceLocation where = ::dist::SourceLocation::current());               \
  /* out: size*in.size() elements on every rank; rank r's in lands at r*in.size() */           \
  void all_gather(std::span<const T> in, std::span<T> out, const Group& group = {},            \
                  ::dist::SourceLocation where = ::dist::SourceLocation::current());           \
  /* in: size*out.size() elements on src, ignored (may be empty) elsewhere */                  \
  void scatter(std::span<const T> in, std::span<T> out, int src, const Group& group = {},      \
               ::dist::SourceLocation where = ::dist::SourceLocation::current());              \
  /* in: size*out.size() elements; rank r gets the reduction of chunk r */                     \
  void reduce_scatter(std::span<const T> in, std::span<T> out, ReduceOp op = ReduceOp::Sum,    \
                      const Group& group = {},                                                 \
                      ::dist::SourceLocation where = ::dist::SourceLocation::current());
DIST_DECLARE_COLLECTIVES(float)
DIST_DECLARE_COLLECTIVES(double)
DIST_DECLARE_COLLECTIVES(std::int32_t)
DIST_DECLARE_COLLECTIVES(std::int64_t)
DIST_DECLARE_COLLECTIVES(bf16)
#undef DIST_DECLARE_COLLECTIVES

// ---------------------------------------------------------------------------------------------
// Instrumentation (threads backend exact; MPI counts point-to-point traffic the same way).

struct Stats {
  std::uint64_t messages_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
  // Per peer, indexed by rank (size world_size()).
  std::vector<std::uint64_t> messages_sent_to, bytes_sent_to;
  std::vector<std::uint64_t> messages_received_from, bytes_received_from;
  // Calls of this rank to built-in collectives (broadcast ... reduce_scatter, all_reduce_async),
  // not counting barrier(). Lets a test tell that an exercise did not just call the built-in.
  std::uint64_t builtin_collectives = 0;
  std::uint64_t barriers = 0;
};

/// This rank's counters since launch or reset_stats(). Built-in collectives add the messages of
/// the algorithm they document, as if it had been run with send/recv.
Stats stats();
void reset_stats();

/// This rank's simulated clock in seconds (threads backend; 0 elsewhere). The contract:
///   * deterministic: the same program gives bit-identical times on every run and machine;
///   * a message of b bytes from s to d costs c = message_cost(s, d, b) = alpha + b*beta and
///     holds s's outgoing and d's incoming link for c, one message at a time per link (in the
///     order the sender posts and the receiver completes them); a send returns once its message
///     left s's link, a recv once the message arrived, never earlier than the rank's own clock;
///   * sim_compute(s) adds s; reductions charge bytes / reduce_Bps (sim_reduce, reduce_into);
///   * barrier: every clock becomes the max over ranks (it costs nothing else);
///   * built-in collectives start at the max of the participants' clocks and charge each rank
///     the cost of the algorithm listed above, under the same link model.
/// The steps are in libdist/threads/link_model.hpp; the model, with worked examples, in
/// docs/threads_backend.md (section 4). Exercises that reduce data locally call sim_reduce(bytes)
/// (reduce_into does) to charge gamma.
double sim_time();
/// Charge modelled compute time to this rank's clock (shown as a span in the trace).
void sim_compute(double seconds, const char* label = "compute");
/// Charge the cost of reducing `bytes` bytes locally (bytes / reduce_Bps) to this rank's clock.
void sim_reduce(std::size_t bytes);

/// inout[i] = op(inout[i], in[i]) for every i, and charge the reduction to the simulated clock
/// (sim_reduce). Avg accumulates like Sum: divide by world_size() once at the end.
/// The exercises use this for every local reduction. Sizes must match (else dist::Error).
#define DIST_DECLARE_REDUCE_INTO(T) \
  void reduce_into(std::span<T> inout, std::span<const T> in, ReduceOp op);
DIST_DECLARE_REDUCE_INTO(float)
DIST_DECLARE_REDUCE_INTO(double)
DIST_DECLARE_REDUCE_INTO(std::int32_t)
DIST_DECLARE_REDUCE_INTO(std::int64_t)
DIST_DECLARE_REDUCE_INTO(bf16)
#undef DIST_DECLARE_REDUCE_INTO

}  // namespace dist
