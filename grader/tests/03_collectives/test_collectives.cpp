// Public tests of 03_collectives, one suite per function (the grader runs each suite on its own,
// so a hang or crash in one function costs only that function's points).
//   Values:   closed-form results, world sizes 1..8, every root, every op, several counts, twice.
//   Traffic:  messages and bytes per peer from dist::stats() match the algorithm.
//   SimTime:  dist::sim_time() matches the algorithm's alpha-beta(-gamma) cost within 1%; for the
//             functions that reduce, also the reference's own time with a reduction cost and on
//             the two-level network (SimTimeWithReductionCostMatchesTheReference).
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "collectives_checks.hpp"
#include "collectives_time_cases.hpp"

namespace {

using namespace ctest;
using dist::ReduceOp;

const std::vector<int> kWorldSizes = {1, 2, 3, 4, 5, 6, 7, 8};
const std::vector<std::size_t> kCounts = {0, 1, 7, 1000, 1003};
const std::vector<int> kTrafficSizes = {2, 3, 4, 5, 7, 8};
constexpr std::size_t kTrafficCount = 1000;  // floats
constexpr std::size_t kTimeCount = 4200;     // floats, divisible by 1..8

std::string traffic_case(int p, int root) {
  return "traffic, world size " + std::to_string(p) +
         (root >= 0 ? ", root " + std::to_string(root) : std::string()) + ", count " +
         std::to_string(kTrafficCount);
}
std::string time_case(int p, std::size_t n) {
  return "simulated time, world size " + std::to_string(p) + ", count " + std::to_string(n);
}
std::vector<int> traffic_roots(int p) {
  return p > 2 ? std::vector<int>{0, 1, p - 1} : std::vector<int>{0, p - 1};
}

constexpr std::uint64_t kBytes = kTrafficCount * sizeof(float);

// ---- simulated time against the reference's own run ----------------------------------------

/// The reference's times (seconds) by case key, from grader/golden/03_collectives/sim_times.txt.
std::map<std::string, double> reference_times() {
  const std::string path = std::string(DISTLAB_GOLDEN_DIR) + "/03_collectives/sim_times.txt";
  std::ifstream in(path);
  std::map<std::string, double> times;
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.rfind(" us ");
    if (at != std::string::npos) times[line.substr(0, at)] = std::stod(line.substr(at + 4)) * 1e-6;
  }
  if (times.empty()) ADD_FAILURE() << "cannot read the reference times in " << path;
  return times;
}

/// fn's time on every case of collectives_time_cases.hpp equals the reference's within 1%.
void check_time_against_reference(const std::string& fn) {
  const auto want = reference_times();
  for (const auto& c : ctime03::time_cases()) {
    if (c.fn != fn) continue;
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const auto it = want.find(ctime03::key(c));
    if (it == want.end()) {
      ADD_FAILURE() << "no reference time for \"" << ctime03::key(c) << "\"";
      return;
    }
    const auto model = ctime03::model_of(c);
    const std::string what = "simulated time, " + ctime03::describe(c);
    const std::size_t bytes =
        (fn == "reduce_scatter_ring" ? ctime03::kM : ctime03::kN) * sizeof(float);
    const double got = sim_time_of(what, fn, c.p, model, [&] { ctime03::call(c); });
    expect_time(got, it->second, fn, what,
                "the reference's time under the same model (" + model_text(model, bytes) + ")",
                "reduce every received message once, with dist::reduce_into (a reduction written "
                "by hand costs no simulated time, which the rules forbid), as soon as it arrives, "
                "and send and receive at the same time in exchange steps");
  }
}

// ---- broadcast ------------------------------------------------------------------------------

TEST(BroadcastNaive, Values) {
  check_broadcast_values(collectives::broadcast_naive, "broadcast_naive", kWorldSizes, kCounts,
                         true);
}

