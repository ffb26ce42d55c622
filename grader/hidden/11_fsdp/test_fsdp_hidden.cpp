// Hidden tests of 11_fsdp: other world sizes (5, 6, 8), a unit smaller than dp (padding only on
// some ranks), more steps, wider windows, the window with weights kept, other networks, against the
// same closed forms and single-process Adam.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "distlab_trace.hpp"
#include "fsdp_harness.hpp"

namespace {

using namespace fsdptest;

/// Units 5 -> 3 -> 2 -> 1 (the 2 x 1 unit has fewer weights than ranks): 15, 6, 2 weights.
mlp::Config tiny_model() {
  mlp::Config c;
  c.n_layers = 3;
  c.dim_in = 5;
  c.dim_hidden = 3;
  c.n_classes = 2;
  c.train_size = 240;
  c.test_size = 24;
  c.batch_size = 40;  // a multiple of 2, 4, 5, 8
  c.seed = 11;
  return c;
}

void expect_values(const TrainConfig& c, int p, int steps) {
  const datasets::Split data = mlp::make_data(c.model);
  const auto want = reference_weights(c, data, steps);
  const auto got = run(c, p, steps);
  for (int r = 0; r < p; ++r)
    EXPECT_TRUE(weights_near(got[static_cast<std::size_t>(r)].weights, want,
                             c.fsdp.adam.learning_rate, steps))
        << "dp " << p << " rank " << r;
}

TEST(HiddenShard, UnitSmallerThanDp) {
  const std::vector<float> full = {4.0f, 5.0f};
  for (int dp : {3, 5, 8}) {
    for (int r = 0; r < dp; ++r) {
      std::vector<float> shard(1, std::numeric_limits<float>::quiet_NaN());
      shard_unit(full, dp, r, shard);
      EXPECT_EQ(shard[0], r < 2 ? full[static_cast<std::size_t>(r)] : 0.0f)
          << "dp " << dp << " rank " << r;
    }
  }
}

TEST(HiddenShard, EmptyUnitAndWrongSizes) {
  std::vector<float> none;
  shard_unit(std::vector<float>{}, 3, 1, none);  // 0 over 3 ranks: empty shards
  std::vector<float> big(4);
  EXPECT_THROW(shard_unit(std::vector<float>(6, 1.0f), 2, 0, big), std::invalid_argument);
}

TEST(HiddenShard, AnEmptyUnitStillChecksTheShardSize) {
  // fsdp.hpp: "shard.size() must be c (else std::invalid_argument)", also for an empty unit,
  // where c = padded(0, dp) / dp = 0: a shard of 1 or 3 elements is refused on every rank, the
  // empty shard is accepted. adam_update's "w, g, m, v of equal sizes" likewise holds when some
  // of them are empty: one span of 1 or 3 elements among empty ones, or one empty span among
  // spans of 1 or 3 elements, is refused and changes nothing.
  const std::vector<float> empty_unit;
  for (int dp : {1, 2, 3}) {
    ASSERT_EQ(padded(0, dp), 0u) << "test bug";
    for (int r = 0; r < dp; ++r) {
      std::vector<float> none;
      EXPECT_NO_THROW(shard_unit(empty_unit, dp, r, none))
          << "dp " << dp << " rank " << r << ": an empty unit's shard has c = 0 elements";
      for (std::size_t size : {1u, 3u}) {
        std::vector<float> wrong(size, 7.0f);
        EXPECT_THROW(shard_unit(empty_unit, dp, r, wrong), std::invalid_argument)
            << "dp " << dp << " rank " << r << ": a shard of " << size
            << " elements for an empty unit (c = 0) must be refused";
      }
    }
  }
  const char* names[] = {"w", "g", "m", "v"};
  for (std::size_t n : {1u, 3u}) {
    for (std::size_t odd = 0; odd < 4; ++odd) {
      for (bool odd_is_empty : {false, true}) {
        std::vector<std::vector<float>> spans(4);
        for (std::size_t s = 0; s < 4; ++s) {
          const std::size_t size = (s == odd) != odd_is_empty ? n : 0;
          for (std::size_t i = 0; i < size; ++i)
            spans[s].push_back(0.5f + 0.25f * static_cast<float>(s) + static_cast<float>(i));
        }
        const auto before = spans;
        EXPECT_THROW(adam_update(spans[0], spans[1], spans[2], spans[3], 1, AdamConfig{}),
                     std::invalid_argument)
            << names[odd] << (odd_is_empty ? " empty, the others " : " of ") << n
            << (odd_is_empty ? " elements" : " elements, the others empty");
        for (std::size_t s = 0; s < 4; ++s)
          EXPECT_EQ(spans[s], before[s]) << names[s] << " changed by a refused call";
      }
    }
  }
  std::vector<float> w, g, m, v;
  EXPECT_NO_THROW(adam_update(w, g, m, v, 1, AdamConfig{})) << "four empty spans are equal sizes";
}

TEST(HiddenAdam, MomentsAfterChangingGradients) {
  AdamConfig a;
  a.learning_rate = 0.05f;
  a.beta1 = 0.8f;
  a.beta2 = 0.9f;
  a.eps = 1e-3f;
  const std::vector<float> g1 = {1.0f, -0.5f}, g2 = {-2.0f, 0.25f};
  std::vector<float> w = {0.3f, -0.1f}, m(2, 0.0f), v(2, 0.0f);
  adam_update(w, g1, m, v, 1, a);
  adam_update(w, g2, m, v, 2, a);
  for (std::size_t i = 0; i < 2; ++i) {
    double wd = (i == 0 ? 0.3 : -0.1), md = 0, vd = 0;
    for (int t = 1; t <= 2; ++t) {
      const double g = t == 1 ? g1[i] : g2[i];
      md = a.beta1 * md + (1 - a.beta1) * g;
      vd = a.beta2 * vd + (1 - a.beta2) * g * g;
      wd -= a.learning_rate * (md / (1 - std::pow(a.beta1, t))) /
            (std::sqrt(vd / (1 - std::pow(a.beta2, t))) + a.eps);
    }
    EXPECT_NEAR(w[i], wd, 1e-5) << "element " << i;
    EXPECT_NEAR(m[i], md, 1e-6) << "element " << i;
    EXPECT_NEAR(v[i], vd, 1e-6) << "element " << i;
  }
}

TEST(HiddenAdam, AZeroGradientStillDecaysTheMomentsAndMoves) {
  // Element-wise, every element follows the rule whatever its gradient: a real weight whose
  // gradient is exactly 0 in a step (a dead ReLU unit) after non-zero steps still decays m and v
  // and still moves by learning_rate m_hat / (sqrt(v_hat) + eps).
  AdamConfig a;
  a.learning_rate = 0.05f;
  a.beta1 = 0.8f;
  a.beta2 = 0.9f;
  a.eps = 1e-3f;
  const std::vector<std::vector<float>> grads = {
      {1.0f, -0.5f, 0.0f, 2.0f}, {0.0f, 0.25f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, -1.0f}};
  const std::vector<float> w0 = {0.3f, -0.1f, 0.7f, 0.0f};
  std::vector<float> w = w0, m(4, 0.0f), v(4, 0.0f);
  for (std::size_t t = 0; t < grads.size(); ++t) {
    adam_update(w, grads[t], m, v, static_cast<std::int64_t>(t + 1), a);
    for (std::size_t i = 0; i < w.size(); ++i) {
      double wd = w0[i], md = 0, vd = 0;
      for (std::size_t k = 0; k <= t; ++k) {
        const double g = grads[k][i];
        const auto step = static_cast<double>(k + 1);
        md = a.beta1 * md + (1 - a.beta1) * g;
        vd = a.beta2 * vd + (1 - a.beta2) * g * g;
        wd -= a.learning_rate * (md / (1 - std::pow(a.beta1, step))) /
              (std::sqrt(vd / (1 - std::pow(a.beta2, step))) + a.eps);
      }
      EXPECT_NEAR(w[i], wd, 1e-5) << "step " << t + 1 << ", element " << i << ", gradient "
                                  << grads[t][i];
      EXPECT_NEAR(m[i], md, 1e-6) << "step " << t + 1 << ", element " << i;
      EXPECT_NEAR(v[i], vd, 1e-6) << "step " << t + 1 << ", element " << i;
    }
  }
}

TEST(HiddenAdam, ARefusedCallChangesNothing) {
  // fsdp.hpp: unequal sizes throw std::invalid_argument "before anything is written": w, m and v
  // keep every element, whichever span is shorter or longer.
  for (std::size_t odd = 0; odd < 4; ++odd) {
    for (std::size_t n : {3u, 5u}) {
      std::vector<std::vector<float>> spans(4);
      for (std::size_t s = 0; s < 4; ++s) {
        const std::size_t size = s == odd ? n : 4;
        for (std::size_t i = 0; i < size; ++i)
          spans[s].push_back(0.25f * static_cast<float>(s + 1) + 0.5f * static_cast<float>(i));
      }
      const auto before = spans;
      EXPECT_THROW(adam_update(spans[0], spans[1], spans[2], spans[3], 2, AdamConfig{}),
                   std::invalid_argument)
          << "span " << odd << " (w, g, m, v) of " << n << " elements, the others 4";
      const char* names[] = {"w", "g", "m", "v"};
      for (std::size_t s = 0; s < 4; ++s) {
        EXPECT_EQ(spans[s], before[s]) << names[s] << " changed by a refused call (span " << odd
                                       << " of " << n << " elements, the others 4)";
      }
    }
  }
}

TEST(HiddenValues, OtherWorldSizesAndATinyUnit) {
  for (int p : {5, 8}) expect_values(config_of(1, true, tiny_model()), p, 2);
  expect_values(config_of(0, true), 6, 2);
}

TEST(HiddenValues, MoreStepsKeepWeightsWithPrefetch) {
  expect_values(config_of(2, false), 4, 5);
  expect_values(config_of(3, true), 3, 5);
}

TEST(HiddenTraffic, OtherWorldSizesAndWindows) {
  for (int p : {2, 5}) {
    for (int k : {0, 3}) {
      for (bool reshard : {true, false}) {
        const TrainConfig c = config_of(k, reshard, tiny_model());
        const auto got = run(c, p, 2);
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(got[static_cast<std::size_t>(r)].measure.bytes_sent, expected_bytes(c, p))
              << "p=" << p << " prefetch " << k << " reshard " << reshard << " rank " << r;
          EXPECT_EQ(got[static_cast<std::size_t>(r)].measure.collectives,
                    static_cast<std::uint64_t>((gathers_per_unit(c) + 1) * c.model.n_layers));
        }
      }
    }
  }
}

