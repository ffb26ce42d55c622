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
  DISTLAB_TODO("two std::threads; each update of value happens while holding one std::mutex; join both");
  return value;
}

long add_and_subtract_with_atomic(long repeats) {
  long result = 0;
  DISTLAB_TODO("a std::atomic<long> updated with fetch_add / fetch_sub by the two threads; after join, result = its load()");
  return result;
}

long add_and_subtract_with_local_sums(long repeats) {
  long value = 0;
  DISTLAB_TODO("each thread counts into its own local variable and stores it in its own slot; after join, value = the sum of the slots");
  return value;
}

// ---------------------------------------------------------------------------------------------
// 2. Lock ordering.

void transfer_deadlock_prone(Account& from, Account& to, long amount) {
  if (&from == &to) return;
  std::lock_guard<std::mutex> lock_from(from.mutex);
  std::lock_guard<std::mutex> lock_to(to.mutex);  // another thread may hold this one, waiting for ours
  from.balance -= amount;
  to.balance += amount;
}

void transfer(Account& from, Account& to, long amount) {
  if (&from == &to) return;
  DISTLAB_TODO("hold both mutexes at once without deadlock (std::scoped_lock, or lock the smaller id first); then move the money");
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
  if (rank < 0) throw std::invalid_argument("stream_seed: rank must be >= 0, got " + std::to_string(rank));
  std::uint64_t h = 0;
  DISTLAB_TODO("mix seed, purpose and (only for purposes not shared across ranks) rank into h with splitmix64, one input at a time");
  return h;
}

std::mt19937_64 make_stream(std::uint64_t seed, int rank, Purpose purpose) {
  return std::mt19937_64(stream_seed(seed, rank, purpose));
}

std::vector<double> init_model(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<double> w(n);
  DISTLAB_TODO("gen = make_stream(seed, rank, Purpose::ModelInit); w[i] = 0.1 * (2 * to_unit(gen()) - 1)");
  return w;
}

std::vector<double> draw_data(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<double> x(n);
  DISTLAB_TODO("gen = make_stream(seed, rank, Purpose::Data); x[i] = to_unit(gen())");
  return x;
}

std::vector<std::size_t> shuffle_order(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<std::size_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = i;
  DISTLAB_TODO("gen = make_stream(seed, rank, Purpose::Shuffle); for i = n-1 down to 1: swap(p[i], p[gen() % (i + 1)])");
  return p;
}

}  // namespace races
