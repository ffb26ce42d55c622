// 05_mlp, instructor-only: the whole model's gradients against finite differences of the loss
// (ReLU, one and two layers), buffers reused across batch sizes, extreme logits, ReLU's backward
// under infinite gradients, outputs of the wrong shape. Allocations: test_mlp_hidden_alloc.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "datasets/random.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"
#include "mlp_test_data.hpp"

using mlp::Matrix;

namespace {

using mlptest::random_matrix;

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

TEST(HiddenSoftmax, TheLargeLogitInAnyColumn) {
  // mlp.hpp: "subtract each row's maximum logit before exponentiating ..., so logits of 1000 do
  // not overflow": the maximum of the whole row, wherever it sits (first, middle, last class).
  const int C = 4;
  for (int at = 0; at < C; ++at) {
    Matrix z = Matrix::Zero(2, C);
    z(0, at) = 1000.0f;
    z(1, at) = 1000.0f;
    const mlp::Labels y = {at, (at + 1) % C};  // the large logit's class, then another one
    Matrix probs, d;
    const float loss = mlp::softmax_cross_entropy_forward(z, y, probs);
    ASSERT_TRUE(probs.allFinite()) << "the logit of 1000 in column " << at;
    EXPECT_NEAR(probs(0, at), 1.0f, 1e-6f) << "column " << at;
    // Row 0's loss is about 0 (its label holds the 1000), row 1's about 1000: the mean is 500.
    EXPECT_NEAR(loss, 500.0f, 1e-3f) << "the logit of 1000 in column " << at;
    mlp::softmax_cross_entropy_backward(probs, y, d);
    EXPECT_TRUE(d.allFinite()) << "column " << at;
  }
}

TEST(HiddenSoftmax, SmallLossesNextToLogitsOf1000AndALongBatchKeepTheirDigits) {
  // mlp.hpp: "so logits of 1000 do not overflow. Returns the mean loss"; hint: "Accumulate in
  // double so a large batch does not lose precision". A row {1000, 989} with label 0 has the loss
  // log(1 + e^-11) = 1.67e-5, far below the float spacing of 1000 (6.1e-5): the row's loss formed
  // as a float near 1000 (the max plus the log of the sum) rounds to 0 or 6.1e-5.
  {
    Matrix z(2, 2);
    z << 1000.0f, 989.0f, -989.0f, -1000.0f;
    const mlp::Labels y = {0, 0};
    Matrix probs;
    const float loss = mlp::softmax_cross_entropy_forward(z, y, probs);
    const double want = std::log1p(std::exp(-11.0));  // both rows: max - label logit = 0, gap 11
    EXPECT_NEAR(loss, want, 1e-3 * want)
        << "rows {1000, 989} and {-989, -1000}, label 0: the loss log(1 + e^-11) = " << want
        << " is lost to rounding next to 1000";
  }
  // A long batch: 2^21 rows {0, d_i} with label 0, d_i in [-0.5, 0.5]. Each row's loss is about
  // 0.7; a float running sum reaches 1.5e6, where the float spacing is 0.125, so its mean drifts.
  {
    const Eigen::Index b = Eigen::Index{1} << 21;
    Matrix z(b, 2);
    mlp::Labels y(static_cast<std::size_t>(b), 0);
    double want = 0.0;
    for (Eigen::Index i = 0; i < b; ++i) {
      const float d = static_cast<float>(i % 1001) / 1000.0f - 0.5f;
      z(i, 0) = 0.0f;
      z(i, 1) = d;
      const double m = std::max(0.0, static_cast<double>(d));
      want += m + std::log(std::exp(-m) + std::exp(static_cast<double>(d) - m));
    }
    want /= static_cast<double>(b);
    Matrix probs;
    const float loss = mlp::softmax_cross_entropy_forward(z, y, probs);
    EXPECT_NEAR(loss, want, 1e-6 * want)
        << "mean loss over " << b << " rows: a float accumulator loses the batch's digits";
  }
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

TEST(HiddenReLU, BackwardIsZeroWhereTheInputIsNotPositiveWhateverTheGradient) {
  // Where x <= 0 the gradient is 0, also when dy there is infinite or NaN (an upstream overflow
  // must not leak into the inputs that ReLU cut off); where x > 0 dy passes unchanged.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Matrix x(2, 4), dy(2, 4);
  x << -1.0f, 0.0f, -0.0f, 2.0f,  //
      -3.0f, 0.5f, -1e-30f, -7.0f;
  dy << inf, -inf, nan, inf,  //
      nan, -2.5f, 1e30f, -inf;
  Matrix dx;
  mlp::relu_backward(x, dy, dx);
  ASSERT_EQ(dx.rows(), 2);
  ASSERT_EQ(dx.cols(), 4);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const float xi = x.data()[i], gi = dy.data()[i], di = dx.data()[i];
    if (xi > 0.0f) {
      EXPECT_TRUE(di == gi || (std::isnan(di) && std::isnan(gi)))
          << "element " << i << " (x = " << xi << ", dy = " << gi << "): dx = " << di
          << ", want dy (the gradient passes where x > 0)";
    } else {
      EXPECT_EQ(di, 0.0f) << "element " << i << " (x = " << xi << ", dy = " << gi
                          << "): dx = " << di << ", want 0: the gradient is 0 where x <= 0 "
                          << "whatever dy is there (inf * 0 is NaN)";
    }
  }
}

TEST(HiddenReLU, ForwardIsTheMaximumWithZeroForInfiniteInputs) {
  // mlp.hpp: "y = max(x, 0), elementwise." -inf gives 0 and +inf gives +inf (x times a 0/1 mask
  // gives -inf * 0 = NaN); every finite input too, both signs and zero.
  const float inf = std::numeric_limits<float>::infinity();
  Matrix x(2, 4), y;
  x << -inf, inf, -2.5f, 0.0f,  //
      3.0f, -inf, -1e-30f, 1e30f;
  mlp::relu_forward(x, y);
  ASSERT_EQ(y.rows(), 2);
  ASSERT_EQ(y.cols(), 4);
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const float xi = x.data()[i], yi = y.data()[i];
    EXPECT_EQ(yi, xi > 0.0f ? xi : 0.0f)
        << "element " << i << " (x = " << xi << "): y = " << yi << ", want max(x, 0)";
  }
}

