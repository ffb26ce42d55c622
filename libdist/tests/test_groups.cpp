// Process groups on the threads backend: creating them (new_group, split by colour and key, nested
// splits), the values of every built-in collective on groups of several shapes (contiguous,
// strided, permuted, a single rank, several groups at once), point-to-point inside a group (group
// ranks, isolation from other groups' messages, recv_any), per-peer counters in world ranks, the
// simulated time of a group inside one node against one across nodes of a two-level network, the
// trace, and the mismatch, deadlock and misuse messages.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unistd.h>

#include "distlab_testing.hpp"

using namespace distlab::testing;

namespace {

constexpr int kLongTimeoutMs = 20000;

// The value world rank w contributes at index i.
double value(int w, std::size_t i) { return 100.0 * (w + 1) + static_cast<double>(i); }

std::vector<double> contribution(int w, std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(w, i);
  return v;
}

// Runs every built-in collective on `g` (the calling rank must be a member) and checks the values
// against what the group's world ranks contribute.
void check_all_collectives(const dist::Group& g) {
  const int p = g.size();
  const int me = g.rank();
  const int w = dist::rank();
  ASSERT_GE(me, 0);
  ASSERT_EQ(g.world_rank(me), w);
  const std::vector<int> members = g.world_ranks();
  const std::size_t n = 5;  // not a multiple of most group sizes: uneven ring chunks
  auto sum_at = [&](std::size_t i) {
    double s = 0;
    for (int m : members) s += value(m, i);
    return s;
  };
  const int root = p - 1;  // a group rank that is not world rank 0 in most shapes

  {  // broadcast
    auto x = me == root ? contribution(w, n) : std::vector<double>(n, -1);
    dist::broadcast(std::span<double>(x), root, g);
    EXPECT_EQ(x, contribution(members[static_cast<std::size_t>(root)], n)) << g.name();
  }
  {  // reduce (sum) to root
    auto x = contribution(w, n);
    dist::reduce(std::span<double>(x), root, dist::ReduceOp::Sum, g);
    if (me == root) {
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(x[i], sum_at(i)) << g.name() << " i=" << i;
    }
  }
  {  // all_reduce: sum, avg (divides by the group's size), max
    auto x = contribution(w, n);
    dist::all_reduce(std::span<double>(x), dist::ReduceOp::Sum, g);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(x[i], sum_at(i)) << g.name();
    auto a = contribution(w, n);
    dist::all_reduce(std::span<double>(a), dist::ReduceOp::Avg, g);
    for (std::size_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(a[i], sum_at(i) / p) << g.name();
    std::vector<std::int32_t> m = {w, -w};
    dist::all_reduce(std::span<std::int32_t>(m), dist::ReduceOp::Max, g);
    EXPECT_EQ(m[0], *std::max_element(members.begin(), members.end())) << g.name();
    EXPECT_EQ(m[1], -*std::min_element(members.begin(), members.end())) << g.name();
  }
  {  // all_reduce_async
    auto x = contribution(w, n);
    dist::Work h = dist::all_reduce_async(std::span<double>(x), dist::ReduceOp::Sum, g);
    h.wait();
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(x[i], sum_at(i)) << g.name();
  }
  {  // gather to root: block q is group rank q's contribution
    const auto in = contribution(w, n);
    std::vector<double> out(me == root ? n * static_cast<std::size_t>(p) : 0);
    dist::gather(std::span<const double>(in), std::span<double>(out), root, g);
    if (me == root) {
      for (int q = 0; q < p; ++q) {
        for (std::size_t i = 0; i < n; ++i)
          EXPECT_EQ(out[static_cast<std::size_t>(q) * n + i], value(members[q], i)) << g.name();
      }
    }
  }
  {  // all_gather
    const auto in = contribution(w, n);
    std::vector<double> out(n * static_cast<std::size_t>(p));
    dist::all_gather(std::span<const double>(in), std::span<double>(out), g);
    for (int q = 0; q < p; ++q) {
      for (std::size_t i = 0; i < n; ++i)
        EXPECT_EQ(out[static_cast<std::size_t>(q) * n + i], value(members[q], i)) << g.name();
    }
  }
  {  // scatter from root: group rank q gets block q
    std::vector<double> in;
    if (me == root) {
      for (int q = 0; q < p; ++q) {
        for (std::size_t i = 0; i < n; ++i) in.push_back(1000.0 * q + static_cast<double>(i));
      }
    }
    std::vector<double> out(n, -1);
    dist::scatter(std::span<const double>(in), std::span<double>(out), root, g);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], 1000.0 * me + static_cast<double>(i));
  }
  {  // reduce_scatter: group rank q gets the sum of everyone's block q
    std::vector<double> in(n * static_cast<std::size_t>(p));
    for (std::size_t k = 0; k < in.size(); ++k) in[k] = static_cast<double>(w * 1000 + k);
    std::vector<double> out(n);
    dist::reduce_scatter(std::span<const double>(in), std::span<double>(out), dist::ReduceOp::Sum,
                         g);
    for (std::size_t i = 0; i < n; ++i) {
      double want = 0;
      for (int m : members) want += m * 1000 + static_cast<double>(me) * n + i;
      EXPECT_EQ(out[i], want) << g.name() << " i=" << i;
    }
  }
  dist::barrier(g);
}

}  // namespace

