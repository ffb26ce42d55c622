// bench_collectives: an nccl-tests-style table for the built-in collectives of the threads
// backend, plus an 8-byte point-to-point latency line, and (with --mpi) Open MPI's
// MPI_Allreduce measured by bench_mpi_allreduce in the same run, side by side.
//
//   bench_collectives --world-sizes 2,4,8 --sizes 4M --ops all_reduce --mpi
//   bench_collectives --min-bytes 1K --max-bytes 4M --iters 20 --csv out.csv
//
// Timing: each iteration starts after a barrier; every rank times its own call; the iteration's
// time is the slowest rank's; the table shows the median over iterations. algbw = size / time,
// busbw = algbw x the nccl-tests factor (all_reduce 2(n-1)/n, all_gather/reduce_scatter/gather/
// scatter (n-1)/n, broadcast/reduce 1). sim(us) is the simulated alpha-beta time of one call on
// the default network model.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "bench_common.hpp"
#include "dist/dist.hpp"

namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kAllOps = {"all_reduce",     "broadcast", "reduce", "all_gather",
                                          "reduce_scatter", "gather",    "scatter"};

bench::Row run_collective(const std::string& op, int p, std::uint64_t bytes, int iters,
                          int warmup) {
  const std::uint64_t count = std::max<std::uint64_t>(1, bytes / sizeof(float));
  const auto up = static_cast<std::uint64_t>(p);
  // Elements per rank for the gather family (the "size" is the large buffer, as in nccl-tests).
  const std::uint64_t per = std::max<std::uint64_t>(1, count / up);
  std::vector<double> iter_time(static_cast<std::size_t>(iters), 0.0);
  std::vector<std::vector<double>> rank_time(static_cast<std::size_t>(p),
                                             std::vector<double>(static_cast<std::size_t>(iters)));
  double sim_one = 0;
  dist::LaunchOptions o;
  o.world_size = p;
  o.timeout = std::chrono::milliseconds(120000);
  dist::launch(o, [&] {
    const int r = dist::rank();
    std::vector<float> big(
        op == "all_reduce" || op == "broadcast" || op == "reduce" ? count : per * up, 1.0f);
    std::vector<float> small(per, 1.0f);
    auto call = [&] {
      if (op == "all_reduce") {
        dist::all_reduce(std::span<float>(big));
      } else if (op == "broadcast") {
        dist::broadcast(std::span<float>(big), 0);
      } else if (op == "reduce") {
        dist::reduce(std::span<float>(big), 0);
      } else if (op == "all_gather") {
        dist::all_gather(std::span<const float>(small), std::span<float>(big));
      } else if (op == "reduce_scatter") {
        dist::reduce_scatter(std::span<const float>(big), std::span<float>(small));
      } else if (op == "gather") {
        dist::gather(std::span<const float>(small), std::span<float>(big), 0);
      } else if (op == "scatter") {
        dist::scatter(std::span<const float>(big), std::span<float>(small), 0);
      }
    };
    for (int i = 0; i < warmup; ++i) call();
    for (int i = 0; i < iters; ++i) {
      dist::barrier();
      const double s0 = dist::sim_time();
      const auto t0 = Clock::now();
      call();
      rank_time[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] =
          std::chrono::duration<double>(Clock::now() - t0).count();
      if (r == 0 && i == 0) sim_one = dist::sim_time() - s0;
    }
  });
  for (int i = 0; i < iters; ++i) {
    for (int r = 0; r < p; ++r)
      iter_time[static_cast<std::size_t>(i)] =
          std::max(iter_time[static_cast<std::size_t>(i)],
                   rank_time[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]);
  }
  bench::Row row;
  row.backend = "threads";
  row.op = op;
  row.ranks = p;
  const bool per_rank = !(op == "all_reduce" || op == "broadcast" || op == "reduce");
  row.count = per_rank ? per * up : count;
  row.bytes = row.count * sizeof(float);
  const double t = bench::median(iter_time);
  row.time_us = t * 1e6;
  row.algbw = t > 0 ? static_cast<double>(row.bytes) / t / 1e9 : 0;
  row.busbw = row.algbw * bench::busbw_factor(op, p);
  row.sim_us = sim_one * 1e6;
  return row;
}

