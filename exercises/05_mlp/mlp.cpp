// 05_mlp: the layers, the loss, the optimizer and the model. Your TODOs are marked; the given
// code (initialisation, hooks, data, the training loop) is below them.
#include "mlp.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "datasets/loader.hpp"
#include "datasets/random.hpp"
#include "distlab/timing.hpp"
#include "distlab/todo.hpp"

namespace mlp {
namespace {

void check_labels(std::span<const std::int32_t> labels, Eigen::Index rows, Eigen::Index classes,
                  const char* where) {
  if (static_cast<Eigen::Index>(labels.size()) != rows) {
    throw std::invalid_argument(std::string(where) + ": " + std::to_string(labels.size()) +
                                " labels for " + std::to_string(rows) + " rows");
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      throw std::out_of_range(std::string(where) + ": label " + std::to_string(labels[i]) +
                              " of row " + std::to_string(i) + " is outside [0, " +
                              std::to_string(classes) + ")");
    }
  }
}

}  // namespace

// =============================================================================================
// Linear layer (no bias): y = x W^T.

void linear_forward(const Matrix& x, const Matrix& w, Matrix& y) {
  DISTLAB_TODO("the layer's output for a batch of rows, with the shapes mlp.hpp documents, "
               "written straight into y without an Eigen temporary (README: Tasks, 1)");
}

void linear_backward_weight(const Matrix& x, const Matrix& dy, Matrix& dw) {
  DISTLAB_TODO("the loss gradient with respect to W, from the layer's input and the gradient of "
               "its output: derive it from the forward's formula and check the shape against W "
               "(README: Tasks, 1)");
}

void linear_backward_input(const Matrix& w, const Matrix& dy, Matrix& dx) {
  DISTLAB_TODO("the loss gradient with respect to the layer's input x, by the chain rule through "
               "the forward's formula; it has x's shape (README: Tasks, 1)");
}

// =============================================================================================
// Activations.

void tanh_forward(const Matrix& x, Matrix& y) {
  DISTLAB_TODO("the elementwise tanh activation (README: Tasks, 2)");
}

void tanh_backward(const Matrix& y, const Matrix& dy, Matrix& dx) {
  DISTLAB_TODO("the chain rule through tanh, expressed with the forward's output as mlp.hpp says "
               "(README: Tasks, 2: elementwise chain rule)");
}

void relu_forward(const Matrix& x, Matrix& y) {
  DISTLAB_TODO("the elementwise ReLU activation (README: Tasks, 2)");
}

void relu_backward(const Matrix& x, const Matrix& dy, Matrix& dx) {
  DISTLAB_TODO("the chain rule through ReLU, from the forward's input (README: Tasks, 2)");
}

// =============================================================================================
// Softmax cross-entropy.

float softmax_cross_entropy_forward(const Matrix& logits, std::span<const std::int32_t> labels,
                                    Matrix& probs) {
  check_labels(labels, logits.rows(), logits.cols(), "softmax_cross_entropy_forward");
  if (logits.rows() == 0) return 0.0f;
  DISTLAB_TODO("the mean softmax cross-entropy of the batch, and the softmax probabilities for "
               "backward, computed so that large or very negative logits neither overflow nor "
               "lose the loss (README: Tasks, 3: log-sum-exp; mlp.hpp)");
}

void softmax_cross_entropy_backward(const Matrix& probs, std::span<const std::int32_t> labels,
                                    Matrix& dlogits) {
  check_labels(labels, probs.rows(), probs.cols(), "softmax_cross_entropy_backward");
  DISTLAB_TODO("the gradient of the mean loss with respect to the logits, from the probabilities "
               "the forward saved (README: Tasks, 3; mlp.hpp)");
}

// =============================================================================================
// SGD.

SGD::SGD(std::vector<Parameter*> params, float learning_rate)
    : params_(std::move(params)), learning_rate_(learning_rate) {}

void SGD::step() {
  DISTLAB_TODO("one plain gradient-descent update of every parameter this optimizer was given "
               "(README: Tasks, 4)");
}

// =============================================================================================
// The MLP's forward and backward.

const Matrix& MLP::forward(const Matrix& x) {
  if (x.cols() != config_.dim_in) {
    throw std::invalid_argument(
        "MLP::forward: input has " + std::to_string(x.cols()) +
        " columns, the model expects dim_in = " + std::to_string(config_.dim_in));
  }
  input_ = &x;
  DISTLAB_TODO("run the layers in order, keeping every pre-activation and activation that "
               "backward will need, and leave the logits in the last layer's output buffer "
               "(README: Tasks, 5; the buffers are described in mlp.hpp)");
  return z_.back();
}

