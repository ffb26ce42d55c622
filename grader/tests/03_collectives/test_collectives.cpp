// Public tests of 03_collectives, one suite per function (the grader runs each suite on its own,
// so a hang or crash in one function costs only that function's points).
//   Values:   closed-form results, world sizes 1..8, every root, every op, several counts, twice.
//   Traffic:  messages and bytes per peer from dist::stats() match the algorithm.
//   SimTime:  dist::sim_time() matches the algorithm's alpha-beta(-gamma) cost within 1%; for the
//             functions that reduce, also the reference's own time with a reduction cost and on
//             the two-level network (SimTimeWithReductionCostMatchesTheReference).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
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

// ---- the drivers every suite shares: one row of expectations per function ------------------

/// Traffic of fn with kTrafficCount floats, for every traffic world size and, when `rooted`, every
/// traffic root: `expect(stats, p, root, what)` checks the counters of one case.
void check_traffic(const std::string& fn, bool rooted,
                   const std::function<void(const std::vector<dist::Stats>&, int, int,
                                            const std::string&)>& expect) {
  for (int p : kTrafficSizes) {
    for (int root : rooted ? traffic_roots(p) : std::vector<int>{-1}) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      const std::string what = traffic_case(p, root);
      const auto stats = traffic(what, fn, p, [&] { call_of(fn)(kTrafficCount, root); });
      if (stats.empty()) return;
      expect(stats, p, root, what);
    }
  }
}

/// The common traffic check: messages (and bytes) from every rank to every rank, as
/// `fill(msgs, bytes, p, root)` writes the algorithm's pattern; `rule` says it in words.
void check_pattern(const std::string& fn, bool rooted,
                   const std::function<void(Matrix&, Matrix&, int, int)>& fill,
                   const std::string& rule) {
  check_traffic(fn, rooted, [&](const auto& stats, int p, int root, const std::string& what) {
    Matrix msgs = zeros(p), bytes = zeros(p);
    fill(msgs, bytes, p, root);
    expect_pattern(stats, msgs, &bytes, fn, what, rule);
  });
}

/// Checks rank r's counter `got` against `want` (a tree's per-rank rule).
void expect_count(std::uint64_t got, std::uint64_t want, const std::string& fn,
                  const std::string& what, const std::string& rule) {
  EXPECT_EQ(got, want) << fn << ", " << what << ": " << rule << " (got " << got << ")";
}

/// One row of the simulated-time table: fn on `count` floats per rank, the model for world size
/// p, the roots to try, the algorithm's cost and its formula in words, and what a slower or
/// faster schedule probably does differently.
struct TimeRow {
  std::string fn;
  std::size_t count;
  std::function<dist::NetworkModel(int p)> model;
  std::function<std::vector<int>(int p)> roots;
  std::function<double(int p, const dist::NetworkModel&)> cost;
  std::function<std::string(const dist::NetworkModel&)> formula;
  std::string advice;
};

void check_time(const TimeRow& row) {
  for (int p : kWorldSizes) {
    const auto model = row.model(p);
    for (int root : row.roots ? row.roots(p) : std::vector<int>{-1}) {
      if (::testing::Test::HasFailure()) return;  // report the first failing case only
      const std::string what =
          time_case(p, row.count) + (root >= 0 ? ", root " + std::to_string(root) : "");
      const double got =
          sim_time_of(what, row.fn, p, model, [&] { call_of(row.fn)(row.count, root); });
      expect_time(got, row.cost(p, model), row.fn, what, row.formula(model), row.advice);
    }
  }
}

auto flat(bool with_gamma) {
  return [with_gamma](int) { return timing_model(with_gamma); };
}
auto one_root(int (*pick)(int)) {
  return [pick](int p) { return std::vector<int>{pick(p)}; };
}
double cost(const dist::NetworkModel& m, std::size_t count) {
  return m.message_cost(0, 1, count * sizeof(float));
}
double reduce_time(const dist::NetworkModel& m, std::size_t count) {
  return m.reduce_cost(count * sizeof(float));
}
auto formula(const std::string& words, std::size_t count) {
  return [words, count](const dist::NetworkModel& m) {
    return words + " " + model_text(m, count * sizeof(float));
  };
}

constexpr std::size_t kBlock =
    kTimeCount / 8;  // floats per block (gather) or chunk (reduce-scatter)

