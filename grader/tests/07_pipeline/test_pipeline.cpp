// 07_pipeline public tests. Graded items (grader/manifest.toml) are separate for the cut, a
// stage's compute, the 1F1B plan, the values of each schedule, the traffic, the simulated time of
// each schedule, the peak stash of each schedule and the order of the F/B spans.
//
// Values: p = 1..4 stages, m = 1..8 microbatches, 4 layers (even cut on 1, 2, 4 stages) and 5
// layers (uneven on 2, 3, 4), two SGD steps, against single-process training (pipeline_harness.hpp).
// Time: equal stages, free communication (latency 0, infinite bandwidth), compute charged by the
// cost model: the step time and the bubble within 1% of the closed forms.
#include <gtest/gtest.h>

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

}  // namespace
