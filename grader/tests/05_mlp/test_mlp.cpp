// 05_mlp: each building block against closed forms and finite differences, the model against
// the reference outputs in grader/golden/05_mlp/ (regenerate: ./distlab golden 05_mlp), and a
// training run that must learn.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "datasets/npy.hpp"
#include "datasets/random.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"
#include "mlp_test_data.hpp"
#include "mlp_golden_cases.hpp"

using distlab::testing::elements_near;
using mlp::Matrix;

namespace {

using mlptest::random_matrix;

std::span<const float> span_of(const Matrix& m) {
  return {m.data(), static_cast<std::size_t>(m.size())};
}

/// Central finite differences of a scalar function f of the matrix at (computed in float, so
/// the tolerance of the comparisons below is loose: 1e-2 relative + 2e-3 absolute).
Matrix finite_difference(Matrix at, const std::function<double(const Matrix&)>& f,
                         float eps = 1e-2f) {
  Matrix g(at.rows(), at.cols());
  for (Eigen::Index i = 0; i < at.size(); ++i) {
    const float orig = at.data()[i];
    at.data()[i] = orig + eps;
    const double up = f(at);
    at.data()[i] = orig - eps;
    const double down = f(at);
    at.data()[i] = orig;
    g.data()[i] = static_cast<float>((up - down) / (2.0 * static_cast<double>(eps)));
  }
  return g;
}

/// <sum(a .* b)> in double: the scalar "loss" L = <y, G> whose gradient wrt y is G.
double dot(const Matrix& a, const Matrix& b) {
  return (a.cast<double>().array() * b.cast<double>().array()).sum();
}

constexpr double kFdRel = 1e-2, kFdAbs = 2e-3;

std::string golden(const std::string& file) {
  const std::string path = std::string(DISTLAB_GOLDEN_DIR) + "/05_mlp/" + file;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error("reference output " + path +
                             " is missing: run ./distlab golden 05_mlp to regenerate it");
  }
  return path;
}
Matrix golden_matrix(const std::string& file) { return datasets::load_npy_matrix(golden(file)); }
mlp::Labels golden_labels(const std::string& file) {
  return datasets::load_npy_int32(golden(file)).data;
}

/// A model of the case's config with the reference's initial weights loaded.
mlp::MLP golden_model(const golden05::Case& gc) {
  mlp::MLP model(gc.config, gc.config.seed + 2);
  auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i]->value = golden_matrix(gc.name + "_w" + std::to_string(i) + ".npy");
  }
  return model;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Linear layer.

TEST(Linear, ForwardIsXTimesWTransposed) {
  const Matrix x = random_matrix(5, 7, 1), w = random_matrix(3, 7, 2);
  Matrix y;
  mlp::linear_forward(x, w, y);
  ASSERT_EQ(y.rows(), 5);
  ASSERT_EQ(y.cols(), 3);
  Matrix want(5, 3);
  for (int b = 0; b < 5; ++b)
    for (int o = 0; o < 3; ++o) {
      double s = 0;
      for (int i = 0; i < 7; ++i) s += static_cast<double>(x(b, i)) * w(o, i);
      want(b, o) = static_cast<float>(s);
    }
  EXPECT_TRUE(elements_near(span_of(y), span_of(want), 1e-5, 1e-5));
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const Matrix x = random_matrix(4, 6, 3), w = random_matrix(5, 6, 4), g = random_matrix(4, 5, 5);
  // L = <x W^T, G>: dL/dy = G.
  Matrix dw, dx, y;
  mlp::linear_backward_weight(x, g, dw);
  mlp::linear_backward_input(w, g, dx);
  const Matrix fd_w = finite_difference(w, [&](const Matrix& wp) {
    mlp::linear_forward(x, wp, y);
    return dot(y, g);
  });
  const Matrix fd_x = finite_difference(x, [&](const Matrix& xp) {
    mlp::linear_forward(xp, w, y);
    return dot(y, g);
  });
  ASSERT_EQ(dw.rows(), 5);
  ASSERT_EQ(dw.cols(), 6);
  ASSERT_EQ(dx.rows(), 4);
  ASSERT_EQ(dx.cols(), 6);
  EXPECT_TRUE(elements_near(span_of(dw), span_of(fd_w), kFdRel, kFdAbs)) << "dW";
  EXPECT_TRUE(elements_near(span_of(dx), span_of(fd_x), kFdRel, kFdAbs)) << "dx";
}

// ---------------------------------------------------------------------------------------------
// Activations.

