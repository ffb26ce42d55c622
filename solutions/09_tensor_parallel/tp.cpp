// 09_tensor_parallel: your TODOs (tp.hpp says what each function does; layout.hpp declares the
// types, README.md explains the tasks).
#include "tp.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "dist/eigen.hpp"
#include "distlab/todo.hpp"

namespace tp {

// ---- Task 1 ------------------------------------------------------------------------------------

void column_parallel_forward(const Matrix& x, const Matrix& w, Matrix& y) {
  // BEGIN SOLUTION: this rank's output features from the full input (tp.hpp: no communication)
  mlp::linear_forward(x, w, y);
  // END SOLUTION
}

void column_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                              Matrix* dx, const dist::Group& tp) {
  // BEGIN SOLUTION: the weight gradient of this rank's rows, then (only when asked for) the input
  //   gradient, which every TP rank holds only a part of (tp.hpp; README: Task 1)
  mlp::linear_backward_weight(x, dy, dw);
  if (dx != nullptr) {
    mlp::linear_backward_input(w, dy, *dx);
    dist::all_reduce(dist::as_span(*dx), dist::ReduceOp::Sum, tp);
  }
  // END SOLUTION
}

void row_parallel_forward(const Matrix& x, const Matrix& w, Matrix& y, const dist::Group& tp) {
  // BEGIN SOLUTION: the partial product of this rank's features, completed over the TP group
  //   (tp.hpp; README: Task 1, the conjugate operators)
  mlp::linear_forward(x, w, y);
  dist::all_reduce(dist::as_span(y), dist::ReduceOp::Sum, tp);
  // END SOLUTION
}

void row_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                           Matrix& dx) {
  // BEGIN SOLUTION: both gradients of this rank's columns, from the replicated dy (tp.hpp: no
  //   communication)
  mlp::linear_backward_weight(x, dy, dw);
  mlp::linear_backward_input(w, dy, dx);
  // END SOLUTION
}

const Matrix& block_forward(Block& b, const Matrix& x, const dist::Group& tp) {
  // BEGIN SOLUTION: column layer, activation, row layer, keeping in b what the backward reads
  //   (layout.hpp: Block)
  b.x = &x;
  column_parallel_forward(x, b.column.value, b.z);
  mlp::activation_forward(b.activation, b.z, b.a);
  row_parallel_forward(b.a, b.row.value, b.y, tp);
  // END SOLUTION
  return b.y;
}

void block_backward(Block& b, const Matrix& dy, bool need_dx, const dist::Group& tp) {
  // BEGIN SOLUTION: the forward in reverse, each weight's hooks as soon as its gradient is written
  //   (tp.hpp: the order; 05's MLP::backward does the same per layer)
  row_parallel_backward(b.a, b.row.value, dy, b.row.grad, b.da);
  b.row.run_hooks();
  mlp::activation_backward(b.activation, b.z, b.a, b.da, b.dz);
  column_parallel_backward(*b.x, b.column.value, b.dz, b.column.grad, need_dx ? &b.dx : nullptr,
                           tp);
  b.column.run_hooks();
  // END SOLUTION
}

// ---- Task 2 ------------------------------------------------------------------------------------

Grid make_grid(int tp, int dp) {
  if (tp < 1 || dp < 1 || tp * dp != dist::world_size()) {
    throw std::invalid_argument("make_grid: tp x dp = " + std::to_string(tp) + " x " +
                                std::to_string(dp) + " must equal the world size " +
                                std::to_string(dist::world_size()));
  }
  Grid g;
  g.tp = tp;
  g.dp = dp;
  // BEGIN SOLUTION: where this rank sits on the grid, and its two groups (layout.hpp: Grid; the
  //   colour and key arguments of dist::split)
  const int r = dist::rank();
  g.tp_rank = r % tp;
  g.dp_rank = r / tp;
  g.tp_group = dist::split(g.dp_rank, g.tp_rank, dist::world(), "tp");
  g.dp_group = dist::split(g.tp_rank, g.dp_rank, dist::world(), "dp");
  // END SOLUTION
  return g;
}

void average_gradients(std::span<mlp::Parameter* const> params, const Grid& grid) {
  // BEGIN SOLUTION: every gradient becomes the mean over the replicas that hold the same shard
  //   (tp.hpp; README: Task 2, which group)
  for (mlp::Parameter* p : params) {
    dist::all_reduce(dist::as_span(p->grad), dist::ReduceOp::Avg, grid.dp_group);
  }
  // END SOLUTION
}

// ---- Task 3 ------------------------------------------------------------------------------------

