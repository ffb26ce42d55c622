// Public tests of 09_tensor_parallel: the layers against 05's full layers, the grid, training
// against single-process training, the traffic of each collective, ZeRO's memory (read from the
// kit's containers) and the simulated time on a two-level network.
#include <gtest/gtest.h>

#include <limits>

#include "tp_harness.hpp"

namespace {

using namespace tptest;
using distlab::testing::run_ranks;
using distlab::testing::test_options;

// ---- layers -------------------------------------------------------------------------------------

/// A deterministic matrix with entries in [-1, 1].
mlp::Matrix filled(Eigen::Index rows, Eigen::Index cols, int salt) {
  mlp::Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    m.data()[i] = static_cast<float>(((i * 37 + salt * 101) % 199) - 99) / 99.0f;
  }
  return m;
}

void expect_close(const mlp::Matrix& got, const mlp::Matrix& want, const std::string& what) {
  ASSERT_EQ(got.rows(), want.rows()) << what;
  ASSERT_EQ(got.cols(), want.cols()) << what;
  for (Eigen::Index i = 0; i < want.size(); ++i) {
    const double w = want.data()[i], g = got.data()[i];
    ASSERT_LE(std::abs(g - w), 1e-5 + 1e-5 * std::abs(w))
        << what << ": element " << i << " is " << g << ", expected " << w;
  }
}

struct LayerCase {
  int tp, batch, in, out;
};

class ColumnParallel : public ::testing::TestWithParam<LayerCase> {};
class RowParallel : public ::testing::TestWithParam<LayerCase> {};

TEST_P(ColumnParallel, MatchesTheFullLayer) {
  const LayerCase lc = GetParam();
  const mlp::Matrix x = filled(lc.batch, lc.in, 1), w = filled(lc.out, lc.in, 2);
  const mlp::Matrix dy = filled(lc.batch, lc.out, 3);
  mlp::Matrix y, dw, dx;
  mlp::linear_forward(x, w, y);
  mlp::linear_backward_weight(x, dy, dw);
  mlp::linear_backward_input(w, dy, dx);
  run_ranks(test_options(lc.tp), [&] {
    const tp::Range r = tp::shard_range(static_cast<std::size_t>(lc.out), lc.tp, dist::rank());
    const auto b = static_cast<Eigen::Index>(r.begin), n = static_cast<Eigen::Index>(r.size());
    const mlp::Matrix ws = w.middleRows(b, n), dys = dy.middleCols(b, n);
    mlp::Matrix ys, dws, dxs;
    dist::reset_stats();
    tp::column_parallel_forward(x, ws, ys);
    EXPECT_EQ(dist::stats().bytes_sent, 0u) << "the column-parallel forward sends nothing";
    expect_close(ys, y.middleCols(b, n), "y (this rank's output features)");
    tp::column_parallel_backward(x, ws, dys, dws, &dxs, dist::world());
    expect_close(dws, dw.middleRows(b, n), "dw (this rank's rows)");
    expect_close(dxs, dx, "dx (summed over the TP group)");
    const auto [bytes, messages] = all_reduce_cost(static_cast<std::size_t>(dx.size()), {});
    dist::reset_stats();
    tp::column_parallel_backward(x, ws, dys, dws, &dxs, dist::world());
    EXPECT_EQ(dist::stats().bytes_sent, bytes) << "one all-reduce of dx (B x in)";
    EXPECT_EQ(dist::stats().messages_sent, messages) << "one all-reduce of dx (B x in)";
    dist::reset_stats();
    tp::column_parallel_backward(x, ws, dys, dws, nullptr, dist::world());
    EXPECT_EQ(dist::stats().bytes_sent, 0u) << "without dx nothing is sent";
    expect_close(dws, dw.middleRows(b, n), "dw without dx");
  });
}