TEST(Tanh, ForwardAndBackward) {
  const Matrix x = random_matrix(4, 5, 6), g = random_matrix(4, 5, 7);
  Matrix y, dx, yp;
  mlp::tanh_forward(x, y);
  ASSERT_EQ(y.rows(), 4);
  ASSERT_EQ(y.cols(), 5);
  for (Eigen::Index i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y.data()[i], std::tanh(x.data()[i]), 1e-6);
  mlp::tanh_backward(y, g, dx);
  const Matrix fd = finite_difference(
      x,
      [&](const Matrix& xp) {
        mlp::tanh_forward(xp, yp);
        return dot(yp, g);
      },
      1e-3f);
  EXPECT_TRUE(elements_near(span_of(dx), span_of(fd), kFdRel, kFdAbs));
}

TEST(ReLU, ForwardAndBackward) {
  Matrix x = random_matrix(4, 5, 8);
  for (Eigen::Index i = 0; i < x.size(); ++i)  // keep finite differences away from the kink
    if (std::abs(x.data()[i]) < 0.05f) x.data()[i] = 0.3f;
  const Matrix g = random_matrix(4, 5, 9);
  Matrix y, dx, yp;
  mlp::relu_forward(x, y);
  ASSERT_EQ(y.size(), x.size());
  for (Eigen::Index i = 0; i < x.size(); ++i) EXPECT_EQ(y.data()[i], std::max(x.data()[i], 0.0f));
  mlp::relu_backward(x, g, dx);
  const Matrix fd = finite_difference(x, [&](const Matrix& xp) {
    mlp::relu_forward(xp, yp);
    return dot(yp, g);
  });
  EXPECT_TRUE(elements_near(span_of(dx), span_of(fd), kFdRel, kFdAbs));
}

