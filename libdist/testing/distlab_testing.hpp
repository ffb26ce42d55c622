// Helpers shared by the grader's C++ tests.
#pragma once

#include <gtest/gtest.h>

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

/// The size of the Open MPI job this test process belongs to, or 0 when not under mpirun.
inline int mpi_job_size() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size != nullptr ? std::atoi(size) : 0;
}

/// Launch options for tests: threads backend (the MPI backend under mpirun, where the job's size
/// wins over world_size), and a short timeout so a hang fails fast.
inline dist::LaunchOptions test_options(int world_size, int timeout_ms = 5000) {
  dist::LaunchOptions o;
  o.world_size = world_size;
  o.backend = mpi_job_size() > 0 ? dist::Backend::Mpi : dist::Backend::Threads;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

/// Runs body on world_size ranks; a rank's exception becomes a test failure with its message.
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
    const bool ok = (tol == 0.0) ? (g == w || (std::isnan(g) && std::isnan(w)))
                                 : std::abs(g - w) <= tol;
    if (!ok) {
      return ::testing::AssertionFailure()
             << "first wrong element at index " << i << " of " << got.size() << ": got " << g
             << ", expected " << w;
    }
  }
  return ::testing::AssertionSuccess();
}

/// Collects assertion results from ranks (gtest assertions are thread-safe, but messages naming
/// the rank help): call ok(rank, cond, msg) from any rank.
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

 private:
  mutable std::mutex mu_;
  std::vector<std::string> failures_;
};

}  // namespace distlab::testing
