// The kit's own figures for 06_data_parallel: not graded (no manifest item; it tests the kit's
// given code, not an exercise), run by `./distlab test` with the kit's tests (CTest label kit).
// The numbers the README and run_06_data_parallel state must be true: the first layer's share of
// the seed config's parameters (README, question 4) and the compute the simulated clock charges
// (only the matrix products backward really computes: no input gradient for the first layer).
#include <gtest/gtest.h>

#include <cstdint>

#include "ddp.hpp"
#include "dist/dist.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"

namespace {

constexpr std::int64_t kSeedParams = 1024 * 256 + 256 * 256 + 256 * 256 + 256 * 32;  // 401,408
constexpr std::int64_t kSeedFirstLayer = 1024 * 256;                                 // 262,144

}  // namespace

TEST(KitFigures, SeedConfigFirstLayerShareIs65Percent) {
  const mlp::Config c;  // the seed config
  const mlp::MLP model(c, c.seed);
  ASSERT_EQ(model.num_parameters(), kSeedParams);
  ASSERT_EQ(model.parameters().front()->numel(), kSeedFirstLayer);
  const double share = static_cast<double>(kSeedFirstLayer) / static_cast<double>(kSeedParams);
  EXPECT_NEAR(share, 0.65, 0.005) << "06 README, question 4, states 65%";
}

TEST(KitFigures, StepFlopsCountOnlyTheProductsBackwardComputes) {
  const mlp::Config c;
  const mlp::MLP model(c, c.seed);
  const dp::StepFlops f = dp::step_flops(model, c.batch_size);
  const double b = c.batch_size;
  EXPECT_DOUBLE_EQ(f.forward, 2 * b * kSeedParams);
  EXPECT_DOUBLE_EQ(f.backward_total(),
                   2 * b * kSeedParams + 2 * b * (kSeedParams - kSeedFirstLayer));
  ASSERT_EQ(f.backward.size(), 4u);
  EXPECT_DOUBLE_EQ(f.backward[0], 2 * b * kSeedFirstLayer) << "the first layer: dW only";
  EXPECT_DOUBLE_EQ(f.backward[1], 4 * b * 256 * 256) << "a hidden layer: dW and dx";
  // 3x the forward would overstate a step by 28% in this config.
  EXPECT_NEAR(3 * f.forward / (f.forward + f.backward_total()), 1.278, 0.001);
}

TEST(KitFigures, ComputeModelChargesExactlyStepFlops) {
  mlp::Config c;
  c.n_layers = 3;
  c.dim_in = 48;
  c.dim_hidden = 24;
  c.n_classes = 6;
  c.batch_size = 8;
  c.train_size = 64;
  c.test_size = 8;
  const double speed = 1e9;
  distlab::testing::run_ranks(1, [&] {
    mlp::MLP model(c, 3);
    dp::ComputeModel compute(model, c.batch_size, speed);
    const dp::StepFlops f = dp::step_flops(model, c.batch_size);
    const mlp::Matrix x = mlp::Matrix::Random(c.batch_size, c.dim_in);
    mlp::Labels y(static_cast<std::size_t>(c.batch_size), 1);
    mlp::Matrix probs, dlogits;
    const double t0 = dist::sim_time();
    compute.charge_forward();
    mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
    const double t1 = dist::sim_time();
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    model.backward(dlogits);
    const double t2 = dist::sim_time();
    EXPECT_NEAR(t1 - t0, f.forward / speed, 1e-12);
    EXPECT_NEAR(t2 - t1, f.backward_total() / speed, 1e-12)
        << "the modelled backward must charge dW for every layer and dx for all but the first";
  });
}
