// 06_data_parallel, instructor-only: more world sizes, the root perturbed, a mid-size bucket cap,
// and the traffic of check_parameter_closeness, broadcast_parameters and the buckets' all-reduces
// compared with a run of the collectives data_parallel.hpp describes; the mean as the sum divided
// by the number of ranks bit for bit, hooks run in another order than backward's or not at all,
// and replicas that drift a little from rank to rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "distlab/todo.hpp"
#include "dp_harness.hpp"

using dptest::Mode;

namespace {

/// Every rank's counters and simulated seconds over one call, measured from a barrier and
/// reset_stats() just before it.
struct Traffic {
  std::vector<dist::Stats> stats;
  std::vector<double> sim_s;
};

/// Runs `before` (not measured), then `measured`, on p ranks of the threads backend.
Traffic measure(int p, const std::function<void()>& before, const std::function<void()>& measured) {
  Traffic t;
  t.stats.resize(static_cast<std::size_t>(p));
  t.sim_s.resize(static_cast<std::size_t>(p));
  std::mutex mu;
  distlab::testing::run_ranks(distlab::testing::threads_options(p, 20000), [&] {
    before();
    dist::barrier();
    dist::reset_stats();
    const double t0 = dist::sim_time();
    measured();
    const double dt = dist::sim_time() - t0;
    const dist::Stats st = dist::stats();
    std::lock_guard<std::mutex> g(mu);
    t.stats[static_cast<std::size_t>(dist::rank())] = st;
    t.sim_s[static_cast<std::size_t>(dist::rank())] = dt;
  });
  return t;
}

std::string per_peer(const std::vector<std::uint64_t>& v) {
  std::string out;
  for (std::uint64_t x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return "[" + out + "]";
}

/// "" when every rank's counters equal the plan's (per peer: messages and bytes, sent and
/// received; the number of built-in collectives) and its simulated time is within 1%; else the
/// first difference.
std::string same_traffic(const Traffic& got, const Traffic& plan, const std::string& what) {
  for (std::size_t r = 0; r < plan.stats.size(); ++r) {
    const dist::Stats& g = got.stats[r];
    const dist::Stats& w = plan.stats[r];
    const std::string head = "rank " + std::to_string(r) + ": ";
    if (g.builtin_collectives != w.builtin_collectives) {
      return head + std::to_string(g.builtin_collectives) + " built-in collective calls, but " +
             what + " makes " + std::to_string(w.builtin_collectives);
    }
    if (g.barriers != w.barriers) {
      return head + std::to_string(g.barriers) + " dist::barrier() calls, but " + what + " makes " +
             std::to_string(w.barriers) + " (a barrier is no part of it)";
    }
    if (g.bytes_sent_to != w.bytes_sent_to || g.messages_sent_to != w.messages_sent_to) {
      return head + "sent " + per_peer(g.bytes_sent_to) + " bytes in " +
             per_peer(g.messages_sent_to) + " messages to ranks 0..p-1, but " + what + " sends " +
             per_peer(w.bytes_sent_to) + " bytes in " + per_peer(w.messages_sent_to) + " messages";
    }
    if (g.bytes_received_from != w.bytes_received_from ||
        g.messages_received_from != w.messages_received_from) {
      return head + "received " + per_peer(g.bytes_received_from) + " bytes in " +
             per_peer(g.messages_received_from) + " messages from ranks 0..p-1, but " + what +
             " receives " + per_peer(w.bytes_received_from) + " bytes in " +
             per_peer(w.messages_received_from) + " messages";
    }
    if (!(std::abs(got.sim_s[r] - plan.sim_s[r]) <= 0.01 * plan.sim_s[r])) {
      return head + std::to_string(got.sim_s[r] * 1e6) + " us of simulated time, " + what +
             " takes " + std::to_string(plan.sim_s[r] * 1e6) + " us";
    }
  }
  return {};
}

std::size_t total_numel(const mlp::MLP& model) {
  std::size_t n = 0;
  for (const auto* p : model.parameters()) n += static_cast<std::size_t>(p->numel());
  return n;
}

}  // namespace

TEST(HiddenEqualsSingleProcess, WorldSizesFiveAndEight) {
  for (int world : {5, 8}) {
    const dptest::Trajectory want = dptest::single_process(world);
    for (Mode mode : {Mode::Manual, Mode::MyDPPerParameter, Mode::MyDPOneBucket}) {
      const auto got = dptest::data_parallel(world, mode);
      for (int r = 0; r < world; ++r) {
        const std::string diff = dptest::compare(got[static_cast<std::size_t>(r)], want);
        EXPECT_TRUE(diff.empty()) << "rank " << r << " of " << world << " (" << dptest::name(mode)
                                  << "): " << diff;
      }
    }
  }
}

TEST(HiddenCloseness, EveryElementIsComparedTheFirstAndTheLast) {
  // "for every element": a difference in the very first or the very last element of any
  // parameter, on the last rank, makes the replicas not close on every rank.
  const mlp::MLP probe(dptest::small_config(), 3);
  const std::size_t n_params = probe.parameters().size();
  for (std::size_t k = 0; k < n_params; ++k) {
    for (bool last : {false, true}) {
      std::mutex mu;
      std::vector<int> answers(3, -1);
      distlab::testing::run_ranks(3, [&] {
        mlp::MLP model(dptest::small_config(), 3);
        mlp::Matrix& v = model.parameters()[k]->value;
        if (dist::rank() == 2) v.data()[last ? v.size() - 1 : 0] += 1.0f;
        const bool ok = dp::check_parameter_closeness(model, 1e-4f);
        std::lock_guard<std::mutex> g(mu);
        answers[static_cast<std::size_t>(dist::rank())] = ok;
      });
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(answers[static_cast<std::size_t>(r)], 0)
            << "rank " << r << ": parameter " << k << "'s " << (last ? "last" : "first")
            << " element differs on rank 2, so the replicas are not close";
      }
    }
  }
}

TEST(HiddenCloseness, PerturbedRootIsSeenByEveryRank) {
  std::mutex mu;
  std::vector<int> answers(5, -1);
  distlab::testing::run_ranks(5, [&] {
    mlp::MLP model(dptest::small_config(), 3);
    if (dist::rank() == 0) model.parameters()[0]->value(0, 0) += 1.0f;
    const bool ok = dp::check_parameter_closeness(model, 1e-4f);
    std::lock_guard<std::mutex> g(mu);
    answers[static_cast<std::size_t>(dist::rank())] = ok;
  });
  for (int r = 0; r < 5; ++r) EXPECT_EQ(answers[static_cast<std::size_t>(r)], 0) << "rank " << r;
}