TEST(ReLU, BackwardIsZeroWhereTheInputIsZero) {
  Matrix x(2, 3);
  x << 0.0f, 1.5f, -2.0f, -0.0f, 0.0f, 3.0f;
  const Matrix g = Matrix::Constant(2, 3, 0.7f);
  Matrix dx;
  mlp::relu_backward(x, g, dx);
  ASSERT_EQ(dx.rows(), 2);
  ASSERT_EQ(dx.cols(), 3);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    EXPECT_EQ(dx.data()[i], x.data()[i] > 0.0f ? 0.7f : 0.0f)
        << "element " << i << " (x = " << x.data()[i] << "): the gradient passes only where x > 0";
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy.

namespace {
/// The closed form in double: mean over rows of log(sum_j exp(z_j)) - z_label.
double ce_closed_form(const Matrix& z, const mlp::Labels& y) {
  double total = 0;
  for (Eigen::Index i = 0; i < z.rows(); ++i) {
    const double m = z.row(i).cast<double>().maxCoeff();
    double s = 0;
    for (Eigen::Index j = 0; j < z.cols(); ++j) s += std::exp(static_cast<double>(z(i, j)) - m);
    total += m + std::log(s) - z(i, y[static_cast<std::size_t>(i)]);
  }
  return total / static_cast<double>(z.rows());
}
}  // namespace

TEST(SoftmaxCrossEntropy, ForwardMatchesClosedForm) {
  const Matrix z = random_matrix(6, 4, 10, 2.0f);
  const mlp::Labels y = {0, 3, 1, 1, 2, 0};
  Matrix probs;
  const float loss = mlp::softmax_cross_entropy_forward(z, y, probs);
  EXPECT_NEAR(loss, ce_closed_form(z, y), 1e-5);
  ASSERT_EQ(probs.rows(), 6);
  ASSERT_EQ(probs.cols(), 4);
  for (Eigen::Index i = 0; i < 6; ++i) EXPECT_NEAR(probs.row(i).sum(), 1.0f, 1e-5) << "row " << i;
}

TEST(SoftmaxCrossEntropy, StableForLargeLogits) {
  Matrix z(2, 3);
  z << 1000.0f, 999.0f, -1000.0f, -500.0f, -501.0f, -502.0f;
  const mlp::Labels y = {1, 2};
  Matrix probs, d;
  const float loss = mlp::softmax_cross_entropy_forward(z, y, probs);
  ASSERT_TRUE(std::isfinite(loss))
      << "the loss is not finite for large logits: exp overflowed; compute it so that no large "
         "number is ever exponentiated (README: Tasks, 3, log-sum-exp)";
  EXPECT_NEAR(loss, ce_closed_form(z, y), 1e-4);
  mlp::softmax_cross_entropy_backward(probs, y, d);
  EXPECT_TRUE(d.allFinite());
}

TEST(SoftmaxCrossEntropy, StableWhenTheLabelsLogitIsFarBelowTheMax) {
  // The label's probability (e^-200, e^-110) underflows float: the loss must still be the closed
  // form log(sum_j exp(z_j - m)) + m - z_label, not -log(probs[label]).
  Matrix z(3, 4);
  z << 50.0f, -150.0f, 0.0f, 10.0f, -80.0f, 30.0f, 29.0f, -1000.0f, -1e4f, 2e4f, 0.0f, -3e4f;
  const mlp::Labels y = {1, 0, 3};
  Matrix probs, d;
  const float loss = mlp::softmax_cross_entropy_forward(z, y, probs);
  const double want = ce_closed_form(z, y);
  ASSERT_TRUE(std::isfinite(loss))
      << "the loss overflowed: a label's probability can underflow to 0, "
         "so do not take the log of the probability";
  EXPECT_NEAR(loss, want, 1e-5 * want);
  ASSERT_TRUE(probs.allFinite());
  mlp::softmax_cross_entropy_backward(probs, y, d);
  EXPECT_TRUE(d.allFinite());
}

TEST(SoftmaxCrossEntropy, BackwardMatchesFiniteDifferences) {
  const Matrix z = random_matrix(5, 4, 11);
  const mlp::Labels y = {3, 0, 2, 2, 1};
  Matrix probs, d, scratch;
  mlp::softmax_cross_entropy_forward(z, y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, d);
  const Matrix fd = finite_difference(z, [&](const Matrix& zp) {
    return static_cast<double>(mlp::softmax_cross_entropy_forward(zp, y, scratch));
  });
  ASSERT_EQ(d.rows(), 5);
  ASSERT_EQ(d.cols(), 4);
  EXPECT_TRUE(elements_near(span_of(d), span_of(fd), kFdRel, kFdAbs))
      << "dlogits differ from the finite differences of the mean loss: both the probabilities and "
         "the labels enter the gradient, and the loss is a mean over the batch's rows";
}

TEST(SGD, StepsAgainstTheGradient) {
  mlp::Parameter a, b;
  a.value = random_matrix(3, 2, 12);
  a.grad = random_matrix(3, 2, 13);
  b.value = random_matrix(1, 4, 14);
  b.grad = random_matrix(1, 4, 15);
  const Matrix a0 = a.value, b0 = b.value;
  mlp::SGD opt({&a, &b}, 0.25f);
  opt.step();
  const Matrix wa = a0 - 0.25f * a.grad, wb = b0 - 0.25f * b.grad;
  EXPECT_TRUE(elements_near(span_of(a.value), span_of(wa), 1e-6, 1e-7));
  EXPECT_TRUE(elements_near(span_of(b.value), span_of(wb), 1e-6, 1e-7));
}

// ---------------------------------------------------------------------------------------------
// The model against the reference outputs.

class Golden : public ::testing::TestWithParam<golden05::Case> {};

TEST_P(Golden, ForwardLossAndGradients) {
  const golden05::Case& gc = GetParam();
  mlp::MLP model = golden_model(gc);
  const Matrix x = golden_matrix(gc.name + "_x.npy");
  const mlp::Labels y = golden_labels(gc.name + "_y.npy");
  const Matrix logits = model.forward(x);
  EXPECT_TRUE(elements_near(span_of(logits), span_of(golden_matrix(gc.name + "_logits.npy")),
                            golden05::kRelTol, golden05::kAbsTol))
      << "logits";
  Matrix probs, dlogits;
  const float loss = mlp::softmax_cross_entropy_forward(logits, y, probs);
  const float want_loss = golden_matrix(gc.name + "_loss.npy")(0, 0);
  EXPECT_NEAR(loss, want_loss, golden05::kAbsTol + golden05::kRelTol * std::abs(want_loss));
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  const auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Matrix want = golden_matrix(gc.name + "_grad" + std::to_string(i) + ".npy");
    ASSERT_EQ(params[i]->grad.rows(), want.rows()) << "layer " << i;
    ASSERT_EQ(params[i]->grad.cols(), want.cols()) << "layer " << i;
    EXPECT_TRUE(elements_near(span_of(params[i]->grad), span_of(want), golden05::kRelTol,
                              golden05::kAbsTol))
        << "gradient of layer " << i;
  }
}

TEST_P(Golden, HooksFireLastLayerFirstWithFinalGradients) {
  const golden05::Case& gc = GetParam();
  mlp::MLP model = golden_model(gc);
  const Matrix x = golden_matrix(gc.name + "_x.npy");
  const mlp::Labels y = golden_labels(gc.name + "_y.npy");
  std::vector<int> order;
  std::vector<Matrix> seen(static_cast<std::size_t>(model.n_layers()));
  auto params = model.parameters();
  for (int i = 0; i < model.n_layers(); ++i) {
    params[static_cast<std::size_t>(i)]->add_hook([&, i](mlp::Parameter& p) {
      order.push_back(i);
      seen[static_cast<std::size_t>(i)] = p.grad;  // must already be final
    });
  }
  Matrix probs, dlogits;
  mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  std::vector<int> want;
  for (int i = model.n_layers() - 1; i >= 0; --i) want.push_back(i);
  EXPECT_EQ(order, want)
      << "each weight's hooks must run once, right after its gradient, last layer first";
  for (std::size_t i = 0; i < seen.size() && order == want; ++i) {
    EXPECT_TRUE(elements_near(
        span_of(seen[i]), span_of(golden_matrix(gc.name + "_grad" + std::to_string(i) + ".npy")),
        golden05::kRelTol, golden05::kAbsTol))
        << "gradient of layer " << i << " when its hook ran";
  }
}

