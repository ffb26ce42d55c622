// Hidden tests of 08_parameter_server: the public properties on other sizes and models (more
// workers, every server count with uneven shards, ReLU, other networks, other bounds), and the
// reduction cost that the server's dist::reduce_into charges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "ps_harness.hpp"

namespace {

using namespace pstest;
using distlab::testing::run_ranks;
using distlab::testing::threads_options;

/// 4 layers, ReLU, batch 5: 17*9 + 9*9 + 9*9 + 9*3 = 342 parameters (342 % 4 = 2, % 5 = 2).
mlp::Config other_config() {
  mlp::Config c;
  c.n_layers = 4;
  c.dim_in = 17;
  c.dim_hidden = 9;
  c.n_classes = 3;
  c.train_size = 400;
  c.test_size = 200;
  c.batch_size = 5;
  c.learning_rate = 0.3f;
  c.seed = 23;
  c.activation = mlp::Activation::ReLU;
  return c;
}

const datasets::Split& data_for(const mlp::Config& c) {
  static const datasets::Split small = mlp::make_data(small_config());
  static const datasets::Split other = mlp::make_data(other_config());
  return c.n_layers == 4 ? other : small;
}

TEST(HiddenSyncValues, EveryWorkerAndServerCount) {
  for (const mlp::Config& c : {small_config(), other_config()}) {
    for (int servers = 1; servers <= 3; ++servers) {
      for (int workers = 1; workers <= 8; ++workers) {
        if (c.n_layers == 3 && workers < 5) continue;  // the public tests cover these
        const auto ref = oracle(c, data_for(c), workers, 2);
        const SyncRun run = run_sync(c, data_for(c), workers, servers, 2);
        expect_sync_values(run, ref, 0, workers + servers, sync_name(workers, servers));
      }
    }
  }
}

TEST(HiddenSyncValues, FourAndFiveServers) {
  const mlp::Config c = other_config();
  for (int servers : {4, 5}) {
    const auto ref = oracle(c, data_for(c), 3, 2);
    const SyncRun run = run_sync(c, data_for(c), 3, servers, 2);
    expect_sync_values(run, ref, 0, 3 + servers, sync_name(3, servers));
  }
}

TEST(HiddenTraffic, ManyWorkersAndServers) {
  const mlp::Config c = other_config();
  const std::size_t n = num_params(c);
  for (auto [workers, servers] : {std::pair{7, 1}, std::pair{6, 3}, std::pair{2, 4}}) {
    const int steps = 3;
    const SyncRun run = run_sync(c, data_for(c), workers, servers, steps);
    const int world = workers + servers;
    for (int r = 0; r < world; ++r) {
      const dist::Stats& st = run.ranks[static_cast<std::size_t>(r)].stats;
      ASSERT_EQ(st.bytes_sent_to.size(), static_cast<std::size_t>(world))
          << "rank " << r << " did not finish";
      EXPECT_EQ(st.builtin_collectives, 0u) << "rank " << r;
      for (int q = 0; q < world; ++q) {
        const bool talk = (r < servers) != (q < servers);
        const int server = r < servers ? r : q;
        const std::uint64_t bytes =
            talk ? steps * 4 * ps::shard_range(n, servers, server).size() : 0;
        EXPECT_EQ(st.bytes_sent_to[static_cast<std::size_t>(q)], bytes)
            << sync_name(workers, servers) << ": rank " << r << " -> " << q;
        EXPECT_EQ(st.messages_sent_to[static_cast<std::size_t>(q)], talk ? steps : 0u)
            << sync_name(workers, servers) << ": rank " << r << " -> " << q;
      }
    }
  }
}

TEST(HiddenSimulatedTime, OtherNetworksAndSizes) {
  for (double latency : {0.0, 1e-5}) {
    dist::NetworkModel net;
    net.latency_s = latency;
    net.bandwidth_Bps = 2.5e9;
    const std::size_t n = 12000;
    for (int servers : {1, 2, 3, 4}) {
      for (int workers : {3, 8}) {
        const double got = ps::measure_server_step(workers, servers, n, net);
        const double want = ps::formula_server_step(workers, servers, n, net);
        EXPECT_NEAR(got, want, 0.01 * want)
            << sync_name(workers, servers) << ", latency " << latency;
      }
    }
  }
}

TEST(HiddenSimulatedTime, ServerChargesTheReductions) {
  // ps.hpp: the server sums the workers' parts with dist::reduce_into, which charges each
  // reduction (4 |shard| bytes / reduce_Bps) to its clock. With free communication the step is
  // those reductions alone: w of them in the reference; at least w - 1 for any sum of w parts.
  dist::NetworkModel net;
  net.latency_s = 0;
  net.bandwidth_Bps = 1e30;
  net.reduce_Bps = 1e9;
  const std::size_t n = 12000;  // divisible by 1, 2, 3: equal shards
  for (int servers : {1, 2, 3}) {
    for (int workers : {2, 3, 8}) {
      const double one = 4.0 * static_cast<double>(n / static_cast<std::size_t>(servers)) /
                         net.reduce_Bps;  // one reduction of a shard
      const double got = ps::measure_server_step(workers, servers, n, net);
      EXPECT_GE(got, 0.99 * (workers - 1) * one)
          << sync_name(workers, servers) << ", free communication, gamma = 1/" << net.reduce_Bps
          << " s/B: the step took " << got * 1e6 << " us, less than the " << workers - 1
          << " reductions of a shard that summing " << workers << " parts needs ("
          << (workers - 1) * one * 1e6 << " us): sum the parts with dist::reduce_into, which "
          << "charges the reduction to the simulated clock";
    }
  }
}

TEST(HiddenAsync, DeterministicWithManyWorkers) {
  const mlp::Config c = other_config();
  const AsyncRun a = run_async(c, data_for(c), 6, 60, -1, 5e-4, 3.0);
  const AsyncRun b = run_async(c, data_for(c), 6, 60, -1, 5e-4, 3.0);
  ASSERT_EQ(a.log.source.size(), 60u);
  EXPECT_EQ(a.log.source, b.log.source);
  EXPECT_EQ(a.log.staleness, b.log.staleness);
  EXPECT_EQ(a.weights, b.weights);
}

TEST(HiddenAsync, WeightsReplayFromTheLogWithBoundedStaleness) {
  const mlp::Config c = other_config();
  for (int s : {-1, 1}) {
    const AsyncRun run = run_async(c, data_for(c), 4, 50, s, 1e-3, 3.0);
    ASSERT_EQ(run.log.source.size(), 50u);
    const std::vector<float> want = replay_async(c, data_for(c), 4, run.log);
    EXPECT_TRUE(distlab::testing::elements_near(run.weights, want, kRelTol, kAbsTol)) << "s=" << s;
  }
}

TEST(HiddenAsync, EqualWorkersStalenessAndApplyOrder) {
  const mlp::Config c = other_config();
  const int w = 3, updates = 15;
  const AsyncRun run = run_async(c, data_for(c), w, updates, -1, 2e-3, 1.0);
  ASSERT_EQ(run.log.staleness.size(), static_cast<std::size_t>(updates));
  for (int i = 0; i < updates; ++i) {
    EXPECT_EQ(run.log.staleness[static_cast<std::size_t>(i)], std::min(i, w - 1)) << i;
  }
}

TEST(HiddenAsync, StragglerTwoWorkers) {
  ps::PSConfig pc;
  pc.model = other_config();
  pc.model.niters = 8;
  pc.model.log_every = 1000;
  pc.compute_s = 2e-3;
  pc.straggler = 4;
  double t[2] = {0, 0};
  for (ps::Mode m : {ps::Mode::Sync, ps::Mode::Async}) {
    pc.mode = m;
    std::mutex mu;
    run_ranks(threads_options(3, 20000), [&] {
      const ps::RunResult r = ps::train_ps(pc, data_for(pc.model));
      std::lock_guard<std::mutex> g(mu);
      if (dist::rank() == 0) t[m == ps::Mode::Sync ? 0 : 1] = r.sim_s;
    });
  }
  EXPECT_GE(t[0], 8 * 4 * 2e-3) << "sync waits for the 4x straggler every step";
  EXPECT_LT(t[1], 0.75 * t[0]) << "async " << t[1] << " s vs sync " << t[0] << " s";
}

TEST(HiddenAsync, StillTrainsOtherModel) {
  const mlp::Config c = other_config();
  const AsyncRun run = run_async(c, data_for(c), 3, 150, -1, 1e-3, 4.0);
  mlp::MLP model(c, c.seed + 2);
  const float before = mlp::evaluate_loss(model, data_for(c).test);
  ps::set_values(model, run.weights);
  const float after = mlp::evaluate_loss(model, data_for(c).test);
  EXPECT_LT(after, 0.9f * before) << before << " -> " << after;
}

TEST(HiddenSsp, OtherBoundsAndWorkers) {
  const mlp::Config c = other_config();
  for (auto [workers, s] : {std::pair{5, 2}, std::pair{4, 0}, std::pair{2, 4}}) {
    const AsyncRun run = run_async(c, data_for(c), workers, 40, s, 1e-3, 5.0);
    ASSERT_EQ(run.log.source.size(), 40u);
    EXPECT_EQ(run.log.max_lead, s) << workers << " workers, s=" << s
                                   << ": ServerLog::max_lead is the largest lead when released";
    EXPECT_EQ(replayed_max_lead(run.log, workers), s) << workers << " workers, s=" << s;
  }
}

TEST(HiddenSsp, MaxLeadReplaysTheReleaseRuleWithUnevenWorkers) {
  // Workers of uneven speed (factors 1 to 3.1), s = 0..3, 2..5 workers. The expected max_lead
  // is the server's documented rule replayed over the log's sources: after each update but the
  // last, every waiting worker that ssp_may_proceed lets go on is answered, and its lead (its
  // pushes - the slowest's) at that moment counts, whoever pushed. The replay also checks that
  // no worker pushed while it was held back.
  const mlp::Config c = other_config();
  const std::vector<double> speeds = {1.0, 2.3, 1.4, 3.1, 1.7};
  for (int workers = 2; workers <= 5; ++workers) {
    const std::vector<double> factors(speeds.begin(), speeds.begin() + workers);
    for (int s = 0; s <= 3; ++s) {
      const int updates = 36;
      const AsyncRun run = run_async(c, data_for(c), workers, updates, s, 1e-3, 1.0, factors);
      ASSERT_EQ(run.log.source.size(), static_cast<std::size_t>(updates));
      std::vector<int> pushes(static_cast<std::size_t>(workers), 0);
      std::vector<char> waiting(static_cast<std::size_t>(workers), 0);
      int want = 0;
      for (int i = 0; i < updates; ++i) {
        const int src = run.log.source[static_cast<std::size_t>(i)];
        ASSERT_TRUE(src >= 1 && src <= workers) << "update " << i << ": source " << src;
        const auto k = static_cast<std::size_t>(src - 1);
        ASSERT_FALSE(waiting[k]) << workers << " workers, s=" << s << ", update " << i
                                 << ": worker rank " << src
                                 << " pushed while it was held back (not answered)";
        ++pushes[k];
        waiting[k] = 1;
        if (i + 1 == updates) break;  // no reply carries weights after the last update
        const int slowest = *std::min_element(pushes.begin(), pushes.end());
        for (std::size_t q = 0; q < pushes.size(); ++q) {
          if (waiting[q] && pushes[q] - slowest <= s) {
            waiting[q] = 0;
            want = std::max(want, pushes[q] - slowest);
          }
        }
      }
      EXPECT_EQ(want, s) << workers << " workers, s=" << s
                         << ": workers this uneven reach the bound (and never pass it)";
      EXPECT_EQ(run.log.max_lead, want)
          << workers << " workers, s=" << s << ", speeds 1 to 3.1: ServerLog::max_lead is the "
          << "largest lead of a worker at the moment it is answered (replayed from the log)";
    }
  }
}

TEST(HiddenSsp, AWorkerBehindTheGivenSlowestIsNotAhead) {
  // "Yes when it is at most staleness pushes ahead": a worker with fewer pushes than the given
  // slowest count is behind it (a negative lead), so it may always proceed, whatever s >= 0 is.
  EXPECT_TRUE(ps::ssp_may_proceed(0, 2, 1)) << "0 pushes against 2 is 2 behind, not ahead";
  EXPECT_TRUE(ps::ssp_may_proceed(0, 1, 0)) << "1 behind with staleness 0";
  EXPECT_TRUE(ps::ssp_may_proceed(3, 10, 2)) << "7 behind with staleness 2";
  EXPECT_TRUE(ps::ssp_may_proceed(5, 9, 3)) << "4 behind with staleness 3";
  EXPECT_TRUE(ps::ssp_may_proceed(2, 5, 3)) << "3 behind with staleness 3";
  EXPECT_FALSE(ps::ssp_may_proceed(9, 5, 3)) << "4 ahead with staleness 3";
}

TEST(HiddenSsp, TheLargestBoundsAllowEveryLead) {
  // "Yes when it is at most `staleness` pushes ahead": with the largest bound an int holds, every
  // lead a run can reach is allowed (a bound added to the slowest count overflows there).
  const int most = std::numeric_limits<int>::max();
  EXPECT_TRUE(ps::ssp_may_proceed(5, 3, most)) << "2 ahead with staleness INT_MAX";
  EXPECT_TRUE(ps::ssp_may_proceed(1000, 0, most)) << "1000 ahead with staleness INT_MAX";
  EXPECT_TRUE(ps::ssp_may_proceed(most, 0, most)) << "INT_MAX ahead with staleness INT_MAX";
  EXPECT_TRUE(ps::ssp_may_proceed(7, 7, most - 1)) << "level with staleness INT_MAX - 1";
  EXPECT_FALSE(ps::ssp_may_proceed(most, 0, most - 1))
      << "INT_MAX ahead with staleness INT_MAX - 1";
}

TEST(HiddenSsp, AnUnreachableBoundIsAsync) {
  const mlp::Config c = small_config();
  const AsyncRun a = run_async(c, data_for(c), 3, 20, -1, 1e-3, 2.0);
  const AsyncRun b = run_async(c, data_for(c), 3, 20, 1000, 1e-3, 2.0);
  EXPECT_EQ(a.log.source, b.log.source);
  EXPECT_EQ(a.weights, b.weights);
}

TEST(HiddenAsyncCallback, OnUpdateGetsEachNewVersionAndItsWeights) {
  // ps.hpp: on_update is "called after each applied update with the new version and weights".
  const mlp::Config c = other_config();
  for (int s : {-1, 1}) {
    const AsyncRun run = run_async(c, data_for(c), 3, 12, s, 1e-3, 3.0);
    ASSERT_EQ(run.log.source.size(), 12u);
    std::vector<int> want(12);
    for (int i = 0; i < 12; ++i) want[static_cast<std::size_t>(i)] = i + 1;
    EXPECT_EQ(run.update_versions, want)
        << "s=" << s << ": on_update gets the new version (1 after the first update)";
    ASSERT_EQ(run.update_weights.size(), 12u);
    EXPECT_EQ(run.update_weights.back(), run.weights)
        << "s=" << s << ": the last call sees the weights after the last update";
    for (std::size_t i = 0; i < 12; ++i) {
      ps::ServerLog first;
      first.source.assign(run.log.source.begin(),
                          run.log.source.begin() + static_cast<std::ptrdiff_t>(i + 1));
      first.staleness.assign(run.log.staleness.begin(),
                             run.log.staleness.begin() + static_cast<std::ptrdiff_t>(i + 1));
      const std::vector<float> after = replay_async(c, data_for(c), 3, first);
      EXPECT_TRUE(distlab::testing::elements_near(run.update_weights[i], after, kRelTol, kAbsTol))
          << "s=" << s << ": call " << i + 1 << " must see the weights after update " << i + 1;
    }
  }
}

TEST(HiddenSsp, ReleasedWorkersAreAnsweredInWorkerOrder) {
  // Lock-step (s = 0) with equal workers: each round ends with the last push, then the server
  // answers the three waiting workers in worker order, so their next pushes arrive in that order.
  const mlp::Config c = other_config();
  const AsyncRun run = run_async(c, data_for(c), 3, 15, 0, 1e-3, 1.0);
  ASSERT_EQ(run.log.source.size(), 15u);
  for (std::size_t i = 0; i < 15; ++i) {
    EXPECT_EQ(run.log.source[i], 1 + static_cast<int>(i % 3))
        << "update " << i << ": released together, the workers are answered in worker order";
  }
}

TEST(HiddenAsyncLog, TimeIsTheServersClockRightAfterTheUpdate) {
  // One worker: its push i arrives at the server after compute + one push message; the log's time
  // is the server's clock right then (before the replies, whose blocking sends take time).
  const mlp::Config c = small_config();
  const double compute_s = 1e-3;
  const AsyncRun run = run_async(c, data_for(c), 1, 4, -1, compute_s, 1.0);
  ASSERT_EQ(run.log.time.size(), 4u);
  const std::size_t bytes = (run.weights.size() + 1) * sizeof(float);
  const dist::NetworkModel net;
  const double push = net.message_cost(1, 0, bytes), reply = net.message_cost(0, 1, bytes);
  ASSERT_GT(reply, 0.0);
  EXPECT_NEAR(run.log.time[0], compute_s + push, 1e-9)
      << "the first update is logged when the first push has arrived (compute " << compute_s
      << " s + one message " << push << " s), before any reply is sent";
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_NEAR(run.log.time[i] - run.log.time[i - 1], reply + compute_s + push, 1e-9)
        << "update " << i << ": one reply, one gradient and one push after the previous update";
  }
}