TEST_P(RowParallel, MatchesTheFullLayer) {
  const LayerCase lc = GetParam();
  const mlp::Matrix x = filled(lc.batch, lc.in, 4), w = filled(lc.out, lc.in, 5);
  const mlp::Matrix dy = filled(lc.batch, lc.out, 6);
  mlp::Matrix y, dw, dx;
  mlp::linear_forward(x, w, y);
  mlp::linear_backward_weight(x, dy, dw);
  mlp::linear_backward_input(w, dy, dx);
  run_ranks(test_options(lc.tp), [&] {
    const tp::Range r = tp::shard_range(static_cast<std::size_t>(lc.in), lc.tp, dist::rank());
    const auto b = static_cast<Eigen::Index>(r.begin), n = static_cast<Eigen::Index>(r.size());
    const mlp::Matrix xs = x.middleCols(b, n), ws = w.middleCols(b, n);
    mlp::Matrix ys, dws, dxs;
    const auto [bytes, messages] = all_reduce_cost(static_cast<std::size_t>(y.size()), {});
    dist::reset_stats();
    tp::row_parallel_forward(xs, ws, ys, dist::world());
    EXPECT_EQ(dist::stats().bytes_sent, bytes) << "one all-reduce of y (B x out)";
    EXPECT_EQ(dist::stats().messages_sent, messages) << "one all-reduce of y (B x out)";
    expect_close(ys, y, "y (summed over the TP group)");
    dist::reset_stats();
    tp::row_parallel_backward(xs, ws, dy, dws, dxs);
    EXPECT_EQ(dist::stats().bytes_sent, 0u) << "the row-parallel backward sends nothing";
    expect_close(dws, dw.middleCols(b, n), "dw (this rank's columns)");
    expect_close(dxs, dx.middleCols(b, n), "dx (this rank's features)");
  });
}

// Output (column) and input (row) sizes that the TP size divides and does not.
INSTANTIATE_TEST_SUITE_P(Sizes, ColumnParallel,
                         ::testing::Values(LayerCase{1, 5, 7, 6}, LayerCase{2, 5, 7, 6},
                                           LayerCase{2, 4, 6, 9}, LayerCase{4, 3, 5, 10}));
INSTANTIATE_TEST_SUITE_P(Sizes, RowParallel,
                         ::testing::Values(LayerCase{1, 5, 6, 7}, LayerCase{2, 5, 6, 7},
                                           LayerCase{2, 4, 9, 6}, LayerCase{4, 3, 10, 5}));

/// The block against 05's two full layers and the activation between them.
void block_case(int t, int hidden, mlp::Activation act) {
  const int batch = 6, in = 5, out = 4;
  const mlp::Matrix x = filled(batch, in, 7), w1 = filled(hidden, in, 8),
                    w2 = filled(out, hidden, 9), dy = filled(batch, out, 10);
  mlp::Matrix z, a, y, dw2, da, dz, dw1, dx;
  mlp::linear_forward(x, w1, z);
  mlp::activation_forward(act, z, a);
  mlp::linear_forward(a, w2, y);
  mlp::linear_backward_weight(a, dy, dw2);
  mlp::linear_backward_input(w2, dy, da);
  mlp::activation_backward(act, z, a, da, dz);
  mlp::linear_backward_weight(x, dz, dw1);
  mlp::linear_backward_input(w1, dz, dx);
  run_ranks(test_options(t), [&] {
    tp::Block blk;
    blk.activation = act;
    blk.hidden = tp::shard_range(static_cast<std::size_t>(hidden), t, dist::rank());
    const auto b = static_cast<Eigen::Index>(blk.hidden.begin);
    const auto n = static_cast<Eigen::Index>(blk.hidden.size());
    blk.column.value = w1.middleRows(b, n);
    blk.row.value = w2.middleCols(b, n);
    // Each hook looks at the gradients when it runs: its own written, the column's not yet when
    // the row's hook runs (NaN until backward writes it).
    std::vector<std::string> order;
    blk.column.add_hook([&](mlp::Parameter& p) {
      order.push_back(p.grad.hasNaN() ? "column (gradient not written)" : "column");
    });
    blk.row.add_hook([&](mlp::Parameter& p) {
      order.push_back(p.grad.hasNaN() ? "row (gradient not written)" : "row");
      if (!blk.column.grad.hasNaN()) order.push_back("(column gradient already written)");
      if (!blk.dz.array().isNaN().all()) {
        order.push_back("(dz already computed: the activation's backward ran before the hook)");
      }
    });
    const float nan = std::numeric_limits<float>::quiet_NaN();
    blk.column.grad = mlp::Matrix::Constant(n, in, nan);
    blk.row.grad = mlp::Matrix::Constant(out, n, nan);
    blk.dz = mlp::Matrix::Constant(batch, n, nan);  // block_backward writes it after the row hook
    const auto [fwd_bytes, fwd_msgs] = all_reduce_cost(static_cast<std::size_t>(y.size()), {});
    const auto [bwd_bytes, bwd_msgs] = all_reduce_cost(static_cast<std::size_t>(dx.size()), {});
    dist::reset_stats();
    const mlp::Matrix& got = tp::block_forward(blk, x, dist::world());
    EXPECT_EQ(dist::stats().bytes_sent, fwd_bytes) << "forward: one all-reduce of B x out";
    EXPECT_EQ(dist::stats().messages_sent, fwd_msgs) << "forward: one all-reduce of B x out";
    expect_close(got, y, "block output");
    dist::reset_stats();
    tp::block_backward(blk, dy, true, dist::world());
    EXPECT_EQ(dist::stats().bytes_sent, bwd_bytes) << "backward: one all-reduce of B x in";
    EXPECT_EQ(dist::stats().messages_sent, bwd_msgs) << "backward: one all-reduce of B x in";
    expect_close(blk.row.grad, dw2.middleCols(b, n), "row weight gradient");
    expect_close(blk.column.grad, dw1.middleRows(b, n), "column weight gradient");
    expect_close(blk.dx, dx, "dx");
    EXPECT_EQ(order, (std::vector<std::string>{"row", "column"}))
        << "each weight's hooks once, as soon as its gradient is written: row first, before the "
           "column layer's backward";
    dist::reset_stats();
    tp::block_backward(blk, dy, false, dist::world());
    EXPECT_EQ(dist::stats().bytes_sent, 0u) << "backward without dx sends nothing";
    expect_close(blk.column.grad, dw1.middleRows(b, n), "column weight gradient without dx");
  });
}

