// Hidden tests of 02_races: more repetitions, more callers, a three-account cycle, edge cases of
// the random streams. Also run under ThreadSanitizer by the grader.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "../../tests/02_races/child_process.hpp"
#include "races.hpp"

using distlab::testing::FirstError;
using distlab::testing::run_in_child;

TEST(HiddenLostUpdate, ManyRunsOfAllThreeFixes) {
  for (int run = 0; run < 20; ++run) {
    ASSERT_EQ(races::add_and_subtract_with_mutex(20000), 0) << "mutex, run " << run;
    ASSERT_EQ(races::add_and_subtract_with_atomic(100000), 0) << "atomic, run " << run;
    ASSERT_EQ(races::add_and_subtract_with_local_sums(100000), 0) << "local sums, run " << run;
  }
  EXPECT_EQ(races::add_and_subtract_with_atomic(2'000'000), 0);
  EXPECT_EQ(races::add_and_subtract_with_local_sums(5'000'000), 0);
}

TEST(HiddenLostUpdate, EightConcurrentCallers) {
  std::vector<long> results(8, -1);
  std::vector<std::thread> callers;
  FirstError errors;
  for (int c = 0; c < 8; ++c) {
    callers.emplace_back(errors.wrap([&, c] {
      long r = 0;
      for (int k = 0; k < 3; ++k) {
        if (c % 3 == 0) r += races::add_and_subtract_with_mutex(5000);
        if (c % 3 == 1) r += races::add_and_subtract_with_atomic(20000);
        if (c % 3 == 2) r += races::add_and_subtract_with_local_sums(20000);
      }
      results[static_cast<std::size_t>(c)] = r;
    }));
  }
  for (auto& t : callers) t.join();
  ASSERT_EQ(errors.message(), "") << "a caller thread caught an exception";
  for (int c = 0; c < 8; ++c) EXPECT_EQ(results[static_cast<std::size_t>(c)], 0) << "caller " << c;
}

namespace {

/// Three threads move money around the cycle a -> b -> c -> a for `seconds`: locking "from, then
/// to" deadlocks here too (each thread holds one account the next one needs).
std::string cycle_transfers(double seconds) {
  races::Account a(10, 500), b(20, 500), c(30, 500);
  races::Account* acc[3] = {&a, &b, &c};
  std::atomic<int> ready{0};
  std::atomic<bool> stop{false};
  long rounds[3] = {0, 0, 0};
  std::vector<std::thread> ts;
  FirstError errors;
  for (int i = 0; i < 3; ++i) {
    ts.emplace_back(errors.wrap([&, i] {
      ++ready;
      while (ready.load() < 4) std::this_thread::yield();
      races::Account& from = *acc[i];
      races::Account& to = *acc[(i + 1) % 3];
      for (; rounds[i] < 5000 || !stop.load(std::memory_order_relaxed); ++rounds[i]) {
        races::transfer(from, to, i + 1);
      }
    }));
  }
  ++ready;
  while (ready.load() < 4) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  if (!errors.message().empty()) return "transfer threw: " + errors.message();
  std::string err;
  for (int i = 0; i < 3; ++i) {
    const long want = 500 - (i + 1) * rounds[i] + ((i + 2) % 3 + 1) * rounds[(i + 2) % 3];
    if (acc[i]->balance != want) {
      err += "account " + std::to_string(acc[i]->id) + " holds " + std::to_string(acc[i]->balance) +
             ", expected " + std::to_string(want) + ". ";
    }
  }
  return err;
}

}  // namespace

TEST(HiddenLockOrdering, ThreeAccountCycleNeverDeadlocks) {
  const auto r = run_in_child([] { return cycle_transfers(0.5); }, 10.0);
  ASSERT_TRUE(r.finished) << "deadlock: three threads transferring around a -> b -> c -> a did not "
                             "finish within 10 s: each holds one lock and waits for the next; take "
                             "the two locks in a way that no cycle of waiting threads can form";
  EXPECT_EQ(r.message, "ok") << (r.message.empty()
                                     ? "the child process stopped without a result: it crashed, or "
                                       "ThreadSanitizer stopped it (report above)"
                                     : r.message);
}

