// Hidden variants of test_tp.cpp: other grid shapes (world sizes 6 and 8), ReLU, a deeper model,
// hidden sizes that no TP size divides, ZeRO over 3 and 4 replicas, and the time on nodes of 4.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distlab_trace.hpp"
#include "tp_harness.hpp"

namespace {

using namespace tptest;
using distlab::testing::run_ranks;
using distlab::testing::test_options;

TEST(HiddenValues, ThreeByTwoRelu) {
  expect_values(grid_config(tiny_config(9, 4, 12, mlp::Activation::ReLU), 3, 2, 0));
}

TEST(HiddenValues, UnevenShardsDeeperModel) {
  expect_values(grid_config(tiny_config(11, 6, 16), 4, 1, 0));
  expect_values(grid_config(tiny_config(7, 6, 16), 2, 2, 0));
}

TEST(HiddenValues, ZeroManyReplicas) {
  expect_values(grid_config(tiny_config(7, 4, 12), 1, 3, 1));
  expect_values(grid_config(tiny_config(9, 4, 16), 1, 4, 2));
  expect_values(grid_config(tiny_config(9, 4, 12, mlp::Activation::ReLU), 2, 3, 2));
  expect_values(grid_config(tiny_config(10, 4, 16), 4, 2, 1));
}

/// Every rank's bytes of one step after a warm-up, split by destination, against the built-in
/// all-reduces: forward and backward inside the TP group, gradients inside the DP group.
void step_traffic(const tp::TpConfig& c) {
  SCOPED_TRACE(config_name(c));
  run_ranks(test_options(c.tp * c.dp), [&] {
    tp::Trainer trainer(c, data_for(c.model));
    trainer.step(0);
    const tp::Grid& g = trainer.grid();
    const auto B = static_cast<std::size_t>(c.model.batch_size / c.dp);
    std::uint64_t tp_expected = 0, dp_expected = 0;
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
    // Calls of built-in collectives: the blocks' all-reduces (counted while all_reduce_cost runs
    // them), then per parameter one all-reduce on the DP group, even a group of one (ZeRO: a
    // reduce-scatter and an all-gather).
    std::uint64_t calls_expected = dist::stats().builtin_collectives - calls0;
    for (const mlp::Parameter* p : trainer.model().parameters()) {
      const auto n = static_cast<std::size_t>(p->numel());
      dp_expected +=
          all_reduce_cost(c.zero ? tp::ZeroOptimizer::padded(n, c.dp) : n, g.dp_group).first;
      calls_expected += c.zero ? 2 : 1;
    }
    dist::barrier();
    dist::reset_stats();
    trainer.step(1);
    const dist::Stats s = dist::stats();
    std::uint64_t to_tp = 0, to_dp = 0, other = 0;
    for (int q = 0; q < dist::world_size(); ++q) {
      const std::uint64_t b = s.bytes_sent_to[static_cast<std::size_t>(q)];
      if (g.tp_group.group_rank(q) >= 0) {
        to_tp += b;
      } else if (g.dp_group.group_rank(q) >= 0) {
        to_dp += b;
      } else {
        other += b;
      }
    }
    EXPECT_EQ(other, 0u) << "rank " << dist::rank();
    EXPECT_EQ(to_tp, tp_expected) << "rank " << dist::rank() << ": TP group bytes";
    EXPECT_EQ(to_dp, dp_expected) << "rank " << dist::rank() << ": DP group bytes";
    EXPECT_EQ(s.builtin_collectives, calls_expected)
        << "rank " << dist::rank() << ": one built-in all-reduce per block and direction on the "
        << "TP group, then one per gradient on the DP group (dp = " << c.dp << ")";
    EXPECT_EQ(s.barriers, 0u) << "rank " << dist::rank() << ": a step calls no barrier";
  });
}

TEST(HiddenTraffic, FourByTwo) { step_traffic(grid_config(tiny_config(10, 4, 16), 4, 2, 0)); }
TEST(HiddenTraffic, DpOneStillAllReducesEveryGradient) {
  // A DP group of one rank: the mean is the gradient itself and no byte moves, but the step still
  // makes its one built-in all-reduce per gradient (README: Tests, Traffic).
  step_traffic(grid_config(tiny_config(10, 4, 16), 2, 1, 0));
  step_traffic(grid_config(tiny_config(9, 4, 12), 4, 1, 0));
}
TEST(HiddenTraffic, ZeroOverThreeReplicas) {
  step_traffic(grid_config(tiny_config(10, 4, 12), 2, 3, 1));
  step_traffic(grid_config(tiny_config(10, 4, 12), 1, 3, 2));
}

/// tp.hpp: row_parallel_forward makes "One all-reduce on `tp`", and the block's forward "exactly
/// ONE built-in all-reduce of B x out", whatever B: a batch of 0 rows (a replica whose shard of the
/// batch is empty) still makes its one call, with 0 elements. Counted as calls of built-in
/// collectives, for TP sizes 2 and 3 (uneven hidden features).
TEST(HiddenTraffic, EmptyBatchStillOneAllReduceInForward) {
  const int in = 5, hidden = 7, out = 4;
  for (int t : {2, 3}) {
    run_ranks(test_options(t), [&] {
      const tp::Range r = tp::shard_range(static_cast<std::size_t>(hidden), t, dist::rank());
      const auto b = static_cast<Eigen::Index>(r.begin), n = static_cast<Eigen::Index>(r.size());
      const std::string where = "tp " + std::to_string(t) + ", rank " +
                                std::to_string(dist::rank()) + ", a batch of 0 rows";
      const mlp::Matrix w2 = mlp::Matrix::Constant(out, hidden, 0.5f);
      const mlp::Matrix a(0, n), x(0, in);
      mlp::Matrix y;
      std::uint64_t calls0 = dist::stats().builtin_collectives;
      const std::uint64_t barriers0 = dist::stats().barriers;
      tp::row_parallel_forward(a, w2.middleCols(b, n), y, dist::world());
      EXPECT_EQ(dist::stats().builtin_collectives - calls0, 1u)
          << where << ": row_parallel_forward makes one all-reduce on tp";
      EXPECT_EQ(dist::stats().barriers - barriers0, 0u) << where << ": no barrier";
      EXPECT_EQ(y.rows(), 0) << where;
      EXPECT_EQ(y.cols(), out) << where;

      tp::Block blk;
      blk.activation = mlp::Activation::Tanh;
      blk.hidden = r;
      blk.column.value = mlp::Matrix::Constant(hidden, in, 0.25f).middleRows(b, n);
      blk.row.value = w2.middleCols(b, n);
      calls0 = dist::stats().builtin_collectives;
      const mlp::Matrix& got = tp::block_forward(blk, x, dist::world());
      EXPECT_EQ(dist::stats().builtin_collectives - calls0, 1u)
          << where << ": block_forward makes one all-reduce of B x out";
      EXPECT_EQ(got.rows(), 0) << where;
      EXPECT_EQ(got.cols(), out) << where;
    });
  }
}

/// layout.hpp: block_forward keeps "Matrix z; // column output before the activation" and
/// "Matrix a; // after the activation" (B x hidden.size()) for block_backward. Weights of both
/// signs, so z and a differ for tanh everywhere and for ReLU where z < 0; TP 2 and 3 (uneven).
TEST(HiddenBlockState, ForwardKeepsZBeforeAndAAfterTheActivation) {
  const int in = 5, hidden = 7, out = 3, rows = 4;
  mlp::Matrix x(rows, in), w1(hidden, in), w2(out, hidden);
  for (int i = 0; i < x.size(); ++i) x.data()[i] = 0.3f * static_cast<float>((i * 7) % 11 - 5);
  for (int i = 0; i < w1.size(); ++i) w1.data()[i] = 0.1f * static_cast<float>((i * 5) % 13 - 6);
  for (int i = 0; i < w2.size(); ++i) w2.data()[i] = 0.2f * static_cast<float>((i * 3) % 7 - 3);
  for (int t : {2, 3}) {
    for (mlp::Activation act : {mlp::Activation::Tanh, mlp::Activation::ReLU}) {
      run_ranks(test_options(t), [&] {
        const tp::Range r = tp::shard_range(static_cast<std::size_t>(hidden), t, dist::rank());
        const auto b = static_cast<Eigen::Index>(r.begin), n = static_cast<Eigen::Index>(r.size());
        const std::string where = "tp " + std::to_string(t) + ", rank " +
                                  std::to_string(dist::rank()) + ", " + mlp::to_string(act);
        tp::Block blk;
        blk.activation = act;
        blk.hidden = r;
        blk.column.value = w1.middleRows(b, n);
        blk.row.value = w2.middleCols(b, n);
        (void)tp::block_forward(blk, x, dist::world());
        const mlp::Matrix z = x * w1.middleRows(b, n).transpose();
        const mlp::Matrix a = act == mlp::Activation::Tanh ? mlp::Matrix(z.array().tanh())
                                                           : mlp::Matrix(z.array().max(0.0f));
        ASSERT_EQ(blk.z.rows(), rows) << where << ": z is B x hidden.size()";
        ASSERT_EQ(blk.z.cols(), n) << where << ": z is B x hidden.size()";
        ASSERT_EQ(blk.a.rows(), rows) << where;
        ASSERT_EQ(blk.a.cols(), n) << where;
        EXPECT_LE((blk.z - z).cwiseAbs().maxCoeff(), 1e-5f)
            << where << ": b.z must hold the column output before the activation";
        EXPECT_LE((blk.a - a).cwiseAbs().maxCoeff(), 1e-5f)
            << where << ": b.a must hold the activation of b.z";
      });
    }
  }
}

/// layout.hpp: "Written by block_backward: Matrix da, dz; // d loss / d a, d loss / d z
/// (B x hidden.size())". Each rank's da is dy times its columns of the second weight, dz is da
/// times the activation's derivative at z; written over stale matrices of another shape, with and
/// without dx, at TP 2 and 3 (uneven).
TEST(HiddenBlockState, BackwardWritesDaAndDz) {
  const int in = 5, hidden = 7, out = 3, rows = 4;
  mlp::Matrix x(rows, in), w1(hidden, in), w2(out, hidden), dy(rows, out);
  for (int i = 0; i < x.size(); ++i) x.data()[i] = 0.3f * static_cast<float>((i * 7) % 11 - 5);
  for (int i = 0; i < w1.size(); ++i) w1.data()[i] = 0.1f * static_cast<float>((i * 5) % 13 - 6);
  for (int i = 0; i < w2.size(); ++i) w2.data()[i] = 0.2f * static_cast<float>((i * 3) % 7 - 3);
  for (int i = 0; i < dy.size(); ++i) dy.data()[i] = 0.5f * static_cast<float>((i * 4) % 9 - 4);
  for (int t : {2, 3}) {
    for (mlp::Activation act : {mlp::Activation::Tanh, mlp::Activation::ReLU}) {
      for (bool need_dx : {false, true}) {
        run_ranks(test_options(t), [&] {
          const tp::Range r = tp::shard_range(static_cast<std::size_t>(hidden), t, dist::rank());
          const auto b = static_cast<Eigen::Index>(r.begin),
                     n = static_cast<Eigen::Index>(r.size());
          const std::string where = "tp " + std::to_string(t) + ", rank " +
                                    std::to_string(dist::rank()) + ", " + mlp::to_string(act) +
                                    (need_dx ? ", with dx" : ", without dx");
          tp::Block blk;
          blk.activation = act;
          blk.hidden = r;
          blk.column.value = w1.middleRows(b, n);
          blk.row.value = w2.middleCols(b, n);
          blk.da = mlp::Matrix::Constant(2, 9, 7.0f);  // stale, of another shape
          blk.dz = mlp::Matrix::Constant(9, 2, -7.0f);
          (void)tp::block_forward(blk, x, dist::world());
          blk.dx = mlp::Matrix::Constant(3, 2, 9.0f);  // left alone without need_dx
          tp::block_backward(blk, dy, need_dx, dist::world());
          if (!need_dx) {
            EXPECT_EQ(blk.dx, mlp::Matrix::Constant(3, 2, 9.0f))
                << where << ": b.dx is written only when asked for (need_dx)";
          }
          const mlp::Matrix z = x * w1.middleRows(b, n).transpose();
          const mlp::Matrix da = dy * w2.middleCols(b, n);
          const mlp::Matrix dz = act == mlp::Activation::Tanh
                                     ? mlp::Matrix(da.array() * (1.0f - z.array().tanh().square()))
                                     : mlp::Matrix(da.array() * (z.array() > 0.0f).cast<float>());
          ASSERT_EQ(blk.da.rows(), rows) << where << ": da is B x hidden.size()";
          ASSERT_EQ(blk.da.cols(), n) << where << ": da is B x hidden.size()";
          ASSERT_EQ(blk.dz.rows(), rows) << where << ": dz is B x hidden.size()";
          ASSERT_EQ(blk.dz.cols(), n) << where << ": dz is B x hidden.size()";
          EXPECT_LE((blk.da - da).cwiseAbs().maxCoeff(), 1e-5f)
              << where << ": b.da must hold d loss / d a (this rank's columns)";
          EXPECT_LE((blk.dz - dz).cwiseAbs().maxCoeff(), 1e-5f)
              << where << ": b.dz must hold d loss / d z (this rank's columns)";
        });
      }
    }
  }
}

/// layout.hpp: stage 1's step() reduce-scatters each parameter's padded gradient and all-gathers
/// the weights; stage 2's hook reduce-scatters as soon as backward has written the gradient and
/// step() all-gathers. Counted as calls of built-in collectives, for every DP size, one included
/// (a group of one still makes its collective calls: the step is collective over the DP group).
TEST(HiddenTraffic, ZeroCollectiveCallsPerParameterEveryDpSize) {
  for (int dp : {1, 2, 3}) {
    run_ranks(test_options(dp), [&] {
      for (int stage : {1, 2}) {
        mlp::Parameter p, q;
        p.value = mlp::Matrix::Constant(3, 3, 0.5f);
        q.value = mlp::Matrix::Constant(2, 1, -0.25f);
        const dist::Stats before_ctor = dist::stats();
        tp::ZeroOptimizer z({&p, &q}, tp::AdamConfig{}, dist::world(), stage);
        const dist::Stats after_ctor = dist::stats();
        EXPECT_EQ(after_ctor.builtin_collectives - before_ctor.builtin_collectives, 0u)
            << "dp " << dp << ", stage " << stage
            << ": the constructor is collective over nothing (no communication)";
        EXPECT_EQ(after_ctor.barriers - before_ctor.barriers, 0u)
            << "dp " << dp << ", stage " << stage << ": the constructor calls no barrier";
        EXPECT_EQ(after_ctor.messages_sent - before_ctor.messages_sent, 0u)
            << "dp " << dp << ", stage " << stage << ": the constructor sends nothing";
        for (int t = 0; t < 2; ++t) {
          p.grad = mlp::Matrix::Constant(3, 3, 0.1f * static_cast<float>(dist::rank() + 1));
          q.grad = mlp::Matrix::Constant(2, 1, -0.2f);
          const std::uint64_t before_hooks = dist::stats().builtin_collectives;
          p.run_hooks();
          q.run_hooks();
          const std::uint64_t in_hooks = dist::stats().builtin_collectives - before_hooks;
          const std::uint64_t before_step = dist::stats().builtin_collectives;
          z.step();
          const std::uint64_t in_step = dist::stats().builtin_collectives - before_step;
          const std::string where = "dp " + std::to_string(dp) + ", stage " +
                                    std::to_string(stage) + ", step " + std::to_string(t);
          EXPECT_EQ(in_hooks, stage == 2 ? 2u : 0u)
              << where << ": stage 2's hooks reduce-scatter each of the 2 gradients";
          EXPECT_EQ(in_step, stage == 1 ? 4u : 2u)
              << where << ": step() " << (stage == 1 ? "reduce-scatters and " : "")
              << "all-gathers each of the 2 parameters";
        }
      }
    });
  }
}

/// layout.hpp, stage 1: step() reduce-scatters every parameter's gradient before the first update,
/// then updates and all-gathers parameter by parameter. Read from the trace of rank 0 (latency > 0,
/// so the spans start at distinct simulated times): the names of the DP group's collectives of one
/// step, in order, for 3 parameters over 2 and 3 replicas.
TEST(HiddenTraffic, ZeroStageOneReducesEveryGradientBeforeTheFirstUpdate) {
  for (int dp : {2, 3}) {
    dist::LaunchOptions o = distlab::testing::threads_options(dp);
    o.network.latency_s = 1e-5;
    o.trace_path = ::testing::TempDir() + "distlab_09_zero_order_" + std::to_string(dp) + ".json";
    run_ranks(o, [&] {
      mlp::Parameter p, q, r;
      p.value = mlp::Matrix::Constant(3, 3, 0.5f);
      q.value = mlp::Matrix::Constant(2, 1, -0.25f);
      r.value = mlp::Matrix::Constant(1, 4, 0.125f);
      tp::ZeroOptimizer z({&p, &q, &r}, tp::AdamConfig{}, dist::world(), 1);
      p.grad = mlp::Matrix::Constant(3, 3, 0.1f * static_cast<float>(dist::rank() + 1));
      q.grad = mlp::Matrix::Constant(2, 1, -0.2f);
      r.grad = mlp::Matrix::Constant(1, 4, 0.3f);
      z.step();
    });
    std::vector<std::string> kinds;
    for (const auto& sp : distlab::testing::trace_spans(o.trace_path, "rank 0")) {
      if (sp.name.rfind("reduce_scatter", 0) == 0) kinds.push_back("reduce_scatter");
      if (sp.name.rfind("all_gather", 0) == 0) kinds.push_back("all_gather");
    }
    const std::vector<std::string> want = {"reduce_scatter", "reduce_scatter", "reduce_scatter",
                                           "all_gather",     "all_gather",     "all_gather"};
    std::string got;
    for (const std::string& k : kinds) got += k + " ";
    EXPECT_EQ(kinds, want) << "dp " << dp << ", stage 1, 3 parameters: every gradient is reduced "
                           << "before the first update; rank 0's collectives were: " << got;
  }
}

/// README: gradients go only to the DP group, as one built-in all-reduce each and no other
/// collective call, no barrier either (counted: the calls of built-in collectives and of barrier()
/// in a step), on a tp x 1 grid too (a DP group of one rank), and on 1 x 2, 2 x 2, 1 x 3 and 2 x 3.
/// dist's builtin_collectives does not count barrier(): its own counter does. The messages and
/// bytes sent are those of the two all-reduces on the DP group, run again by the test afterwards.
TEST(HiddenTraffic, AverageGradientsOneCallPerParameterEveryDpSize) {
  for (auto [t, d] :
       std::vector<std::pair<int, int>>{{2, 1}, {1, 1}, {1, 3}, {1, 2}, {2, 2}, {2, 3}}) {
    run_ranks(test_options(t * d), [&, t = t, d = d] {
      const tp::Grid g = tp::make_grid(t, d);
      mlp::Parameter p, q;
      p.value = mlp::Matrix::Constant(3, 3, 0.5f);
      q.value = mlp::Matrix::Constant(2, 1, -0.25f);
      p.grad = mlp::Matrix::Constant(3, 3, 0.1f * static_cast<float>(dist::rank() + 1));
      q.grad = mlp::Matrix::Constant(2, 1, -0.2f);
      std::vector<mlp::Parameter*> params = {&p, &q};
      const std::string where = "tp " + std::to_string(t) + " x dp " + std::to_string(d) +
                                ", rank " + std::to_string(dist::rank());
      const dist::Stats before = dist::stats();
      tp::average_gradients(params, g);
      const dist::Stats after = dist::stats();
      EXPECT_EQ(after.builtin_collectives - before.builtin_collectives, 2u)
          << where << ": one built-in all-reduce per parameter (2)";
      EXPECT_EQ(after.barriers - before.barriers, 0u)
          << where << ": average_gradients calls no barrier (each all-reduce already waits)";
      const auto [bytes_p, msgs_p] = all_reduce_cost(9, g.dp_group);
      const auto [bytes_q, msgs_q] = all_reduce_cost(2, g.dp_group);
      EXPECT_EQ(after.messages_sent - before.messages_sent, msgs_p + msgs_q)
          << where << ": the messages of one all-reduce per parameter on the DP group";
      EXPECT_EQ(after.bytes_sent - before.bytes_sent, bytes_p + bytes_q)
          << where << ": the bytes of one all-reduce per parameter on the DP group";
    });
  }
}

TEST(HiddenMemory, ShardsOverThreeAndFourReplicas) {
  for (auto [t, d, zero] :
       std::vector<std::tuple<int, int, int>>{{1, 3, 1}, {2, 3, 2}, {1, 4, 2}, {2, 2, 2}}) {
    const tp::TpConfig c = grid_config(tiny_config(11, 4, 12 * 4), t, d, zero);
    SCOPED_TRACE(config_name(c));
    run_ranks(test_options(t * d), [&, d = d, zero = zero] {
      tp::Trainer trainer(c, data_for(c.model));
      trainer.step(0);
      trainer.step(1);
      std::int64_t full = 0, chunks = 0, params = 0;
      for (const std::size_t n : shard_sizes(trainer.model())) {
        full += static_cast<std::int64_t>(n * sizeof(float));
        chunks += static_cast<std::int64_t>(tp::ZeroOptimizer::padded(n, d) / d * sizeof(float));
        ++params;
      }
      const tp::Memory m = trainer.memory();
      EXPECT_EQ(m.optimizer_state, 2 * chunks) << "rank " << dist::rank() << ": m and v chunks";
      EXPECT_LE(m.optimizer_state * d, 2 * (full + params * (d - 1) * 4))
          << "rank " << dist::rank();
      EXPECT_EQ(trainer.zero()->steps(), 2) << "Adam's t counts optimizer steps";
      EXPECT_EQ(m.gradients, zero == 2 ? chunks : full + chunks) << "rank " << dist::rank();
      // The moment chunks are what the update used: zero in the padding (its gradient is 0).
      const auto& mo = trainer.zero()->m();
      const auto& sq = trainer.zero()->v();
      const auto params_list = trainer.model().parameters();
      ASSERT_EQ(mo.size(), params_list.size());
      ASSERT_EQ(sq.size(), params_list.size());
      for (std::size_t i = 0; i < mo.size(); ++i) {
        const tp::Range mine = trainer.zero()->shard(i);
        const auto n = static_cast<std::size_t>(params_list[i]->numel());
        for (std::size_t k = 0; k < mo[i].size() && k < sq[i].size(); ++k) {
          if (mine.begin + k >= n) {
            EXPECT_EQ(mo[i][k], 0.0f) << "padding m of parameter " << i;
            EXPECT_EQ(sq[i][k], 0.0f) << "padding v of parameter " << i;
          }
        }
      }
    });
  }
}

/// layout.hpp, stage 2: "the hook reduce-scatters it into grad_shard_[i] and frees the full
/// gradient (p.grad becomes 0 x 0)", and README: "stage 2 keeps only gradient chunks". On every
/// grid, one replica (dp = 1, where the chunk is the whole gradient) included: after each training
/// step every parameter's grad is 0 rows by 0 columns and the gradient meter counts the chunks only.
TEST(HiddenMemory, StageTwoFreesEveryFullGradientOnEveryDpSize) {
  for (auto [t, d] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 3}}) {
    const tp::TpConfig c = grid_config(tiny_config(11, 4, 12 * 4), t, d, 2);
    SCOPED_TRACE(config_name(c));
    run_ranks(test_options(t * d), [&, d = d] {
      tp::Trainer trainer(c, data_for(c.model));
      for (int s = 0; s < 2; ++s) {
        trainer.step(s);
        std::int64_t chunks = 0;
        for (const std::size_t n : shard_sizes(trainer.model())) {
          chunks += static_cast<std::int64_t>(tp::ZeroOptimizer::padded(n, d) / d * sizeof(float));
        }
        const auto params = trainer.model().parameters();
        for (std::size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(params[i]->grad.rows() == 0 && params[i]->grad.cols() == 0)
              << "rank " << dist::rank() << ", step " << s << ", parameter " << i
              << ": stage 2 frees the full gradient (p.grad becomes 0 x 0), also with one "
              << "replica; it is " << params[i]->grad.rows() << " x " << params[i]->grad.cols();
        }
        EXPECT_EQ(trainer.memory().gradients, chunks)
            << "rank " << dist::rank() << ", step " << s << ": stage 2 keeps only gradient chunks";
      }
    });
  }
}