TEST(Block, ForwardBackwardTanh) {
  for (int t : {1, 2, 3}) block_case(t, 8, mlp::Activation::Tanh);
}
TEST(Block, ForwardBackwardReluUneven) {
  for (int t : {2, 4}) block_case(t, 7, mlp::Activation::ReLU);
}

// ---- the grid -----------------------------------------------------------------------------------

TEST(Grid, TpGroupsAreConsecutiveRanksDpGroupsTheColumns) {
  for (auto [t, d] : std::vector<std::pair<int, int>>{{1, 4}, {2, 2}, {4, 1}, {2, 3}, {3, 2}}) {
    SCOPED_TRACE("tp " + std::to_string(t) + " x dp " + std::to_string(d));
    run_ranks(test_options(t * d), [&, t = t, d = d] {
      const tp::Grid g = tp::make_grid(t, d);
      const int r = dist::rank();
      EXPECT_EQ(g.tp, t);
      EXPECT_EQ(g.dp, d);
      EXPECT_EQ(g.tp_rank, r % t);
      EXPECT_EQ(g.dp_rank, r / t);
      EXPECT_EQ(g.tp_group.world_ranks(), expected_tp_ranks(t, d, r));
      EXPECT_EQ(g.dp_group.world_ranks(), expected_dp_ranks(t, d, r));
      EXPECT_EQ(g.tp_group.rank(), r % t);
      EXPECT_EQ(g.dp_group.rank(), r / t);
      EXPECT_EQ(g.tp_group.name(), "tp" + std::to_string(r / t)) << "rank " << r;
      EXPECT_EQ(g.dp_group.name(), "dp" + std::to_string(r % t)) << "rank " << r;
    });
  }
}

TEST(Grid, ShapeThatIsNotTheWorldIsRefused) {
  run_ranks(test_options(4), [] {
    for (auto [t, d] : std::vector<std::pair<int, int>>{{3, 1}, {2, 3}, {0, 4}, {4, 0}, {-2, -2}}) {
      EXPECT_THROW(tp::make_grid(t, d), std::invalid_argument)
          << "tp " << t << " x dp " << d << " on 4 ranks";
    }
    const tp::Grid g = tp::make_grid(2, 2);  // and the refusals left no half-made group behind
    EXPECT_EQ(g.tp_group.world_ranks(), expected_tp_ranks(2, 2, dist::rank()));
    EXPECT_EQ(g.dp_group.world_ranks(), expected_dp_ranks(2, 2, dist::rank()));
  });
}

// ---- average_gradients on its own ----------------------------------------------------------------

