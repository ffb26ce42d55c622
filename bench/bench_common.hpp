// Shared by the benchmark programs: size parsing, the nccl-tests bus-bandwidth factors and the
// table/CSV output, so the threads-backend and the Open MPI tables line up column by column.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

/// "4194304", "4K", "4M", "1G", "4MiB", "4MB" (binary multiples) -> bytes.
inline std::uint64_t parse_bytes(const std::string& text) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument("not a size: '" + text + "' (write e.g. 4096, 64K or 4M)");
  }
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "B") return v;
  if (unit == "K" || unit == "KB" || unit == "KIB") return v << 10;
  if (unit == "M" || unit == "MB" || unit == "MIB") return v << 20;
  if (unit == "G" || unit == "GB" || unit == "GIB") return v << 30;
  throw std::invalid_argument("unknown size unit in '" + text + "' (use K, M or G)");
}

/// The sizes to run: the explicit list, else powers of `factor` from min to max.
inline std::vector<std::uint64_t> size_list(const std::vector<std::string>& sizes,
                                            const std::string& min_bytes,
                                            const std::string& max_bytes, std::uint64_t factor) {
  std::vector<std::uint64_t> out;
  if (!sizes.empty()) {
    for (const auto& s : sizes) out.push_back(parse_bytes(s));
    return out;
  }
  const std::uint64_t lo = std::max<std::uint64_t>(1, parse_bytes(min_bytes));
  const std::uint64_t hi = parse_bytes(max_bytes);
  for (std::uint64_t b = lo; b <= hi; b *= std::max<std::uint64_t>(2, factor)) out.push_back(b);
  return out;
}

/// nccl-tests bus bandwidth factor (docs/PERFORMANCE.md of nccl-tests).
inline double busbw_factor(const std::string& op, int n) {
  const double p = n;
  if (op == "all_reduce" || op == "mpi_all_reduce") return 2.0 * (p - 1) / p;
  if (op == "all_gather" || op == "reduce_scatter" || op == "gather" || op == "scatter")
    return (p - 1) / p;
  return 1.0;  // broadcast, reduce
}

struct Row {
  std::string backend;  // threads | mpi
  std::string op;
  int ranks = 0;
  std::uint64_t bytes =
      0;  // nccl-tests "size": the largest buffer (all_gather: output, reduce_scatter: input)
  std::uint64_t count = 0;      // elements of that buffer
  double time_us = 0;           // median wall time of one call
  double algbw = 0, busbw = 0;  // GB/s (1e9 bytes)
  double sim_us = -1;           // simulated time of one call (threads backend), -1 = n/a
};

inline void print_header(std::FILE* f) {
  std::fprintf(f, "%-8s %-15s %5s %12s %11s %11s %11s %11s %11s\n", "backend", "op", "ranks",
               "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "sim(us)");
}

inline void print_row(std::FILE* f, const Row& r) {
  char sim[32];
  if (r.sim_us >= 0) {
    std::snprintf(sim, sizeof sim, "%11.2f", r.sim_us);
  } else {
    std::snprintf(sim, sizeof sim, "%11s", "-");
  }
  std::fprintf(f, "%-8s %-15s %5d %12llu %11llu %11.2f %11.3f %11.3f %s\n", r.backend.c_str(),
               r.op.c_str(), r.ranks, static_cast<unsigned long long>(r.bytes),
               static_cast<unsigned long long>(r.count), r.time_us, r.algbw, r.busbw, sim);
}

inline const char* csv_header() {
  return "backend,op,ranks,size_bytes,count,time_us,algbw_GBps,busbw_GBps,sim_us";
}

inline std::string csv_row(const Row& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s,%s,%d,%llu,%llu,%.3f,%.4f,%.4f,%.3f", r.backend.c_str(),
                r.op.c_str(), r.ranks, static_cast<unsigned long long>(r.bytes),
                static_cast<unsigned long long>(r.count), r.time_us, r.algbw, r.busbw, r.sim_us);
  return buf;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace bench