TEST(HiddenTraffic, OneRankStillMakesEveryCollectiveInBothPrecisions) {
  // fsdp.hpp: "Traffic per unit and step: the gathers (one per pass that gathers it) and one
  // reduce-scatter", with bf16_comm too ("the same passes, window, events and order, in bf16"):
  // on one rank the collectives move no byte but are still made.
  for (bool bf16 : {false, true}) {
    for (bool reshard : {true, false}) {
      TrainConfig c = config_of(1, reshard, tiny_model());
      c.fsdp.bf16_comm = bf16;
      const auto got = run(c, 1, 2);
      EXPECT_EQ(got[0].measure.collectives,
                static_cast<std::uint64_t>((gathers_per_unit(c) + 1) * c.model.n_layers))
          << (bf16 ? "bf16" : "fp32") << ", reshard " << reshard
          << ", one rank: every unit's gathers and its reduce-scatter, each step";
    }
  }
}

TEST(HiddenMemory, WiderWindowsAndKeptWeightsWithPrefetch) {
  for (int k : {2, 3, 5}) {
    const TrainConfig c = config_of(k, true);
    const auto got = run(c, 4, 2);
    EXPECT_EQ(got[1].measure.peak, expected_peak(c, 4)) << "prefetch " << k;
  }
  const TrainConfig keep = config_of(2, false);
  const auto got = run(keep, 2, 2);
  EXPECT_EQ(got[0].measure.peak, expected_peak(keep, 2));
}

