// Point-to-point semantics: synchronous send, (source, tag) FIFO matching, Work handles, counters.
#include <dirent.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "distlab_testing.hpp"

using namespace distlab::testing;

namespace {

int threads_in_process() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
  }
  return n;
}

TEST(P2P, SendIsSynchronous) {
  // rank 1 posts its recv 100 ms late; rank 0's send must not return before that.
  std::atomic<bool> recv_posted{false};
  std::atomic<bool> send_returned_early{false};
  run_ranks(threads_options(2), [&] {
    std::vector<float> x(4, 1.f);
    if (dist::rank() == 0) {
      dist::send(std::span<const float>(x), 1);
      if (!recv_posted.load()) send_returned_early = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      recv_posted = true;
      dist::recv(std::span<float>(x), 0);
    }
  });
  EXPECT_FALSE(send_returned_early.load()) << "send returned before the matching recv was posted";
}

TEST(P2P, FifoPerSourceAndTag) {
  RankLog failures;
  run_ranks(threads_options(3), [&] {
    const int r = dist::rank();
    if (r == 0 || r == 1) {
      std::vector<dist::Work> works;
      std::vector<std::vector<int>> bufs;
      for (int k = 0; k < 5; ++k) bufs.push_back({r * 100 + k});
      for (int k = 0; k < 5; ++k)
        works.push_back(
            dist::isend(std::span<const int>(bufs[static_cast<std::size_t>(k)]), 2, k % 2));
      dist::wait_all(works);
    } else {
      // Receive in a different order than sent across tags and sources; within a (source, tag)
      // pair the order must be the send order.
      for (int src : {1, 0}) {
        for (int tag : {1, 0}) {
          int last = -1;
          for (int k = tag; k < 5; k += 2) {
            std::vector<int> v(1);
            dist::recv(std::span<int>(v), src, tag);
            if (v[0] != src * 100 + k)
              failures.fail(r, "from " + std::to_string(src) + " tag " + std::to_string(tag) +
                                   ": got " + std::to_string(v[0]));
            if (v[0] <= last) failures.fail(r, "out of order");
            last = v[0];
          }
        }
      }
    }
  });
  failures.check();
}

TEST(P2P, IsendIrecvAndWorkHandles) {
  RankLog failures;
  run_ranks(threads_options(2), [&] {
    const int r = dist::rank();
    std::vector<double> out(8, r + 0.5), in(8, -1);
    dist::Work rw = dist::irecv(std::span<double>(in), 1 - r, 7);
    dist::Work sw = dist::isend(std::span<const double>(out), 1 - r, 7);
    sw.wait();
    rw.wait();
    rw.wait();  // twice is fine
    if (!rw.is_completed() || !sw.is_completed()) failures.fail(r, "not completed after wait");
    if (in[3] != (1 - r) + 0.5) failures.fail(r, "wrong data");
    dist::Work empty;
    if (!empty.is_completed()) failures.fail(r, "a default Work is complete");
    empty.wait();
  });
  failures.check();
}

TEST(P2P, IrecvCompletesWhileRankPolls) {
  RankLog failures;
  run_ranks(threads_options(2), [&] {
    std::vector<int> v(3, dist::rank());
    if (dist::rank() == 0) {
      dist::Work w = dist::irecv(std::span<int>(v), 1);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!w.is_completed() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
      w.wait();
      if (v[2] != 1) failures.fail(0, "wrong data");
    } else {
      dist::send(std::span<const int>(v), 0);
    }
  });
  failures.check();
}

TEST(P2P, SendToSelfWithIsend) {
  RankLog failures;
  run_ranks(threads_options(1), [&] {
    std::vector<float> a{1, 2, 3}, b(3);
    dist::Work w = dist::isend(std::span<const float>(a), 0);
    dist::recv(std::span<float>(b), 0);
    w.wait();
    if (b[2] != 3) failures.fail(0, "wrong data");
  });
  failures.check();
}

TEST(P2P, ZeroLengthMessages) {
  RankLog failures;
  run_ranks(threads_options(2), [&] {
    std::vector<float> none;
    if (dist::rank() == 0) {
      dist::send(std::span<const float>(none), 1);
    } else {
      dist::recv(std::span<float>(none), 0);
    }
    const auto s = dist::stats();
    const std::uint64_t want = 1;
    if ((dist::rank() == 0 ? s.messages_sent : s.messages_received) != want)
      failures.fail(dist::rank(), "message not counted");
  });
  failures.check();
}