TEST(BroadcastNaive, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : traffic_roots(p)) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      auto stats = traffic(traffic_case(p, root), "broadcast_naive", p, [&] {
        std::vector<float> buf(kTrafficCount, 1.0f);
        collectives::broadcast_naive(buf, root);
      });
      if (stats.empty()) return;
      Matrix msgs = zeros(p), bytes = zeros(p);
      for (int q = 0; q < p; ++q) {
        if (q != root) msgs[root][q] = 1, bytes[root][q] = kBytes;
      }
      expect_pattern(stats, msgs, &bytes, "broadcast_naive", traffic_case(p, root),
                     "src sends the whole buffer once to every other rank; nobody else sends");
    }
  }
}

TEST(BroadcastNaive, SimTime) {
  const auto model = timing_model(false);
  const std::size_t bytes = kTimeCount * sizeof(float);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const int root = p / 2;
    const double got = sim_time_of(time_case(p, kTimeCount), "broadcast_naive", p, model, [&] {
      std::vector<float> buf(kTimeCount, 1.0f);
      collectives::broadcast_naive(buf, root);
    });
    const double want = (p - 1) * model.message_cost(0, 1, bytes);
    expect_time(got, want, "broadcast_naive", time_case(p, kTimeCount),
                "(p-1)(alpha + n beta) " + model_text(model, bytes),
                "src should send with one message after another on its link, nothing else");
  }
}

TEST(BroadcastTree, Values) {
  check_broadcast_values(collectives::broadcast_tree, "broadcast_tree", kWorldSizes, kCounts, true);
}

TEST(BroadcastTree, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : traffic_roots(p)) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      auto stats = traffic(traffic_case(p, root), "broadcast_tree", p, [&] {
        std::vector<float> buf(kTrafficCount, 1.0f);
        collectives::broadcast_tree(buf, root);
      });
      if (stats.empty()) return;
      const auto rounds = static_cast<std::uint64_t>(collectives::ceil_log2(p));
      for (int r = 0; r < p; ++r) {
        const auto& s = stats[static_cast<std::size_t>(r)];
        const std::uint64_t want_in = r == root ? 0 : 1;
        EXPECT_EQ(s.messages_received, want_in)
            << "broadcast_tree, " << traffic_case(p, root) << ": rank " << r << " received "
            << s.messages_received << " messages; in a tree every rank except src receives the "
            << "buffer exactly once";
        EXPECT_EQ(s.bytes_received, want_in * kBytes)
            << "broadcast_tree, " << traffic_case(p, root) << ": rank " << r << " received "
            << s.bytes_received << " bytes";
        EXPECT_LE(s.messages_sent, rounds)
            << "broadcast_tree, " << traffic_case(p, root) << ": rank " << r << " sent "
            << s.messages_sent << " messages; a binomial tree has only ceil(log2 p) = " << rounds
            << " rounds";
      }
      EXPECT_EQ(stats[static_cast<std::size_t>(root)].messages_sent, rounds)
          << "broadcast_tree, " << traffic_case(p, root) << ": src sends once per round, "
          << "ceil(log2 p) = " << rounds << " messages";
    }
  }
}

TEST(BroadcastTree, SimTime) {
  const auto model = timing_model(false);
  const std::size_t bytes = kTimeCount * sizeof(float);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : {0, p - 1}) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      const double got = sim_time_of(time_case(p, kTimeCount) + ", root " + std::to_string(root),
                                     "broadcast_tree", p, model, [&] {
                                       std::vector<float> buf(kTimeCount, 1.0f);
                                       collectives::broadcast_tree(buf, root);
                                     });
      const double want = collectives::ceil_log2(p) * model.message_cost(0, 1, bytes);
      expect_time(got, want, "broadcast_tree", time_case(p, kTimeCount),
                  "ceil(log2 p)(alpha + n beta) " + model_text(model, bytes),
                  "every rank that has the data should send in every later round, farthest child "
                  "first");
    }
  }
}

TEST(BroadcastRing, Values) {
  check_broadcast_values(collectives::broadcast_ring, "broadcast_ring", kWorldSizes, kCounts, true);
}

