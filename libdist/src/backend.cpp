// What every engine shares: the calling rank's backend, running a rank's body, errors with the
// rank in front, traffic counters, the element-wise reductions, and how a process knows that a
// launcher (mpirun, srun) started it.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "dist/backend.hpp"
#include "src/device_impl.hpp"

namespace dist {

bool started_by_mpirun() {
  // Open MPI; MPICH/Hydra and other PMI launchers; PMIx; Slurm's srun (SLURM_NTASKS alone is set
  // for a whole sbatch allocation, also where no srun started this process).
  static const bool started = [] {
    for (const char* var :
         {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"}) {
      if (std::getenv(var) != nullptr) return true;
    }
    return false;
  }();
  return started;
}

namespace {
// Read when the program starts (or earlier, from another static initialiser): an MPI singleton (a
// program started without a launcher) sets some of these variables itself during MPI_Init.
[[maybe_unused]] const bool g_read_at_start = started_by_mpirun();
}  // namespace

namespace detail {
namespace {
thread_local BackendImpl* t_backend = nullptr;
thread_local const LaunchOptions* t_options = nullptr;

template <typename T>
void apply_typed(T* inout, const T* in, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      for (std::size_t i = 0; i < n; ++i) inout[i] += in[i];
      break;
    case ReduceOp::Product:
      for (std::size_t i = 0; i < n; ++i) inout[i] *= in[i];
      break;
    case ReduceOp::Min:
      for (std::size_t i = 0; i < n; ++i) inout[i] = std::min(inout[i], in[i]);
      break;
    case ReduceOp::Max:
      for (std::size_t i = 0; i < n; ++i) inout[i] = std::max(inout[i], in[i]);
      break;
  }
}

// bf16: each element combined in float, the result rounded to the nearest bf16.
void apply_bf16(bf16* inout, const bf16* in, std::size_t n, ReduceOp op) {
  for (std::size_t i = 0; i < n; ++i) {
    float a = static_cast<float>(inout[i]);
    const float b = static_cast<float>(in[i]);
    apply_typed(&a, &b, 1, op);
    inout[i] = bf16(a);
  }
}
}  // namespace

BackendImpl& current() {
  if (t_backend == nullptr) {
    throw Error(
        "dist called outside dist::launch: call rank(), send(), all_reduce() ... only from inside "
        "the body passed to dist::launch(options, body)");
  }
  return *t_backend;
}

BackendImpl* current_or_null() { return t_backend; }

namespace {
thread_local CallSite t_call_site;
}  // namespace

CallSite call_site() { return t_call_site; }

CallSiteScope::CallSiteScope(const ::dist::SourceLocation& where) : saved_(t_call_site) {
  t_call_site = CallSite{where.file_name(), static_cast<unsigned>(where.line())};
}

CallSiteScope::~CallSiteScope() { t_call_site = saved_; }

std::string describe_call_site(const CallSite& site) {
  if (site.file == nullptr) return "";
  std::string path = site.file;
  std::size_t best = std::string::npos;
  for (const char* top : {"/exercises/", "/solutions/", "/grader/", "/libdist/", "/support/"}) {
    const std::size_t at = path.rfind(top);
    if (at != std::string::npos && (best == std::string::npos || at > best)) best = at;
  }
  if (best != std::string::npos) path = path.substr(best + 1);
  return path + ":" + std::to_string(site.line);
}

DeviceImpl* real_device() { return t_backend != nullptr ? t_backend->device() : nullptr; }
const LaunchOptions* current_options() { return t_options; }

void set_current(BackendImpl* backend, const LaunchOptions* options) {
  t_backend = backend;
  t_options = options;
}

RankOutcome run_rank_body(BackendImpl& backend, const LaunchOptions& options,
                          const std::function<void()>& body) {
  RankOutcome out;
  set_current(&backend, &options);
  try {
    body();
  } catch (const RankFailedError&) {
    out.error = std::current_exception();  // woken because another rank failed
  } catch (...) {
    out.error = std::current_exception();
    out.first_hand = true;
  }
  set_current(nullptr, nullptr);
  return out;
}

std::string what_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

std::exception_ptr with_rank_prefix(int rank, std::exception_ptr error) {
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  const std::string what = what_of(error);
  const std::string message = what.rfind(prefix, 0) == 0 ? what : prefix + what;
  try {
    std::rethrow_exception(error);
  } catch (const Rethrowable& x) {
    return x.with_message(message);
  } catch (...) {
    return std::make_exception_ptr(Error(message));
  }
}

Stats fresh_stats(int world_size) {
  const auto n = static_cast<std::size_t>(world_size);
  Stats s;
  s.messages_sent_to.assign(n, 0);
  s.bytes_sent_to.assign(n, 0);
  s.messages_received_from.assign(n, 0);
  s.bytes_received_from.assign(n, 0);
  return s;
}

void count_message(Stats& stats, Direction direction, int peer, std::uint64_t bytes) {
  const bool sent = direction == Direction::Sent;
  const auto q = static_cast<std::size_t>(peer);
  (sent ? stats.messages_sent : stats.messages_received) += 1;
  (sent ? stats.bytes_sent : stats.bytes_received) += bytes;
  (sent ? stats.messages_sent_to : stats.messages_received_from)[q] += 1;
  (sent ? stats.bytes_sent_to : stats.bytes_received_from)[q] += bytes;
}

void check_work_in_launch(bool closed, const std::string& what) {
  if (closed) {
    throw Error(what +
                ": Work used after dist::launch returned: wait on every Work inside the "
                "launch body");
  }
}

void apply_op(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::Float32:
      apply_typed(static_cast<float*>(inout), static_cast<const float*>(in), count, op);
      break;
    case DataType::Float64:
      apply_typed(static_cast<double*>(inout), static_cast<const double*>(in), count, op);
      break;
    case DataType::Int32:
      apply_typed(static_cast<std::int32_t*>(inout), static_cast<const std::int32_t*>(in), count,
                  op);
      break;
    case DataType::Int64:
      apply_typed(static_cast<std::int64_t*>(inout), static_cast<const std::int64_t*>(in), count,
                  op);
      break;
    case DataType::BFloat16:  // each step in float, rounded to bf16 (dist.hpp, struct bf16)
      apply_bf16(static_cast<bf16*>(inout), static_cast<const bf16*>(in), count, op);
      break;
  }
}

void divide(void* buf, std::size_t count, DataType type, int divisor) {
  auto run = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
  };
  switch (type) {
    case DataType::Float32:
      run(static_cast<float*>(buf));
      break;
    case DataType::Float64:
      run(static_cast<double*>(buf));
      break;
    case DataType::Int32:
      run(static_cast<std::int32_t*>(buf));
      break;
    case DataType::Int64:
      run(static_cast<std::int64_t*>(buf));
      break;
    case DataType::BFloat16: {
      auto* p = static_cast<bf16*>(buf);
      for (std::size_t i = 0; i < count; ++i) {
        p[i] = bf16(static_cast<float>(p[i]) / static_cast<float>(divisor));
      }
      break;
    }
  }
}

#ifndef DISTLAB_HAVE_MPI
void launch_mpi(const LaunchOptions&, const std::function<void()>&) {
  throw Error(
      "the Open MPI backend is not built: install Open MPI (Debian: apt-get install libopenmpi-dev "
      "openmpi-bin), rebuild, and check with ./distlab doctor");
}
#endif
#ifndef DISTLAB_HAVE_NCCL
void launch_nccl(const LaunchOptions&, const std::function<void()>&) {
  throw Error(
      "the NCCL backend is not built: it needs the CUDA toolkit with NCCL and a GPU; "
      "check with ./distlab doctor");
}
#endif

}  // namespace detail

}  // namespace dist
