// 05_mlp: a multi-layer perceptron from scratch on Eigen, trained with SGD.
//
//   logits = L_{n-1}( act( ... act( L_1( act( L_0(x) ) ) ) ) ),   L_i(h) = h W_i^T  (no bias)
//   loss   = mean over the batch of -log softmax(logits)[label]
//
// Shapes follow PyTorch: a batch is B x features, one sample per row (row-major, like numpy);
// W_i is out_i x in_i. With the seed config the layers are 1024 -> 256 -> 256 -> 256 -> 32.
//
// What you write (the TODOs in mlp.cpp): the linear layer's forward and its two backward halves,
// tanh and ReLU forward/backward, softmax cross-entropy forward/backward, the SGD step, and the
// MLP's forward and backward over its layers. Everything else (initialisation, gradient hooks,
// the training loop in train()) is given.
//
// Performance rules (the reference step takes ~2 ms on one core): write results into the output
// arguments (they are preallocated and reused every step), use `.noalias()` on matrix products,
// and allocate nothing inside forward/backward. Once a step has sized the buffers, a step with the
// same batch size makes no heap allocation of its own (Eigen's blocked kernel may still take a
// workspace from the heap for a large product: that one is not yours).
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "datasets/classification.hpp"

namespace mlp {

/// Row-major float matrix: a batch is B x features, a weight out x in.
using Matrix = datasets::Matrix;
using Labels = datasets::Labels;

enum class Activation { Tanh, ReLU };

/// The model and training settings; defaults are the seed config (`./distlab run 05_mlp`).
struct Config {
  int n_layers = 4;                 // linear layers (n_layers - 1 hidden activations)
  int dim_in = 1024;                // input features
  int n_classes = 32;               // outputs (logits)
  int dim_hidden = 256;             // width of every hidden layer
  std::int64_t train_size = 10000;  // training rows of the synthetic data set
  std::int64_t test_size = 2000;    // held-out rows: the test loss is measured on these only
  int batch_size = 64;              // rows per SGD step
  float learning_rate = 0.1f;       // SGD step size
  int niters = 1000;                // SGD steps
  std::uint64_t seed = 0;           // data, initial weights and shuffling all derive from it
  Activation activation = Activation::Tanh;
  int log_every = 100;  // print a log line every this many steps (and at the last)

  /// (in, out) of layer i: dim_in -> dim_hidden -> ... -> dim_hidden -> n_classes.
  int layer_in(int i) const { return i == 0 ? dim_in : dim_hidden; }
  int layer_out(int i) const { return i == n_layers - 1 ? n_classes : dim_hidden; }
  /// Throws std::invalid_argument saying which field is wrong.
  void validate() const;
};

std::string to_string(Activation a);
/// One line per field, "name = value".
std::string describe(const Config& config);

// ---------------------------------------------------------------------------------------------
// Parameters and gradient hooks.

/// A trainable tensor: its value, its gradient (same shape), and hooks.
/// A hook is called by MLP::backward the moment this parameter's gradient is final, before the
/// backward pass moves on to earlier layers (so the last layer's hooks fire first). Data-parallel
/// training (06) uses hooks to start all-reducing gradients while backward is still running,
/// like torch.Tensor.register_post_accumulate_grad_hook in PyTorch's DDP.
struct Parameter {
  using Hook = std::function<void(Parameter&)>;

  Parameter() = default;
  /// Copies name, value and grad but not the hooks: a hook belongs to the object it was
  /// registered on (a copied model must not call into the original's data-parallel wrapper).
  Parameter(const Parameter& other) : name(other.name), value(other.value), grad(other.grad) {}
  Parameter& operator=(const Parameter& other) {
    name = other.name;
    value = other.value;
    grad = other.grad;
    return *this;
  }
  Parameter(Parameter&&) = default;
  Parameter& operator=(Parameter&&) = default;

  std::string name;  // "layers.<i>.weight"
  Matrix value;
  Matrix grad;  // d loss / d value, written (not accumulated) by backward

  /// Registers a hook; returns a handle for remove_hook.
  int add_hook(Hook hook);
  /// Removes a hook (an unknown handle is ignored).
  void remove_hook(int handle);
  /// Calls every hook in registration order (MLP::backward calls this; so can tests).
  void run_hooks();
  std::size_t num_hooks() const { return hooks_.size(); }
  std::int64_t numel() const { return value.size(); }

