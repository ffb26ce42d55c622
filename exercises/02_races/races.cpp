// 02_races: see races.hpp for what each function must do.
#include "races.hpp"

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "distlab/todo.hpp"

namespace races {

// ---------------------------------------------------------------------------------------------
// 1. The lost update.

long add_and_subtract_racy(long repeats) {
  // volatile makes the compiler really load and store the value in every iteration (without it,
  // an optimiser turns each loop into a single `value += repeats`, and the race hides). volatile
  // does NOT make the access atomic or synchronised: this is still a data race.
  volatile long value = 0;
  // Both threads wait for the other before starting, so their loops overlap in time (otherwise the
  // first one may be done before the second has even started, and the race hides).
  std::atomic<int> ready{0};
  auto start_together = [&ready] {
    ++ready;
    while (ready.load() < 2) std::this_thread::yield();
  };
  std::thread adder([&] {
    start_together();
    for (long i = 0; i < repeats; ++i) value = value + 1;
  });
  std::thread subtractor([&] {
    start_together();
    for (long i = 0; i < repeats; ++i) value = value - 1;
  });
  adder.join();
  subtractor.join();
  return value;
}

long add_and_subtract_with_mutex(long repeats) {
  long value = 0;
  DISTLAB_TODO("the racy program's two threads (one adds, one subtracts), made correct by a lock "
               "around every update of the shared value (README: Tasks, 1)");
  return value;
}

long add_and_subtract_with_atomic(long repeats) {
  long result = 0;
  DISTLAB_TODO("the racy program's two threads, made correct by making each update one "
               "indivisible read-modify-write (README: Tasks, 2)");
  return result;
}

long add_and_subtract_with_local_sums(long repeats) {
  long value = 0;
  DISTLAB_TODO("the racy program's two threads, made correct by sharing nothing while counting "
               "and combining once after both finish (README: Tasks, 3)");
  return value;
}

// ---------------------------------------------------------------------------------------------
// 2. Lock ordering.

void transfer_deadlock_prone(Account& from, Account& to, long amount) {
  if (&from == &to) return;
  std::lock_guard<std::mutex> lock_from(from.mutex);
  std::lock_guard<std::mutex> lock_to(
      to.mutex);  // another thread may hold this one, waiting for ours
  from.balance -= amount;
  to.balance += amount;
}

void transfer(Account& from, Account& to, long amount) {
  if (&from == &to) return;
  DISTLAB_TODO("move amount from one account to the other while holding both accounts' locks, "
               "taken so that two opposite transfers can never wait for each other (README: "
               "Tasks, 4)");
}

// ---------------------------------------------------------------------------------------------
// 3. Random number streams.

bool shared_across_ranks(Purpose purpose) {
  return purpose == Purpose::ModelInit || purpose == Purpose::Shuffle;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

double to_unit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

std::uint64_t stream_seed(std::uint64_t seed, int rank, Purpose purpose) {
  if (rank < 0)
    throw std::invalid_argument("stream_seed: rank must be >= 0, got " + std::to_string(rank));
  std::uint64_t h = 0;
  DISTLAB_TODO("derive a 64-bit seed from (seed, purpose) and, for purposes that differ per rank, "
               "the rank, so that no two distinct streams collide (races.hpp documents the "
               "mixing; README: Tasks, 5)");
  return h;
}

std::mt19937_64 make_stream(std::uint64_t seed, int rank, Purpose purpose) {
  return std::mt19937_64(stream_seed(seed, rank, purpose));
}

std::vector<double> init_model(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<double> w(n);
  DISTLAB_TODO("fill w from this rank's model-initialisation stream, by the formula in races.hpp "
               "(README: Tasks, 5)");
  return w;
}

std::vector<double> draw_data(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<double> x(n);
  DISTLAB_TODO("fill x from this rank's data stream, by the formula in races.hpp (README: Tasks, "
               "5)");
  return x;
}

std::vector<std::size_t> shuffle_order(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<std::size_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = i;
  DISTLAB_TODO("return a permutation of 0..n-1 shuffled with the shuffle stream, by the "
               "Fisher-Yates order that races.hpp documents (README: Tasks, 5)");
  return p;
}

}  // namespace races
