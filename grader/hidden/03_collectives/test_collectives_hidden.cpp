// Hidden tests of 03_collectives (instructor only): larger world sizes (9..16), other roots and
// counts, and a two-level network (fast links inside a node, slow ones between nodes), where each
// algorithm's time is the sum of the message costs along its critical path.
// Same suite names as the public tests, so the manifest's filters work on both binaries; the
// table-driven two-level tests end in the function's name instead (filter "*/<function>").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives_checks.hpp"

namespace {

using namespace ctest;
using dist::ReduceOp;

const std::vector<int> kWorldSizes = {9, 10, 11, 12, 13, 14, 15, 16};
const std::vector<std::size_t> kCounts = {0, 2, 13, 1001, 4099};
constexpr std::size_t kN = 1680;  // floats: divisible by 1..8, 10, 12, 14, 15, 16

// Two-level layouts: (world size, ranks per node); p a multiple of G, both powers of two where a
// tree's rounds must each use one kind of link.
struct Layout {
  int p;
  int g;
};
const std::vector<Layout> kLayouts = {{8, 4}, {8, 2}, {16, 4}, {16, 8}};
const std::vector<Layout> kRingLayouts = {{8, 4}, {12, 4}, {12, 3}, {16, 4}};

std::string layout_case(const Layout& l, std::size_t n) {
  return "two-level network, world size " + std::to_string(l.p) + ", " + std::to_string(l.g) +
         " ranks per node, count " + std::to_string(n);
}
std::string flat_case(int p, std::size_t n) {
  return "flat network, world size " + std::to_string(p) + ", count " + std::to_string(n);
}

dist::NetworkModel two_level(int g) { return dist::NetworkModel::two_level(g); }

// Sum over tree rounds k of the cost of a message across distance 2^k (relative to root 0 or a
// node-aligned root, every round of a binomial tree uses one kind of link).
double tree_rounds(const dist::NetworkModel& m, int p, std::size_t bytes) {
  double t = 0;
  for (int d = 1; d < p; d <<= 1) t += m.message_cost(0, d, bytes);
  return t;
}

// ---- the same messages for every count -----------------------------------------------------------

/// The header's message counts do not depend on the count ("Every function must work ... for
/// count 0", and each function's message count): count 0, 1 and p - 1 (chunks of no element or
/// one) send to every rank the messages that a large count sends.
void messages_for_every_count(const std::string& fn, bool rooted) {
  for (int p : {2, 3, 4, 5, 7, 8}) {
    for (int root : rooted ? std::vector<int>{0, p - 1} : std::vector<int>{-1}) {
      const auto pattern = [&](std::size_t n) {
        const std::string what = "world size " + std::to_string(p) +
                                 (root >= 0 ? ", root " + std::to_string(root) : "") + ", count " +
                                 std::to_string(n);
        const auto stats = traffic(what, fn, p, [&] { call_of(fn)(n, root); });
        Matrix m = zeros(p);
        for (std::size_t r = 0; r < stats.size(); ++r) {
          for (std::size_t q = 0; q < stats.size(); ++q) m[r][q] = stats[r].messages_sent_to.at(q);
        }
        return std::pair{what, m};
      };
      const auto [large_what, large] = pattern(1000);
      if (::testing::Test::HasFailure()) return;
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(p - 1)}) {
        const auto [what, got] = pattern(n);
        if (::testing::Test::HasFailure()) return;
        for (int r = 0; r < p; ++r) {
          for (int q = 0; q < p; ++q) {
            const auto g = got[static_cast<std::size_t>(r)][static_cast<std::size_t>(q)];
            const auto w = large[static_cast<std::size_t>(r)][static_cast<std::size_t>(q)];
            if (g != w) {
              ADD_FAILURE() << fn << ", " << what << ": rank " << r << " sent " << g
                            << " messages to rank " << q << ", but " << w << " with count 1000: "
                            << "the messages of an algorithm do not depend on the count (empty "
                               "chunks are sent too; count 0 needs no special case)";
              return;
            }
          }
        }
      }
    }
  }
}

TEST(BroadcastNaive, TrafficEveryCount) { messages_for_every_count("broadcast_naive", true); }
TEST(BroadcastTree, TrafficEveryCount) { messages_for_every_count("broadcast_tree", true); }
TEST(BroadcastRing, TrafficEveryCount) { messages_for_every_count("broadcast_ring", true); }
TEST(ReduceNaive, TrafficEveryCount) { messages_for_every_count("reduce_naive", true); }
TEST(ReduceTree, TrafficEveryCount) { messages_for_every_count("reduce_tree", true); }
TEST(AllReduceNaive, TrafficEveryCount) { messages_for_every_count("all_reduce_naive", false); }
TEST(AllReduceButterfly, TrafficEveryCount) {
  messages_for_every_count("all_reduce_butterfly", false);
}
TEST(AllReduceRing, TrafficEveryCount) { messages_for_every_count("all_reduce_ring", false); }
TEST(GatherNaive, TrafficEveryCount) { messages_for_every_count("gather_naive", true); }
TEST(GatherTree, TrafficEveryCount) { messages_for_every_count("gather_tree", true); }
TEST(AllGatherRing, TrafficEveryCount) { messages_for_every_count("all_gather_ring", false); }
TEST(ReduceScatterRing, TrafficEveryCount) {
  messages_for_every_count("reduce_scatter_ring", false);
}

// ---- Avg: one division of the sum ---------------------------------------------------------------

/// Rank r's input at index i for Avg with cancellation: ranks 0 and 1 hold +-2^18 (i % 8 + 1), every
/// rank a small integer; every partial sum is an integer below 2^24, so any order of the sum is
/// exact, and the mean is that sum divided by p once. Dividing before summing (each rank's share
/// of the mean) rounds the large values and misses the small ones by far more than 1e-6.
float cancelling(int r, std::size_t i) {
  const float big = 262144.0f * static_cast<float>(i % 8 + 1);  // at most 2^21
  return (r == 0   ? big
          : r == 1 ? -big
                   : 0.0f) +
         static_cast<float>((3 * r + static_cast<int>(i)) % 7 + 1);
}
std::vector<float> cancelling_mean(int p, std::size_t n) {
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int r = 0; r < p; ++r) sum += cancelling(r, i);
    want[i] = static_cast<float>(sum) / static_cast<float>(p);
  }
  return want;
}