TEST(P2P, CountersPerPeer) {
  RankLog failures;
  run_ranks(threads_options(4), [&] {
    const int r = dist::rank();
    const int p = 4;
    // Ring shift of r+1 floats to the right.
    std::vector<float> out(static_cast<std::size_t>(r + 1)),
        in(static_cast<std::size_t>((r + p - 1) % p + 1));
    dist::Work w = dist::isend(std::span<const float>(out), (r + 1) % p);
    dist::recv(std::span<float>(in), (r + p - 1) % p);
    w.wait();
    auto s = dist::stats();
    const auto right = static_cast<std::size_t>((r + 1) % p),
               left = static_cast<std::size_t>((r + p - 1) % p);
    if (s.messages_sent != 1 || s.bytes_sent != 4u * static_cast<unsigned>(r + 1))
      failures.fail(r, "sent totals");
    if (s.messages_received != 1 || s.bytes_received != 4u * (left + 1))
      failures.fail(r, "received totals");
    if (s.messages_sent_to.size() != 4 || s.messages_sent_to[right] != 1 ||
        s.bytes_sent_to[right] != 4u * static_cast<unsigned>(r + 1))
      failures.fail(r, "sent per peer");
    if (s.messages_received_from[left] != 1 || s.bytes_received_from[left] != 4u * (left + 1))
      failures.fail(r, "received per peer");
    for (std::size_t q = 0; q < 4; ++q) {
      if (q != right && s.messages_sent_to[q] != 0) failures.fail(r, "sent to a wrong peer");
      if (q != left && s.messages_received_from[q] != 0)
        failures.fail(r, "received from a wrong peer");
    }
    dist::barrier();
    dist::barrier();
    s = dist::stats();
    if (s.barriers != 2 || s.builtin_collectives != 0)
      failures.fail(r, "barriers not counted as barriers");
    dist::reset_stats();
    s = dist::stats();
    if (s.messages_sent != 0 || s.bytes_received != 0 || s.barriers != 0 ||
        s.messages_sent_to.size() != 4 || s.messages_sent_to[right] != 0) {
      failures.fail(r, "reset_stats did not reset");
    }
  });
  failures.check();
}

TEST(P2P, BuiltinCollectiveCountersFollowTheDocumentedAlgorithms) {
  RankLog failures;
  const int p = 5;
  run_ranks(threads_options(p), [&] {
    const int r = dist::rank();
    const std::size_t n = 1000;  // floats; chunks of 200
    std::vector<float> v(n, 1.f);
    dist::all_reduce(std::span<float>(v));
    auto s = dist::stats();
    // Ring: 2(p-1) messages of n/p floats to the right neighbour, the same from the left.
    const std::uint64_t msgs = 2 * (p - 1), bytes = 2 * (p - 1) * (n / p) * 4;
    if (s.messages_sent != msgs || s.bytes_sent != bytes || s.messages_received != msgs ||
        s.bytes_received != bytes)
      failures.fail(r, "all_reduce traffic: sent " + std::to_string(s.messages_sent) + " msgs " +
                           std::to_string(s.bytes_sent) + " B");
    if (s.messages_sent_to[static_cast<std::size_t>((r + 1) % p)] != msgs)
      failures.fail(r, "all_reduce: not all to the right neighbour");
    if (s.builtin_collectives != 1) failures.fail(r, "builtin_collectives");
    dist::reset_stats();
    // Binomial broadcast from root 0: vr receives once (unless root) and sends to vr + 2^k for
    // every 2^k > vr with vr + 2^k < p.
    dist::broadcast(std::span<float>(v), 0);
    s = dist::stats();
    std::uint64_t children = 0;
    for (int mask = 1; mask < p; mask <<= 1) {
      if (r < mask && r + mask < p) ++children;
    }
    if (s.messages_sent != children || s.messages_received != (r == 0 ? 0u : 1u) ||
        s.bytes_sent != children * n * 4)
      failures.fail(r, "broadcast traffic: sent " + std::to_string(s.messages_sent));
  });
  failures.check();
}

TEST(Launch, NoThreadLeftRunningAfterLaunch) {
  run_ranks(threads_options(2),
            [] {});  // sanitizers start a helper thread at the first thread creation
  const int before = threads_in_process();
  run_ranks(threads_options(8), [] { dist::barrier(); });
  try {
    dist::launch(threads_options(6), [] {
      if (dist::rank() == 3) throw std::runtime_error("boom");
      dist::barrier();
    });
  } catch (const std::exception&) {
  }
  EXPECT_EQ(threads_in_process(), before);
}

TEST(Launch, OutsideLaunchAndNestedLaunchAreErrors) {
  EXPECT_THROW(dist::rank(), dist::Error);
  EXPECT_FALSE(dist::in_launch());
  const std::string msg =
      expect_error<dist::Error>(threads_options(2), [] { dist::launch(2, [] {}); });
  EXPECT_TRUE(contains(msg, "from inside a rank")) << msg;
}

TEST(Launch, RankWorldSizeAndOptions) {
  RankLog failures;
  auto o = threads_options(3);
  o.network.latency_s = 1e-3;
  run_ranks(o, [&] {
    if (dist::world_size() != 3) failures.fail(dist::rank(), "world_size");
    if (!dist::in_launch()) failures.fail(dist::rank(), "in_launch");
    if (dist::options().network.latency_s != 1e-3) failures.fail(dist::rank(), "options()");
  });
  failures.check();
}

}  // namespace