TEST(HiddenAsyncLog, MaxLeadIsRecordedWithoutABoundToo) {
  // Fully asynchronous (staleness < 0) with a straggler: the fast workers run ahead, and max_lead
  // is the largest lead of a worker when it is answered (every update but the last answers its
  // worker at once).
  const mlp::Config c = other_config();
  const int workers = 3, updates = 30;
  const AsyncRun run = run_async(c, data_for(c), workers, updates, -1, 1e-3, 4.0);
  ASSERT_EQ(run.log.source.size(), static_cast<std::size_t>(updates));
  std::vector<int> pushes(workers, 0);
  int want = 0;
  for (int i = 0; i + 1 < updates; ++i) {
    const auto k = static_cast<std::size_t>(run.log.source[static_cast<std::size_t>(i)] - 1);
    ++pushes[k];
    want = std::max(want, pushes[k] - *std::min_element(pushes.begin(), pushes.end()));
  }
  ASSERT_GT(want, 1) << "the test needs workers that run ahead";
  EXPECT_EQ(run.log.max_lead, want)
      << "ServerLog::max_lead under staleness -1: the largest lead of a worker when answered";
}

TEST(HiddenAsyncLog, TheLastUpdatesWorkerIsStoppedAtOnce) {
  // After the last update no reply carries weights: the worker whose push made it is waiting, so
  // it gets its stop reply at once and pushes nothing more (the others push one dropped gradient
  // at most).
  const mlp::Config c = small_config();
  for (int workers : {1, 2, 3}) {
    for (int s : {-1, 0, 2}) {
      const AsyncRun run = run_async(c, data_for(c), workers, 13, s, 1e-3, 2.0);
      ASSERT_EQ(run.log.source.size(), 13u);
      const int last = run.log.source.back();
      const auto applied =
          static_cast<int>(std::count(run.log.source.begin(), run.log.source.end(), last));
      EXPECT_EQ(run.pushed[static_cast<std::size_t>(last - 1)], applied)
          << workers << " workers, s=" << s << ": worker rank " << last
          << " made the last update and must get the stop reply at once, not weights for one "
             "more gradient";
    }
  }
}