/// The six functions that take a ReduceOp, each called with Avg on a buffer of n floats: rooted
/// ones get the root, reduce_scatter_ring leaves its own n / p floats in the buffer (scattered).
/// Both Avg tests below (AvgDividesOnceAtTheEnd, AvgIsTheSumDividedByP) run every row.
struct AvgCall {
  std::string name;
  std::function<void(std::vector<float>&, int root, std::size_t n)> call;
  bool rooted;
  bool scattered;
};
const std::vector<AvgCall>& avg_calls() {
  static const std::vector<AvgCall> calls = {
      {"reduce_naive",
       [](std::vector<float>& b, int root, std::size_t) {
         collectives::reduce_naive(b, root, ReduceOp::Avg);
       },
       true, false},
      {"reduce_tree",
       [](std::vector<float>& b, int root, std::size_t) {
         collectives::reduce_tree(b, root, ReduceOp::Avg);
       },
       true, false},
      {"all_reduce_naive",
       [](std::vector<float>& b, int, std::size_t) {
         collectives::all_reduce_naive(b, ReduceOp::Avg);
       },
       false, false},
      {"all_reduce_butterfly",
       [](std::vector<float>& b, int, std::size_t) {
         collectives::all_reduce_butterfly(b, ReduceOp::Avg);
       },
       false, false},
      {"all_reduce_ring",
       [](std::vector<float>& b, int, std::size_t) {
         collectives::all_reduce_ring(b, ReduceOp::Avg);
       },
       false, false},
      {"reduce_scatter_ring",
       [](std::vector<float>& b, int, std::size_t n) {
         std::vector<float> out(n / static_cast<std::size_t>(dist::world_size()));
         collectives::reduce_scatter_ring(b, out, ReduceOp::Avg);
         b = out;
       },
       false, true},
  };
  return calls;
}
/// The row of the table for function `name` (a name not in it is a bug of this file).
const AvgCall& avg_call(const std::string& name) {
  for (const AvgCall& c : avg_calls()) {
    if (c.name == name) return c;
  }
  throw std::logic_error("test bug: no Avg call named " + name);
}

/// fn(buf or in/out, ...) with Avg on the cancelling inputs, p = 2, 3, 5, 6, 7: every rank that
/// gets the result gets sum / p within 1e-6 (bit for bit: <Suite>.AvgIsTheSumDividedByP below).
void avg_once(const AvgCall& c) {
  const std::string& name = c.name;
  const auto& call = c.call;
  const bool rooted = c.rooted, scattered = c.scattered;
  for (int p : {2, 3, 5, 6, 7}) {
    const std::size_t n = scattered ? 4 * static_cast<std::size_t>(p) : 12;  // scattered: 4 each
    const std::vector<float> want = cancelling_mean(p, n);
    for (int root : rooted ? std::vector<int>{0, p - 1} : std::vector<int>{-1}) {
      const std::string what = "Avg of inputs that cancel, world size " + std::to_string(p) +
                               (root >= 0 ? ", root " + std::to_string(root) : "");
      const bool ok = run_case(what, name, p, [&](distlab::testing::RankLog& log) {
        const int me = dist::rank();
        std::vector<float> got(n);
        for (std::size_t i = 0; i < n; ++i) got[i] = cancelling(me, i);
        call(got, root, n);
        if (scattered) {
          expect_values(log, what + ": divide the sum by p once, at the end", got,
                        std::span<const float>(want).subspan(4 * static_cast<std::size_t>(me), 4),
                        1e-6);
        } else if (root < 0 || me == root) {
          expect_values(log, what + ": divide the sum by p once, at the end", got, want, 1e-6);
        }
      });
      if (!ok) return;
    }
  }
}

TEST(ReduceNaive, AvgDividesOnceAtTheEnd) { avg_once(avg_call("reduce_naive")); }
TEST(ReduceTree, AvgDividesOnceAtTheEnd) { avg_once(avg_call("reduce_tree")); }
TEST(AllReduceNaive, AvgDividesOnceAtTheEnd) { avg_once(avg_call("all_reduce_naive")); }
TEST(AllReduceButterfly, AvgDividesOnceAtTheEnd) { avg_once(avg_call("all_reduce_butterfly")); }
TEST(AllReduceRing, AvgDividesOnceAtTheEnd) { avg_once(avg_call("all_reduce_ring")); }
TEST(ReduceScatterRing, AvgDividesOnceAtTheEnd) { avg_once(avg_call("reduce_scatter_ring")); }

// ---- Avg: the sum divided by p, bit for bit -----------------------------------------------------
// "Avg (Sum divided by p)", "divide by p once at the end": with integer inputs every partial sum is
// exact in any order, so every result is float(S) / p exactly. Multiplying by the reciprocal,
// S * (1.0f / p), is exact only for p a power of two; each sum S below is chosen where the two
// differ at p = 3, 5, 6, 7 (checked first).

/// n integer sums S_i (around 10^5) with float(S_i) * (1/p) != float(S_i) / p.
std::vector<float> separating_sums(int p, std::size_t n) {
  std::vector<float> sums;
  const float fp = static_cast<float>(p);
  const volatile float inv = 1.0f / fp;  // volatile: computed at run time, as a solution would
  for (int s = 100003; sums.size() < n; s += 7) {
    const float S = static_cast<float>(s);
    if (S / fp != S * inv) sums.push_back(S);
  }
  return sums;
}
/// Rank r's element i: small integers on ranks > 0, rank 0 the rest of S_i.
float avg_input(const std::vector<float>& sums, int p, int r, std::size_t i) {
  const auto small = [&](int q) {
    return static_cast<float>((3 * q + static_cast<int>(i)) % 7 + 1);
  };
  if (r > 0) return small(r);
  float rest = sums[i];
  for (int q = 1; q < p; ++q) rest -= small(q);
  return rest;
}