/// Every rank fills its gradients with values of its own (world rank, parameter, element); after
/// average_gradients each must be the mean over the ranks of its DP group (the test's arithmetic),
/// sent as one all-reduce per gradient, to the DP group only. Adam steps do not see a gradient's
/// scale (m / sqrt(v)), so the values tests alone cannot tell a sum from a mean: this test does.
void average_case(int t, int d) {
  SCOPED_TRACE("tp " + std::to_string(t) + " x dp " + std::to_string(d));
  // The largest parameter (7 x 5 = 35 floats) is divisible by neither 2, 3 nor 4.
  const std::vector<std::pair<int, int>> shapes = {{7, 5}, {3, 3}, {1, 1}, {2, 4}};
  auto value = [](int rank, std::size_t param, Eigen::Index e) {
    return static_cast<float>(rank * 3 + 1) * 0.25f + static_cast<float>(param) -
           0.125f * static_cast<float>(e);
  };
  run_ranks(test_options(t * d), [&] {
    const tp::Grid g = tp::make_grid(t, d);
    std::vector<mlp::Parameter> params(shapes.size());
    std::vector<mlp::Parameter*> ptrs;
    std::uint64_t bytes = 0, messages = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      params[i].value = mlp::Matrix::Zero(shapes[i].first, shapes[i].second);
      params[i].grad.resize(shapes[i].first, shapes[i].second);
      for (Eigen::Index e = 0; e < params[i].grad.size(); ++e)
        params[i].grad.data()[e] = value(dist::rank(), i, e);
      ptrs.push_back(&params[i]);
      const auto [b, m] =
          all_reduce_cost(static_cast<std::size_t>(params[i].grad.size()), g.dp_group);
      bytes += b;
      messages += m;
    }
    dist::barrier();
    dist::reset_stats();
    tp::average_gradients(ptrs, g);
    const dist::Stats s = dist::stats();
    const std::vector<int> column = expected_dp_ranks(t, d, dist::rank());
    for (std::size_t i = 0; i < params.size(); ++i) {
      for (Eigen::Index e = 0; e < params[i].grad.size(); ++e) {
        double mean = 0;
        for (int q : column) mean += value(q, i, e);
        mean /= static_cast<double>(column.size());
        ASSERT_NEAR(params[i].grad.data()[e], mean, 1e-5 * (1 + std::abs(mean)))
            << "rank " << dist::rank() << ", parameter " << i << " element " << e
            << ": the mean over the DP group (world ranks " << ::testing::PrintToString(column)
            << ")";
      }
    }
    EXPECT_EQ(s.builtin_collectives, shapes.size()) << "one all-reduce per gradient";
    EXPECT_EQ(s.bytes_sent, bytes) << "one all-reduce of each gradient on the DP group";
    EXPECT_EQ(s.messages_sent, messages) << "one all-reduce of each gradient on the DP group";
    for (int q = 0; q < dist::world_size(); ++q) {
      if (g.dp_group.group_rank(q) < 0) {
        EXPECT_EQ(s.bytes_sent_to[static_cast<std::size_t>(q)], 0u)
            << "sent to rank " << q << ", outside the DP group";
      }
    }
  });
}

TEST(AverageGradients, MeanOverTheDpGroupOnly) {
  for (auto [t, d] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {1, 3}, {2, 3}, {1, 4}}) {
    average_case(t, d);
  }
}

// ---- values -------------------------------------------------------------------------------------

TEST(Values, TensorParallel) {
  for (int t : {1, 2, 4}) expect_values(grid_config(tiny_config(8), t, 1, 0));
}
TEST(Values, DataParallel) { expect_values(grid_config(tiny_config(8), 1, 2, 0)); }
// More than two replicas, parameters that dp does not divide (the largest, 11 x 12 = 132 floats,
// over 5 replicas; every shard of the 2 x 3 grid over 3).
TEST(Values, DataParallelManyReplicas) {
  expect_values(grid_config(tiny_config(11, 4, 20), 1, 5, 0));
  expect_values(grid_config(tiny_config(11, 4, 12), 2, 3, 0));
}
TEST(Values, TensorTimesData) { expect_values(grid_config(tiny_config(8), 2, 2, 0)); }
TEST(Values, HiddenNotDivisibleByTp) {
  expect_values(grid_config(tiny_config(10), 4, 1, 0));
  expect_values(grid_config(tiny_config(10), 3, 1, 0));
}
TEST(Values, ZeroStage1) {
  expect_values(grid_config(tiny_config(8), 1, 2, 1));
  expect_values(grid_config(tiny_config(10), 2, 2, 1));
}
TEST(Values, ZeroStage2) {
  expect_values(grid_config(tiny_config(8), 1, 2, 2));
  expect_values(grid_config(tiny_config(10), 2, 2, 2));
}

