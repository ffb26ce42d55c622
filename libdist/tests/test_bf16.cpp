// dist::bf16: conversion (round to nearest even, NaN stays NaN, exact back to float), and bf16
// buffers through point-to-point and every built-in collective on the threads backend: values
// (moves exact; reductions equal the fold in group-rank order rounded to bf16 after every step, the
// points dist.hpp documents), bytes counted (half of float's), odd counts, world sizes 2, 3, 4.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <dist/device.hpp>

#include "distlab_testing.hpp"

using namespace distlab::testing;
using dist::bf16;

namespace {

float f(bf16 b) { return static_cast<float>(b); }

// The nearest bf16 of a finite float, computed independently of bf16's constructor: of the two
// bf16 values around x (truncation and the next one up in magnitude), the closer in double; a tie
// goes to the one whose last bit is 0.
std::uint16_t nearest_even(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const auto lo = static_cast<std::uint16_t>(u >> 16);
  const auto hi = static_cast<std::uint16_t>(lo + 1);
  const double dl = std::abs(static_cast<double>(x) - static_cast<double>(f(bf16::from_bits(lo))));
  const double dh = std::abs(static_cast<double>(x) - static_cast<double>(f(bf16::from_bits(hi))));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1u) == 0 ? lo : hi;
}

// Rank r's element i: values with 8+ significant bits, so sums need rounding in bf16.
bf16 input(int r, std::size_t i) {
  return bf16(1.0f + 0.37f * static_cast<float>(r) + 0.0131f * static_cast<float>(i % 97) -
              0.29f * static_cast<float>((i * 7 + static_cast<std::size_t>(r)) % 5));
}

// The documented bf16 reduction: start from rank 0's value, combine one rank at a time in
// group-rank order, computing in float and rounding to bf16 after each step; Avg divides the
// rounded sum in float and rounds once more.
bf16 bf16_fold(dist::ReduceOp op, int p, std::size_t i) {
  float acc = f(input(0, i));
  for (int r = 1; r < p; ++r) {
    const float x = f(input(r, i));
    float y = 0;
    switch (op) {
      case dist::ReduceOp::Sum:
      case dist::ReduceOp::Avg:
        y = acc + x;
        break;
      case dist::ReduceOp::Product:
        y = acc * x;
        break;
      case dist::ReduceOp::Min:
        y = std::min(acc, x);
        break;
      case dist::ReduceOp::Max:
        y = std::max(acc, x);
        break;
    }
    acc = f(bf16(y));
  }
  if (op == dist::ReduceOp::Avg) acc = f(bf16(acc / static_cast<float>(p)));
  return bf16(acc);
}

std::vector<bf16> inputs(int r, std::size_t n, std::size_t offset = 0) {
  std::vector<bf16> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = input(r, offset + i);
  return v;
}

constexpr dist::ReduceOp kOps[] = {dist::ReduceOp::Sum, dist::ReduceOp::Product,
                                   dist::ReduceOp::Min, dist::ReduceOp::Max, dist::ReduceOp::Avg};

}  // namespace

TEST(Bf16, TypeNameAndSize) {
  EXPECT_EQ(sizeof(bf16), 2u);
  EXPECT_STREQ(dist::to_string(dist::DataType::BFloat16), "bf16");
  EXPECT_EQ(dist::size_of(dist::DataType::BFloat16), 2u);
  EXPECT_EQ(dist::detail::data_type_of<bf16>(), dist::DataType::BFloat16);
}

TEST(Bf16, EveryBf16RoundTripsThroughFloat) {
  int nans = 0;
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const bf16 x = bf16::from_bits(static_cast<std::uint16_t>(b));
    const float v = f(x);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(v), b << 16) << "bits " << b;  // widening is exact
    if (std::isnan(v)) {
      ++nans;
      EXPECT_TRUE(std::isnan(f(bf16(v)))) << "NaN bits " << b << " became a number";
      EXPECT_EQ(bf16(v).bits & 0x8000u, b & 0x8000u) << "NaN bits " << b << " lost its sign";
    } else {
      EXPECT_EQ(bf16(v).bits, b) << "bf16 " << v << " did not round-trip";
    }
  }
  EXPECT_EQ(nans, 2 * 127);  // exponent all ones, 7 mantissa bits not all zero, both signs
}