TEST(HiddenAsyncLog, WaitingWorkersAreStoppedBeforeTheOthersPushAgain) {
  // At the last update the worker that made it is waiting, and a 4x straggler is still computing:
  // the waiting workers get their stop reply at once (after the last update, in worker order),
  // not after the straggler's next push has arrived.
  const mlp::Config c = small_config();
  const AsyncRun run = run_async(c, data_for(c), 3, 20, -1, 1e-3, 4.0);
  ASSERT_EQ(run.log.source.size(), 20u);
  const int last = run.log.source.back();
  const auto applied = [&](int rank) {
    return static_cast<int>(std::count(run.log.source.begin(), run.log.source.end(), rank));
  };
  ASSERT_EQ(run.pushed[2], applied(3) + 1) << "the test needs the straggler (rank 3) still "
                                              "computing at the last update";
  ASSERT_NE(last, 3);
  const std::size_t bytes = (run.weights.size() + 1) * sizeof(float);
  const double reply = dist::NetworkModel{}.message_cost(0, 1, bytes);
  EXPECT_LE(run.done_s[static_cast<std::size_t>(last - 1)], run.log.time.back() + 3 * reply + 1e-9)
      << "worker rank " << last << " made the last update and was waiting: its stop reply goes out "
      << "at once (" << run.log.time.back() << " s + at most 3 replies of " << reply
      << " s), not after the straggler's push (it returned at "
      << run.done_s[static_cast<std::size_t>(last - 1)] << " s)";
}