/// layout.hpp's meters right after the constructor, before any backward or step: gradients =
/// every parameter's grad plus grad_shard_ (c floats per parameter, allocated by the constructor),
/// scratch = one padded parameter, the largest (here one that dp divides, and one it does not).
TEST(HiddenMemory, ZeroMetersRightAfterConstruction) {
  for (int dp : {1, 2, 3, 4}) {
    run_ranks(test_options(dp), [&] {
      for (int stage : {1, 2}) {
        for (int big : {12, 13}) {
          mlp::Parameter p, q, r;
          p.value = mlp::Matrix::Constant(3, 1, 0.5f);
          q.value = mlp::Matrix::Constant(big, 1, -0.25f);
          r.value = mlp::Matrix::Constant(1, 5, 0.125f);
          p.grad = mlp::Matrix::Zero(3, 1);
          q.grad = mlp::Matrix::Zero(big, 1);
          tp::ZeroOptimizer z({&p, &q, &r}, tp::AdamConfig{}, dist::world(), stage);
          auto pad = [&](std::int64_t n) { return dp * ((n + dp - 1) / dp); };
          const std::int64_t chunks = (pad(3) + pad(big) + pad(5)) / dp;
          const std::int64_t grads = 3 + big;  // r has no gradient yet
          const std::string where = "dp " + std::to_string(dp) + ", stage " +
                                    std::to_string(stage) + ", parameters of 3, " +
                                    std::to_string(big) + " and 5 elements";
          EXPECT_EQ(z.gradient_bytes(), 4 * (grads + chunks))
              << where << ": the grads plus every chunk of grad_shard_, allocated by the "
              << "constructor";
          EXPECT_EQ(z.scratch_bytes(), 4 * pad(big))
              << where << ": one padded parameter, the largest (" << pad(big) << " floats)";
          EXPECT_EQ(z.state_bytes(), 8 * chunks) << where;
          EXPECT_EQ(z.steps(), 0) << where;
        }
      }
    });
  }
}