TEST(Bf16, RoundsToNearestEven) {
  // Near 1 the bf16 step is 2^-7: 1 + 2^-8 is a tie between 1 (even) and 1 + 2^-7 (odd).
  const float step = std::ldexp(1.0f, -7);
  EXPECT_EQ(f(bf16(1.0f + step / 2)), 1.0f);
  EXPECT_EQ(f(bf16(1.0f + 3 * step / 2)), 1.0f + 2 * step);  // tie: up to the even one
  EXPECT_EQ(f(bf16(1.0f + step / 2 + std::ldexp(1.0f, -20))), 1.0f + step);  // above the tie
  EXPECT_EQ(f(bf16(-1.0f - step / 2)), -1.0f);
  EXPECT_EQ(f(bf16(1.0f / 3.0f)), 0.333984375f);
  EXPECT_TRUE(std::isinf(f(bf16(std::numeric_limits<float>::max()))));  // beyond bf16's max
  EXPECT_TRUE(std::isinf(f(bf16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(f(bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low 16 bits must not become infinity.
  EXPECT_TRUE(std::isnan(f(bf16(std::bit_cast<float>(0x7f800001u)))));
  // Random finite floats of every magnitude against the independent nearest-even rule.
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int k = 0; k < 200000; ++k) {
    const float x = std::bit_cast<float>(bits(gen));
    if (!std::isfinite(x) || std::abs(x) >= 3.38e38f) continue;  // the next bf16 up overflows
    ASSERT_EQ(bf16(x).bits, nearest_even(x)) << "x = " << x;
    if (std::abs(x) >= std::numeric_limits<float>::min()) {  // normal: the documented bound
      ASSERT_LE(std::abs(static_cast<double>(f(bf16(x))) - x), std::ldexp(std::abs(x), -8))
          << "x = " << x;
    }
  }
}

TEST(Bf16, ReduceIntoRoundsEveryStep) {
  for (dist::ReduceOp op : kOps) {
    if (op == dist::ReduceOp::Avg) continue;  // reduce_into's Avg accumulates like Sum
    const std::size_t n = 101;
    std::vector<bf16> acc = inputs(0, n);
    for (int r = 1; r < 4; ++r) {
      const std::vector<bf16> x = inputs(r, n);
      dist::reduce_into(std::span<bf16>(acc), std::span<const bf16>(x), op);
    }
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(acc[i].bits, bf16_fold(op, 4, i).bits) << dist::to_string(op) << " i=" << i;
    }
  }
}

class Bf16Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Bf16Collectives, ReductionsAreTheFoldRoundedEveryStep) {
  const int p = GetParam();
  const std::size_t n = 7 * static_cast<std::size_t>(p) + 3;  // odd, not a multiple of p
  int differs_from_one_rounding = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float exact = 0;
    for (int r = 0; r < p; ++r) exact += f(input(r, i));
    if (bf16(exact).bits != bf16_fold(dist::ReduceOp::Sum, p, i).bits) ++differs_from_one_rounding;
  }
  // The inputs are chosen so that the rounding points matter (else this test could not tell).
  if (p >= 3) {
    EXPECT_GT(differs_from_one_rounding, 0);
  }
  for (dist::ReduceOp op : kOps) {
    run_ranks(p, [&] {
      const int r = dist::rank();
      std::vector<bf16> a = inputs(r, n);
      dist::all_reduce(std::span<bf16>(a), op);
      std::vector<bf16> b = inputs(r, n);
      dist::all_reduce_async(std::span<bf16>(b), op).wait();
      std::vector<bf16> c = inputs(r, n);
      dist::reduce(std::span<bf16>(c), p - 1, op);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t want = bf16_fold(op, p, i).bits;
        EXPECT_EQ(a[i].bits, want) << "all_reduce " << dist::to_string(op) << " i=" << i;
        EXPECT_EQ(b[i].bits, want) << "all_reduce_async " << dist::to_string(op) << " i=" << i;
        if (r == p - 1) {
          EXPECT_EQ(c[i].bits, want) << "reduce " << dist::to_string(op);
        }
      }
      const std::vector<bf16> in = inputs(r, n * static_cast<std::size_t>(p));
      std::vector<bf16> out(n);
      dist::reduce_scatter(std::span<const bf16>(in), std::span<bf16>(out), op);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t g = static_cast<std::size_t>(r) * n + i;
        EXPECT_EQ(out[i].bits, bf16_fold(op, p, g).bits)
            << "reduce_scatter " << dist::to_string(op) << " i=" << g;
      }
    });
  }
}