TEST(Groups, NewGroupMembersAndRanks) {
  run_ranks(threads_options(4), [] {
    const dist::Group g = dist::new_group({3, 1});
    EXPECT_EQ(g.size(), 2);
    EXPECT_EQ(dist::world_size(g), 2);
    EXPECT_EQ(g.name(), "ranks{3,1}");
    EXPECT_EQ(g.world_ranks(), (std::vector<int>{3, 1}));
    EXPECT_EQ(g.world_rank(0), 3);
    EXPECT_EQ(g.group_rank(1), 1);
    EXPECT_EQ(g.group_rank(0), -1);
    const int w = dist::rank();
    const int want = w == 3 ? 0 : w == 1 ? 1 : -1;
    EXPECT_EQ(g.rank(), want);
    EXPECT_EQ(dist::rank(g), want);
    EXPECT_EQ(g.is_member(), want >= 0);
    EXPECT_FALSE(g.is_world());
    const dist::Group world;
    EXPECT_TRUE(world.is_world());
    EXPECT_EQ(world.size(), 4);
    EXPECT_EQ(world.rank(), w);
    EXPECT_EQ(world.name(), "world");
  });
}

TEST(Groups, SplitByColourAndKey) {
  run_ranks(threads_options(6), [] {
    const int w = dist::rank();
    // Colour by parity; key reverses the order; rank 5 stays out.
    const dist::Group g = dist::split(w == 5 ? dist::kNoColor : w % 2, -w, {}, "par");
    // Equal keys: ties by parent rank.
    const dist::Group h = dist::split(0, 7);
    EXPECT_EQ(h.world_ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(h.name(), "world.c0");
    if (w == 5) {
      EXPECT_FALSE(g.is_member());
      EXPECT_EQ(g.rank(), -1);
      return;
    }
    const std::vector<int> want = w % 2 == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
    EXPECT_EQ(g.world_ranks(), want);
    EXPECT_EQ(g.name(), "par" + std::to_string(w % 2));
    EXPECT_EQ(g.world_rank(g.rank()), w);
    check_all_collectives(g);
  });
}

TEST(Groups, NestedSplitOfAGroup) {
  run_ranks(threads_options(8), [] {
    const int w = dist::rank();
    const dist::Group node = dist::split(w / 4, w);  // {0..3}, {4..7}
    const dist::Group pair = dist::split(node.rank() / 2, node.rank(), node, "pair");
    // Group ranks of `node` 0,1 -> one pair; 2,3 -> another.
    const int base = (w / 2) * 2;
    EXPECT_EQ(pair.world_ranks(), (std::vector<int>{base, base + 1}));
    check_all_collectives(pair);
    check_all_collectives(node);
  });
}

TEST(Groups, EveryCollectiveOnManyShapes) {
  run_ranks(threads_options(6), [] {
    const int w = dist::rank();
    const dist::Group contiguous = dist::new_group({0, 1, 2});
    const dist::Group strided = dist::new_group({1, 3, 5});
    const dist::Group permuted = dist::new_group({4, 0, 5, 2});
    const dist::Group single = dist::new_group({2});
    const dist::Group halves = dist::split(w / 3, 0);  // two groups at the same time
    const dist::Group everyone = dist::new_group({5, 4, 3, 2, 1, 0});
    for (const dist::Group* g : {&contiguous, &strided, &permuted, &single, &halves, &everyone}) {
      if (g->is_member()) check_all_collectives(*g);
    }
    check_all_collectives(dist::world());
  });
}

TEST(Groups, PointToPointUsesGroupRanksAndStaysInItsGroup) {
  run_ranks(threads_options(4), [] {
    const int w = dist::rank();
    const dist::Group g = dist::new_group({2, 0, 3});  // group ranks: 2->0, 0->1, 3->2
    // A ring in group ranks.
    if (g.is_member()) {
      const int me = g.rank(), p = g.size();
      std::vector<std::int64_t> out = {w}, in = {-1};
      dist::Work s = dist::isend(std::span<const std::int64_t>(out), (me + 1) % p, 3, g);
      dist::recv(std::span<std::int64_t>(in), (me + p - 1) % p, 3, g);
      s.wait();
      EXPECT_EQ(in[0], g.world_rank((me + p - 1) % p));
    }
    // Same world source and tag on the world and on the group: each recv takes its own group's
    // message, whatever the order of posting.
    if (w == 2) {  // group rank 0
      const std::vector<float> a = {1.f}, b = {2.f};
      dist::Work x = dist::isend(std::span<const float>(a), 1, 0, g);  // to world rank 0
      dist::Work y = dist::isend(std::span<const float>(b), 0, 0);     // to world rank 0
      x.wait();
      y.wait();
    } else if (w == 0) {
      std::vector<float> from_world(1), from_group(1);
      dist::recv(std::span<float>(from_world), 2, 0);
      dist::recv(std::span<float>(from_group), 0, 0, g);
      EXPECT_EQ(from_world[0], 2.f);
      EXPECT_EQ(from_group[0], 1.f);
    }
    // recv_any on a group returns a group rank.
    if (w == 3) {  // group rank 2
      std::vector<double> x(2, 7.0);
      dist::send(std::span<const double>(x), 1, 9, g);  // to world rank 0
    } else if (w == 0) {
      std::vector<double> x(2);
      EXPECT_EQ(dist::recv_any(std::span<double>(x), 9, g), 2);
      EXPECT_EQ(x[1], 7.0);
    }
  });
}

TEST(Groups, CountersAreInWorldRanks) {
  run_ranks(threads_options(4), [] {
    const int w = dist::rank();
    const dist::Group g = dist::new_group({1, 3});
    dist::reset_stats();
    if (w == 1) {
      std::vector<float> x(16);
      dist::send(std::span<const float>(x), 1, 0, g);  // group rank 1 = world rank 3
    } else if (w == 3) {
      std::vector<float> x(16);
      dist::recv(std::span<float>(x), 0, 0, g);
    }
    const dist::Stats s = dist::stats();
    if (w == 1) {
      EXPECT_EQ(s.bytes_sent_to[3], 64u);
      EXPECT_EQ(s.bytes_sent_to[1], 0u);
      EXPECT_EQ(s.messages_sent, 1u);
    }
    if (w == 3) {
      EXPECT_EQ(s.bytes_received_from[1], 64u);
    }
    // A built-in all_reduce on {1, 3} (ring, p = 2): one message each way between 1 and 3 per
    // phase, nothing to or from 0 and 2.
    dist::reset_stats();
    if (g.is_member()) {
      std::vector<double> x(8, 1.0);
      dist::all_reduce(std::span<double>(x), dist::ReduceOp::Sum, g);
    }
    const dist::Stats t = dist::stats();
    if (g.is_member()) {
      const int other = w == 1 ? 3 : 1;
      EXPECT_EQ(t.messages_sent_to[static_cast<std::size_t>(other)], 2u);
      EXPECT_EQ(t.bytes_sent_to[static_cast<std::size_t>(other)], 64u);  // 2 chunks of 4 doubles
      EXPECT_EQ(t.messages_sent, 2u);
      EXPECT_EQ(t.builtin_collectives, 1u);
    } else {
      EXPECT_EQ(t.messages_sent, 0u);
      EXPECT_EQ(t.builtin_collectives, 0u);
    }
  });
}

TEST(Groups, TwoLevelNetworkGroupInsideANodeIsFast) {
  // 4 ranks, 2 per node. all_reduce of n bytes on a pair: ring with p = 2 is 2 steps of
  // alpha + (n/2) beta, with the link between the two world ranks.
  const std::size_t count = 1 << 16;  // doubles
  const double n = static_cast<double>(count * sizeof(double));
  auto o = threads_options(4);
  o.network = dist::NetworkModel::two_level(2);
  const dist::NetworkModel& net = o.network;
  std::vector<double> t(4, -1);
  run_ranks(o, [&] {
    const int w = dist::rank();
    const dist::Group inside = dist::new_group({0, 1});  // one node
    const dist::Group across = dist::new_group({2, 0});  // ranks 0 and 2: two nodes
    std::vector<double> x(count, 1.0);
    if (inside.is_member()) dist::all_reduce(std::span<double>(x), dist::ReduceOp::Sum, inside);
    t[static_cast<std::size_t>(w)] = dist::sim_time();
    dist::barrier();  // clocks: max over ranks
    const double t0 = dist::sim_time();
    if (across.is_member()) {
      dist::all_reduce(std::span<double>(x), dist::ReduceOp::Sum, across);
      const double took = dist::sim_time() - t0;
      EXPECT_NEAR(took, 2 * (net.inter_node_latency_s + n / 2 / net.inter_node_bandwidth_Bps),
                  1e-12);
    }
  });
  const double want_inside = 2 * (net.latency_s + n / 2 / net.bandwidth_Bps);
  EXPECT_NEAR(t[0], want_inside, 1e-12);
  EXPECT_NEAR(t[1], want_inside, 1e-12);
  EXPECT_EQ(t[2], 0.0);  // a group's collective charges only its members
  EXPECT_EQ(t[3], 0.0);
  const double want_across = 2 * (net.inter_node_latency_s + n / 2 / net.inter_node_bandwidth_Bps);
  EXPECT_GT(want_across / want_inside, 10.0);
}

TEST(Groups, GroupCreationCostsNothingAndIsDeterministic) {
  auto o = threads_options(4);
  std::vector<double> t(4, -1);
  run_ranks(o, [&] {
    dist::sim_compute(1e-3 * dist::rank());
    const dist::Group g = dist::split(dist::rank() % 2, 0);
    t[static_cast<std::size_t>(dist::rank())] = dist::sim_time();
    EXPECT_EQ(dist::stats().builtin_collectives, 0u);
    EXPECT_EQ(dist::stats().messages_sent, 0u);
  });
  for (int r = 0; r < 4; ++r) EXPECT_DOUBLE_EQ(t[static_cast<std::size_t>(r)], 1e-3 * r);
}

TEST(Groups, TraceNamesTheGroup) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("distlab_groups_trace_" + std::to_string(::getpid()) + ".json"))
                               .string();
  auto o = threads_options(2);
  o.trace_path = path;
  run_ranks(o, [] {
    const dist::Group g = dist::new_group({1, 0}, "tp");
    std::vector<float> x(4, 1.f);
    dist::all_reduce(std::span<float>(x), dist::ReduceOp::Sum, g);
    if (g.rank() == 0) dist::send(std::span<const float>(x), 1, 0, g);
    if (g.rank() == 1) dist::recv(std::span<float>(x), 0, 0, g);
  });
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  const auto doc = nlohmann::json::parse(f);
  int coll = 0, p2p = 0;
  std::map<int, std::string> track_name;  // a track per (rank, group): "rank R group NAME"
  for (const auto& ev : doc["traceEvents"]) {
    if (ev.value("ph", "") == "M" && ev.value("name", "") == "thread_name")
      track_name[ev["tid"].get<int>()] = ev["args"]["name"].get<std::string>();
  }
  for (const auto& ev : doc["traceEvents"]) {
    if (ev.value("ph", "") != "X") continue;
    const std::string track = track_name[ev["tid"].get<int>()];
    EXPECT_TRUE(track == "rank 0 group tp" || track == "rank 1 group tp") << track;
    ASSERT_TRUE(ev["args"].contains("group")) << ev.dump();
    EXPECT_EQ(ev["args"]["group"], "tp");
    if (ev.value("cat", "") == "collective") {
      ++coll;
      EXPECT_NE(ev["name"].get<std::string>().find("on group 'tp'"), std::string::npos);
    } else {
      ++p2p;
    }
  }
  EXPECT_EQ(coll, 2);
  EXPECT_EQ(p2p, 2);
  std::remove(path.c_str());
}

