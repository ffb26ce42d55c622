// MPI set-up shared by the Open MPI and NCCL backends: initialisation, error checks, and one
// launch's communicators with the failure protocol described in mpi_job.hpp.
#include "mpi_job.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

namespace dist::detail::mpi {

namespace {
constexpr int kNoticeTag = 1;

int world_rank_or_minus_one() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return -1;
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void finalize_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

bool starts_with_rank(const std::string& s) { return s.rfind("rank ", 0) == 0; }
}  // namespace

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) {
    std::snprintf(text, sizeof text, "MPI error code %d", code);
  }
  int cls = code;
  MPI_Error_class(code, &cls);
  std::ostringstream os;
  const int r = world_rank_or_minus_one();
  if (r >= 0) os << "rank " << r << ": ";
  os << "MPI call " << call << " failed: " << text << " (" << file << ":" << line << ")";
  if (cls == MPI_ERR_TRUNCATE) {
    os << "; the matching send has more elements than this recv: a send and its recv must agree "
          "on element type and count";
    throw MismatchError(os.str());
  }
  throw Error(os.str());
}

void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int init = 0, fin = 0;
    DIST_MPI_CHECK(MPI_Initialized(&init));
    DIST_MPI_CHECK(MPI_Finalized(&fin));
    if (fin) {
      throw Error("MPI was already finalised in this process: the MPI backend cannot start again");
    }
    if (!init) {
      int provided = 0;
      DIST_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
      std::atexit(finalize_at_exit);  // MPI stays up across launches; finalised once, at exit
    }
    DIST_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  });
}

void check_job_size(const LaunchOptions& options, const char* backend_name) {
  if (!dist::started_by_mpirun() && options.world_size != 1) {
    std::ostringstream os;
    os << "--backend " << backend_name << " runs one rank per process, started by mpirun: run "
       << "`mpirun -np " << options.world_size
       << " PROGRAM ...` (or `./distlab run MODULE --backend " << backend_name << " -n "
       << options.world_size << "`); without mpirun only --world-size 1 runs (asked for "
       << options.world_size << ")";
    throw Error(os.str());
  }
}

void Backoff::pause() {
  // MPI_Test drives MPI's progress engine, so waits poll. Yield for the first ~2000 polls (low
  // latency), then sleep briefly so oversubscribed ranks (4 ranks on 2 cores) leave CPU to others.
  if (++spins_ < 2000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void throw_timeout(int rank, const std::string& what, std::chrono::milliseconds timeout,
                   const char* backend_name) {
  std::ostringstream os;
  os << "rank " << rank << ": " << what << " waited longer than the timeout (" << timeout.count()
     << " ms) on the " << backend_name
     << " backend. There is no deadlock diagnosis here: run the same program with --backend "
        "threads, which names the call every rank is blocked in. Common causes: both ranks send "
        "first with blocking send; a collective only some ranks called; a send and recv that "
        "disagree on tag or element type; a recv whose send never came. If the other ranks were "
        "only slow, raise LaunchOptions::timeout (--timeout-ms).";
  throw TimeoutError(os.str());
}

std::string encode_error(std::exception_ptr error, int rank) {
  char kind = 'E';
  std::string message = "unknown exception";
  try {
    std::rethrow_exception(error);
  } catch (const DeadlockError& e) {
    kind = 'D', message = e.what();
  } catch (const TimeoutError& e) {
    kind = 'T', message = e.what();
  } catch (const MismatchError& e) {
    kind = 'M', message = e.what();
  } catch (const RankFailedError& e) {
    kind = 'R', message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
  }
  if (!starts_with_rank(message)) message = "rank " + std::to_string(rank) + ": " + message;
  return kind + message;
}

void throw_notice(const std::string& notice) {
  const std::string message = notice.empty() ? std::string("unknown error") : notice.substr(1);
  switch (notice.empty() ? 'E' : notice[0]) {
    case 'D':
      throw DeadlockError(message);
    case 'T':
      throw TimeoutError(message);
    case 'M':
      throw MismatchError(message);
    case 'R':
      throw RankFailedError(message);
    default:
      throw Error(message);
  }
}

MpiJob::MpiJob(std::chrono::milliseconds timeout, const char* backend_name)
    : timeout_(timeout), backend_name_(backend_name) {
  DIST_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  DIST_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  DIST_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &ctrl_));
  DIST_MPI_CHECK(MPI_Comm_set_errhandler(ctrl_, MPI_ERRORS_RETURN));
  DIST_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DIST_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiJob::~MpiJob() {
  // Normal end: free both communicators. After a failure the data communicator may still have
  // abandoned operations on it, so it is left alone (never used again).
  if (ctrl_ != MPI_COMM_NULL) MPI_Comm_free(&ctrl_);
  if (comm_ != MPI_COMM_NULL && !broken_) MPI_Comm_free(&comm_);
}

void MpiJob::receive_notice(const MPI_Status& status) {
  int len = 0;
  DIST_MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &len));
  std::string text(static_cast<std::size_t>(len), '\0');
  DIST_MPI_CHECK(MPI_Recv(text.data(), len, MPI_CHAR, status.MPI_SOURCE, kNoticeTag, ctrl_,
                          MPI_STATUS_IGNORE));
  notices_.emplace_back(status.MPI_SOURCE, std::move(text));
  broken_ = true;
}

