// run_04_matmul: every partition of C = A B, for several world sizes and shapes.
//
// For each shape and strategy it prints, per world size p: the bytes rank 0 and the busiest other
// rank moved (sent + received), the simulated communication time next to the alpha-beta model of
// the documented plan, the wall time of the whole call (pack, communicate, multiply, unpack) and
// the speedup over one rank, and whether C matched Eigen's A*B. Local products run
// single-threaded, so the scaling is the partition's own; on a laptop with few cores the wall
// time cannot scale past the number of cores (the threads backend runs every rank as a thread).
//
//   ./distlab run 04_matmul                          the default sweep (about 10-20 s)
//   ./distlab run -n 6 04_matmul                     p = 1 and 6 only
//   run_04_matmul --shapes square --world-sizes 1,4,9 --scale 2 --network two-level
//   ./distlab run 04_matmul --backend mpi -n 4       under mpirun: p = 4, wall time and C only
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "dist/dist.hpp"
#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "matmul.hpp"

namespace {

using Fn = std::function<Eigen::MatrixXf(const Eigen::MatrixXf&, const Eigen::MatrixXf&)>;

struct Strategy {
  std::string name;
  Fn fn;
};

struct ShapeCase {
  std::string name;
  std::string hint;  // what it looks like in a network
  int m, k, n;       // at scale 1
};

struct Result {
  bool ran = false;
  std::string error;
  double rank0_bytes = 0, other_max_bytes = 0;
  double sim_s = 0, wall_s = 0, max_err = 0;
};

// The alpha-beta cost of the documented plans (dist.hpp's table), flat network.
struct Model {
  double alpha, beta, gamma;
  int p;
  double rounds() const { return p > 1 ? std::ceil(std::log2(static_cast<double>(p))) : 0.0; }
  double broadcast(double bytes) const { return rounds() * (alpha + bytes * beta); }
  double reduce(double bytes) const { return rounds() * (alpha + bytes * (beta + gamma)); }
  // scatter/gather: `chunk` bytes per rank, p chunks in all
  double scatter(double chunk) const {
    return p > 1 ? rounds() * alpha + (p - 1) * chunk * beta : 0.0;
  }
  double gather(double chunk) const { return scatter(chunk); }
};

double model_time(const std::string& strategy, const Model& md, matmul::Shape s) {
  const double f = sizeof(float);
  const double shape = md.broadcast(4 * sizeof(std::int64_t));
  const int p = md.p;
  if (strategy == "rows") {
    const double rm = static_cast<double>(matmul::max_shard(s.m, p));
    return shape + md.scatter(rm * s.k * f) + md.broadcast(double(s.k) * s.n * f) +
           md.gather(rm * s.n * f);
  }
  if (strategy == "cols") {
    const double cm = static_cast<double>(matmul::max_shard(s.n, p));
    return shape + md.broadcast(double(s.m) * s.k * f) + md.scatter(double(s.k) * cm * f) +
           md.gather(double(s.m) * cm * f);
  }
  if (strategy == "reduction") {
    const double km = static_cast<double>(matmul::max_shard(s.k, p));
    return shape + md.scatter(double(s.m) * km * f) + md.scatter(km * s.n * f) +
           md.reduce(double(s.m) * s.n * f);
  }
  const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(p))));
  const double rm = static_cast<double>(matmul::max_shard(s.m, q));
  const double cm = static_cast<double>(matmul::max_shard(s.n, q));
  return shape + md.scatter((rm * s.k + double(s.k) * cm) * f) + md.gather(rm * cm * f);
}

// Bytes one non-root rank needs for its own part: the operand blocks it receives and the block
// of C (or the partial product) it sends, padding included, forwarding inside the trees excluded.
double needed_bytes(const std::string& strategy, int p, matmul::Shape s) {
  if (p == 1) return 0.0;
  const double f = sizeof(float);
  if (strategy == "rows") {
    const double rm = static_cast<double>(matmul::max_shard(s.m, p));
    return (rm * s.k + double(s.k) * s.n + rm * s.n) * f;
  }
  if (strategy == "cols") {
    const double cm = static_cast<double>(matmul::max_shard(s.n, p));
    return (double(s.m) * s.k + double(s.k) * cm + double(s.m) * cm) * f;
  }
  if (strategy == "reduction") {
    const double km = static_cast<double>(matmul::max_shard(s.k, p));
    return (double(s.m) * km + km * s.n + double(s.m) * s.n) * f;
  }
  const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(p))));
  const double rm = static_cast<double>(matmul::max_shard(s.m, q));
  const double cm = static_cast<double>(matmul::max_shard(s.n, q));
  return (rm * s.k + double(s.k) * cm + rm * cm) * f;
}

