// 05_mlp, instructor-only: the whole model's gradients against finite differences of the loss
// (ReLU, one and two layers), buffers reused across batch sizes, extreme logits.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "datasets/random.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"

using mlp::Matrix;

namespace {

Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  datasets::Rng rng(seed);
  Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = rng.normal();
  return m;
}

double model_loss(mlp::MLP& model, const Matrix& x, const mlp::Labels& y) {
  Matrix probs;
  return mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
}

void check_model_gradients(const mlp::Config& c) {
  mlp::MLP model(c, 21);
  const Matrix x = random_matrix(c.batch_size, c.dim_in, 22);
  mlp::Labels y;
  for (int i = 0; i < c.batch_size; ++i) y.push_back(i % c.n_classes);
  Matrix probs, dlogits;
  mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  auto params = model.parameters();
  for (std::size_t li = 0; li < params.size(); ++li) {
    mlp::Parameter& p = *params[li];
    const Matrix analytic = p.grad;
    for (Eigen::Index k = 0; k < p.value.size(); k += 3) {
      const float orig = p.value.data()[k];
      const float eps = 1e-3f;
      p.value.data()[k] = orig + eps;
      const double up = model_loss(model, x, y);
      p.value.data()[k] = orig - eps;
      const double down = model_loss(model, x, y);
      p.value.data()[k] = orig;
      const double fd = (up - down) / (2.0 * eps);
      EXPECT_NEAR(analytic.data()[k], fd, 3e-3 + 3e-2 * std::abs(fd))
          << "layer " << li << " element " << k << " (" << mlp::to_string(c.activation) << ", "
          << c.n_layers << " layers)";
    }
  }
}

}  // namespace

TEST(HiddenModel, GradientsMatchFiniteDifferences) {
  mlp::Config c;
  c.dim_in = 7;
  c.dim_hidden = 6;
  c.n_classes = 4;
  c.batch_size = 5;
  c.train_size = 10;
  for (int layers : {1, 2, 3}) {
    for (auto act : {mlp::Activation::Tanh, mlp::Activation::ReLU}) {
      c.n_layers = layers;
      c.activation = act;
      check_model_gradients(c);
    }
  }
}

TEST(HiddenModel, BuffersFollowTheBatchSize) {
  mlp::Config c;
  c.n_layers = 3;
  c.dim_in = 9;
  c.dim_hidden = 8;
  c.n_classes = 3;
  c.batch_size = 8;
  c.train_size = 20;
  mlp::MLP reused(c, 4), fresh(c, 4);
  const Matrix big = random_matrix(8, 9, 1), small = random_matrix(3, 9, 2);
  const mlp::Labels ybig = {0, 1, 2, 0, 1, 2, 0, 1}, ysmall = {2, 2, 1};
  Matrix probs, d;
  mlp::softmax_cross_entropy_forward(reused.forward(big), ybig, probs);
  mlp::softmax_cross_entropy_backward(probs, ybig, d);
  reused.backward(d);
  const Matrix got_logits = reused.forward(small);
  mlp::softmax_cross_entropy_forward(got_logits, ysmall, probs);
  mlp::softmax_cross_entropy_backward(probs, ysmall, d);
  reused.backward(d);
  Matrix probs2, d2;
  const Matrix want_logits = fresh.forward(small);
  mlp::softmax_cross_entropy_forward(want_logits, ysmall, probs2);
  mlp::softmax_cross_entropy_backward(probs2, ysmall, d2);
  fresh.backward(d2);
  ASSERT_EQ(got_logits.rows(), 3);
  EXPECT_TRUE(got_logits.isApprox(want_logits, 1e-5f));
  const auto a = reused.parameters(), b = fresh.parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i]->grad.isApprox(b[i]->grad, 1e-4f)) << "layer " << i;
  }
}

TEST(HiddenSoftmax, VeryNegativeLogitsAndOneRow) {
  Matrix z(1, 3);
  z << -2000.0f, -2001.0f, -1999.0f;
  const mlp::Labels y = {0};
  Matrix probs, d;
  const float loss = mlp::softmax_cross_entropy_forward(z, y, probs);
  const double want = std::log(std::exp(-1.0) + std::exp(-2.0) + 1.0) + 1.0;  // shifted by the max
  EXPECT_NEAR(loss, want, 1e-4);
  mlp::softmax_cross_entropy_backward(probs, y, d);
  ASSERT_TRUE(d.allFinite());
  EXPECT_NEAR(d.sum(), 0.0f, 1e-6f);
}

TEST(HiddenTanh, LargeAndTinyInputs) {
  // y = tanh(x) for every float: saturates to +-1 far from 0 (no inf / inf), and keeps its
  // relative accuracy near 0 (where exp(2x) - 1 cancels).
  const std::vector<float> large = {20.0f, 44.5f, 50.0f, 89.0f, 100.0f, 1e4f, -50.0f, -1e4f};
  const std::vector<float> tiny = {1e-4f, -3e-5f, 1e-7f, 2.5e-3f};
  mlp::Matrix x(2, static_cast<Eigen::Index>(large.size()));
  for (std::size_t i = 0; i < large.size(); ++i) {
    x(0, static_cast<Eigen::Index>(i)) = large[i];
    x(1, static_cast<Eigen::Index>(i)) = i < tiny.size() ? tiny[i] : -tiny[i - tiny.size()];
  }
  mlp::Matrix y;
  mlp::tanh_forward(x, y);
  ASSERT_EQ(y.rows(), x.rows());
  ASSERT_EQ(y.cols(), x.cols());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const float xi = x.data()[i], yi = y.data()[i];
    const double want = std::tanh(static_cast<double>(xi));
    ASSERT_FALSE(std::isnan(yi)) << "tanh(" << xi << ") is NaN";
    EXPECT_LE(std::abs(yi - want), 1e-5 * std::abs(want))
        << "tanh(" << xi << ") = " << yi << ", want " << want;
  }
}