// ---- traffic ------------------------------------------------------------------------------------

/// Forward and backward of the model on one batch: per direction, exactly the bytes and messages
/// of one built-in all-reduce of B x out (forward) / B x in (backward, not the first block) per
/// block on the TP group, and nothing to any rank outside the TP group.
void tp_traffic(int t, int d, int hidden) {
  const mlp::Config c = tiny_config(hidden, 6);
  const datasets::Split& data = data_for(c);
  run_ranks(test_options(t * d), [&] {
    const tp::Grid g = tp::make_grid(t, d);
    tp::TpMLP model(mlp::MLP(c, c.seed + 2), g);
    mlp::Matrix x, probs, dlogits;
    mlp::Labels y;
    datasets::BatchLoader(data.train, c.batch_size, c.seed + 3).load(0, x, y);
    const auto B = static_cast<std::size_t>(x.rows());
    std::uint64_t fwd_bytes = 0, fwd_msgs = 0, bwd_bytes = 0, bwd_msgs = 0;
    for (int k = 0; k < c.n_layers / 2; ++k) {
      const auto [fb, fm] =
          all_reduce_cost(B * static_cast<std::size_t>(c.layer_out(2 * k + 1)), g.tp_group);
      fwd_bytes += fb;
      fwd_msgs += fm;
      if (k > 0) {
        const auto [bb, bm] =
            all_reduce_cost(B * static_cast<std::size_t>(c.layer_in(2 * k)), g.tp_group);
        bwd_bytes += bb;
        bwd_msgs += bm;
      }
    }
    dist::reset_stats();
    mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
    dist::Stats s = dist::stats();
    EXPECT_EQ(s.builtin_collectives, static_cast<std::uint64_t>(c.n_layers / 2))
        << "forward: one all-reduce per block";
    EXPECT_EQ(s.bytes_sent, fwd_bytes) << "forward: one all-reduce of B x out per block";
    EXPECT_EQ(s.messages_sent, fwd_msgs) << "forward: one all-reduce of B x out per block";
    EXPECT_EQ(s.barriers, 0u) << "forward: no barrier, only the blocks' all-reduces";
    for (int q = 0; q < dist::world_size(); ++q) {
      if (g.tp_group.group_rank(q) < 0) {
        EXPECT_EQ(s.bytes_sent_to[static_cast<std::size_t>(q)], 0u)
            << "forward sent to rank " << q << ", outside the TP group";
      }
    }
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    dist::reset_stats();
    model.backward(dlogits);
    s = dist::stats();
    EXPECT_EQ(s.builtin_collectives, static_cast<std::uint64_t>(c.n_layers / 2 - 1))
        << "backward: one all-reduce per block but the first";
    EXPECT_EQ(s.bytes_sent, bwd_bytes) << "backward: one all-reduce of B x in per block";
    EXPECT_EQ(s.messages_sent, bwd_msgs) << "backward: one all-reduce of B x in per block";
    EXPECT_EQ(s.barriers, 0u) << "backward: no barrier, only the blocks' all-reduces";
  });
}

TEST(Traffic, OneAllReducePerBlockPerDirection) {
  tp_traffic(2, 1, 8);
  tp_traffic(4, 1, 10);
}
TEST(Traffic, NothingAcrossTpGroupsInForward) { tp_traffic(2, 2, 8); }

/// One training step's traffic after a warm-up step, split by destination.
struct StepTraffic {
  std::uint64_t tp = 0, dp = 0, other = 0, collectives = 0;
  std::uint64_t tp_expected = 0;  // the built-in all-reduces of the blocks on tp
  std::uint64_t dp_expected = 0;  // the built-in all-reduce of every (padded) parameter on dp
  // Calls of built-in collectives: the blocks' all-reduces, then per parameter one all-reduce
  // (average_gradients) or a reduce-scatter and an all-gather (ZeRO).
  std::uint64_t collectives_expected = 0;
};