ZeroOptimizer::ZeroOptimizer(std::vector<mlp::Parameter*> params, const AdamConfig& config,
                             const dist::Group& dp, int stage)
    : params_(std::move(params)), config_(config), dp_(dp), stage_(stage) {
  if (stage != 1 && stage != 2) {
    throw std::invalid_argument("ZeroOptimizer: stage must be 1 or 2, not " +
                                std::to_string(stage));
  }
  // BEGIN SOLUTION: allocate this rank's state (moment and gradient chunks, one scratch buffer
  //   for the largest padded parameter) and, for stage 2, the hooks (layout.hpp: ZeroOptimizer)
  const int p = dist::world_size(dp_);
  std::size_t largest = 0;
  for (const mlp::Parameter* q : params_) {
    const std::size_t n = padded(static_cast<std::size_t>(q->numel()), p);
    largest = std::max(largest, n);
    m_.emplace_back(n / static_cast<std::size_t>(p), 0.0f);
    v_.emplace_back(n / static_cast<std::size_t>(p), 0.0f);
    grad_shard_.emplace_back(n / static_cast<std::size_t>(p), 0.0f);
  }
  scratch_.assign(largest, 0.0f);
  if (stage_ == 2) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      hooks_.push_back(params_[i]->add_hook([this, i](mlp::Parameter&) { reduce_gradient(i); }));
    }
  }
  // END SOLUTION
}

void ZeroOptimizer::reduce_gradient(std::size_t i) {
  // BEGIN SOLUTION: parameter i's gradient, padded, reduced to this rank's chunk of the mean
  //   (layout.hpp: padding and chunks); stage 2 then lets the full gradient go
  mlp::Parameter& q = *params_[i];
  const std::size_t n = static_cast<std::size_t>(q.numel());
  const std::size_t padded_n = padded(n, dist::world_size(dp_));
  std::copy(q.grad.data(), q.grad.data() + n, scratch_.begin());
  std::fill(scratch_.begin() + static_cast<std::ptrdiff_t>(n),
            scratch_.begin() + static_cast<std::ptrdiff_t>(padded_n), 0.0f);
  dist::reduce_scatter(std::span<const float>(scratch_.data(), padded_n),
                       std::span<float>(grad_shard_[i]), dist::ReduceOp::Avg, dp_);
  if (stage_ == 2) q.grad.resize(0, 0);
  // END SOLUTION
}

void ZeroOptimizer::step() {
  // BEGIN SOLUTION: (stage 1: reduce every gradient first), then one Adam step on this rank's chunk
  //   of each parameter with its chunks of m and v, and give every DP rank the whole new parameter
  //   (layout.hpp: ZeroOptimizer; AdamConfig: the update and its step counter)
  if (stage_ == 1) {
    for (std::size_t i = 0; i < params_.size(); ++i) reduce_gradient(i);
  }
  ++t_;
  const float c1 = 1.0f - std::pow(config_.beta1, static_cast<float>(t_));
  const float c2 = 1.0f - std::pow(config_.beta2, static_cast<float>(t_));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    mlp::Parameter& q = *params_[i];
    const std::size_t n = static_cast<std::size_t>(q.numel());
    const Range mine = shard(i);
    std::vector<float>& m = m_[i];
    std::vector<float>& v = v_[i];
    const std::vector<float>& g = grad_shard_[i];
    std::copy(q.value.data(), q.value.data() + n, scratch_.begin());
    std::fill(scratch_.begin() + static_cast<std::ptrdiff_t>(n),
              scratch_.begin() + static_cast<std::ptrdiff_t>(padded(n, dist::world_size(dp_))),
              0.0f);
    for (std::size_t k = 0; k < mine.size(); ++k) {
      m[k] = config_.beta1 * m[k] + (1.0f - config_.beta1) * g[k];
      v[k] = config_.beta2 * v[k] + (1.0f - config_.beta2) * g[k] * g[k];
      scratch_[mine.begin + k] -=
          config_.learning_rate * (m[k] / c1) / (std::sqrt(v[k] / c2) + config_.eps);
    }
    const std::vector<float> own(scratch_.begin() + static_cast<std::ptrdiff_t>(mine.begin),
                                 scratch_.begin() + static_cast<std::ptrdiff_t>(mine.end));
    dist::all_gather(std::span<const float>(own),
                     std::span<float>(scratch_.data(), mine.size() * dist::world_size(dp_)), dp_);
    std::copy(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(n), q.value.data());
  }
  // END SOLUTION
}

}  // namespace tp