TEST(HiddenSgd, EveryWeightMovesWhateverItsGradient) {
  // mlp.hpp: "value -= learning_rate * grad for every parameter.", for every gradient: an infinite
  // or NaN gradient makes the weight infinite or NaN (a step that skips non-finite gradients
  // hides a diverged run), a zero one leaves it.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  mlp::Parameter p;
  p.value = Matrix::Constant(1, 5, 1.0f);
  p.grad.resize(1, 5);
  p.grad << inf, -inf, nan, 0.0f, 2.0f;
  mlp::SGD opt({&p}, 0.25f);
  opt.step();
  EXPECT_EQ(p.value(0, 0), -inf) << "1 - 0.25 * inf";
  EXPECT_EQ(p.value(0, 1), inf) << "1 - 0.25 * -inf";
  EXPECT_TRUE(std::isnan(p.value(0, 2))) << "1 - 0.25 * NaN is NaN, got " << p.value(0, 2);
  EXPECT_EQ(p.value(0, 3), 1.0f) << "1 - 0.25 * 0";
  EXPECT_EQ(p.value(0, 4), 0.5f) << "1 - 0.25 * 2";
}

TEST(HiddenShapes, OutputsOfTheRightSizeButTheWrongShapeTakeTheRightShape) {
  // Every building block, its output preallocated with as many elements as the result but the
  // transposed shape (and garbage in it): the result must have the documented shape and the values
  // a fresh output gets.
  const Matrix x = random_matrix(3, 5, 31), w = random_matrix(2, 5, 32);
  const Matrix dy = random_matrix(3, 2, 33), z = random_matrix(3, 2, 34);
  const Matrix logits = random_matrix(3, 4, 35);
  const mlp::Labels labels = {1, 3, 0};
  const Matrix probs_fresh = [&] {
    Matrix p;
    mlp::softmax_cross_entropy_forward(logits, labels, p);
    return p;
  }();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* name;
    std::function<void(Matrix&)> call;
  };
  const std::vector<Case> cases = {
      {"linear_forward", [&](Matrix& out) { mlp::linear_forward(x, w, out); }},
      {"linear_backward_weight", [&](Matrix& out) { mlp::linear_backward_weight(x, dy, out); }},
      {"linear_backward_input", [&](Matrix& out) { mlp::linear_backward_input(w, dy, out); }},
      {"tanh_forward", [&](Matrix& out) { mlp::tanh_forward(z, out); }},
      {"tanh_backward",
       [&](Matrix& out) { mlp::tanh_backward(z.array().tanh().matrix(), dy, out); }},
      {"relu_forward", [&](Matrix& out) { mlp::relu_forward(z, out); }},
      {"relu_backward", [&](Matrix& out) { mlp::relu_backward(z, dy, out); }},
      {"softmax_cross_entropy_forward",
       [&](Matrix& out) { mlp::softmax_cross_entropy_forward(logits, labels, out); }},
      {"softmax_cross_entropy_backward",
       [&](Matrix& out) { mlp::softmax_cross_entropy_backward(probs_fresh, labels, out); }},
  };
  for (const Case& c : cases) {
    Matrix want;
    c.call(want);
    ASSERT_GT(want.rows(), 1) << c.name;
    ASSERT_NE(want.rows(), want.cols()) << c.name;
    Matrix got = Matrix::Constant(want.cols(), want.rows(), nan);
    c.call(got);
    EXPECT_EQ(got.rows(), want.rows())
        << c.name << ": an output with the right number of elements but the shape " << want.cols()
        << " x " << want.rows() << " must be resized to " << want.rows() << " x " << want.cols();
    EXPECT_EQ(got.cols(), want.cols()) << c.name;
    if (got.rows() == want.rows() && got.cols() == want.cols()) {
      EXPECT_EQ(got, want) << c.name
                           << ": the values differ from those written into an empty "
                              "output";
    }
  }
}