void MLP::backward(const Matrix& dlogits) {
  if (input_ == nullptr) throw std::logic_error("MLP::backward called before forward");
  if (dlogits.rows() != z_.back().rows() || dlogits.cols() != z_.back().cols()) {
    throw std::invalid_argument("MLP::backward: dlogits must have the logits' shape " +
                                std::to_string(z_.back().rows()) + " x " +
                                std::to_string(z_.back().cols()));
  }
  DISTLAB_TODO("backpropagate dlogits through the layers from the last to the first, writing "
               "every weight's gradient and running its hooks the moment that gradient is final, "
               "before moving on to earlier layers (README: Tasks, 5; Parameter in mlp.hpp)");
}

// =============================================================================================
// Given code: activation dispatch, parameters and hooks, the model's construction.

void activation_forward(Activation a, const Matrix& z, Matrix& h) {
  if (a == Activation::Tanh) {
    tanh_forward(z, h);
  } else {
    relu_forward(z, h);
  }
}

void activation_backward(Activation a, const Matrix& z, const Matrix& h, const Matrix& dh,
                         Matrix& dz) {
  if (a == Activation::Tanh) {
    tanh_backward(h, dh, dz);
  } else {
    relu_backward(z, dh, dz);
  }
}

int Parameter::add_hook(Hook hook) {
  hooks_.emplace_back(next_handle_, std::move(hook));
  return next_handle_++;
}

void Parameter::remove_hook(int handle) {
  for (auto it = hooks_.begin(); it != hooks_.end(); ++it) {
    if (it->first == handle) {
      hooks_.erase(it);
      return;
    }
  }
}

void Parameter::run_hooks() {
  for (auto& [handle, hook] : hooks_) hook(*this);
}

std::string to_string(Activation a) { return a == Activation::Tanh ? "tanh" : "relu"; }

void Config::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument("config: " + msg);
  };
  need(n_layers >= 1, "n_layers must be >= 1");
  need(dim_in >= 1 && n_classes >= 2 && dim_hidden >= 1,
       "dim_in and dim_hidden must be >= 1 and n_classes >= 2");
  need(batch_size >= 1 && batch_size <= train_size, "batch_size must be in [1, train_size]");
  need(test_size >= 1, "test_size must be >= 1 (the test loss needs held-out rows)");
  need(niters >= 0, "niters must be >= 0");
  need(learning_rate > 0.0f, "learning_rate must be > 0");
  need(log_every >= 1, "log_every must be >= 1");
}

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "n_layers = " << c.n_layers << "\n"
     << "dim_in = " << c.dim_in << "\n"
     << "n_classes = " << c.n_classes << "\n"
     << "dim_hidden = " << c.dim_hidden << "\n"
     << "train_size = " << c.train_size << "\n"
     << "test_size = " << c.test_size << "\n"
     << "batch_size = " << c.batch_size << "\n"
     << "learning_rate = " << c.learning_rate << "\n"
     << "niters = " << c.niters << "\n"
     << "seed = " << c.seed << "\n"
     << "activation = " << to_string(c.activation) << "\n";
  return os.str();
}

MLP::MLP(const Config& config, std::uint64_t seed) : config_(config) {
  config_.validate();
  datasets::Rng rng(seed);
  const int n = config_.n_layers;
  weights_.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    Parameter& p = weights_[static_cast<std::size_t>(i)];
    p.name = "layers." + std::to_string(i) + ".weight";
    const int in = config_.layer_in(i), out = config_.layer_out(i);
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    p.value.resize(out, in);
    for (Eigen::Index k = 0; k < p.value.size(); ++k)
      p.value.data()[k] = rng.uniform(-bound, bound);
    p.grad = Matrix::Zero(out, in);
  }
  z_.resize(static_cast<std::size_t>(n));
  h_.resize(static_cast<std::size_t>(n - 1));
  dh_.resize(static_cast<std::size_t>(n - 1));
  dz_.resize(static_cast<std::size_t>(n - 1));
}

std::vector<Parameter*> MLP::parameters() {
  std::vector<Parameter*> out;
  for (auto& p : weights_) out.push_back(&p);
  return out;
}

