// Helpers for the module programs (run_<module>).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>

#include "dist/dist.hpp"
#include "distlab/todo.hpp"

namespace distlab {

/// This process's rank in the MPI job a launcher started (mpirun, srun, PMI), or 0 when none did
/// (the threads backend runs every rank inside this one process).
inline int job_rank() {
  if (!dist::started_by_mpirun()) return 0;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* rank = std::getenv(var)) return std::atoi(rank);
  }
  return 0;
}

/// The number of processes of that job, or `threads_size` when no launcher started this one.
inline int job_size_or(int threads_size) {
  if (!dist::started_by_mpirun()) return threads_size;
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (const char* size = std::getenv(var)) return std::atoi(size);
  }
  return 1;
}

/// True in the one process that prints a program's config, log and tables: the only process on
/// the threads backend, rank 0's under mpirun (every process of the job runs main()).
inline bool lead_process() { return job_rank() == 0; }

/// Prints "== title ==" and runs one section of a program. A stub that is not implemented yet,
/// or any other error, is printed and the program goes on with the next section.
inline void section(const char* title, const std::function<void()>& body) {
  std::printf("\n== %s ==\n", title);
  std::fflush(stdout);
  try {
    body();
  } catch (const NotImplemented& e) {
    std::printf("  (not implemented yet) %s\n", e.what());
  } catch (const std::exception& e) {
    std::printf("  error: %s\n", e.what());
  }
  std::fflush(stdout);
}

/// A module program's main: runs body and returns its exit status. What escapes it is printed
/// and gives status 1: "(not implemented yet) ..." for a stub not written yet (also when the error
/// came back from another rank as text), "error: ..." on stderr for anything else.
inline int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const NotImplemented& e) {
    std::printf("(not implemented yet) %s\n", e.what());
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("not implemented") != std::string::npos) {
      std::printf("(not implemented yet) %s\n", e.what());
    } else {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }
  return 1;
}

}  // namespace distlab
