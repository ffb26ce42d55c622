// 02_races: the lost-update race and three ways to fix it, lock ordering, and random number streams
// per rank that do not depend on thread scheduling.
//
// This module is also graded under ThreadSanitizer: a reported data race (or lock-order inversion)
// fails the test even when the final value happens to be right. Build it yourself with
//   cmake --preset tsan && cmake --build --preset tsan --target test_02_races
// Functions marked "TODO" are yours (races.cpp); "given" ones are written for you.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <random>
#include <vector>

namespace races {

// ---------------------------------------------------------------------------------------------
// 1. The lost update.

/// Given (deliberately wrong). One thread adds 1 to a shared value `repeats` times while another
/// subtracts 1 `repeats` times, with no synchronisation. `value += 1` is a load, an add and a
/// store; when the two threads interleave, one of them overwrites the other's update, so the
/// result is rarely 0 and changes from run to run. (It is also a data race, undefined behaviour
/// in C++, and ThreadSanitizer reports it.)
long add_and_subtract_racy(long repeats);

/// TODO. The same two threads, each `value += 1` / `value -= 1` done while holding a std::mutex.
/// Returns the final value (0).
long add_and_subtract_with_mutex(long repeats);

/// TODO. The same with a std::atomic<long> and fetch_add / fetch_sub (or ++ / --). Returns 0.
long add_and_subtract_with_atomic(long repeats);

/// TODO. Each thread accumulates into its own local variable (no sharing in the loop) and the two
/// results are combined once, safely, at the end (after join, or under a lock). Returns 0.
long add_and_subtract_with_local_sums(long repeats);

// ---------------------------------------------------------------------------------------------
// 2. Lock ordering.

/// A bank account: a balance guarded by its own mutex. Read or write `balance` only while
/// holding `mutex`.
struct Account {
  Account(int id_, long balance_) : id(id_), balance(balance_) {}
  Account(const Account&) = delete;
  Account& operator=(const Account&) = delete;

  const int id;  // unique per account (use it to order locks if you like)
  long balance;  // guarded by mutex
  std::mutex mutex;
};

/// Given (deliberately wrong). Locks `from`, then `to`, then moves the money. Two threads that
/// transfer in opposite directions (a -> b and b -> a) can each hold one lock and wait forever for
/// the other: a deadlock. run_02_races shows it in a child process that it kills after a timeout.
void transfer_deadlock_prone(Account& from, Account& to, long amount);

/// TODO. Moves `amount` from `from` to `to` (any amount: negative, zero or beyond an int's range;
/// balances may go negative) holding BOTH locks at once, so no one who holds both locks ever sees
/// the money in neither or both accounts, and
/// without ever deadlocking, whatever other threads transfer in which direction. Lock with
/// std::scoped_lock (it takes several mutexes and avoids deadlock), or always lock the account
/// with the smaller id first. A transfer from an account to itself changes nothing (and must not
/// lock the same mutex twice).
void transfer(Account& from, Account& to, long amount);

// ---------------------------------------------------------------------------------------------
// 3. Random number streams per rank.
//
// A data-parallel job must initialise the model identically on every rank (else the replicas
// diverge from step 0), shuffle the data set in the same order on every rank (else the shards
// overlap), and give every rank a different stream for per-rank randomness (data augmentation,
// dropout). All of it must follow from one seed, and never depend on which thread runs first:
// a stream is a pure function of (seed, rank, purpose), never a shared generator.

enum class Purpose : std::uint64_t {
  ModelInit = 1,  // the same stream on every rank
  Shuffle = 2,    // the same stream on every rank
  Data = 3,       // a different stream on every rank
};

/// Given. True for the purposes whose stream every rank shares (ModelInit, Shuffle).
bool shared_across_ranks(Purpose purpose);

/// Given. The SplitMix64 mixer: a bijection on 64-bit integers that scrambles its input well.
std::uint64_t splitmix64(std::uint64_t x);

/// Given. A double in [0, 1) from the top 53 bits of a 64-bit random number (portable, unlike
/// std::uniform_real_distribution, whose algorithm differs between standard libraries).
double to_unit(std::uint64_t bits);

/// TODO. The seed of the stream for (seed, rank, purpose):
///   * purposes shared across ranks ignore `rank` (every rank gets the same value);
///   * Data gives a different value for every rank;
///   * different purposes give different values, and so do different seeds: no two distinct
///     (seed, rank, purpose) streams may collide -- in particular `seed + rank` is wrong, because
///     rank 1 with seed 42 would replay rank 0 with seed 43.
/// Mix the inputs with splitmix64 (given above), so that distinct inputs give unrelated seeds.
/// rank >= 0 (else std::invalid_argument).
std::uint64_t stream_seed(std::uint64_t seed, int rank, Purpose purpose);

/// Given. A generator for that stream: std::mt19937_64(stream_seed(seed, rank, purpose)).
std::mt19937_64 make_stream(std::uint64_t seed, int rank, Purpose purpose);

/// TODO. Initial weights of a model with n parameters on `rank`: with
/// gen = make_stream(seed, rank, Purpose::ModelInit), w[i] = 0.1 * (2 * to_unit(gen()) - 1)
/// for i = 0, 1, ..., n - 1 in order. Identical on every rank. A negative rank throws
/// std::invalid_argument.
std::vector<double> init_model(std::size_t n, std::uint64_t seed, int rank);

/// TODO. n values of this rank's data noise: with gen = make_stream(seed, rank, Purpose::Data),
/// x[i] = to_unit(gen()) in order. Different on every rank.
std::vector<double> draw_data(std::size_t n, std::uint64_t seed, int rank);

/// TODO. The order in which `rank` visits the n examples: a permutation of 0..n-1, the same on
/// every rank (the Shuffle stream ignores the rank), so every rank can take its own disjoint shard
/// of one permutation. It is the Fisher-Yates shuffle of the identity order,
/// driven by make_stream(seed, rank, Purpose::Shuffle) and walking from the back: each position,
/// from the last down to the second, swaps with a position at or before it, picked by one draw of
/// the stream reduced modulo the number of those positions (no draw for the first position). The
/// tests rebuild exactly that permutation. A negative rank throws std::invalid_argument, whatever
/// n (0 and 1 included).
/// (For a new order every epoch, derive the seed from (seed, epoch) with a hash, not seed + epoch.)
std::vector<std::size_t> shuffle_order(std::size_t n, std::uint64_t seed, int rank);

}  // namespace races
