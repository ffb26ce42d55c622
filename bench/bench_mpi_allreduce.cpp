// bench_mpi_allreduce: Open MPI's MPI_Allreduce timed the same way as bench_collectives times
// the threads backend (barrier, each rank times its call, slowest rank per iteration, median),
// printing the same columns. Plain MPI, no distlab code, so it measures Open MPI alone.
//
//   mpirun -np 4 --oversubscribe bench_mpi_allreduce --sizes 4M --iters 20 [--csv -]
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::string> sizes;
  std::string min_bytes = "1K", max_bytes = "4M";
  int iters = 20, warmup = 3;
  bool csv = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        if (rank == 0) std::fprintf(stderr, "bench_mpi_allreduce: %s needs a value\n", a.c_str());
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      return argv[++i];
    };
    if (a == "--sizes") {
      while (i + 1 < argc && argv[i + 1][0] != '-') {
        std::string list = argv[++i];
        std::size_t start = 0;
        while (start <= list.size()) {
          const std::size_t comma = list.find(',', start);
          const std::string item =
              list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          if (!item.empty()) sizes.push_back(item);
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
      }
    } else if (a == "--min-bytes") {
      min_bytes = next();
    } else if (a == "--max-bytes") {
      max_bytes = next();
    } else if (a == "--iters") {
      iters = std::stoi(next());
    } else if (a == "--warmup") {
      warmup = std::stoi(next());
    } else if (a == "--csv") {
      csv = next() == "-";
    } else {
      if (rank == 0) {
        std::fprintf(
            stderr,
            "usage: mpirun -np N bench_mpi_allreduce [--sizes S,...] [--min-bytes B --max-bytes B] "
            "[--iters N] [--warmup N] [--csv -]\n");
      }
      MPI_Finalize();
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  std::vector<std::uint64_t> byte_sizes;
  try {
    byte_sizes = bench::size_list(sizes, min_bytes, max_bytes, 4);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "bench_mpi_allreduce: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (rank == 0 && !csv) bench::print_header(stdout);
  for (const std::uint64_t bytes : byte_sizes) {
    const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
    std::vector<float> buf(count, 1.0f);
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    std::vector<double> times;
    for (int i = 0; i < iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      double mine = MPI_Wtime() - t0, slowest = 0;
      MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      times.push_back(slowest);
    }
    if (rank == 0) {
      bench::Row row;
      row.backend = "mpi";
      row.op = "all_reduce";
      row.ranks = size;
      row.count = count;
      row.bytes = count * sizeof(float);
      const double t = bench::median(times);
      row.time_us = t * 1e6;
      row.algbw = t > 0 ? static_cast<double>(row.bytes) / t / 1e9 : 0;
      row.busbw = row.algbw * bench::busbw_factor("all_reduce", size);
      row.sim_us = -1;
      if (csv) {
        std::printf("%s\n", bench::csv_row(row).c_str());
      } else {
        bench::print_row(stdout, row);
      }
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