TEST(HiddenMemory, SingleRankHoldsOneUnitAtATimeWithoutPrefetch) {
  const TrainConfig c = config_of(0, true);
  const auto got = run(c, 1, 2);
  EXPECT_EQ(got[0].measure.peak, expected_peak(c, 1));
}

TEST(HiddenSimulatedTime, OtherNetworksAndWindows) {
  dist::NetworkModel slow;
  slow.latency_s = 20e-6;
  slow.bandwidth_Bps = 1e8;
  slow.reduce_Bps = 5e8;
  for (int k : {0, 1, 3}) {
    for (bool reshard : {true, false}) {
      const TrainConfig c = config_of(k, reshard);
      const auto got = run(c, 3, 2, slow);
      EXPECT_TRUE(time_near(got[2].measure.step_s, expected_step(c, 3, slow)))
          << "prefetch " << k << " reshard " << reshard;
    }
  }
  const TrainConfig c = config_of(0, true);
  const auto got = run(c, 5, 2, slow);
  EXPECT_TRUE(time_near(got[0].measure.step_s, expected_step_no_prefetch(c, 5, slow)));
}

// bf16 communication on world sizes the public tests leave out (5 and 8 on the tiny model, whose
// 2-weight unit is padding on most ranks; 6 on the small one), wider windows, kept weights, a
// network with a reduction cost.
TEST(HiddenBf16, ValuesBytesMemoryAndTimeOnOtherWorldSizes) {
  dist::NetworkModel slow;
  slow.latency_s = 20e-6;
  slow.bandwidth_Bps = 1e8;
  slow.reduce_Bps = 5e8;
  const int steps = 3;
  for (auto [p, k, reshard] :
       {std::tuple{5, 2, true}, std::tuple{6, 0, false}, std::tuple{8, 3, true}}) {
    TrainConfig c = config_of(k, reshard, p == 6 ? small_model() : tiny_model());
    c.fsdp.bf16_comm = true;
    const datasets::Split data = mlp::make_data(c.model);
    const std::vector<std::vector<float>> want = reference_weights_bf16(c, data, steps, p);
    const auto got = run(c, p, steps, slow);
    TrainConfig fp32 = c;
    fp32.fsdp.bf16_comm = false;
    for (int r = 0; r < p; ++r) {
      const RankResult& g = got[static_cast<std::size_t>(r)];
      const std::string what = "bf16, p " + std::to_string(p) + ", prefetch " + std::to_string(k) +
                               ", reshard " + std::to_string(reshard) + ", rank " +
                               std::to_string(r);
      EXPECT_TRUE(weights_near(g.weights, want, c.fsdp.adam.learning_rate, steps)) << what;
      EXPECT_EQ(2 * g.measure.bytes_sent, expected_bytes(fp32, p)) << what;
      EXPECT_EQ(g.measure.peak, expected_peak(c, p)) << what;
      EXPECT_TRUE(time_near(g.measure.step_s, expected_step(c, p, slow))) << what;
    }
  }
}

