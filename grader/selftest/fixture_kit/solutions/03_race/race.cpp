#include "race.hpp"
#include <atomic>
#include <thread>
#include <vector>
#include "todo.hpp"

long count_parallel(long n, int threads) {
  // BEGIN SOLUTION: start `threads` threads that each add n / threads to one shared counter, safely
  std::atomic<long> total{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (long i = 0; i < n / threads; ++i) total.fetch_add(1, std::memory_order_relaxed);
    });
  }
  for (auto& th : pool) th.join();
  return total.load();
  // END SOLUTION
}