TEST(HiddenAsyncLog, ZeroUpdatesApplyNothing) {
  // "it applies exactly options.updates gradients": with 0, no gradient is applied or logged, the
  // weights stay as they were, and every worker is stopped after its first push.
  const mlp::Config c = small_config();
  const AsyncRun run = run_async(c, data_for(c), 2, 0, -1, 1e-3, 1.0);
  EXPECT_TRUE(run.log.source.empty()) << run.log.source.size() << " updates logged, 0 asked for";
  EXPECT_TRUE(run.log.time.empty());
  mlp::MLP model(c, c.seed + 2);
  EXPECT_EQ(run.weights, ps::flat_values(model)) << "0 updates: the weights must not change";
  for (std::size_t k = 0; k < 2; ++k) EXPECT_EQ(run.pushed[k], 1) << "worker " << k;
}

// One synchronous step (learning rate 1 unless given) of `servers` servers and 3 workers on
// hand-made gradients, worker w
// computing (3 - w) ms first, so the parts reach the servers in reverse worker order. Returns
// every rank's values after the step (a server: its shard; a worker: the pulled weights).
std::vector<std::vector<float>> reverse_arrival_step(const std::vector<std::vector<float>>& grads,
                                                     int servers, float learning_rate = 1.0f,
                                                     const std::vector<float>& initial = {}) {
  const int workers = static_cast<int>(grads.size());
  const std::size_t n = grads[0].size();
  std::vector<std::vector<float>> out(static_cast<std::size_t>(workers + servers));
  std::mutex mu;
  run_ranks(threads_options(workers + servers, 20000), [&] {
    const int rank = dist::rank();
    const ps::Layout layout{servers, dist::world_size()};
    std::vector<float> got;
    if (layout.is_server(rank)) {
      const ps::Range r = ps::shard_range(n, servers, rank);
      got.assign(r.size(), 0.0f);
      if (!initial.empty())
        got.assign(initial.begin() + static_cast<std::ptrdiff_t>(r.begin),
                   initial.begin() + static_cast<std::ptrdiff_t>(r.end));
      ps::server_step(got, learning_rate, layout);
    } else {
      const int k = layout.worker_index(rank);
      dist::sim_compute(1e-3 * (workers - k));
      ps::push_gradients(grads[static_cast<std::size_t>(k)], layout);
      got.assign(n, 0.0f);
      ps::pull_weights(got, layout);
    }
    std::lock_guard<std::mutex> g(mu);
    out[static_cast<std::size_t>(rank)] = std::move(got);
  });
  return out;
}

TEST(HiddenSyncValues, PartsAreAddedInWorkerOrderWhateverTheArrival) {
  // ps.hpp: "The parts are added in worker order (0, 1, ...) whatever order they arrive in". The
  // workers' parts arrive in reverse worker order (uneven compute), and the values make the float
  // sum depend on the order: ((g0 + g1) + g2) with g1 = 1e8 and g2 = 8 - 1e8 loses g0 (smaller
  // than half a float step at 1e8), (g2 + g1) + g0 keeps it.
  const int workers = 3;
  const std::size_t n = 7;
  std::vector<std::vector<float>> grads(workers, std::vector<float>(n));
  for (std::size_t i = 0; i < n; ++i) {
    grads[0][i] = 1.0f + static_cast<float>(i % 3);
    grads[1][i] = 1e8f * static_cast<float>(1 + i % 2);
    grads[2][i] = -grads[1][i] + 8.0f * static_cast<float>(1 + i % 2);  // exact in float
  }
  std::vector<float> want(n);  // lr = 1 from weights 0: -(sum in worker order / workers)
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int w = 0; w < workers; ++w) sum += grads[static_cast<std::size_t>(w)][i];
    want[i] = 0.0f - 1.0f * (sum / static_cast<float>(workers));
  }
  for (int servers : {1, 2}) {
    const auto out = reverse_arrival_step(grads, servers);
    for (int j = 0; j < servers; ++j) {
      const ps::Range r = ps::shard_range(n, servers, j);
      const std::vector<float> shard(want.begin() + static_cast<std::ptrdiff_t>(r.begin),
                                     want.begin() + static_cast<std::ptrdiff_t>(r.end));
      EXPECT_EQ(out[static_cast<std::size_t>(j)], shard)
          << servers << " server(s), server " << j
          << ": the parts arrived in reverse worker order; the sum must add them in worker order "
             "(bit for bit: float addition is not associative)";
    }
    for (int w = 0; w < workers; ++w) {
      EXPECT_EQ(out[static_cast<std::size_t>(servers + w)], want)
          << servers << " server(s), worker " << w << ": the pulled weights";
    }
  }
}