TEST(HiddenLockOrdering, AnyAmountMovesWhole) {
  // races.hpp: "Moves `amount` from `from` to `to` (any amount: negative, zero or beyond an int's
  // range; balances may go negative)". One thread, so nothing else can explain a wrong balance.
  const auto r = run_in_child(
      [] {
        races::Account a(1, 10), b(2, -10);
        const long big = 5'000'000'123L;  // beyond an int
        std::string bad;
        const auto expect = [&](long want_a, long want_b, const std::string& what) {
          if (bad.empty() && (a.balance != want_a || b.balance != want_b))
            bad = "after " + what + ": balances " + std::to_string(a.balance) + " and " +
                  std::to_string(b.balance) + ", expected " + std::to_string(want_a) + " and " +
                  std::to_string(want_b);
        };
        races::transfer(a, b, big);
        expect(10 - big, -10 + big, "transfer(a, b, 5000000123)");
        races::transfer(a, b, -7);
        expect(10 - big + 7, -10 + big - 7, "transfer(a, b, -7)");
        races::transfer(b, a, 0);
        expect(10 - big + 7, -10 + big - 7, "transfer(b, a, 0)");
        races::transfer(b, a, big - 7);
        expect(10, -10, "transfer(b, a, 4999999116)");
        return bad;
      },
      10.0);
  ASSERT_TRUE(r.finished) << "transfer did not return within 10 s";
  EXPECT_EQ(r.message, "ok") << (r.message.empty() ? "the child crashed" : r.message);
}

TEST(HiddenLockOrdering, TransferToItselfWhileOthersTransfer) {
  const auto r = run_in_child(
      [] {
        races::Account a(1, 100), b(2, 100);
        FirstError errors;
        std::thread t1(errors.wrap([&] {
          for (int i = 0; i < 20000; ++i) races::transfer(a, a, 5);
        }));
        std::thread t2(errors.wrap([&] {
          for (int i = 0; i < 20000; ++i) races::transfer(a, b, 1);
        }));
        t1.join();
        t2.join();
        if (!errors.message().empty()) return "transfer threw: " + errors.message();
        return (a.balance == 100 - 20000 && b.balance == 100 + 20000)
                   ? std::string()
                   : "balances " + std::to_string(a.balance) + " and " + std::to_string(b.balance) +
                         ", expected " + std::to_string(100 - 20000) + " and " +
                         std::to_string(100 + 20000);
      },
      10.0);
  ASSERT_TRUE(r.finished)
      << "transfer(a, a, ...) must not lock the same mutex twice (self-deadlock)";
  EXPECT_EQ(r.message, "ok")
      << "an empty message: the child crashed, or ThreadSanitizer stopped it";
}

TEST(HiddenRandomStreams, ManyRanksAllDistinctAndBadRankRejected) {
  std::unordered_set<std::uint64_t> seeds;
  for (int rank = 0; rank < 100000; ++rank)
    seeds.insert(races::stream_seed(5, rank, races::Purpose::Data));
  EXPECT_EQ(seeds.size(), 100000u) << "data stream seeds of ranks 0..99999 must all differ";
  EXPECT_THROW(races::stream_seed(5, -1, races::Purpose::Data), std::invalid_argument);
  EXPECT_EQ(races::stream_seed(5, 70000, races::Purpose::ModelInit),
            races::stream_seed(5, 0, races::Purpose::ModelInit));
}

TEST(HiddenRandomStreams, DistinctInputsGiveUnrelatedSeeds) {
  // races.hpp: the inputs are mixed with splitmix64, "so that distinct inputs give unrelated
  // seeds". Two unrelated 64-bit seeds differ in about half their bits (popcount of the XOR ~
  // Binomial(64, 1/2): mean 32, standard deviation 4); seeds that differ in only a few bits (the
  // rank or the purpose xored in after the last mix) are related. Every pair of the 1680 distinct
  // streams of seeds 0..39 x ranks 0..39 x the three purposes (shared purposes: one stream per
  // seed) must differ in 4..60 bits -- a pair of unrelated seeds falls outside with probability
  // 4.7e-15, so a good mix fails one of the 1.4 million pairs with odds below 1 in 100 million,
  // while a rank xored in after the last mix leaves ranks 0 and 1 one bit apart -- and no two may
  // collide. The inputs are fixed, so the outcome for a given stream_seed is too.
  struct Stream {
    std::uint64_t seed;
    int rank;
    races::Purpose purpose;
    std::uint64_t value;
  };
  std::vector<Stream> streams;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    for (races::Purpose purpose :
         {races::Purpose::ModelInit, races::Purpose::Shuffle, races::Purpose::Data}) {
      const int ranks = races::shared_across_ranks(purpose) ? 1 : 40;  // shared: one stream
      for (int rank = 0; rank < ranks; ++rank)
        streams.push_back({seed, rank, purpose, races::stream_seed(seed, rank, purpose)});
    }
  }
  std::unordered_set<std::uint64_t> values;
  for (const Stream& s : streams) values.insert(s.value);
  EXPECT_EQ(values.size(), streams.size()) << "two distinct (seed, rank, purpose) streams collide";
  int reported = 0;
  for (std::size_t a = 0; a < streams.size() && reported < 5; ++a) {
    for (std::size_t b = a + 1; b < streams.size() && reported < 5; ++b) {
      const int bits = std::popcount(streams[a].value ^ streams[b].value);
      if (bits < 4 || bits > 60) {
        ++reported;
        ADD_FAILURE() << "stream_seed(" << streams[a].seed << ", " << streams[a].rank << ", "
                      << static_cast<int>(streams[a].purpose) << ") and stream_seed("
                      << streams[b].seed << ", " << streams[b].rank << ", "
                      << static_cast<int>(streams[b].purpose) << ") differ in " << bits
                      << " of 64 bits (unrelated seeds differ in about 32): mix every input with "
                         "splitmix64, the last one included";
      }
    }
  }
}