void MpiJob::poll_failures() {
  if (notices_.empty()) {
    int flag = 0;
    MPI_Status status;
    DIST_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, ctrl_, &flag, &status));
    if (!flag) return;
    receive_notice(status);
  }
  const auto& [src, notice] = notices_.front();
  throw RankFailedError("rank " + std::to_string(rank_) + ": stopped because rank " +
                        std::to_string(src) +
                        " failed: " + (notice.empty() ? std::string() : notice.substr(1)));
}

void MpiJob::wait(MPI_Request& req, const std::string& what, MPI_Status* status) {
  MPI_Status local;
  MPI_Status* st = status ? status : &local;
  wait_until(
      [&] {
        int flag = 0;
        const int rc = MPI_Test(&req, &flag, st);
        if (rc != MPI_SUCCESS) {
          throw_mpi_error(rc, ("MPI_Test for " + what).c_str(), __FILE__, __LINE__);
        }
        return flag != 0;
      },
      what);
}

void MpiJob::notify_failure(const std::string& notice) {
  broken_ = true;
  notice_out_ = notice;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request req;
    DIST_MPI_CHECK(MPI_Isend(notice_out_.data(), static_cast<int>(notice_out_.size()), MPI_CHAR,
                             peer, kNoticeTag, ctrl_, &req));
    notice_requests_.push_back(req);
  }
}

int MpiJob::finish(bool failed, const std::string& own_notice, std::string* notice) {
  // Agree on (lowest rank that failed first-hand, number of such ranks). Nobody times out here:
  // every rank gets here, because every wait inside the body has a timeout.
  int lowest_in = failed ? rank_ : INT_MAX, lowest = INT_MAX;
  int count_in = failed ? 1 : 0, count = 0;
  MPI_Request reqs[2];
  DIST_MPI_CHECK(MPI_Iallreduce(&lowest_in, &lowest, 1, MPI_INT, MPI_MIN, ctrl_, &reqs[0]));
  DIST_MPI_CHECK(MPI_Iallreduce(&count_in, &count, 1, MPI_INT, MPI_SUM, ctrl_, &reqs[1]));
  Backoff backoff;
  for (;;) {
    int flag = 0;
    DIST_MPI_CHECK(MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE));
    if (flag) break;
    backoff.pause();
  }
  if (count > 0) broken_ = true;
  // Every rank that failed first-hand sent this rank one notice; take them all (they were sent
  // before their senders joined the agreement, so they arrive).
  const std::size_t expected = static_cast<std::size_t>(count - (failed ? 1 : 0));
  while (notices_.size() < expected) {
    MPI_Status status;
    DIST_MPI_CHECK(MPI_Probe(MPI_ANY_SOURCE, kNoticeTag, ctrl_, &status));
    receive_notice(status);
  }
  if (!notice_requests_.empty()) {
    DIST_MPI_CHECK(MPI_Waitall(static_cast<int>(notice_requests_.size()), notice_requests_.data(),
                               MPI_STATUSES_IGNORE));
    notice_requests_.clear();
  }
  if (count == 0) return -1;
  if (lowest == rank_) {
    *notice = own_notice;
  } else {
    for (const auto& [src, text] : notices_) {
      if (src == lowest) *notice = text;
    }
  }
  return lowest;
}

void conclude(MpiJob& job, const RankOutcome& outcome) {
  const std::string own = outcome.first_hand ? encode_error(outcome.error, job.rank()) : "";
  if (outcome.first_hand) job.notify_failure(own);
  std::string notice;
  const int failed_rank = job.finish(outcome.first_hand, own, &notice);
  if (failed_rank < 0) return;
  if (failed_rank == job.rank()) {
    // Rethrow our own exception as is when it already names the rank; else the prefixed copy.
    try {
      std::rethrow_exception(outcome.error);
    } catch (const Error& e) {
      if (std::string(e.what()).rfind("rank ", 0) == 0) throw;
    } catch (...) {
    }
  }
  throw_notice(notice);
}

}  // namespace dist::detail::mpi
