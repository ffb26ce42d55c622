// 07_pipeline public tests. Graded items (grader/manifest.toml) are separate for the cut, a
// stage's compute, the 1F1B plan, the values of each schedule, the traffic, the simulated time of
// each schedule, the peak stash of each schedule and the order of the F/B spans.
//
// Values: p = 1..4 stages, m = 1..8 microbatches, 4 layers (even cut on 1, 2, 4 stages) and 5
// layers (uneven on 2, 3, 4), two SGD steps, against single-process training (pipeline_harness.hpp).
// Time: equal stages, free communication (latency 0, infinite bandwidth), compute charged by the
// cost model: the step time and the bubble within 1% of the closed forms.
#include <gtest/gtest.h>

#include <set>

#include "pipeline_harness.hpp"

namespace {

using pp::Schedule;
using namespace pptest;

// ---- Task 1: the cut ---------------------------------------------------------------------------

TEST(StageLayers, NearEqualConsecutiveEarlierStagesLarger) {
  EXPECT_EQ(pp::stage_layers(5, 2, 0).begin, 0);
  EXPECT_EQ(pp::stage_layers(5, 2, 0).size, 3);
  EXPECT_EQ(pp::stage_layers(5, 2, 1).begin, 3);
  EXPECT_EQ(pp::stage_layers(5, 2, 1).size, 2);
  EXPECT_EQ(pp::stage_layers(5, 3, 2).begin, 4);
  EXPECT_EQ(pp::stage_layers(5, 3, 2).size, 1);
  for (int n = 1; n <= 9; ++n) {
    for (int p = 1; p <= n; ++p) {
      int next = 0;
      for (int r = 0; r < p; ++r) {
        const pp::Range got = pp::stage_layers(n, p, r);
        const auto [begin, end] = expected_layers(n, p, r);
        EXPECT_EQ(got.begin, begin) << n << " layers, " << p << " stages, stage " << r;
        EXPECT_EQ(got.end(), end) << n << " layers, " << p << " stages, stage " << r;
        EXPECT_EQ(got.begin, next) << "stages must be consecutive";
        next = got.end();
      }
      EXPECT_EQ(next, n) << n << " layers on " << p << " stages: every layer exactly once";
    }
  }
  EXPECT_THROW(pp::stage_layers(3, 4, 0), std::invalid_argument) << "4 stages for 3 layers";
}

// ---- Task 2: one stage's forward and backward ----------------------------------------------------

/// The MLP's gradients on a batch (single process).
std::vector<mlp::Matrix> mlp_gradients(const mlp::Config& c, const mlp::Matrix& x,
                                       const mlp::Labels& y, mlp::Matrix* logits_out) {
  mlp::MLP model(c, c.seed + 2);
  mlp::Matrix probs, dlogits;
  const mlp::Matrix& logits = model.forward(x);
  if (logits_out) *logits_out = logits;
  mlp::softmax_cross_entropy_forward(logits, y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  std::vector<mlp::Matrix> g;
  for (const mlp::Parameter* p : model.parameters()) g.push_back(p->grad);
  return g;
}

/// What dx holds before a first stage's backward, which must leave it alone (README: Task 2).
mlp::Matrix sentinel() { return mlp::Matrix::Constant(3, 2, 42.0f); }
bool left_alone(const mlp::Matrix& dx) {
  return dx.rows() == 3 && dx.cols() == 2 && (dx.array() == 42.0f).all();
}

TEST(StageCompute, OneStageIsTheWholeModel) {
  const mlp::Config c = tiny_config(3, 8);
  const auto& data = data_for(c);
  mlp::Matrix x = data.train.x.topRows(8), want_logits, probs, dlogits, dx;
  mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  const auto want = mlp_gradients(c, x, y, &want_logits);
  pp::Stage stage(c, c.seed + 2, 0, 1);
  ASSERT_EQ(stage.parameters().size(), 3u);
  const mlp::Matrix logits = stage.forward(x, 0);
  EXPECT_TRUE(close(logits, want_logits)) << "a one-stage forward must give the MLP's logits";
  EXPECT_EQ(stage.meter().microbatches(), 1) << "the forward must stash_push its microbatch";
  EXPECT_EQ(stage.meter().bytes(), 8 * stash_bytes_per_row(c, 0, 3))
      << "the stash holds the input and every z and h (the last layer has no h)";
  mlp::softmax_cross_entropy_forward(logits, y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  dx = sentinel();
  stage.backward(dlogits, 0, dx);
  EXPECT_TRUE(left_alone(dx)) << "the first stage must leave dx alone (nobody needs it there)";
  EXPECT_EQ(stage.meter().microbatches(), 0) << "the backward must stash_pop its microbatch";
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(close(stage.parameters()[k]->grad, want[k])) << "gradient of layer " << k;
  }
  ASSERT_EQ(stage.spans().size(), 2u) << "one F span and one B span";
  EXPECT_EQ(stage.spans()[0].name, "F0");
  EXPECT_EQ(stage.spans()[1].name, "B0");
}

TEST(StageCompute, TwoStagesChainAndAccumulateOverMicrobatches) {
  const mlp::Config c = tiny_config(5, 8, mlp::Activation::ReLU);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(8);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  const auto want = mlp_gradients(c, x, y, nullptr);
  pp::Stage s0(c, c.seed + 2, 0, 2), s1(c, c.seed + 2, 1, 2);
  ASSERT_EQ(s0.layers().size, 3);
  ASSERT_EQ(s1.layers().size, 2);
  mlp::Matrix probs, dlogits, dx1, dx0;
  for (int i = 0; i < 2; ++i) {  // two microbatches of 4 rows, each loss gradient weighted by 1/2
    const mlp::Matrix xi = x.middleRows(4 * i, 4);
    const mlp::Labels yi(y.begin() + 4 * i, y.begin() + 4 * i + 4);
    const mlp::Matrix a = s0.forward(xi, i);
    const mlp::Matrix& logits = s1.forward(a, i);
    mlp::softmax_cross_entropy_forward(logits, yi, probs);
    mlp::softmax_cross_entropy_backward(probs, yi, dlogits);
    dlogits *= 0.5f;
    s1.backward(dlogits, i, dx1);
    ASSERT_EQ(dx1.rows(), 4);
    ASSERT_EQ(dx1.cols(), c.dim_hidden) << "dx of stage 1 is d loss / d (stage 0's output)";
    dx0 = sentinel();
    s0.backward(dx1, i, dx0);
    EXPECT_TRUE(left_alone(dx0)) << "stage 0 must leave dx alone (nobody needs it there)";
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(close(s0.parameters()[static_cast<std::size_t>(k)]->grad,
                      want[static_cast<std::size_t>(k)]))
        << "stage 0, layer " << k << ": gradients must ADD over microbatches";
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_TRUE(close(s1.parameters()[static_cast<std::size_t>(k)]->grad,
                      want[static_cast<std::size_t>(3 + k)]))
        << "stage 1, layer " << 3 + k;
  }
  EXPECT_EQ(s0.meter().peak_microbatches(), 1);
  EXPECT_EQ(s0.meter().microbatches(), 0);
  EXPECT_EQ(s1.meter().microbatches(), 0);
}

// ---- Task 5: the 1F1B plan ---------------------------------------------------------------------

TEST(OneFOneBPlan, WarmupSteadyCooldown) {
  for (int p = 1; p <= 6; ++p) {
    for (int r = 0; r < p; ++r) {
      for (int m = 1; m <= 10; ++m) {
        const pp::OneFOneBPlan plan = pp::one_f_one_b_plan(p, r, m);
        const int warm = std::min(p - r - 1, m);
        EXPECT_EQ(plan.warmup, warm) << "p=" << p << " r=" << r << " m=" << m;
        EXPECT_EQ(plan.steady, m - warm) << "p=" << p << " r=" << r << " m=" << m;
        EXPECT_EQ(plan.cooldown, warm) << "p=" << p << " r=" << r << " m=" << m;
      }
    }
  }
}

// ---- Values: every schedule equals single-process training ---------------------------------------

void values(Schedule s) {
  for (int layers : {4, 5}) {
    const mlp::Config c = tiny_config(layers, 16);
    const Reference ref = single_process(c, 2);
    for (int p = 1; p <= 4; ++p) {
      const std::vector<int> ms =
          s == Schedule::Naive ? std::vector<int>{1, 3} : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8};
      for (int m : ms) {
        const PipelineRun run = run_pipeline(c, p, m, s, 2);
        expect_values(run, c, ref, 0, p,
                      std::string(pp::to_string(s)) + ": " + config_name(c) +
                          ", p=" + std::to_string(p) + ", m=" + std::to_string(m));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(Values, Naive) { values(Schedule::Naive); }
TEST(Values, GPipe) { values(Schedule::GPipe); }
TEST(Values, OneFOneB) { values(Schedule::OneFOneB); }

// ---- Traffic: neighbours only, m messages each way, bytes from the shapes -----------------------

void traffic(Schedule s) {
  const mlp::Config c = tiny_config(5, 16);
  for (int p = 1; p <= 4; ++p) {
    for (int m : {1, 3, 8}) {
      const PipelineRun run = run_pipeline(c, p, m, s, 1);
      ASSERT_TRUE(run.ok) << run.error;
      const int msgs = s == Schedule::Naive ? 1 : m;
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE(std::string(pp::to_string(s)) + ": p=" + std::to_string(p) +
                     ", m=" + std::to_string(m) + ", stage " + std::to_string(r));
        const dist::Stats& st = run.ranks[static_cast<std::size_t>(r)].stats;
        const auto [begin, end] = expected_layers(c.n_layers, p, r);
        const std::uint64_t fwd_bytes = 4ull * static_cast<std::uint64_t>(c.batch_size) *
                                        static_cast<std::uint64_t>(c.layer_out(end - 1));
        const std::uint64_t bwd_bytes = 4ull * static_cast<std::uint64_t>(c.batch_size) *
                                        static_cast<std::uint64_t>(c.layer_in(begin));
        EXPECT_EQ(st.builtin_collectives, 0u) << "point-to-point calls only";
        for (int q = 0; q < p; ++q) {
          const auto k = static_cast<std::size_t>(q);
          std::uint64_t want_sent = 0, want_bytes_sent = 0, want_recv = 0, want_bytes_recv = 0;
          if (q == r + 1) {  // activations out, their gradients back
            want_sent = want_recv = static_cast<std::uint64_t>(msgs);
            want_bytes_sent = want_bytes_recv = fwd_bytes;
          } else if (q == r - 1) {  // gradients out, activations in
            want_sent = want_recv = static_cast<std::uint64_t>(msgs);
            want_bytes_sent = want_bytes_recv = bwd_bytes;
          }
          EXPECT_EQ(st.messages_sent_to[k], want_sent) << "messages to rank " << q;
          EXPECT_EQ(st.bytes_sent_to[k], want_bytes_sent) << "bytes to rank " << q;
          EXPECT_EQ(st.messages_received_from[k], want_recv) << "messages from rank " << q;
          EXPECT_EQ(st.bytes_received_from[k], want_bytes_recv) << "bytes from rank " << q;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(Traffic, Naive) { traffic(Schedule::Naive); }
TEST(Traffic, GPipe) { traffic(Schedule::GPipe); }
TEST(Traffic, OneFOneB) { traffic(Schedule::OneFOneB); }

// ---- Simulated time: step time and bubble against the closed forms --------------------------------

void simulated_time(Schedule s, const std::vector<int>& stages,
                    const std::vector<int>& microbatches, int layers_per_stage) {
  const int width = 16;
  const double flops = 1e9;
  for (int p : stages) {
    for (int m : microbatches) {
      const int batch = 4 * 8 * 3;  // divisible by every m used
      const mlp::Config c = equal_config(p * layers_per_stage, width, batch);
      const PipelineRun run = run_pipeline(c, p, m, s, 1, free_network(), flops);
      ASSERT_TRUE(run.ok) << run.error;
      const int mm = s == Schedule::Naive ? 1 : m;  // naive: one microbatch of the whole batch
      const double rows = static_cast<double>(batch) / mm;
      const double tf = layers_per_stage * 2.0 * rows * width * width / flops;
      const double tb = 2 * tf;
      const double want_step = (mm + p - 1) * (tf + tb);
      const double want_bubble = static_cast<double>(p - 1) / (mm + p - 1);
      SCOPED_TRACE(std::string(pp::to_string(s)) + ": p=" + std::to_string(p) +
                   ", m=" + std::to_string(m) + ", tf=" + std::to_string(tf * 1e6) + " us, tb=2tf");
      const double step = run.ranks[0].step_s;
      const double bubble = 1.0 - mm * (tf + tb) / step;  // every stage computes mm(tf+tb)
      EXPECT_NEAR(step, want_step, 0.01 * want_step)
          << "simulated step time " << step * 1e6 << " us, the schedule's formula gives "
          << want_step * 1e6 << " us";
      EXPECT_NEAR(bubble, want_bubble, std::max(1e-9, 0.01 * want_bubble))
          << "measured bubble fraction " << bubble << ", expected " << want_bubble;
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(SimulatedTime, NaiveBubbleIsPMinus1OverP) {
  simulated_time(Schedule::Naive, {1, 2, 3, 4}, {1, 4}, 1);
}
TEST(SimulatedTime, GPipeBubbleIsPMinus1OverMPlusPMinus1) {
  simulated_time(Schedule::GPipe, {1, 2, 3, 4}, {1, 2, 3, 4, 6, 8}, 1);
}
TEST(SimulatedTime, OneFOneBBubbleIsPMinus1OverMPlusPMinus1) {
  simulated_time(Schedule::OneFOneB, {1, 2, 3, 4}, {1, 2, 3, 4, 6, 8}, 1);
}

// ---- Memory: peak stashed activations per stage ---------------------------------------------------

void memory(Schedule s) {
  const mlp::Config c = tiny_config(5, 24);
  for (int p = 1; p <= 4; ++p) {
    for (int m : {1, 2, 3, 4, 6, 8}) {
      const PipelineRun run = run_pipeline(c, p, m, s, 1);
      ASSERT_TRUE(run.ok) << run.error;
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE(std::string(pp::to_string(s)) + ": p=" + std::to_string(p) +
                     ", m=" + std::to_string(m) + ", stage " + std::to_string(r));
        const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
        const auto [begin, end] = expected_layers(c.n_layers, p, r);
        const std::int64_t per_mb = (c.batch_size / m) * stash_bytes_per_row(c, begin, end);
        EXPECT_EQ(rec.stash_after, 0) << "every stash must be released by its backward";
        switch (s) {
          case Schedule::Naive:
            EXPECT_EQ(rec.peak_microbatches, 1) << "naive stashes the whole batch once";
            EXPECT_EQ(rec.peak_bytes, c.batch_size * stash_bytes_per_row(c, begin, end));
            break;
          case Schedule::GPipe:
            EXPECT_EQ(rec.peak_microbatches, m) << "GPipe runs every forward before any backward";
            EXPECT_EQ(rec.peak_bytes, m * per_mb);
            break;
          case Schedule::OneFOneB: {
            const int bound = std::min(p - r, m);
            EXPECT_LE(rec.peak_microbatches, bound)
                << "1F1B stashes at most min(p - r, m) microbatches";
            EXPECT_GE(rec.peak_microbatches, 1);
            EXPECT_LE(rec.peak_bytes, bound * per_mb);
            break;
          }
          case Schedule::ZeroBubble:   // MemoryZB
          case Schedule::Interleaved:  // MemoryInterleaved
            break;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(Memory, NaiveStashesTheBatchOnce) { memory(Schedule::Naive); }
TEST(Memory, GPipeStashesEveryMicrobatch) { memory(Schedule::GPipe); }
TEST(Memory, OneFOneBStashesAtMostPMinusR) { memory(Schedule::OneFOneB); }

// ---- The order of the spans: which forward and backward each stage runs when ------------------------

std::string span_name(char kind, int i) {
  std::string s(1, kind);
  s += std::to_string(i);
  return s;
}

std::vector<std::string> expected_order(Schedule s, int p, int r, int m) {
  std::vector<std::string> out;
  auto F = [&](int i) { out.push_back(span_name('F', i)); };
  auto B = [&](int i) { out.push_back(span_name('B', i)); };
  if (s == Schedule::Naive) {
    F(0);
    B(0);
  } else if (s == Schedule::GPipe) {
    for (int i = 0; i < m; ++i) F(i);
    for (int i = 0; i < m; ++i) B(i);
  } else {
    const int warm = std::min(p - r - 1, m);
    for (int i = 0; i < warm; ++i) F(i);
    for (int i = 0; i < m - warm; ++i) {
      F(warm + i);
      B(i);
    }
    for (int i = m - warm; i < m; ++i) B(i);
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

TEST(Order, SpansFollowTheSchedule) {
  const mlp::Config c = tiny_config(4, 16);
  for (Schedule s : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB}) {
    for (int p = 1; p <= 4; ++p) {
      for (int m : {1, 2, 5, 8}) {
        const PipelineRun run = run_pipeline(c, p, m, s, 1);
        ASSERT_TRUE(run.ok) << run.error;
        for (int r = 0; r < p; ++r) {
          const auto& got = run.ranks[static_cast<std::size_t>(r)].order;
          const auto want = expected_order(s, p, r, m);
          EXPECT_TRUE(got == want)
              << pp::to_string(s) << ", p=" << p << ", m=" << m << ", stage " << r << ": spans\n  "
              << join(got) << "\nexpected\n  " << join(want);
        }
      }
    }
  }
}

// ---- Task 8: activation recomputation on one stage --------------------------------------------------

TEST(Recompute, StashesTheInputOnlyAndRecomputesInTheBackward) {
  const mlp::Config c = tiny_config(5, 8, mlp::Activation::ReLU);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(8);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  const auto want = mlp_gradients(c, x, y, nullptr);
  pp::CostModel cost;
  cost.flops_per_s = 1e9;
  pp::Stage s0(c, c.seed + 2, 0, 2, cost), s1(c, c.seed + 2, 1, 2, cost);
  s0.set_recompute(true);
  s1.set_recompute(true);
  mlp::Matrix probs, dlogits, dx1, dx0;
  for (int i = 0; i < 2; ++i) {
    const mlp::Matrix xi = x.middleRows(4 * i, 4);
    const mlp::Labels yi(y.begin() + 4 * i, y.begin() + 4 * i + 4);
    const mlp::Matrix a = s0.forward(xi, i);
    const mlp::Matrix& logits = s1.forward(a, i);
    EXPECT_EQ(s0.meter().bytes(), 4 * input_bytes_per_row(c, 0))
        << "with recomputation a stage stashes only its input";
    EXPECT_EQ(s1.meter().bytes(), 4 * input_bytes_per_row(c, 3));
    mlp::softmax_cross_entropy_forward(logits, yi, probs);
    mlp::softmax_cross_entropy_backward(probs, yi, dlogits);
    dlogits *= 0.5f;
    s1.backward(dlogits, i, dx1);
    ASSERT_EQ(dx1.rows(), 4);
    ASSERT_EQ(dx1.cols(), c.dim_hidden);
    dx0 = sentinel();
    s0.backward(dx1, i, dx0);
    EXPECT_TRUE(left_alone(dx0)) << "stage 0 must leave dx alone";
  }
  for (int k = 0; k < 5; ++k) {
    const pp::Stage& st = k < 3 ? s0 : s1;
    EXPECT_TRUE(close(st.parameters()[static_cast<std::size_t>(k < 3 ? k : k - 3)]->grad,
                      want[static_cast<std::size_t>(k)]))
        << "layer " << k << ": recomputation must not change the gradients";
  }
  EXPECT_EQ(s0.meter().microbatches(), 0);
  EXPECT_EQ(s1.meter().microbatches(), 0);
  // Spans: F0 F1 ... and in each backward R<i> (a forward's time) before B<i>.
  const std::vector<std::string> want_spans = {"F0", "R0", "B0", "F1", "R1", "B1"};
  for (const pp::Stage* st : {&s0, &s1}) {
    std::vector<std::string> got;
    double f = 0, r = 0, b = 0;
    for (const auto& sp : st->spans()) {
      got.push_back(sp.name);
      (sp.name[0] == 'F' ? f : sp.name[0] == 'R' ? r : b) += sp.t1 - sp.t0;
    }
    EXPECT_EQ(join(got), join(want_spans)) << "stage " << st->stage();
    double tf = 0;
    for (int l = st->layers().begin; l < st->layers().end(); ++l)
      tf += cost.forward_seconds(c, l, 4);
    EXPECT_NEAR(f, 2 * tf, 1e-15) << "stage " << st->stage() << ": two forwards";
    EXPECT_NEAR(r, 2 * tf, 1e-15) << "stage " << st->stage() << ": a recompute costs a forward";
    EXPECT_NEAR(b, 4 * tf, 1e-15) << "stage " << st->stage() << ": a backward costs tb = 2 tf";
  }
}

// ---- Task 9: the backward split into B and W ---------------------------------------------------------

TEST(StageSplit, BThenWEqualsTheBackward) {
  const mlp::Config c = tiny_config(5, 8, mlp::Activation::Tanh);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(8);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  const auto want = mlp_gradients(c, x, y, nullptr);
  pp::CostModel cost;
  cost.flops_per_s = 1e9;
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recomputation on" : "recomputation off");
    pp::Stage s0(c, c.seed + 2, 0, 2, cost), s1(c, c.seed + 2, 1, 2, cost);
    pp::Stage ref1(c, c.seed + 2, 1, 2, cost);
    s0.set_recompute(recompute);
    s1.set_recompute(recompute);
    mlp::Matrix probs, dlogits, dx1, dx1_ref, dx0;
    std::vector<mlp::Matrix> dls;
    for (int i = 0; i < 2; ++i) {  // both forwards first, then B1 B0 ... in an order with gaps
      const mlp::Matrix xi = x.middleRows(4 * i, 4);
      const mlp::Labels yi(y.begin() + 4 * i, y.begin() + 4 * i + 4);
      const mlp::Matrix a = s0.forward(xi, i);
      ref1.forward(a, i);
      mlp::softmax_cross_entropy_forward(s1.forward(a, i), yi, probs);
      mlp::softmax_cross_entropy_backward(probs, yi, dlogits);
      dlogits *= 0.5f;
      dls.push_back(dlogits);
    }
    const std::int64_t held1 = s1.meter().bytes(), held0 = s0.meter().bytes();
    s1.backward_input(dls[0], 0, dx1);
    EXPECT_EQ(s1.meter().microbatches(), 2) << "after B the microbatch stays stashed until its W";
    if (!recompute) {
      EXPECT_EQ(s1.meter().bytes(), held1) << "and with the same bytes";
    }
    for (const mlp::Parameter* prm : s1.parameters()) {
      EXPECT_TRUE((prm->grad.array() == 0).all()) << "B must not touch the weight gradients";
    }
    ref1.backward(dls[0], 0, dx1_ref);
    EXPECT_TRUE(close(dx1, dx1_ref)) << "B's dx must be the backward's dx";
    EXPECT_THROW(s1.backward_weight(1), std::logic_error) << "W of microbatch 1 before its B";
    dx0 = sentinel();
    s0.backward_input(dx1, 0, dx0);
    EXPECT_TRUE(left_alone(dx0)) << "the first stage's B leaves dx alone";
    if (!recompute) {
      EXPECT_EQ(s0.meter().bytes(), held0)
          << "stage 0 (its output is the next stage's input): after B the microbatch stays "
             "stashed with the same bytes until its W";
    }
    s1.backward_input(dls[1], 1, dx1);
    s0.backward_input(dx1, 1, dx0);
    s1.backward_weight(1);
    s1.backward_weight(0);
    s0.backward_weight(0);
    s0.backward_weight(1);
    EXPECT_EQ(s0.meter().microbatches(), 0) << "W releases the stash";
    EXPECT_EQ(s1.meter().microbatches(), 0) << "W releases the stash";
    EXPECT_THROW(s0.backward_weight(1), std::logic_error) << "a second W of the same microbatch";
    for (int k = 0; k < 5; ++k) {
      const pp::Stage& st = k < 3 ? s0 : s1;
      EXPECT_TRUE(close(st.parameters()[static_cast<std::size_t>(k < 3 ? k : k - 3)]->grad,
                        want[static_cast<std::size_t>(k)]))
          << "layer " << k << ": B then W must ADD the same gradients as the backward";
    }
    double tf = 0;
    for (int l = 3; l < 5; ++l) tf += cost.forward_seconds(c, l, 4);
    int nb = 0, nw = 0, nr = 0;
    const auto& spans = s1.spans();
    for (std::size_t k = 0; k < spans.size(); ++k) {
      const auto& sp = spans[k];
      if (sp.name[0] == 'B') {
        ++nb;
        EXPECT_NEAR(sp.t1 - sp.t0, tf, 1e-15) << "B takes half the backward (tb/2 = tf)";
        if (recompute) {
          const std::string want_r = "R" + sp.name.substr(1);
          EXPECT_TRUE(k > 0 && spans[k - 1].name == want_r)
              << "with recomputation B first runs the forward again (span " << want_r
              << ") right before " << sp.name;
        }
      }
      if (sp.name[0] == 'R') {
        ++nr;
        EXPECT_NEAR(sp.t1 - sp.t0, tf, 1e-15) << "a recompute costs a forward (tf)";
      }
      if (sp.name[0] == 'W') {
        ++nw;
        EXPECT_NEAR(sp.t1 - sp.t0, tf, 1e-15) << "W takes the other half (tb/2 = tf)";
      }
    }
    EXPECT_EQ(nb, 2);
    EXPECT_EQ(nw, 2);
    EXPECT_EQ(nr, recompute ? 2 : 0) << "one R span per B with recomputation, none without";
  }
}

// ---- Task 10: ZB-H1 as a list of operations -------------------------------------------------------

TEST(ZBOps, EveryOpOnceInOrderWithinTheStashBoundAndTheStepFormula) {
  EXPECT_THROW(pp::zb_h1_ops(2, 0, 0), std::invalid_argument) << "m = 0";
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 10; ++m) {
      const auto lists = zb_lists(p, m);
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) + " stage " +
                     std::to_string(r));
        const auto& ops = lists[static_cast<std::size_t>(r)];
        ASSERT_EQ(ops.size(), static_cast<std::size_t>(3 * m)) << "F, B and W of each microbatch";
        int next[3] = {0, 0, 0};                                 // the next F, B, W expected
        std::vector<int> state(static_cast<std::size_t>(m), 0);  // 0 none, 1 F, 2 B, 3 W done
        for (const pp::Op& op : ops) {
          const int k = op.kind == pp::OpKind::F ? 0 : op.kind == pp::OpKind::B ? 1 : 2;
          ASSERT_NE(op.kind, pp::OpKind::BW) << "ZB-H1 splits every backward";
          ASSERT_EQ(op.microbatch, next[k]) << pp::to_string(op) << ": out of microbatch order";
          ASSERT_EQ(state[static_cast<std::size_t>(op.microbatch)], k)
              << pp::to_string(op) << ": F before B before W";
          ++next[k];
          ++state[static_cast<std::size_t>(op.microbatch)];
        }
      }
      const OpsReplay rep = replay_ops(lists, 1.0);
      ASSERT_TRUE(rep.ok) << "p=" << p << " m=" << m << ": " << rep.error;
      EXPECT_EQ(rep.step, zb_formula_units(p, m))
          << "p=" << p << " m=" << m << ": step in units of tf (F = B = W = tf)";
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(rep.peak[static_cast<std::size_t>(r)], std::min(p, m))
            << "p=" << p << " m=" << m << " stage " << r << ": at most p microbatches stashed";
      }
    }
  }
}

// ---- ZB-H1 and recomputation, run: values, traffic, time, memory, order ------------------------

TEST(ValuesZB, EqualsSingleProcess) {
  for (int layers : {4, 5}) {
    const mlp::Config c = tiny_config(layers, 16);
    const Reference ref = single_process(c, 2);
    for (int p = 1; p <= 4; ++p) {
      for (int m : {1, 2, 3, 5, 8}) {
        const PipelineRun run = run_pipeline(c, p, m, Schedule::ZeroBubble, 2);
        expect_values(
            run, c, ref, 0, p,
            "zb: " + config_name(c) + ", p=" + std::to_string(p) + ", m=" + std::to_string(m));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(ValuesRecompute, EverySchedule) {
  const mlp::Config c = tiny_config(5, 16, mlp::Activation::ReLU);
  const Reference ref = single_process(c, 2);
  for (Schedule s : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB, Schedule::ZeroBubble}) {
    for (int p : {1, 2, 3}) {
      for (int m : {1, 3, 6}) {
        const PipelineRun run = run_pipeline(c, p, m, s, 2, dist::NetworkModel{}, 1e9, true);
        expect_values(run, c, ref, 0, p,
                      std::string(pp::to_string(s)) + " with recomputation, p=" +
                          std::to_string(p) + ", m=" + std::to_string(m));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(TrafficZB, OneMessagePerMicrobatchEachWayNeighboursOnly) {
  const mlp::Config c = tiny_config(5, 16);
  for (int p = 1; p <= 4; ++p) {
    for (int m : {1, 3, 8}) {
      const PipelineRun run = run_pipeline(c, p, m, Schedule::ZeroBubble, 1);
      ASSERT_TRUE(run.ok) << run.error;
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("zb: p=" + std::to_string(p) + ", m=" + std::to_string(m) + ", stage " +
                     std::to_string(r));
        const dist::Stats& st = run.ranks[static_cast<std::size_t>(r)].stats;
        const auto [begin, end] = expected_layers(c.n_layers, p, r);
        EXPECT_EQ(st.builtin_collectives, 0u);
        for (int q = 0; q < p; ++q) {
          const auto k = static_cast<std::size_t>(q);
          std::uint64_t msgs = 0, bytes_to = 0, bytes_from = 0;
          if (q == r + 1) {
            msgs = static_cast<std::uint64_t>(m);
            bytes_to = bytes_from = 4ull * 16 * static_cast<std::uint64_t>(c.layer_out(end - 1));
          } else if (q == r - 1) {
            msgs = static_cast<std::uint64_t>(m);
            bytes_to = bytes_from = 4ull * 16 * static_cast<std::uint64_t>(c.layer_in(begin));
          }
          EXPECT_EQ(st.messages_sent_to[k], msgs) << "messages to rank " << q;
          EXPECT_EQ(st.messages_received_from[k], msgs) << "messages from rank " << q;
          EXPECT_EQ(st.bytes_sent_to[k], bytes_to) << "bytes to rank " << q;
          EXPECT_EQ(st.bytes_received_from[k], bytes_from) << "bytes from rank " << q;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

/// Equal stages, free communication (or latency alpha): the measured step against `want(tf)`.
template <typename Want>
void timed(Schedule s, bool recompute, const std::vector<int>& stages,
           const std::vector<int>& microbatches, double alpha, const Want& want) {
  const int width = 16;
  const double flops = 1e9;
  for (int p : stages) {
    for (int m : microbatches) {
      const int batch = 120;  // divisible by every m used: equal microbatches
      const mlp::Config c = equal_config(p, width, batch);
      dist::NetworkModel net = free_network();
      net.latency_s = alpha;
      const PipelineRun run = run_pipeline(c, p, m, s, 1, net, flops, recompute);
      ASSERT_TRUE(run.ok) << run.error;
      const double tf = 2.0 * (static_cast<double>(batch) / m) * width * width / flops;
      const double want_step = want(p, m, tf);
      const double step = run.ranks[0].step_s;
      const double busy = m * (3 * tf + (recompute ? tf : 0));
      SCOPED_TRACE(std::string(pp::to_string(s)) + (recompute ? " with recomputation" : "") +
                   ": p=" + std::to_string(p) + ", m=" + std::to_string(m) +
                   ", tf=" + std::to_string(tf * 1e6) + " us, latency " +
                   std::to_string(alpha * 1e6) + " us");
      EXPECT_NEAR(step, want_step, 0.002 * want_step)
          << "simulated step " << step * 1e6 << " us, expected " << want_step * 1e6 << " us";
      const double bubble = 1 - busy / step, want_bubble = 1 - busy / want_step;
      EXPECT_NEAR(bubble, want_bubble, std::max(1e-9, 0.01 * want_bubble)) << "bubble fraction";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(TimeZB, BubbleIsPMinus1Over3MPlusPMinus1) {
  timed(Schedule::ZeroBubble, false, {1, 2, 3, 4}, {1, 2, 3, 4, 6, 8}, 0,
        [](int p, int m, double tf) { return zb_formula_units(p, m) * tf; });
}

TEST(TimeRecompute, OneFOneBAndGPipeBackwardCostsTbPlusTf) {
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB}) {
    timed(s, true, {1, 2, 4}, {1, 3, 8}, 0,
          [](int p, int m, double tf) { return (m + p - 1) * 4 * tf; });
  }
}

TEST(TimeBusyNetwork, ZBMessagesTimedInOrder) {
  // latency > 0: every message costs alpha and occupies its sender's and receiver's links; the
  // step is the tests' replay of the stages' own lists with the executor's promised order.
  for (double frac : {0.25, 1.5}) {
    for (int p : {2, 3, 4}) {
      for (int m : {1, 3, 5, 8}) {
        const int batch = 120, width = 16;
        const double tf = 2.0 * (static_cast<double>(batch) / m) * width * width / 1e9;
        const double alpha = frac * tf;
        timed(Schedule::ZeroBubble, false, {p}, {m}, alpha, [&](int pp_, int mm, double t) {
          const OpsReplay rep = replay_ops(zb_lists(pp_, mm), t, alpha);
          EXPECT_TRUE(rep.ok) << rep.error;
          return rep.step;
        });
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(MemoryZB, AtMostPMicrobatchesAndNoMoreThan1F1BsPeak) {
  const mlp::Config c = tiny_config(5, 24);
  for (int p = 1; p <= 4; ++p) {
    for (int m : {1, 2, 3, 4, 6, 8}) {
      const PipelineRun zb = run_pipeline(c, p, m, Schedule::ZeroBubble, 1);
      const PipelineRun ofob = run_pipeline(c, p, m, Schedule::OneFOneB, 1);
      ASSERT_TRUE(zb.ok) << zb.error;
      ASSERT_TRUE(ofob.ok) << ofob.error;
      int peak_1f1b = 0;
      for (const auto& rec : ofob.ranks) peak_1f1b = std::max(peak_1f1b, rec.peak_microbatches);
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("zb: p=" + std::to_string(p) + ", m=" + std::to_string(m) + ", stage " +
                     std::to_string(r));
        const RankRecord& rec = zb.ranks[static_cast<std::size_t>(r)];
        const auto [begin, end] = expected_layers(c.n_layers, p, r);
        EXPECT_EQ(rec.stash_after, 0) << "every stash released by its W";
        EXPECT_LE(rec.peak_microbatches, std::min(p, m)) << "at most p microbatches stashed";
        EXPECT_LE(rec.peak_microbatches, peak_1f1b) << "no more than 1F1B's peak";
        EXPECT_GE(rec.peak_microbatches, 1);
        EXPECT_LE(rec.peak_bytes,
                  rec.peak_microbatches * (c.batch_size / m) * stash_bytes_per_row(c, begin, end));
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(MemoryRecompute, InputsOnlyWithTheSchedulesMicrobatchCounts) {
  const mlp::Config c = tiny_config(5, 24);
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB}) {
    for (int p = 1; p <= 4; ++p) {
      for (int m : {1, 3, 4, 8}) {
        const PipelineRun run = run_pipeline(c, p, m, s, 1, dist::NetworkModel{}, 1e9, true);
        ASSERT_TRUE(run.ok) << run.error;
        for (int r = 0; r < p; ++r) {
          SCOPED_TRACE(std::string(pp::to_string(s)) +
                       " with recomputation: p=" + std::to_string(p) + ", m=" + std::to_string(m) +
                       ", stage " + std::to_string(r));
          const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
          const auto [begin, end] = expected_layers(c.n_layers, p, r);
          const int want = s == Schedule::GPipe ? m : std::min(p - r, m);
          EXPECT_EQ(rec.peak_microbatches, want);
          EXPECT_EQ(rec.peak_bytes, want * (c.batch_size / m) * input_bytes_per_row(c, begin))
              << "with recomputation each microbatch stashes the stage's input only";
          EXPECT_EQ(rec.stash_after, 0);
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(OrderZB, SpansFollowTheStagesListAndNoWBeforeItsB) {
  const mlp::Config c = tiny_config(4, 16);
  for (int p = 1; p <= 4; ++p) {
    for (int m : {1, 2, 5, 8}) {
      const PipelineRun run = run_pipeline(c, p, m, Schedule::ZeroBubble, 1);
      ASSERT_TRUE(run.ok) << run.error;
      for (int r = 0; r < p; ++r) {
        std::vector<std::string> want;
        for (const pp::Op& op : pp::zb_h1_ops(p, r, m)) want.push_back(pp::to_string(op));
        const auto& got = run.ranks[static_cast<std::size_t>(r)].order;
        EXPECT_EQ(join(got), join(want)) << "zb, p=" << p << ", m=" << m << ", stage " << r;
        std::set<std::string> b_done;
        for (const auto& name : got) {
          if (name[0] == 'B') b_done.insert(name.substr(1));
          if (name[0] == 'W') {
            EXPECT_TRUE(b_done.count(name.substr(1)))
                << "stage " << r << ": " << name << " before its B";
          }
        }
      }
    }
  }
}

// ---- Tasks 12 and 13: interleaved 1F1B (virtual stages) ------------------------------------------

TEST(ChunkRank, ChunkGOnRankGModP) {
  for (int p = 1; p <= 6; ++p) {
    for (int g = 0; g < 4 * p; ++g)
      EXPECT_EQ(pp::chunk_rank(g, p), g % p) << "p=" << p << " g=" << g;
  }
  EXPECT_THROW(pp::chunk_rank(0, 0), std::invalid_argument);
}

/// The span name of an operation (BW runs as one span B<i>).
std::string span_of(const pp::Op& op) {
  std::string s = pp::to_string(op);
  return op.kind == pp::OpKind::BW ? "B" + s.substr(2) : s;
}

TEST(InterleavedOps, EveryChunkOnceWithinTheStashBoundAndTheStepFormula) {
  for (int p = 1; p <= 4; ++p) {
    for (int v = 1; v <= 3; ++v) {
      std::vector<int> ms = {p, 2 * p, 3 * p};
      if (v == 1) ms.insert(ms.end(), {1, 2, p + 1});  // one chunk: any m, also m < p - 1
      for (int m : ms) {
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) +
                     " m=" + std::to_string(m));
        const auto lists = interleaved_lists(p, m, v);
        for (int r = 0; r < p; ++r) {
          const auto& ops = lists[static_cast<std::size_t>(r)];
          ASSERT_EQ(ops.size(), static_cast<std::size_t>(2 * m * v))
              << "rank " << r << ": F and BW of every (chunk, microbatch)";
          std::set<std::pair<int, int>> f, b;
          for (const pp::Op& op : ops) {
            ASSERT_TRUE(op.kind == pp::OpKind::F || op.kind == pp::OpKind::BW) << pp::to_string(op);
            ASSERT_TRUE(op.chunk >= 0 && op.chunk < v && op.microbatch >= 0 && op.microbatch < m)
                << pp::to_string(op);
            auto& set = op.kind == pp::OpKind::F ? f : b;
            ASSERT_TRUE(set.insert({op.chunk, op.microbatch}).second)
                << "rank " << r << ": " << pp::to_string(op) << " twice";
            if (op.kind == pp::OpKind::BW) {
              ASSERT_TRUE(f.count({op.chunk, op.microbatch}))
                  << "rank " << r << ": " << pp::to_string(op) << " before its F";
            }
          }
        }
        const OpsReplay rep = replay_ops(lists, 1.0, 0, v);
        ASSERT_TRUE(rep.ok) << rep.error;
        EXPECT_EQ(rep.step, interleaved_formula_units(p, m, v))
            << "step in units of one chunk's forward: (m + (p-1)/v)(tf + tb)";
        for (int r = 0; r < p; ++r) {
          EXPECT_LE(rep.peak[static_cast<std::size_t>(r)], v * p - r)
              << "rank " << r << ": at most v p - r (chunk, microbatch) stashed";
        }
        if (v == 1) {
          for (int r = 0; r < p; ++r) {
            std::vector<std::string> got;
            for (const pp::Op& op : lists[static_cast<std::size_t>(r)]) got.push_back(span_of(op));
            EXPECT_EQ(join(got), join(expected_order(Schedule::OneFOneB, p, r, m)))
                << "with one chunk interleaved 1F1B is 1F1B, rank " << r;
          }
        }
      }
    }
  }
  EXPECT_THROW(pp::interleaved_ops(4, 0, 6, 2), std::invalid_argument)
      << "m = 6 is not a multiple of p = 4";
  EXPECT_NO_THROW(pp::interleaved_ops(4, 0, 6, 1)) << "one chunk: any m";
}

TEST(ValuesInterleaved, EqualsSingleProcessForOneTwoThreeChunks) {
  for (int layers : {7, 12}) {  // 7: uneven chunks
    const mlp::Config c = tiny_config(layers, 24);
    const Reference ref = single_process(c, 2);
    for (int p = 1; p <= 3; ++p) {
      for (int v = 1; v <= 3; ++v) {
        if (v * p > layers) continue;
        for (int m : {p, 2 * p, 4 * p}) {
          const std::string what = "interleaved: " + config_name(c) + ", p=" + std::to_string(p) +
                                   ", v=" + std::to_string(v) + ", m=" + std::to_string(m);
          const PipelineRun run =
              run_pipeline(c, p, m, Schedule::Interleaved, 2, dist::NetworkModel{}, 1e9, false, v);
          expect_values(run, c, ref, 0, p, what, false);
          std::vector<int> all;
          for (const auto& rec : run.ranks)
            all.insert(all.end(), rec.layers.begin(), rec.layers.end());
          std::sort(all.begin(), all.end());
          std::vector<int> want(static_cast<std::size_t>(layers));
          for (int l = 0; l < layers; ++l) want[static_cast<std::size_t>(l)] = l;
          EXPECT_EQ(all, want) << what << ": the chunks hold every layer once";
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

TEST(ValuesInterleaved, MicrobatchesNotAMultipleOfPAreAClearError) {
  const mlp::Config c = tiny_config(8, 24);
  const PipelineRun run =
      run_pipeline(c, 4, 6, Schedule::Interleaved, 1, dist::NetworkModel{}, 1e9, false, 2);
  ASSERT_FALSE(run.ok) << "m = 6 on p = 4 with 2 chunks must be refused";
  EXPECT_NE(run.error.find("multiple"), std::string::npos)
      << "the error must say m must be a multiple of p; got: " << run.error;
  const PipelineRun one =
      run_pipeline(c, 4, 6, Schedule::Interleaved, 1, dist::NetworkModel{}, 1e9, false, 1);
  EXPECT_TRUE(one.ok) << "one chunk per rank takes any m: " << one.error;
}

TEST(TrafficInterleaved, MessagesToTheNeighbouringChunksRanks) {
  const mlp::Config c = tiny_config(12, 24);
  for (int p : {2, 3, 4}) {
    for (int v : {1, 2, 3}) {
      const int m = 2 * p, G = v * p;
      const PipelineRun run =
          run_pipeline(c, p, m, Schedule::Interleaved, 1, dist::NetworkModel{}, 1e9, false, v);
      ASSERT_TRUE(run.ok) << run.error;
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("interleaved: p=" + std::to_string(p) + ", v=" + std::to_string(v) +
                     ", m=" + std::to_string(m) + ", rank " + std::to_string(r));
        std::vector<std::uint64_t> msgs(static_cast<std::size_t>(p), 0), bytes(msgs);
        for (int g = r; g < G; g += p) {  // the tests' own layout: chunk g on rank g mod p
          const auto [begin, end] = expected_layers(c.n_layers, G, g);
          if (g + 1 < G) {
            msgs[static_cast<std::size_t>((g + 1) % p)] += static_cast<std::uint64_t>(m);
            bytes[static_cast<std::size_t>((g + 1) % p)] +=
                4ull * 24 * static_cast<std::uint64_t>(c.layer_out(end - 1));
          }
          if (g > 0) {
            msgs[static_cast<std::size_t>((g - 1) % p)] += static_cast<std::uint64_t>(m);
            bytes[static_cast<std::size_t>((g - 1) % p)] +=
                4ull * 24 * static_cast<std::uint64_t>(c.layer_in(begin));
          }
        }
        const dist::Stats& st = run.ranks[static_cast<std::size_t>(r)].stats;
        EXPECT_EQ(st.builtin_collectives, 0u);
        for (int q = 0; q < p; ++q) {
          EXPECT_EQ(st.messages_sent_to[static_cast<std::size_t>(q)],
                    msgs[static_cast<std::size_t>(q)])
              << "messages to rank " << q;
          EXPECT_EQ(st.bytes_sent_to[static_cast<std::size_t>(q)],
                    bytes[static_cast<std::size_t>(q)])
              << "bytes to rank " << q;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(TimeInterleaved, BubbleIsPMinus1OverVMPlusPMinus1) {
  const int width = 16, batch = 240;
  const double flops = 1e9;
  for (int p = 1; p <= 4; ++p) {
    for (int v = 1; v <= 3; ++v) {
      for (int m : {p, 2 * p, 4 * p}) {
        const mlp::Config c = equal_config(v * p, width, batch);  // one layer per chunk
        const PipelineRun run =
            run_pipeline(c, p, m, Schedule::Interleaved, 1, free_network(), flops, false, v);
        ASSERT_TRUE(run.ok) << run.error;
        const double t = 2.0 * (static_cast<double>(batch) / m) * width * width / flops;
        const double want = interleaved_formula_units(p, m, v) * t;
        const double step = run.ranks[0].step_s;
        const double bubble = 1 - 3.0 * m * v * t / step;
        const double want_bubble = static_cast<double>(p - 1) / (v * m + p - 1);
        EXPECT_NEAR(step, want, 0.002 * want)
            << "p=" << p << " v=" << v << " m=" << m << ": (m + (p-1)/v)(tf + tb)";
        EXPECT_NEAR(bubble, want_bubble, std::max(1e-9, 0.01 * want_bubble))
            << "p=" << p << " v=" << v << " m=" << m << ": bubble (p-1)/(vm+p-1)";
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(TimeBusyNetwork, NaiveAndGPipePayLatencyOnTheCriticalPath) {
  // Every message costs alpha (unlimited bandwidth) and a blocking send returns when its message
  // has arrived. Naive: 2 (p-1) messages on the critical path; GPipe: a stage sends one message
  // per forward (backward), so its forwards leave one per tf + alpha: 2 (m + p - 2) of them.
  for (double frac : {0.2, 1.3}) {
    for (int p : {2, 3, 4}) {
      for (int m : {1, 3, 5}) {
        const double tf = 2.0 * (120.0 / m) * 16 * 16 / 1e9;
        const double alpha = frac * tf;
        timed(Schedule::Naive, false, {p}, {m}, alpha, [&](int pp_, int mm, double t) {
          return 3.0 * pp_ * mm * t + 2.0 * (pp_ - 1) * alpha;
        });
        timed(Schedule::GPipe, false, {p}, {m}, alpha, [&](int pp_, int mm, double t) {
          return 3.0 * (mm + pp_ - 1) * t + 2.0 * (mm + pp_ - 2) * alpha;
        });
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(TimeBusyNetwork, InterleavedMessagesTimedInOrder) {
  const int width = 16, batch = 240;
  const double flops = 1e9;
  for (double frac : {0.3, 1.2}) {
    for (int p : {2, 3, 4}) {
      for (int v : {2, 3}) {
        const int m = 2 * p;
        const mlp::Config c = equal_config(v * p, width, batch);
        const double t = 2.0 * (static_cast<double>(batch) / m) * width * width / flops;
        dist::NetworkModel net = free_network();
        net.latency_s = frac * t;
        const PipelineRun run =
            run_pipeline(c, p, m, Schedule::Interleaved, 1, net, flops, false, v);
        ASSERT_TRUE(run.ok) << run.error;
        const OpsReplay rep = replay_ops(interleaved_lists(p, m, v), t, net.latency_s, v);
        ASSERT_TRUE(rep.ok) << rep.error;
        EXPECT_NEAR(run.ranks[0].step_s, rep.step, 0.002 * rep.step)
            << "p=" << p << " v=" << v << " m=" << m << ", latency " << net.latency_s * 1e6
            << " us: each message must leave as soon as it is computed";
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(MemoryInterleaved, AtMostVPMinusRChunkStashesPerRank) {
  const int width = 8, batch = 72;  // equal microbatches for every m used
  for (int p = 1; p <= 4; ++p) {
    for (int v = 1; v <= 3; ++v) {
      for (int m : {p, 3 * p}) {
        const mlp::Config c = equal_config(v * p, width, batch);
        const PipelineRun run =
            run_pipeline(c, p, m, Schedule::Interleaved, 1, free_network(), 1e9, false, v);
        ASSERT_TRUE(run.ok) << run.error;
        for (int r = 0; r < p; ++r) {
          const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
          SCOPED_TRACE("interleaved: p=" + std::to_string(p) + ", v=" + std::to_string(v) +
                       ", m=" + std::to_string(m) + ", rank " + std::to_string(r));
          EXPECT_EQ(rec.stash_after, 0);
          EXPECT_LE(rec.peak_microbatches, std::min(v * p - r, v * m));
          EXPECT_GE(rec.peak_microbatches, std::min(p - r, m)) << "the pipeline must fill";
          std::int64_t largest = 0;
          for (int g = r; g < v * p; g += p) {
            const auto [b, e] = expected_layers(c.n_layers, v * p, g);
            largest = std::max(largest, stash_bytes_per_row(c, b, e));
          }
          EXPECT_LE(rec.peak_bytes, rec.peak_microbatches * (batch / m) * largest);
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(OrderInterleaved, SpansFollowTheRanksListInChunkOrder) {
  const mlp::Config c = tiny_config(12, 24);
  for (int p : {2, 3}) {
    for (int v : {2, 3}) {
      const int m = 2 * p;
      const PipelineRun run =
          run_pipeline(c, p, m, Schedule::Interleaved, 1, dist::NetworkModel{}, 1e9, false, v);
      ASSERT_TRUE(run.ok) << run.error;
      for (int r = 0; r < p; ++r) {
        std::vector<std::string> want;
        for (const pp::Op& op : pp::interleaved_ops(p, r, m, v)) want.push_back(span_of(op));
        EXPECT_EQ(join(run.ranks[static_cast<std::size_t>(r)].order), join(want))
            << "p=" << p << " v=" << v << " m=" << m << " rank " << r;
      }
    }
  }
}

}  // namespace
