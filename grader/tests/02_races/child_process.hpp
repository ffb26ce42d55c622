// Test helpers for code that runs on several threads: FirstError keeps what a thread threw (an
// exception escaping a std::thread would abort the whole test program), and run_in_child runs code
// that may deadlock in a forked child process with a time limit, so a test fails with a message
// instead of hanging (a deadlocked thread cannot be stopped or joined in-process).
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace distlab::testing {

/// Wrap each thread's body: first_error.wrap([&] { ... }). After joining, message() holds the
/// first exception's text ("" when none).
class FirstError {
 public:
  template <typename Fn>
  auto wrap(Fn fn) {
    return [this, fn]() mutable {
      try {
        fn();
      } catch (const std::exception& e) {
        set(e.what());
      } catch (...) {
        set("an exception that is not a std::exception");
      }
    };
  }
  std::string message() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }

 private:
  void set(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_.empty()) first_ = what.empty() ? "an exception with an empty message" : what;
  }
  mutable std::mutex mu_;
  std::string first_;
};

// ---- a child process with a time limit, for code that may deadlock --------------------------

struct ChildResult {
  bool finished = false;  // false: killed after the time limit
  std::string message;    // what the child wrote to the pipe: "ok", or what went wrong
};

/// Runs body in a forked child; body returns "" for success or a message for failure. The parent
/// waits at most limit_s seconds, then kills the child (a deadlock cannot be undone in-process).
/// Success travels through the pipe, not the exit status: under ThreadSanitizer a child inherits
/// the parent's report count and may exit with 66 although it found nothing itself (its own
/// reports go to stderr, where the grader sees them).
template <typename Body>
inline ChildResult run_in_child(Body body, double limit_s) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    std::string msg;
    try {
      msg = body();
    } catch (const std::exception& e) {
      msg = std::string("exception: ") + e.what();
    }
    if (msg.empty()) msg = "ok";
    const ssize_t ignored = write(fds[1], msg.data(), msg.size());
    (void)ignored;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  ChildResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      r.finished = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  char buf[512];
  ssize_t got = 0;
  while ((got = read(fds[0], buf, sizeof buf)) > 0)
    r.message.append(buf, static_cast<std::size_t>(got));
  close(fds[0]);
  return r;
}

}  // namespace distlab::testing
