// A seeded random number generator whose streams are the same on every platform and compiler.
// (std::uniform_real_distribution and std::normal_distribution are implementation-defined, so
// they are not used: reference outputs and the data must not depend on the standard library.)
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace datasets {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}

  /// 64 random bits (std::mt19937_64, whose output the C++ standard fixes).
  std::uint64_t bits() { return engine_(); }
  /// Uniform in [0, 1), 24 random bits.
  float uniform() { return static_cast<float>(bits() >> 40) * 0x1.0p-24f; }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n), unbiased (rejection sampling). n must be > 0.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    std::uint64_t r;
    do {
      r = bits();
    } while (r >= limit);
    return r % n;
  }
  /// Standard normal (Box-Muller, computed in double).
  float normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(bits() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(bits() >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double two_pi = 6.283185307179586;
    spare_ = static_cast<float>(r * std::sin(two_pi * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(two_pi * u2));
  }

 private:
  std::mt19937_64 engine_;
  float spare_ = 0.0f;
  bool has_spare_ = false;
};

}  // namespace datasets
