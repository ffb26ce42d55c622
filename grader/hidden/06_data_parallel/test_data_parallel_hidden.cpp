// 06_data_parallel, instructor-only: more world sizes, the root perturbed, a mid-size bucket cap.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "distlab/todo.hpp"
#include "dp_harness.hpp"

using dptest::Mode;

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
    std::lock_guard<std::mutex> g(mu);
    inside[static_cast<std::size_t>(dist::rank())] = a && c;
    outside[static_cast<std::size_t>(dist::rank())] = b;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(inside[static_cast<std::size_t>(r)], 1)
        << "rank " << r << ": |1.11 - 1.0| <= 0.1 x max(|1.11|, |1.0|), so the replicas are close "
        << "(1.11 on rank 2, then on rank 0)";
    EXPECT_EQ(outside[static_cast<std::size_t>(r)], 0)
        << "rank " << r << ": |1.12 - 1.0| > 0.1 x max(|1.12|, |1.0|), so they are not";
  }
}

TEST(HiddenCloseness, EqualReplicasAreCloseWithZeroWeightsAndZeroTolerance) {
  // |x_r - x_0| <= rtol * max(|x_r|, |x_0|) holds with equality for equal values: a weight that
  // is 0 on every rank, or rtol = 0, still leaves identical replicas close (a strict < does not).
  // Both sides: with rtol = 0 the smallest difference is not close.
  std::mutex mu;
  std::vector<int> zero_weight(3, -1), zero_rtol(3, -1), zero_rtol_perturbed(3, -1);
  distlab::testing::run_ranks(3, [&] {
    mlp::MLP model(dptest::small_config(), 5);
    model.parameters()[0]->value(0, 0) = 0.0f;
    model.parameters()[1]->value.row(1).setZero();
    const bool a = dp::check_parameter_closeness(model, 1e-5f);
    const bool b = dp::check_parameter_closeness(model, 0.0f);
    if (dist::rank() == 2) {
      float& w = model.parameters()[1]->value(2, 2);
      w = std::nextafter(w, 2.0f * w);
    }
    const bool c = dp::check_parameter_closeness(model, 0.0f);
    std::lock_guard<std::mutex> g(mu);
    zero_weight[static_cast<std::size_t>(dist::rank())] = a;
    zero_rtol[static_cast<std::size_t>(dist::rank())] = b;
    zero_rtol_perturbed[static_cast<std::size_t>(dist::rank())] = c;
  });
  for (int r = 0; r < 3; ++r) {
    const auto k = static_cast<std::size_t>(r);
    EXPECT_EQ(zero_weight[k], 1) << "rank " << r << ": identical replicas with some weights 0, "
                                 << "rtol 1e-5 (|0 - 0| <= rtol * 0 holds)";
    EXPECT_EQ(zero_rtol[k], 1) << "rank " << r << ": identical replicas, rtol 0";
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