TEST(BroadcastRing, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : traffic_roots(p)) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      auto stats = traffic(traffic_case(p, root), "broadcast_ring", p, [&] {
        std::vector<float> buf(kTrafficCount, 1.0f);
        collectives::broadcast_ring(buf, root);
      });
      if (stats.empty()) return;
      Matrix msgs = zeros(p), bytes = zeros(p);
      for (int r = 0; r < p; ++r) {
        const int right = (r + 1) % p;
        if (right != root) msgs[r][right] = 1, bytes[r][right] = kBytes;
      }
      expect_pattern(stats, msgs, &bytes, "broadcast_ring", traffic_case(p, root),
                     "every rank except src receives the buffer once, from its left neighbour "
                     "rank-1, and passes it to its right neighbour unless that is src");
    }
  }
}

TEST(BroadcastRing, SimTime) {
  const auto model = timing_model(false);
  const std::size_t bytes = kTimeCount * sizeof(float);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const int root = (p - 1) / 2;
    const double got = sim_time_of(time_case(p, kTimeCount), "broadcast_ring", p, model, [&] {
      std::vector<float> buf(kTimeCount, 1.0f);
      collectives::broadcast_ring(buf, root);
    });
    const double want = (p - 1) * model.message_cost(0, 1, bytes);
    expect_time(got, want, "broadcast_ring", time_case(p, kTimeCount),
                "(p-1)(alpha + n beta) " + model_text(model, bytes),
                "the whole buffer should travel the p-1 hops as one message per hop");
  }
}

// ---- reduce ---------------------------------------------------------------------------------

TEST(ReduceNaive, Values) {
  check_reduce_values(collectives::reduce_naive, "reduce_naive", kWorldSizes, kCounts, true);
}

TEST(ReduceNaive, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : traffic_roots(p)) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      auto stats = traffic(traffic_case(p, root), "reduce_naive", p, [&] {
        std::vector<float> buf(kTrafficCount, 1.0f);
        collectives::reduce_naive(buf, root, ReduceOp::Sum);
      });
      if (stats.empty()) return;
      Matrix msgs = zeros(p), bytes = zeros(p);
      for (int r = 0; r < p; ++r) {
        if (r != root) msgs[r][root] = 1, bytes[r][root] = kBytes;
      }
      expect_pattern(stats, msgs, &bytes, "reduce_naive", traffic_case(p, root),
                     "every rank except dst sends its whole buffer once, to dst");
    }
  }
}

TEST(ReduceNaive, SimTime) {
  const auto model = timing_model(false);
  const std::size_t bytes = kTimeCount * sizeof(float);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const int root = p - 1;
    const double got = sim_time_of(time_case(p, kTimeCount), "reduce_naive", p, model, [&] {
      std::vector<float> buf(kTimeCount, 1.0f);
      collectives::reduce_naive(buf, root, ReduceOp::Sum);
    });
    const double want = (p - 1) * model.message_cost(0, 1, bytes);
    expect_time(got, want, "reduce_naive", time_case(p, kTimeCount),
                "(p-1)(alpha + n beta) " + model_text(model, bytes),
                "dst's incoming link should carry p-1 messages, nothing else");
  }
}

TEST(ReduceNaive, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("reduce_naive");
}

TEST(ReduceTree, Values) {
  check_reduce_values(collectives::reduce_tree, "reduce_tree", kWorldSizes, kCounts, true);
}

TEST(ReduceTree, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : traffic_roots(p)) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      auto stats = traffic(traffic_case(p, root), "reduce_tree", p, [&] {
        std::vector<float> buf(kTrafficCount, 1.0f);
        collectives::reduce_tree(buf, root, ReduceOp::Sum);
      });
      if (stats.empty()) return;
      const auto rounds = static_cast<std::uint64_t>(collectives::ceil_log2(p));
      for (int r = 0; r < p; ++r) {
        const auto& s = stats[static_cast<std::size_t>(r)];
        const std::uint64_t want_out = r == root ? 0 : 1;
        EXPECT_EQ(s.messages_sent, want_out)
            << "reduce_tree, " << traffic_case(p, root) << ": rank " << r << " sent "
            << s.messages_sent << " messages; in a tree every rank except dst sends its partial "
            << "result exactly once, to its parent";
        EXPECT_EQ(s.bytes_sent, want_out * kBytes)
            << "reduce_tree, " << traffic_case(p, root) << ": rank " << r << " sent "
            << s.bytes_sent << " bytes";
        EXPECT_LE(s.messages_received, rounds)
            << "reduce_tree, " << traffic_case(p, root) << ": rank " << r << " received "
            << s.messages_received
            << " messages; a binomial tree has only ceil(log2 p) = " << rounds << " rounds";
      }
      EXPECT_EQ(stats[static_cast<std::size_t>(root)].messages_received, rounds)
          << "reduce_tree, " << traffic_case(p, root) << ": dst receives once per round, "
          << "ceil(log2 p) = " << rounds << " messages";
    }
  }
}