// ---- broadcast ------------------------------------------------------------------------------

TEST(BroadcastNaive, Values) {
  check_broadcast_values(collectives::broadcast_naive, "broadcast_naive", kWorldSizes, kCounts,
                         true);
}

TEST(BroadcastNaive, Traffic) {
  check_pattern(
      "broadcast_naive", true,
      [](Matrix& msgs, Matrix& bytes, int p, int root) {
        for (int q = 0; q < p; ++q) {
          if (q != root) msgs[root][q] = 1, bytes[root][q] = kBytes;
        }
      },
      "src sends the whole buffer once to every other rank; nobody else sends");
}

TEST(BroadcastNaive, SimTime) {
  check_time({"broadcast_naive", kTimeCount, flat(false), one_root([](int p) { return p / 2; }),
              [](int p, const auto& m) { return (p - 1) * cost(m, kTimeCount); },
              formula("(p-1)(alpha + n beta)", kTimeCount),
              "src should send with one message after another on its link, nothing else"});
}

TEST(BroadcastTree, Values) {
  check_broadcast_values(collectives::broadcast_tree, "broadcast_tree", kWorldSizes, kCounts, true);
}

TEST(BroadcastTree, Traffic) {
  const std::string fn = "broadcast_tree";
  check_traffic(fn, true, [&](const auto& stats, int p, int root, const std::string& what) {
    const auto rounds = static_cast<std::uint64_t>(collectives::ceil_log2(p));
    for (int r = 0; r < p; ++r) {
      const auto& s = stats[static_cast<std::size_t>(r)];
      const std::uint64_t in = r == root ? 0 : 1;
      const std::string rank = "rank " + std::to_string(r);
      expect_count(s.messages_received, in, fn, what,
                   rank + ": in a tree every rank except src receives the buffer exactly once");
      expect_count(s.bytes_received, in * kBytes, fn, what, rank + ": bytes received");
      EXPECT_LE(s.messages_sent, rounds)
          << fn << ", " << what << ": " << rank << " sent " << s.messages_sent
          << " messages; a binomial tree has only ceil(log2 p) = " << rounds << " rounds";
    }
    expect_count(
        stats[static_cast<std::size_t>(root)].messages_sent, rounds, fn, what,
        "src sends once per round, ceil(log2 p) = " + std::to_string(rounds) + " messages");
  });
}

TEST(BroadcastTree, SimTime) {
  check_time({"broadcast_tree", kTimeCount, flat(false),
              [](int p) {
                return std::vector<int>{0, p - 1};
              },
              [](int p, const auto& m) { return collectives::ceil_log2(p) * cost(m, kTimeCount); },
              formula("ceil(log2 p)(alpha + n beta)", kTimeCount),
              "every rank that has the data should send in every later round, farthest child "
              "first"});
}

TEST(BroadcastRing, Values) {
  check_broadcast_values(collectives::broadcast_ring, "broadcast_ring", kWorldSizes, kCounts, true);
}

TEST(BroadcastRing, Traffic) {
  check_pattern(
      "broadcast_ring", true,
      [](Matrix& msgs, Matrix& bytes, int p, int root) {
        for (int r = 0; r < p; ++r) {
          const int right = (r + 1) % p;
          if (right != root) msgs[r][right] = 1, bytes[r][right] = kBytes;
        }
      },
      "every rank except src receives the buffer once, from its left neighbour rank-1, and "
      "passes it to its right neighbour unless that is src");
}

TEST(BroadcastRing, SimTime) {
  check_time({"broadcast_ring", kTimeCount, flat(false),
              one_root([](int p) { return (p - 1) / 2; }),
              [](int p, const auto& m) { return (p - 1) * cost(m, kTimeCount); },
              formula("(p-1)(alpha + n beta)", kTimeCount),
              "the whole buffer should travel the p-1 hops as one message per hop"});
}

// ---- reduce ---------------------------------------------------------------------------------

TEST(ReduceNaive, Values) {
  check_reduce_values(collectives::reduce_naive, "reduce_naive", kWorldSizes, kCounts, true);
}

TEST(ReduceNaive, Traffic) {
  check_pattern(
      "reduce_naive", true,
      [](Matrix& msgs, Matrix& bytes, int p, int root) {
        for (int r = 0; r < p; ++r) {
          if (r != root) msgs[r][root] = 1, bytes[r][root] = kBytes;
        }
      },
      "every rank except dst sends its whole buffer once, to dst");
}