TEST(HiddenShapes, AnEmptyBatchResizesStaleOutputsToZeroRows) {
  // A batch of 0 rows: each output, preallocated with a stale 4-row shape (garbage in it), must
  // take the documented shape 0 x cols (mlp.hpp: outputs are resized when their shape is wrong).
  const Matrix x(0, 5), w = random_matrix(2, 5, 41), dy(0, 2), z(0, 2), probs(0, 3);
  const mlp::Labels none;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* name;
    Eigen::Index cols;
    std::function<void(Matrix&)> call;
  };
  const std::vector<Case> cases = {
      {"linear_forward", 2, [&](Matrix& out) { mlp::linear_forward(x, w, out); }},
      {"linear_backward_input", 5, [&](Matrix& out) { mlp::linear_backward_input(w, dy, out); }},
      {"tanh_forward", 2, [&](Matrix& out) { mlp::tanh_forward(z, out); }},
      {"tanh_backward", 2, [&](Matrix& out) { mlp::tanh_backward(z, dy, out); }},
      {"relu_forward", 2, [&](Matrix& out) { mlp::relu_forward(z, out); }},
      {"relu_backward", 2, [&](Matrix& out) { mlp::relu_backward(z, dy, out); }},
      {"softmax_cross_entropy_backward", 3,
       [&](Matrix& out) { mlp::softmax_cross_entropy_backward(probs, none, out); }},
  };
  for (const Case& c : cases) {
    Matrix got = Matrix::Constant(4, c.cols, nan);
    c.call(got);
    EXPECT_EQ(got.rows(), 0) << c.name << " of a batch of 0 rows: the stale 4 x " << c.cols
                             << " output must be resized to 0 x " << c.cols;
    EXPECT_EQ(got.cols(), c.cols) << c.name;
  }
  // The weight gradient of a batch of 0 rows is the zero out x in matrix ("dw = d loss / d W (out
  // x in, like W)"), written over a stale gradient of that shape and over one of the wrong shape.
  for (const Matrix& stale :
       {Matrix(Matrix::Constant(2, 5, nan)), Matrix(Matrix::Constant(3, 3, 7.0f))}) {
    Matrix dw = stale;
    mlp::linear_backward_weight(x, dy, dw);
    ASSERT_EQ(dw.rows(), 2) << "linear_backward_weight of 0 rows, dw was " << stale.rows() << " x "
                            << stale.cols();
    ASSERT_EQ(dw.cols(), 5);
    EXPECT_TRUE((dw.array() == 0.0f).all())
        << "linear_backward_weight of a batch of 0 rows: dw must be all zeros, not the old values";
  }
}