StepTraffic step_traffic(const tp::TpConfig& c, int rank_to_report) {
  StepTraffic out;
  std::mutex mu;
  run_ranks(test_options(c.tp * c.dp), [&] {
    tp::Trainer trainer(c, data_for(c.model));
    trainer.step(0);
    const tp::Grid& g = trainer.grid();
    const auto B = static_cast<std::size_t>(c.model.batch_size / c.dp);
    std::uint64_t expected = 0, tp_expected = 0, collectives = 0;
    const std::uint64_t calls0 = dist::stats().builtin_collectives;
    for (int k = 0; k < c.model.n_layers / 2; ++k) {
      tp_expected +=
          all_reduce_cost(B * static_cast<std::size_t>(c.model.layer_out(2 * k + 1)), g.tp_group)
              .first;
      if (k > 0) {
        tp_expected +=
            all_reduce_cost(B * static_cast<std::size_t>(c.model.layer_in(2 * k)), g.tp_group)
                .first;
      }
    }
    collectives += dist::stats().builtin_collectives - calls0;
    for (const mlp::Parameter* p : trainer.model().parameters()) {
      const auto n = static_cast<std::size_t>(p->numel());
      expected +=
          all_reduce_cost(c.zero ? tp::ZeroOptimizer::padded(n, c.dp) : n, g.dp_group).first;
      collectives += c.zero ? 2 : 1;
    }
    dist::barrier();
    dist::reset_stats();
    trainer.step(1);
    const dist::Stats s = dist::stats();
    if (dist::rank() != rank_to_report) return;
    std::lock_guard<std::mutex> lock(mu);
    out.dp_expected = expected;
    out.tp_expected = tp_expected;
    out.collectives_expected = collectives;
    out.collectives = s.builtin_collectives;
    for (int q = 0; q < dist::world_size(); ++q) {
      const std::uint64_t b = s.bytes_sent_to[static_cast<std::size_t>(q)];
      if (trainer.grid().tp_group.group_rank(q) >= 0) {
        out.tp += b;
      } else if (trainer.grid().dp_group.group_rank(q) >= 0) {
        out.dp += b;
      } else {
        out.other += b;
      }
    }
  });
  return out;
}

void expect_gradient_traffic(const tp::TpConfig& c, int r) {
  SCOPED_TRACE(config_name(c) + ", rank " + std::to_string(r));
  const StepTraffic s = step_traffic(c, r);
  EXPECT_EQ(s.other, 0u) << "sent to ranks in neither of its groups";
  EXPECT_EQ(s.tp, s.tp_expected) << "the blocks' all-reduces, and nothing else, in the TP group";
  EXPECT_EQ(s.dp, s.dp_expected) << "one all-reduce of every gradient on the DP group";
  EXPECT_EQ(s.collectives, s.collectives_expected)
      << "one built-in all-reduce per block and direction on the TP group, then one per "
         "gradient on the DP group";
}

TEST(Traffic, GradientsStayInsideTheDpGroup) {
  for (int r : {0, 3}) expect_gradient_traffic(grid_config(tiny_config(8), 2, 2, 0), r);
  // More than two replicas, parameters that dp does not divide.
  expect_gradient_traffic(grid_config(tiny_config(11, 4, 20), 1, 5, 0), 4);
  expect_gradient_traffic(grid_config(tiny_config(11, 4, 12), 2, 3, 0), 5);
}

TEST(Traffic, ZeroMovesTheBytesOfAnAllReduce) {
  for (int zero : {1, 2}) {
    for (auto [t, d] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}}) {
      const tp::TpConfig c = grid_config(tiny_config(10), t, d, zero);
      SCOPED_TRACE(config_name(c));
      const StepTraffic s = step_traffic(c, t * d - 1);
      EXPECT_EQ(s.other, 0u) << "sent to ranks in neither of its groups";
      EXPECT_EQ(s.tp, s.tp_expected) << "the blocks' all-reduces in the TP group";
      EXPECT_EQ(s.dp, s.dp_expected) << "reduce-scatter + all-gather of each padded parameter "
                                        "moves what one all-reduce of it moves, no more";
      EXPECT_EQ(s.collectives, s.collectives_expected)
          << "per parameter one reduce-scatter and one all-gather on the DP group";
    }
  }
}