TEST(Groups, DifferentListsAreAMismatch) {
  const std::string msg = expect_error<dist::MismatchError>(threads_options(3), [] {
    dist::new_group(dist::rank() == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1});
  });
  EXPECT_TRUE(contains(msg, "collective mismatch")) << msg;
  EXPECT_TRUE(contains(msg, "new_group(ranks {0, 1})")) << msg;
  EXPECT_TRUE(contains(msg, "new_group(ranks {0, 2})")) << msg;
}

TEST(Groups, CollectiveMismatchInsideAGroupNamesIt) {
  const std::string msg = expect_error<dist::MismatchError>(threads_options(4), [] {
    const dist::Group g = dist::new_group({1, 2}, "tp0");
    std::vector<float> x(8);
    if (dist::rank() == 1) dist::all_reduce(std::span<float>(x), dist::ReduceOp::Sum, g);
    if (dist::rank() == 2) dist::broadcast(std::span<float>(x), 0, g);
  });
  EXPECT_TRUE(contains(msg, "on group 'tp0'")) << msg;
  EXPECT_TRUE(contains(msg, "all_reduce(8 floats, sum)")) << msg;
  EXPECT_TRUE(contains(msg, "broadcast(8 floats, src=0)")) << msg;
}

TEST(Groups, MembersInCollectivesOfDifferentGroupsDeadlock) {
  const std::string msg = expect_error<dist::DeadlockError>(threads_options(2, kLongTimeoutMs), [] {
    const dist::Group g = dist::new_group({0, 1}, "dp");
    std::vector<float> x(4);
    if (dist::rank() == 0) {
      dist::all_reduce(std::span<float>(x), dist::ReduceOp::Sum, g);
    } else {
      dist::all_reduce(std::span<float>(x));
    }
  });
  EXPECT_TRUE(contains(msg, "deadlock")) << msg;
  EXPECT_TRUE(contains(msg, "all_reduce(4 floats, sum) on group 'dp'")) << msg;
  EXPECT_TRUE(contains(msg, "same order")) << "hint missing: " << msg;
}