void avg_exact(const AvgCall& c) {
  const std::string& name = c.name;
  const auto& call = c.call;
  const bool rooted = c.rooted, scattered = c.scattered;
  for (int p : {3, 5, 6, 7}) {
    const std::size_t n = scattered ? 5 * static_cast<std::size_t>(p) : 24;  // scattered: 5 each
    const std::vector<float> sums = separating_sums(p, n);
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i) {
      want[i] = sums[i] / static_cast<float>(p);
      double exact = 0;  // the inputs really add up to S_i and S_i / p != S_i * (1 / p)
      for (int r = 0; r < p; ++r) exact += avg_input(sums, p, r, i);
      ASSERT_EQ(exact, static_cast<double>(sums[i])) << "test bug: inputs of element " << i;
      ASSERT_NE(want[i], sums[i] * (1.0f / static_cast<float>(p)))
          << "test bug: S = " << sums[i] << " does not separate S / p from S * (1 / p)";
    }
    for (int root : rooted ? std::vector<int>{1, p - 1} : std::vector<int>{-1}) {
      const std::string what = "Avg of integer inputs, world size " + std::to_string(p) +
                               (root >= 0 ? ", root " + std::to_string(root) : "");
      const bool ok = run_case(what, name, p, [&](distlab::testing::RankLog& log) {
        const int me = dist::rank();
        std::vector<float> got(n);
        for (std::size_t i = 0; i < n; ++i) got[i] = avg_input(sums, p, me, i);
        call(got, root, n);
        const std::string ctx =
            what +
            ": every sum is an exact integer S, and Avg is S divided by p, float(S) / p "
            "bit for bit (S * (1.0f / p) differs in the last bit when p is not a power of "
            "two)";
        if (scattered) {
          expect_values(log, ctx, got,
                        std::span<const float>(want).subspan(5 * static_cast<std::size_t>(me), 5));
        } else if (root < 0 || me == root) {
          expect_values(log, ctx, got, want);
        }
      });
      if (!ok) return;
    }
  }
}

TEST(ReduceNaive, AvgIsTheSumDividedByP) { avg_exact(avg_call("reduce_naive")); }
TEST(ReduceTree, AvgIsTheSumDividedByP) { avg_exact(avg_call("reduce_tree")); }
TEST(AllReduceNaive, AvgIsTheSumDividedByP) { avg_exact(avg_call("all_reduce_naive")); }
TEST(AllReduceButterfly, AvgIsTheSumDividedByP) { avg_exact(avg_call("all_reduce_butterfly")); }
TEST(AllReduceRing, AvgIsTheSumDividedByP) { avg_exact(avg_call("all_reduce_ring")); }
TEST(ReduceScatterRing, AvgIsTheSumDividedByP) { avg_exact(avg_call("reduce_scatter_ring")); }

// ---- values at larger world sizes -------------------------------------------------------------

TEST(BroadcastNaive, ValuesLarge) {
  check_broadcast_values(collectives::broadcast_naive, "broadcast_naive", kWorldSizes, kCounts,
                         false);
}
TEST(BroadcastTree, ValuesLarge) {
  check_broadcast_values(collectives::broadcast_tree, "broadcast_tree", kWorldSizes, kCounts,
                         false);
}
TEST(BroadcastRing, ValuesLarge) {
  check_broadcast_values(collectives::broadcast_ring, "broadcast_ring", kWorldSizes, kCounts,
                         false);
}
TEST(ReduceNaive, ValuesLarge) {
  check_reduce_values(collectives::reduce_naive, "reduce_naive", kWorldSizes, kCounts, false);
}
TEST(ReduceTree, ValuesLarge) {
  check_reduce_values(collectives::reduce_tree, "reduce_tree", kWorldSizes, kCounts, false);
}
TEST(AllReduceNaive, ValuesLarge) {
  check_all_reduce_values(collectives::all_reduce_naive, "all_reduce_naive", kWorldSizes, kCounts);
}
TEST(AllReduceButterfly, ValuesLarge) {
  check_all_reduce_values(collectives::all_reduce_butterfly, "all_reduce_butterfly", kWorldSizes,
                          kCounts);
}
// "in round k every rank exchanges its whole buffer with rank XOR 2^k and reduces": the rounds run
// with partners at distance 1, 2, 4, ..., which fixes how the partial results are grouped. Inputs
// of very different magnitudes make other groupings (the same partners, far ones first) differ in
// the last bits, so every rank's result is compared bit for bit with the documented grouping.
TEST(AllReduceButterfly, RoundOrderFixesTheGrouping) {
  for (int p : {4, 5, 8}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product}) {
      const std::size_t n = 16;
      const auto input = [&](int r, std::size_t i) {
        const float small =
            1.0f + 0.125f * static_cast<float>((5 * r + 3 * static_cast<int>(i)) % 11);
        if (op == ReduceOp::Product)
          return r % 2 == 1 ? 1.0f + small * 1e-7f * static_cast<float>(r) : small;
        return (r % 2 == 0 ? 3.0e7f : -3.0e7f) * (1.0f + 1e-3f * static_cast<float>(r)) + small;
      };
      const auto combine = [&](float a, float b) {
        return op == ReduceOp::Product ? a * b : a + b;
      };
      const auto grouped = [&](bool far_first) {
        std::vector<float> out(n);
        const int q = collectives::floor_pow2(p);
        for (std::size_t i = 0; i < n; ++i) {
          std::vector<float> v(static_cast<std::size_t>(p));
          for (int r = 0; r < p; ++r) v[static_cast<std::size_t>(r)] = input(r, i);
          for (int r = 0; r + q < p; ++r)
            v[static_cast<std::size_t>(r)] =
                combine(v[static_cast<std::size_t>(r)], v[static_cast<std::size_t>(r + q)]);
          for (int k = 0; (1 << k) < q; ++k) {
            const int mask = far_first ? q >> (k + 1) : 1 << k;
            std::vector<float> next(v);
            for (int r = 0; r < q; ++r)
              next[static_cast<std::size_t>(r)] =
                  combine(v[static_cast<std::size_t>(r)], v[static_cast<std::size_t>(r ^ mask)]);
            v = next;
          }
          out[i] = v[0];
        }
        return out;
      };
      const std::vector<float> want = grouped(false);
      if (op == ReduceOp::Sum) {
        ASSERT_NE(want, grouped(true))
            << "test bug: the inputs do not separate the groupings, p = " << p;
      }
      const std::string what = "world size " + std::to_string(p) + ", op " + dist::to_string(op) +
                               ", inputs of very different magnitudes";
      const bool ok =
          run_case(what, "all_reduce_butterfly", p, [&](distlab::testing::RankLog& log) {
            std::vector<float> got(n);
            for (std::size_t i = 0; i < n; ++i) got[i] = input(dist::rank(), i);
            collectives::all_reduce_butterfly(got, op);
            expect_values(
                log,
                what +
                    ": the result of the rounds with partners r XOR 1, r XOR 2, r XOR 4, ... "
                    "in that order, bit for bit",
                got, want);
          });
      if (!ok) return;
    }
  }
}