TEST(HiddenRandomStreams, EmptyAndLargeDraws) {
  EXPECT_TRUE(races::init_model(0, 1, 0).empty());
  EXPECT_TRUE(races::draw_data(0, 1, 3).empty());
  const auto d = races::draw_data(100000, 1, 3);
  double mean = 0;
  for (double x : d) {
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    mean += x / static_cast<double>(d.size());
  }
  EXPECT_NEAR(mean, 0.5, 0.01) << "to_unit values of a good generator average 1/2";
  const auto w = races::init_model(100000, 1, 3);
  for (double x : w) {
    ASSERT_GE(x, -0.1);
    ASSERT_LT(x, 0.1);
  }
}

TEST(HiddenRandomStreams, InitModelRejectsANegativeRank) {
  // races.hpp: init_model draws from make_stream(seed, rank, Purpose::ModelInit), and "A negative
  // rank throws std::invalid_argument." The weights are the same on every valid rank, so a
  // generator built for rank 0 in place of `rank` gives the right values but never checks it.
  for (int rank : {-1, -7}) {
    EXPECT_THROW(races::init_model(8, 2024, rank), std::invalid_argument) << "rank " << rank;
  }
  EXPECT_EQ(races::init_model(8, 2024, 5), races::init_model(8, 2024, 0)) << "rank 5 is valid";
}

TEST(HiddenRandomStreams, ShuffleDependsOnSeedOnly) {
  const auto p = races::shuffle_order(1000, 3, 0);
  EXPECT_NE(races::shuffle_order(1000, 4, 0), p);
  EXPECT_EQ(races::shuffle_order(1000, 3, 12345), p);
}