TEST(ZeroOptimizerStage, OnlyStagesOneAndTwo) {
  run_ranks(test_options(2), [] {
    mlp::Parameter p;
    p.value = mlp::Matrix::Zero(3, 3);  // 9 floats: padded to 10, chunks of 5
    p.grad = mlp::Matrix::Zero(3, 3);
    for (int stage : {0, 3, -1}) {
      EXPECT_THROW(tp::ZeroOptimizer({&p}, tp::AdamConfig{}, dist::world(), stage),
                   std::invalid_argument)
          << "stage " << stage;
    }
    mlp::Parameter q;  // a second parameter: the hooks must belong to the right one
    q.value = mlp::Matrix::Zero(2, 1);
    q.grad = mlp::Matrix::Zero(2, 1);
    for (int stage : {1, 2}) {
      dist::reset_stats();
      {
        const tp::ZeroOptimizer z({&p, &q}, tp::AdamConfig{}, dist::world(), stage);
        EXPECT_EQ(dist::stats().bytes_sent, 0u) << "the constructor communicates nothing";
        EXPECT_EQ(z.stage(), stage);
        EXPECT_EQ(z.state_bytes(), static_cast<std::int64_t>(2 * (5 + 1) * sizeof(float)))
            << "stage " << stage << ": m and v, one chunk each (5 and 1 floats)";
        const std::size_t hooks = stage == 2 ? 1 : 0;
        EXPECT_EQ(p.num_hooks(), hooks) << "stage " << stage << ": hooks on the first parameter";
        EXPECT_EQ(q.num_hooks(), hooks) << "stage " << stage << ": hooks on the second parameter";
      }
      EXPECT_EQ(p.num_hooks(), 0u) << "stage " << stage << ": the destructor removes the hooks";
      EXPECT_EQ(q.num_hooks(), 0u) << "stage " << stage << ": the destructor removes the hooks";
    }
  });
}

// ---- memory (the kit's containers) --------------------------------------------------------------

/// One rank's measured memory after two steps, and the sizes the tests compute from its shards.
struct ZeroMemory {
  std::int64_t state = 0, gradients = 0;
  std::int64_t full = 0;    // bytes of one float per element of the rank's parameters
  std::int64_t chunks = 0;  // bytes of one float per element of its padded chunks
  std::size_t params = 0;
  std::int64_t scratch = 0;         // measured: ZeRO's communication buffer
  std::int64_t largest = 0;         // bytes of the largest padded parameter
  std::int64_t all_parameters = 0;  // bytes of every padded parameter together
};

ZeroMemory zero_memory(const tp::TpConfig& c, int rank) {
  ZeroMemory out;
  std::mutex mu;
  run_ranks(test_options(c.tp * c.dp), [&] {
    tp::Trainer trainer(c, data_for(c.model));
    trainer.step(0);
    trainer.step(1);
    if (dist::rank() != rank) return;
    std::lock_guard<std::mutex> g(mu);
    const tp::Memory m = trainer.memory();
    out.state = m.optimizer_state;
    out.gradients = m.gradients;
    out.scratch = m.scratch;
    for (const std::size_t n : shard_sizes(trainer.model())) {
      out.full += static_cast<std::int64_t>(n * sizeof(float));
      out.chunks +=
          static_cast<std::int64_t>(tp::ZeroOptimizer::padded(n, c.dp) / c.dp * sizeof(float));
      const auto padded =
          static_cast<std::int64_t>(tp::ZeroOptimizer::padded(n, c.dp) * sizeof(float));
      out.largest = std::max(out.largest, padded);
      out.all_parameters += padded;
      ++out.params;
    }
  });
  return out;
}

void expect_sharded_state(const tp::TpConfig& c, const ZeroMemory& m) {
  EXPECT_EQ(m.state, 2 * m.chunks)
      << "Adam's optimizer state: m and v, ceil(n / dp) floats each per parameter on each rank";
  // 1/dp of the unsharded state (8 bytes per element), within one padded chunk per parameter.
  const std::int64_t slack = static_cast<std::int64_t>(2 * m.params * (c.dp - 1) * sizeof(float));
  EXPECT_GE(m.state * c.dp, 2 * m.full);
  EXPECT_LE(m.state * c.dp, 2 * m.full + slack);
  // The scratch buffer holds one padded parameter at a time, the largest, never room for all of
  // them. Here it is only bounded below twice the largest; its exact size is graded as well.
  ASSERT_GT(m.all_parameters, 2 * m.largest) << "the test needs a model of several parameters";
  EXPECT_GE(m.scratch, m.largest) << "scratch_ holds one padded parameter (the largest)";
  EXPECT_LT(m.scratch, 2 * m.largest)
      << "scratch_ is one padded parameter at a time, not " << m.scratch << " bytes (every "
      << "padded parameter together: " << m.all_parameters << ")";
}