TEST(HiddenMyDP, MidCapBucketsTrainCorrectly) {
  const mlp::Config c = dptest::small_config();
  const mlp::MLP probe(c, 1);
  const std::size_t cap =
      static_cast<std::size_t>(probe.parameters().back()->numel()) * sizeof(float);
  const auto want_layout = dptest::expected_buckets(probe, cap);
  distlab::testing::RankLog log;
  distlab::testing::run_ranks(3, [&] {
    mlp::MLP model(c, 50 + static_cast<std::uint64_t>(dist::rank()));
    dp::MyDP wrapped(model, cap);
    if (wrapped.bucket_layout() != want_layout) log.fail(dist::rank(), "bucket layout");
    mlp::SGD opt(model.parameters(), c.learning_rate);
    mlp::Matrix x =
        mlp::Matrix::Constant(c.batch_size, c.dim_in, 0.1f * static_cast<float>(dist::rank() + 1));
    mlp::Labels y(static_cast<std::size_t>(c.batch_size), dist::rank() % c.n_classes);
    mlp::Matrix probs, dlogits;
    for (int s = 0; s < 3; ++s) dp::dp_step(&wrapped, model, opt, x, y, probs, dlogits);
    if (!dp::check_parameter_closeness(model, 1e-6f))
      log.fail(dist::rank(), "replicas drifted apart");
  });
  for (const auto& f : log.failures()) ADD_FAILURE() << f;
}