TEST(ReduceNaive, SimTime) {
  check_time({"reduce_naive", kTimeCount, flat(false), one_root([](int p) { return p - 1; }),
              [](int p, const auto& m) { return (p - 1) * cost(m, kTimeCount); },
              formula("(p-1)(alpha + n beta)", kTimeCount),
              "dst's incoming link should carry p-1 messages, nothing else"});
}

TEST(ReduceNaive, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("reduce_naive");
}

TEST(ReduceTree, Values) {
  check_reduce_values(collectives::reduce_tree, "reduce_tree", kWorldSizes, kCounts, true);
}

TEST(ReduceTree, Traffic) {
  const std::string fn = "reduce_tree";
  check_traffic(fn, true, [&](const auto& stats, int p, int root, const std::string& what) {
    const auto rounds = static_cast<std::uint64_t>(collectives::ceil_log2(p));
    for (int r = 0; r < p; ++r) {
      const auto& s = stats[static_cast<std::size_t>(r)];
      const std::uint64_t out = r == root ? 0 : 1;
      const std::string rank = "rank " + std::to_string(r);
      expect_count(s.messages_sent, out, fn, what,
                   rank +
                       ": in a tree every rank except dst sends its partial result exactly "
                       "once, to its parent");
      expect_count(s.bytes_sent, out * kBytes, fn, what, rank + ": bytes sent");
      EXPECT_LE(s.messages_received, rounds)
          << fn << ", " << what << ": " << rank << " received " << s.messages_received
          << " messages; a binomial tree has only ceil(log2 p) = " << rounds << " rounds";
    }
    expect_count(
        stats[static_cast<std::size_t>(root)].messages_received, rounds, fn, what,
        "dst receives once per round, ceil(log2 p) = " + std::to_string(rounds) + " messages");
  });
}

TEST(ReduceTree, SimTime) {
  // With gamma for powers of two (every round is alpha + n beta + n gamma), without otherwise.
  check_time({"reduce_tree", kTimeCount, [](int p) { return timing_model(is_pow2(p)); },
              one_root([](int p) { return p / 2; }),
              [](int p, const auto& m) {
                return collectives::ceil_log2(p) *
                       (cost(m, kTimeCount) + reduce_time(m, kTimeCount));
              },
              formula("ceil(log2 p)(alpha + n beta + n gamma)", kTimeCount),
              "receive from the nearest child first (its subtree is ready first) and reduce "
              "each message once, with dist::reduce_into"});
}

TEST(ReduceTree, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("reduce_tree");
}

// ---- all-reduce -----------------------------------------------------------------------------

TEST(AllReduceNaive, Values) {
  check_all_reduce_values(collectives::all_reduce_naive, "all_reduce_naive", kWorldSizes, kCounts);
}

TEST(AllReduceNaive, Traffic) {
  check_pattern(
      "all_reduce_naive", false,
      [](Matrix& msgs, Matrix& bytes, int p, int) {
        for (int r = 1; r < p; ++r) {
          msgs[r][0] = msgs[0][r] = 1;
          bytes[r][0] = bytes[0][r] = kBytes;
        }
      },
      "every rank > 0 sends its buffer to rank 0 and gets the result back from it");
}

TEST(AllReduceNaive, SimTime) {
  check_time({"all_reduce_naive", kTimeCount, flat(false), nullptr,
              [](int p, const auto& m) { return 2 * (p - 1) * cost(m, kTimeCount); },
              formula("2(p-1)(alpha + n beta)", kTimeCount),
              "rank 0 should receive p-1 buffers, then send p-1 results"});
}

TEST(AllReduceNaive, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("all_reduce_naive");
}

TEST(AllReduceButterfly, Values) {
  check_all_reduce_values(collectives::all_reduce_butterfly, "all_reduce_butterfly", kWorldSizes,
                          kCounts);
}