TEST(Memory, AdamStateIsTwiceTheWeightsWithoutZero) {
  for (auto [t, d] : std::vector<std::pair<int, int>>{{1, 2}, {2, 1}, {2, 2}}) {
    const tp::TpConfig c = grid_config(tiny_config(10), t, d, 0);
    SCOPED_TRACE(config_name(c));
    const ZeroMemory m = zero_memory(c, t * d - 1);
    EXPECT_EQ(m.state, 2 * m.full) << "unsharded Adam keeps m and v of every element it holds";
    EXPECT_EQ(m.gradients, m.full);
  }
}

TEST(Memory, ZeroStage1StateIsOneOverDp) {
  for (auto [t, d] : std::vector<std::pair<int, int>>{{1, 2}, {1, 4}, {2, 2}}) {
    const tp::TpConfig c = grid_config(tiny_config(10), t, d, 1);
    SCOPED_TRACE(config_name(c));
    const ZeroMemory m = zero_memory(c, t * d - 1);
    expect_sharded_state(c, m);
    EXPECT_EQ(m.gradients, m.full + m.chunks)
        << "stage 1 keeps the full gradients and one reduced chunk per parameter";
  }
}

TEST(Memory, ZeroStage2ShardsTheGradients) {
  for (auto [t, d] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}}) {
    const tp::TpConfig c = grid_config(tiny_config(10), t, d, 2);
    SCOPED_TRACE(config_name(c));
    const ZeroMemory m = zero_memory(c, t * d - 1);
    expect_sharded_state(c, m);
    EXPECT_EQ(m.gradients, m.chunks)
        << "stage 2 keeps only the reduced chunk of each gradient (the full ones are freed)";
  }
}

// ---- simulated time on a two-level network ------------------------------------------------------

/// Simulated seconds of the model's forward with free compute, from a barrier, on rank 0, with the
/// TP groups inside the nodes (make_grid) or across them (built here by the test).
double forward_time(int t, int d, bool inside, const mlp::Config& c,
                    const dist::NetworkModel& net) {
  const datasets::Split& data = data_for(c);
  double out = 0;
  dist::LaunchOptions o = test_options(t * d);
  o.network = net;
  run_ranks(o, [&] {
    tp::Grid g = tp::make_grid(t, d);
    if (!inside) {  // TP groups of ranks in different nodes: r % d picks the group
      const int r = dist::rank();
      g.tp_group = dist::split(r % d, r / d, dist::world(), "tp_across");
      g.dp_group = dist::split(r / d, r % d, dist::world(), "dp_inside");
      g.tp_rank = g.tp_group.rank();
      g.dp_rank = g.dp_group.rank();
    }
    tp::TpMLP model(mlp::MLP(c, c.seed + 2), g);
    mlp::Matrix x;
    mlp::Labels y;
    datasets::BatchLoader(data.train, c.batch_size, c.seed + 3).load(0, x, y);
    dist::barrier();
    const double t0 = dist::sim_time();
    model.forward(x);
    if (dist::rank() == 0) out = dist::sim_time() - t0;
  });
  return out;
}

/// The ring all-reduce of n floats on t ranks: 2 (t - 1) (alpha + n/t beta) (t divides n).
double ring(int t, std::size_t n, double alpha, double bandwidth) {
  return 2.0 * (t - 1) * (alpha + static_cast<double>(n * sizeof(float)) / t / bandwidth);
}

TEST(SimulatedTime, TpInsideANodeBeatsTpAcrossNodes) {
  const mlp::Config c = tiny_config(8, 4, 16);
  const dist::NetworkModel net = dist::NetworkModel::two_level(2);
  const double inside = forward_time(2, 2, true, c, net);
  const double across = forward_time(2, 2, false, c, net);
  const std::size_t n0 = 16 * static_cast<std::size_t>(c.layer_out(1));
  const std::size_t n1 = 16 * static_cast<std::size_t>(c.layer_out(3));
  const double want_inside =
      ring(2, n0, net.latency_s, net.bandwidth_Bps) + ring(2, n1, net.latency_s, net.bandwidth_Bps);
  const double want_across = ring(2, n0, net.inter_node_latency_s, net.inter_node_bandwidth_Bps) +
                             ring(2, n1, net.inter_node_latency_s, net.inter_node_bandwidth_Bps);
  EXPECT_NEAR(inside, want_inside, 1e-12 + 1e-9 * want_inside)
      << "forward with TP inside a node: one ring all-reduce per block on the node's links";
  EXPECT_NEAR(across, want_across, 1e-12 + 1e-9 * want_across)
      << "forward with TP across nodes: one ring all-reduce per block on the slow links";
  EXPECT_LT(inside, across);
}

}  // namespace