TEST(HiddenTraffic, MoreServersThanParameters) {
  // 3 parameters over 5 servers: servers 3 and 4 own empty shards, and still every worker sends
  // one message to every server and every server one message back to every worker (0 bytes).
  const std::size_t n = 3;
  const int servers = 5, workers = 2, steps = 2, world = servers + workers;
  std::vector<dist::Stats> stats(static_cast<std::size_t>(world));
  std::vector<std::vector<float>> weights(static_cast<std::size_t>(workers));
  std::mutex mu;
  run_ranks(threads_options(world, 20000), [&] {
    const int rank = dist::rank();
    const ps::Layout layout{servers, dist::world_size()};
    std::vector<float> w(n, 1.0f);
    if (layout.is_server(rank)) {
      const ps::Range r = ps::shard_range(n, servers, rank);
      std::vector<float> shard(r.size(), 1.0f);
      for (int s = 0; s < steps; ++s) ps::server_step(shard, 0.5f, layout);
    } else {
      const int k = layout.worker_index(rank);
      const std::vector<float> grad(n, static_cast<float>(k + 1));  // mean 1.5
      for (int s = 0; s < steps; ++s) {
        ps::push_gradients(grad, layout);
        ps::pull_weights(w, layout);
      }
    }
    std::lock_guard<std::mutex> g(mu);
    stats[static_cast<std::size_t>(rank)] = dist::stats();
    if (!layout.is_server(rank)) weights[static_cast<std::size_t>(rank - servers)] = w;
  });
  for (int k = 0; k < workers; ++k) {
    EXPECT_EQ(weights[static_cast<std::size_t>(k)], std::vector<float>(n, 1.0f - 2 * 0.5f * 1.5f))
        << "worker " << k;
  }
  for (int r = 0; r < world; ++r) {
    const dist::Stats& st = stats[static_cast<std::size_t>(r)];
    ASSERT_EQ(st.messages_sent_to.size(), static_cast<std::size_t>(world)) << "rank " << r;
    for (int q = 0; q < world; ++q) {
      const bool talk = (r < servers) != (q < servers);
      const int server = r < servers ? r : q;
      const std::uint64_t bytes = talk ? steps * 4 * ps::shard_range(n, servers, server).size() : 0;
      EXPECT_EQ(st.messages_sent_to[static_cast<std::size_t>(q)], talk ? steps : 0u)
          << "3 parameters over 5 servers (server " << server << "'s shard has "
          << ps::shard_range(n, servers, server).size() << "): rank " << r << " -> " << q
          << ": one message per step each way between every worker and every server, also for an "
             "empty shard";
      EXPECT_EQ(st.bytes_sent_to[static_cast<std::size_t>(q)], bytes)
          << "rank " << r << " -> " << q;
    }
  }
}

TEST(HiddenSsp, OneUpdateReleasesEveryWorkerItLetsGoOn) {
  // Lock-step (s = 0) with equal workers: the last push of a round lets all three go on, and
  // they are all answered right after that one update, so the next round's three pushes arrive
  // within a few message times of each other, not one gradient apart.
  const mlp::Config c = other_config();
  const double compute_s = 1e-3;
  const AsyncRun run = run_async(c, data_for(c), 3, 15, 0, compute_s, 1.0);
  ASSERT_EQ(run.log.time.size(), 15u);
  const std::size_t bytes = (run.weights.size() + 1) * sizeof(float);
  const dist::NetworkModel net;
  const double msg = net.message_cost(0, 1, bytes);
  ASSERT_LT(6 * msg, compute_s / 2) << "the test needs messages much shorter than a gradient";
  for (std::size_t round = 1; round < 5; ++round) {
    const double spread = run.log.time[3 * round + 2] - run.log.time[3 * round];
    EXPECT_LE(spread, 6 * msg + 1e-12)
        << "round " << round << ": its three updates span " << spread * 1e6
        << " us; released together after the previous round's last update, the three workers "
           "compute at the same time (a gradient is "
        << compute_s * 1e6 << " us, a message " << msg * 1e6 << " us)";
  }
}

TEST(HiddenAsyncLog, LatePushesAreStoppedAsTheyArrive) {
  // A 4x straggler is worker 0 (the lowest index), the two others are fast. At the last update
  // one fast worker is waiting and the other still computing: that one is stopped when its push
  // arrives, not after the straggler's (a later push of a lower worker index).
  const mlp::Config c = small_config();
  const double compute_s = 1e-3;
  int cases = 0;
  for (int updates = 10; updates <= 24; ++updates) {
    const AsyncRun run = run_async(c, data_for(c), 3, updates, -1, compute_s, 1.0, {4.0, 1.0, 1.0});
    ASSERT_EQ(run.log.source.size(), static_cast<std::size_t>(updates));
    const auto applied = [&](int rank) {
      return static_cast<int>(std::count(run.log.source.begin(), run.log.source.end(), rank));
    };
    const int last = run.log.source.back();
    if (last == 1 || run.pushed[0] != applied(1) + 1) continue;  // the straggler not computing
    const int other = last == 2 ? 3 : 2;                         // the fast one computing
    ASSERT_EQ(run.pushed[static_cast<std::size_t>(other - 1)], applied(other) + 1);
    const std::size_t bytes = (run.weights.size() + 1) * sizeof(float);
    const dist::NetworkModel net;
    const double msg = net.message_cost(1, 0, bytes);
    // Its push arrives at most a gradient and a message after the last update; the server then
    // has sent one stop reply (to the waiting worker) and sends this one.
    const double bound = run.log.time.back() + compute_s + 3 * msg + 1e-9;
    if (run.done_s[0] <= bound) continue;  // the straggler's push arrives early enough anyway
    ++cases;
    EXPECT_LE(run.done_s[static_cast<std::size_t>(other - 1)], bound)
        << updates << " updates: worker rank " << other << " was computing at the last update ("
        << run.log.time.back() << " s); its push arrives within a gradient (" << compute_s
        << " s) and must be answered with the stop reply at once, not after the straggler's "
           "push (rank 1 returned at "
        << run.done_s[0] << " s, rank " << other << " at "
        << run.done_s[static_cast<std::size_t>(other - 1)] << " s)";
  }
  EXPECT_GE(cases, 3) << "the test needs runs where the straggler pushes after a fast worker";
}