TEST(HiddenBackwardAgain, EachBackwardOfOneForwardGivesThatForwardsGradients) {
  // mlp.hpp: backward may run again before the next forward (another dlogits); each call gives the
  // gradients of that forward. Model a: forward, backward(d1), backward(d2); model b (same seed):
  // forward, backward(d2). Their gradients must agree, and differ from those of d1.
  mlp::Config c;
  c.dim_in = 6;
  c.dim_hidden = 5;
  c.n_classes = 3;
  c.batch_size = 4;
  c.train_size = 8;
  for (int layers : {1, 3}) {
    for (auto act : {mlp::Activation::Tanh, mlp::Activation::ReLU}) {
      c.n_layers = layers;
      c.activation = act;
      const std::string what =
          std::to_string(layers) + " layer(s), " + std::string(mlp::to_string(act));
      mlp::MLP a(c, 51), b(c, 51);
      const Matrix x = random_matrix(4, 6, 52);
      const Matrix d1 = random_matrix(4, 3, 53), d2 = random_matrix(4, 3, 54);
      (void)a.forward(x);
      a.backward(d1);
      std::vector<Matrix> first;
      for (const auto* p : a.parameters()) first.push_back(p->grad);
      ASSERT_NO_THROW(a.backward(d2))
          << what << ": a second backward of the same forward must write its gradients";
      (void)b.forward(x);
      b.backward(d2);
      const auto pa = a.parameters(), pb = b.parameters();
      ASSERT_EQ(pa.size(), pb.size());
      for (std::size_t i = 0; i < pa.size(); ++i) {
        ASSERT_FALSE(first[i].isApprox(pb[i]->grad, 1e-3f)) << what << ": d1 and d2 must differ";
        EXPECT_TRUE(pa[i]->grad.isApprox(pb[i]->grad, 1e-5f))
            << what << ", layer " << i << ": backward(d2) after backward(d1) of one forward must "
            << "give the gradients of that forward for d2";
      }
    }
  }
}

TEST(HiddenHooks, EveryHookFiresWhenTheGradientsAreZero) {
  // mlp.hpp: backward "runs each weight's hooks as soon as its grad is written", whatever the
  // values: a gradient of exact zeros (a zero dlogits, a batch of 0 rows) is final too, and a
  // data-parallel wrapper (06) waits for every parameter's hook.
  mlp::Config c;
  c.n_layers = 3;
  c.dim_in = 4;
  c.dim_hidden = 5;
  c.n_classes = 3;
  c.batch_size = 2;
  c.train_size = 4;
  c.test_size = 2;
  for (mlp::Activation act : {mlp::Activation::Tanh, mlp::Activation::ReLU}) {
    c.activation = act;
    for (int rows : {3, 0}) {
      mlp::MLP model(c, 11);
      std::vector<int> order;
      auto params = model.parameters();
      for (int i = 0; i < model.n_layers(); ++i)
        params[static_cast<std::size_t>(i)]->add_hook(
            [&, i](mlp::Parameter&) { order.push_back(i); });
      const Matrix x = rows > 0 ? random_matrix(rows, 4, 5) : Matrix(0, 4);
      (void)model.forward(x);
      model.backward(Matrix::Zero(rows, 3));  // every gradient is exactly zero
      EXPECT_EQ(order, (std::vector<int>{2, 1, 0}))
          << mlp::to_string(act) << ", " << rows << " rows, dlogits all zero: each weight's hooks "
          << "must run once, last layer first, even when its gradient is all zeros";
      for (mlp::Parameter* p : params) EXPECT_TRUE((p->grad.array() == 0.0f).all()) << p->name;
    }
  }
}
