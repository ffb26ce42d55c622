// launch_nccl: the job (MPI gives rank and size under mpirun and broadcasts the NCCL id), the
// device of each rank, and the end of the launch (shared with the MPI backend: mpi::conclude).
#include <cstdlib>
#include <cstring>

#include "nccl/nccl_backend.hpp"
#ifdef DISTLAB_HAVE_MPI
#include "mpi/mpi_job.hpp"
#endif

namespace dist::detail {
namespace nccl {

bool NcclWork::is_completed() {
  check_work_in_launch(backend_->closed() && !op_->done, op_->what);
  return backend_->test_op(*op_);
}

void NcclWork::wait() {
  check_work_in_launch(backend_->closed() && !op_->done, op_->what);
  backend_->wait_op(*op_);
}

namespace {
int local_rank(int rank) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return rank;
}
}  // namespace

}  // namespace nccl

using namespace nccl;  // the CUDA/NCCL checks, NcclBackend, local_rank

void launch_nccl(const LaunchOptions& options, const std::function<void()>& body) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    std::string why = rc != cudaSuccess
                          ? std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc)
                          : std::string("cudaGetDeviceCount found 0 devices");
    cudaGetLastError();
    throw Error(
        "--backend nccl: no CUDA GPU visible (" + why +
        "): run on a machine with an NVIDIA GPU and driver, or use --backend threads or mpi");
  }

  int rank = 0, size = 1;
  std::function<void()> poll_failures;
#ifdef DISTLAB_HAVE_MPI
  std::unique_ptr<mpi::MpiJob> job;
  if (dist::started_by_mpirun()) {
    mpi::ensure_initialized();
    job = std::make_unique<mpi::MpiJob>(options.timeout, "nccl");
    rank = job->rank();
    size = job->size();
    poll_failures = [j = job.get()] { j->poll_failures(); };
  }
#else
  if (dist::started_by_mpirun()) {
    throw Error(
        "--backend nccl under mpirun needs the Open MPI backend too (it gives ranks and "
        "broadcasts the NCCL id): install libopenmpi-dev, reconfigure and rebuild");
  }
#endif
  if (!dist::started_by_mpirun() && options.world_size != 1) {
    throw Error(
        "--backend nccl runs one rank per process and GPU, started by mpirun: run `mpirun -np " +
        std::to_string(options.world_size) +
        " PROGRAM --backend nccl ...`; without mpirun only --world-size 1 runs");
  }

  DIST_CUDA_CHECK(cudaSetDevice(local_rank(rank) % devices));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0) DIST_NCCL_CHECK(ncclGetUniqueId(&id));
#ifdef DISTLAB_HAVE_MPI
  if (job && size > 1) {
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Ibcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, job->comm(), &req));
    job->wait(req, "broadcast of the NCCL unique id");
  }
#endif
  auto backend = std::make_shared<NcclBackend>(rank, size, options.timeout, poll_failures);
  backend->init(id);

  LaunchOptions effective = options;
  effective.world_size = size;
  effective.backend = Backend::Nccl;
  RankOutcome outcome = run_rank_body(*backend, effective, body);
  try {
    backend->shutdown(outcome.error != nullptr);
  } catch (...) {
    if (!outcome.error) outcome = {std::current_exception(), true};
  }
#ifdef DISTLAB_HAVE_MPI
  if (job) {
    mpi::conclude(*job, outcome);
    return;
  }
#endif
  if (outcome.error) std::rethrow_exception(with_rank_prefix(rank, outcome.error));
}

}  // namespace dist::detail
