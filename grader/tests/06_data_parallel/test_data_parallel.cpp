// 06_data_parallel: N-rank training equals single-process full-batch training; the closeness
// check; MyDP's broadcast, buckets and overlap on the simulated clock.
#include <gtest/gtest.h>

#include <limits>

#include "distlab/todo.hpp"
#include "dp_harness.hpp"

using dptest::Mode;

TEST(Sharding, RankTakesBatchesCongruentToItsRank) {
  for (int world = 1; world <= 5; ++world) {
    std::vector<int> seen(static_cast<std::size_t>(3 * world), 0);
    for (int step = 0; step < 3; ++step) {
      for (int r = 0; r < world; ++r) {
        const std::int64_t i = dp::global_batch_index(step, r, world);
        ASSERT_GE(i, 0);
        ASSERT_LT(i, 3 * world) << "step " << step << " rank " << r << " of " << world;
        EXPECT_EQ(i % world, r) << "rank r takes the batches i with i % world_size == r";
        EXPECT_EQ(i / world, step) << "step s covers batches [s*world, (s+1)*world)";
        ++seen[static_cast<std::size_t>(i)];
      }
    }
    for (int v : seen) EXPECT_EQ(v, 1) << "every batch exactly once";
  }
}

class EqualsSingleProcess : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(EqualsSingleProcess, ParametersAndLosses) {
  const auto [mode, world] = GetParam();
  const dptest::Trajectory want = dptest::single_process(world);
  const auto got = dptest::data_parallel(world, mode);
  for (int r = 0; r < world; ++r) {
    const std::string diff = dptest::compare(got[static_cast<std::size_t>(r)], want);
    EXPECT_TRUE(diff.empty()) << "rank " << r << " of " << world << " (" << dptest::name(mode)
                              << "): " << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(AllModes, EqualsSingleProcess,
                         ::testing::Combine(::testing::Values(Mode::Kit, Mode::Manual,
                                                              Mode::MyDPPerParameter,
                                                              Mode::MyDPOneBucket),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<Mode, int>>& p) {
                           return std::string(dptest::name(std::get<0>(p.param))) + "_world" +
                                  std::to_string(std::get<1>(p.param));
                         });

TEST(EqualsSingleProcess, TheOracleRejectsSummedGradientsAndMissingBroadcast) {
  // The comparison above is strict enough to catch the two classic mistakes.
  const dptest::Trajectory want = dptest::single_process(3);
  const auto summed = dptest::data_parallel(3, Mode::BrokenSum);
  EXPECT_FALSE(dptest::compare(summed[0], want).empty()) << "summed gradients must not pass";
  const auto unbroadcast = dptest::data_parallel(3, Mode::BrokenNoBroadcast);
  EXPECT_FALSE(dptest::compare(unbroadcast[1], want).empty())
      << "replicas that never synced must not pass";
}

TEST(CheckParameterCloseness, TrueForEqualReplicasFalseWhenOneRankIsPerturbed) {
  for (int world : {1, 2, 3, 4}) {
    std::mutex mu;
    std::vector<int> equal(static_cast<std::size_t>(world), -1), perturbed(equal), tiny(equal);
    distlab::testing::run_ranks(world, [&] {
      const int r = dist::rank();
      mlp::MLP model(dptest::small_config(), 11);  // same seed: identical replicas
      const bool a = dp::check_parameter_closeness(model, 1e-5f);
      auto params = model.parameters();
      if (r == world - 1 && world > 1) params[1]->value(2, 3) *= 1.0f + 1e-7f;  // below rtol
      const bool c = dp::check_parameter_closeness(model, 1e-5f);
      if (r == world - 1 && world > 1) params[1]->value(2, 3) += 0.01f;  // above rtol
      const bool b = dp::check_parameter_closeness(model, 1e-5f);
      std::lock_guard<std::mutex> g(mu);
      equal[static_cast<std::size_t>(r)] = a;
      tiny[static_cast<std::size_t>(r)] = c;
      perturbed[static_cast<std::size_t>(r)] = b;
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(equal[static_cast<std::size_t>(r)], 1)
          << "rank " << r << " of " << world << ": identical replicas";
      EXPECT_EQ(tiny[static_cast<std::size_t>(r)], 1)
          << "rank " << r << " of " << world << ": a difference below rtol";
      EXPECT_EQ(perturbed[static_cast<std::size_t>(r)], world > 1 ? 0 : 1)
          << "rank " << r << " of " << world
          << ": one rank perturbed; every rank must get the answer";
    }
  }
}

TEST(CheckParameterCloseness, TheToleranceIsRelativeToTheValues) {
  // The documented comparison is relative: |x_r - x_0| <= rtol * max(|x_r|, |x_0|). A large
  // weight may differ by more than rtol in absolute terms and still be close; a tiny one may
  // differ by less than rtol and not be.
  struct Case {
    float base, delta;
    bool close;
    const char* what;
  };
  const Case cases[] = {{1000.0f, 1e-3f, true, "1000 vs 1000.001 (relative difference 1e-6)"},
                        {1e-6f, 5e-7f, false, "1e-6 vs 1.5e-6 (relative difference 0.33)"}};
  for (const Case& c : cases) {
    std::mutex mu;
    std::vector<int> answers(2, -1);
    distlab::testing::run_ranks(2, [&] {
      mlp::MLP model(dptest::small_config(), 11);
      model.parameters()[0]->value(1, 2) = c.base + (dist::rank() == 1 ? c.delta : 0.0f);
      const bool ok = dp::check_parameter_closeness(model, 1e-5f);
      std::lock_guard<std::mutex> g(mu);
      answers[static_cast<std::size_t>(dist::rank())] = ok;
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(answers[static_cast<std::size_t>(r)], c.close ? 1 : 0)
          << "rank " << r << " of 2, rtol 1e-5, one weight " << c.what << ": expected "
          << (c.close ? "close" : "not close")
          << " (the tolerance is relative to the values compared, data_parallel.hpp)";
    }
  }
}

TEST(CheckParameterCloseness, ANaNIsNeverClose) {
  // |x_r - x_0| <= rtol * max(|x_r|, |x_0|) is false when either value is NaN: a replica that
  // diverged to NaN must not pass for an equal one, whichever rank holds the NaN.
  for (int world : {2, 3}) {
    for (int nan_rank = 0; nan_rank < world; ++nan_rank) {
      std::mutex mu;
      std::vector<int> answers(static_cast<std::size_t>(world), -1);
      distlab::testing::run_ranks(world, [&] {
        mlp::MLP model(dptest::small_config(), 11);
        if (dist::rank() == nan_rank)
          model.parameters()[0]->value(1, 2) = std::numeric_limits<float>::quiet_NaN();
        const bool ok = dp::check_parameter_closeness(model, 1e-3f);
        std::lock_guard<std::mutex> g(mu);
        answers[static_cast<std::size_t>(dist::rank())] = ok;
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(answers[static_cast<std::size_t>(r)], 0)
            << "rank " << r << " of " << world << ": rank " << nan_rank
            << " holds a NaN, yet the replicas "
            << "were reported close (every comparison with a NaN is false: which way round is your "
               "test?)";
      }
    }
  }
}

TEST(MyDP, ConstructorBroadcastsRankZerosWeights) {
  const mlp::Config c = dptest::small_config();
  distlab::testing::RankLog log;
  distlab::testing::run_ranks(3, [&] {
    mlp::MLP model(c, 100 + static_cast<std::uint64_t>(dist::rank()));
    dp::MyDP wrapped(model);
    const mlp::MLP rank0(c, 100);
    const auto got = model.parameters();
    const auto want = rank0.parameters();
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i]->value != want[i]->value)
        log.fail(dist::rank(), "layer " + std::to_string(i) + " differs from rank 0's");
    }
  });
  for (const auto& f : log.failures()) ADD_FAILURE() << f;
}

TEST(MyDP, BucketsFollowTheCapLastLayerFirst) {
  mlp::Config c = dptest::small_config();
  c.n_layers = 4;  // sizes: 24*16, 16*16, 16*16, 16*5 floats
  const mlp::MLP probe(c, 1);
  const std::size_t last_two = (16 * 5 + 16 * 16) * sizeof(float);
  for (std::size_t cap : {std::size_t{0}, std::size_t{4}, last_two - 1, last_two,
                          last_two + 16 * 16 * 4, dp::kDefaultBucketCap}) {
    const auto want = dptest::expected_buckets(probe, cap);
    distlab::testing::RankLog log;
    distlab::testing::run_ranks(2, [&] {
      mlp::MLP model(c, 1);
      dp::MyDP wrapped(model, cap);
      if (wrapped.num_buckets() != static_cast<int>(want.size())) {
        log.fail(dist::rank(), "cap " + std::to_string(cap) + ": " +
                                   std::to_string(wrapped.num_buckets()) + " buckets, expected " +
                                   std::to_string(want.size()));
      } else if (wrapped.bucket_layout() != want) {
        log.fail(dist::rank(), "cap " + std::to_string(cap) +
                                   ": wrong parameters in the buckets (build them from the last "
                                   "parameter to the first)");
      }
    });
    for (const auto& f : log.failures()) ADD_FAILURE() << f;
  }
}

TEST(MyDP, FinishWithoutBackwardIsAnError) {
  distlab::testing::RankLog log;
  distlab::testing::run_ranks(2, [&] {
    mlp::MLP model(dptest::small_config(), 1);
    dp::MyDP wrapped(model);
    try {
      wrapped.finish_gradient_sync();
      log.fail(dist::rank(), "finish_gradient_sync before any backward must throw");
    } catch (const distlab::NotImplemented&) {
      throw;
    } catch (const std::logic_error&) {
    }
  });
  for (const auto& f : log.failures()) ADD_FAILURE() << f;
}

namespace {
/// Charges the modelled backward compute (dp::step_flops) to the simulated clock as backward
/// actually does it, observed from the model's own gradients rather than assumed from when the
/// hooks run: before backward every gradient is set to NaN; whenever any hook fires, each layer
/// whose gradient backward has written since (no longer NaN) is charged, last layer first. A
/// backward that fires its hooks as it goes is charged one layer per hook (as dp::ComputeModel
/// charges it); one that runs every hook only after the whole backward is charged all of it at
/// the first hook, so no communication a hook starts can look overlapped with the compute.
/// With `all_at_first_hook`, the whole backward is charged at the first hook whatever backward
/// does: the step as it would be if nothing overlapped the backward compute.
class ObservedBackwardCompute {
 public:
  ObservedBackwardCompute(mlp::MLP& model, int batch, double flops_per_s, bool all_at_first_hook)
      : params_(model.parameters()),
        flops_(dp::step_flops(model, batch)),
        rate_(flops_per_s),
        all_at_first_hook_(all_at_first_hook) {
    for (mlp::Parameter* p : params_) {
      handles_.push_back(p->add_hook([this](mlp::Parameter&) { charge_written(); }));
    }
  }
  ~ObservedBackwardCompute() {
    for (std::size_t i = 0; i < handles_.size(); ++i) params_[i]->remove_hook(handles_[i]);
  }
  ObservedBackwardCompute(const ObservedBackwardCompute&) = delete;
  ObservedBackwardCompute& operator=(const ObservedBackwardCompute&) = delete;

  /// Before the step: marks every gradient as not yet written.
  void start_step() {
    charged_.assign(params_.size(), false);
    for (mlp::Parameter* p : params_) p->grad.setConstant(std::numeric_limits<float>::quiet_NaN());
  }

 private:
  void charge_written() {
    for (std::size_t k = params_.size(); k-- > 0;) {
      if (!charged_[k] && (all_at_first_hook_ || !params_[k]->grad.hasNaN())) {
        charged_[k] = true;
        dist::sim_compute(flops_.backward[k] / rate_, "backward");
      }
    }
  }

  std::vector<mlp::Parameter*> params_;
  dp::StepFlops flops_;
  double rate_;
  bool all_at_first_hook_;
  std::vector<bool> charged_;
  std::vector<int> handles_;
};

/// Simulated seconds of backward and the gradient sync of one data-parallel step (rank 0, the
/// forward's compute left out: it cannot overlap the sync), the backward compute modelled at
/// `flops` per rank. Two layers, the last one (whose gradient backward produces first) twice the
/// size of the first, so that its all-reduce can hide behind the first layer's backward.
double simulated_step(Mode mode, int world, double flops, bool no_overlap_baseline = false) {
  mlp::Config c;
  c.n_layers = 2;
  c.dim_in = 256;
  c.dim_hidden = 256;
  c.n_classes = 512;
  c.batch_size = 16;
  c.train_size = 256;
  c.test_size = 16;
  c.seed = 5;
  mlp::Matrix x = mlp::Matrix::Random(c.batch_size, c.dim_in);
  mlp::Labels y(static_cast<std::size_t>(c.batch_size));
  for (int i = 0; i < c.batch_size; ++i) y[static_cast<std::size_t>(i)] = i % c.n_classes;
  double step = 0;
  distlab::testing::run_ranks(world, [&] {
    mlp::MLP model(c, c.seed);
    // Before the wrapper, so a layer's compute is charged before a wrapper's hook communicates.
    ObservedBackwardCompute compute(model, c.batch_size, flops, no_overlap_baseline);
    std::unique_ptr<dp::MyDP> mine;
    if (mode == Mode::MyDPPerParameter) mine = std::make_unique<dp::MyDP>(model, 0);
    mlp::SGD opt(model.parameters(), c.learning_rate);
    mlp::Matrix probs, dlogits;
    dist::barrier();
    const double t0 = dist::sim_time();
    compute.start_step();
    dp::dp_step(mine ? dp::GradientSync{mine.get()} : dp::ManualAllReduce{}, model, opt, x, y,
                probs, dlogits, nullptr);
    const double t1 = dist::sim_time();
    if (dist::rank() == 0) step = t1 - t0;
  });
  return step;
}
}  // namespace

TEST(MyDP, OverlapShortensTheSimulatedStep) {
  // The backward compute is charged as the model's backward writes the gradients
  // (ObservedBackwardCompute), so hooks that run only after the whole backward cannot look
  // overlapped. The baseline is the same MyDP with the whole backward charged before its first
  // hook: nothing overlaps there, whatever MyDP does.
  constexpr double kFlops = 50e9;
  const double after = simulated_step(Mode::Manual, 4, kFlops);
  const double baseline = simulated_step(Mode::MyDPPerParameter, 4, kFlops, true);
  const double overlap = simulated_step(Mode::MyDPPerParameter, 4, kFlops);
  ASSERT_GT(after, 0.0) << "the simulated clock did not advance";
  EXPECT_LT(overlap, 0.95 * after)
      << "MyDP with one bucket per parameter: " << overlap * 1e3
      << " ms of simulated time for backward and the gradient sync; all-reduce after backward: "
      << after * 1e3 << " ms: no overlap";
  EXPECT_LT(overlap, 0.95 * baseline)
      << "MyDP with one bucket per parameter: " << overlap * 1e3
      << " ms of simulated time for backward and the gradient sync, but " << baseline * 1e3
      << " ms when the whole backward's compute comes before the first gradient hook: no "
         "all-reduce ran while backward computed the earlier layers. A bucket's all-reduce must "
         "start in the hook, the moment its last gradient is final (before backward moves on), "
         "and be waited for only in finish_gradient_sync";
}
