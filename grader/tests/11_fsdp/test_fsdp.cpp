// The public tests of 11_fsdp (its items in grader/manifest.toml filter them): shards, Adam,
// values against single-process Adam, traffic, the memory meter, the order of gathers and the
// simulated step time, on small models whose units do not divide by dp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "fsdp_harness.hpp"

namespace {

using namespace fsdptest;
using distlab::testing::contains;
using distlab::testing::expect_error;

// ---- task 1: shards ----------------------------------------------------------------------------

TEST(Shard, EveryRanksShardOfThePaddedUnit) {
  for (std::size_t n : {1u, 7u, 10u, 12u, 63u}) {
    std::vector<float> full(n);
    for (std::size_t i = 0; i < n; ++i) full[i] = 1.0f + static_cast<float>(i);
    for (int dp : {1, 2, 3, 4}) {
      const std::size_t c = (n + static_cast<std::size_t>(dp) - 1) / static_cast<std::size_t>(dp);
      for (int r = 0; r < dp; ++r) {
        std::vector<float> shard(c, std::numeric_limits<float>::quiet_NaN());
        shard_unit(full, dp, r, shard);
        for (std::size_t k = 0; k < c; ++k) {
          const std::size_t i = static_cast<std::size_t>(r) * c + k;
          const float want = i < n ? full[i] : 0.0f;
          ASSERT_EQ(shard[k], want) << "n=" << n << " dp=" << dp << " rank " << r << " element "
                                    << k << " (unit element " << i << ")";
        }
      }
    }
  }
}

TEST(Shard, PaddingIsZeroWhateverTheBufferHeld) {
  const std::vector<float> full = {1, 2, 3, 4, 5};  // padded to 8 over 4 ranks: rank 2 has 5, 0
  std::vector<float> shard = {-7.0f, std::numeric_limits<float>::infinity()};
  shard_unit(full, 4, 2, shard);
  EXPECT_EQ(shard[0], 5.0f);
  EXPECT_EQ(shard[1], 0.0f);
  shard = {9.0f, 9.0f};
  shard_unit(full, 4, 3, shard);
  EXPECT_EQ(shard[0], 0.0f);
  EXPECT_EQ(shard[1], 0.0f);
}

TEST(Shard, WrongShardSizeIsAnError) {
  const std::vector<float> full(10, 1.0f);
  std::vector<float> shard(2);  // the shard of 10 over 4 ranks has 3
  EXPECT_THROW(shard_unit(full, 4, 0, shard), std::invalid_argument);
}

// ---- task 2: Adam ------------------------------------------------------------------------------

// t = 1: m_hat = g and v_hat = g^2, so the first step moves every weight by learning_rate *
// g / (|g| + eps): about learning_rate, whatever the gradient's size (bias correction at work).
TEST(Adam, FirstStepMovesEveryWeightByTheLearningRate) {
  const AdamConfig a;
  std::vector<float> w = {1.0f, -2.0f, 0.5f, 3.0f}, g = {1e-3f, -4.0f, 2e-5f, 0.25f};
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  const std::vector<float> w0 = w;
  adam_update(w, g, m, v, 1, a);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double want =
        w0[i] - a.learning_rate * g[i] / (std::abs(static_cast<double>(g[i])) + a.eps);
    EXPECT_NEAR(w[i], want, 1e-6 * std::abs(want) + 1e-9) << "element " << i;
    EXPECT_NEAR(m[i], (1 - a.beta1) * g[i], 1e-6 * std::abs(g[i])) << "element " << i;
    EXPECT_NEAR(v[i], (1 - a.beta2) * g[i] * g[i], 1e-6 * g[i] * g[i]) << "element " << i;
  }
}

// Three steps with a constant gradient g: m_t = (1 - beta1^t) g and v_t = (1 - beta2^t) g^2, so
// m_hat = g, v_hat = g^2 and every step moves by learning_rate * g / (|g| + eps).
TEST(Adam, BiasCorrectionKeepsConstantGradientStepsEqual) {
  AdamConfig a;
  a.learning_rate = 0.01f;
  std::vector<float> w = {0.0f, 0.0f}, g = {0.5f, -0.002f}, m(2, 0.0f), v(2, 0.0f);
  for (int t = 1; t <= 3; ++t) adam_update(w, g, m, v, t, a);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double want = -3.0 * a.learning_rate * g[i] / (std::abs(g[i]) + a.eps);
    EXPECT_NEAR(w[i], want, 1e-5 * std::abs(want)) << "element " << i;
    const double m3 = (1 - std::pow(a.beta1, 3)) * g[i];
    EXPECT_NEAR(m[i], m3, 1e-5 * std::abs(m3)) << "element " << i;
  }
}

