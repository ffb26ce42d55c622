// run_03_collectives: the student's collectives next to the built-ins of dist.
//
// For every collective, algorithm, world size and buffer size it runs one call on the threads
// backend and prints the simulated time (the alpha-beta clock), the wall time, the bytes the
// busiest rank sent, and which algorithm wins where. A function that is still a stub shows as
// "not implemented". --network two-level shows how topology changes the winner; --csv writes the
// rows that `./distlab bench collectives --plot` draws. Under mpirun (--backend mpi) the calls
// run on the job's processes and the table gives their wall time and traffic instead.
//
//   run_03_collectives                          world sizes 2 4 8 16, sizes 4 KiB .. 16 MiB
//   run_03_collectives -n 8 --network two-level --ranks-per-node 4
//   run_03_collectives --full --csv out.csv     every size 4 KiB, 16 KiB, ... 16 MiB; more world sizes
#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "dist/dist.hpp"
#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "distlab/timing.hpp"

namespace {

using dist::ReduceOp;

/// The buffers one call works on (sized by Algorithm::setup for this rank).
struct Buffers {
  std::vector<float> a, b;
};

struct Algorithm {
  std::string collective;  // "broadcast", "all-reduce", ...
  std::string name;        // "naive", "tree", "ring", "butterfly", "built-in"
  // Sizes the buffers for a total of n floats (n divisible by p).
  std::function<void(Buffers&, std::size_t n, int p)> setup;
  std::function<void(Buffers&)> run;
};

std::vector<Algorithm> algorithms() {
  namespace c = collectives;
  auto one = [](Buffers& b, std::size_t n, int) {
    b.a.assign(n, 1.0f);
    b.b.clear();
  };
  auto gather_bufs = [](Buffers& b, std::size_t n, int p) {
    b.a.assign(n / static_cast<std::size_t>(p), 1.0f);
    b.b.assign(n, 0.0f);
  };
  auto scatter_bufs = [](Buffers& b, std::size_t n, int p) {
    b.a.assign(n, 1.0f);
    b.b.assign(n / static_cast<std::size_t>(p), 0.0f);
  };
  auto span_a = [](Buffers& b) { return std::span<float>(b.a); };
  auto in_a = [](Buffers& b) { return std::span<const float>(b.a); };
  auto span_b = [](Buffers& b) { return std::span<float>(b.b); };
  std::vector<Algorithm> v;
  v.push_back({"broadcast", "naive", one, [=](Buffers& b) { c::broadcast_naive(span_a(b), 0); }});
  v.push_back({"broadcast", "tree", one, [=](Buffers& b) { c::broadcast_tree(span_a(b), 0); }});
  v.push_back({"broadcast", "ring", one, [=](Buffers& b) { c::broadcast_ring(span_a(b), 0); }});
  v.push_back({"broadcast", "built-in", one, [=](Buffers& b) { dist::broadcast(span_a(b), 0); }});
  v.push_back(
      {"reduce", "naive", one, [=](Buffers& b) { c::reduce_naive(span_a(b), 0, ReduceOp::Sum); }});
  v.push_back(
      {"reduce", "tree", one, [=](Buffers& b) { c::reduce_tree(span_a(b), 0, ReduceOp::Sum); }});
  v.push_back(
      {"reduce", "built-in", one, [=](Buffers& b) { dist::reduce(span_a(b), 0, ReduceOp::Sum); }});
  v.push_back({"all-reduce", "naive", one,
               [=](Buffers& b) { c::all_reduce_naive(span_a(b), ReduceOp::Sum); }});
  v.push_back({"all-reduce", "butterfly", one,
               [=](Buffers& b) { c::all_reduce_butterfly(span_a(b), ReduceOp::Sum); }});
  v.push_back({"all-reduce", "ring", one,
               [=](Buffers& b) { c::all_reduce_ring(span_a(b), ReduceOp::Sum); }});
  v.push_back({"all-reduce", "built-in", one,
               [=](Buffers& b) { dist::all_reduce(span_a(b), ReduceOp::Sum); }});
  v.push_back({"gather", "naive", gather_bufs,
               [=](Buffers& b) { c::gather_naive(in_a(b), span_b(b), 0); }});
  v.push_back(
      {"gather", "tree", gather_bufs, [=](Buffers& b) { c::gather_tree(in_a(b), span_b(b), 0); }});
  v.push_back({"gather", "built-in", gather_bufs,
               [=](Buffers& b) { dist::gather(in_a(b), span_b(b), 0); }});
  v.push_back({"all-gather", "ring", gather_bufs,
               [=](Buffers& b) { c::all_gather_ring(in_a(b), span_b(b)); }});
  v.push_back({"all-gather", "built-in", gather_bufs,
               [=](Buffers& b) { dist::all_gather(in_a(b), span_b(b)); }});
  v.push_back({"reduce-scatter", "ring", scatter_bufs,
               [=](Buffers& b) { c::reduce_scatter_ring(in_a(b), span_b(b), ReduceOp::Sum); }});
  v.push_back({"reduce-scatter", "built-in", scatter_bufs,
               [=](Buffers& b) { dist::reduce_scatter(in_a(b), span_b(b), ReduceOp::Sum); }});
  return v;
}

/// One measured call.
struct Row {
  std::string collective, algorithm;
  int world_size = 0;
  std::size_t bytes = 0;
  double sim_s = 0, wall_s = 0;
  std::uint64_t sent_per_rank = 0;  // bytes sent by the busiest rank
  std::string status;               // "" = ok, else "not implemented" or "error: ..."
};

/// Floats for a buffer of `bytes`, rounded to a multiple of p (at least p).
std::size_t floats_for(std::size_t bytes, int p) {
  const auto pp = static_cast<std::size_t>(p);
  return std::max<std::size_t>(pp, bytes / sizeof(float) / pp * pp);
}

std::string short_error(const std::string& what) {
  if (what.find("not implemented") != std::string::npos) return "not implemented";
  std::string s = what.substr(0, what.find('\n'));
  if (s.size() > 70) s = s.substr(0, 67) + "...";
  return "error: " + s;
}

/// Runs one algorithm at one world size over every size, in one launch. Each rank measures its
/// own call; the figures reach rank 0 through an all-reduce (max over ranks), so the same code
/// serves the threads backend (every rank in this process) and mpirun (one rank per process:
/// only rank 0's process holds the rows).
std::vector<Row> measure(const Algorithm& alg, dist::LaunchOptions opts, int p,
                         const std::vector<std::size_t>& sizes) {
  opts.world_size = p;
  const std::size_t ns = sizes.size();
  // Per size: simulated seconds, wall seconds, bytes sent (max over ranks).
  std::vector<double> sim(ns), wall(ns), sent(ns);
  std::vector<Row> rows;
  std::string status;
  try {
    dist::launch(opts, [&] {
      Buffers bufs;
      std::vector<double> mine(3 * ns);
      for (std::size_t k = 0; k < ns; ++k) {
        alg.setup(bufs, floats_for(sizes[k], p), p);
        dist::barrier();
        dist::reset_stats();
        const double t0 = dist::sim_time();
        distlab::Stopwatch sw;
        alg.run(bufs);
        mine[k] = dist::sim_time() - t0;
        mine[2 * ns + k] = static_cast<double>(dist::stats().bytes_sent);
        dist::barrier();
        mine[ns + k] = sw.elapsed_s();  // until the slowest rank is done
      }
      dist::all_reduce(std::span<double>(mine), ReduceOp::Max);
      if (dist::rank() == 0) {
        std::copy_n(mine.begin(), ns, sim.begin());
        std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(ns), ns, wall.begin());
        std::copy_n(mine.begin() + static_cast<std::ptrdiff_t>(2 * ns), ns, sent.begin());
      }
    });
  } catch (const std::exception& e) {
    status = short_error(e.what());
  }
  for (std::size_t k = 0; k < ns; ++k) {
    Row r{alg.collective, alg.name, p, floats_for(sizes[k], p) * sizeof(float), 0, 0, 0, status};
    if (status.empty()) {
      r.sim_s = sim[k];
      r.sent_per_rank = static_cast<std::uint64_t>(sent[k]);
      r.wall_s = wall[k];
    }
    rows.push_back(r);
  }
  return rows;
}

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) b /= 1024, ++u;
  char s[32];
  std::snprintf(s, sizeof s, b < 10 && u > 0 ? "%.1f %s" : "%.0f %s", b, units[u]);
  return s;
}

