// 09_tensor_parallel: Megatron-style tensor parallelism, 2-D (tensor x data) parallelism and a
// ZeRO sharded optimizer, on 05's MLP (through its public header mlp.hpp).
//
// The model is 05's MLP with an even number of layers, read as blocks of two: layer 2k is the
// block's column-parallel layer, layer 2k+1 its row-parallel layer, and the activation between
// them works on this rank's hidden features only. For a TP group of t ranks, rank j holds hidden
// features shard_range(hidden, t, j) (layout.hpp: the first hidden % t ranks hold one more). What
// must hold on every rank j of the TP group, at each point of a block:
//
//         x      (B x in)   the same on every TP rank
//         |      column-parallel layer: W1's rows for features h_j (h_j x in)
//         v
//      z_j, a_j  (B x h_j)  complete values of this rank's hidden features, nobody else's
//         |      row-parallel layer: W2's columns for features h_j (out x h_j)
//         v
//         y      (B x out)  the full output, the same on every TP rank
//
//   backward: dy (B x out) arrives the same on every TP rank; each weight gradient is this rank's
//   slice of the full model's gradient (rows of dW1, columns of dW2); dx, when asked for, is the
//   full d loss / d x (B x in), the same on every TP rank.
//
// Communication budget, inside the TP group only: per block exactly ONE built-in all-reduce of
// B x out in forward and ONE of B x in in backward, and none at all in the backward of the first
// block (the gradient of the input data is never needed); no other collective call, no barrier
// either (the tests count both). Where in the block they belong is Task 1
// (docs/09_tensor_parallel.md: Megatron's block).
//
// Tasks (README.md): 1. the two layers and the block; 2. the grid of groups and the data-parallel
// gradient average; 3. ZeRO stage 1 and 2 (the methods of ZeroOptimizer, declared in layout.hpp).
#pragma once

#include <span>

#include "layout.hpp"

namespace tp {

// ---- Task 1: tensor-parallel layers -------------------------------------------------------------

/// Column-parallel forward: y (B x h_j) = this rank's output features of the full layer, where w
/// (h_j x in) is this rank's rows of the full weight. Nothing is sent.
void column_parallel_forward(const Matrix& x, const Matrix& w, Matrix& y);

/// Column-parallel backward, given dy = d loss / d y (B x h_j): dw = this rank's rows of the full
/// weight's gradient and, when dx is not null, dx = the full d loss / d x (B x in), the same on
/// every rank of `tp`: one all-reduce on `tp` (nothing is sent when dx is null).
void column_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                              Matrix* dx, const dist::Group& tp);

/// Row-parallel forward: y (B x out) = the full layer's output x_full w_full^T, where this rank
/// holds x (B x h_j, its hidden features) and w (out x h_j, the matching columns of the full
/// weight); every TP rank ends with the same y. One all-reduce on `tp`.
void row_parallel_forward(const Matrix& x, const Matrix& w, Matrix& y, const dist::Group& tp);

/// Row-parallel backward, given dy (B x out, the same on every TP rank): dw = this rank's columns of
/// the full weight's gradient, dx = d loss / d x for this rank's features only (B x h_j). Nothing
/// is sent.
void row_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                           Matrix& dx);

/// The block's forward (column, activation, row; layout.hpp's Block keeps what backward needs).
/// x must stay alive until block_backward. Returns b.y. One all-reduce on `tp`.
const Matrix& block_forward(Block& b, const Matrix& x, const dist::Group& tp);

/// The block's backward, given dy = d loss / d b.y: writes b.row.grad, runs b.row's hooks, then
/// b.column.grad and b.column's hooks (last layer first, like 05's MLP::backward), and when
/// need_dx is true writes b.dx = d loss / d x. At most one all-reduce on `tp` (none without dx).
/// Hooks are 05's (mlp.hpp): Parameter::add_hook(fn) registers fn and returns a handle for
/// remove_hook; run_hooks() calls every hook of the parameter once, in registration order. Each
/// parameter's hooks run exactly once per backward, right after its gradient is written and before
/// anything else is computed (ZeRO-2's reduce-scatter runs there).
void block_backward(Block& b, const Matrix& dy, bool need_dx, const dist::Group& tp);

// ---- Task 2: the 2-D grid -------------------------------------------------------------------------

/// Collective over the world (world size tp x dp, else std::invalid_argument): the grid of
/// layout.hpp (where every world rank sits, and its two groups, with group ranks in the order of
/// tp_rank and dp_rank), made by dist::split. The TP group of replica d is named "tp<d>", the DP
/// group of shard j "dp<j>".
Grid make_grid(int tp, int dp);

/// Data parallelism: replaces every parameter's grad by its MEAN over the DP group (the replicas
/// holding the same shard saw different rows of the batch). Nothing crosses into other DP groups.
void average_gradients(std::span<mlp::Parameter* const> params, const Grid& grid);

// ---- Task 3: ZeRO (the methods of ZeroOptimizer in layout.hpp: constructor, reduce_gradient,
// step) --------------------------------------------------------------------------------------------

}  // namespace tp