TEST(ReduceTree, SimTime) {
  const std::size_t bytes = kTimeCount * sizeof(float);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    // With gamma for powers of two (every round is alpha + n beta + n gamma), without otherwise.
    const auto model = timing_model(is_pow2(p));
    const int root = p / 2;
    const double got = sim_time_of(time_case(p, kTimeCount), "reduce_tree", p, model, [&] {
      std::vector<float> buf(kTimeCount, 1.0f);
      collectives::reduce_tree(buf, root, ReduceOp::Sum);
    });
    const double want =
        collectives::ceil_log2(p) * (model.message_cost(0, 1, bytes) + model.reduce_cost(bytes));
    expect_time(got, want, "reduce_tree", time_case(p, kTimeCount),
                "ceil(log2 p)(alpha + n beta + n gamma) " + model_text(model, bytes),
                "receive from the nearest child first (its subtree is ready first) and reduce "
                "each message once, with dist::reduce_into");
  }
}

TEST(ReduceTree, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("reduce_tree");
}

// ---- all-reduce -----------------------------------------------------------------------------

TEST(AllReduceNaive, Values) {
  check_all_reduce_values(collectives::all_reduce_naive, "all_reduce_naive", kWorldSizes, kCounts);
}

TEST(AllReduceNaive, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    auto stats = traffic(traffic_case(p, -1), "all_reduce_naive", p, [&] {
      std::vector<float> buf(kTrafficCount, 1.0f);
      collectives::all_reduce_naive(buf, ReduceOp::Sum);
    });
    if (stats.empty()) return;
    Matrix msgs = zeros(p), bytes = zeros(p);
    for (int r = 1; r < p; ++r) {
      msgs[r][0] = msgs[0][r] = 1;
      bytes[r][0] = bytes[0][r] = kBytes;
    }
    expect_pattern(stats, msgs, &bytes, "all_reduce_naive", traffic_case(p, -1),
                   "every rank > 0 sends its buffer to rank 0 and gets the result back from it");
  }
}

TEST(AllReduceNaive, SimTime) {
  const auto model = timing_model(false);
  const std::size_t bytes = kTimeCount * sizeof(float);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const double got = sim_time_of(time_case(p, kTimeCount), "all_reduce_naive", p, model, [&] {
      std::vector<float> buf(kTimeCount, 1.0f);
      collectives::all_reduce_naive(buf, ReduceOp::Sum);
    });
    const double want = 2 * (p - 1) * model.message_cost(0, 1, bytes);
    expect_time(got, want, "all_reduce_naive", time_case(p, kTimeCount),
                "2(p-1)(alpha + n beta) " + model_text(model, bytes),
                "rank 0 should receive p-1 buffers, then send p-1 results");
  }
}

TEST(AllReduceNaive, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("all_reduce_naive");
}

TEST(AllReduceButterfly, Values) {
  check_all_reduce_values(collectives::all_reduce_butterfly, "all_reduce_butterfly", kWorldSizes,
                          kCounts);
}

TEST(AllReduceButterfly, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    auto stats = traffic(traffic_case(p, -1), "all_reduce_butterfly", p, [&] {
      std::vector<float> buf(kTrafficCount, 1.0f);
      collectives::all_reduce_butterfly(buf, ReduceOp::Sum);
    });
    if (stats.empty()) return;
    const int q = collectives::floor_pow2(p);
    Matrix msgs = zeros(p), bytes = zeros(p);
    for (int r = 0; r < q; ++r) {
      for (int mask = 1; mask < q; mask <<= 1) msgs[r][r ^ mask] = 1, bytes[r][r ^ mask] = kBytes;
    }
    for (int r = q; r < p; ++r) {
      msgs[r][r - q] = msgs[r - q][r] = 1;
      bytes[r][r - q] = bytes[r - q][r] = kBytes;
    }
    expect_pattern(stats, msgs, &bytes, "all_reduce_butterfly", traffic_case(p, -1),
                   "the ranks beyond the largest power of two q <= p hand their buffer to one "
                   "partner among the first q and get the result back from it; among the first q, "
                   "every rank exchanges the whole buffer once per round, each round with another "
                   "partner (README: Hints, butterfly for any p)");
  }
}

