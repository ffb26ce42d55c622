// Helpers for fake_dist's own tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "dist/dist.hpp"

namespace fake_test {

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

inline dist::LaunchOptions opts(int world_size, int timeout_ms = 10000) {
  dist::LaunchOptions o;
  o.world_size = world_size;
  o.backend = dist::Backend::Threads;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

/// Runs body on every rank and turns a launch error into a test failure.
inline void run(const dist::LaunchOptions& o, const std::function<void()>& body) {
  try {
    dist::launch(o, body);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "launch failed: " << e.what();
  }
}
inline void run(int world_size, const std::function<void()>& body) { run(opts(world_size), body); }

/// Runs body, expects launch to throw E, returns its message and how long launch took.
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
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return msg;
}

/// Thread-safe list of per-rank failures, reported at the end of a test.
class Failures {
 public:
  void add(int rank, const std::string& what) {
    std::lock_guard<std::mutex> g(mu_);
    list_.push_back("rank " + std::to_string(rank) + ": " + what);
  }
  void check() const {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& f : list_) ADD_FAILURE() << f;
  }
  bool empty() const {
    std::lock_guard<std::mutex> g(mu_);
    return list_.empty();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> list_;
};

/// First index where got != want (exact), or -1.
template <typename T>
long first_wrong(std::span<const T> got, std::span<const T> want) {
  if (got.size() != want.size()) return 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) return static_cast<long>(i);
  }
  return -1;
}

template <typename T>
std::string mismatch_text(std::span<const T> got, std::span<const T> want) {
  const long i = first_wrong(got, want);
  if (i < 0) return "";
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " but expected " + std::to_string(want.size());
  }
  return "first wrong element at index " + std::to_string(i) + " of " + std::to_string(got.size()) + ": got " +
         std::to_string(static_cast<double>(got[static_cast<std::size_t>(i)])) + ", expected " +
         std::to_string(static_cast<double>(want[static_cast<std::size_t>(i)]));
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace fake_test