// One-way latency of an 8-byte message between 2 ranks (ping-pong / 2), median of `reps` runs.
double p2p_latency_us(int rounds, int reps) {
  std::vector<double> samples;
  for (int rep = 0; rep < reps; ++rep) {
    double secs = 0;
    dist::launch(2, [&] {
      std::vector<double> x(1, 0.0);
      const int r = dist::rank();
      auto ping_pong = [&](int n) {
        for (int i = 0; i < n; ++i) {
          if (r == 0) {
            dist::send(std::span<const double>(x), 1);
            dist::recv(std::span<double>(x), 1);
          } else {
            dist::recv(std::span<double>(x), 0);
            dist::send(std::span<const double>(x), 0);
          }
        }
      };
      ping_pong(100);  // warm-up
      const auto t0 = Clock::now();
      ping_pong(rounds);
      if (r == 0) secs = std::chrono::duration<double>(Clock::now() - t0).count();
    });
    samples.push_back(secs / rounds / 2 * 1e6);
  }
  return bench::median(samples);
}

std::string default_mpi_bench(const char* argv0) {
  std::error_code ec;
  auto self = std::filesystem::canonical("/proc/self/exe", ec);
  if (ec) self = std::filesystem::path(argv0);
  auto candidate = self.parent_path() / "bench_mpi_allreduce";
  return std::filesystem::exists(candidate) ? candidate.string() : "";
}

