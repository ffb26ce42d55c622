// Helpers shared by every C++ test of the kit: the communication library's own tests
// (libdist/tests), the grader's public tests (grader/tests) and the hidden ones (grader/hidden).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "dist/dist.hpp"

namespace distlab::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif
#else
inline constexpr bool kTsan = false;
#endif

/// The size of the MPI job this test process belongs to, or 0 when no launcher started it.
inline int mpi_job_size() {
  if (!dist::started_by_mpirun()) return 0;
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (const char* size = std::getenv(var)) return std::atoi(size);
  }
  return 1;
}

/// Options for a launch on the NCCL backend over this process's job (one rank without mpirun).
inline dist::LaunchOptions cuda_launch_options() {
  dist::LaunchOptions o;
  o.backend = dist::Backend::Nccl;
  o.world_size = std::max(1, mpi_job_size());
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

/// Why GPU tests cannot run here ("" when they can): an empty NCCL launch, whose "no CUDA GPU"
/// error (cudaGetDeviceCount failed or found none) turns into a skip. Any other error fails.
inline std::string no_cuda_device_reason() {
  static const std::string reason = [] {
    try {
      dist::launch(cuda_launch_options(), [] {});
      return std::string();
    } catch (const dist::Error& e) {
      const std::string what = e.what();
      if (what.find("no CUDA GPU") != std::string::npos) return what;
      throw;
    }
  }();
  return reason;
}

/// This process's rank in its MPI job (0 when no launcher started it).
inline int mpi_job_rank() {
  if (!dist::started_by_mpirun()) return 0;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* rank = std::getenv(var)) return std::atoi(rank);
  }
  return 0;
}

/// The world size of a module's value test: the MPI job's under mpirun, else `threads_size` (the
/// threads backend, every rank in this process).
inline int job_size_or(int threads_size) {
  const int p = mpi_job_size();
  return p > 0 ? p : threads_size;
}

/// The one rank this process is under mpirun, or -1 on the threads backend (it holds them all).
inline int job_rank_or_all() { return dist::started_by_mpirun() ? mpi_job_rank() : -1; }

/// Launch options on the threads backend with a timeout, so a hang fails fast.
inline dist::LaunchOptions threads_options(int world_size, int timeout_ms = 10000) {
  dist::LaunchOptions o;
  o.world_size = world_size;
  o.backend = dist::Backend::Threads;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

/// Launch options for the grader's tests: the threads backend, or the MPI backend under mpirun
/// (where the job's size wins over world_size), and a short timeout.
inline dist::LaunchOptions test_options(int world_size, int timeout_ms = 5000) {
  dist::LaunchOptions o = threads_options(world_size, timeout_ms);
  if (mpi_job_size() > 0) o.backend = dist::Backend::Mpi;
  return o;
}

/// Runs body on every rank; a launch error (the first rank's) becomes a test failure.
inline void run_ranks(const dist::LaunchOptions& options, const std::function<void()>& body) {
  try {
    dist::launch(options, body);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}
inline void run_ranks(int world_size, const std::function<void()>& body) {
  run_ranks(test_options(world_size), body);
}

/// Runs body, expects launch to throw E, returns its message (and how long launch took).
template <typename E>
std::string expect_error(const dist::LaunchOptions& o, const std::function<void()>& body,
                         double* seconds = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    dist::launch(o, body);
    ADD_FAILURE() << "launch returned normally; expected an error";
  } catch (const E& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "launch threw the wrong type of error: " << e.what();
  }
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return msg;
}

/// Compares element by element and reports the first wrong index (gloo's test style).
template <typename T>
::testing::AssertionResult elements_near(std::span<const T> got, std::span<const T> want,
                                         double rel_tol = 0.0, double abs_tol = 0.0) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << " but expected " << want.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = static_cast<double>(want[i]);
    const double tol = abs_tol + rel_tol * std::abs(w);
    const bool ok =
        (tol == 0.0) ? (g == w || (std::isnan(g) && std::isnan(w))) : std::abs(g - w) <= tol;
    if (!ok) {
      return ::testing::AssertionFailure() << "first wrong element at index " << i << " of "
                                           << got.size() << ": got " << g << ", expected " << w;
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult elements_near(const std::vector<T>& got, const std::vector<T>& want,
                                         double rel_tol = 0.0, double abs_tol = 0.0) {
  return elements_near(std::span<const T>(got), std::span<const T>(want), rel_tol, abs_tol);
}

/// op over value(0), value(1), ..., value(p-1) in rank order, accumulated in Acc: the closed form
/// of a reduction. Avg accumulates as Sum (divide by p where the test needs the average).
template <typename Acc, typename Value>
Acc fold_ranks(dist::ReduceOp op, int p, Value&& value) {
  Acc acc = static_cast<Acc>(value(0));
  for (int r = 1; r < p; ++r) {
    const Acc x = static_cast<Acc>(value(r));
    switch (op) {
      case dist::ReduceOp::Sum:
      case dist::ReduceOp::Avg:
        acc = static_cast<Acc>(acc + x);
        break;
      case dist::ReduceOp::Product:
        acc = static_cast<Acc>(acc * x);
        break;
      case dist::ReduceOp::Min:
        acc = std::min(acc, x);
        break;
      case dist::ReduceOp::Max:
        acc = std::max(acc, x);
        break;
    }
  }
  return acc;
}

/// "" when got == want exactly, else what elements_near reports.
template <typename T>
std::string mismatch_text(std::span<const T> got, std::span<const T> want) {
  const ::testing::AssertionResult r = elements_near(got, want);
  return r ? std::string() : std::string(r.message());
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// Failures collected from the ranks (any thread), each naming its rank; check() reports them
/// as test failures at the end of a test.
class RankLog {
 public:
  void fail(int rank, const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu_);
    std::ostringstream os;
    os << "rank " << rank << ": " << msg;
    failures_.push_back(os.str());
  }
  std::vector<std::string> failures() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_;
  }
  bool empty() const {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_.empty();
  }
  void check() const {
    for (const auto& f : failures()) ADD_FAILURE() << f;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> failures_;
};

}  // namespace distlab::testing

/// Skips the calling test, as "skipped: no CUDA device (why)", where no GPU is usable.
#define DISTLAB_SKIP_WITHOUT_CUDA_DEVICE()                                                         \
  do {                                                                                             \
    const std::string distlab_why_ = distlab::testing::no_cuda_device_reason();                    \
    if (!distlab_why_.empty()) GTEST_SKIP() << "skipped: no CUDA device (" << distlab_why_ << ")"; \
  } while (0)