TEST(AllReduceButterfly, SimTime) {
  const std::size_t bytes = kTimeCount * sizeof(float);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const bool pow2 = is_pow2(p);
    const auto model = timing_model(pow2);
    const double got = sim_time_of(time_case(p, kTimeCount), "all_reduce_butterfly", p, model, [&] {
      std::vector<float> buf(kTimeCount, 1.0f);
      collectives::all_reduce_butterfly(buf, ReduceOp::Sum);
    });
    const double c = model.message_cost(0, 1, bytes);
    const double want =
        pow2 ? floor_log2(p) * (c + model.reduce_cost(bytes)) : (floor_log2(p) + 2) * c;
    expect_time(got, want, "all_reduce_butterfly", time_case(p, kTimeCount),
                std::string(pow2 ? "log2(p)(alpha + n beta + n gamma) "
                                 : "(floor(log2 p) + 2)(alpha + n beta) ") +
                    model_text(model, bytes),
                "in each round send and receive at the same time (isend + recv + wait), then "
                "reduce once");
  }
}

TEST(AllReduceButterfly, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("all_reduce_butterfly");
}

TEST(AllReduceRing, Values) {
  check_all_reduce_values(collectives::all_reduce_ring, "all_reduce_ring", kWorldSizes, kCounts);
}

TEST(AllReduceRing, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    auto stats = traffic(traffic_case(p, -1), "all_reduce_ring", p, [&] {
      std::vector<float> buf(kTrafficCount, 1.0f);
      collectives::all_reduce_ring(buf, ReduceOp::Sum);
    });
    if (stats.empty()) return;
    Matrix msgs = zeros(p);
    for (int r = 0; r < p; ++r) msgs[r][(r + 1) % p] = 2 * static_cast<std::uint64_t>(p - 1);
    expect_pattern(stats, msgs, nullptr, "all_reduce_ring", traffic_case(p, -1),
                   "2(p-1) chunk messages, each only to the right neighbour rank+1");
    // Each rank sends 2(p-1) chunks of n/p (rounded down or up): all but two chunks, twice.
    const std::uint64_t small = kTrafficCount / static_cast<std::uint64_t>(p);
    const std::uint64_t large = small + (kTrafficCount % static_cast<std::uint64_t>(p) ? 1 : 0);
    const std::uint64_t lo = 2 * kTrafficCount - 2 * large;
    const std::uint64_t hi = 2 * kTrafficCount - 2 * small;
    for (int r = 0; r < p; ++r) {
      const auto sent = stats[static_cast<std::size_t>(r)].bytes_sent / sizeof(float);
      EXPECT_TRUE(sent >= lo && sent <= hi)
          << "all_reduce_ring, " << traffic_case(p, -1) << ": rank " << r << " sent " << sent
          << " floats; the ring sends 2(p-1) chunks of about n/p = " << kTrafficCount / p
          << ", i.e. " << hi << " floats at most";
    }
  }
}

TEST(AllReduceRing, SimTime) {
  const auto model = timing_model(true);
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const double got = sim_time_of(time_case(p, kTimeCount), "all_reduce_ring", p, model, [&] {
      std::vector<float> buf(kTimeCount, 1.0f);
      collectives::all_reduce_ring(buf, ReduceOp::Sum);
    });
    const std::size_t chunk = kTimeCount / static_cast<std::size_t>(p) * sizeof(float);
    const double want =
        2 * (p - 1) * model.message_cost(0, 1, chunk) + (p - 1) * model.reduce_cost(chunk);
    expect_time(got, want, "all_reduce_ring", time_case(p, kTimeCount),
                "2(p-1)(alpha + (n/p) beta) + (p-1)(n/p) gamma " +
                    model_text(model, kTimeCount * sizeof(float)),
                "in each step send one chunk and receive another at the same time (isend + recv + "
                "wait), reduce only in the reduce-scatter half");
  }
}