TEST(Groups, ACollectiveOnlySomeMembersCalledNamesOnlyMembers) {
  const std::string msg = expect_error<dist::DeadlockError>(threads_options(3, kLongTimeoutMs), [] {
    const dist::Group g = dist::new_group({0, 1}, "tp");
    std::vector<float> x(4);
    if (dist::rank() == 0) dist::all_reduce(std::span<float>(x), dist::ReduceOp::Sum, g);
    if (dist::rank() == 1) dist::recv(std::span<float>(x), 2);
  });
  EXPECT_TRUE(contains(msg, "rank 0 blocked in all_reduce(4 floats, sum) on group 'tp'")) << msg;
  EXPECT_TRUE(contains(msg, "rank(s) 1 (blocked in point-to-point calls) did not call")) << msg;
  EXPECT_FALSE(contains(msg, "rank(s) 2 (already finished)")) << msg;
}

TEST(Groups, SendAndRecvOnDifferentGroupsDeadlock) {
  const std::string msg = expect_error<dist::DeadlockError>(threads_options(2, kLongTimeoutMs), [] {
    const dist::Group g = dist::new_group({0, 1}, "pp");
    std::vector<float> x(4);
    if (dist::rank() == 0) {
      dist::send(std::span<const float>(x), 1, 0, g);
    } else {
      dist::recv(std::span<float>(x), 0, 0);
    }
  });
  EXPECT_TRUE(contains(msg, "send(dst=1 [world rank 1], tag=0, 4 floats) on group 'pp'")) << msg;
  EXPECT_TRUE(contains(msg, "different groups never match")) << "hint missing: " << msg;
}