TEST_P(Bf16Collectives, MovesAreExact) {
  const int p = GetParam();
  const std::size_t n = 2 * static_cast<std::size_t>(p) + 1;
  const auto up = static_cast<std::size_t>(p);
  run_ranks(p, [&] {
    const int r = dist::rank();
    std::vector<bf16> b = r == 1 ? inputs(1, n) : std::vector<bf16>(n);
    dist::broadcast(std::span<bf16>(b), 1);
    EXPECT_EQ(b, inputs(1, n));
    const std::vector<bf16> mine = inputs(r, n);
    std::vector<bf16> all(n * up), root(r == 0 ? n * up : 0);
    dist::all_gather(std::span<const bf16>(mine), std::span<bf16>(all));
    dist::gather(std::span<const bf16>(mine), std::span<bf16>(root), 0);
    for (int q = 0; q < p; ++q) {
      const auto qq = static_cast<std::size_t>(q);
      EXPECT_EQ(std::vector<bf16>(all.begin() + qq * n, all.begin() + (qq + 1) * n), inputs(q, n));
      if (r == 0) {
        EXPECT_EQ(std::vector<bf16>(root.begin() + qq * n, root.begin() + (qq + 1) * n),
                  inputs(q, n));
      }
    }
    std::vector<bf16> piece(n);
    const std::vector<bf16> src = r == 0 ? inputs(0, n * up) : std::vector<bf16>{};
    dist::scatter(std::span<const bf16>(src), std::span<bf16>(piece), 0);
    EXPECT_EQ(piece, inputs(0, n, static_cast<std::size_t>(r) * n));
    // Point-to-point around a ring (send/recv, then isend/irecv).
    std::vector<bf16> got(n);
    const int next = (r + 1) % p, prev = (r + p - 1) % p;
    auto s = dist::isend(std::span<const bf16>(mine), next, 3);
    dist::recv(std::span<bf16>(got), prev, 3);
    s.wait();
    EXPECT_EQ(got, inputs(prev, n));
  });
}