TEST(AllReduceRing, ValuesLarge) {
  check_all_reduce_values(collectives::all_reduce_ring, "all_reduce_ring", kWorldSizes, kCounts);
}
TEST(GatherNaive, ValuesLarge) {
  check_gather_values(collectives::gather_naive, "gather_naive", kWorldSizes, {0, 3, 250}, false);
}
TEST(GatherTree, ValuesLarge) {
  check_gather_values(collectives::gather_tree, "gather_tree", kWorldSizes, {0, 3, 250}, false);
}
TEST(AllGatherRing, ValuesLarge) {
  check_all_gather_values(collectives::all_gather_ring, "all_gather_ring", kWorldSizes,
                          {0, 3, 250});
}
TEST(ReduceScatterRing, ValuesLarge) {
  check_reduce_scatter_values(collectives::reduce_scatter_ring, "reduce_scatter_ring", kWorldSizes,
                              {0, 3, 250});
}

// ---- simulated time, flat network, larger world sizes -----------------------------------------

TEST(AllReduceRing, SimTimeLarge) {
  const auto model = timing_model(true);
  for (int p : {10, 12, 14, 15, 16}) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const double got = sim_time_of(flat_case(p, kN), "all_reduce_ring", p, model, [&] {
      std::vector<float> buf(kN, 1.0f);
      collectives::all_reduce_ring(buf, ReduceOp::Sum);
    });
    const std::size_t chunk = kN / static_cast<std::size_t>(p) * sizeof(float);
    const double want =
        2 * (p - 1) * model.message_cost(0, 1, chunk) + (p - 1) * model.reduce_cost(chunk);
    expect_time(got, want, "all_reduce_ring", flat_case(p, kN),
                "2(p-1)(alpha + (n/p) beta) + (p-1)(n/p) gamma " + model_text(model, kN * 4),
                "send and receive at the same time in every step");
  }
}

TEST(AllReduceButterfly, SimTimeLarge) {
  for (int p : {9, 12, 16}) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const bool pow2 = is_pow2(p);
    const auto model = timing_model(pow2);
    const std::size_t bytes = kN * sizeof(float);
    const double got = sim_time_of(flat_case(p, kN), "all_reduce_butterfly", p, model, [&] {
      std::vector<float> buf(kN, 1.0f);
      collectives::all_reduce_butterfly(buf, ReduceOp::Sum);
    });
    const double c = model.message_cost(0, 1, bytes);
    const double want =
        pow2 ? floor_log2(p) * (c + model.reduce_cost(bytes)) : (floor_log2(p) + 2) * c;
    expect_time(got, want, "all_reduce_butterfly", flat_case(p, kN),
                "butterfly rounds (+2 fold messages) " + model_text(model, bytes),
                "exchange with isend + recv + wait in every round");
  }
}

TEST(BroadcastTree, SimTimeLarge) {
  const auto model = timing_model(false);
  const std::size_t bytes = kN * sizeof(float);
  for (int p : {9, 13, 16}) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const double got = sim_time_of(flat_case(p, kN), "broadcast_tree", p, model, [&] {
      std::vector<float> buf(kN, 1.0f);
      collectives::broadcast_tree(buf, p / 2);
    });
    expect_time(got, collectives::ceil_log2(p) * model.message_cost(0, 1, bytes), "broadcast_tree",
                flat_case(p, kN), "ceil(log2 p)(alpha + n beta) " + model_text(model, bytes),
                "every holder sends in every later round");
  }
}

TEST(GatherTree, SimTimeLarge) {
  const auto model = timing_model(false);
  const std::size_t m = 200;
  for (int p : {9, 11, 16}) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const double got = sim_time_of(flat_case(p, m), "gather_tree", p, model, [&] {
      std::vector<float> in(m, 1.0f), out(m * static_cast<std::size_t>(p));
      collectives::gather_tree(in, out, 1);
    });
    const double want = collectives::ceil_log2(p) * model.latency_s +
                        static_cast<double>((p - 1) * m * sizeof(float)) / model.bandwidth_Bps;
    expect_time(got, want, "gather_tree", flat_case(p, m),
                "ceil(log2 p) alpha + (p-1) m beta " + model_text(model, m * 4),
                "nearest child first, one message per subtree");
  }
}

// ---- simulated time, two-level network --------------------------------------------------------
// One table: per function, the layouts it runs on, its roots, one call, and the closed form of
// its time (the sum of the message costs along its critical path). Test names end in the
// function's name (Hidden/SimTimeTwoLevel.MatchesClosedForm/broadcast_naive), which the manifest's
// hidden items filter on.

