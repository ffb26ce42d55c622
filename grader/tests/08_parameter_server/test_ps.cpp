// Public tests of 08_parameter_server. Values: synchronous training through one or k servers
// equals the oracle (the mean gradient over the workers: 06's data parallelism) after every
// step. Traffic and simulated time: closed forms. Asynchronous: deterministic on the threads
// backend, faster than synchronous with a straggler, still training; bounded staleness never
// exceeds its bound.
#include <gtest/gtest.h>

#include <map>

#include "ps_harness.hpp"

namespace {

using namespace pstest;
using distlab::testing::run_ranks;
using distlab::testing::threads_options;

const datasets::Split& small_data() {
  static const datasets::Split data = mlp::make_data(small_config());
  return data;
}

// ---- Task 2: values -----------------------------------------------------------------------------

void sync_values(const std::vector<int>& worker_counts, int servers) {
  const mlp::Config c = small_config();
  for (int workers : worker_counts) {
    const auto ref = oracle(c, small_data(), workers, 3);
    const SyncRun run = run_sync(c, small_data(), workers, servers, 3);
    expect_sync_values(run, ref, 0, workers + servers, sync_name(workers, servers));
  }
}

TEST(SyncValues, OneServer) { sync_values({1, 2, 3, 4}, 1); }
TEST(SyncValues, TwoServersUnevenShards) { sync_values({2, 3}, 2); }
TEST(SyncValues, ThreeServersUnevenShards) { sync_values({2, 4}, 3); }

TEST(SyncValues, EqualsDataParallelAllReduce) {
  // The same steps through 06's all_reduce_gradients on `workers` ranks.
  const mlp::Config c = small_config();
  const int workers = 3, steps = 3;
  std::vector<std::vector<float>> dp_weights;
  run_ranks(threads_options(workers), [&] {
    mlp::MLP model(c, c.seed + 2);
    mlp::SGD opt(model.parameters(), c.learning_rate);
    const datasets::BatchLoader loader(small_data().train, c.batch_size, c.seed + 3);
    mlp::Matrix x, probs, dlogits;
    mlp::Labels y;
    for (int s = 0; s < steps; ++s) {
      loader.load(dp::global_batch_index(s, dist::rank(), workers), x, y);
      const mlp::Matrix& logits = model.forward(x);
      mlp::softmax_cross_entropy_forward(logits, y, probs);
      mlp::softmax_cross_entropy_backward(probs, y, dlogits);
      model.backward(dlogits);
      dp::all_reduce_gradients(model);
      opt.step();
      if (dist::rank() == 0) dp_weights.push_back(ps::flat_values(model));
    }
  });
  const SyncRun run = run_sync(c, small_data(), workers, 2, steps);
  expect_sync_values(run, dp_weights, 0, workers + 2, "vs 06 all_reduce_gradients");
}

// ---- Task 2: traffic ----------------------------------------------------------------------------

void traffic(int workers, int servers) {
  const mlp::Config c = small_config();
  const std::size_t n = num_params(c);
  const int steps = 2;
  const SyncRun run = run_sync(c, small_data(), workers, servers, steps);
  const int world = workers + servers;
  const std::string what = sync_name(workers, servers);
  for (int r = 0; r < world; ++r) {
    const dist::Stats& st = run.ranks[static_cast<std::size_t>(r)].stats;
    ASSERT_EQ(st.bytes_sent_to.size(), static_cast<std::size_t>(world))
        << "rank " << r << " did not finish";
    EXPECT_EQ(st.builtin_collectives, 0u) << what << ": rank " << r << " called a collective";
    for (int q = 0; q < world; ++q) {
      const auto Q = static_cast<std::size_t>(q);
      std::uint64_t msgs = 0, bytes = 0;  // r -> q per run
      const bool r_server = r < servers, q_server = q < servers;
      if (r_server != q_server) {
        const int server = r_server ? r : q;
        msgs = static_cast<std::uint64_t>(steps);
        bytes = msgs * 4 * ps::shard_range(n, servers, server).size();
      }
      EXPECT_EQ(st.messages_sent_to[Q], msgs) << what << ": messages rank " << r << " -> " << q;
      EXPECT_EQ(st.bytes_sent_to[Q], bytes) << what << ": bytes rank " << r << " -> " << q;
      EXPECT_EQ(st.messages_received_from[Q], msgs)
          << what << ": messages rank " << r << " <- " << q;
      EXPECT_EQ(st.bytes_received_from[Q], bytes) << what << ": bytes rank " << r << " <- " << q;
    }
  }
}

TEST(Traffic, OneServer) {
  traffic(1, 1);
  traffic(4, 1);
}
TEST(Traffic, ShardedServers) {
  traffic(3, 2);
  traffic(2, 3);
}

// ---- Task 2: simulated time ---------------------------------------------------------------------

void step_time(int workers, int servers) {
  dist::NetworkModel net;
  net.latency_s = 2e-6;
  net.bandwidth_Bps = 1e9;
  const std::size_t n = 6000;  // divisible by 1, 2, 3: equal shards
  const double got = ps::measure_server_step(workers, servers, n, net);
  const double want = ps::formula_server_step(workers, servers, n, net);
  EXPECT_NEAR(got, want, 0.01 * want)
      << sync_name(workers, servers) << ": (2w + k - 1)(alpha + (n/k) beta)";

  // With a reduction cost gamma > 0 the server sums the workers' parts with dist::reduce_into,
  // which charges each reduction of a shard (4 (n/k) gamma) to its clock: at least the one after
  // the last part arrives, at most all w of them after the arrivals.
  dist::NetworkModel slow = net;
  slow.reduce_Bps = 4e9;  // one reduction of a shard: a quarter of its message's bandwidth time
  const double red =
      4.0 * static_cast<double>(n / static_cast<std::size_t>(servers)) / slow.reduce_Bps;
  const double with_gamma = ps::measure_server_step(workers, servers, n, slow);
  EXPECT_GE(with_gamma, want + 0.99 * red)
      << sync_name(workers, servers) << ", gamma = 1/" << slow.reduce_Bps << " s/B: the step took "
      << with_gamma * 1e6 << " us, not even one reduction of a shard (" << red * 1e6
      << " us) more than without reduction cost (" << want * 1e6
      << " us): sum the workers' parts with dist::reduce_into, which charges the reduction";
  EXPECT_LE(with_gamma, 1.01 * (want + workers * red))
      << sync_name(workers, servers) << ", gamma = 1/" << slow.reduce_Bps << " s/B: the step took "
      << with_gamma * 1e6 << " us, more than the messages and all " << workers
      << " reductions one after another (" << (want + workers * red) * 1e6 << " us)";
}

TEST(SimulatedTime, OneServerIsTwoWMessageTimes) {
  for (int w : {1, 2, 4, 7}) step_time(w, 1);
}
TEST(SimulatedTime, ShardedServers) {
  for (int w : {2, 5}) {
    step_time(w, 2);
    step_time(w, 3);
  }
}
TEST(SimulatedTime, OneServerGrowsWithWorkersTheRingDoesNot) {
  dist::NetworkModel net;
  net.latency_s = 1e-6;
  net.bandwidth_Bps = 1e9;
  const std::size_t n = 24000;
  const double s2 = ps::measure_server_step(2, 1, n, net),
               s8 = ps::measure_server_step(8, 1, n, net);
  const double r2 = ps::measure_ring_step(2, n, net), r8 = ps::measure_ring_step(8, n, net);
  EXPECT_GT(s8, 3.5 * s2) << "one server: 8 workers " << s8 << " s vs 2 workers " << s2 << " s";
  EXPECT_LT(r8, 2.0 * r2) << "ring: 8 workers " << r8 << " s vs 2 workers " << r2 << " s";
  EXPECT_LT(ps::measure_server_step(8, 4, n, net), 0.5 * s8) << "4 servers share the load";
}

// ---- Tasks 3 and 4: asynchronous, bounded staleness ---------------------------------------------

TEST(Async, SameRunTwiceIsBitIdentical) {
  const mlp::Config c = small_config();
  const AsyncRun a = run_async(c, small_data(), 3, 40, -1, 1e-3, 4.0);
  const AsyncRun b = run_async(c, small_data(), 3, 40, -1, 1e-3, 4.0);
  ASSERT_EQ(a.log.source.size(), 40u);
  EXPECT_EQ(a.log.source, b.log.source);
  EXPECT_EQ(a.log.staleness, b.log.staleness);
  EXPECT_EQ(a.log.time, b.log.time);
  EXPECT_EQ(a.weights, b.weights) << "the weights differ between two identical runs";
}

TEST(Async, EqualWorkersGiveStalenessWMinusOne) {
  // Equal speeds: the first round is applied in rank order (staleness 0, 1, ..., w-1); afterwards
  // w-1 other updates land between a worker's pull and its push.
  const mlp::Config c = small_config();
  const int w = 4, updates = 20;
  const AsyncRun run = run_async(c, small_data(), w, updates, -1, 1e-3, 1.0);
  ASSERT_EQ(run.log.staleness.size(), static_cast<std::size_t>(updates));
  for (int i = 0; i < updates; ++i) {
    EXPECT_EQ(run.log.staleness[static_cast<std::size_t>(i)], std::min(i, w - 1)) << "update " << i;
    EXPECT_EQ(run.log.source[static_cast<std::size_t>(i)], 1 + i % w) << "update " << i;
  }
}

TEST(Async, WeightsReplayFromTheLog) {
  // The server's weights equal a one-process replay of its log: each update is the gradient of
  // the worker's next batch at the version the staleness names, applied on its own.
  const mlp::Config c = small_config();
  for (double straggler : {1.0, 4.0}) {
    const AsyncRun run = run_async(c, small_data(), 3, 30, -1, 1e-3, straggler);
    ASSERT_EQ(run.log.source.size(), 30u);
    const std::vector<float> want = replay_async(c, small_data(), 3, run.log);
    EXPECT_TRUE(distlab::testing::elements_near(run.weights, want, kRelTol, kAbsTol))
        << "straggler " << straggler;
  }
}

TEST(Async, EveryWorkerStopsAndPushesAreCounted) {
  const mlp::Config c = small_config();
  const AsyncRun run = run_async(c, small_data(), 3, 25, -1, 1e-3, 4.0);
  ASSERT_EQ(run.log.source.size(), 25u);
  ASSERT_EQ(run.log.time.size(), 25u);
  std::map<int, int> applied;
  for (int s : run.log.source) ++applied[s];
  int total = 0;
  for (int k = 0; k < 3; ++k) {
    // Each worker pushed what was applied plus at most one gradient that met the stop.
    const int pushed = run.pushed[static_cast<std::size_t>(k)];
    ASSERT_GE(pushed, 0) << "worker " << k << " did not return from async_worker";
    EXPECT_GE(pushed, applied[k + 1]) << "worker " << k;
    EXPECT_LE(pushed, applied[k + 1] + 1) << "worker " << k;
    total += pushed;
    // One push message per gradient, one reply each.
    ASSERT_EQ(run.stats[static_cast<std::size_t>(k + 1)].messages_sent_to.size(), 4u);
    EXPECT_EQ(run.stats[static_cast<std::size_t>(k + 1)].messages_sent_to[0],
              static_cast<std::uint64_t>(pushed));
  }
  EXPECT_EQ(run.stats[0].messages_sent, static_cast<std::uint64_t>(total));
  EXPECT_TRUE(std::is_sorted(run.log.time.begin(), run.log.time.end()));
}

TEST(Async, WithAStragglerAsyncIsFasterThanSync) {
  ps::PSConfig pc;
  pc.model = small_config();
  pc.model.niters = 10;
  pc.model.log_every = 1000;
  pc.compute_s = 1e-3;
  pc.straggler = 4;
  const int world = 5;  // 4 workers
  double t_sync = 0, t_async = 0;
  for (ps::Mode m : {ps::Mode::Sync, ps::Mode::Async}) {
    pc.mode = m;
    double t = 0;
    std::mutex mu;
    run_ranks(threads_options(world, 20000), [&] {
      const ps::RunResult r = ps::train_ps(pc, small_data());
      std::lock_guard<std::mutex> g(mu);
      if (dist::rank() == 0) t = r.sim_s;
    });
    (m == ps::Mode::Sync ? t_sync : t_async) = t;
  }
  // Sync waits for the straggler every step: >= 10 x 4 ms. Async applies the same 40 gradients
  // mostly from the three fast workers.
  EXPECT_GE(t_sync, 10 * 4e-3);
  EXPECT_LT(t_async, 0.6 * t_sync) << "async " << t_async << " s vs sync " << t_sync << " s";
}

TEST(Async, StillTrains) {
  mlp::Config c = small_config();
  const AsyncRun run = run_async(c, small_data(), 4, 200, -1, 1e-3, 4.0);
  mlp::MLP model(c, c.seed + 2);
  const float before = mlp::evaluate_loss(model, small_data().test);
  ps::set_values(model, run.weights);
  const float after = mlp::evaluate_loss(model, small_data().test);
  EXPECT_LT(after, 0.8f * before) << "held-out loss " << before << " -> " << after;
}

TEST(Ssp, MayProceedRule) {
  EXPECT_TRUE(ps::ssp_may_proceed(3, 3, 0));
  EXPECT_FALSE(ps::ssp_may_proceed(4, 3, 0));
  EXPECT_TRUE(ps::ssp_may_proceed(5, 3, 2));
  EXPECT_FALSE(ps::ssp_may_proceed(6, 3, 2));
  EXPECT_TRUE(ps::ssp_may_proceed(100, 0, -1));
  EXPECT_TRUE(ps::ssp_may_proceed(100, 0, -2)) << "every staleness < 0 is fully asynchronous";
  EXPECT_TRUE(ps::ssp_may_proceed(7, 3, -100)) << "every staleness < 0 is fully asynchronous";
  EXPECT_FALSE(ps::ssp_may_proceed(1, 0, 0)) << "staleness 0 is lock-step";
  EXPECT_TRUE(ps::ssp_may_proceed(3, 0, 3));
  EXPECT_FALSE(ps::ssp_may_proceed(4, 0, 3));
}

TEST(Ssp, BoundIsNeverExceededAndIsReached) {
  const mlp::Config c = small_config();
  for (int s : {0, 1, 3}) {
    const AsyncRun run = run_async(c, small_data(), 3, 36, s, 1e-3, 4.0);
    ASSERT_EQ(run.log.source.size(), 36u) << "s=" << s;
    EXPECT_LE(run.log.max_lead, s) << "s=" << s << ": ServerLog::max_lead exceeds the bound";
    EXPECT_EQ(run.log.max_lead, s)
        << "s=" << s << ": with a 4x straggler the fast workers are released exactly s pushes "
        << "ahead of the slowest, so ServerLog::max_lead (the largest lead when released) is s";
    EXPECT_EQ(replayed_max_lead(run.log, 3), s)
        << "s=" << s << ": with a 4x straggler the fast workers must run exactly s pushes ahead";
  }
}

TEST(Ssp, ZeroIsLockStep) {
  const mlp::Config c = small_config();
  const AsyncRun run = run_async(c, small_data(), 3, 18, 0, 1e-3, 4.0);
  ASSERT_EQ(run.log.source.size(), 18u);
  for (std::size_t round = 0; round < 6; ++round) {
    std::vector<int> who(run.log.source.begin() + static_cast<std::ptrdiff_t>(3 * round),
                         run.log.source.begin() + static_cast<std::ptrdiff_t>(3 * round + 3));
    std::sort(who.begin(), who.end());
    EXPECT_EQ(who, (std::vector<int>{1, 2, 3})) << "round " << round;
  }
}

}  // namespace