using distlab::testing::trace_spans;
using distlab::testing::TraceSpan;

TEST(HiddenOrder, BackwardReleasesEachUnitBeforeTheNextGathers) {
  // fsdp.hpp: each full buffer is released as soon as the host has enqueued the last operation
  // that uses it, and with reshard_after_forward at most prefetch + 1 units' full weights are held
  // at once. A unit's forward or backward is the last use of its full weights: the release comes
  // next in the order log, in backward as in forward, before the gathers of the next window.
  for (bool bf16 : {false, true}) {
    for (int k : {0, 1, 2}) {
      TrainConfig c = config_of(k, true);
      c.fsdp.bf16_comm = bf16;
      const int units = c.model.n_layers;
      const std::string what =
          std::string(bf16 ? "bf16" : "fp32") + ", prefetch " + std::to_string(k);
      const std::vector<LogEntry> log = run(c, 2, 2)[0].log;
      int held = 0, most = 0;
      for (std::size_t i = 0; i < log.size(); ++i) {
        const LogEntry& e = log[i];
        if (e.kind == LogEntry::Gather) most = std::max(most, ++held);
        if (e.kind == LogEntry::Release) --held;
        if (e.kind != LogEntry::Forward && e.kind != LogEntry::Backward) continue;
        const char* pass = e.kind == LogEntry::Forward ? "forward" : "backward";
        ASSERT_TRUE(i + 1 < log.size() && log[i + 1].kind == LogEntry::Release &&
                    log[i + 1].unit == e.unit)
            << what << ": unit " << e.unit << "'s full weights must be released as soon as its "
            << pass << " is enqueued, before anything else (the next gathers)";
      }
      EXPECT_EQ(held, 0) << what << ": every gathered unit is released within the step";
      EXPECT_EQ(most, std::min(k + 1, units))
          << what << ": full weights of at most prefetch + 1 units are held at once";
    }
  }
}