TEST(AllReduceButterfly, Traffic) {
  check_pattern(
      "all_reduce_butterfly", false,
      [](Matrix& msgs, Matrix& bytes, int p, int) {
        const int q = collectives::floor_pow2(p);
        for (int r = 0; r < q; ++r) {
          for (int mask = 1; mask < q; mask <<= 1)
            msgs[r][r ^ mask] = 1, bytes[r][r ^ mask] = kBytes;
        }
        for (int r = q; r < p; ++r) {
          msgs[r][r - q] = msgs[r - q][r] = 1;
          bytes[r][r - q] = bytes[r - q][r] = kBytes;
        }
      },
      "the ranks beyond the largest power of two q <= p hand their buffer to one partner among "
      "the first q and get the result back from it; among the first q, every rank exchanges the "
      "whole buffer once per round, each round with another partner (README: Hints, butterfly "
      "for any p)");
}

TEST(AllReduceButterfly, SimTime) {
  // With gamma for powers of two (log2 p exchange rounds, each reduced once), without otherwise.
  check_time(
      {"all_reduce_butterfly", kTimeCount, [](int p) { return timing_model(is_pow2(p)); }, nullptr,
       [](int p, const auto& m) {
         return is_pow2(p) ? floor_log2(p) * (cost(m, kTimeCount) + reduce_time(m, kTimeCount))
                           : (floor_log2(p) + 2) * cost(m, kTimeCount);
       },
       [](const auto& m) {
         return std::string(m.reduce_Bps > 0 ? "log2(p)(alpha + n beta + n gamma) "
                                             : "(floor(log2 p) + 2)(alpha + n beta) ") +
                model_text(m, kTimeCount * sizeof(float));
       },
       "in each round send and receive at the same time (isend + recv + wait), then "
       "reduce once"});
}

TEST(AllReduceButterfly, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("all_reduce_butterfly");
}

TEST(AllReduceRing, Values) {
  check_all_reduce_values(collectives::all_reduce_ring, "all_reduce_ring", kWorldSizes, kCounts);
}

TEST(AllReduceRing, Traffic) {
  const std::string fn = "all_reduce_ring";
  check_traffic(fn, false, [&](const auto& stats, int p, int, const std::string& what) {
    Matrix msgs = zeros(p);
    for (int r = 0; r < p; ++r) msgs[r][(r + 1) % p] = 2 * static_cast<std::uint64_t>(p - 1);
    expect_pattern(stats, msgs, nullptr, fn, what,
                   "2(p-1) chunk messages, each only to the right neighbour rank+1");
    // Each rank sends 2(p-1) chunks of n/p (rounded down or up): all but two chunks, twice.
    const std::uint64_t small = kTrafficCount / static_cast<std::uint64_t>(p);
    const std::uint64_t large = small + (kTrafficCount % static_cast<std::uint64_t>(p) ? 1 : 0);
    const std::uint64_t lo = 2 * kTrafficCount - 2 * large;
    const std::uint64_t hi = 2 * kTrafficCount - 2 * small;
    for (int r = 0; r < p; ++r) {
      const auto sent = stats[static_cast<std::size_t>(r)].bytes_sent / sizeof(float);
      EXPECT_TRUE(sent >= lo && sent <= hi)
          << fn << ", " << what << ": rank " << r << " sent " << sent
          << " floats; the ring sends 2(p-1) chunks of about n/p = " << kTrafficCount / p
          << ", i.e. " << hi << " floats at most";
    }
  });
}

TEST(AllReduceRing, SimTime) {
  check_time({"all_reduce_ring", kTimeCount, flat(true), nullptr,
              [](int p, const auto& m) {
                const std::size_t chunk = kTimeCount / static_cast<std::size_t>(p);
                return 2 * (p - 1) * cost(m, chunk) + (p - 1) * reduce_time(m, chunk);
              },
              formula("2(p-1)(alpha + (n/p) beta) + (p-1)(n/p) gamma", kTimeCount),
              "in each step send one chunk and receive another at the same time (isend + recv + "
              "wait), reduce only in the reduce-scatter half"});
}

TEST(AllReduceRing, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("all_reduce_ring");
}

// ---- gather, all-gather, reduce-scatter -----------------------------------------------------

TEST(GatherNaive, Values) {
  check_gather_values(collectives::gather_naive, "gather_naive", kWorldSizes, kCounts, true);
}

TEST(GatherNaive, Traffic) {
  check_pattern(
      "gather_naive", true,
      [](Matrix& msgs, Matrix& bytes, int p, int root) {
        for (int r = 0; r < p; ++r) {
          if (r != root) msgs[r][root] = 1, bytes[r][root] = kBytes;
        }
      },
      "every rank except dst sends its block once, to dst");
}

