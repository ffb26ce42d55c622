// run_02_races: the lost update, its three fixes, lock ordering and random streams per rank.
//
//   ./distlab run 02_races                      (a few seconds)
//   ./distlab run 02_races -- --runs 50 --repeats 10000000
//
// Each section calls your functions; one that still throws "not implemented" is reported as such
// and the program goes on with the next section.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "distlab/todo.hpp"
#include "races.hpp"

namespace {

using distlab::section;

/// Runs `rounds` opposite transfers with `fn` in a forked child; true when it finished within
/// limit_s (false: the child was deadlocked and has been killed).
bool opposite_transfers_finish(void (*fn)(races::Account&, races::Account&, long), long rounds,
                               double limit_s, double* seconds) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    races::Account a(1, 1000), b(2, 1000);
    std::thread ab([&] {
      for (long i = 0; i < rounds; ++i) fn(a, b, 1);
    });
    std::thread ba([&] {
      for (long i = 0; i < rounds; ++i) fn(b, a, 1);
    });
    ab.join();
    ba.join();
    _exit(a.balance + b.balance == 2000 ? 0 : 1);
  }
  distlab::Stopwatch sw;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (sw.elapsed_s() > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      *seconds = sw.elapsed_s();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  *seconds = sw.elapsed_s();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("the transfers finished but did not conserve the total");
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"02_races: lost updates, mutex/atomic/local sums, lock ordering, random streams"};
  int runs = 20;
  long repeats = 1'000'000;
  long transfers = 200'000;
  double deadlock_limit_s = 2.0;
  std::uint64_t seed = 42;
  app.add_option("--runs", runs, "runs of the racy counter")->check(CLI::Range(1, 10000));
  app.add_option("--repeats", repeats, "additions (and subtractions) per run")
      ->check(CLI::Range(1L, 1L << 40));
  app.add_option("--transfers", transfers, "transfers in each direction")
      ->check(CLI::Range(1L, 1L << 40));
  app.add_option("--deadlock-limit", deadlock_limit_s, "seconds before a deadlocked demo is killed")
      ->check(CLI::Range(0.1, 600.0));
  app.add_option("--seed", seed, "seed of the random-stream demo");
  CLI11_PARSE(app, argc, argv);

  section("1. the lost update: one thread adds, one subtracts, no synchronisation", [&] {
    std::vector<long> values;
    for (int r = 0; r < runs; ++r) values.push_back(races::add_and_subtract_racy(repeats));
    std::printf("  %d runs of %ld additions and %ld subtractions; the right answer is 0\n", runs,
                repeats, repeats);
    std::printf("  final values:");
    for (long v : values) std::printf(" %ld", v);
    const auto [mn, mx] = std::minmax_element(values.begin(), values.end());
    const long zeros = std::count(values.begin(), values.end(), 0L);
    double mean = 0;
    for (long v : values) mean += static_cast<double>(v) / runs;
    std::printf("\n  min %ld   max %ld   mean %.0f   runs that gave 0: %ld of %d\n", *mn, *mx, mean,
                zeros, runs);
    std::printf(
        "  (on one core the threads rarely interleave mid-update, so the spread is smaller)\n");
  });

  section("2. three fixes", [&] {
    std::printf("  %-34s %12s %12s %16s\n", "version", "result", "time [ms]", "ns per update");
    const struct {
      const char* name;
      long (*fn)(long);
    } versions[] = {
        {"racy (given, wrong)", races::add_and_subtract_racy},
        {"with_mutex", races::add_and_subtract_with_mutex},
        {"with_atomic", races::add_and_subtract_with_atomic},
        {"with_local_sums", races::add_and_subtract_with_local_sums},
    };
    for (const auto& v : versions) {
      try {
        distlab::Stopwatch sw;
        const long result = v.fn(repeats);
        const double t = sw.elapsed_s();
        std::printf("  %-34s %12ld %12.2f %16.2f\n", v.name, result, t * 1e3,
                    t * 1e9 / (2.0 * repeats));
      } catch (const distlab::NotImplemented&) {
        std::printf("  %-34s %12s\n", v.name, "not implemented");
      }
    }
    std::printf(
        "  A mutex serialises every update (and the cache line bounces between cores); an\n"
        "  atomic is one locked instruction; local sums share nothing until the end.\n");
  });

  section("3. lock ordering: two threads transfer a->b and b->a", [&] {
    double t = 0;
    const bool naive_ok =
        opposite_transfers_finish(races::transfer_deadlock_prone, transfers, deadlock_limit_s, &t);
    std::printf("  %-28s %s after %.2f s\n", "lock from, then to (given)",
                naive_ok ? "finished (lucky this time)" : "DEADLOCKED, killed", t);
    // Call the student's version once in this process first, so "not implemented" shows up here.
    races::Account x(1, 0), y(2, 0);
    races::transfer(x, y, 1);
    const bool ok = opposite_transfers_finish(races::transfer, transfers, 30.0, &t);
    std::printf("  %-28s %s after %.2f s, total conserved\n", "transfer (yours)",
                ok ? "finished" : "DEADLOCKED, killed", t);
  });

  section("4. random number streams per rank", [&] {
    const int ranks = 4;
    std::printf("  seed %llu; first values of each stream\n",
                static_cast<unsigned long long>(seed));
    std::printf("  %5s %32s %32s %20s\n", "rank", "init_model (same on all)",
                "draw_data (per rank)", "shuffle_order (same)");
    for (int r = 0; r < ranks; ++r) {
      const auto w = races::init_model(3, seed, r);
      const auto d = races::draw_data(3, seed, r);
      const auto p = races::shuffle_order(10, seed, r);
      std::printf("  %5d %10.6f %10.6f %10.6f %10.6f %10.6f %10.6f   %zu %zu %zu %zu %zu\n", r,
                  w[0], w[1], w[2], d[0], d[1], d[2], p[0], p[1], p[2], p[3], p[4]);
    }
    std::printf(
        "  The wrong way, std::mt19937_64(seed + rank): rank 1 of seed %llu and rank 0 of seed "
        "%llu\n",
        static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed + 1));
    std::mt19937_64 r1(seed + 1), r0(seed + 1);
    std::printf(
        "  draw %llu and %llu: the same stream, so two \"independent\" runs share their data.\n",
        static_cast<unsigned long long>(r1()), static_cast<unsigned long long>(r0()));
    std::printf(
        "  stream_seed: rank 1 of seed %llu -> %016llx, rank 0 of seed %llu -> %016llx\n",
        static_cast<unsigned long long>(seed),
        static_cast<unsigned long long>(races::stream_seed(seed, 1, races::Purpose::Data)),
        static_cast<unsigned long long>(seed + 1),
        static_cast<unsigned long long>(races::stream_seed(seed + 1, 0, races::Purpose::Data)));
  });
  return 0;
}