 private:
  std::vector<std::pair<int, Hook>> hooks_;
  int next_handle_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The building blocks (free functions, so each can be tested on its own against finite
// differences). Outputs are resized by the function when their shape is wrong.

/// y = x W^T.   x: B x in, w: out x in, y: B x out.
void linear_forward(const Matrix& x, const Matrix& w, Matrix& y);
/// dw = d loss / d W (out x in, like W), given x and dy = d loss / d y of linear_forward; checked
/// against finite differences (README: Questions; docs/05_mlp.md derives it).
void linear_backward_weight(const Matrix& x, const Matrix& dy, Matrix& dw);
/// dx = d loss / d x (B x in, like x), given W and dy = d loss / d y of linear_forward.
void linear_backward_input(const Matrix& w, const Matrix& dy, Matrix& dx);

/// y = tanh(x), elementwise.
void tanh_forward(const Matrix& x, Matrix& y);
/// dx = d loss / d x of tanh, given the forward's OUTPUT y (tanh's derivative is a function of y).
void tanh_backward(const Matrix& y, const Matrix& dy, Matrix& dx);
/// y = max(x, 0), elementwise.
void relu_forward(const Matrix& x, Matrix& y);
/// dx = d loss / d x of ReLU, given the forward's INPUT x (the gradient is 0 where x <= 0).
void relu_backward(const Matrix& x, const Matrix& dy, Matrix& dx);

/// Softmax cross-entropy, averaged over the batch. Numerically stable: subtract each row's
/// maximum logit before exponentiating (log-sum-exp), so logits of 1000 do not overflow.
/// Returns the mean loss and writes probs = softmax(logits) (B x C) for the backward pass.
/// Labels must lie in [0, C) (else std::out_of_range).
float softmax_cross_entropy_forward(const Matrix& logits, std::span<const std::int32_t> labels,
                                    Matrix& probs);
/// dlogits = d (mean loss) / d logits (B x C), given the forward's probs: the gradient of the
/// batch mean, so it scales with 1/B; checked against finite differences.
void softmax_cross_entropy_backward(const Matrix& probs, std::span<const std::int32_t> labels,
                                    Matrix& dlogits);

/// Given: the hidden activation of a config (tanh or ReLU). z is the activation's input, h its
/// output; tanh's backward uses h, ReLU's uses z.
void activation_forward(Activation a, const Matrix& z, Matrix& h);
void activation_backward(Activation a, const Matrix& z, const Matrix& h, const Matrix& dh,
                         Matrix& dz);

// ---------------------------------------------------------------------------------------------
// The model.

class MLP {
 public:
  /// Weights of layer i drawn uniformly from [-1/sqrt(in_i), 1/sqrt(in_i)] (PyTorch's default for
  /// nn.Linear) from a stream seeded by `seed`: the same seed gives the same model everywhere.
  MLP(const Config& config, std::uint64_t seed);

  /// Returns the logits (B x n_classes) of the batch x (B x dim_in). Keeps what backward needs;
  /// x must stay alive and unchanged until the last backward of this forward has run.
  const Matrix& forward(const Matrix& x);
  /// Given dlogits = d loss / d logits of the last forward, writes every weight's grad, last
  /// layer first, and runs each weight's hooks as soon as its grad is written. backward may run
  /// again before the next forward (another dlogits): each call gives that forward's gradients.
  void backward(const Matrix& dlogits);

  /// The weights in forward order (parameters()[0] is the first layer's).
  std::vector<Parameter*> parameters();
  std::vector<const Parameter*> parameters() const;
  int n_layers() const { return static_cast<int>(weights_.size()); }
  const Config& config() const { return config_; }
  std::int64_t num_parameters() const;
  /// Multiply-adds of forward for a batch of B rows, times 2 (FLOPs). Backward costs twice that
  /// (dW and dx per layer) minus the first layer's dx, which it does not compute.
  double forward_flops(int batch) const;

 private:
  Config config_;
  std::vector<Parameter> weights_;  // weights_[i].value: layer_out(i) x layer_in(i)
  const Matrix* input_ = nullptr;   // the x of the last forward
  // Buffers reused every step (allocated on the first forward of a batch size):
  std::vector<Matrix> z_;   // z_[i] = h_{i-1} W_i^T, pre-activation (z_.back() = logits)
  std::vector<Matrix> h_;   // h_[i] = act(z_[i]) for i < n_layers - 1
  std::vector<Matrix> dh_;  // d loss / d h_[i]
  std::vector<Matrix> dz_;  // d loss / d z_[i]
};

/// value -= learning_rate * grad for every parameter.
class SGD {
 public:
  SGD(std::vector<Parameter*> params, float learning_rate);
  void step();
  float learning_rate() const { return learning_rate_; }

 private:
  std::vector<Parameter*> params_;
  float learning_rate_;
};

// ---------------------------------------------------------------------------------------------
// Training (given code).

/// The data of a config: a seeded make_classification set of train_size + test_size rows,
/// split into train and held-out test and standardised with the training statistics.
datasets::Split make_data(const Config& config);

/// One SGD step on a batch: forward, loss, backward, optimizer step. Returns the batch's loss.
/// probs and dlogits are the caller's reusable buffers.
float train_step(MLP& model, SGD& opt, const Matrix& x, const Labels& y, Matrix& probs,
                 Matrix& dlogits);

/// Mean loss over a whole data set (evaluated in chunks of `chunk` rows, no gradient), on a copy
/// of the model: the model's saved input and buffers are left as the last training step left them.
float evaluate_loss(MLP& model, const datasets::Dataset& data, int chunk = 500);

struct LogLine {
  int step;
  float train_loss;  // mean over the steps since the previous log line
  float test_loss;   // on the held-out set
  double step_ms;    // median wall time of one step since the previous log line
};

/// The bookkeeping of a training log, for train() and every program that trains this model
/// another way: add() each step's loss and wall time; at a log step (every log_every steps, and
/// the last) due() is true, and write() records a LogLine (printing it through `out`) and starts
/// the next window. A rank that does not log calls skip() there instead.
class TrainingLog {
 public:
  TrainingLog(const Config& config, std::function<void(const LogLine&)> out);
  void add(double loss, double step_ms);
  bool due(int step) const;
  double mean_loss() const;  // of the steps added since the last log step
  void write(int step, double train_loss, float test_loss);
  void skip();
  std::vector<LogLine> lines() const { return lines_; }

 private:
  int log_every_, niters_;
  std::function<void(const LogLine&)> out_;
  std::vector<LogLine> lines_;
  std::vector<double> times_;
  double loss_sum_ = 0.0;
};

/// The whole run of a config: prints (when `out` is set) every log_every steps
/// "step N | train_loss X | test_loss Y | step time Z ms" and returns those lines.
std::vector<LogLine> train(const Config& config, std::function<void(const LogLine&)> out = {});

}  // namespace mlp