struct TwoLevelCase {
  const char* fn;
  bool tree;          // kLayouts (powers of two, node-aligned tree rounds) or kRingLayouts
  std::size_t count;  // elements of the buffer (gather family: of each rank's block)
  std::function<std::vector<int>(const Layout&)> roots;  // {-1}: no root
  std::function<void(const Layout&, int root)> call;
  std::function<double(const dist::NetworkModel&, const Layout&, int root)> want;
  const char* formula;
  const char* hint;
};

std::vector<int> no_root(const Layout&) { return {-1}; }
double cost(const dist::NetworkModel& m, int src, int dst, std::size_t count) {
  return m.message_cost(src, dst, count * sizeof(float));
}
double tree_time(const dist::NetworkModel& m, const Layout& l) {
  return tree_rounds(m, l.p, kN * sizeof(float));
}
/// Sum over ranks q != root of the cost of one message root->q (to_root: q->root).
double star_time(const dist::NetworkModel& m, const Layout& l, int root, std::size_t count,
                 bool to_root) {
  double t = 0;
  for (int q = 0; q < l.p; ++q) {
    if (q != root) t += to_root ? cost(m, q, root, count) : cost(m, root, q, count);
  }
  return t;
}
/// `steps` ring steps, each as slow as the slowest link of the ring (one between nodes).
double ring_time(const dist::NetworkModel& m, const Layout& l, int steps, std::size_t count) {
  return steps * cost(m, l.g - 1, l.g, count);
}
void buffer_call(const std::function<void(std::vector<float>&)>& fn) {
  std::vector<float> buf(kN, 1.0f);
  fn(buf);
}
constexpr std::size_t kM = 300;  // elements per rank's block (gather family)

const std::vector<TwoLevelCase> kTwoLevelCases = {
    {"broadcast_naive", false, kN, [](const Layout& l) { return std::vector<int>{l.g + 1}; },
     [](const Layout&, int root) {
       buffer_call([&](auto& buf) { collectives::broadcast_naive(buf, root); });
     },
     [](const auto& m, const Layout& l, int root) { return star_time(m, l, root, kN, false); },
     "sum over ranks q != src of (alpha + n beta) of the link src->q ",
     "src sends one message to every rank, one after the other"},
    {"broadcast_ring", false, kN, [](const Layout&) { return std::vector<int>{1}; },
     [](const Layout&, int root) {
       buffer_call([&](auto& buf) { collectives::broadcast_ring(buf, root); });
     },
     [](const auto& m, const Layout& l, int root) {
       double t = 0;
       for (int h = 0; h < l.p - 1; ++h) t += cost(m, (root + h) % l.p, (root + h + 1) % l.p, kN);
       return t;
     },
     "sum of the p-1 hop costs from src around the ring ",
     "each hop forwards the whole buffer once"},
    {"broadcast_tree", true, kN,
     [](const Layout& l) {
       return std::vector<int>{0, l.g};
     },
     [](const Layout&, int root) {
       buffer_call([&](auto& buf) { collectives::broadcast_tree(buf, root); });
     },
     [](const auto& m, const Layout& l, int) { return tree_time(m, l); },
     "sum over rounds 2^k of the cost of a message across distance 2^k ",
     "binomial tree on ranks relative to src"},
    {"reduce_naive", false, kN, [](const Layout& l) { return std::vector<int>{l.p - 1}; },
     [](const Layout&, int root) {
       buffer_call([&](auto& buf) { collectives::reduce_naive(buf, root, ReduceOp::Sum); });
     },
     [](const auto& m, const Layout& l, int root) { return star_time(m, l, root, kN, true); },
     "sum over ranks q != dst of (alpha + n beta) of the link q->dst ",
     "every rank sends once to dst"},
    {"reduce_tree", true, kN, [](const Layout& l) { return std::vector<int>{l.g}; },
     [](const Layout&, int root) {
       buffer_call([&](auto& buf) { collectives::reduce_tree(buf, root, ReduceOp::Max); });
     },
     [](const auto& m, const Layout& l, int) { return tree_time(m, l); },
     "sum over rounds 2^k of the cost of a message across distance 2^k ", "nearest child first"},
    {"all_reduce_naive", false, kN, no_root,
     [](const Layout&, int) {
       buffer_call([](auto& buf) { collectives::all_reduce_naive(buf, ReduceOp::Sum); });
     },
     [](const auto& m, const Layout& l, int) {
       return star_time(m, l, 0, kN, true) + star_time(m, l, 0, kN, false);
     },
     "sum over ranks q > 0 of the costs q->0 and 0->q ",
     "rank 0 receives every buffer, then sends every result"},
    {"all_reduce_butterfly", true, kN, no_root,
     [](const Layout&, int) {
       buffer_call([](auto& buf) { collectives::all_reduce_butterfly(buf, ReduceOp::Sum); });
     },
     [](const auto& m, const Layout& l, int) { return tree_time(m, l); },
     "sum over rounds 2^k of the cost of an exchange across distance 2^k ",
     "exchange with isend + recv + wait in every round"},
    {"all_reduce_ring", false, kN, no_root,
     [](const Layout&, int) {
       buffer_call([](auto& buf) { collectives::all_reduce_ring(buf, ReduceOp::Sum); });
     },
     [](const auto& m, const Layout& l, int) {
       return ring_time(m, l, 2 * (l.p - 1), kN / static_cast<std::size_t>(l.p));
     },
     "2(p-1)(alpha' + (n/p) beta') on the slow link between nodes ",
     "send and receive at the same time in every step"},
    {"gather_naive", false, kM, [](const Layout& l) { return std::vector<int>{l.g / 2}; },
     [](const Layout& l, int root) {
       std::vector<float> in(kM, 1.0f), out(kM * static_cast<std::size_t>(l.p));
       collectives::gather_naive(in, out, root);
     },
     [](const auto& m, const Layout& l, int root) { return star_time(m, l, root, kM, true); },
     "sum over ranks q != dst of the cost q->dst ", "every rank sends its block once to dst"},
    {"gather_tree", true, kM, [](const Layout&) { return std::vector<int>{0}; },
     [](const Layout& l, int root) {
       std::vector<float> in(kM, 1.0f), out(kM * static_cast<std::size_t>(l.p));
       collectives::gather_tree(in, out, root);
     },
     [](const auto& m, const Layout& l, int) {
       // Round 2^k: a subtree of 2^k blocks crosses distance 2^k.
       double t = 0;
       for (int d = 1; d < l.p; d <<= 1) t += cost(m, 0, d, static_cast<std::size_t>(d) * kM);
       return t;
     },
     "sum over rounds 2^k of (alpha + 2^k m beta) across distance 2^k ",
     "nearest child first, one message per subtree"},
    {"all_gather_ring", false, kM, no_root,
     [](const Layout& l, int) {
       std::vector<float> in(kM, 1.0f), out(kM * static_cast<std::size_t>(l.p));
       collectives::all_gather_ring(in, out);
     },
     [](const auto& m, const Layout& l, int) { return ring_time(m, l, l.p - 1, kM); },
     "(p-1)(alpha' + m beta') on the slow link between nodes ",
     "send and receive at the same time in every step"},
    {"reduce_scatter_ring", false, kM, no_root,
     [](const Layout& l, int) {
       std::vector<float> in(kM * static_cast<std::size_t>(l.p), 1.0f), out(kM);
       collectives::reduce_scatter_ring(in, out, ReduceOp::Sum);
     },
     [](const auto& m, const Layout& l, int) { return ring_time(m, l, l.p - 1, kM); },
     "(p-1)(alpha' + m beta') on the slow link between nodes ",
     "send and receive at the same time in every step"},
};