TEST(AllReduceRing, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("all_reduce_ring");
}

// ---- gather, all-gather, reduce-scatter -----------------------------------------------------

TEST(GatherNaive, Values) {
  check_gather_values(collectives::gather_naive, "gather_naive", kWorldSizes, kCounts, true);
}

TEST(GatherNaive, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : traffic_roots(p)) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      auto stats = traffic(traffic_case(p, root), "gather_naive", p, [&] {
        std::vector<float> in(kTrafficCount, 1.0f),
            out(kTrafficCount * static_cast<std::size_t>(p));
        collectives::gather_naive(in, out, root);
      });
      if (stats.empty()) return;
      Matrix msgs = zeros(p), bytes = zeros(p);
      for (int r = 0; r < p; ++r) {
        if (r != root) msgs[r][root] = 1, bytes[r][root] = kBytes;
      }
      expect_pattern(stats, msgs, &bytes, "gather_naive", traffic_case(p, root),
                     "every rank except dst sends its block once, to dst");
    }
  }
}

TEST(GatherNaive, SimTime) {
  const auto model = timing_model(false);
  const std::size_t m = kTimeCount / 8;
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const int root = p / 3;
    const double got = sim_time_of(time_case(p, m), "gather_naive", p, model, [&] {
      std::vector<float> in(m, 1.0f), out(m * static_cast<std::size_t>(p));
      collectives::gather_naive(in, out, root);
    });
    const double want = (p - 1) * model.message_cost(0, 1, m * sizeof(float));
    expect_time(got, want, "gather_naive", time_case(p, m),
                "(p-1)(alpha + m beta) " + model_text(model, m * sizeof(float)),
                "dst's incoming link should carry p-1 blocks, nothing else");
  }
}

TEST(GatherTree, Values) {
  check_gather_values(collectives::gather_tree, "gather_tree", kWorldSizes, kCounts, true);
}

TEST(GatherTree, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    for (int root : traffic_roots(p)) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      auto stats = traffic(traffic_case(p, root), "gather_tree", p, [&] {
        std::vector<float> in(kTrafficCount, 1.0f),
            out(kTrafficCount * static_cast<std::size_t>(p));
        collectives::gather_tree(in, out, root);
      });
      if (stats.empty()) return;
      const auto rounds = static_cast<std::uint64_t>(collectives::ceil_log2(p));
      for (int r = 0; r < p; ++r) {
        const auto& s = stats[static_cast<std::size_t>(r)];
        EXPECT_EQ(s.messages_sent, r == root ? 0u : 1u)
            << "gather_tree, " << traffic_case(p, root) << ": rank " << r << " sent "
            << s.messages_sent << " messages; every rank except dst sends its subtree's blocks "
            << "once, in one message, to its parent";
      }
      const auto& d = stats[static_cast<std::size_t>(root)];
      EXPECT_EQ(d.messages_received, rounds)
          << "gather_tree, " << traffic_case(p, root) << ": dst receives once per round, "
          << "ceil(log2 p) = " << rounds << " messages";
      EXPECT_EQ(d.bytes_received, static_cast<std::uint64_t>(p - 1) * kBytes)
          << "gather_tree, " << traffic_case(p, root) << ": dst receives each other rank's "
          << "block exactly once";
    }
  }
}

TEST(GatherTree, SimTime) {
  const auto model = timing_model(false);
  const std::size_t m = kTimeCount / 8;
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const int root = p - 1;
    const double got = sim_time_of(time_case(p, m), "gather_tree", p, model, [&] {
      std::vector<float> in(m, 1.0f), out(m * static_cast<std::size_t>(p));
      collectives::gather_tree(in, out, root);
    });
    const double want = collectives::ceil_log2(p) * model.latency_s +
                        static_cast<double>((p - 1) * m * sizeof(float)) / model.bandwidth_Bps;
    expect_time(got, want, "gather_tree", time_case(p, m),
                "ceil(log2 p) alpha + (p-1) m beta " + model_text(model, m * sizeof(float)),
                "receive from the nearest child first (its subtree is ready first) and send "
                "the whole subtree in one message");
  }
}