std::string fmt_time(double s) {
  char out[32];
  if (s < 1e-3)
    std::snprintf(out, sizeof out, "%.1f us", s * 1e6);
  else if (s < 1)
    std::snprintf(out, sizeof out, "%.2f ms", s * 1e3);
  else
    std::snprintf(out, sizeof out, "%.2f s", s);
  return out;
}

std::string describe(const dist::NetworkModel& m) {
  std::ostringstream os;
  auto gbs = [](double bps) {
    return std::to_string(static_cast<int>(bps / 1e9 * 100) / 100.0).substr(0, 5);
  };
  if (m.ranks_per_node > 0) {
    os << "two-level network: nodes of " << m.ranks_per_node << " ranks; inside a node alpha "
       << m.latency_s * 1e6 << " us, " << gbs(m.bandwidth_Bps) << " GB/s; between nodes alpha "
       << m.inter_node_latency_s * 1e6 << " us, " << gbs(m.inter_node_bandwidth_Bps) << " GB/s";
  } else {
    os << "flat network: alpha " << m.latency_s * 1e6 << " us, " << gbs(m.bandwidth_Bps)
       << " GB/s per link";
  }
  os << "; reduction " << (m.reduce_Bps > 0 ? gbs(m.reduce_Bps) + " GB/s" : std::string("free"));
  return os.str();
}