TEST(Hooks, EachHookRunsBeforeBackwardReachesTheEarlierLayers) {
  // Observed from inside the hooks: when layer i's hook runs, layer i's gradient is final and the
  // earlier layers' gradients are not computed yet (they still hold the NaNs put there before
  // backward), so a data-parallel wrapper can start sending layer i while backward goes on.
  mlp::Config c;
  c.n_layers = 4;
  c.dim_in = 6;
  c.dim_hidden = 5;
  c.n_classes = 3;
  c.batch_size = 4;
  c.train_size = 8;
  c.test_size = 4;
  for (mlp::Activation act : {mlp::Activation::Tanh, mlp::Activation::ReLU}) {
    c.activation = act;
    mlp::MLP model(c, 7);
    const Matrix x = random_matrix(4, 6, 21);
    const mlp::Labels y = {0, 2, 1, 2};
    auto params = model.parameters();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (mlp::Parameter* p : params)
      p->grad = Matrix::Constant(p->value.rows(), p->value.cols(), nan);
    std::vector<int> order;
    std::vector<std::string> problems;
    for (int i = 0; i < model.n_layers(); ++i) {
      params[static_cast<std::size_t>(i)]->add_hook([&, i](mlp::Parameter& p) {
        order.push_back(i);
        if (!p.grad.allFinite())
          problems.push_back("layer " + std::to_string(i) + "'s own gradient was not computed");
        for (int j = 0; j < i; ++j) {
          if (!params[static_cast<std::size_t>(j)]->grad.array().isNaN().all()) {
            problems.push_back("when layer " + std::to_string(i) + "'s hook ran, layer " +
                               std::to_string(j) + "'s gradient was already computed");
          }
        }
      });
    }
    Matrix probs, dlogits;
    mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    model.backward(dlogits);
    EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0})) << mlp::to_string(act);
    for (const std::string& p : problems) {
      ADD_FAILURE() << mlp::to_string(act) << ": " << p
                    << ": run each layer's hooks right after its weight gradient, before going on "
                       "to the earlier layers";
    }
    for (mlp::Parameter* p : params) EXPECT_TRUE(p->grad.allFinite()) << p->name;
  }
}

TEST_P(Golden, SgdTrajectory) {
  const golden05::Case& gc = GetParam();
  const mlp::Config& c = gc.config;
  mlp::MLP model = golden_model(gc);
  mlp::SGD opt(model.parameters(), c.learning_rate);
  const Matrix xs = golden_matrix(gc.name + "_steps_x.npy");
  const mlp::Labels ys = golden_labels(gc.name + "_steps_y.npy");
  const Matrix want_losses = golden_matrix(gc.name + "_losses.npy");
  Matrix x, probs, dlogits;
  for (int s = 0; s < gc.steps; ++s) {
    x = xs.middleRows(static_cast<Eigen::Index>(s) * c.batch_size, c.batch_size);
    const mlp::Labels y(ys.begin() + s * c.batch_size, ys.begin() + (s + 1) * c.batch_size);
    const float loss = mlp::train_step(model, opt, x, y, probs, dlogits);
    EXPECT_NEAR(loss, want_losses(0, s),
                golden05::kAbsTolSteps + golden05::kRelTol * std::abs(want_losses(0, s)))
        << "loss of step " << s;
  }
  const auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(
        elements_near(span_of(params[i]->value),
                      span_of(golden_matrix(gc.name + "_final_w" + std::to_string(i) + ".npy")),
                      golden05::kRelTol, golden05::kAbsTolSteps))
        << "weights of layer " << i << " after " << gc.steps << " steps";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Golden, ::testing::ValuesIn(golden05::cases()),
                         [](const ::testing::TestParamInfo<golden05::Case>& p) {
                           return p.param.name;
                         });

// ---------------------------------------------------------------------------------------------
// The seed config learns.

TEST(Training, SeedConfigLearns) {
  // The reference reaches a test loss of about 1.16 after 1000 steps (chance level: ln 32 = 3.47).
  const mlp::Config c;  // the seed config
  const auto log = mlp::train(c);
  ASSERT_FALSE(log.empty());
  const float chance = std::log(static_cast<float>(c.n_classes));
  EXPECT_NEAR(log.front().test_loss, chance, 0.3f) << "an untrained model should be near chance";
  EXPECT_LT(log.back().test_loss, 0.6f * chance)
      << "after " << c.niters << " steps the held-out loss should be well below chance";
  EXPECT_LT(log.back().train_loss, log.front().train_loss);
}
