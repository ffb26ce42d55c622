// MUTANT stream_seed_rank_always_mixed: stream_seed mixes the rank in for every purpose, so model init and shuffle differ between ranks.
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
  // BEGIN SOLUTION: two std::threads; each update of value happens while holding one std::mutex; join both
  std::mutex mutex;
  std::thread adder([&] {
    for (long i = 0; i < repeats; ++i) {
      std::lock_guard<std::mutex> lock(mutex);
      ++value;
    }
  });
  std::thread subtractor([&] {
    for (long i = 0; i < repeats; ++i) {
      std::lock_guard<std::mutex> lock(mutex);
      --value;
    }
  });
  adder.join();
  subtractor.join();
  // END SOLUTION
  return value;
}

long add_and_subtract_with_atomic(long repeats) {
  long result = 0;
  // BEGIN SOLUTION: a std::atomic<long> updated with fetch_add / fetch_sub by the two threads; after join, result = its load()
  std::atomic<long> value{0};
  std::thread adder([&] {
    for (long i = 0; i < repeats; ++i) value.fetch_add(1, std::memory_order_relaxed);
  });
  std::thread subtractor([&] {
    for (long i = 0; i < repeats; ++i) value.fetch_sub(1, std::memory_order_relaxed);
  });
  adder.join();
  subtractor.join();
  result = value.load();
  // END SOLUTION
  return result;
}

long add_and_subtract_with_local_sums(long repeats) {
  long value = 0;
  // BEGIN SOLUTION: each thread counts into its own local variable and stores it in its own slot; after join, value = the sum of the slots
  long from_adder = 0;
  long from_subtractor = 0;
  std::thread adder([&] {
    long local = 0;
    for (long i = 0; i < repeats; ++i) ++local;
    from_adder = local;  // one write to a slot no other thread touches
  });
  std::thread subtractor([&] {
    long local = 0;
    for (long i = 0; i < repeats; ++i) --local;
    from_subtractor = local;
  });
  adder.join();  // join: the slots' writes happen-before these reads
  subtractor.join();
  value = from_adder + from_subtractor;
  // END SOLUTION
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
  // BEGIN SOLUTION: hold both mutexes at once without deadlock (std::scoped_lock, or lock the smaller id first); then move the money
  std::scoped_lock lock(from.mutex, to.mutex);  // std::lock's deadlock-avoidance algorithm
  from.balance -= amount;
  to.balance += amount;
  // END SOLUTION
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
  // BEGIN SOLUTION: mix seed, purpose and (only for purposes not shared across ranks) rank into h with splitmix64, one input at a time
  h = splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(purpose));
  h = splitmix64(h ^ static_cast<std::uint64_t>(rank));
  // END SOLUTION
  return h;
}

std::mt19937_64 make_stream(std::uint64_t seed, int rank, Purpose purpose) {
  return std::mt19937_64(stream_seed(seed, rank, purpose));
}

std::vector<double> init_model(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<double> w(n);
  // BEGIN SOLUTION: gen = make_stream(seed, rank, Purpose::ModelInit); w[i] = 0.1 * (2 * to_unit(gen()) - 1)
  std::mt19937_64 gen = make_stream(seed, rank, Purpose::ModelInit);
  for (double& x : w) x = 0.1 * (2.0 * to_unit(gen()) - 1.0);
  // END SOLUTION
  return w;
}

std::vector<double> draw_data(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<double> x(n);
  // BEGIN SOLUTION: gen = make_stream(seed, rank, Purpose::Data); x[i] = to_unit(gen())
  std::mt19937_64 gen = make_stream(seed, rank, Purpose::Data);
  for (double& v : x) v = to_unit(gen());
  // END SOLUTION
  return x;
}

std::vector<std::size_t> shuffle_order(std::size_t n, std::uint64_t seed, int rank) {
  std::vector<std::size_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = i;
  // BEGIN SOLUTION: gen = make_stream(seed, rank, Purpose::Shuffle); for i = n-1 down to 1: swap(p[i], p[gen() % (i + 1)])
  std::mt19937_64 gen = make_stream(seed, rank, Purpose::Shuffle);
  for (std::size_t i = n; i-- > 1;) {
    const std::size_t j = static_cast<std::size_t>(gen() % (i + 1));
    std::swap(p[i], p[j]);
  }
  // END SOLUTION
  return p;
}

}  // namespace races