TEST(Adam, SizesMustMatch) {
  std::vector<float> w(3), g(3), m(3), v(2);
  EXPECT_THROW(adam_update(w, g, m, v, 1, AdamConfig{}), std::invalid_argument);
}

// ---- tasks 3-5: values -------------------------------------------------------------------------

void expect_values(const TrainConfig& c, int p, int steps) {
  const datasets::Split data = mlp::make_data(c.model);
  const std::vector<std::vector<float>> want = reference_weights(c, data, steps);
  const std::vector<RankResult> got = run(c, p, steps);
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(weights_near(got[static_cast<std::size_t>(r)].weights, want,
                             c.fsdp.adam.learning_rate, steps))
        << "dp " << p << ", rank " << r << ", prefetch " << c.fsdp.prefetch
        << ", reshard_after_forward " << c.fsdp.reshard_after_forward;
  }
}

TEST(Values, EqualSingleProcessAdamDp1And2) {
  for (int p : {1, 2}) expect_values(config_of(0, true), p, 3);
}

TEST(Values, EqualSingleProcessAdamDp3And4) {
  for (int p : {3, 4}) expect_values(config_of(0, true), p, 3);
}

TEST(Values, KeepWeightsFromForwardToBackward) {
  for (int p : {2, 3}) expect_values(config_of(0, false), p, 3);
}

TEST(Values, WithPrefetch) {
  for (int k : {1, 2}) expect_values(config_of(k, true), 4, 3);
}

// ---- traffic -----------------------------------------------------------------------------------

// Per unit and step: the gathers (forward, and backward with reshard after forward) and one
// reduce-scatter, each (p-1)/p of the padded unit: an all-reduce would send twice that.
TEST(Traffic, GathersAndOneReduceScatterPerUnitNothingElse) {
  for (bool reshard : {true, false}) {
    const TrainConfig c = config_of(1, reshard);
    for (int p : {3, 4}) {
      const std::vector<RankResult> got = run(c, p, 2);
      for (int r = 0; r < p; ++r) {
        const StepMeasure& m = got[static_cast<std::size_t>(r)].measure;
        EXPECT_EQ(m.bytes_sent, expected_bytes(c, p))
            << "p=" << p << " rank " << r << " reshard " << reshard;
        EXPECT_EQ(m.collectives,
                  static_cast<std::uint64_t>((gathers_per_unit(c) + 1) * c.model.n_layers))
            << "calls to built-in collectives, p=" << p << " rank " << r;
      }
    }
  }
}

// ---- memory ------------------------------------------------------------------------------------

TEST(Memory, PeakIsTheShardsPlusTheWindow) {
  for (int k : {0, 1}) {
    const TrainConfig c = config_of(k, true);
    const std::vector<RankResult> got = run(c, 4, 2);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(got[static_cast<std::size_t>(r)].measure.peak, expected_peak(c, 4))
          << "prefetch " << k << ", rank " << r;
    }
  }
}

TEST(Memory, KeepingTheWeightsHoldsEveryUnit) {
  const TrainConfig c = config_of(0, false);
  const std::vector<RankResult> got = run(c, 3, 2);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(got[static_cast<std::size_t>(r)].measure.peak, expected_peak(c, 3)) << "rank " << r;
}

// ---- order -------------------------------------------------------------------------------------

/// Checks a forward or backward pass of the log: when unit `order[i]` is launched, exactly the
/// units order[0 .. min(i + k, L - 1)] of the pass have been gathered.
void expect_window(const std::vector<LogEntry>& log, LogEntry::Kind compute,
                   const std::vector<int>& order, int k, const std::string& what) {
  std::vector<int> gathered;
  std::size_t launched = 0;
  for (const LogEntry& e : log) {
    if (e.kind == LogEntry::Gather) gathered.push_back(e.unit);
    if (e.kind != compute) continue;
    ASSERT_LT(launched, order.size()) << what;
    ASSERT_EQ(e.unit, order[launched]) << what << ": units launched out of order";
    const std::size_t want = std::min(launched + static_cast<std::size_t>(k) + 1, order.size());
    ASSERT_EQ(gathered.size(), want) << what << ": gathers issued when unit " << e.unit
                                     << " was launched (prefetch " << k << ")";
    for (std::size_t j = 0; j < want; ++j) ASSERT_EQ(gathered[j], order[j]) << what;
    ++launched;
  }
  EXPECT_EQ(launched, order.size()) << what;
}

