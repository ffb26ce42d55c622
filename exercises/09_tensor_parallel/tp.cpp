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
  DISTLAB_TODO("this rank's output features from the full input (tp.hpp: no communication)");
}

void column_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                              Matrix* dx, const dist::Group& tp) {
  DISTLAB_TODO("the weight gradient of this rank's rows, then (only when asked for) the input "
               "gradient, which every TP rank holds only a part of (tp.hpp; README: Task 1)");
}

void row_parallel_forward(const Matrix& x, const Matrix& w, Matrix& y, const dist::Group& tp) {
  DISTLAB_TODO("the partial product of this rank's features, completed over the TP group (tp.hpp; "
               "README: Task 1, the conjugate operators)");
}

void row_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                           Matrix& dx) {
  DISTLAB_TODO("both gradients of this rank's columns, from the replicated dy (tp.hpp: no "
               "communication)");
}

const Matrix& block_forward(Block& b, const Matrix& x, const dist::Group& tp) {
  DISTLAB_TODO("column layer, activation, row layer, keeping in b what the backward reads "
               "(layout.hpp: Block)");
  return b.y;
}

void block_backward(Block& b, const Matrix& dy, bool need_dx, const dist::Group& tp) {
  DISTLAB_TODO("the forward in reverse, each weight's hooks as soon as its gradient is written "
               "(tp.hpp: the order; 05's MLP::backward does the same per layer)");
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
  DISTLAB_TODO("where this rank sits on the grid, and its two groups (layout.hpp: Grid; the "
               "colour and key arguments of dist::split)");
  return g;
}

void average_gradients(std::span<mlp::Parameter* const> params, const Grid& grid) {
  DISTLAB_TODO("every gradient becomes the mean over the replicas that hold the same shard "
               "(tp.hpp; README: Task 2, which group)");
}

// ---- Task 3 ------------------------------------------------------------------------------------

ZeroOptimizer::ZeroOptimizer(std::vector<mlp::Parameter*> params, const AdamConfig& config,
                             const dist::Group& dp, int stage)
    : params_(std::move(params)), config_(config), dp_(dp), stage_(stage) {
  if (stage != 1 && stage != 2) {
    throw std::invalid_argument("ZeroOptimizer: stage must be 1 or 2, not " +
                                std::to_string(stage));
  }
  DISTLAB_TODO("allocate this rank's state (moment and gradient chunks, one scratch buffer for "
               "the largest padded parameter) and, for stage 2, the hooks (layout.hpp: "
               "ZeroOptimizer)");
}

void ZeroOptimizer::reduce_gradient(std::size_t i) {
  DISTLAB_TODO("parameter i's gradient, padded, reduced to this rank's chunk of the mean "
               "(layout.hpp: padding and chunks); stage 2 then lets the full gradient go");
}

void ZeroOptimizer::step() {
  DISTLAB_TODO("(stage 1: reduce every gradient first), then one Adam step on this rank's chunk "
               "of each parameter with its chunks of m and v, and give every DP rank the whole "
               "new parameter (layout.hpp: ZeroOptimizer; AdamConfig: the update and its step "
               "counter)");
}

}  // namespace tp