TEST(GatherNaive, SimTime) {
  check_time({"gather_naive", kBlock, flat(false), one_root([](int p) { return p / 3; }),
              [](int p, const auto& m) { return (p - 1) * cost(m, kBlock); },
              formula("(p-1)(alpha + m beta)", kBlock),
              "dst's incoming link should carry p-1 blocks, nothing else"});
}

TEST(GatherTree, Values) {
  check_gather_values(collectives::gather_tree, "gather_tree", kWorldSizes, kCounts, true);
}

TEST(GatherTree, Traffic) {
  const std::string fn = "gather_tree";
  check_traffic(fn, true, [&](const auto& stats, int p, int root, const std::string& what) {
    const auto rounds = static_cast<std::uint64_t>(collectives::ceil_log2(p));
    for (int r = 0; r < p; ++r) {
      expect_count(stats[static_cast<std::size_t>(r)].messages_sent, r == root ? 0u : 1u, fn, what,
                   "rank " + std::to_string(r) +
                       ": every rank except dst sends its subtree's blocks once, in one message, "
                       "to its parent");
    }
    const auto& d = stats[static_cast<std::size_t>(root)];
    expect_count(
        d.messages_received, rounds, fn, what,
        "dst receives once per round, ceil(log2 p) = " + std::to_string(rounds) + " messages");
    expect_count(d.bytes_received, static_cast<std::uint64_t>(p - 1) * kBytes, fn, what,
                 "dst receives each other rank's block exactly once");
  });
}

TEST(GatherTree, SimTime) {
  check_time({"gather_tree", kBlock, flat(false), one_root([](int p) { return p - 1; }),
              [](int p, const auto& m) {
                return collectives::ceil_log2(p) * m.latency_s +
                       static_cast<double>((p - 1) * kBlock * sizeof(float)) / m.bandwidth_Bps;
              },
              formula("ceil(log2 p) alpha + (p-1) m beta", kBlock),
              "receive from the nearest child first (its subtree is ready first) and send the "
              "whole subtree in one message"});
}

TEST(AllGatherRing, Values) {
  check_all_gather_values(collectives::all_gather_ring, "all_gather_ring", kWorldSizes, kCounts);
}

/// The rings of all-gather and reduce-scatter: p-1 messages of one block, to the right only.
void fill_block_ring(Matrix& msgs, Matrix& bytes, int p, int) {
  for (int r = 0; r < p; ++r) {
    msgs[r][(r + 1) % p] = static_cast<std::uint64_t>(p - 1);
    bytes[r][(r + 1) % p] = static_cast<std::uint64_t>(p - 1) * kBytes;
  }
}

TEST(AllGatherRing, Traffic) {
  check_pattern("all_gather_ring", false, fill_block_ring,
                "p-1 messages of one block each, only to the right neighbour rank+1");
}

TEST(AllGatherRing, SimTime) {
  check_time({"all_gather_ring", kBlock, flat(false), nullptr,
              [](int p, const auto& m) { return (p - 1) * cost(m, kBlock); },
              formula("(p-1)(alpha + m beta)", kBlock),
              "in each step send one block and receive another at the same time (isend + recv "
              "+ wait)"});
}

TEST(ReduceScatterRing, Values) {
  check_reduce_scatter_values(collectives::reduce_scatter_ring, "reduce_scatter_ring", kWorldSizes,
                              kCounts);
}

TEST(ReduceScatterRing, Traffic) {
  check_pattern("reduce_scatter_ring", false, fill_block_ring,
                "p-1 messages of one chunk (out.size() floats) each, only to the right neighbour "
                "rank+1");
}

TEST(ReduceScatterRing, SimTime) {
  check_time(
      {"reduce_scatter_ring", kBlock, flat(true), nullptr,
       [](int p, const auto& m) { return (p - 1) * (cost(m, kBlock) + reduce_time(m, kBlock)); },
       formula("(p-1)(alpha + m beta + m gamma)", kBlock),
       "in each step send and receive at the same time (isend + recv + wait), then reduce "
       "one chunk once"});
}

TEST(ReduceScatterRing, SimTimeWithReductionCostMatchesTheReference) {
  check_time_against_reference("reduce_scatter_ring");
}

}  // namespace