class SimTimeTwoLevel : public ::testing::TestWithParam<TwoLevelCase> {};

TEST_P(SimTimeTwoLevel, MatchesClosedForm) {
  const TwoLevelCase& c = GetParam();
  for (const auto& l : c.tree ? kLayouts : kRingLayouts) {
    const auto model = two_level(l.g);
    for (int root : c.roots(l)) {
      if (HasFailure()) return;  // report the first failing case only
      const std::string what =
          layout_case(l, c.count) + (root >= 0 ? ", root " + std::to_string(root) : "");
      const double got = sim_time_of(what, c.fn, l.p, model, [&] { c.call(l, root); });
      expect_time(got, c.want(model, l, root), c.fn, what,
                  c.formula + model_text(model, c.count * sizeof(float)), c.hint);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Hidden, SimTimeTwoLevel, ::testing::ValuesIn(kTwoLevelCases),
                         [](const ::testing::TestParamInfo<TwoLevelCase>& row) {
                           return std::string(row.param.fn);
                         });

// ---- simulated time of every rank: the documented schedules -------------------------------------
// collectives.cpp fixes, above each function, who sends what to whom and in which order (broadcast_
// naive: src sends to src+1, src+2, ... (mod p); all_reduce_naive: rank 0 receives from 1, ..., p-1
// and sends the result to 1, ..., p-1; the trees: farthest child first when sending, nearest first
// when collecting; the rings and the butterfly: isend + recv + wait in every step). With latency
// and bandwidth cost (and a reduction cost) every rank's own finishing time depends on that order,
// even where the slowest rank's does not. Each rank's time is computed here by running the
// documented schedule through the link model of dist::sim_time() (<dist/dist.hpp>): a message
// posted at t leaves once the sender's link is free, holds it and the receiver's link for
// alpha + b beta; a send returns once its message left, a recv once it arrived; reduce_into
// charges b gamma.

/// One step of a rank: post a message (send_to >= 0), receive one (recv_from >= 0), wait for the
/// posted one, then reduce reduce_bytes (a blocking send, a recv, or an isend + recv + wait).
struct Step {
  int send_to = -1;
  std::size_t send_bytes = 0;
  int recv_from = -1;
  std::size_t recv_bytes = 0;
  std::size_t reduce_bytes = 0;
};
using Schedule = std::vector<std::vector<Step>>;  // per rank, in program order

Step send_step(int to, std::size_t bytes) { return {to, bytes, -1, 0, 0}; }
Step recv_step(int from, std::size_t bytes, bool reduce) {
  return {-1, 0, from, bytes, reduce ? bytes : 0};
}
Step exchange_step(int to, int from, std::size_t bytes, bool reduce) {
  return {to, bytes, from, bytes, reduce ? bytes : 0};
}

/// Every rank's finishing time of schedule s under model m (the steps of libdist's link model);
/// empty when the schedule cannot finish (a bug of the schedule, reported as such).
std::vector<double> schedule_times(const Schedule& s, const dist::NetworkModel& m) {
  const auto p = s.size();
  struct Msg {
    double ts, cost;
  };
  std::vector<double> clock(p, 0.0), out_free(p, 0.0), in_free(p, 0.0);
  std::vector<std::size_t> pc(p, 0);
  std::vector<bool> posted(p, false);
  std::vector<Msg> pending(p, Msg{0, 0});
  std::map<std::pair<int, int>, std::vector<Msg>> wire;  // (src, dst) -> FIFO of messages
  std::map<std::pair<int, int>, std::size_t> taken;
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < p; ++r) {
      const int me = static_cast<int>(r);
      while (pc[r] < s[r].size()) {
        const Step& st = s[r][pc[r]];
        if (st.send_to >= 0 && !posted[r]) {
          const double cost = m.message_cost(me, st.send_to, st.send_bytes);
          const double ts = std::max(clock[r], out_free[r]);
          out_free[r] = ts + cost;
          pending[r] = {ts, cost};
          wire[{me, st.send_to}].push_back(pending[r]);
          posted[r] = true;
        }
        if (st.recv_from >= 0) {
          auto& q = wire[{st.recv_from, me}];
          auto& k = taken[{st.recv_from, me}];
          if (k == q.size()) break;  // not sent yet
          const Msg msg = q[k++];
          const double ti = std::max(msg.ts, in_free[r]);
          in_free[r] = ti + msg.cost;
          clock[r] = std::max(clock[r], ti + msg.cost);
        }
        if (st.send_to >= 0) clock[r] = std::max(clock[r], pending[r].ts + pending[r].cost);
        if (st.reduce_bytes > 0 && m.reduce_Bps > 0)
          clock[r] += static_cast<double>(st.reduce_bytes) / m.reduce_Bps;
        posted[r] = false;
        ++pc[r];
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < p; ++r) {
    if (pc[r] < s[r].size()) {
      ADD_FAILURE() << "test bug: the documented schedule does not finish on rank " << r;
      return {};
    }
  }
  return clock;
}

/// The schedule collectives.cpp documents for fn on p ranks, root (or -1), count floats per
/// buffer (the gather family: per block; the rings: count divisible by p).
Schedule documented_schedule(const std::string& fn, int p, int root, std::size_t count) {
  Schedule s(static_cast<std::size_t>(p));
  const std::size_t n = count * sizeof(float);
  const auto real = [&](int v) { return (v + root) % p; };
  for (int me = 0; me < p; ++me) {
    auto& steps = s[static_cast<std::size_t>(me)];
    const int v = root >= 0 ? (me - root + p) % p : me;
    const int right = (me + 1) % p, left = (me - 1 + p) % p;
    if (fn == "broadcast_naive" || fn == "reduce_naive" || fn == "gather_naive") {
      const bool down = fn == "broadcast_naive";
      if (me != root) {
        steps.push_back(down ? recv_step(root, n, false) : send_step(root, n));
      } else {
        for (int k = 1; k < p; ++k)  // src+1, src+2, ... (mod p)
          steps.push_back(down ? send_step(real(k), n)
                               : recv_step(real(k), n, fn == "reduce_naive"));
      }
    } else if (fn == "broadcast_tree") {
      int mask = 1;
      for (; mask < p; mask <<= 1) {
        if (v & mask) {  // the parent: the lowest set bit
          steps.push_back(recv_step(real(v - mask), n, false));
          break;
        }
      }
      for (mask >>= 1; mask > 0; mask >>= 1) {  // farthest child first
        if (v + mask < p) steps.push_back(send_step(real(v + mask), n));
      }
    } else if (fn == "reduce_tree" || fn == "gather_tree") {
      const bool gather = fn == "gather_tree";
      for (int mask = 1; mask < p; mask <<= 1) {  // nearest child first, then the parent
        if (v & mask) {
          const auto blocks = static_cast<std::size_t>(gather ? std::min(mask, p - v) : 1);
          steps.push_back(send_step(real(v - mask), blocks * n));
          break;
        }
        if (v + mask < p) {
          const auto blocks = static_cast<std::size_t>(gather ? std::min(mask, p - v - mask) : 1);
          steps.push_back(recv_step(real(v + mask), blocks * n, !gather));
        }
      }
    } else if (fn == "broadcast_ring") {
      if (me != root) steps.push_back(recv_step(left, n, false));
      if (right != root) steps.push_back(send_step(right, n));
    } else if (fn == "all_reduce_naive") {
      if (me != 0) {
        steps.push_back(send_step(0, n));
        steps.push_back(recv_step(0, n, false));
      } else {
        for (int r = 1; r < p; ++r) steps.push_back(recv_step(r, n, true));
        for (int r = 1; r < p; ++r) steps.push_back(send_step(r, n));
      }
    } else if (fn == "all_reduce_butterfly") {
      const int q = collectives::floor_pow2(p);
      if (me >= q) {
        steps.push_back(send_step(me - q, n));
        steps.push_back(recv_step(me - q, n, false));
      } else {
        if (me + q < p) steps.push_back(recv_step(me + q, n, true));
        for (int d = 1; d < q; d <<= 1) steps.push_back(exchange_step(me ^ d, me ^ d, n, true));
        if (me + q < p) steps.push_back(send_step(me + q, n));
      }
    } else if (fn == "all_reduce_ring") {
      const std::size_t chunk = n / static_cast<std::size_t>(p);
      for (int k = 0; k < p - 1; ++k) steps.push_back(exchange_step(right, left, chunk, true));
      for (int k = 0; k < p - 1; ++k) steps.push_back(exchange_step(right, left, chunk, false));
    } else if (fn == "all_gather_ring" || fn == "reduce_scatter_ring") {
      for (int k = 0; k < p - 1; ++k)
        steps.push_back(exchange_step(right, left, n, fn == "reduce_scatter_ring"));
    }
  }
  return s;
}

/// fn at p = 3, 5, 6, 7 (every root; count 420, divisible by each p), flat network with latency,
/// bandwidth and reduction cost: every rank's simulated time of one call equals its time in the
/// documented schedule.
void every_rank_follows_the_schedule(const std::string& fn, bool rooted, const std::string& order) {
  const auto model = timing_model(true);
  const std::size_t count = fn.find("gather") != std::string::npos ? 100 : 420;
  for (int p : {3, 5, 6, 7}) {
    std::vector<int> roots = {-1};
    if (rooted) {
      roots.clear();
      for (int r = 0; r < p; ++r) roots.push_back((r + 1) % p);  // nonzero roots first
    }
    for (int root : roots) {
      const std::string what = flat_case(p, count) +
                               (root >= 0 ? ", root " + std::to_string(root) : "") +
                               ", alpha 5 us, beta 1/1e9 s/B, gamma 1/2e9 s/B";
      const std::vector<double> want =
          schedule_times(documented_schedule(fn, p, std::max(root, 0), count), model);
      if (want.empty()) return;
      std::vector<double> got(static_cast<std::size_t>(p), -1.0);
      const bool ok = run_case(
          what, fn, p,
          [&](distlab::testing::RankLog&) {
            dist::barrier();
            const double t0 = dist::sim_time();
            call_of(fn)(count, root);
            got[static_cast<std::size_t>(dist::rank())] = dist::sim_time() - t0;
          },
          model);
      if (!ok) return;
      std::ostringstream all;
      for (int r = 0; r < p; ++r) {
        const auto k = static_cast<std::size_t>(r);
        all << (r ? ", " : "") << "rank " << r << " " << got[k] * 1e6 << " (" << want[k] * 1e6
            << ")";
      }
      for (int r = 0; r < p; ++r) {
        const auto k = static_cast<std::size_t>(r);
        if (std::abs(got[k] - want[k]) > 1e-6 * want[k] + 1e-12) {
          ADD_FAILURE() << fn << ", " << what << ": rank " << r << " finished after "
                        << got[k] * 1e6
                        << " us of simulated time, but in the schedule collectives.cpp documents ("
                        << order << ") it finishes after " << want[k] * 1e6
                        << " us. Every rank, in us (documented in brackets): " << all.str();
          return;
        }
      }
    }
  }
}

TEST(BroadcastNaive, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule("broadcast_naive", true,
                                  "src sends to src+1, src+2, ... (mod p) with blocking sends");
}
TEST(BroadcastTree, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule(
      "broadcast_tree", true,
      "a relative rank hears from the rank that differs in its lowest set bit, then tells the "
      "ranks below that bit, farthest first");
}
TEST(BroadcastRing, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule("broadcast_ring", true,
                                  "receive from the left, then send to the right");
}
TEST(ReduceNaive, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule(
      "reduce_naive", true,
      "dst receives from dst+1, dst+2, ... (mod p) and reduces each with reduce_into");
}
TEST(ReduceTree, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule(
      "reduce_tree", true,
      "a rank collects and reduces its children's results, nearest child first, then sends "
      "to its parent once");
}
TEST(AllReduceNaive, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule("all_reduce_naive", false,
                                  "rank 0 receives from 1, 2, ..., p-1, reduces each, and sends "
                                  "the result to 1, ..., p-1");
}
TEST(AllReduceButterfly, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule(
      "all_reduce_butterfly", false,
      "ranks r >= q send to r - q, which reduces it in; rounds with rank XOR 1, 2, ... "
      "(isend + recv + wait, then reduce); r - q sends the result back to r");
}
TEST(AllReduceRing, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule("all_reduce_ring", false,
                                  "p-1 reduce-scatter steps then p-1 all-gather steps, each "
                                  "an isend to the right + recv from the left + wait");
}
TEST(GatherNaive, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule("gather_naive", true,
                                  "every other rank sends its block to dst once");
}
TEST(GatherTree, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule(
      "gather_tree", true,
      "like reduce_tree: children nearest first, then the subtree's blocks in one message to "
      "the parent");
}
TEST(AllGatherRing, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule("all_gather_ring", false,
                                  "p-1 steps of isend to the right + recv from the left + wait");
}
TEST(ReduceScatterRing, SimTimeOfEveryRank) {
  every_rank_follows_the_schedule("reduce_scatter_ring", false,
                                  "p-1 steps of isend to the right + recv from the left + wait, "
                                  "then reduce_into");
}

// ---- the reductions cost time -----------------------------------------------------------------
// dist::reduce_into charges n gamma to the reducing rank's clock; a loop that reduces by hand is
// free on the simulated clock, which the rules forbid. The functions whose flat-network timing
// tests run without gamma: with gamma the call must take at least n gamma longer (the last
// reduction on the reducing rank follows its last arrival, and for all_reduce_naive the results
// go out only after it).

double extra_time_of_gamma(const std::string& fn_name, int p,
                           const std::function<void(std::span<float>)>& call) {
  const std::size_t n = 4096;
  auto body = [&] {
    std::vector<float> buf(n, 1.0f);
    call(buf);
  };
  const double without =
      sim_time_of(flat_case(p, n) + ", no reduction cost", fn_name, p, timing_model(false), body);
  const double with = sim_time_of(flat_case(p, n) + ", with a reduction cost", fn_name, p,
                                  timing_model(true), body);
  return without < 0 || with < 0 ? -1.0 : with - without;
}

TEST(ReduceNaive, SimTimeChargesTheReductions) {
  const double n_gamma = 4096 * sizeof(float) / timing_model(true).reduce_Bps;
  for (int p : {2, 3, 5, 9}) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const int root = p / 2;
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      const double extra = extra_time_of_gamma(
          "reduce_naive", p, [&](std::span<float> b) { collectives::reduce_naive(b, root, op); });
      if (extra < 0) return;
      EXPECT_GE(extra, 0.99 * n_gamma)
          << "reduce_naive, world size " << p << ", root " << root
          << ": a reduction cost of gamma = 1/" << timing_model(true).reduce_Bps
          << " s/B made the call only " << extra * 1e6 << " us slower, less "
          << "than one reduction of n = 16384 bytes (" << n_gamma * 1e6
          << " us): combine the received "
          << "buffers with dist::reduce_into, which charges the reduction to the simulated clock";
    }
  }
}

TEST(AllReduceNaive, SimTimeChargesTheReductions) {
  const double n_gamma = 4096 * sizeof(float) / timing_model(true).reduce_Bps;
  for (int p : {2, 3, 5, 9}) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      const double extra = extra_time_of_gamma(
          "all_reduce_naive", p, [&](std::span<float> b) { collectives::all_reduce_naive(b, op); });
      if (extra < 0) return;
      EXPECT_GE(extra, 0.99 * n_gamma)
          << "all_reduce_naive, world size " << p << ": a reduction cost of gamma = 1/"
          << timing_model(true).reduce_Bps << " s/B made the call only " << extra * 1e6
          << " us slower, less "
          << "than one reduction of n = 16384 bytes (" << n_gamma * 1e6
          << " us): combine the received "
          << "buffers with dist::reduce_into, which charges the reduction to the simulated clock";
    }
  }
}

}  // namespace