std::vector<const Parameter*> MLP::parameters() const {
  std::vector<const Parameter*> out;
  for (const auto& p : weights_) out.push_back(&p);
  return out;
}

std::int64_t MLP::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& p : weights_) n += p.numel();
  return n;
}

double MLP::forward_flops(int batch) const {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(num_parameters());
}

// =============================================================================================
// Given code: data and training.

datasets::Split make_data(const Config& c) {
  c.validate();
  datasets::ClassificationConfig d;
  d.n_samples = c.train_size + c.test_size;
  d.n_features = c.dim_in;
  d.n_classes = c.n_classes;
  d.n_clusters_per_class = 2;
  int min_informative = 1;
  while ((std::int64_t{1} << min_informative) < 2LL * c.n_classes) ++min_informative;
  d.n_informative = std::min(c.dim_in, std::max(min_informative + 1, std::min(32, c.dim_in / 8)));
  d.n_redundant = std::min(d.n_informative, c.dim_in - d.n_informative);
  d.class_sep = 3.0f;  // test loss ~1.2 after 1000 steps of the seed config (chance: ln 32 = 3.47)
  d.flip_y = 0.01f;
  d.seed = c.seed;
  datasets::Split s =
      datasets::train_test_split(datasets::make_classification(d), c.test_size, c.seed + 1);
  datasets::standardize(s);
  return s;
}

float train_step(MLP& model, SGD& opt, const Matrix& x, const Labels& y, Matrix& probs,
                 Matrix& dlogits) {
  const Matrix& logits = model.forward(x);
  const float loss = softmax_cross_entropy_forward(logits, y, probs);
  softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  opt.step();
  return loss;
}

float evaluate_loss(MLP& model, const datasets::Dataset& data, int chunk) {
  // A copy of the model (weights only, no hooks) runs the evaluation forwards: the model's own
  // saved input stays the caller's batch instead of pointing at this function's local x once it
  // returns, and its buffers keep the training batch's shape.
  MLP eval = model;
  Matrix x, probs;
  Labels y;
  std::vector<std::int64_t> rows;
  double total = 0.0;
  for (std::int64_t start = 0; start < data.size(); start += chunk) {
    const std::int64_t end = std::min<std::int64_t>(data.size(), start + chunk);
    rows.clear();
    for (std::int64_t r = start; r < end; ++r) rows.push_back(r);
    datasets::gather_rows(data, rows, x, y);
    const float loss = softmax_cross_entropy_forward(eval.forward(x), y, probs);
    total += static_cast<double>(loss) * static_cast<double>(end - start);
  }
  return data.size() ? static_cast<float>(total / static_cast<double>(data.size())) : 0.0f;
}

TrainingLog::TrainingLog(const Config& config, std::function<void(const LogLine&)> out)
    : log_every_(config.log_every), niters_(config.niters), out_(std::move(out)) {}

void TrainingLog::add(double loss, double step_ms) {
  loss_sum_ += loss;
  times_.push_back(step_ms);
}

bool TrainingLog::due(int step) const { return step % log_every_ == 0 || step == niters_ - 1; }

double TrainingLog::mean_loss() const {
  return times_.empty() ? 0.0 : loss_sum_ / static_cast<double>(times_.size());
}

void TrainingLog::write(int step, double train_loss, float test_loss) {
  const LogLine line{step, static_cast<float>(train_loss), test_loss, distlab::median(times_)};
  if (out_) out_(line);
  lines_.push_back(line);
  skip();
}

void TrainingLog::skip() {
  times_.clear();
  loss_sum_ = 0.0;
}

std::vector<LogLine> train(const Config& c, std::function<void(const LogLine&)> out) {
  c.validate();
  Eigen::setNbThreads(1);
  const datasets::Split data = make_data(c);
  MLP model(c, c.seed + 2);
  SGD opt(model.parameters(), c.learning_rate);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  Matrix x, probs, dlogits;
  Labels y;
  TrainingLog log(c, std::move(out));
  for (int step = 0; step < c.niters; ++step) {
    loader.load(step, x, y);
    distlab::Stopwatch sw;
    const float loss = train_step(model, opt, x, y, probs, dlogits);
    log.add(loss, sw.elapsed_ms());
    if (log.due(step)) log.write(step, log.mean_loss(), evaluate_loss(model, data.test));
  }
  return log.lines();
}

}  // namespace mlp