// Runs bench_mpi_allreduce under mpirun and parses its CSV rows.
std::vector<bench::Row> run_mpi(const std::string& mpirun, const std::string& program, int p,
                                const std::vector<std::uint64_t>& sizes, int iters, int warmup) {
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  std::ostringstream cmd;
  cmd << mpirun << " -np " << p << " --oversubscribe " << program << " --iters " << iters
      << " --warmup " << warmup << " --csv - --sizes";
  for (auto b : sizes) cmd << " " << b;
  cmd << " 2>&1";
  std::vector<bench::Row> rows;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.str().c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run: " + cmd.str());
  char line[1024];
  std::string output;
  while (std::fgets(line, sizeof line, pipe.get())) {
    output += line;
    std::string s(line);
    if (s.rfind("mpi,", 0) != 0) continue;
    std::stringstream ss(s);
    std::string field;
    std::vector<std::string> f;
    while (std::getline(ss, field, ',')) f.push_back(field);
    if (f.size() < 9) continue;
    bench::Row r;
    r.backend = f[0];
    r.op = f[1];
    r.ranks = std::stoi(f[2]);
    r.bytes = std::stoull(f[3]);
    r.count = std::stoull(f[4]);
    r.time_us = std::stod(f[5]);
    r.algbw = std::stod(f[6]);
    r.busbw = std::stod(f[7]);
    r.sim_us = -1;
    rows.push_back(r);
  }
  if (rows.empty()) {
    throw std::runtime_error("the Open MPI benchmark printed no results; command: " + cmd.str() +
                             "\n" + output);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nccl-tests-style table for the built-in collectives of the threads backend"};
  std::vector<int> world_sizes{2, 4, 8};
  std::vector<std::string> sizes;
  std::string min_bytes = "1K", max_bytes = "4M", csv_path;
  std::uint64_t factor = 4;
  std::vector<std::string> ops{"all_reduce"};
  int iters = 20, warmup = 3;
  bool no_latency = false, with_mpi = false;
  std::string mpi_program, mpirun = "mpirun";
  app.add_option("--world-sizes,-n", world_sizes, "comma-separated world sizes")->delimiter(',');
  app.add_option("--sizes", sizes, "explicit sizes in bytes (K/M/G suffixes), comma-separated")
      ->delimiter(',');
  app.add_option("--min-bytes,-b", min_bytes, "smallest size (when --sizes is not given)");
  app.add_option("--max-bytes,-e", max_bytes, "largest size (when --sizes is not given)");
  app.add_option("--step-factor,-f", factor, "multiply the size by this between rows");
  app.add_option("--ops", ops,
                 "comma-separated: all_reduce broadcast reduce all_gather reduce_scatter gather "
                 "scatter, or all")
      ->delimiter(',');
  app.add_option("--iters", iters, "timed iterations per row (median reported)");
  app.add_option("--warmup", warmup, "untimed iterations per row");
  app.add_option("--csv", csv_path, "also write the rows as CSV to this file ('-' = stdout)");
  app.add_flag("--no-latency", no_latency, "skip the point-to-point latency line");
  app.add_flag("--mpi", with_mpi,
               "also run Open MPI's MPI_Allreduce (bench_mpi_allreduce under mpirun) side by side");
  app.add_option("--mpi-bench", mpi_program,
                 "path of bench_mpi_allreduce (default: next to this program)");
  app.add_option("--mpirun", mpirun, "the mpirun command");
  CLI11_PARSE(app, argc, argv);

  try {
    if (ops.size() == 1 && ops[0] == "all") ops = kAllOps;
    for (const auto& op : ops) {
      if (std::find(kAllOps.begin(), kAllOps.end(), op) == kAllOps.end()) {
        throw std::invalid_argument("unknown op '" + op +
                                    "'; choose from all_reduce, broadcast, reduce, all_gather, "
                                    "reduce_scatter, gather, scatter or all");
      }
    }
    if (iters < 1) throw std::invalid_argument("--iters must be at least 1");
    const auto byte_sizes = bench::size_list(sizes, min_bytes, max_bytes, factor);
    if (with_mpi && mpi_program.empty()) mpi_program = default_mpi_bench(argv[0]);
    if (with_mpi && mpi_program.empty()) {
      throw std::runtime_error(
          "--mpi: bench_mpi_allreduce was not built (Open MPI not found at configure time; "
          "Debian: apt-get install libopenmpi-dev openmpi-bin, then rebuild)");
    }
    std::FILE* table = (csv_path == "-") ? stderr : stdout;
    std::vector<bench::Row> rows;
    std::printf(
        "# built-in collectives of the threads backend, float32, median of %d iterations (%d "
        "warm-up), %u hardware threads\n",
        iters, warmup, std::thread::hardware_concurrency());
    bench::print_header(table);
    for (int p : world_sizes) {
      for (const auto& op : ops) {
        for (auto b : byte_sizes) {
          rows.push_back(run_collective(op, p, b, iters, warmup));
          bench::print_row(table, rows.back());
          std::fflush(table);
        }
      }
      if (with_mpi && std::find(ops.begin(), ops.end(), "all_reduce") != ops.end()) {
        for (auto& r : run_mpi(mpirun, mpi_program, p, byte_sizes, iters, warmup)) {
          rows.push_back(r);
          bench::print_row(table, rows.back());
          std::fflush(table);
        }
      }
    }
    if (with_mpi) {
      std::fprintf(table,
                   "\n# all_reduce busbw, threads backend vs Open MPI (same sizes, same run)\n");
      std::fprintf(table, "%5s %12s %14s %14s %8s\n", "ranks", "size(B)", "threads(GB/s)",
                   "mpi(GB/s)", "ratio");
      for (const auto& t : rows) {
        if (t.backend != "threads" || t.op != "all_reduce") continue;
        for (const auto& m : rows) {
          if (m.backend == "mpi" && m.ranks == t.ranks && m.bytes == t.bytes) {
            std::fprintf(table, "%5d %12llu %14.3f %14.3f %7.2fx\n", t.ranks,
                         static_cast<unsigned long long>(t.bytes), t.busbw, m.busbw,
                         m.busbw > 0 ? t.busbw / m.busbw : 0.0);
          }
        }
      }
    }
    double latency = -1;
    if (!no_latency) {
      latency = p2p_latency_us(20000, 5);
      std::fprintf(table,
                   "\n# point-to-point: 8-byte send/recv one-way latency between 2 ranks: %.3f us "
                   "(median of 5)\n",
                   latency);
    }
    if (!csv_path.empty()) {
      std::ofstream file;
      std::ostream* out = &std::cout;
      if (csv_path != "-") {
        file.open(csv_path);
        if (!file) throw std::runtime_error("cannot write " + csv_path);
        out = &file;
      }
      *out << bench::csv_header() << "\n";
      for (const auto& r : rows) *out << bench::csv_row(r) << "\n";
      if (latency >= 0) *out << "threads,p2p_latency_8B,2,8,1," << latency << ",0,0,-1\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 1;
  }
  return 0;
}