bool is_square(int p) {
  const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(p))));
  return q * q == p;
}

Result run_one(const Strategy& st, const dist::LaunchOptions& base, int p, const Eigen::MatrixXf& A,
               const Eigen::MatrixXf& B, const Eigen::MatrixXf& want, int repeats) {
  Result res;
  dist::LaunchOptions o = base;
  o.world_size = p;
  std::vector<double> walls;
  try {
    // Each rank measures its own calls; the largest figures reach rank 0 by an all-reduce, so
    // this runs on the threads backend (every rank here) and under mpirun (one rank a process).
    dist::launch(o, [&] {
      const bool root = dist::rank() == 0;
      const Eigen::MatrixXf empty;
      Eigen::MatrixXf C;
      double sim_max = 0, bytes = 0;
      for (int it = 0; it <= repeats; ++it) {  // iteration 0 warms up
        dist::barrier();
        dist::reset_stats();
        const double sim0 = dist::sim_time();
        distlab::Stopwatch sw;
        C = st.fn(root ? A : empty, root ? B : empty);
        const double sim = dist::sim_time() - sim0;
        const dist::Stats stt = dist::stats();
        dist::barrier();  // wall time: until the slowest rank is done
        const double wall = sw.elapsed_s();
        bytes = static_cast<double>(stt.bytes_sent + stt.bytes_received);
        if (it > 0) sim_max = std::max(sim_max, sim);
        if (root && it > 0) walls.push_back(wall);
      }
      std::vector<double> most{sim_max, root ? 0.0 : bytes};  // over ranks: max
      dist::all_reduce(std::span<double>(most), dist::ReduceOp::Max);
      if (root) {
        res.sim_s = most[0];
        res.other_max_bytes = most[1];
        res.rank0_bytes = bytes;
        res.max_err = (C.rows() == want.rows() && C.cols() == want.cols())
                          ? static_cast<double>((C - want).cwiseAbs().maxCoeff())
                          : INFINITY;
      }
    });
    res.ran = true;
    res.wall_s = distlab::median(walls);
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  return res;
}

/// Under mpirun: the median wall time of A*B in rank 0's process while the other ranks wait in a
/// barrier (their polled waits sleep, so they leave the cores to it): the speedup's reference.
double one_process_product(const dist::LaunchOptions& o, const Eigen::MatrixXf& A,
                           const Eigen::MatrixXf& B, int repeats) {
  std::vector<double> walls;
  dist::launch(o, [&] {
    dist::barrier();
    if (dist::rank() == 0) {
      for (int it = 0; it <= repeats; ++it) {  // iteration 0 warms up
        distlab::Stopwatch sw;
        const Eigen::MatrixXf C = A * B;
        if (it > 0) walls.push_back(sw.elapsed_s());
      }
    }
    dist::barrier();
  });
  return distlab::median(walls);
}

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    out.push_back(std::stoi(text.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);  // local products single-threaded: the partition does the scaling
  CLI::App app{
      "04_matmul: C = A B partitioned by rows, columns, the reduction dimension, 2-D blocks"};
  auto flags = distlab::add_launch_options(app);
  std::string world_sizes = "1,2,4,8,9";
  std::string shapes = "square,tall,wide,deep";
  std::string strategies = "rows,cols,reduction,2d";
  double scale = 1.0;
  int repeats = 2;
  app.add_option("--world-sizes", world_sizes,
                 "comma-separated world sizes (2-D runs the squares)");
  app.add_option("--shapes", shapes, "any of square,tall,wide,deep");
  app.add_option("--strategies", strategies, "any of rows,cols,reduction,2d");
  app.add_option("--scale", scale, "multiply every dimension by this")
      ->check(CLI::Range(0.01, 16.0));
  app.add_option("--repeats", repeats, "timed runs per case (median wall time)")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  dist::LaunchOptions base;
  std::vector<int> ps;
  try {
    base = flags->resolve();
    ps = parse_list(world_sizes);
    if (app.count("--world-size") > 0) ps = {1, flags->world_size};
    std::sort(ps.begin(), ps.end());
    ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
    if (ps.empty() || ps.front() < 1) throw std::invalid_argument("world sizes must be >= 1");
  } catch (const std::exception& e) {
    std::cerr << "run_04_matmul: " << e.what() << "\n";
    return 2;
  }
  // Under mpirun every process runs main(): the job's size is the only p, there is no simulated
  // clock and MPI moves the built-in collectives' bytes itself (dist counts none), so the table
  // gives the wall time and whether C is right; rank 0's process prints.
  const bool simulated = base.backend == dist::Backend::Threads;
  const bool lead = distlab::lead_process();
  if (base.backend == dist::Backend::Nccl) {
    std::cerr << "run_04_matmul multiplies host matrices, which NCCL cannot take: use --backend "
                 "threads or mpi\n";
    return 2;
  }
  if (!simulated) ps = {distlab::job_size_or(flags->world_size)};

  const std::vector<Strategy> all_strategies = {{"rows", matmul::matmul_by_rows},
                                                {"cols", matmul::matmul_by_cols},
                                                {"reduction", matmul::matmul_by_reduction},
                                                {"2d", matmul::matmul_2d_blocks}};
  const std::vector<ShapeCase> all_shapes = {
      {"square", "a big layer, a big batch", 768, 768, 768},
      {"tall", "big batch x small layer (activations)", 6144, 256, 256},
      {"wide", "small batch x wide layer (logits)", 256, 256, 6144},
      {"deep", "long reduction (a weight gradient X^T dY)", 256, 6144, 256}};

  const dist::NetworkModel& net = base.network;
  if (simulated) {
    std::printf(
        "04_matmul: network alpha = %.1f us, bandwidth = %.1f GB/s%s; local products "
        "single-threaded\n",
        net.latency_s * 1e6, net.bandwidth_Bps / 1e9,
        net.ranks_per_node > 0 ? " (two-level: model column assumes flat)" : "");
    std::printf(
        "bytes = sent + received on one rank; sim = simulated communication time; model = "
        "alpha-beta cost of the plan; wall = whole call\n");
  } else if (lead) {
    std::printf(
        "04_matmul under mpirun, p = %d processes; local products single-threaded\n"
        "wall = whole call (median of %d); speedup = one process's A*B / wall; no simulated "
        "clock or\nbyte counts here (MPI moves the built-ins' bytes): run with --backend threads "
        "for them\n",
        ps.front(), repeats);
  }

  bool any_missing = false;
  for (const ShapeCase& sc : all_shapes) {
    if (shapes.find(sc.name) == std::string::npos) continue;
    const int m = std::max(1, static_cast<int>(std::lround(sc.m * scale)));
    const int k = std::max(1, static_cast<int>(std::lround(sc.k * scale)));
    const int n = std::max(1, static_cast<int>(std::lround(sc.n * scale)));
    Eigen::MatrixXf A = Eigen::MatrixXf::Random(m, k);
    Eigen::MatrixXf B = Eigen::MatrixXf::Random(k, n);
    // rank 0's process checks C (under mpirun the others need no reference)
    const Eigen::MatrixXf want = lead ? Eigen::MatrixXf(A * B) : Eigen::MatrixXf();
    const double tol = 1e-4 * std::sqrt(static_cast<double>(k)) * 4;
    if (lead) {
      std::printf("\n== %s: A %dx%d, B %dx%d (%s), %.2f GFLOP\n", sc.name.c_str(), m, k, k, n,
                  sc.hint.c_str(), 2.0 * m * k * n / 1e9);
    }
    double product1 = 0;  // mpirun: one process's A*B, the speedup's reference
    if (simulated) {
      std::printf("%-10s %3s %9s %9s %9s %9s %9s %9s %8s %s\n", "strategy", "p", "need MB",
                  "rank0 MB", "other MB", "sim ms", "model ms", "wall ms", "speedup", "C");
    } else {
      product1 = one_process_product(base, A, B, repeats);
      if (lead)
        std::printf("%-10s %3s %9s %9s %8s %s\n", "strategy", "p", "need MB", "wall ms", "speedup",
                    "C");
    }
    std::map<std::string, double> best_sim;  // at the largest p each strategy ran
    std::map<std::string, int> best_p;
    for (const Strategy& st : all_strategies) {
      if (strategies.find(st.name) == std::string::npos) continue;
      double wall1 = 0;
      for (int p : ps) {
        if (st.name == "2d" && !is_square(p)) continue;
        const Result r = run_one(st, base, p, A, B, want, repeats);
        if (!r.ran) {
          const bool todo = r.error.find("not implemented") != std::string::npos;
          any_missing = any_missing || todo;
          if (lead) {
            std::printf("%-10s %3d   %s\n", st.name.c_str(), p,
                        todo ? "not implemented (fill in the TODO in matmul.cpp)"
                             : ("error: " + r.error).c_str());
          }
          if (todo) break;
          continue;
        }
        const double need = needed_bytes(st.name, p, matmul::Shape{m, k, n});
        if (!simulated) {
          if (lead) {
            std::printf("%-10s %3d %9.2f %9.1f %8s %s\n", st.name.c_str(), p, need / 1e6,
                        r.wall_s * 1e3,
                        (std::to_string(product1 / r.wall_s).substr(0, 4) + "x").c_str(),
                        r.max_err <= tol ? "ok" : "WRONG");
          }
          continue;
        }
        if (p == 1) wall1 = r.wall_s;
        const Model md{net.latency_s, 1.0 / net.bandwidth_Bps,
                       net.reduce_Bps > 0 ? 1.0 / net.reduce_Bps : 0.0, p};
        const double model = model_time(st.name, md, matmul::Shape{m, k, n});
        std::printf("%-10s %3d %9.2f %9.2f %9.2f %9.3f %9.3f %9.1f %8s %s\n", st.name.c_str(), p,
                    need / 1e6, r.rank0_bytes / 1e6, r.other_max_bytes / 1e6, r.sim_s * 1e3,
                    model * 1e3, r.wall_s * 1e3,
                    wall1 > 0 ? (std::to_string(wall1 / r.wall_s).substr(0, 4) + "x").c_str() : "-",
                    r.max_err <= tol ? "ok" : "WRONG");
        best_sim[st.name] = r.sim_s;
        best_p[st.name] = p;
      }
    }
    if (!best_sim.empty()) {
      int pmax = 0;
      for (const auto& kv : best_p) pmax = std::max(pmax, kv.second);
      double least = INFINITY;
      for (const auto& kv : best_sim) {
        if (best_p[kv.first] == pmax && pmax > 1) least = std::min(least, kv.second);
      }
      std::string best;  // every strategy within 1% of the least simulated time
      for (const auto& kv : best_sim) {
        if (best_p[kv.first] == pmax && pmax > 1 && kv.second <= least * 1.01) {
          best += (best.empty() ? "" : ", ") + kv.first;
        }
      }
      if (!best.empty()) {
        std::printf("-> least simulated communication at p = %d: %s\n", pmax, best.c_str());
      }
    }
  }
  if (!lead) return 0;
  std::printf(
      "\nWhich strategy when (need MB: what one rank needs for its own part):\n"
      "  rows       each rank needs all of B (k n) and 1/p of A: best when A is tall (m >> k, n).\n"
      "             Data parallelism: split the batch, replicate the weights.\n"
      "  cols       each rank needs all of A (m k) and 1/p of B: best when B is wide (n >> m, k).\n"
      "             Tensor parallelism: split a layer's outputs, replicate its input.\n"
      "  reduction  each rank needs 1/p of A and of B but sends a full m x n partial sum: best\n"
      "             when k is long and C small, like a weight gradient X^T dY (summed by an\n"
      "             all-reduce in data-parallel training).\n"
      "  2d         each rank needs 1/sqrt(p) of A and of B, so 'need MB' keeps falling with p:\n"
      "             the choice for big square products on many ranks WHEN THE OPERANDS ARE\n"
      "             ALREADY SPREAD OVER THE RANKS. Here rank 0 starts with everything and its\n"
      "             link carries sqrt(p) copies of A and B, so the 1-D splits stay competitive.\n"
      "  On one machine: none of them; one multithreaded GEMM call (docs/04_matmul.md).\n");
  if (any_missing) {
    std::printf("\nSome strategies are not implemented yet: see exercises/04_matmul/README.md.\n");
  }
  return 0;
}
