// Wall-clock timing shared by the module programs and benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

namespace distlab {

/// Seconds since an arbitrary fixed point (steady clock).
inline double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

/// Measures elapsed wall time from construction (or restart()).
class Stopwatch {
 public:
  Stopwatch() : start_(now_s()) {}
  void restart() { start_ = now_s(); }
  double elapsed_s() const { return now_s() - start_; }
  double elapsed_ms() const { return elapsed_s() * 1e3; }

 private:
  double start_;
};

/// Median of a sample (copies; fine for the small samples benchmarks take). 0 for an empty one.
inline double median(std::vector<double> xs) {
  if (xs.empty()) return 0.0;
  std::sort(xs.begin(), xs.end());
  const std::size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

/// Runs fn `repeats` times (after `warmup` untimed runs) and returns each run's seconds.
template <typename Fn>
std::vector<double> time_runs(Fn&& fn, int repeats, int warmup = 1) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    Stopwatch sw;
    fn();
    out.push_back(sw.elapsed_s());
  }
  return out;
}

}  // namespace distlab