TEST(HiddenOrder, EachPassGathersOnlyItsOwnUnits) {
  // fsdp.hpp: "backward's window does not reach into forward's and the reverse". forward() and
  // backward() are called one at a time (the Trainer's parts, after a first whole step): when
  // forward() returns it has gathered each unit once, 0 .. L-1, and holds no full weights
  // (reshard_after_forward); backward() gathers each unit once more, L-1 .. 0, and holds none when
  // it returns. A pass that gathers the next pass's first unit ahead shows here.
  for (bool bf16 : {false, true}) {
    for (int k : {1, 2}) {
      TrainConfig c = config_of(k, true);
      c.fsdp.bf16_comm = bf16;
      const std::string what =
          std::string(bf16 ? "bf16" : "fp32") + ", prefetch " + std::to_string(k);
      const datasets::Split data = mlp::make_data(c.model);
      distlab::testing::run_ranks(threads_options(2), [&] {
        Trainer trainer(c, data);
        (void)trainer.step(0);  // the batch is set; every buffer released
        UnitBuffers& buffers = trainer.buffers();
        const int units = trainer.model().num_units();
        Fsdp fsdp(trainer.model(), trainer.shards(), buffers, trainer.compute(), trainer.comm(),
                  c.fsdp);
        const auto gathers = [&](bool reverse) {
          std::vector<int> got, want;
          for (const LogEntry& e : buffers.log())
            if (e.kind == LogEntry::Gather) got.push_back(e.unit);
          for (int u = 0; u < units; ++u) want.push_back(reverse ? units - 1 - u : u);
          EXPECT_EQ(got, want) << what << ", rank " << dist::rank() << ": the "
                               << (reverse ? "backward" : "forward")
                               << " pass gathers each unit once, in its own order, and no unit "
                                  "of the next pass";
          for (int u = 0; u < units; ++u)
            EXPECT_FALSE(buffers.holds_weights(u))
                << what << ": unit " << u << "'s full weights are still held when "
                << (reverse ? "backward" : "forward") << "() returns";
        };
        buffers.log().clear();
        fsdp.forward();
        gathers(false);
        buffers.log().clear();
        (void)trainer.model().launch_loss(trainer.compute());
        fsdp.backward();
        gathers(true);
        fsdp.step();
        dist::device::device_synchronize();
      });
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(HiddenOrder, ForwardGathersStartAfterTheUnitLaunchedLast) {
  // fsdp.hpp: a gather starts only after the kernel of the unit launched last before it was issued
  // has ended (in forward, the previous unit's forward); only forward's first prefetch + 1 gathers
  // wait for nothing. Fast links and slow kernels, one step: the comm stream is free early, so a
  // gather that waits for the wrong event (or none) starts too soon.
  dist::NetworkModel fast;
  fast.latency_s = 1e-8;
  fast.bandwidth_Bps = 1e12;
  for (int k : {1, 2}) {
    TrainConfig c = config_of(k, true);
    c.flops_per_s = 1e8;
    const std::string path =
        ::testing::TempDir() + "distlab_11_gathers_" + std::to_string(k) + ".json";
    run(c, 2, 1, fast, path);
    const int units = c.model.n_layers;
    std::vector<TraceSpan> forwards, gathers;
    for (const TraceSpan& s : trace_spans(path, "rank 0 stream compute"))
      if (s.name.find("'forward ") != std::string::npos) forwards.push_back(s);
    for (const TraceSpan& s : trace_spans(path, "rank 0 stream comm"))
      if (s.name.find("all_gather") != std::string::npos) gathers.push_back(s);
    ASSERT_GE(forwards.size(), static_cast<std::size_t>(units)) << "prefetch " << k;
    ASSERT_GE(gathers.size(), static_cast<std::size_t>(units)) << "prefetch " << k;
    for (int u = 0; u < units; ++u) {
      const TraceSpan& g = gathers[static_cast<std::size_t>(u)];
      if (u <= k) {
        EXPECT_LT(g.t0, forwards[0].t1)
            << "prefetch " << k << ": forward's gather of unit " << u << " waits for nothing";
      } else {
        const TraceSpan& f = forwards[static_cast<std::size_t>(u - k - 1)];
        EXPECT_GE(g.t0, f.t1 - 1e-12)
            << "prefetch " << k << ": the gather of unit " << u << " (issued when unit " << u - k
            << " was launched) must start after the forward of unit " << u - k - 1
            << ", launched last before it was issued, has ended (" << f.t1 << " s); it started at "
            << g.t0 << " s";
      }
    }
  }
}

// One traced step of c on 2 ranks with fast links (1e-8 s, 1e12 B/s): rank 0's forward and
// backward kernels on compute, and its comm spans whose name holds `comm_name`.
struct StepSpans {
  std::vector<TraceSpan> forwards, backwards, comm;
};
StepSpans fast_link_step(const TrainConfig& c, const std::string& file,
                         const std::string& comm_name) {
  dist::NetworkModel fast;
  fast.latency_s = 1e-8;
  fast.bandwidth_Bps = 1e12;
  const std::string path = ::testing::TempDir() + file;
  run(c, 2, 1, fast, path);
  StepSpans out;
  for (const TraceSpan& s : trace_spans(path, "rank 0 stream compute")) {
    if (s.name.find("'forward ") != std::string::npos) out.forwards.push_back(s);
    if (s.name.find("'backward ") != std::string::npos) out.backwards.push_back(s);
  }
  for (const TraceSpan& s : trace_spans(path, "rank 0 stream comm"))
    if (s.name.find(comm_name) != std::string::npos) out.comm.push_back(s);
  return out;
}

TEST(HiddenOrder, BackwardGathersStartAfterTheUnitLaunchedLast) {
  // fsdp.hpp: in backward, a gather starts only after the backward of the unit launched last
  // before it was issued has ended, and backward's first prefetch + 1 gathers after the last
  // unit's forward. Fast links and slow kernels, one step: the comm stream is free early, so a
  // gather that waits for nothing starts too soon.
  for (int k : {1, 2}) {
    TrainConfig c = config_of(k, true);
    c.flops_per_s = 1e8;
    const auto [forwards, backwards, gathers] = fast_link_step(
        c, "distlab_11_backward_gathers_" + std::to_string(k) + ".json", "all_gather");
    const int units = c.model.n_layers;
    const auto n = static_cast<std::size_t>(units);
    ASSERT_EQ(forwards.size(), n) << "prefetch " << k;
    ASSERT_EQ(backwards.size(), n) << "prefetch " << k;
    ASSERT_EQ(gathers.size(), 2 * n) << "prefetch " << k << ": one gather per unit and pass";
    for (int j = 0; j < units; ++j) {  // backward's j-th gather: unit units - 1 - j
      const TraceSpan& g = gathers[n + static_cast<std::size_t>(j)];
      const TraceSpan& after =
          j <= k ? forwards[n - 1] : backwards[static_cast<std::size_t>(j - k - 1)];
      EXPECT_GE(g.t0, after.t1 - 1e-12)
          << "prefetch " << k << ": backward's gather of unit " << units - 1 - j
          << " must start after the " << (j <= k ? "forward" : "backward") << " of unit "
          << (j <= k ? units - 1 : units - j + k) << ", launched last before it was issued, has "
          << "ended (" << after.t1 << " s); it started at " << g.t0 << " s";
    }
  }
}

TEST(HiddenOrder, Bf16ShardCopyWaitsLikeItsGather) {
  // fsdp.hpp: in bf16 the memory a gather fills includes the bf16 copy of the shard it sends,
  // written only after the kernel of the unit launched last before the gather was issued has ended
  // (the same kernels as the gathers' in both passes). Fast links and slow kernels, one step: the
  // comm stream is free early, so a copy made before the wait shows in the trace as too early.
  for (int k : {1, 2}) {
    TrainConfig c = config_of(k, true);
    c.flops_per_s = 1e8;
    c.fsdp.bf16_comm = true;
    const auto [forwards, backwards, copies] =
        fast_link_step(c, "distlab_11_bf16_copies_" + std::to_string(k) + ".json", "to bf16");
    const int units = c.model.n_layers;
    const auto n = static_cast<std::size_t>(units);
    ASSERT_EQ(forwards.size(), n) << "prefetch " << k;
    ASSERT_EQ(backwards.size(), n) << "prefetch " << k;
    ASSERT_EQ(copies.size(), 2 * n) << "prefetch " << k << ": one bf16 copy per gather";
    for (int j = 0; j < 2 * units; ++j) {  // forward's gathers 0 .. L-1, then backward's
      const bool fwd = j < units;
      const int b = j - units;      // position in backward's order
      if (fwd && j <= k) continue;  // forward's first prefetch + 1 gathers wait for nothing
      const TraceSpan& after = fwd      ? forwards[static_cast<std::size_t>(j - k - 1)]
                               : b <= k ? forwards[n - 1]
                                        : backwards[static_cast<std::size_t>(b - k - 1)];
      const TraceSpan& copy = copies[static_cast<std::size_t>(j)];
      EXPECT_GE(copy.t0, after.t1 - 1e-12)
          << "prefetch " << k << ": the bf16 shard copy of " << (fwd ? "forward" : "backward")
          << "'s gather of unit " << (fwd ? j : units - 1 - b)
          << " must be written after the kernel launched last before the gather was issued has "
          << "ended (" << after.t1 << " s); it was written at " << copy.t0 << " s";
    }
  }
}

}  // namespace