/// The bucket layout of c's model under each cap, on 2 ranks, against the rule.
void expect_bucket_layouts(const mlp::Config& c, const std::vector<std::size_t>& caps,
                           const std::string& model) {
  const mlp::MLP probe(c, 1);
  for (std::size_t cap : caps) {
    const auto want = dptest::expected_buckets(probe, cap);
    std::mutex mu;
    std::vector<std::vector<std::vector<int>>> got(2);
    distlab::testing::run_ranks(2, [&] {
      mlp::MLP replica(c, 60 + static_cast<std::uint64_t>(dist::rank()));
      dp::MyDP wrapped(replica, cap);
      std::lock_guard<std::mutex> g(mu);
      got[static_cast<std::size_t>(dist::rank())] = wrapped.bucket_layout();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(got[static_cast<std::size_t>(r)], want)
          << model << ", rank " << r << ", bucket_cap_bytes " << cap
          << ": a bucket holds parameters while their bytes (4 per float, nothing else) stay <= "
             "the cap; a parameter that does not fit (also after a parameter larger than the cap) "
             "starts the next bucket";
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HiddenMyDP, BucketLayoutForCapsAroundEachParametersSize) {
  // data_parallel.hpp: "a bucket takes parameters while its size in bytes stays <=
  // bucket_cap_bytes; a parameter that does not fit starts the next bucket". Caps one float below,
  // at and one float above each parameter's size and each sum of parameters that follow each other
  // in reverse order, on two models: 4 layers whose weights in reverse order are 80, 256, 256 and
  // 64 floats (a parameter larger than the cap is followed by one that fits the cap alone, and
  // still starts a new bucket), and 4 layers of 35, 49, 49 and 21 floats (no size a multiple of
  // 16, so a bucket that pads or aligns its gradients shows).
  for (const auto& [layers, in, hidden, classes] :
       {std::tuple{4, 4, 16, 5}, std::tuple{4, 3, 7, 5}}) {
    mlp::Config c = dptest::small_config();
    c.n_layers = layers;
    c.dim_in = in;
    c.dim_hidden = hidden;
    c.n_classes = classes;
    const mlp::MLP probe(c, 1);
    const auto params = probe.parameters();
    std::vector<std::size_t> caps;
    for (std::size_t first = params.size(); first-- > 0;) {
      std::size_t bytes = 0;
      for (std::size_t k = first + 1; k-- > 0;) {  // params[first], params[first - 1], ...
        bytes += static_cast<std::size_t>(params[k]->numel()) * sizeof(float);
        for (std::size_t cap : {bytes - sizeof(float), bytes, bytes + sizeof(float)})
          caps.push_back(cap);
      }
    }
    expect_bucket_layouts(c, caps,
                          "weights of " + std::to_string(in) + " inputs, " +
                              std::to_string(hidden) + " hidden, " + std::to_string(classes) +
                              " classes, " + std::to_string(layers) + " layers");
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HiddenMyDP, BucketLayoutOfParametersOfMoreThanAMebibyte) {
  // The same rule for every bucket, the first one too, with parameters of 360000 floats (1.44 MB
  // each): the default cap (25 MiB) holds all of them in one bucket, a cap of 3 MB two per bucket.
  mlp::Config c = dptest::small_config();
  c.n_layers = 3;
  c.dim_in = 600;
  c.dim_hidden = 600;
  c.n_classes = 600;
  expect_bucket_layouts(c, {dp::kDefaultBucketCap, 3'000'000, 1'440'000}, "600 x 600 weights");
}

/// A hook copies its gradient into the bucket's buffer, nothing more: with reductions that cost
/// simulated time (reduce_Bps > 0), the hooks before a bucket is full charge nothing, and the
/// averaged gradients are the same.
TEST(HiddenMyDP, AHookThatDoesNotCompleteItsBucketChargesNothing) {
  const mlp::Config c = dptest::small_config();
  dist::LaunchOptions o = distlab::testing::threads_options(3, 20000);
  o.network.reduce_Bps = 1e8;  // 10 ns per byte: a reduction of a gradient shows
  distlab::testing::RankLog log;
  distlab::testing::run_ranks(o, [&] {
    mlp::MLP model(c, 70 + static_cast<std::uint64_t>(dist::rank()));
    dp::MyDP wrapped(model);  // the default cap: one bucket
    const auto params = model.parameters();
    for (mlp::Parameter* q : params)
      q->grad = mlp::Matrix::Constant(q->value.rows(), q->value.cols(),
                                      static_cast<float>(dist::rank() + 1));
    dist::barrier();
    const double t0 = dist::sim_time();
    for (std::size_t k = params.size(); k-- > 1;) params[k]->run_hooks();  // all but the last
    const double dt = dist::sim_time() - t0;
    if (dt != 0.0)
      log.fail(dist::rank(), "the hooks of " + std::to_string(params.size() - 1) +
                                 " gradients, the bucket not yet full, took " +
                                 std::to_string(dt * 1e6) +
                                 " us of simulated time: a hook copies its gradient into the "
                                 "bucket's buffer (no reduction, no communication)");
    params[0]->run_hooks();
    wrapped.finish_gradient_sync();
    for (const mlp::Parameter* q : params)
      if (q->grad != mlp::Matrix::Constant(q->value.rows(), q->value.cols(), 2.0f))
        log.fail(dist::rank(), "a gradient is not the mean over the 3 ranks (2)");
  });
  for (const auto& f : log.failures()) ADD_FAILURE() << f;
}

TEST(HiddenCloseness, TheToleranceScalesWithTheLargerOfTheTwoValues) {
  // rtol 0.1, rank 0 holds 1.0 and rank 2 a larger value: 1.11 is close (0.11 <= 0.1 x 1.11),
  // 1.12 is not (0.12 > 0.112); relative to rank 0's value alone 1.11 would not be close.
  std::mutex mu;
  std::vector<int> inside(3, -1), outside(3, -1);
  distlab::testing::run_ranks(3, [&] {
    mlp::MLP model(dptest::small_config(), 5);
    float& w = model.parameters()[1]->value(1, 1);
    w = 1.0f;
    if (dist::rank() == 2) w = 1.11f;
    const bool a = dp::check_parameter_closeness(model, 0.1f);
    if (dist::rank() == 2) w = 1.12f;
    const bool b = dp::check_parameter_closeness(model, 0.1f);
    w = dist::rank() == 0 ? 1.11f : 1.0f;  // the larger value on rank 0 this time
    const bool c = dp::check_parameter_closeness(model, 0.1f);
    // each rank within rtol of rank 0, on opposite sides (1.09 and 0.91 against 1.0): close,
    // although ranks 1 and 2 are 0.18 apart (each rank is compared with rank 0, not each pair)
    w = dist::rank() == 0 ? 1.0f : dist::rank() == 1 ? 1.09f : 0.91f;
    const bool d = dp::check_parameter_closeness(model, 0.1f);
    // opposite signs are far apart: |-1 - 1| = 2 > 0.1 x 1 (equal magnitudes do not make it close)
    w = dist::rank() == 2 ? -1.0f : 1.0f;
    const bool e = dp::check_parameter_closeness(model, 0.1f);
    std::lock_guard<std::mutex> g(mu);
    inside[static_cast<std::size_t>(dist::rank())] = a && c && d;
    outside[static_cast<std::size_t>(dist::rank())] = b || e;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(inside[static_cast<std::size_t>(r)], 1)
        << "rank " << r << ": |1.11 - 1.0| <= 0.1 x max(|1.11|, |1.0|), so the replicas are close "
        << "(1.11 on rank 2, then on rank 0), and 1.09 and 0.91 on ranks 1 and 2 against 1.0 on "
        << "rank 0 (each rank is compared with rank 0)";
    EXPECT_EQ(outside[static_cast<std::size_t>(r)], 0)
        << "rank " << r << ": |1.12 - 1.0| > 0.1 x max(|1.12|, |1.0|), so they are not; nor "
        << "are -1.0 on rank 2 and 1.0 on rank 0 (|-1 - 1| = 2)";
  }
}

TEST(HiddenCloseness, EqualReplicasAreCloseWithZeroWeightsAndZeroTolerance) {
  // |x_r - x_0| <= rtol * max(|x_r|, |x_0|) holds with equality for equal values: a weight that
  // is 0 on every rank, or rtol = 0, still leaves identical replicas close (a strict < does not).
  // Both sides: with rtol = 0 the smallest difference is not close.
  std::mutex mu;
  std::vector<int> zero_weight(3, -1), zero_rtol(3, -1), zero_rtol_perturbed(3, -1),
      zero_signed(3, -1);
  distlab::testing::run_ranks(3, [&] {
    mlp::MLP model(dptest::small_config(), 5);
    model.parameters()[0]->value(0, 0) = 0.0f;
    model.parameters()[1]->value.row(1).setZero();
    const bool a = dp::check_parameter_closeness(model, 1e-5f);
    const bool b = dp::check_parameter_closeness(model, 0.0f);
    // -0.0 on rank 1 where rank 0 holds +0.0: |x_r - x_0| = 0 <= 0, close with rtol 0 too
    if (dist::rank() == 1) model.parameters()[1]->value(1, 3) = -0.0f;
    const bool signed_zero = dp::check_parameter_closeness(model, 0.0f);
    if (dist::rank() == 1) model.parameters()[1]->value(1, 3) = 0.0f;
    if (dist::rank() == 2) {
      float& w = model.parameters()[1]->value(2, 2);
      w = std::nextafter(w, 2.0f * w);
    }
    const bool c = dp::check_parameter_closeness(model, 0.0f);
    std::lock_guard<std::mutex> g(mu);
    zero_weight[static_cast<std::size_t>(dist::rank())] = a;
    zero_rtol[static_cast<std::size_t>(dist::rank())] = b;
    zero_signed[static_cast<std::size_t>(dist::rank())] = signed_zero;
    zero_rtol_perturbed[static_cast<std::size_t>(dist::rank())] = c;
  });
  for (int r = 0; r < 3; ++r) {
    const auto k = static_cast<std::size_t>(r);
    EXPECT_EQ(zero_weight[k], 1) << "rank " << r << ": identical replicas with some weights 0, "
                                 << "rtol 1e-5 (|0 - 0| <= rtol * 0 holds)";
    EXPECT_EQ(zero_rtol[k], 1) << "rank " << r << ": identical replicas, rtol 0";
    EXPECT_EQ(zero_signed[k], 1) << "rank " << r << ": -0.0 on rank 1 where rank 0 holds +0.0, "
                                 << "rtol 0: |-0 - 0| = 0 <= 0, close (values compared, not bits)";
    EXPECT_EQ(zero_rtol_perturbed[k], 0)
        << "rank " << r << ": rank 2 differs by one ulp in one weight, rtol 0";
  }
}

TEST(HiddenMyDP, FinishLeavesTheBucketsReadyForTheNextBackwardOnly) {
  // After finish_gradient_sync every bucket is back to "not started": a second finish without a
  // backward in between throws (no hook fired), and the next backward + finish averages again.
  const mlp::Config c = dptest::small_config();
  for (std::size_t cap : {std::size_t{0}, dp::kDefaultBucketCap}) {
    distlab::testing::RankLog log;
    distlab::testing::run_ranks(3, [&] {
      const int r = dist::rank();
      mlp::MLP model(c, 7);
      dp::MyDP wrapped(model, cap);
      mlp::Matrix probs, dlogits;
      for (int step = 0; step < 2; ++step) {
        const mlp::Matrix x = mlp::Matrix::Constant(
            c.batch_size, c.dim_in,
            0.1f * static_cast<float>(r + 1) + 0.05f * static_cast<float>(step));
        const mlp::Labels y(static_cast<std::size_t>(c.batch_size), (r + step) % c.n_classes);
        mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
        mlp::softmax_cross_entropy_backward(probs, y, dlogits);
        model.backward(dlogits);
        std::vector<mlp::Matrix> mean;
        for (auto* p : model.parameters()) {
          mlp::Matrix g = p->grad;
          dist::all_reduce(std::span<float>(g.data(), static_cast<std::size_t>(g.size())),
                           dist::ReduceOp::Avg);
          mean.push_back(std::move(g));
        }
        wrapped.finish_gradient_sync();
        const auto params = model.parameters();
        for (std::size_t i = 0; i < params.size(); ++i) {
          if (!((params[i]->grad - mean[i]).cwiseAbs().maxCoeff() <=
                1e-5f * (1.0f + mean[i].cwiseAbs().maxCoeff()))) {
            log.fail(r, "cap " + std::to_string(cap) + ", step " + std::to_string(step) +
                            ": parameter " + std::to_string(i) + " is not the mean gradient");
          }
        }
        try {
          wrapped.finish_gradient_sync();
          log.fail(r, "cap " + std::to_string(cap) + ", step " + std::to_string(step) +
                          ": a second finish_gradient_sync without backward must throw (no "
                          "bucket was started since the last one)");
        } catch (const distlab::NotImplemented&) {
          throw;
        } catch (const std::logic_error&) {
        }
      }
    });
    for (const auto& f : log.failures()) ADD_FAILURE() << f;
  }
}

TEST(HiddenCloseness, RankZeroGathersDecidesAndBroadcastsTheAnswer) {
  // data_parallel.hpp: "Rank 0 gathers all ranks' parameters (dist::gather) and decides; the
  // answer reaches every rank (dist::broadcast)." Every rank's counters and simulated time equal
  // those of one gather of its parameters to rank 0 and one broadcast of a 32-bit answer
  // (an all_gather, after which every rank decides for itself, moves world_size times more). One
  // rank too: "one gather and one broadcast on every world size, one rank included" (two built-in
  // collective calls, no shortcut that answers true at once), and nothing else: no dist::barrier()
  // besides them.
  const mlp::Config c = dptest::small_config();
  const std::size_t n = total_numel(mlp::MLP(c, 3));
  for (int p : {1, 3, 5}) {
    for (bool perturbed : {false, true}) {
      SCOPED_TRACE("p=" + std::to_string(p) + (perturbed ? ", last rank perturbed" : ", equal") +
                   (p == 1 ? " (one rank: always close to itself)" : ""));
      std::vector<int> answers(static_cast<std::size_t>(p), -1);
      std::mutex mu;
      const Traffic got = measure(
          p, [] {},
          [&] {
            mlp::MLP m(c, 3);
            if (perturbed && dist::rank() == dist::world_size() - 1)
              m.parameters()[1]->value(0, 0) += 1.0f;
            const bool ok = dp::check_parameter_closeness(m, 1e-5f);
            std::lock_guard<std::mutex> g(mu);
            answers[static_cast<std::size_t>(dist::rank())] = ok;
          });
      const Traffic plan = measure(
          p, [] {},
          [&] {
            const std::vector<float> mine(n, 1.0f);
            std::vector<float> all(dist::rank() == 0 ? n * static_cast<std::size_t>(p) : 0);
            dist::gather(std::span<const float>(mine), std::span<float>(all), 0);
            std::int32_t ok = 1;
            dist::broadcast(std::span<std::int32_t>(&ok, 1), 0);
          });
      for (int r = 0; r < p; ++r)
        EXPECT_EQ(answers[static_cast<std::size_t>(r)], perturbed && p > 1 ? 0 : 1) << "rank " << r;
      const std::string diff = same_traffic(
          got, plan,
          "a gather of the " + std::to_string(n) +
              " parameters to rank 0 and a broadcast of the 32-bit answer from rank 0");
      EXPECT_TRUE(diff.empty()) << diff;
    }
  }
}

TEST(HiddenMyDP, BroadcastParametersSendsEachParameterInPlace) {
  // data_parallel.hpp: broadcast_parameters is one dist::broadcast from rank 0 per parameter, of
  // the parameter's own storage: every rank ends with rank 0's values in the same storage, and its
  // counters and simulated time equal those of one broadcast per parameter (one broadcast of a
  // flattened copy of the model sends other messages). On one rank too: no messages, but one
  // built-in collective call per parameter (a wrapper that skips the broadcast there counts none).
  const mlp::Config c = dptest::small_config();
  const mlp::MLP probe(c, 1);
  std::vector<std::size_t> sizes;
  for (const auto* p : probe.parameters()) sizes.push_back(static_cast<std::size_t>(p->numel()));
  for (int p : {1, 2, 3, 5}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    std::vector<std::unique_ptr<mlp::MLP>> models(static_cast<std::size_t>(p));
    std::vector<std::unique_ptr<dp::MyDP>> wrapped(static_cast<std::size_t>(p));
    std::vector<std::vector<const float*>> storage(static_cast<std::size_t>(p));
    const Traffic got = measure(
        p,
        [&] {
          const auto r = static_cast<std::size_t>(dist::rank());
          models[r] = std::make_unique<mlp::MLP>(c, 40 + r);
          wrapped[r] = std::make_unique<dp::MyDP>(*models[r], 0);
          // Every rank's values differ again; rank 0's are 2 + its seed-40 values.
          for (auto* q : models[r]->parameters()) {
            q->value.array() += static_cast<float>(r) + 2.0f;
            storage[r].push_back(q->value.data());
          }
        },
        [&] { wrapped[static_cast<std::size_t>(dist::rank())]->broadcast_parameters(); });
    const mlp::MLP rank0(c, 40);
    for (int r = 0; r < p; ++r) {
      const auto got_params = models[static_cast<std::size_t>(r)]->parameters();
      const auto want = rank0.parameters();
      for (std::size_t i = 0; i < want.size(); ++i) {
        const mlp::Matrix expect = (want[i]->value.array() + 2.0f).matrix();
        EXPECT_TRUE(got_params[i]->value == expect)
            << "rank " << r << ", parameter " << i << ": not rank 0's values";
        EXPECT_EQ(got_params[i]->value.data(), storage[static_cast<std::size_t>(r)][i])
            << "rank " << r << ", parameter " << i
            << ": the values moved to other storage (broadcast them in place)";
      }
    }
    const Traffic plan = measure(
        p, [] {},
        [&] {
          for (std::size_t k : sizes) {
            std::vector<float> buf(k, 0.0f);
            dist::broadcast(std::span<float>(buf), 0);
          }
        });
    const std::string diff = same_traffic(
        got, plan,
        "one broadcast from rank 0 per parameter (" + std::to_string(sizes.size()) + ")");
    EXPECT_TRUE(diff.empty()) << diff;
    wrapped.clear();
  }
}

TEST(HiddenMyDP, EachBucketsAllReduceMovesOnlyItsGradients) {
  // data_parallel.hpp: the hook starts dist::all_reduce_async (mean) on the bucket's buffer, which
  // holds "the bucket's gradients, flattened": the traffic of backward and finish_gradient_sync is
  // that of one all-reduce per bucket of exactly its parameters' floats (a buffer padded to the
  // cap moves the padding too). On one rank too: the hook starts the all-reduce whatever the world
  // size (its call is counted; no byte moves).
  mlp::Config c = dptest::small_config();
  c.n_layers = 4;
  const mlp::MLP probe(c, 1);
  const std::size_t mid = (16 * 5 + 16 * 16) * sizeof(float) + 100;
  const std::vector<std::pair<std::size_t, int>> runs = {
      {0, 3}, {mid, 3}, {dp::kDefaultBucketCap, 3}, {0, 1}, {mid, 1}};
  for (const std::pair<std::size_t, int>& run : runs) {
    const std::size_t cap = run.first;
    const int p = run.second;
    SCOPED_TRACE("cap " + std::to_string(cap) + ", " + std::to_string(p) + " ranks");
    const auto layout = dptest::expected_buckets(probe, cap);
    std::vector<std::size_t> counts;
    for (const auto& b : layout) {
      std::size_t k = 0;
      for (int i : b)
        k += static_cast<std::size_t>(probe.parameters()[static_cast<std::size_t>(i)]->numel());
      counts.push_back(k);
    }
    std::vector<std::unique_ptr<mlp::MLP>> models(static_cast<std::size_t>(p));
    std::vector<std::unique_ptr<dp::MyDP>> wrapped(static_cast<std::size_t>(p));
    std::vector<mlp::Matrix> inputs(static_cast<std::size_t>(p)), probs(inputs.size()),
        dlogits(inputs.size());  // forward keeps a view of its input
    std::vector<mlp::Labels> labels(inputs.size());
    const Traffic got = measure(
        p,
        [&] {
          const auto r = static_cast<std::size_t>(dist::rank());
          models[r] = std::make_unique<mlp::MLP>(c, 7);
          wrapped[r] = std::make_unique<dp::MyDP>(*models[r], cap);
          inputs[r] =
              mlp::Matrix::Constant(c.batch_size, c.dim_in, 0.1f * static_cast<float>(r + 1));
          labels[r] = mlp::Labels(static_cast<std::size_t>(c.batch_size),
                                  static_cast<std::int32_t>(r) % c.n_classes);
          mlp::softmax_cross_entropy_forward(models[r]->forward(inputs[r]), labels[r], probs[r]);
          mlp::softmax_cross_entropy_backward(probs[r], labels[r], dlogits[r]);
        },
        [&] {
          const auto r = static_cast<std::size_t>(dist::rank());
          models[r]->backward(dlogits[r]);
          wrapped[r]->finish_gradient_sync();
        });
    const Traffic plan = measure(
        p, [] {},
        [&] {
          std::vector<std::vector<float>> bufs;
          for (std::size_t k : counts) bufs.emplace_back(k, 1.0f);
          std::vector<dist::Work> works;
          for (auto& b : bufs)
            works.push_back(dist::all_reduce_async(std::span<float>(b), dist::ReduceOp::Avg));
          for (auto& w : works) w.wait();
        });
    std::string sizes;
    for (std::size_t k : counts) sizes += (sizes.empty() ? "" : ", ") + std::to_string(k);
    const std::string diff = same_traffic(
        got, plan, "one averaging all-reduce per bucket of its gradients (" + sizes + " floats)");
    EXPECT_TRUE(diff.empty()) << diff;
    wrapped.clear();
  }
}

namespace {

/// n integer sums S_i (around 10^5) with float(S_i) * (1/p) != float(S_i) / p: where the mean
/// "Sum followed by division by the number of ranks" and a multiplication by the reciprocal
/// differ in the last bit (never for p a power of two).
std::vector<float> separating_sums(int p, std::size_t n) {
  std::vector<float> sums;
  const float fp = static_cast<float>(p);
  const volatile float inv = 1.0f / fp;  // volatile: computed at run time, as a solution would
  for (int s = 100003; sums.size() < n; s += 7) {
    const float S = static_cast<float>(s);
    if (S / fp != S * inv) sums.push_back(S);
  }
  return sums;
}

/// Gradients of integers on every rank whose sums over the ranks are separating_sums (every
/// partial sum is an exact integer, in any order); want[k] = the exact mean, float(S) / p.
struct IntegerGradients {
  std::vector<std::vector<float>> sums;  // per parameter
  float of(int rank, int p, std::size_t k, std::size_t i) const {
    const auto small = [&](int q) {
      return static_cast<float>((3 * q + static_cast<int>(i + k)) % 7 + 1);
    };
    if (rank > 0) return small(rank);
    float rest = sums[k][i];
    for (int q = 1; q < p; ++q) rest -= small(q);
    return rest;
  }
};

IntegerGradients integer_gradients(const mlp::MLP& probe, int p) {
  IntegerGradients g;
  std::size_t total = 0;
  for (const auto* q : probe.parameters()) total += static_cast<std::size_t>(q->numel());
  const std::vector<float> all = separating_sums(p, total);
  std::size_t at = 0;
  for (const auto* q : probe.parameters()) {
    const auto n = static_cast<std::size_t>(q->numel());
    g.sums.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                        all.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return g;
}

void set_integer_gradients(mlp::MLP& model, const IntegerGradients& g) {
  const auto params = model.parameters();
  for (std::size_t k = 0; k < params.size(); ++k) {
    float* d = params[k]->grad.data();
    for (std::size_t i = 0; i < static_cast<std::size_t>(params[k]->numel()); ++i)
      d[i] = g.of(dist::rank(), dist::world_size(), k, i);
  }
}

/// "" when every gradient is float(S) / p bit for bit, else the first difference.
std::string exact_mean_error(mlp::MLP& model, const IntegerGradients& g) {
  const float p = static_cast<float>(dist::world_size());
  const auto params = model.parameters();
  for (std::size_t k = 0; k < params.size(); ++k) {
    const float* d = params[k]->grad.data();
    for (std::size_t i = 0; i < static_cast<std::size_t>(params[k]->numel()); ++i) {
      const float want = g.sums[k][i] / p;
      if (d[i] != want) {
        std::ostringstream os;
        os.precision(9);
        os << "parameter " << k << ", element " << i << ": the gradients sum to exactly "
           << g.sums[k][i] << " over the " << dist::world_size() << " ranks, so the mean is "
           << want << " (S / p), got " << d[i]
           << (d[i] == g.sums[k][i] * (1.0f / p) ? " = S * (1 / p): divide the sum by p" : "");
        return os.str();
      }
    }
  }
  return {};
}

}  // namespace

TEST(HiddenMeanGradient, TheMeanIsTheSumDividedByTheNumberOfRanks) {
  // data_parallel.hpp: "replace every gradient by its mean over the ranks"; dist.hpp: "Avg is Sum
  // followed by division by the number of ranks". Integer gradients (exact sums in any order)
  // whose sums S give S / p != S * (1 / p) at p = 3, 5, 6, 7: all_reduce_gradients and MyDP's
  // buckets must both give S / p bit for bit on every rank.
  const mlp::Config c = dptest::small_config();
  const mlp::MLP probe(c, 1);
  for (int p : {3, 5, 6, 7}) {
    const IntegerGradients g = integer_gradients(probe, p);
    for (std::size_t k = 0; k < g.sums.size(); ++k) {  // the inputs really separate the two
      double sum = 0;
      for (int r = 0; r < p; ++r) sum += g.of(r, p, k, 0);
      ASSERT_EQ(sum, static_cast<double>(g.sums[k][0])) << "test bug: parameter " << k;
      ASSERT_NE(g.sums[k][0] / static_cast<float>(p), g.sums[k][0] * (1.0f / static_cast<float>(p)))
          << "test bug: S does not separate S / p from S * (1 / p)";
    }
    for (std::size_t cap : {std::size_t{0}, dp::kDefaultBucketCap}) {
      distlab::testing::RankLog log;
      distlab::testing::run_ranks(p, [&] {
        mlp::MLP model(c, 11);
        set_integer_gradients(model, g);
        dp::all_reduce_gradients(model);
        std::string e = exact_mean_error(model, g);
        if (!e.empty()) log.fail(dist::rank(), "all_reduce_gradients: " + e);
        dp::MyDP wrapped(model, cap);
        set_integer_gradients(model, g);
        const auto params = model.parameters();
        for (auto it = params.rbegin(); it != params.rend(); ++it) (*it)->run_hooks();
        wrapped.finish_gradient_sync();
        e = exact_mean_error(model, g);
        if (!e.empty())
          log.fail(dist::rank(), "MyDP (cap " + std::to_string(cap) + " bytes): " + e);
      });
      for (const auto& f : log.failures()) ADD_FAILURE() << "world size " << p << ", " << f;
    }
  }
}

namespace {

/// Rank `rank`'s gradient element i of parameter k: floats of mixed signs and magnitudes (2^-10 to
/// 2^9), so the ranks' float partial sums round.
float rounding_gradient(int rank, std::size_t k, std::size_t i) {
  const std::uint64_t h =
      (static_cast<std::uint64_t>(rank) * 7919u + k * 104729u + i * 15485863u) % 1000003u;
  const float frac = 1.0f + static_cast<float>(h) / 1000003.0f;
  const int e = static_cast<int>((static_cast<std::uint64_t>(rank) * 3u + i * 5u + k) % 20u) - 10;
  return ((h + static_cast<std::uint64_t>(rank)) % 2 == 0 ? 1.0f : -1.0f) * std::ldexp(frac, e);
}

}  // namespace

TEST(HiddenMeanGradient, AllReduceGradientsIsDistsFloatAvgOfEachGradient) {
  // data_parallel.hpp: "The mean is dist's Avg, the sum divided by the number of ranks, checked
  // bit for bit". Float gradients whose partial sums over the ranks round: on every rank, every
  // gradient equals dist::all_reduce(Avg) of a float copy of the same gradients, bit for bit (a
  // mean taken in double and rounded to float once differs in the last bit for some of them at
  // p = 3 and 5, checked in the test); and the traffic and simulated time of all_reduce_gradients
  // are those of one float Avg all-reduce per parameter (p = 2, 3, 5: a double copy moves twice
  // the bytes).
  const mlp::Config c = dptest::small_config();
  const mlp::MLP probe(c, 1);
  const auto probe_params = probe.parameters();
  const auto set_gradients = [](mlp::MLP& model) {
    const auto params = model.parameters();
    for (std::size_t k = 0; k < params.size(); ++k) {
      float* d = params[k]->grad.data();
      for (std::size_t i = 0; i < static_cast<std::size_t>(params[k]->numel()); ++i)
        d[i] = rounding_gradient(dist::rank(), k, i);
    }
  };
  for (int p : {3, 5}) {
    // The inputs separate dist's float Avg from a mean in double rounded once, for some elements.
    std::vector<std::vector<float>> avg(probe_params.size());
    distlab::testing::run_ranks(p, [&] {
      for (std::size_t k = 0; k < probe_params.size(); ++k) {
        std::vector<float> g(static_cast<std::size_t>(probe_params[k]->numel()));
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = rounding_gradient(dist::rank(), k, i);
        dist::all_reduce(std::span<float>(g), dist::ReduceOp::Avg);
        if (dist::rank() == 0) avg[k] = std::move(g);
      }
    });
    std::size_t separated = 0;
    for (std::size_t k = 0; k < avg.size(); ++k) {
      for (std::size_t i = 0; i < avg[k].size(); ++i) {
        double sum = 0;
        for (int r = 0; r < p; ++r) sum += static_cast<double>(rounding_gradient(r, k, i));
        if (static_cast<float>(sum / p) != avg[k][i]) ++separated;
      }
    }
    ASSERT_GT(separated, 0u) << "test bug: at p = " << p << " no element separates dist's float "
                             << "Avg from a mean taken in double";

    distlab::testing::RankLog log;
    distlab::testing::run_ranks(p, [&] {
      const int r = dist::rank();
      mlp::MLP model(c, 11);
      set_gradients(model);
      std::vector<std::vector<float>> want;  // dist's Avg of a float copy of each gradient
      for (const auto* q : model.parameters()) {
        want.emplace_back(q->grad.data(), q->grad.data() + q->numel());
        dist::all_reduce(std::span<float>(want.back()), dist::ReduceOp::Avg);
      }
      dp::all_reduce_gradients(model);
      const auto params = model.parameters();
      for (std::size_t k = 0; k < params.size(); ++k) {
        const float* d = params[k]->grad.data();
        for (std::size_t i = 0; i < want[k].size(); ++i) {
          if (std::bit_cast<std::uint32_t>(d[i]) != std::bit_cast<std::uint32_t>(want[k][i])) {
            std::ostringstream os;
            os.precision(9);
            os << "world size " << p << ": parameter " << k << ", element " << i
               << ": dist::all_reduce(Avg) of the float gradients gives " << want[k][i]
               << ", all_reduce_gradients gave " << d[i]
               << " (average the float gradients themselves, with dist's Avg)";
            log.fail(r, os.str());
            return;
          }
        }
      }
    });
    for (const auto& f : log.failures()) ADD_FAILURE() << f;
  }
  std::vector<std::size_t> sizes;
  for (const auto* q : probe_params) sizes.push_back(static_cast<std::size_t>(q->numel()));
  for (int p : {2, 3, 5}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    std::vector<std::unique_ptr<mlp::MLP>> models(static_cast<std::size_t>(p));
    const Traffic got = measure(
        p,
        [&] {
          auto& m = models[static_cast<std::size_t>(dist::rank())];
          m = std::make_unique<mlp::MLP>(c, 11);
          set_gradients(*m);
        },
        [&] { dp::all_reduce_gradients(*models[static_cast<std::size_t>(dist::rank())]); });
    const Traffic plan = measure(
        p, [] {},
        [&] {
          for (std::size_t k : sizes) {
            std::vector<float> buf(k, 1.0f);
            dist::all_reduce(std::span<float>(buf), dist::ReduceOp::Avg);
          }
        });
    const std::string diff = same_traffic(
        got, plan, "one float Avg all-reduce per parameter (" + std::to_string(sizes.size()) + ")");
    EXPECT_TRUE(diff.empty()) << diff;
  }
}

TEST(HiddenMyDP, HooksInAnotherOrderStillAverageEveryGradient) {
  // data_parallel.hpp: "when the last gradient of a bucket arrives, the hook starts
  // dist::all_reduce_async (mean)": the last one to arrive, whichever parameter it is. The test
  // runs the hooks itself in forward order and in a shuffled order (not backward's): after
  // finish_gradient_sync every gradient is the mean of all ranks' gradients.
  const mlp::Config c = dptest::small_config();
  const mlp::MLP probe(c, 1);
  const int n = static_cast<int>(probe.parameters().size());
  std::vector<std::vector<int>> orders;
  std::vector<int> forward(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) forward[static_cast<std::size_t>(i)] = i;
  orders.push_back(forward);
  std::vector<int> shuffled = forward;  // n - 2, 0, n - 1, 1, ...: a middle one first
  std::rotate(shuffled.begin(), shuffled.begin() + (n - 2), shuffled.end());
  std::swap(shuffled[1], shuffled[2]);
  orders.push_back(shuffled);
  const std::size_t mid =
      static_cast<std::size_t>(probe.parameters()[1]->numel() + probe.parameters()[2]->numel()) *
      sizeof(float);  // the last two parameters in one bucket, the first alone
  const int p = 3;
  const IntegerGradients g = integer_gradients(probe, p);
  for (std::size_t cap : {mid, dp::kDefaultBucketCap}) {
    for (const auto& order : orders) {
      std::string in_order;
      for (int i : order) in_order += (in_order.empty() ? "" : ", ") + std::to_string(i);
      distlab::testing::RankLog log;
      distlab::testing::run_ranks(p, [&] {
        mlp::MLP model(c, 11);
        dp::MyDP wrapped(model, cap);
        set_integer_gradients(model, g);
        const auto params = model.parameters();
        for (int i : order) params[static_cast<std::size_t>(i)]->run_hooks();
        wrapped.finish_gradient_sync();
        const std::string e = exact_mean_error(model, g);
        if (!e.empty()) {
          log.fail(dist::rank(), "cap " + std::to_string(cap) + " bytes, hooks run in the order " +
                                     in_order + " (bucket layout " +
                                     std::to_string(wrapped.num_buckets()) + " buckets): " + e +
                                     ". A bucket is full when all its gradients arrived, in "
                                     "whatever order");
        }
      });
      for (const auto& f : log.failures()) ADD_FAILURE() << f;
    }
  }
}

TEST(HiddenMyDP, AMissingHookLeavesItsBucketUnstarted) {
  // data_parallel.hpp: finish_gradient_sync "Throws if some bucket was never started (a gradient
  // hook did not fire". One bucket of every parameter; the hooks of all parameters but the last
  // run (so the bucket's first- and last-listed parameters' hooks both fire): the bucket is not
  // complete, never started, and finish_gradient_sync throws on every rank.
  const mlp::Config c = dptest::small_config();
  const mlp::MLP probe(c, 1);
  const int n = static_cast<int>(probe.parameters().size());
  for (int missing : {n - 1, 1}) {
    distlab::testing::RankLog log;
    distlab::testing::run_ranks(3, [&] {
      mlp::MLP model(c, 11);
      dp::MyDP wrapped(model, dp::kDefaultBucketCap);
      for (auto* q : model.parameters()) q->grad.setConstant(static_cast<float>(dist::rank()));
      const auto params = model.parameters();
      for (int i = n - 1; i >= 0; --i) {
        if (i != missing) params[static_cast<std::size_t>(i)]->run_hooks();
      }
      try {
        wrapped.finish_gradient_sync();
        log.fail(dist::rank(), "the hook of parameter " + std::to_string(missing) +
                                   " never ran, so its bucket never got all its gradients and "
                                   "was never started: finish_gradient_sync must throw");
      } catch (const distlab::NotImplemented&) {
        throw;
      } catch (const std::logic_error&) {
      }
    });
    for (const auto& f : log.failures()) ADD_FAILURE() << f;
  }
}

TEST(HiddenMyDP, AMissingHookInAnyBucketIsAnError) {
  // data_parallel.hpp: finish_gradient_sync "Throws if some bucket was never started (a gradient
  // hook did not fire". Several buckets (4 layers; cap 0: one per parameter, and a mid cap: the
  // last two layers together, then one each); the hooks of every parameter but one, in backward
  // order, so every other bucket starts, the last one (the first layer's) included unless it holds
  // the missing one: for a missing hook in the first bucket, a middle one and the last,
  // finish_gradient_sync throws on every rank.
  mlp::Config c = dptest::small_config();
  c.n_layers = 4;
  const mlp::MLP probe(c, 1);
  const std::size_t mid = (16 * 5 + 16 * 16) * sizeof(float) + 100;
  for (std::size_t cap : {std::size_t{0}, mid}) {
    const auto layout = dptest::expected_buckets(probe, cap);
    ASSERT_GE(layout.size(), 3u) << "test bug: cap " << cap << " gives fewer than 3 buckets";
    for (std::size_t b = 0; b < layout.size(); ++b) {
      const int missing = layout[b].front();
      distlab::testing::RankLog log;
      distlab::testing::run_ranks(3, [&] {
        mlp::MLP model(c, 11);
        dp::MyDP wrapped(model, cap);
        for (auto* q : model.parameters()) q->grad.setConstant(static_cast<float>(dist::rank()));
        const auto params = model.parameters();
        for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
          if (i != missing) params[static_cast<std::size_t>(i)]->run_hooks();
        }
        try {
          wrapped.finish_gradient_sync();
          log.fail(dist::rank(),
                   "cap " + std::to_string(cap) + " bytes, " + std::to_string(layout.size()) +
                       " buckets: the hook of parameter " + std::to_string(missing) +
                       " never ran, so bucket " + std::to_string(b) +
                       " was never started (the other buckets were): finish_gradient_sync "
                       "must throw");
        } catch (const distlab::NotImplemented&) {
          throw;
        } catch (const std::logic_error&) {
        }
      });
      for (const auto& f : log.failures()) ADD_FAILURE() << f;
    }
  }
}

TEST(HiddenCloseness, ReplicasThatDriftFromRankToRankAreNotClose) {
  // data_parallel.hpp: "every rank's parameters equal rank 0's within rtol". One weight grows by
  // 0.08% from each rank to the next (rtol 0.1%): every rank is within rtol of its neighbours, but
  // the last rank (3 or more ranks) is 0.16% or more away from rank 0: not close, on every rank.
  const float rtol = 1e-3f;
  for (int p : {3, 4, 5}) {
    std::vector<float> w(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r)
      w[static_cast<std::size_t>(r)] = 1.0f + 0.0008f * static_cast<float>(r);
    for (int r = 1; r < p; ++r) {  // the drift really is within rtol between neighbours
      const float a = w[static_cast<std::size_t>(r)], b = w[static_cast<std::size_t>(r - 1)];
      ASSERT_LE(std::abs(a - b), rtol * std::max(a, b)) << "test bug";
    }
    ASSERT_GT(w.back() - w[0], rtol * w.back()) << "test bug";
    std::mutex mu;
    std::vector<int> answers(static_cast<std::size_t>(p), -1);
    distlab::testing::run_ranks(p, [&] {
      mlp::MLP model(dptest::small_config(), 5);
      model.parameters()[1]->value(2, 3) = w[static_cast<std::size_t>(dist::rank())];
      const bool ok = dp::check_parameter_closeness(model, rtol);
      std::lock_guard<std::mutex> g(mu);
      answers[static_cast<std::size_t>(dist::rank())] = ok;
    });
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(answers[static_cast<std::size_t>(r)], 0)
          << "world size " << p << ", rank " << r << ": a weight is 1 + 0.0008 r on rank r, rtol "
          << rtol << ": each rank is within rtol of its neighbour, but rank " << p - 1
          << " differs from rank 0 by more than rtol, so the replicas are not close";
    }
  }
}

TEST(HiddenCloseness, TheToleranceUsesTheMagnitudesOfNegativeValues) {
  // rtol 0.5 with negative weights: -2 against -1 is close (|-1| <= 0.5 x max(|-1|, |-2|) = 1),
  // on rank 2 and then on rank 0; -2 against -0.9 is not (1.1 > 1). A bound taken from the
  // values' signed maximum (-1, then 0.5 x 1) would call the first pair not close.
  std::mutex mu;
  std::vector<int> inside(3, -1), outside(3, -1);
  distlab::testing::run_ranks(3, [&] {
    mlp::MLP model(dptest::small_config(), 5);
    float& w = model.parameters()[0]->value(0, 1);
    w = dist::rank() == 2 ? -1.0f : -2.0f;
    const bool a = dp::check_parameter_closeness(model, 0.5f);
    w = dist::rank() == 0 ? -1.0f : -2.0f;
    const bool b = dp::check_parameter_closeness(model, 0.5f);
    w = dist::rank() == 2 ? -0.9f : -2.0f;
    const bool c = dp::check_parameter_closeness(model, 0.5f);
    std::lock_guard<std::mutex> g(mu);
    inside[static_cast<std::size_t>(dist::rank())] = a && b;
    outside[static_cast<std::size_t>(dist::rank())] = c;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(inside[static_cast<std::size_t>(r)], 1)
        << "rank " << r << ": |-1 - (-2)| = 1 <= 0.5 x max(|-1|, |-2|) = 1, so the replicas are "
        << "close: the tolerance scales with the larger MAGNITUDE";
    EXPECT_EQ(outside[static_cast<std::size_t>(r)], 0)
        << "rank " << r << ": |-0.9 - (-2)| = 1.1 > 0.5 x 2, so the replicas are not close";
  }
}

TEST(HiddenCloseness, TheSameNaNOnEveryRankIsNeverClose) {
  // data_parallel.hpp: "a NaN on any rank is never close: every comparison with a NaN is false",
  // also when every rank holds the same NaN, bit for bit (a run that diverged everywhere): the
  // bits being identical does not make the replicas close. Rank 0 alone, every rank but rank 0,
  // and every rank, with 2, 3 and 5 ranks; the other weights are equal on every rank.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* who;
    bool (*holds)(int rank);
  };
  const Case cases[] = {
      {"rank 0 only", [](int r) { return r == 0; }},
      {"every rank but rank 0", [](int r) { return r != 0; }},
      {"every rank", [](int) { return true; }},
  };
  for (int p : {2, 3, 5}) {
    for (const Case& c : cases) {
      std::mutex mu;
      std::vector<int> answers(static_cast<std::size_t>(p), -1);
      std::vector<std::uint32_t> bits(static_cast<std::size_t>(p), 0);
      distlab::testing::run_ranks(p, [&] {
        mlp::MLP model(dptest::small_config(), 7);
        float& w = model.parameters()[1]->value(1, 2);
        if (c.holds(dist::rank())) w = nan;
        const std::uint32_t b = std::bit_cast<std::uint32_t>(w);
        // rtol 1e-3 and 0 (no tolerance is no reason to compare bits)
        const bool ok = dp::check_parameter_closeness(model, 1e-3f) ||
                        dp::check_parameter_closeness(model, 0.0f);
        std::lock_guard<std::mutex> g(mu);
        answers[static_cast<std::size_t>(dist::rank())] = ok;
        bits[static_cast<std::size_t>(dist::rank())] = b;
      });
      for (int r = 1; r < p; ++r) {  // the NaN ranks really hold the same bits
        if (c.holds(r) && c.holds(0)) {
          ASSERT_EQ(bits[static_cast<std::size_t>(r)], bits[0]) << "test bug";
        }
      }
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(answers[static_cast<std::size_t>(r)], 0)
            << "world size " << p << ", rank " << r << ": " << c.who
            << " holds the same NaN (the same bits) in one weight, yet the replicas were reported "
            << "close (rtol 1e-3 or 0): "
            << "close: |x_r - x_0| <= rtol * max(|x_r|, |x_0|) is false for a NaN, even when "
            << "every rank holds the very same bits";
      }
    }
  }
}

TEST(HiddenSharding, StepsBeyondThirtyTwoBits) {
  // global_batch_index takes and returns std::int64_t: steps past 2^31 / world_size still give
  // step * world_size + rank (what the int64 contract covers), not a wrapped 32-bit value.
  for (const std::int64_t step : {std::int64_t{1} << 29, std::int64_t{1} << 31,
                                  (std::int64_t{1} << 40) + 3, (std::int64_t{1} << 60) / 7}) {
    for (int world : {1, 3, 8}) {
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(dp::global_batch_index(step, rank, world), step * world + rank)
            << "step " << step << ", rank " << rank << " of " << world;
      }
    }
  }
}
