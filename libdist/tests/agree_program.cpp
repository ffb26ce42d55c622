// A deterministic dist program whose output must be the same on every backend: run it with
// `--backend threads -n 4` and under `mpirun -np 4`, and compare what rank 0 prints
// (CTest: dist_backends_agree, label mpi). Values are small integers in float/double/int64, so
// the result does not depend on the order in which an engine sums; the ring's point-to-point
// traffic counters are printed too (both backends count point-to-point messages the same way).
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "dist/dist.hpp"
#include "distlab/args.hpp"

namespace {

template <typename T>
void print_line(const char* label, const std::vector<T>& v) {
  std::string line = label;
  line += ":";
  for (const T& x : v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %.17g", static_cast<double>(x));
    line += buf;
  }
  std::puts(line.c_str());
}

/// Gathers every rank's vector to rank 0 and prints them there, one line.
template <typename T>
void report(const char* label, const std::vector<T>& mine) {
  std::vector<T> all(dist::rank() == 0 ? mine.size() * static_cast<std::size_t>(dist::world_size())
                                       : 0);
  dist::gather(std::span<const T>(mine), std::span<T>(all), 0);
  if (dist::rank() == 0) print_line(label, all);
}

void program() {
  const int p = dist::world_size(), r = dist::rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;

  // 1. A ring that accumulates: after p-1 steps every rank holds the sum of all ranks' vectors.
  std::vector<double> acc(6), token(6), incoming(6);
  for (std::size_t i = 0; i < acc.size(); ++i)
    acc[i] = token[i] = (r + 1) * 10.0 + static_cast<double>(i);
  dist::reset_stats();
  for (int step = 0; step + 1 < p; ++step) {
    auto w = dist::isend(std::span<const double>(token), right, step);
    dist::recv(std::span<double>(incoming), left, step);
    w.wait();
    token = incoming;
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += token[i];
  }
  // Point-to-point counters of the ring, read before any built-in collective (the threads backend
  // also counts the messages of the algorithms its built-ins document; MPI counts only calls).
  const dist::Stats s = dist::stats();
  report("ring_sum", acc);

  // 2. Built-in collectives, every op.
  std::vector<float> f(5);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r + 1 + static_cast<int>(i));
  for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Product, dist::ReduceOp::Min,
                  dist::ReduceOp::Max, dist::ReduceOp::Avg}) {
    auto x = f;
    dist::all_reduce(std::span<float>(x), op);
    report((std::string("all_reduce_") + to_string(op)).c_str(), x);
  }
  std::vector<std::int64_t> big{r * 1000000007LL, -r, 3};
  dist::all_reduce(std::span<std::int64_t>(big), dist::ReduceOp::Max);
  report("all_reduce_max_int64", big);

  std::vector<double> b(3, r == p - 1 ? 2.5 : 0.0);
  dist::broadcast(std::span<double>(b), p - 1);
  report("broadcast_from_last", b);

  std::vector<std::int32_t> in(static_cast<std::size_t>(2 * p)), out(2);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = r * 100 + static_cast<std::int32_t>(i);
  dist::reduce_scatter(std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
  report("reduce_scatter_sum", out);

  std::vector<float> mine{static_cast<float>(r), static_cast<float>(r * r)};
  std::vector<float> everyone(2 * static_cast<std::size_t>(p));
  dist::all_gather(std::span<const float>(mine), std::span<float>(everyone));
  report("all_gather", everyone);

  // 3. A few steps of "training": gradient averaging, parameters kept in double.
  std::vector<double> w{1.0, -2.0, 0.5};
  for (int step = 0; step < 3; ++step) {
    std::vector<double> g(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) g[i] = (r + 1) * w[i] + static_cast<double>(step);
    dist::all_reduce(std::span<double>(g), dist::ReduceOp::Sum);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= 0.125 * g[i] / p;
  }
  report("sgd_weights", w);

  // 4. The ring's point-to-point traffic counters.
  report("p2p_counts", std::vector<std::int64_t>{static_cast<std::int64_t>(s.messages_sent),
                                                 static_cast<std::int64_t>(s.bytes_sent),
                                                 static_cast<std::int64_t>(s.messages_received),
                                                 static_cast<std::int64_t>(s.bytes_received)});
  if (r == 0) std::printf("world_size: %d\n", p);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    dist::launch(distlab::options_from_args(argc, argv), program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
