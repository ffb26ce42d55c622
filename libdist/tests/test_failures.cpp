// Failure is loud and fast: deadlocks, mismatches, exceptions, timeouts and bad arguments are
// reported with the ranks and calls involved, within seconds, never as a hang.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "dist/backend.hpp"
#include "distlab_testing.hpp"

using namespace distlab::testing;

namespace {

// Deadlocks are found at once, not after the timeout: use a long timeout and a short bound.
constexpr int kLongTimeoutMs = 20000;
constexpr double kFast = 2.0;  // seconds

TEST(Deadlock, BothSidesSendFirst) {
  double secs = 0;
  const std::string msg = expect_error<dist::DeadlockError>(
      threads_options(2, kLongTimeoutMs),
      [] {
        std::vector<float> x(16), y(16);
        dist::send(std::span<const float>(x), 1 - dist::rank());
        dist::recv(std::span<float>(y), 1 - dist::rank());
      },
      &secs);
  EXPECT_LT(secs, kFast);
  EXPECT_TRUE(contains(msg, "deadlock")) << msg;
  EXPECT_TRUE(contains(msg, "rank 0 blocked in send(dst=1, tag=0, 16 floats)")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 blocked in send(dst=0, tag=0, 16 floats)")) << msg;
  EXPECT_TRUE(contains(msg, "isend")) << "hint missing: " << msg;
  EXPECT_TRUE(contains(msg, "parity")) << "hint missing: " << msg;
}

// Each blocked call is named with the caller's file:line (dist.hpp's defaulted `where`): a
// blocking call where it was made, a wait by where its operation started, a collective too.
TEST(Deadlock, ReportNamesTheCallersFileAndLine) {
  static int send_line = 0, irecv_line = 0, all_reduce_line = 0;
  const std::string msg = expect_error<dist::DeadlockError>(threads_options(3, kLongTimeoutMs), [] {
    std::vector<float> x(4);
    if (dist::rank() == 0) {
      send_line = __LINE__ + 1;
      dist::send(std::span<const float>(x), 1, 1);
    } else if (dist::rank() == 1) {
      irecv_line = __LINE__ + 1;
      dist::Work w = dist::irecv(std::span<float>(x), 0, 2);
      w.wait();
    } else {
      all_reduce_line = __LINE__ + 1;
      dist::all_reduce(std::span<float>(x));
    }
  });
  const std::string file = "libdist/tests/test_failures.cpp:";
  EXPECT_TRUE(contains(msg, "rank 0 blocked in send(dst=1, tag=1, 4 floats) at " + file +
                                std::to_string(send_line) + ";"))
      << msg;
  EXPECT_TRUE(contains(msg, "rank 1 blocked in wait on irecv(src=0, tag=2, 4 floats) (started at " +
                                file + std::to_string(irecv_line) + ");"))
      << msg;
  EXPECT_TRUE(contains(msg, "rank 2 blocked in all_reduce(4 floats, sum) [collective call #0] at " +
                                file + std::to_string(all_reduce_line) + "."))
      << msg;
  // Outside a dist call there is no call site; a call's site is gone once it returns.
  EXPECT_EQ(dist::detail::call_site().file, nullptr);
  EXPECT_EQ(dist::detail::describe_call_site({}), "");
  EXPECT_EQ(
      dist::detail::describe_call_site({"/home/x/kit/build/grade/src/exercises/07_p/p.cpp", 12}),
      "exercises/07_p/p.cpp:12");
  EXPECT_EQ(dist::detail::describe_call_site({"/tmp/elsewhere/main.cpp", 3}),
            "/tmp/elsewhere/main.cpp:3");
}

TEST(Deadlock, CollectiveOnlySomeRanksCall) {
  double secs = 0;
  const std::string msg = expect_error<dist::DeadlockError>(
      threads_options(3, kLongTimeoutMs),
      [] {
        std::vector<double> v(8, 1.0);
        if (dist::rank() != 1) dist::all_reduce(std::span<double>(v));
      },
      &secs);
  EXPECT_LT(secs, kFast);
  EXPECT_TRUE(contains(msg, "rank 0 blocked in all_reduce(8 doubles, sum)")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 finished")) << msg;
  EXPECT_TRUE(contains(msg, "only some ranks")) << msg;
}

TEST(Deadlock, CollectiveAgainstPointToPoint) {
  double secs = 0;
  const std::string msg = expect_error<dist::DeadlockError>(
      threads_options(2, kLongTimeoutMs),
      [] {
        std::vector<float> v(4);
        if (dist::rank() == 0) {
          dist::barrier();
        } else {
          dist::recv(std::span<float>(v), 0);
        }
      },
      &secs);
  EXPECT_LT(secs, kFast);
  EXPECT_TRUE(contains(msg, "rank 0 blocked in barrier()")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 blocked in recv(src=0, tag=0, 4 floats)")) << msg;
}

TEST(Deadlock, RecvFromAFinishedRankAndWrongTag) {
  std::string msg = expect_error<dist::DeadlockError>(threads_options(2, kLongTimeoutMs), [] {
    std::vector<int> v(1);
    if (dist::rank() == 1) dist::recv(std::span<int>(v), 0);
  });
  EXPECT_TRUE(contains(msg, "rank 0 finished")) << msg;
  EXPECT_TRUE(contains(msg, "already finished")) << msg;
  msg = expect_error<dist::DeadlockError>(threads_options(2, kLongTimeoutMs), [] {
    std::vector<int> v(1);
    if (dist::rank() == 0) {
      dist::send(std::span<const int>(v), 1, 3);
    } else {
      dist::recv(std::span<int>(v), 0, 4);
    }
  });
  EXPECT_TRUE(contains(msg, "tag 3")) << msg;
  EXPECT_TRUE(contains(msg, "tag 4")) << msg;
}

TEST(Deadlock, WaitOnAnIrecvNobodySends) {
  const std::string msg = expect_error<dist::DeadlockError>(threads_options(3, kLongTimeoutMs), [] {
    std::vector<int> v(2);
    if (dist::rank() == 2) {
      dist::Work w = dist::irecv(std::span<int>(v), 0, 5);
      w.wait();
    }
    dist::barrier();
  });
  EXPECT_TRUE(contains(msg, "rank 2 blocked in wait on irecv(src=0, tag=5, 2 int32s)")) << msg;
  EXPECT_TRUE(contains(msg, "rank 0 blocked in barrier()")) << msg;
}

TEST(Deadlock, ReportedWithinASecondOfTheLastRankBlocking) {
  // Rank 1 blocks 300 ms after rank 0; the report must follow quickly.
  std::chrono::steady_clock::time_point last_block;
  double secs = 0;
  expect_error<dist::DeadlockError>(
      threads_options(2, kLongTimeoutMs),
      [&] {
        std::vector<float> x(1);
        if (dist::rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          last_block = std::chrono::steady_clock::now();
        }
        dist::recv(std::span<float>(x), 1 - dist::rank());
      },
      &secs);
  const double after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - last_block).count();
  std::printf("deadlock reported %.3f ms after the last rank blocked (launch included)\n",
              after * 1e3);
  EXPECT_LT(after, 1.0);
}

TEST(Mismatch, PointToPointSizes) {
  const std::string msg = expect_error<dist::MismatchError>(threads_options(2), [] {
    if (dist::rank() == 0) {
      std::vector<float> x(16);
      dist::send(std::span<const float>(x), 1);
    } else {
      std::vector<float> y(8);
      dist::recv(std::span<float>(y), 0);
    }
  });
  EXPECT_TRUE(contains(msg, "rank 0 sends 16 floats to rank 1")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 receives 8 floats from rank 0")) << msg;
}

TEST(Mismatch, PointToPointTypesOnBothRanks) {
  std::atomic<int> saw{0};
  const std::string msg = expect_error<dist::MismatchError>(threads_options(2), [&] {
    try {
      if (dist::rank() == 0) {
        std::vector<float> x(4);
        dist::send(std::span<const float>(x), 1);
      } else {
        std::vector<double> y(4);
        dist::recv(std::span<double>(y), 0);
      }
    } catch (const dist::MismatchError&) {
      ++saw;
      throw;
    }
  });
  EXPECT_EQ(saw.load(), 2) << "both ranks get the MismatchError";
  EXPECT_TRUE(contains(msg, "4 floats")) << msg;
  EXPECT_TRUE(contains(msg, "4 doubles")) << msg;
}

TEST(Mismatch, DifferentCollectives) {
  const std::string msg = expect_error<dist::MismatchError>(threads_options(3), [] {
    std::vector<float> v(16);
    if (dist::rank() == 2) {
      dist::broadcast(std::span<float>(v), 0);
    } else {
      dist::all_reduce(std::span<float>(v));
    }
  });
  EXPECT_TRUE(contains(msg, "all_reduce(16 floats, sum)")) << msg;
  EXPECT_TRUE(contains(msg, "broadcast(16 floats, src=0)")) << msg;
  EXPECT_TRUE(contains(msg, "rank 2")) << msg;
}

TEST(Mismatch, CollectiveCountsAcrossRanks) {
  const std::string msg = expect_error<dist::MismatchError>(threads_options(2), [] {
    std::vector<float> v(dist::rank() == 0 ? 10 : 12);
    dist::all_reduce(std::span<float>(v));
  });
  EXPECT_TRUE(contains(msg, "10 floats")) << msg;
  EXPECT_TRUE(contains(msg, "12 floats")) << msg;
}

TEST(Mismatch, CollectiveRootsAndOps) {
  std::string msg = expect_error<dist::MismatchError>(threads_options(2), [] {
    std::vector<int> v(3);
    dist::broadcast(std::span<int>(v), dist::rank());
  });
  EXPECT_TRUE(contains(msg, "src=0") && contains(msg, "src=1")) << msg;
  msg = expect_error<dist::MismatchError>(threads_options(2), [] {
    std::vector<int> v(3);
    dist::all_reduce(std::span<int>(v),
                     dist::rank() == 0 ? dist::ReduceOp::Sum : dist::ReduceOp::Max);
  });
  EXPECT_TRUE(contains(msg, "sum") && contains(msg, "max")) << msg;
}

TEST(Exceptions, FirstErrorIsRethrownAndOthersAreWoken) {
  std::atomic<int> woken{0};
  std::string woken_msg;
  std::mutex mu;
  double secs = 0;
  const std::string msg = expect_error<dist::Error>(
      threads_options(4, kLongTimeoutMs),
      [&] {
        try {
          if (dist::rank() == 2) throw std::runtime_error("boom");
          std::vector<float> v(4);
          dist::all_reduce(std::span<float>(v));
        } catch (const dist::RankFailedError& e) {
          ++woken;
          std::lock_guard<std::mutex> g(mu);
          woken_msg = e.what();
          throw;
        }
      },
      &secs);
  EXPECT_LT(secs, kFast);
  EXPECT_EQ(msg, "rank 2: boom");
  EXPECT_EQ(woken.load(), 3);
  EXPECT_TRUE(contains(woken_msg, "rank 2 failed: boom")) << woken_msg;
}

TEST(Exceptions, RankBusyInItsOwnCodeGetsTheErrorAtItsNextCall) {
  std::atomic<bool> got{false};
  expect_error<dist::Error>(threads_options(2, kLongTimeoutMs), [&] {
    if (dist::rank() == 0) throw std::logic_error("first");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    try {
      dist::barrier();
    } catch (const dist::RankFailedError&) {
      got = true;
      throw;
    }
  });
  EXPECT_TRUE(got.load());
}

TEST(Exceptions, WorkWaitRethrowsTheOperationsError) {
  std::atomic<int> rethrown{0};
  expect_error<dist::MismatchError>(threads_options(2), [&] {
    if (dist::rank() == 0) {
      std::vector<int> x(2);
      dist::Work w = dist::isend(std::span<const int>(x), 1);
      try {
        w.wait();
      } catch (const dist::MismatchError&) {
        ++rethrown;
      }
      try {
        w.wait();
      } catch (const dist::MismatchError&) {
        ++rethrown;
        throw;
      }
    } else {
      std::vector<int> y(3);
      dist::recv(std::span<int>(y), 0);
    }
  });
  EXPECT_EQ(rethrown.load(), 2);
}

TEST(Exceptions, AsyncWaitRethrowsWhenAnotherRankFailed) {
  std::atomic<bool> got{false};
  expect_error<dist::Error>(threads_options(2, kLongTimeoutMs), [&] {
    std::vector<float> v(4);
    if (dist::rank() == 1) throw std::runtime_error("rank 1 gives up");
    try {
      // The error comes from the call (if rank 1 already failed) or from wait().
      dist::Work w = dist::all_reduce_async(std::span<float>(v));
      w.wait();
    } catch (const dist::RankFailedError&) {
      got = true;
    }
  });
  EXPECT_TRUE(got.load());
}

TEST(Exceptions, UnwaitedWorkAtTheEndIsAnError) {
  const std::string msg = expect_error<dist::Error>(threads_options(2, kLongTimeoutMs), [] {
    std::vector<float> v(4);
    if (dist::rank() == 0) {
      dist::Work w = dist::irecv(std::span<float>(v), 1);
      (void)w;
    }
  });
  EXPECT_TRUE(contains(msg, "irecv(src=1")) << msg;
  EXPECT_TRUE(contains(msg, "wait()")) << msg;
}

TEST(Timeout, RankStuckInItsOwnCode) {
  double secs = 0;
  const std::string msg = expect_error<dist::TimeoutError>(
      threads_options(2, 300),
      [] {
        std::vector<float> v(4);
        if (dist::rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          dist::send(std::span<const float>(v), 0);
        } else {
          dist::recv(std::span<float>(v), 1);
        }
      },
      &secs);
  EXPECT_LT(secs, 5.0);
  EXPECT_TRUE(contains(msg, "rank 0")) << msg;
  EXPECT_TRUE(contains(msg, "recv(src=1, tag=0, 4 floats)")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 running its own code")) << msg;
}

TEST(Timeout, PollingIsCompletedForever) {
  double secs = 0;
  const std::string msg = expect_error<dist::TimeoutError>(
      threads_options(2, 300),
      [] {
        std::vector<float> v(2);
        if (dist::rank() == 0) {
          dist::Work w = dist::irecv(std::span<float>(v), 1, 9);
          while (!w.is_completed()) std::this_thread::yield();
        }
      },
      &secs);
  EXPECT_LT(secs, 5.0);
  EXPECT_TRUE(contains(msg, "rank 0 polled is_completed() on irecv(src=1, tag=9, 2 floats)"))
      << msg;
}

TEST(BadArguments, WorldSizeBelowOne) {
  EXPECT_THROW(dist::launch(0, [] {}), dist::Error);
  EXPECT_THROW(dist::launch(-3, [] {}), dist::Error);
}

TEST(BadArguments, PeerOutOfRange) {
  std::string msg = expect_error<dist::Error>(threads_options(2), [] {
    std::vector<float> v(1);
    if (dist::rank() == 0) dist::send(std::span<const float>(v), 2);
  });
  EXPECT_TRUE(contains(msg, "rank 0: send(dst=2)")) << msg;
  EXPECT_TRUE(contains(msg, "[0, 2)")) << msg;
  msg = expect_error<dist::Error>(threads_options(2), [] {
    std::vector<float> v(1);
    dist::recv(std::span<float>(v), -1);
  });
  EXPECT_TRUE(contains(msg, "src=-1")) << msg;
  msg = expect_error<dist::Error>(threads_options(3), [] {
    std::vector<float> v(1);
    dist::broadcast(std::span<float>(v), 3);
  });
  EXPECT_TRUE(contains(msg, "broadcast(src=3)")) << msg;
}

TEST(BadArguments, GatherScatterSizes) {
  std::string msg = expect_error<dist::Error>(threads_options(3), [] {
    std::vector<float> in(2), out(5);
    dist::gather(std::span<const float>(in), std::span<float>(out), 0);
  });
  EXPECT_TRUE(contains(msg, "rank 0: gather: out has 5 elements but must have 6")) << msg;
  msg = expect_error<dist::Error>(threads_options(3), [] {
    std::vector<float> in(4), out(2);
    dist::scatter(std::span<const float>(in), std::span<float>(out), 1);
  });
  EXPECT_TRUE(contains(msg, "scatter: in has 4 elements but must have 6")) << msg;
  msg = expect_error<dist::Error>(threads_options(2), [] {
    std::vector<float> in(2), out(3);
    dist::all_gather(std::span<const float>(in), std::span<float>(out));
  });
  EXPECT_TRUE(contains(msg, "all_gather")) << msg;
  msg = expect_error<dist::Error>(threads_options(2), [] {
    std::vector<float> in(3), out(2);
    dist::reduce_scatter(std::span<const float>(in), std::span<float>(out));
  });
  EXPECT_TRUE(contains(msg, "reduce_scatter")) << msg;
}

TEST(BadArguments, NegativeTagAndTimeout) {
  const std::string msg = expect_error<dist::Error>(threads_options(2), [] {
    std::vector<float> v(1);
    dist::send(std::span<const float>(v), 1 - dist::rank(), -1);
  });
  EXPECT_TRUE(contains(msg, "tag")) << msg;
  auto o = threads_options(2);
  o.timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(dist::launch(o, [] {}), dist::Error);
}

}  // namespace
