// 09_tensor_parallel: Megatron-style tensor parallelism, 2-D (tensor x data) parallelism and a
// ZeRO sharded optimizer, on 05's MLP (through its public header mlp.hpp).
//
// The model is 05's MLP with an even number of layers, read as blocks of two: layer 2k is the
// block's column-parallel layer, layer 2k+1 its row-parallel layer, and the activation between
// them works on this rank's hidden features only. For a TP group of t ranks, rank j holds hidden
// features shard_range(hidden, t, j) (layout.hpp: the first hidden % t ranks hold one more):
//
//         x (B x in, same on every TP rank)
//         |  column-parallel: y_j = x W1_j^T          forward: nothing to send (identity)
//         |                                           backward: dx = sum_j dz_j W1_j  (all-reduce)
//      z_j, a_j = act(z_j)   (B x h_j, this rank's hidden features)
//         |  row-parallel:    y = sum_j a_j W2_j^T    forward: all-reduce
//         v                                           backward: da_j = dy W2_j (nothing to send)
//         y (B x out, same on every TP rank)
//
// So a block needs exactly ONE all-reduce of B x out in forward and ONE of B x in in backward, both
// inside the TP group (Megatron's conjugate operators f and g). The first block's backward skips
// its all-reduce: the gradient of the input data is never needed.
//
// Tasks (README.md): 1. the two layers and the block; 2. the grid of groups and the data-parallel
// gradient average; 3. ZeRO stage 1 and 2 (the methods of ZeroOptimizer, declared in layout.hpp).
#pragma once

#include <span>

#include "layout.hpp"

namespace tp {

// ---- Task 1: tensor-parallel layers -------------------------------------------------------------

/// Column-parallel forward: y = x w^T, where w (h_j x in) is this rank's rows of the full weight.
/// The input is the same on every TP rank, so nothing is sent.
void column_parallel_forward(const Matrix& x, const Matrix& w, Matrix& y);

/// Column-parallel backward, given dy = d loss / d y (B x h_j): dw = dy^T x (this rank's rows of
/// the full weight's gradient) and, when dx is not null, dx = d loss / d x (B x in), which is the
/// SUM over the TP group of every rank's partial dy w: one all-reduce on `tp`.
void column_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                              Matrix* dx, const dist::Group& tp);

/// Row-parallel forward: y = x_full w_full^T, where this rank holds x (B x h_j, its hidden
/// features) and w (out x h_j, the matching columns of the full weight): y is the SUM over the TP
/// group of the partial products, one all-reduce on `tp`; every TP rank ends with the same y.
void row_parallel_forward(const Matrix& x, const Matrix& w, Matrix& y, const dist::Group& tp);

/// Row-parallel backward, given dy (B x out, the same on every TP rank): dw = dy^T x (this rank's
/// columns of the full gradient) and dx = dy w (B x h_j, this rank's features). Nothing is sent.
void row_parallel_backward(const Matrix& x, const Matrix& w, const Matrix& dy, Matrix& dw,
                           Matrix& dx);

/// The block's forward (column, activation, row; layout.hpp's Block keeps what backward needs).
/// x must stay alive until block_backward. Returns b.y. One all-reduce on `tp`.
const Matrix& block_forward(Block& b, const Matrix& x, const dist::Group& tp);

/// The block's backward, given dy = d loss / d b.y: writes b.row.grad, runs b.row's hooks, then
/// b.column.grad and b.column's hooks (last layer first, like 05's MLP::backward), and when
/// need_dx is true writes b.dx = d loss / d x. At most one all-reduce on `tp` (none without dx).
void block_backward(Block& b, const Matrix& dy, bool need_dx, const dist::Group& tp);

// ---- Task 2: the 2-D grid -------------------------------------------------------------------------

/// Collective over the world (world size tp x dp, else std::invalid_argument): the grid of
/// layout.hpp, with its TP and DP groups made by dist::split (TP groups named "tp<d>", DP groups
/// "dp<j>").
Grid make_grid(int tp, int dp);

/// Data parallelism: replaces every parameter's grad by its MEAN over the DP group (the replicas
/// holding the same shard saw different rows of the batch). Nothing crosses into other DP groups.
void average_gradients(std::span<mlp::Parameter* const> params, const Grid& grid);

// ---- Task 3: ZeRO (the methods of ZeroOptimizer in layout.hpp: constructor, reduce_gradient,
// step) --------------------------------------------------------------------------------------------

}  // namespace tp