/// layout.hpp's scratch_ holds one padded parameter, the largest, and the kit reads its capacity():
/// parameters that grow a little along the list (8, 9, then 10 elements) leave no room beyond
/// the largest padded parameter (a buffer grown parameter by parameter would keep up to twice it).
TEST(HiddenMemory, ScratchIsTheLargestWhenParametersGrowAlongTheList) {
  for (int dp : {1, 2, 3, 4}) {
    run_ranks(test_options(dp), [&] {
      for (int stage : {1, 2}) {
        mlp::Parameter p, q, r;
        p.value = mlp::Matrix::Constant(8, 1, 0.5f);
        q.value = mlp::Matrix::Constant(9, 1, -0.25f);
        r.value = mlp::Matrix::Constant(1, 10, 0.125f);
        tp::ZeroOptimizer z({&p, &q, &r}, tp::AdamConfig{}, dist::world(), stage);
        const std::int64_t largest = dp * ((10 + dp - 1) / dp);
        EXPECT_EQ(z.scratch_bytes(), 4 * largest)
            << "dp " << dp << ", stage " << stage << ", parameters of 8, 9 and 10 elements: "
            << "scratch_ is one padded parameter, the largest (" << largest << " floats)";
      }
    });
  }
}

/// layout.hpp: ZeroOptimizer "applies Adam (AdamConfig)": every field of the config, none of them
/// the default (eps of the gradients' size, so a fixed eps shows), against the given unsharded
/// Adam with the same config fed the same mean gradients, 3 steps, dp 1 to 3, both stages.
TEST(HiddenZeroSteps, EveryAdamSettingIsUsed) {
  tp::AdamConfig cfg;
  cfg.learning_rate = 0.03f;
  cfg.beta1 = 0.6f;
  cfg.beta2 = 0.8f;
  cfg.eps = 0.05f;
  for (int dp : {1, 2, 3}) {
    run_ranks(test_options(dp), [&] {
      for (int stage : {1, 2}) {
        const std::string where = "dp " + std::to_string(dp) + ", stage " + std::to_string(stage) +
                                  ", AdamConfig{0.03, 0.6, 0.8, eps 0.05}";
        mlp::Parameter p, ref_p;
        p.value = mlp::Matrix::Constant(2, 5, 0.5f);
        ref_p.value = p.value;
        tp::ZeroOptimizer z({&p}, cfg, dist::world(), stage);
        tp::Adam ref({&ref_p}, cfg);
        for (int t = 1; t <= 3; ++t) {
          const float scale = 0.1f * static_cast<float>(t);
          p.grad = mlp::Matrix::Constant(2, 5, scale * static_cast<float>(dist::rank() + 1));
          p.run_hooks();
          ref_p.grad = mlp::Matrix::Constant(2, 5, scale * static_cast<float>(dp + 1) / 2.0f);
          z.step();
          ref.step();
          for (int k = 0; k < 10; ++k) {
            EXPECT_NEAR(p.value.data()[k], ref_p.value.data()[k], 1e-6f)
                << where << ", step " << t << ", weight " << k;
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    });
  }
}

/// layout.hpp: the step counter counts calls of step(), once per training step, whatever the
/// number of parameters or hooks: no parameter at all, a step() with no new backward (the old
/// gradient chunks again), two backwards (hooks run twice) before one step(). Adam's t shows in
/// steps() and in the bias correction: the weights after each step are compared with unsharded
/// Adam (given) fed the same mean gradients step by step.
TEST(HiddenZeroSteps, CounterCountsCallsOfStep) {
  for (int dp : {1, 2, 3}) {
    run_ranks(test_options(dp), [&] {
      for (int stage : {1, 2}) {
        const std::string where = "dp " + std::to_string(dp) + ", stage " + std::to_string(stage);
        {
          tp::ZeroOptimizer none({}, tp::AdamConfig{}, dist::world(), stage);
          for (int t = 1; t <= 3; ++t) {
            none.step();
            EXPECT_EQ(none.steps(), t) << where << ": no parameters, " << t << " calls of step()";
          }
        }
        tp::AdamConfig cfg;
        cfg.learning_rate = 0.01f;
        mlp::Parameter p, q, ref_p, ref_q;
        p.value = mlp::Matrix::Constant(3, 3, 0.5f);
        q.value = mlp::Matrix::Constant(2, 1, -0.25f);
        ref_p.value = p.value;
        ref_q.value = q.value;
        tp::ZeroOptimizer z({&p, &q}, cfg, dist::world(), stage);
        tp::Adam ref({&ref_p, &ref_q}, cfg);
        const float mean = 0.1f * static_cast<float>(dp + 1) / 2.0f;  // of 0.1 (rank + 1)
        auto backward = [&](float scale) {
          p.grad = mlp::Matrix::Constant(3, 3, scale * 0.1f * static_cast<float>(dist::rank() + 1));
          q.grad = mlp::Matrix::Constant(2, 1, scale * -0.2f);
          q.run_hooks();  // backward writes the last layer first
          p.run_hooks();
          ref_p.grad = mlp::Matrix::Constant(3, 3, scale * mean);
          ref_q.grad = mlp::Matrix::Constant(2, 1, scale * -0.2f);
        };
        auto check = [&](std::int64_t t, const std::string& what) {
          EXPECT_EQ(z.steps(), t) << where << ", " << what;
          EXPECT_EQ(ref.steps(), t);
          for (int k = 0; k < 9; ++k) {
            EXPECT_NEAR(p.value.data()[k], ref_p.value.data()[k], 1e-6f)
                << where << ", " << what << ": weight " << k << " (bias correction with t = " << t
                << ")";
          }
          for (int k = 0; k < 2; ++k) {
            EXPECT_NEAR(q.value.data()[k], ref_q.value.data()[k], 1e-6f) << where << ", " << what;
          }
        };
        backward(1.0f);
        z.step();
        ref.step();
        check(1, "one backward, one step()");
        // A second step() with no new backward: stage 1 reduces the (unchanged) gradients again,
        // stage 2 updates from the chunks its hooks left; either way the same mean gradients.
        if (stage == 2) {
          ref_p.grad = mlp::Matrix::Constant(3, 3, mean);
          ref_q.grad = mlp::Matrix::Constant(2, 1, -0.2f);
        }
        z.step();
        ref.step();
        check(2, "a step() with no new backward");
        // Two backwards before one step(): the last one's gradients are the step's.
        backward(3.0f);
        backward(-2.0f);
        z.step();
        ref.step();
        check(3, "two backwards, then one step()");
      }
    });
  }
}

TEST(HiddenSimulatedTime, NodesOfFour) {
  // 8 ranks, nodes of 4: TP pairs inside a node (make_grid) vs pairs across nodes (r, r + 4).
  const mlp::Config c = tiny_config(8, 4, 16);
  const dist::NetworkModel net = dist::NetworkModel::two_level(4);
  double inside = 0, across = 0;
  for (bool in : {true, false}) {
    dist::LaunchOptions o = test_options(8);
    o.network = net;
    const datasets::Split& data = data_for(c);
    run_ranks(o, [&] {
      tp::Grid g = tp::make_grid(2, 4);
      if (!in) {
        const int r = dist::rank();
        g.tp_group = dist::split(r % 4, r / 4, dist::world(), "tp_across");
        g.tp_rank = g.tp_group.rank();
      }
      tp::TpMLP model(mlp::MLP(c, c.seed + 2), g);
      mlp::Matrix x, probs, dl;
      mlp::Labels y;
      datasets::BatchLoader(data.train, c.batch_size, c.seed + 3).load(0, x, y);
      mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
      mlp::softmax_cross_entropy_backward(probs, y, dl);
      dist::barrier();
      const double t0 = dist::sim_time();
      model.forward(x);
      model.backward(dl);
      if (dist::rank() == 0) (in ? inside : across) = dist::sim_time() - t0;
    });
  }
  auto ring = [](std::size_t n, double a, double bw) {
    return 2.0 * (a + static_cast<double>(n * 4) / 2 / bw);
  };
  // Forward: B x 8 and B x 6; backward: B x 8 (the second block's input).
  const std::size_t sizes[3] = {16 * 8, 16 * 6, 16 * 8};
  double want_in = 0, want_across = 0;
  for (std::size_t n : sizes) {
    want_in += ring(n, net.latency_s, net.bandwidth_Bps);
    want_across += ring(n, net.inter_node_latency_s, net.inter_node_bandwidth_Bps);
  }
  EXPECT_NEAR(inside, want_in, 1e-12 + 1e-9 * want_in);
  EXPECT_NEAR(across, want_across, 1e-12 + 1e-9 * want_across);
  EXPECT_LT(inside, across);
}

}  // namespace