TEST(Groups, NonMembersAndOutOfRangeRanksAreRefused) {
  std::string msg = expect_error<dist::Error>(threads_options(3), [] {
    const dist::Group g = dist::new_group({0, 1}, "tp");
    std::vector<float> x(4);
    if (dist::rank() == 2) dist::all_reduce(std::span<float>(x), dist::ReduceOp::Sum, g);
  });
  EXPECT_TRUE(contains(msg, "rank 2: all_reduce on group 'tp': this rank is not a member")) << msg;
  msg = expect_error<dist::Error>(threads_options(3), [] {
    const dist::Group g = dist::new_group({0, 1}, "tp");
    std::vector<float> x(4);
    if (dist::rank() == 0) dist::send(std::span<const float>(x), 2, 0, g);
  });
  EXPECT_TRUE(contains(msg, "send(dst=2): dst must be a rank in [0, 2) of group 'tp'")) << msg;
  // A Group is the creating rank's, in its own launch.
  std::vector<dist::Group> kept(2);
  run_ranks(threads_options(2), [&] {
    kept[static_cast<std::size_t>(dist::rank())] = dist::new_group({0, 1});
  });
  msg = expect_error<dist::Error>(threads_options(2), [&] {
    std::vector<float> x(1);
    dist::all_reduce(std::span<float>(x), dist::ReduceOp::Sum,
                     kept[static_cast<std::size_t>(dist::rank())]);
  });
  EXPECT_TRUE(contains(msg, "created by another rank or in another launch")) << msg;
  msg = expect_error<dist::Error>(threads_options(2), [] { dist::new_group({0, 0}); });
  EXPECT_TRUE(contains(msg, "listed twice")) << msg;
  msg = expect_error<dist::Error>(threads_options(2), [] { dist::split(-2, 0); });
  EXPECT_TRUE(contains(msg, "kNoColor")) << msg;
}