/// The forward pass of a step's log (up to its last Forward) or the backward pass (after it).
std::vector<LogEntry> pass(const std::vector<LogEntry>& log, bool backward) {
  std::size_t end_of_forward = 0;
  for (std::size_t i = 0; i < log.size(); ++i)
    if (log[i].kind == LogEntry::Forward) end_of_forward = i + 1;
  const auto cut = log.begin() + static_cast<std::ptrdiff_t>(end_of_forward);
  return backward ? std::vector<LogEntry>(cut, log.end()) : std::vector<LogEntry>(log.begin(), cut);
}

TEST(Order, GathersStayWithinThePrefetchWindow) {
  for (int k : {0, 1, 2}) {
    const TrainConfig c = config_of(k, true);
    const std::vector<RankResult> got = run(c, 2, 2);
    const std::vector<LogEntry>& log = got[0].log;
    expect_window(pass(log, false), LogEntry::Forward, {0, 1, 2, 3}, k, "forward");
    expect_window(pass(log, true), LogEntry::Backward, {3, 2, 1, 0}, k, "backward");
  }
}

TEST(Order, EachUnitIsReleasedBeforeTheNextComputes) {
  const TrainConfig c = config_of(1, true);
  const std::vector<RankResult> got = run(c, 2, 2);
  const std::vector<LogEntry>& log = got[0].log;
  int computing = -1;
  for (const LogEntry& e : log) {
    if (e.kind == LogEntry::Forward || e.kind == LogEntry::Backward) {
      ASSERT_EQ(computing, -1) << "unit " << e.unit << " launched before unit " << computing
                               << "'s full weights were released";
      computing = e.unit;
    }
    if (e.kind == LogEntry::Release && e.unit == computing) computing = -1;
  }
  EXPECT_EQ(computing, -1);
  // In forward (reshard after forward) a unit's launch is the last use of its full weights: the
  // release comes next, before the gathers of the next unit's window.
  for (int k : {1, 2}) {
    const TrainConfig ck = config_of(k, true);
    const std::vector<LogEntry> fwd = run(ck, 2, 2)[0].log;  // forward's entries: unit by unit
    for (std::size_t i = 0; i < fwd.size(); ++i) {
      if (fwd[i].kind != LogEntry::Forward) continue;
      ASSERT_TRUE(i + 1 < fwd.size() && fwd[i + 1].kind == LogEntry::Release &&
                  fwd[i + 1].unit == fwd[i].unit)
          << "prefetch " << k << ": unit " << fwd[i].unit << "'s full weights must be released "
          << "as soon as its forward is enqueued, before anything else (the next gathers)";
    }
  }
}

// ---- simulated time ----------------------------------------------------------------------------

TEST(SimulatedTime, NoPrefetchIsTheSumOfItsParts) {
  const TrainConfig c = config_of(0, true);
  for (int p : {2, 4}) {
    const std::vector<RankResult> got = run(c, p, 2);
    EXPECT_TRUE(time_near(got[0].measure.step_s, expected_step_no_prefetch(c, p, {}))) << "p=" << p;
  }
}

TEST(SimulatedTime, PrefetchOverlapsGathersWithCompute) {
  for (int k : {1, 2}) {
    const TrainConfig c = config_of(k, true);
    const std::vector<RankResult> got = run(c, 4, 2);
    const double want = expected_step(c, 4, {});
    EXPECT_TRUE(time_near(got[0].measure.step_s, want)) << "prefetch " << k;
    EXPECT_LT(want, expected_step_no_prefetch(config_of(0, true), 4, {}));
  }
}

// ---- bf16 communication ------------------------------------------------------------------------

TrainConfig bf16_config(int prefetch, bool reshard) {
  TrainConfig c = config_of(prefetch, reshard);
  c.fsdp.bf16_comm = true;
  return c;
}