TEST(HiddenAsyncWorker, AStoppedWorkerKeepsTheLastWeightsItWasAnswered) {
  // The test is the server (rank 0): it answers three pushes with weights of its own (versions
  // 1, 2, 3) and the fourth with a stop reply whose weight slots hold a sentinel. The worker must
  // compute each gradient at the weights it was last answered with and, once stopped, still hold
  // version 3's weights: the stop reply carries no weights to continue from.
  constexpr std::size_t n = 7;
  constexpr int rounds = 3;
  constexpr float kSentinel = 99.0f;
  auto answer = [](int version) {
    std::vector<float> w(n);
    for (std::size_t i = 0; i < n; ++i)
      w[i] = 0.5f * static_cast<float>(version) + 0.01f * static_cast<float>(i);
    return w;
  };
  const ps::Layout layout{1, 2};
  std::vector<std::vector<float>> computed_at;  // the weights of each gradient call, in order
  std::vector<float> final_weights;
  int pushed = -1;
  std::vector<float> pushed_versions;
  run_ranks(threads_options(2), [&] {
    std::vector<float> msg(n + 1);
    if (dist::rank() == 0) {
      for (int v = 1; v <= rounds + 1; ++v) {
        dist::recv(std::span<float>(msg), 1, ps::kPushTag);
        pushed_versions.push_back(msg[n]);
        const std::vector<float> w = v <= rounds ? answer(v) : std::vector<float>(n, kSentinel);
        std::copy(w.begin(), w.end(), msg.begin());
        msg[n] = v <= rounds ? static_cast<float>(v) : ps::kStopVersion;
        dist::send(std::span<const float>(msg), 1, ps::kReplyTag);
      }
    } else {
      std::vector<float> w = answer(0);
      pushed = ps::async_worker(
          w,
          [&](std::span<const float> at, std::span<float> grad) {
            computed_at.emplace_back(at.begin(), at.end());
            std::fill(grad.begin(), grad.end(), 1.0f);
          },
          layout);
      final_weights = w;
    }
  });
  ASSERT_EQ(pushed, rounds + 1) << "three weight replies and a stop: four gradients pushed";
  ASSERT_EQ(computed_at.size(), static_cast<std::size_t>(rounds + 1));
  for (int v = 0; v <= rounds; ++v) {
    EXPECT_EQ(computed_at[static_cast<std::size_t>(v)], answer(v))
        << "gradient " << v << " must be computed at the weights of the reply with version " << v;
    EXPECT_EQ(pushed_versions[static_cast<std::size_t>(v)], static_cast<float>(v))
        << "push " << v << " must carry the version its gradient was computed on";
  }
  EXPECT_EQ(final_weights, answer(rounds))
      << "after the stop reply the worker must still hold the last weights it was answered with "
         "(version "
      << rounds << "), not the stop reply's weight slots (" << kSentinel << ")";
}

}  // namespace

TEST(HiddenSyncValues, TheStepIsTheLearningRateTimesTheMean) {
  // ps.hpp: "averages them (the sum over the workers divided by the number of workers ...)
  // applies SGD (shard -= learning_rate * mean)": with 3 workers (a division that rounds) and a
  // learning rate of 0.3, learning_rate * (sum / 3) and (learning_rate * sum) / 3 differ in the
  // last bit for some of these values; the step must be the first, bit for bit (06's all-reduce
  // data parallelism gives those bits).
  const int workers = 3;
  const std::size_t n = 10;
  const float lr = 0.3f;
  std::vector<std::vector<float>> grads(workers, std::vector<float>(n));
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<float>(i);
    grads[0][i] = 1.0f + 0.25f * x;
    grads[1][i] = 2.5f - 0.5f * x;
    grads[2][i] = 0.75f + 1.25f * x;
  }
  std::vector<float> want(n), scaled_sum_divided(n);
  int separating = 0;
  for (std::size_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int w = 0; w < workers; ++w) sum += grads[static_cast<std::size_t>(w)][i];
    const float mean = sum / static_cast<float>(workers);
    want[i] = 0.0f - lr * mean;
    scaled_sum_divided[i] = 0.0f - lr * sum / static_cast<float>(workers);
    if (want[i] != scaled_sum_divided[i]) ++separating;
  }
  ASSERT_GT(separating, 0) << "the test needs values where the two roundings differ";
  for (int servers : {1, 2}) {
    const auto out = reverse_arrival_step(grads, servers, lr);
    for (int j = 0; j < servers; ++j) {
      const ps::Range r = ps::shard_range(n, servers, j);
      const std::vector<float> shard(want.begin() + static_cast<std::ptrdiff_t>(r.begin),
                                     want.begin() + static_cast<std::ptrdiff_t>(r.end));
      EXPECT_EQ(out[static_cast<std::size_t>(j)], shard)
          << servers << " server(s), server " << j << ": the step must be learning_rate * mean "
          << "with mean = sum / workers (bit for bit), not (learning_rate * sum) / workers";
    }
    for (int w = 0; w < workers; ++w) {
      EXPECT_EQ(out[static_cast<std::size_t>(servers + w)], want)
          << servers << " server(s), worker " << w << ": the pulled weights";
    }
  }
}

TEST(HiddenSyncValues, TheUpdateRoundsTheProductThenTheDifference) {
  // ps.hpp: "applies SGD (shard -= learning_rate * mean) ... a fixed order gives the same bits":
  // the product rounded to float, then the difference rounded to float, from weights that are not
  // 0. A fused multiply-add rounds once and differs in the last bit for some of these values.
  const int workers = 2;
  const float lr = 0.1f;
  std::vector<std::vector<float>> grads(workers);
  std::vector<float> initial, want;
  int separating = 0;
  for (int i = 0; i < 64 && separating < 8; ++i) {
    const float g0 = 0.3f + 0.0137f * static_cast<float>(i),
                g1 = 0.7f - 0.0071f * static_cast<float>(i);
    const float w0 = 1.0f + 0.0213f * static_cast<float>(i);
    const float mean = (g0 + g1) / 2.0f;
    const volatile float product = lr * mean;  // rounded to float on its own
    const float step = w0 - product;
    grads[0].push_back(g0);
    grads[1].push_back(g1);
    initial.push_back(w0);
    want.push_back(step);
    if (step != std::fma(-lr, mean, w0)) ++separating;
  }
  ASSERT_GT(separating, 0) << "test bug: no value separates the two roundings";
  for (int servers : {1, 2}) {
    const auto out = reverse_arrival_step(grads, servers, lr, initial);
    for (int j = 0; j < servers; ++j) {
      const ps::Range r = ps::shard_range(want.size(), servers, j);
      const std::vector<float> shard(want.begin() + static_cast<std::ptrdiff_t>(r.begin),
                                     want.begin() + static_cast<std::ptrdiff_t>(r.end));
      EXPECT_EQ(out[static_cast<std::size_t>(j)], shard)
          << servers << " server(s), server " << j
          << ": shard -= learning_rate * mean, the product rounded, then the difference (bit for "
             "bit; a fused multiply-add rounds once)";
    }
  }
}

