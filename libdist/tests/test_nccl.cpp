// The dist API on the NCCL backend: one rank per process and GPU. Runs as one process (world
// size 1) or under mpirun (one rank per GPU). Where no GPU is visible every test skips and says
// why (the CI machine has the CUDA toolkit and NCCL but no GPU).
// Buffers in host memory are staged through device memory by the backend, so the same closed-form
// checks as the threads and MPI tests apply unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "dist/dist.hpp"
#include "distlab_testing.hpp"

namespace {

const int g_job_size = std::max(1, distlab::testing::mpi_job_size());
const int g_job_rank = distlab::testing::mpi_job_rank();

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    const std::string why = distlab::testing::no_cuda_device_reason(); \
    if (!why.empty()) GTEST_SKIP() << "NCCL tests skipped: " << why;   \
  } while (0)

dist::LaunchOptions nccl_options() { return distlab::testing::cuda_launch_options(); }

void run(const std::function<void()>& body) {
  try {
    dist::launch(nccl_options(), body);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

template <typename T>
T input(int r, std::size_t i) {
  return static_cast<T>(r + 1 + static_cast<int>(i % 5));
}

template <typename T>
::testing::AssertionResult all_equal_to(const std::vector<T>& got,
                                        const std::function<T(std::size_t)>& want) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want(i)) {
      return ::testing::AssertionFailure()
             << "first wrong element at index " << i << " of " << got.size() << ": got " << +got[i]
             << ", expected " << +want(i);
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
class NcclTyped : public ::testing::Test {};
using Types = ::testing::Types<float, double, std::int32_t, std::int64_t>;
TYPED_TEST_SUITE(NcclTyped, Types);

// Groups through ncclCommSplit: parity groups, an all_reduce and a ring of messages in each.
TEST(Nccl, GroupsSplitByColourCarryCollectivesAndMessages) {
  SKIP_WITHOUT_GPU();
  run([] {
    const int r = dist::rank(), p = dist::world_size();
    const dist::Group par = dist::split(r % 2, r);
    std::vector<int> want;
    for (int q = r % 2; q < p; q += 2) want.push_back(q);
    ASSERT_EQ(par.world_ranks(), want);
    std::vector<float> x = {static_cast<float>(r)};
    dist::all_reduce(std::span<float>(x), dist::ReduceOp::Sum, par);
    float sum = 0;
    for (int w : want) sum += static_cast<float>(w);
    EXPECT_EQ(x[0], sum);
    const int gp = par.size(), me = par.rank();
    if (gp > 1) {
      std::vector<float> out = {static_cast<float>(r)}, in = {-1.f};
      auto w = dist::isend(std::span<const float>(out), (me + 1) % gp, 0, par);
      auto v = dist::irecv(std::span<float>(in), (me + gp - 1) % gp, 0, par);
      w.wait();
      v.wait();
      EXPECT_EQ(in[0], static_cast<float>(par.world_rank((me + gp - 1) % gp)));
    }
  });
}

TEST(Nccl, RankAndSize) {
  SKIP_WITHOUT_GPU();
  run([] {
    EXPECT_EQ(dist::world_size(), g_job_size);
    EXPECT_EQ(dist::rank(), g_job_rank);
    EXPECT_EQ(dist::options().backend, dist::Backend::Nccl);
  });
}

TYPED_TEST(NcclTyped, AllReduceSumMaxAvgFromHostMemory) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                          std::size_t{1} << 20}) {
      std::vector<T> s(n), m(n), a(n);
      for (std::size_t i = 0; i < n; ++i) s[i] = m[i] = a[i] = input<T>(r, i);
      dist::all_reduce(std::span<T>(s), dist::ReduceOp::Sum);
      dist::all_reduce(std::span<T>(m), dist::ReduceOp::Max);
      auto w = dist::all_reduce_async(std::span<T>(a), dist::ReduceOp::Avg);
      w.wait();
      auto sum = [p](std::size_t i) {
        T acc{};
        for (int q = 0; q < p; ++q) acc = static_cast<T>(acc + input<T>(q, i));
        return acc;
      };
      EXPECT_TRUE(all_equal_to<T>(s, sum)) << "sum, count " << n;
      EXPECT_TRUE(all_equal_to<T>(m, [p](std::size_t i) { return input<T>(p - 1, i); }))
          << "max, count " << n;
      EXPECT_TRUE(all_equal_to<T>(
          a, [&](std::size_t i) { return static_cast<T>(sum(i) / static_cast<T>(p)); }))
          << "avg, count " << n;
    }
  });
}