TEST(AllGatherRing, Values) {
  check_all_gather_values(collectives::all_gather_ring, "all_gather_ring", kWorldSizes, kCounts);
}

TEST(AllGatherRing, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    auto stats = traffic(traffic_case(p, -1), "all_gather_ring", p, [&] {
      std::vector<float> in(kTrafficCount, 1.0f), out(kTrafficCount * static_cast<std::size_t>(p));
      collectives::all_gather_ring(in, out);
    });
    if (stats.empty()) return;
    Matrix msgs = zeros(p), bytes = zeros(p);
    for (int r = 0; r < p; ++r) {
      msgs[r][(r + 1) % p] = static_cast<std::uint64_t>(p - 1);
      bytes[r][(r + 1) % p] = static_cast<std::uint64_t>(p - 1) * kBytes;
    }
    expect_pattern(stats, msgs, &bytes, "all_gather_ring", traffic_case(p, -1),
                   "p-1 messages of one block each, only to the right neighbour rank+1");
  }
}

TEST(AllGatherRing, SimTime) {
  const auto model = timing_model(false);
  const std::size_t m = kTimeCount / 8;
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const double got = sim_time_of(time_case(p, m), "all_gather_ring", p, model, [&] {
      std::vector<float> in(m, 1.0f), out(m * static_cast<std::size_t>(p));
      collectives::all_gather_ring(in, out);
    });
    const double want = (p - 1) * model.message_cost(0, 1, m * sizeof(float));
    expect_time(got, want, "all_gather_ring", time_case(p, m),
                "(p-1)(alpha + m beta) " + model_text(model, m * sizeof(float)),
                "in each step send one block and receive another at the same time (isend + recv "
                "+ wait)");
  }
}

TEST(ReduceScatterRing, Values) {
  check_reduce_scatter_values(collectives::reduce_scatter_ring, "reduce_scatter_ring", kWorldSizes,
                              kCounts);
}

TEST(ReduceScatterRing, Traffic) {
  for (int p : kTrafficSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    auto stats = traffic(traffic_case(p, -1), "reduce_scatter_ring", p, [&] {
      std::vector<float> in(kTrafficCount * static_cast<std::size_t>(p), 1.0f), out(kTrafficCount);
      collectives::reduce_scatter_ring(in, out, ReduceOp::Sum);
    });
    if (stats.empty()) return;
    Matrix msgs = zeros(p), bytes = zeros(p);
    for (int r = 0; r < p; ++r) {
      msgs[r][(r + 1) % p] = static_cast<std::uint64_t>(p - 1);
      bytes[r][(r + 1) % p] = static_cast<std::uint64_t>(p - 1) * kBytes;
    }
    expect_pattern(stats, msgs, &bytes, "reduce_scatter_ring", traffic_case(p, -1),
                   "p-1 messages of one chunk (out.size() floats) each, only to the right "
                   "neighbour rank+1");
  }
}

TEST(ReduceScatterRing, SimTime) {
  const auto model = timing_model(true);
  const std::size_t m = kTimeCount / 8;
  for (int p : kWorldSizes) {
    if (::testing::Test::HasFailure()) return;  // report the first failing case only
    const double got =
        sim_time_of(time_case(p, m) + " per rank", "reduce_scatter_ring", p, model, [&] {
          std::vector<float> in(m * static_cast<std::size_t>(p), 1.0f), out(m);
          collectives::reduce_scatter_ring(in, out, ReduceOp::Sum);
        });
    const std::size_t b = m * sizeof(float);
    const double want = (p - 1) * (model.message_cost(0, 1, b) + model.reduce_cost(b));
    expect_time(got, want, "reduce_scatter_ring", time_case(p, m),
                "(p-1)(alpha + m beta + m gamma) " + model_text(model, b),
                "in each step send and receive at the same time (isend + recv + wait), then "
                "reduce one chunk once");
  }
}

TEST(ReduceScatterRing, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("reduce_scatter_ring");
}

}  // namespace