TEST(HiddenAsync, EachUpdateIsTheFloatStepBitForBit) {
  // ps.hpp: "each gradient is applied on its own: w -= learning_rate * g", in float: the product
  // rounded to float, then the difference rounded to float. The test is the one worker (rank 1)
  // and pushes hand-made gradients; for some of these values that differs in the last bit from
  // the step computed in double and rounded once, so the server's weights (every reply and the
  // end) must be the float steps, bit for bit, as a one-process replay of the log gives them.
  constexpr std::size_t n = 32;
  constexpr int updates = 3;
  const float lr = 0.3f;
  std::vector<float> start(n);
  std::vector<std::vector<float>> grads(updates, std::vector<float>(n));
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<float>(i);
    start[i] = 1.0f + 0.37f * x;
    for (int u = 0; u < updates; ++u) {
      grads[static_cast<std::size_t>(u)][i] = 0.71f + 0.113f * x * static_cast<float>(u + 1);
    }
  }
  // want[u]: the weights after u updates, each step in float.
  std::vector<std::vector<float>> want{start};
  int separating = 0;
  for (int u = 0; u < updates; ++u) {
    std::vector<float> next = want.back();
    for (std::size_t i = 0; i < n; ++i) {
      const float g = grads[static_cast<std::size_t>(u)][i];
      const float prev = next[i];
      next[i] -= lr * g;
      const auto once = static_cast<float>(static_cast<double>(prev) -
                                           static_cast<double>(lr) * static_cast<double>(g));
      if (once != next[i]) ++separating;
    }
    want.push_back(std::move(next));
  }
  ASSERT_GT(separating, 0) << "the test needs values where rounding once and twice differ";
  std::vector<float> server_weights = start;
  std::vector<std::vector<float>> replies;
  std::vector<float> versions;
  ps::ServerLog log;
  run_ranks(threads_options(2), [&] {
    const ps::Layout layout{1, 2};
    if (dist::rank() == 0) {
      ps::AsyncOptions o;
      o.updates = updates;
      o.learning_rate = lr;
      log = ps::async_server(server_weights, o, layout);
      return;
    }
    std::vector<float> msg(n + 1);
    float version = 0.0f;
    for (int u = 0; u <= updates; ++u) {  // at most one push more than the updates
      const std::vector<float>& g = grads[static_cast<std::size_t>(std::min(u, updates - 1))];
      std::copy(g.begin(), g.end(), msg.begin());
      msg[n] = version;
      dist::send(std::span<const float>(msg), 0, ps::kPushTag);
      dist::recv(std::span<float>(msg), 0, ps::kReplyTag);
      versions.push_back(msg[n]);
      if (msg[n] == ps::kStopVersion) break;
      replies.emplace_back(msg.begin(), msg.begin() + static_cast<std::ptrdiff_t>(n));
      version = msg[n];
    }
  });
  ASSERT_EQ(log.source.size(), static_cast<std::size_t>(updates));
  ASSERT_EQ(replies.size(), static_cast<std::size_t>(updates - 1))
      << "one worker, " << updates << " updates: weight replies after all but the last";
  for (std::size_t u = 0; u < replies.size(); ++u) {
    EXPECT_EQ(versions[u], static_cast<float>(u + 1)) << "reply " << u;
    EXPECT_EQ(replies[u], want[u + 1])
        << "the weights after update " << u + 1 << " must be w -= learning_rate * g in float, "
        << "bit for bit (not computed in double and rounded once)";
  }
  EXPECT_EQ(server_weights, want.back())
      << "the server's weights after " << updates << " updates must be the float steps, bit "
      << "for bit (w -= learning_rate * g, not computed in double and rounded once)";
}

TEST(HiddenAsyncLog, WaitingWorkersAreStoppedInWorkerOrder) {
  // Lock-step (s = 0), equal workers, 15 updates of 3 workers: at the last update all three are
  // waiting, so the stop replies all go out at once, in worker order; each blocking send takes a
  // reply's time on the simulated network, so worker k returns after about k + 1 replies.
  const mlp::Config c = other_config();
  const AsyncRun run = run_async(c, data_for(c), 3, 15, 0, 1e-3, 1.0);
  ASSERT_EQ(run.log.source.size(), 15u);
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(run.pushed[k], 5) << "worker " << k << ": the test needs all waiting at the end";
  }
  const std::size_t bytes = (run.weights.size() + 1) * sizeof(float);
  const double reply = dist::NetworkModel{}.message_cost(0, 1, bytes);
  ASSERT_GT(reply, 0.0);
  const double last = run.log.time.back();
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_LE(run.done_s[k], last + static_cast<double>(k + 1) * reply + 1e-9)
        << "worker rank " << k + 1 << " was waiting at the last update: the stop replies go out "
        << "at once, in worker order, so it returns by " << last << " s + " << k + 1
        << " replies of " << reply << " s (it returned at " << run.done_s[k] << " s)";
    if (k > 0) {
      EXPECT_LT(run.done_s[k - 1], run.done_s[k])
          << "the waiting workers must be stopped in worker order: rank " << k << " returned at "
          << run.done_s[k - 1] << " s, rank " << k + 1 << " at " << run.done_s[k] << " s";
    }
  }
}

