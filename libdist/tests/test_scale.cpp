// Many ranks on few cores: 64 ranks x 20 all-reduces, 256 ranks with barriers and an all-reduce,
// a 64-rank point-to-point ring. Each must take seconds at most (waits sleep, they do not spin).
#include <chrono>

#include "distlab_testing.hpp"

using namespace distlab::testing;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Scale, SixtyFourRanksTwentyAllReduces) {
  RankLog failures;
  const auto t0 = std::chrono::steady_clock::now();
  run_ranks(threads_options(64), [&] {
    std::vector<float> v(1000);
    for (int i = 0; i < 20; ++i) {
      std::fill(v.begin(), v.end(), static_cast<float>(dist::rank() + i));
      dist::all_reduce(std::span<float>(v));
      const float want = static_cast<float>(64 * 63 / 2 + 64 * i);
      if (v[999] != want)
        failures.fail(dist::rank(),
                      "iteration " + std::to_string(i) + ": got " + std::to_string(v[999]));
    }
  });
  failures.check();
  const double s = seconds_since(t0);
  std::printf("64 ranks x 20 all_reduce(1000 floats): %.3f s\n", s);
  EXPECT_LT(s, kTsan ? 60.0 : 10.0);
}

TEST(Scale, TwoHundredFiftySixRanksBarriersAndAllReduce) {
  RankLog failures;
  const auto t0 = std::chrono::steady_clock::now();
  run_ranks(threads_options(256), [&] {
    for (int i = 0; i < 10; ++i) dist::barrier();
    std::vector<std::int64_t> v(1000, dist::rank());
    dist::all_reduce(std::span<std::int64_t>(v));
    if (v[0] != 256 * 255 / 2) failures.fail(dist::rank(), "got " + std::to_string(v[0]));
    if (dist::stats().barriers != 10) failures.fail(dist::rank(), "barriers not counted");
  });
  failures.check();
  const double s = seconds_since(t0);
  std::printf("256 ranks, 10 barriers + all_reduce: %.3f s\n", s);
  EXPECT_LT(s, kTsan ? 60.0 : 10.0);
}

TEST(Scale, SixtyFourRankPointToPointRing) {
  RankLog failures;
  const auto t0 = std::chrono::steady_clock::now();
  run_ranks(threads_options(64), [&] {
    const int r = dist::rank(), p = dist::world_size();
    std::vector<int> token(16, r);
    for (int round = 0; round < 10; ++round) {
      if (r % 2 == 0) {
        dist::send(std::span<const int>(token), (r + 1) % p);
        dist::recv(std::span<int>(token), (r + p - 1) % p);
      } else {
        std::vector<int> in(16);
        dist::recv(std::span<int>(in), (r + p - 1) % p);
        dist::send(std::span<const int>(token), (r + 1) % p);
        token = in;
      }
    }
    // After 10 shifts to the right every rank holds the token of rank r - 10.
    if (token[0] != (r - 10 + p) % p) failures.fail(r, "got " + std::to_string(token[0]));
  });
  failures.check();
  EXPECT_LT(seconds_since(t0), kTsan ? 60.0 : 10.0);
}

TEST(Scale, DeadlockAmongManyRanksIsFoundQuickly) {
  double secs = 0;
  const std::string msg = expect_error<dist::DeadlockError>(
      threads_options(64, 20000),
      [] {
        std::vector<float> x(1);
        dist::recv(std::span<float>(x), (dist::rank() + 1) % 64);
      },
      &secs);
  EXPECT_LT(secs, 5.0);
  EXPECT_TRUE(contains(msg, "rank 63 blocked in recv(src=0")) << msg.substr(0, 300);
}

}  // namespace