/// One collective's table. simulated: rank by the simulated clock (threads backend); otherwise
/// (mpirun) there is no simulated clock and the wall time of this machine ranks them.
void print_collective(const std::string& collective, const std::vector<Row>& rows,
                      const std::vector<int>& world_sizes, const std::vector<std::size_t>& sizes,
                      bool simulated) {
  const auto time_of = [simulated](const Row* r) { return simulated ? r->sim_s : r->wall_s; };
  std::printf("\n== %s ==\n", collective.c_str());
  if (simulated) {
    std::printf("%5s %10s  %-12s %12s %12s %12s\n", "ranks", "size", "algorithm", "sim time",
                "wall time", "sent/rank");
  } else {
    std::printf("%5s %10s  %-12s %12s %12s\n", "ranks", "size", "algorithm", "wall time",
                "sent/rank");
  }
  // winner[(p, size)] = algorithm with the least time
  std::map<std::pair<int, std::size_t>, std::string> winner;
  for (int p : world_sizes) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      std::vector<const Row*> group;
      for (const auto& r : rows) {
        if (r.collective == collective && r.world_size == p &&
            r.bytes == floats_for(sizes[k], p) * 4) {
          group.push_back(&r);
        }
      }
      const Row* best = nullptr;
      for (const Row* r : group) {
        if (r->status.empty() && (best == nullptr || time_of(r) < time_of(best))) best = r;
      }
      // Algorithms within 0.5% of the best tie (e.g. every algorithm at 2 ranks).
      auto ties = [&](const Row* r) {
        return best && r->status.empty() && time_of(r) <= time_of(best) * 1.005;
      };
      if (best) {
        // Name the one student algorithm that ties only with the built-in (same algorithm).
        std::vector<std::string> tied;
        for (const Row* r : group) {
          if (ties(r) && r->algorithm != "built-in") tied.push_back(r->algorithm);
        }
        winner[{p, k}] = tied.size() == 1 ? tied[0] : (tied.empty() ? best->algorithm : "tie");
      }
      for (const Row* r : group) {
        if (r->status.empty()) {
          std::printf("%5d %10s  %-12s %12s", p, fmt_bytes(double(r->bytes)).c_str(),
                      r->algorithm.c_str(), fmt_time(time_of(r)).c_str());
          if (simulated) std::printf(" %12s", fmt_time(r->wall_s).c_str());
          // Under mpirun MPI moves the built-ins' bytes itself, out of dist's counters.
          const bool uncounted = !simulated && r->algorithm == "built-in";
          std::printf(" %12s%s\n", uncounted ? "-" : fmt_bytes(double(r->sent_per_rank)).c_str(),
                      ties(r) ? "  <- fastest" : "");
        } else {
          std::printf("%5d %10s  %-12s %s\n", p, fmt_bytes(double(r->bytes)).c_str(),
                      r->algorithm.c_str(), r->status.c_str());
        }
      }
    }
  }
  std::printf("fastest (%s; tie = several within 0.5%%):\n%8s",
              simulated ? "simulated" : "wall time on this machine", "ranks");
  for (std::size_t s : sizes) std::printf(" %11s", fmt_bytes(double(s)).c_str());
  std::printf("\n");
  for (int p : world_sizes) {
    std::printf("%8d", p);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      auto it = winner.find({p, k});
      std::printf(" %11s", it == winner.end() ? "-" : it->second.c_str());
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"03_collectives: your collectives next to the built-ins, on the simulated network"};
  auto flags = distlab::add_launch_options(app);
  bool full = false;
  std::string csv_path;
  std::vector<std::string> only;
  app.add_flag("--full", full, "every size from 4 KiB to 16 MiB (x4) and world sizes 2..16");
  app.add_option("--csv", csv_path,
                 "write rows collective,algorithm,world_size,bytes,sim_time_s,wall_time_s,"
                 "bytes_sent_per_rank to this file");
  app.add_option("--collective", only,
                 "only these: broadcast, reduce, all-reduce, gather, all-gather, reduce-scatter");
  CLI11_PARSE(app, argc, argv);

  try {
    dist::LaunchOptions opts = flags->resolve();
    // Under mpirun every process runs main(): one rank each, the job's size, no simulated clock.
    // The calls run and their wall time and traffic are measured; rank 0's process prints.
    const bool simulated = opts.backend == dist::Backend::Threads;
    const bool lead = distlab::lead_process();
    if (opts.backend == dist::Backend::Nccl) {
      std::fprintf(stderr,
                   "run_03_collectives passes host buffers, which NCCL cannot take: use "
                   "--backend threads or mpi\n");
      return 2;
    }
    const std::string trace = opts.trace_path;
    opts.trace_path.clear();  // one trace of one launch, written at the end
    if (!simulated && (!trace.empty() || !csv_path.empty())) {
      if (lead) {
        std::fprintf(stderr,
                     "run_03_collectives: --trace and --csv record the simulated clock: use "
                     "--backend threads for them\n");
      }
      return 2;
    }

    std::vector<int> world_sizes =
        full ? std::vector<int>{2, 3, 4, 6, 8, 12, 16} : std::vector<int>{2, 4, 8, 16};
    if (app.count("--world-size") > 0) world_sizes = {flags->world_size};
    if (!simulated) world_sizes = {distlab::job_size_or(flags->world_size)};
    std::vector<std::size_t> sizes;
    for (std::size_t s = 4096; s <= (16u << 20); s *= full ? 4 : 16) sizes.push_back(s);

    std::vector<Algorithm> algs;
    for (auto& a : algorithms()) {
      if (only.empty() || std::find(only.begin(), only.end(), a.collective) != only.end()) {
        algs.push_back(a);
      }
    }
    if (algs.empty()) {
      std::fprintf(stderr,
                   "no such collective; use broadcast, reduce, all-reduce, gather, "
                   "all-gather or reduce-scatter\n");
      return 2;
    }

    if (simulated) {
      std::printf(
          "03_collectives: simulated time = the alpha-beta clock of the threads backend;\n"
          "sent/rank = bytes sent by the busiest rank; sizes are the whole vector (gather,\n"
          "all-gather: the output; reduce-scatter: the input). Root/destination: rank 0.\n%s\n",
          describe(opts.network).c_str());
    } else if (lead) {
      std::printf(
          "03_collectives under mpirun, %d processes: wall time of one call (the slowest rank;\n"
          "no simulated clock here: run with --backend threads for simulated times);\n"
          "sent/rank = bytes sent by the busiest rank (built-ins: -, MPI moves their bytes\n"
          "itself); sizes are the whole vector (gather, all-gather: the output;\n"
          "reduce-scatter: the input). Root/destination: rank 0.\n",
          world_sizes.front());
    }
    std::vector<Row> rows;
    for (const auto& a : algs) {
      for (int p : world_sizes) {
        auto r = measure(a, opts, p, sizes);
        rows.insert(rows.end(), r.begin(), r.end());
      }
    }
    std::vector<std::string> order;
    for (const auto& a : algs) {
      if (std::find(order.begin(), order.end(), a.collective) == order.end())
        order.push_back(a.collective);
    }
    if (!lead) return 0;  // mpirun: rank 0's process holds the rows and prints them
    for (const auto& c : order) print_collective(c, rows, world_sizes, sizes, simulated);

    if (!csv_path.empty()) {
      std::ofstream out(csv_path);
      if (!out) throw dist::Error("cannot write " + csv_path + ": check the folder exists");
      out << "collective,algorithm,world_size,bytes,sim_time_s,wall_time_s,bytes_sent_per_rank\n";
      for (const auto& r : rows) {
        if (!r.status.empty()) continue;
        out << r.collective << ',' << r.algorithm << ',' << r.world_size << ',' << r.bytes << ','
            << r.sim_s << ',' << r.wall_s << ',' << r.sent_per_rank << '\n';
      }
      std::printf("\nwrote %s\n", csv_path.c_str());
    }

    if (!trace.empty()) {
      // One launch with every algorithm that ran, 1 MiB each, one after the other.
      std::vector<const Algorithm*> ok;
      for (const auto& a : algs) {
        bool fine = true;
        for (const auto& r : rows) {
          if (r.collective == a.collective && r.algorithm == a.name && !r.status.empty())
            fine = false;
        }
        if (fine) ok.push_back(&a);
      }
      opts.trace_path = trace;
      opts.world_size = world_sizes.back() > 8 ? 8 : world_sizes.back();
      dist::launch(opts, [&] {
        Buffers bufs;
        for (const Algorithm* a : ok) {
          a->setup(bufs, floats_for(1u << 20, opts.world_size), opts.world_size);
          dist::barrier();
          a->run(bufs);
        }
      });
      std::printf(
          "\nwrote the trace of every algorithm (1 MiB, %d ranks) to %s: open it in "
          "https://ui.perfetto.dev\n",
          opts.world_size, trace.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "run_03_collectives: %s\n", e.what());
    return 1;
  }
  return 0;
}