TEST(HiddenSyncTags, EachSideWorksWithAPeerThatUsesTheDocumentedTags) {
  // ps.hpp: gradients go worker -> server j with kGradTag, weights server j -> worker with
  // kWeightsTag ("a gradient can never be taken for weights"). The test plays one side itself
  // with exactly those tags: a server or a worker that uses another tag (the same one both ways,
  // say) never matches it, and the run ends in a deadlock report instead of the weights.
  const int servers = 2, workers = 2, world = servers + workers;
  const std::size_t n = 7;  // shards of 4 and 3
  const float lr = 0.5f;
  std::vector<std::vector<float>> grads(workers, std::vector<float>(n));
  for (std::size_t i = 0; i < n; ++i) {
    grads[0][i] = 1.0f + static_cast<float>(i);
    grads[1][i] = 3.0f - static_cast<float>(i);
  }
  std::vector<float> want(n);  // from weights 1: 1 - lr * mean
  for (std::size_t i = 0; i < n; ++i) want[i] = 1.0f - lr * ((grads[0][i] + grads[1][i]) / 2.0f);
  for (bool student_server : {true, false}) {
    std::vector<std::vector<float>> out(static_cast<std::size_t>(world));
    std::mutex mu;
    run_ranks(threads_options(world, 20000), [&] {
      const int rank = dist::rank();
      const ps::Layout layout{servers, dist::world_size()};
      std::vector<float> got;
      if (layout.is_server(rank)) {
        const ps::Range r = ps::shard_range(n, servers, rank);
        got.assign(r.size(), 1.0f);
        if (student_server) {
          ps::server_step(got, lr, layout);
        } else {  // the test's server: the documented tags
          std::vector<std::vector<float>> parts(workers, std::vector<float>(r.size()));
          for (int w = 0; w < workers; ++w) {
            dist::recv(std::span<float>(parts[static_cast<std::size_t>(w)]), layout.worker_rank(w),
                       ps::kGradTag);
          }
          for (std::size_t i = 0; i < r.size(); ++i)
            got[i] -= lr * ((parts[0][i] + parts[1][i]) / 2.0f);
          for (int w = 0; w < workers; ++w) {
            dist::send(std::span<const float>(got), layout.worker_rank(w), ps::kWeightsTag);
          }
        }
      } else {
        const std::vector<float>& grad = grads[static_cast<std::size_t>(layout.worker_index(rank))];
        got.assign(n, 1.0f);
        if (student_server) {  // the test's worker: the documented tags
          for (int j = 0; j < servers; ++j) {
            const ps::Range r = ps::shard_range(n, servers, j);
            dist::send(std::span<const float>(grad).subspan(r.begin, r.size()), j, ps::kGradTag);
          }
          for (int j = 0; j < servers; ++j) {
            const ps::Range r = ps::shard_range(n, servers, j);
            dist::recv(std::span<float>(got).subspan(r.begin, r.size()), j, ps::kWeightsTag);
          }
        } else {
          ps::push_gradients(grad, layout);
          ps::pull_weights(got, layout);
        }
      }
      std::lock_guard<std::mutex> g(mu);
      out[static_cast<std::size_t>(rank)] = std::move(got);
    });
    const char* who = student_server ? "your server_step with a worker that sends kGradTag and "
                                       "receives kWeightsTag"
                                     : "your push_gradients and pull_weights with a server that "
                                       "receives kGradTag and sends kWeightsTag";
    for (int w = 0; w < workers; ++w) {
      EXPECT_EQ(out[static_cast<std::size_t>(servers + w)], want) << who << ": worker " << w;
    }
  }
}

TEST(HiddenSsp, AHeldWorkerDoesNotHoldBackTheWorkersAfterIt) {
  // Worker 0 is fast, worker 1 the slowest and worker 2 in between, so worker 0 is often held
  // back (s + 1 ahead of worker 1) while worker 2 may go on: after an update, every waiting
  // worker that ssp_may_proceed lets go on is answered, also one after a held worker in worker
  // order. The rule is replayed over the log's sources; each push that follows a reply must
  // arrive one gradient of that worker after the update that answered it (a reply, the gradient,
  // the push, and at most the replies the server sends around it), not later.
  const mlp::Config c = other_config();
  const double compute_s = 1e-3;
  const int workers = 3, updates = 40;
  const std::vector<double> factors = {1.0, 2.45, 2.15};
  int held_before_released = 0;
  for (int s = 1; s <= 3; ++s) {
    const AsyncRun run = run_async(c, data_for(c), workers, updates, s, compute_s, 1.0, factors);
    ASSERT_EQ(run.log.source.size(), static_cast<std::size_t>(updates));
    ASSERT_EQ(run.log.time.size(), static_cast<std::size_t>(updates));
    const std::size_t bytes = (run.weights.size() + 1) * sizeof(float);
    const dist::NetworkModel net;
    const double push = net.message_cost(1, 0, bytes), reply = net.message_cost(0, 1, bytes);
    ASSERT_GT(reply, 0.0);
    ASSERT_LT((2 * workers + 2) * reply, compute_s / 10)
        << "the test needs messages much shorter than a gradient";
    std::vector<int> pushes(workers, 0);
    std::vector<char> waiting(workers, 0);
    std::vector<int> answered_at(workers, -1);  // the update after which it was answered
    for (int i = 0; i < updates; ++i) {
      const int src = run.log.source[static_cast<std::size_t>(i)];
      ASSERT_TRUE(src >= 1 && src <= workers) << "update " << i << ": source " << src;
      const auto k = static_cast<std::size_t>(src - 1);
      ASSERT_FALSE(waiting[k]) << "s=" << s << ", update " << i << ": worker rank " << src
                               << " pushed while it was held back (not answered)";
      if (answered_at[k] >= 0) {
        const double after = run.log.time[static_cast<std::size_t>(answered_at[k])];
        const double gradient = factors[k] * compute_s;
        const double got = run.log.time[static_cast<std::size_t>(i)];
        EXPECT_GE(got, after + reply + gradient + push - 1e-9)
            << "s=" << s << ", update " << i << ": worker rank " << src << " was answered after "
            << "update " << answered_at[k] << " (" << after << " s) and computes " << gradient
            << " s per gradient";
        EXPECT_LE(got, after + gradient + (2 * workers + 2) * reply + 1e-9)
            << "s=" << s << ", update " << i << ": worker rank " << src << " may go on after "
            << "update " << answered_at[k] << " (" << after << " s): ssp_may_proceed(its pushes, "
            << "the slowest's, s) lets it, so it is answered then, even when a worker before it "
            << "in worker order is held back; its next push must arrive one gradient (" << gradient
            << " s) later, it arrived at " << got << " s";
      }
      ++pushes[k];
      waiting[k] = 1;
      answered_at[k] = -1;
      if (i + 1 == updates) break;  // no reply carries weights after the last update
      const int slowest = *std::min_element(pushes.begin(), pushes.end());
      bool held = false;
      for (std::size_t q = 0; q < pushes.size(); ++q) {
        if (!waiting[q]) continue;
        if (pushes[q] - slowest <= s) {
          waiting[q] = 0;
          answered_at[q] = i;
          if (held) ++held_before_released;
        } else {
          held = true;
        }
      }
    }
  }
  EXPECT_GE(held_before_released, 6)
      << "the test needs updates after which a held worker comes before a released one";
}
