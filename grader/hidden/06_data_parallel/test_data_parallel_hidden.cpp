// 06_data_parallel, instructor-only: more world sizes, the root perturbed, a mid-size bucket cap.
#include <gtest/gtest.h>

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
