// The Open MPI backend: construction, the type/op mapping and helpers, the Work over an
// MPI_Request, and launch. The mapping of every call is described in mpi_backend.hpp.
#include "mpi_backend.hpp"

#include <climits>
#include <cstring>
#include <sstream>

namespace dist::detail::mpi {

// Not used outside this file.
namespace {
int type_index(DataType type) { return static_cast<int>(type); }  // 0..kTypeCount-1, for tags

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}
}  // namespace

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::Float32:
      return MPI_FLOAT;
    case DataType::Float64:
      return MPI_DOUBLE;
    case DataType::Int32:
      return MPI_INT32_T;
    case DataType::Int64:
      return MPI_INT64_T;
    case DataType::BFloat16:
      return MPI_UINT16_T;  // moved as bytes; reduced by the bf16 ops below
  }
  throw Error("mpi backend: unknown DataType");
}

namespace {
// MPI_User_function over bf16 (passed as MPI_UINT16_T): inout = op(in, inout) in float, rounded.
template <ReduceOp Op>
void bf16_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) apply_op(&b[i], &a[i], 1, DataType::BFloat16, Op);
}

MPI_Op make_op(MPI_User_function* fn) {
  MPI_Op op;
  DIST_MPI_CHECK(MPI_Op_create(fn, 1, &op));
  return op;
}
}  // namespace

MPI_Op mpi_op(ReduceOp op, DataType type) {
  if (type == DataType::BFloat16) {
    // Created once, after MPI_Init (the first bf16 reduction); live until MPI_Finalize.
    static const MPI_Op ops[4] = {
        make_op(&bf16_op<ReduceOp::Sum>), make_op(&bf16_op<ReduceOp::Product>),
        make_op(&bf16_op<ReduceOp::Min>), make_op(&bf16_op<ReduceOp::Max>)};
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return ops[0];
      case ReduceOp::Product:
        return ops[1];
      case ReduceOp::Min:
        return ops[2];
      case ReduceOp::Max:
        return ops[3];
    }
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return MPI_SUM;  // Avg: sum, then divide by world size
    case ReduceOp::Product:
      return MPI_PROD;
    case ReduceOp::Min:
      return MPI_MIN;
    case ReduceOp::Max:
      return MPI_MAX;
  }
  throw Error("mpi backend: unknown ReduceOp");
}

std::string describe(const char* fn, const char* peer_name, int peer, int tag, std::size_t count,
                     DataType type) {
  std::ostringstream os;
  os << fn << "(" << peer_name << "=" << peer << ", tag=" << tag << ", " << count << " x "
     << to_string(type) << ")";
  return os.str();
}

std::string describe_collective(const char* fn, std::size_t count, DataType type) {
  std::ostringstream os;
  os << fn << "(" << count << " x " << to_string(type) << ")";
  return os.str();
}

MpiBackend::MpiBackend(const LaunchOptions& options) : job_(options.timeout, "mpi") {
  int* tag_ub = nullptr;
  int flag = 0;
  DIST_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
  max_tag_ = (flag && tag_ub) ? (*tag_ub - (kTypeCount - 1)) / kTypeCount
                              : (32767 - (kTypeCount - 1)) / kTypeCount;
  reset_stats();
}

void MpiBackend::close() {
  closed_ = true;
  for (auto& [id, c] : comms_) MPI_Comm_free(&c);
  comms_.clear();
}

int MpiBackend::int_count(std::size_t count, const char* fn) const {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw Error("rank " + std::to_string(rank()) + ": " + fn + ": " + std::to_string(count) +
                " elements is more than MPI's int count allows (" + std::to_string(INT_MAX) +
                "): split the buffer into smaller calls");
  }
  return static_cast<int>(count);
}

int MpiBackend::mpi_tag(int tag, DataType type, const char* fn) const {
  if (tag > max_tag_) {
    throw Error("rank " + std::to_string(rank()) + ": " + fn + "(tag=" + std::to_string(tag) +
                "): the MPI backend supports tags up to " + std::to_string(max_tag_));
  }
  return tag * kTypeCount + type_index(type);
}

const void* MpiBackend::unalias(const void* in, std::size_t in_count, DataType type,
                                const void* out, std::size_t out_count,
                                std::vector<char>& copy) const {
  const std::size_t in_bytes = in_count * size_of(type);
  if (!overlaps(in, in_bytes, out, out_count * size_of(type))) return in;
  copy.assign(static_cast<const char*>(in), static_cast<const char*>(in) + in_bytes);
  return copy.data();
}

MPI_Comm MpiBackend::comm(const Group& g) const {
  return g.is_world() ? job_.comm() : comms_.at(g.info()->id);
}

bool MpiWork::is_completed() {
  if (done_ || error_) return true;
  check_work_in_launch(backend_->closed(), what_);
  int flag = 0;
  MPI_Status status;
  const int rc = MPI_Test(&req_, &flag, &status);
  if (rc != MPI_SUCCESS) {
    try {
      mpi::throw_mpi_error(rc, ("MPI_Test for " + what_).c_str(), __FILE__, __LINE__);
    } catch (...) {
      error_ = std::current_exception();
    }
    return true;
  }
  if (flag) {
    complete(status);
    return true;
  }
  backend_->job().poll_failures();
  return false;
}

void MpiWork::wait() {
  if (!done_ && !error_) {
    check_work_in_launch(backend_->closed(), what_);
    MPI_Status status;
    try {
      backend_->job().wait(req_, what_, &status);
    } catch (const RankFailedError&) {
      throw;  // not this operation's own error: another rank failed (may be waited on again)
    } catch (const TimeoutError&) {
      throw;
    } catch (...) {
      error_ = std::current_exception();
    }
    if (!error_) complete(status);
  }
  if (error_) std::rethrow_exception(error_);
}

int MpiWork::source_rank() {
  if (!any_source_) return WorkImpl::source_rank();
  wait();
  return source_;
}

void MpiWork::complete(const MPI_Status& status) {
  done_ = true;
  if (any_source_) source_ = status.MPI_SOURCE;
  if (on_done_) {
    try {
      on_done_(status);
    } catch (...) {
      error_ = std::current_exception();
    }
  }
}

}  // namespace dist::detail::mpi

namespace dist::detail {

void launch_mpi(const LaunchOptions& options, const std::function<void()>& body) {
  mpi::check_job_size(options, "mpi");
  mpi::ensure_initialized();
  auto backend = std::make_shared<mpi::MpiBackend>(options);
  LaunchOptions effective = options;  // what dist::options() reports inside the body
  effective.world_size = backend->size();
  effective.backend = Backend::Mpi;

  const RankOutcome outcome = run_rank_body(*backend, effective, body);
  backend->close();  // a Work used after this point is an error (check_work_in_launch)
  mpi::conclude(backend->job(), outcome);
}

}  // namespace dist::detail
