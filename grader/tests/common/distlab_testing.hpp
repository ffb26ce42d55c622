// Helpers shared by the grader's C++ tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "dist/dist.hpp"

namespace distlab::testing {

/// Launch options for tests: threads backend, a short timeout so a hang fails fast.
inline dist::LaunchOptions test_options(int world_size, int timeout_ms = 5000) {
  dist::LaunchOptions o;
  o.world_size = world_size;
  o.backend = dist::Backend::Threads;
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