TEST(HiddenRandomStreams, SixteenRanksAsThreadsRepeatedly) {
  std::vector<std::vector<double>> ref;
  for (int r = 0; r < 16; ++r) ref.push_back(races::draw_data(128, 77, r));
  for (int round = 0; round < 10; ++round) {
    std::vector<std::vector<double>> got(16);
    std::vector<std::thread> ts;
    FirstError errors;
    for (int r = 0; r < 16; ++r) {
      ts.emplace_back(errors.wrap([&, r] {
        for (int k = 0; k < 3; ++k) got[static_cast<std::size_t>(r)] = races::draw_data(128, 77, r);
      }));
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(errors.message(), "") << "a rank thread caught an exception";
    ASSERT_EQ(got, ref) << "round " << round;
  }
}

TEST(HiddenRandomStreams, SixteenRanksShuffleAtOnceRepeatedly) {
  // Every rank shuffles the same (n, seed) at the same time, several times: no hidden state shared
  // between calls (ThreadSanitizer reports a cache or a generator kept in statics), and each call
  // returns the documented permutation.
  const std::vector<std::size_t> ref = races::shuffle_order(300, 77, 0);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::vector<std::size_t>> got(16);
    std::vector<std::thread> ts;
    FirstError errors;
    for (int r = 0; r < 16; ++r) {
      ts.emplace_back(errors.wrap([&, r] {
        for (int k = 0; k < 3; ++k)
          got[static_cast<std::size_t>(r)] =
              races::shuffle_order(300, 77 + static_cast<std::uint64_t>(k % 2), r);
      }));
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(errors.message(), "") << "a rank thread caught an exception";
    for (int r = 0; r < 16; ++r)
      ASSERT_EQ(got[static_cast<std::size_t>(r)], ref) << "round " << round << ", rank " << r;
  }
}

TEST(HiddenRandomStreams, ShuffleIsTheDocumentedFisherYatesForManySizesAndSeeds) {
  // races.hpp: start from p = 0, 1, ..., n-1, then for i = n-1 down to 1: j = gen() % (i + 1),
  // swap(p[i], p[j]). Many sizes and seeds, so that every draw (the last one, at i = 1, too)
  // changes the result for some of them.
  for (std::size_t n : {2u, 3u, 5u, 17u, 64u}) {
    for (std::uint64_t seed = 0; seed < 24; ++seed) {
      std::vector<std::size_t> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = i;
      auto gen = races::make_stream(seed, 0, races::Purpose::Shuffle);
      for (std::size_t i = n; i-- > 1;) std::swap(want[i], want[gen() % (i + 1)]);
      ASSERT_EQ(races::shuffle_order(n, seed, 3), want)
          << "n = " << n << ", seed = " << seed
          << ": not the Fisher-Yates order races.hpp documents (i from n-1 down to 1)";
    }
  }
}

TEST(HiddenRandomStreams, InitModelRejectsANegativeRankRightAfterAValidCall) {
  // races.hpp: "A negative rank throws std::invalid_argument." -- on every call, also right after
  // a valid call with the same (n, seed): weights remembered from an earlier call must not answer
  // a call that has to throw.
  for (int rank : {-1, -7}) {
    const std::vector<double> valid = races::init_model(8, 2024, 0);
    EXPECT_EQ(valid.size(), 8u);
    EXPECT_THROW(races::init_model(8, 2024, rank), std::invalid_argument)
        << "rank " << rank << " right after init_model(8, 2024, 0)";
  }
}

TEST(HiddenRandomStreams, InitModelRejectsANegativeRankForEveryN) {
  // races.hpp: "A negative rank throws std::invalid_argument." -- for every n: n = 0 draws no
  // weight, and still the rank is checked.
  for (std::size_t n : {0u, 1u, 8u}) {
    for (int rank : {-1, -7}) {
      EXPECT_THROW(races::init_model(n, 2024, rank), std::invalid_argument)
          << "n = " << n << ", rank " << rank;
    }
  }
  EXPECT_TRUE(races::init_model(0, 2024, 0).empty()) << "n = 0, rank 0 is valid";
  EXPECT_EQ(races::init_model(1, 2024, 3).size(), 1u) << "n = 1, rank 3 is valid";
}

TEST(HiddenRandomStreams, ShuffleRejectsANegativeRankForEveryN) {
  // races.hpp: "A negative rank throws std::invalid_argument, whatever n (0 and 1 included)."
  // n = 0 and n = 1 need no draw, and still the rank is checked.
  for (std::size_t n : {0u, 1u, 2u, 10u}) {
    EXPECT_THROW(races::shuffle_order(n, 5, -1), std::invalid_argument) << "n = " << n;
  }
  EXPECT_TRUE(races::shuffle_order(0, 5, 0).empty());
  EXPECT_EQ(races::shuffle_order(1, 5, 2), std::vector<std::size_t>{0});
}

TEST(HiddenRandomStreams, SeedsThatDifferOnlyInTheHighBitsGiveDistinctStreams) {
  // races.hpp: "different seeds" give different values, "no two distinct (seed, rank, purpose)
  // streams may collide": the seed is a 64-bit value, so seeds that differ only above bit 31
  // (42, 42 + 2^32, 42 + 2^63, ...) are distinct seeds too.
  const std::uint64_t base = 42;
  const std::vector<std::uint64_t> seeds = {
      base, base + (std::uint64_t{1} << 32), base + (std::uint64_t{1} << 40),
      base + (std::uint64_t{1} << 63), base | 0xffffffff00000000ULL};
  std::unordered_set<std::uint64_t> values;
  std::size_t streams = 0;
  for (std::uint64_t seed : seeds) {
    for (races::Purpose purpose :
         {races::Purpose::ModelInit, races::Purpose::Shuffle, races::Purpose::Data}) {
      const int ranks = races::shared_across_ranks(purpose) ? 1 : 4;
      for (int rank = 0; rank < ranks; ++rank) {
        values.insert(races::stream_seed(seed, rank, purpose));
        ++streams;
      }
    }
  }
  EXPECT_EQ(values.size(), streams)
      << "seeds 42, 42 + 2^32, 42 + 2^40, 42 + 2^63 and 42 with the top 32 bits set: two distinct "
         "streams collide (is the seed cut to 32 bits?)";
  EXPECT_NE(races::init_model(16, base, 0),
            races::init_model(16, base + (std::uint64_t{1} << 32), 0))
      << "init_model with seeds 42 and 42 + 2^32 gives the same weights";
}
