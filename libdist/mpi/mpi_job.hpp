// Private to distlab::dist: what the Open MPI and NCCL backends share about an MPI job.
//
//   * MPI is initialised once per process (MPI_Init_thread, MPI_THREAD_SERIALIZED) and finalised
//     at exit, so dist::launch may run many times in one process (one test after another);
//   * every MPI call goes through DIST_MPI_CHECK, which throws dist::Error with MPI's own error
//     string and the file:line of the call;
//   * MpiJob is one launch's view of the job: its own duplicated communicators (data traffic and a
//     control channel for failure notices) and the end-of-launch agreement on who failed.
//
// Failure handling without MPI_Abort. A rank whose body throws sends a short notice (its error
// text) to every other rank on the control communicator. Every blocking wait in the backends polls
// that channel, so a rank waiting on the failed one wakes with RankFailedError instead of hanging,
// and every wait has LaunchOptions::timeout, so a hang (a deadlock, a rank that skipped a call)
// becomes a TimeoutError. At the end of launch all ranks agree (a non-blocking all-reduce on the
// control communicator) on the lowest rank that failed first-hand, and every rank rethrows that
// rank's error. Operations abandoned by a failure are left pending on a communicator that is never
// used again, so a later launch in the same process starts clean.
#pragma once

#include <mpi.h>

#include <chrono>
#include <exception>
#include <utility>
#include <string>
#include <vector>

#include "dist/backend.hpp"

namespace dist::detail::mpi {

/// Throws dist::Error (MismatchError for truncation) naming the call, MPI's message and file:line.
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);

}  // namespace dist::detail::mpi

#define DIST_MPI_CHECK(call)                                                         \
  do {                                                                               \
    const int dist_mpi_rc_ = (call);                                                 \
    if (dist_mpi_rc_ != MPI_SUCCESS) {                                               \
      ::dist::detail::mpi::throw_mpi_error(dist_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

namespace dist::detail::mpi {

/// Initialises MPI once for this process (and registers MPI_Finalize at exit). Thread-safe.
void ensure_initialized();

/// Checks the requested world size against the job: outside mpirun only world size 1 runs
/// (MPI singleton); otherwise throws an error that says how to start the program.
void check_job_size(const LaunchOptions& options, const char* backend_name);

/// One launch's communicators and its failure protocol (see the file comment).
class MpiJob {
 public:
  /// Duplicates MPI_COMM_WORLD twice (data, control). backend_name ("mpi", "nccl") is used in
  /// error messages.
  MpiJob(std::chrono::milliseconds timeout, const char* backend_name);
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Throws RankFailedError when another rank has sent a failure notice (cheap: one Iprobe).
  void poll_failures();

  /// Waits for `req` (MPI_Test in a loop that yields, then sleeps), polling failure notices and
  /// throwing TimeoutError after timeout(). `what` describes the call for error messages.
  /// On return the request is complete and *status (if given) is filled in.
  void wait(MPI_Request& req, const std::string& what, MPI_Status* status = nullptr);

  /// Generic form: waits until done() returns true (done is polled; it may throw).
  template <typename Done>
  void wait_until(Done&& done, const std::string& what);

  /// Called on a rank whose body threw first-hand: tells every other rank (does not block).
  /// `notice` is encode_error() of the exception.
  void notify_failure(const std::string& notice);

  /// The end-of-launch agreement, called by every rank after its body returned or threw.
  /// `failed`: this rank failed first-hand. Returns the lowest failing rank (or -1 when none failed
  /// first-hand) and, in *notice, that rank's notice (for this rank itself: `own_notice`).
  int finish(bool failed, const std::string& own_notice, std::string* notice);

  /// True once a failure was seen: communicators are then leaked on purpose, not freed.
  bool broken() const { return broken_; }

 private:
  void receive_notice(const MPI_Status& status);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm ctrl_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  const char* backend_name_;
  bool broken_ = false;
  std::vector<std::pair<int, std::string>> notices_;  // (source rank, notice) received so far
  std::vector<MPI_Request> notice_requests_;
  std::string notice_out_;  // the buffer our notices are sent from
};

/// The end of a launch on an MPI job, the same for the MPI and NCCL engines: a rank whose body
/// failed first-hand tells every other rank, all agree on the lowest rank that failed first-hand,
/// and every rank rethrows that rank's error (its own exception as it is when it is this rank's
/// and already names the rank). Returns normally when no rank failed.
void conclude(MpiJob& job, const RankOutcome& outcome);

/// A failure notice: one letter for the error class (E Error, D Deadlock, T Timeout, M Mismatch,
/// R RankFailed) followed by the message, which starts with "rank R: ".
std::string encode_error(std::exception_ptr error, int rank);
/// Throws the exception a notice describes (same dist::Error subclass, same message).
[[noreturn]] void throw_notice(const std::string& notice);

/// Polling loop shared by all waits: spins with yield for a short while, then sleeps 50 us.
class Backoff {
 public:
  Backoff() : start_(std::chrono::steady_clock::now()) {}
  void pause();
  std::chrono::milliseconds elapsed() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start_);
  }

 private:
  std::chrono::steady_clock::time_point start_;
  unsigned spins_ = 0;
};

[[noreturn]] void throw_timeout(int rank, const std::string& what,
                                std::chrono::milliseconds timeout, const char* backend_name);

template <typename Done>
void MpiJob::wait_until(Done&& done, const std::string& what) {
  Backoff backoff;
  while (!done()) {
    poll_failures();
    if (backoff.elapsed() > timeout_) throw_timeout(rank_, what, timeout_, backend_name_);
    backoff.pause();
  }
}

}  // namespace dist::detail::mpi