TYPED_TEST(NcclTyped, BroadcastGatherScatterAllGatherReduceScatter) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const auto up = static_cast<std::size_t>(p);
    const std::size_t n = 333;
    for (int root = 0; root < p; ++root) {
      std::vector<T> b(n, r == root ? T{7} : T{0});
      dist::broadcast(std::span<T>(b), root);
      EXPECT_TRUE(all_equal_to<T>(b, [](std::size_t) { return T{7}; })) << "broadcast";

      std::vector<T> mine(n), all(r == root ? n * up : 0);
      for (std::size_t i = 0; i < n; ++i) mine[i] = input<T>(r, i);
      dist::gather(std::span<const T>(mine), std::span<T>(all), root);
      if (r == root) {
        EXPECT_TRUE(all_equal_to<T>(all, [n](std::size_t k) {
          return input<T>(static_cast<int>(k / n), k % n);
        })) << "gather";
      }
      std::vector<T> part(n);
      dist::scatter(std::span<const T>(all), std::span<T>(part), root);
      EXPECT_TRUE(all_equal_to<T>(part, [r](std::size_t i) { return input<T>(r, i); }))
          << "scatter";
    }
    std::vector<T> mine(n), everyone(n * up);
    for (std::size_t i = 0; i < n; ++i) mine[i] = input<T>(r, i);
    dist::all_gather(std::span<const T>(mine), std::span<T>(everyone));
    EXPECT_TRUE(all_equal_to<T>(everyone, [n](std::size_t k) {
      return input<T>(static_cast<int>(k / n), k % n);
    })) << "all_gather";

    std::vector<T> in(n * up, T{1}), out(n);
    dist::reduce_scatter(std::span<const T>(in), std::span<T>(out));
    EXPECT_TRUE(all_equal_to<T>(out, [p](std::size_t) { return static_cast<T>(p); }))
        << "reduce_scatter";
  });
}

TEST(Nccl, ReceiveFromAnySourceIsRefusedWithAClearError) {
  SKIP_WITHOUT_GPU();
  run([] {
    std::vector<float> x(4);
    try {
      (void)dist::recv_any(std::span<float>(x));
      ADD_FAILURE() << "recv_any returned on the NCCL backend";
    } catch (const dist::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot receive from any source"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW((void)dist::irecv_any(std::span<float>(x)), dist::Error);
  });
}

TEST(Nccl, PointToPointRingWithIsendIrecv) {
  SKIP_WITHOUT_GPU();
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    std::vector<float> out(1000, static_cast<float>(r)), in(1000, -1.0f);
    auto rw = dist::irecv(std::span<float>(in), (r + p - 1) % p);
    auto sw = dist::isend(std::span<const float>(out), (r + 1) % p);
    sw.wait();
    rw.wait();
    rw.wait();  // twice is fine
    EXPECT_TRUE(
        all_equal_to<float>(in, [&](std::size_t) { return static_cast<float>((r + p - 1) % p); }));
    dist::barrier();
    const auto s = dist::stats();
    EXPECT_EQ(s.messages_sent, 1u);
    EXPECT_EQ(s.bytes_sent, 4000u);
  });
}

// bf16 as ncclBfloat16: small integers are exact in bf16 whatever NCCL's order of summation.
TEST(Nccl, Bf16AllReduceAndAllGatherWithHalfTheBytesOfFloat) {
  SKIP_WITHOUT_GPU();
  using dist::bf16;
  run([] {
    const int p = dist::world_size(), r = dist::rank();
    const std::size_t n = 1001;
    std::vector<bf16> a(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = bf16(static_cast<float>(r + 1 + (i % 5)));
    dist::all_reduce(std::span<bf16>(a));
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q) want += static_cast<float>(q + 1 + (i % 5));
      ASSERT_EQ(static_cast<float>(a[i]), want) << "i=" << i;
    }
    std::vector<bf16> mine(n, bf16(static_cast<float>(r) + 0.5f)),
        all(n * static_cast<std::size_t>(p));
    dist::all_gather(std::span<const bf16>(mine), std::span<bf16>(all));
    for (std::size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ(static_cast<float>(all[i]), static_cast<float>(i / n) + 0.5f) << "i=" << i;
    }
    dist::reset_stats();
    std::vector<bf16> got(n);
    auto rw = dist::irecv(std::span<bf16>(got), (r + p - 1) % p);
    auto sw = dist::isend(std::span<const bf16>(mine), (r + 1) % p);
    sw.wait();
    rw.wait();
    EXPECT_EQ(static_cast<float>(got[0]), static_cast<float>((r + p - 1) % p) + 0.5f);
    EXPECT_EQ(dist::stats().bytes_sent, 2 * n);
  });
}

// A receive nobody sends (one rank, from itself) ends the launch with an error, never a hang
// (NCCL refuses it at once; a peer that never sends would end it at the timeout), and the next
// launch on the same GPU works.
TEST(Nccl, AReceiveNobodySendsFailsAndTheNextLaunchWorks) {
  SKIP_WITHOUT_GPU();
  if (g_job_size != 1) GTEST_SKIP() << "one process (a rank waits for itself)";
  dist::LaunchOptions o = nccl_options();
  o.timeout = std::chrono::milliseconds(2000);
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    dist::launch(o, [] {
      std::vector<float> x(4);
      dist::recv(std::span<float>(x), 0);
    });
  } catch (const dist::Error& e) {
    msg = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(msg.empty()) << "the launch returned";
  EXPECT_LT(s, 60.0) << msg;
  std::cout << "error after " << s << " s: " << msg << "\n";
  run([] {
    std::vector<float> x = {1.5f, 2.5f};
    dist::all_reduce(std::span<float>(x));
    EXPECT_EQ(x[0], 1.5f);
    EXPECT_EQ(x[1], 2.5f);
  });
}

}  // namespace