// The reference rounds to bf16 at the points the contract names and nowhere else, with the same
// kernels and the threads backend's order of the reduction: the same arithmetic, so only float32
// rounding separates them (weights_near's tolerance), for dp 1-4, units not divisible by dp.
TEST(Bf16, ValuesEqualTheReferenceRoundedAtTheSamePoints) {
  const int steps = 3;
  for (auto [p, k, reshard] : {std::tuple{1, 0, true}, std::tuple{2, 0, true},
                               std::tuple{3, 1, false}, std::tuple{4, 1, true}}) {
    const TrainConfig c = bf16_config(k, reshard);
    const datasets::Split data = mlp::make_data(c.model);
    const std::vector<std::vector<float>> want = reference_weights_bf16(c, data, steps, p);
    const std::vector<RankResult> got = run(c, p, steps);
    for (int r = 0; r < p; ++r) {
      EXPECT_TRUE(weights_near(got[static_cast<std::size_t>(r)].weights, want,
                               c.fsdp.adam.learning_rate, steps))
          << "bf16, dp " << p << ", rank " << r << ", prefetch " << k << ", reshard " << reshard;
    }
  }
}

// Against fp32 training the bound is loose (README: bf16 communication): every weight within
// steps * learning_rate / 4 of single-process fp32 Adam, and not equal to it everywhere (the
// rounding happened). A gradient that never reaches the fp32 shard, or weights gathered stale,
// move weights by about learning_rate per step.
TEST(Bf16, ValuesNearFp32Training) {
  const int steps = 3;
  for (int p : {2, 4}) {
    const TrainConfig c = bf16_config(0, true);
    const datasets::Split data = mlp::make_data(c.model);
    const std::vector<std::vector<float>> fp32 = reference_weights(c, data, steps);
    const std::vector<RankResult> got = run(c, p, steps);
    const double bound = steps * c.fsdp.adam.learning_rate / 4.0;
    double most = 0;
    for (std::size_t u = 0; u < fp32.size(); ++u) {
      ASSERT_EQ(got[0].weights[u].size(), fp32[u].size());
      for (std::size_t i = 0; i < fp32[u].size(); ++i) {
        const double d = std::abs(static_cast<double>(got[0].weights[u][i]) - fp32[u][i]);
        most = std::max(most, d);
        ASSERT_LE(d, bound) << "dp " << p << ", unit " << u << " weight " << i << ": "
                            << got[0].weights[u][i] << ", fp32 training " << fp32[u][i];
      }
    }
    EXPECT_GT(most, 0.0) << "dp " << p << ": bf16 training equals fp32 training bit for bit";
  }
}

// Half of fp32's bytes, exactly: every gather and reduce-scatter moves 2-byte elements.
TEST(Bf16, BytesAreHalfOfFp32) {
  for (bool reshard : {true, false}) {
    for (int p : {2, 3, 4}) {
      const TrainConfig c = bf16_config(1, reshard);
      TrainConfig fp32 = c;
      fp32.fsdp.bf16_comm = false;
      const std::vector<RankResult> got = run(c, p, 2);
      for (int r = 0; r < p; ++r) {
        const StepMeasure& m = got[static_cast<std::size_t>(r)].measure;
        EXPECT_EQ(2 * m.bytes_sent, expected_bytes(fp32, p))
            << "p=" << p << " rank " << r << " reshard " << reshard;
        EXPECT_EQ(m.collectives,
                  static_cast<std::uint64_t>((gathers_per_unit(c) + 1) * c.model.n_layers))
            << "calls to built-in collectives, p=" << p << " rank " << r;
      }
    }
  }
}

// The meter counts the bf16 buffers at 2 bytes an element: the full buffers of the window and the
// shard-sized bf16 buffer each holds with it.
TEST(Bf16, PeakIsTheShardsPlusTheWindowAtTwoBytes) {
  for (auto [k, reshard, p] :
       {std::tuple{0, true, 4}, std::tuple{1, true, 3}, std::tuple{0, false, 2}}) {
    const TrainConfig c = bf16_config(k, reshard);
    const std::vector<RankResult> got = run(c, p, 2);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(got[static_cast<std::size_t>(r)].measure.peak, expected_peak(c, p))
          << "bf16, prefetch " << k << ", reshard " << reshard << ", p " << p << ", rank " << r;
    }
  }
}

// The same two-stream schedule, each gather and reduce-scatter with 2 c_u bytes per message.
TEST(Bf16, StepTimeIsTheScheduleWithHalfTheBytes) {
  for (int k : {0, 1}) {
    const TrainConfig c = bf16_config(k, true);
    for (int p : {2, 4}) {
      const std::vector<RankResult> got = run(c, p, 2);
      EXPECT_TRUE(time_near(got[0].measure.step_s, expected_step(c, p, {})))
          << "bf16, prefetch " << k << ", p " << p;
    }
  }
  EXPECT_TRUE(time_near(expected_step(bf16_config(0, true), 2, {}),
                        expected_step_no_prefetch(bf16_config(0, true), 2, {})));
}

}  // namespace