// Every call moves exactly half the bytes of the same call on float (odd counts included).
TEST_P(Bf16Collectives, BytesAreHalfOfFloat) {
  const int p = GetParam();
  const std::size_t n = 5 * static_cast<std::size_t>(p) + 1;
  auto traffic = [&](auto zero) {
    using T = decltype(zero);
    std::vector<std::uint64_t> sent(static_cast<std::size_t>(p)), recvd(sent);
    run_ranks(p, [&] {
      const int r = dist::rank();
      std::vector<T> a(n * static_cast<std::size_t>(p), zero), b(n, zero);
      dist::all_reduce(std::span<T>(a));
      dist::reduce(std::span<T>(b), 0);
      dist::broadcast(std::span<T>(b), 1);
      dist::all_gather(std::span<const T>(b), std::span<T>(a));
      dist::gather(std::span<const T>(b), std::span<T>(a), 0);
      dist::scatter(std::span<const T>(a), std::span<T>(b), 0);
      dist::reduce_scatter(std::span<const T>(a), std::span<T>(b));
      std::vector<T> got(n);
      auto w = dist::isend(std::span<const T>(b), (r + 1) % p);
      dist::recv(std::span<T>(got), (r + p - 1) % p);
      w.wait();
      const dist::Stats s = dist::stats();
      sent[static_cast<std::size_t>(r)] = s.bytes_sent;
      recvd[static_cast<std::size_t>(r)] = s.bytes_received;
    });
    return std::pair(sent, recvd);
  };
  const auto [fs, fr] = traffic(0.0f);
  const auto [bs, br] = traffic(bf16(0.0f));
  for (int r = 0; r < p; ++r) {
    const auto q = static_cast<std::size_t>(r);
    EXPECT_GT(bs[q], 0u);
    EXPECT_EQ(2 * bs[q], fs[q]) << "rank " << r;
    EXPECT_EQ(2 * br[q], fr[q]) << "rank " << r;
  }
}

TEST(Bf16, MismatchWithFloatNamesBothTypes) {
  const std::string m = expect_error<dist::MismatchError>(test_options(2), [] {
    if (dist::rank() == 0) {
      const std::vector<bf16> x(3);
      dist::send(std::span<const bf16>(x), 1);
    } else {
      std::vector<float> y(3);
      dist::recv(std::span<float>(y), 0);
    }
  });
  EXPECT_TRUE(contains(m, "3 bf16s")) << m;
  EXPECT_TRUE(contains(m, "3 floats")) << m;
}

// The simulated device's stream collectives on bf16 buffers: values as above, bytes and simulated
// time those of two-byte elements under the same ring model.
TEST_P(Bf16Collectives, DeviceStreamCollectives) {
  namespace dev = dist::device;
  const int p = GetParam();
  const std::size_t c = 101;  // odd
  const auto pc = static_cast<std::size_t>(p) * c;
  const dist::NetworkModel net;
  const double ring = (p - 1) * net.message_cost(0, 1, c * sizeof(bf16));
  run_ranks(threads_options(p), [&] {
    const int r = dist::rank();
    dev::Stream comm("comm");
    dev::DeviceBuffer<bf16> shard("shard", c), full("full", pc), grad("grad", pc),
        reduced("reduced", c);
    dev::launch(comm, {"fill", 0.0, {dev::writes(shard), dev::writes(grad)}}, [&] {
      for (std::size_t i = 0; i < c; ++i) shard.span()[i] = input(r, i);
      for (std::size_t i = 0; i < pc; ++i) grad.span()[i] = input(r, i);
    });
    dist::reset_stats();
    dev::all_gather(shard, full, comm);
    dev::reduce_scatter(grad, reduced, comm, dist::ReduceOp::Sum);
    EXPECT_EQ(dist::stats().bytes_sent, 2u * static_cast<std::uint64_t>(p - 1) * c * 2u);
    comm.synchronize();
    EXPECT_NEAR(dist::sim_time(), 2 * ring, 1e-12);
    std::vector<bf16> got(pc), red(c);
    dev::memcpy_async(std::span<bf16>(got), full, comm);
    dev::memcpy_async(std::span<bf16>(red), reduced, comm);
    comm.synchronize();
    for (std::size_t i = 0; i < pc; ++i) {
      ASSERT_EQ(got[i], input(static_cast<int>(i / c), i % c)) << "all_gather element " << i;
    }
    for (std::size_t k = 0; k < c; ++k) {
      const std::size_t i = static_cast<std::size_t>(r) * c + k;
      ASSERT_EQ(red[k].bits, bf16_fold(dist::ReduceOp::Sum, p, i).bits) << "element " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Bf16Collectives, ::testing::Values(2, 3, 4));
