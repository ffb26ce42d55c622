// Shared by the public, hidden and MPI tests of 09_tensor_parallel: training on a tp x dp grid
// against single-process training of the same model on the same batches with Adam (the oracle:
// 05's MLP through its public header, and Adam written here in double precision, independently of
// layout.hpp's given Adam and of the student's ZeRO), and the measured references of the traffic
// checks (the built-in all-reduce of the same size on the same group).
//
// Values tolerance: per weight |grid - single| <= 1e-5 + 1e-4 |single| after every step. Summing a
// product over the TP group, or averaging over the DP group, changes only the float rounding
// (relative ~1e-6 here after a few steps), while every plausible mistake (a missing or extra sum, a
// sum instead of a mean, a wrong shard) moves weights by far more than that. Adam moves every
// weight by about the learning rate (0.01) per step whatever the gradient's size, so a wrong bias
// correction or step counter shows in every element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/loader.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"
#include "train.hpp"

namespace tptest {

inline constexpr double kRelTol = 1e-4, kAbsTol = 1e-5;

/// A small model: dim_in 12 -> hidden -> ... -> 6 classes.
inline mlp::Config tiny_config(int hidden = 10, int n_layers = 4, int batch_size = 16,
                               mlp::Activation a = mlp::Activation::Tanh) {
  mlp::Config c;
  c.n_layers = n_layers;
  c.dim_in = 12;
  c.dim_hidden = hidden;
  c.n_classes = 6;
  c.train_size = 256;
  c.test_size = 16;
  c.batch_size = batch_size;
  c.learning_rate = 0.01f;  // Adam's step size
  c.seed = 11;
  c.activation = a;
  return c;
}

inline tp::TpConfig grid_config(const mlp::Config& model, int t, int d, int zero) {
  tp::TpConfig c;
  c.model = model;
  c.tp = t;
  c.dp = d;
  c.zero = zero;
  c.flops_per_s = 0;  // the values tests do not need the clock
  return c;
}

inline std::string config_name(const tp::TpConfig& c) {
  std::ostringstream os;
  os << c.name() << ", " << c.model.n_layers << " layers " << c.model.dim_in << "->"
     << c.model.dim_hidden << "->" << c.model.n_classes << ", batch " << c.model.batch_size << ", "
     << mlp::to_string(c.model.activation);
  return os.str();
}

/// The data of a model config, made once per config.
inline const datasets::Split& data_for(const mlp::Config& c) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<datasets::Split>> cache;
  std::lock_guard<std::mutex> g(mu);
  const std::string key = std::to_string(c.dim_in) + " " + std::to_string(c.n_classes) + " " +
                          std::to_string(c.seed) + " " + std::to_string(c.train_size);
  auto& slot = cache[key];
  if (!slot) slot = std::make_unique<datasets::Split>(mlp::make_data(c));
  return *slot;
}

/// What single-process Adam holds after each step: weights[t][i], m[t][i], v[t][i] for layer i
/// after step t (the moments rounded to float, in the weights' shapes).
struct Oracle {
  std::vector<std::vector<mlp::Matrix>> weights, m, v;
};

/// The oracle: every full weight and moment after each of `steps` steps of single-process Adam on
/// the whole batch. Adam as torch.optim.Adam defines it, with the moments and the bias correction
/// in double; t counts optimizer steps from 1.
inline Oracle oracle(const tp::TpConfig& tc, int steps) {
  const mlp::Config& c = tc.model;
  const datasets::Split& data = data_for(c);
  mlp::MLP model(c, c.seed + 2);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  std::vector<Eigen::ArrayXd> m, v;
  for (const mlp::Parameter* p : model.parameters()) {
    m.push_back(Eigen::ArrayXd::Zero(p->value.size()));
    v.push_back(Eigen::ArrayXd::Zero(p->value.size()));
  }
  const double b1 = tc.beta1, b2 = tc.beta2, eps = tc.eps, lr = c.learning_rate;
  Oracle out;
  for (int t = 0; t < steps; ++t) {
    loader.load(t, x, y);
    mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    model.backward(dlogits);
    const double correct1 = 1.0 - std::pow(b1, t + 1), correct2 = 1.0 - std::pow(b2, t + 1);
    std::vector<mlp::Matrix> w, ms, vs;
    std::size_t i = 0;
    for (mlp::Parameter* p : model.parameters()) {
      const Eigen::ArrayXd g =
          Eigen::Map<const Eigen::ArrayXf>(p->grad.data(), p->grad.size()).cast<double>();
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g.square();
      const Eigen::ArrayXd step = lr * (m[i] / correct1) / ((v[i] / correct2).sqrt() + eps);
      Eigen::Map<Eigen::ArrayXf>(p->value.data(), p->value.size()) -= step.cast<float>();
      w.push_back(p->value);
      ms.push_back(p->value);
      vs.push_back(p->value);
      Eigen::Map<Eigen::ArrayXf>(ms.back().data(), p->value.size()) = m[i].cast<float>();
      Eigen::Map<Eigen::ArrayXf>(vs.back().data(), p->value.size()) = v[i].cast<float>();
      ++i;
    }
    out.weights.push_back(std::move(w));
    out.m.push_back(std::move(ms));
    out.v.push_back(std::move(vs));
  }
  return out;
}

/// What one rank held after each step: its shards, block by block (column, row).
struct RankRun {
  bool ran = false;
  int tp_rank = 0, dp_rank = 0;
  std::vector<tp::Range> hidden;                 // per block
  std::vector<std::vector<mlp::Matrix>> shards;  // shards[t][2k] column, [2k+1] row of block k
  std::vector<float> losses;
  // ZeRO only: this rank's chunks of m and v after step t (moments[t][i]: parameter i's chunk),
  // and the padded range they cover.
  std::vector<std::vector<std::vector<float>>> m, v;
  std::vector<tp::Range> chunk;
};

/// Trains config for `steps` steps on every rank of this process (threads: all of them; mpirun:
/// this process's rank) and returns what each rank held, indexed by world rank.
inline std::vector<RankRun> run_grid(const tp::TpConfig& c, int steps, int timeout_ms = 20000) {
  const int p = c.tp * c.dp;
  std::vector<RankRun> runs(static_cast<std::size_t>(p));
  std::mutex mu;
  distlab::testing::run_ranks(distlab::testing::test_options(p, timeout_ms), [&] {
    tp::Trainer trainer(c, data_for(c.model));
    RankRun r;
    r.ran = true;
    r.tp_rank = trainer.grid().tp_rank;
    r.dp_rank = trainer.grid().dp_rank;
    for (const tp::Block& b : trainer.model().blocks()) r.hidden.push_back(b.hidden);
    for (int t = 0; t < steps; ++t) {
      r.losses.push_back(trainer.step(t));
      std::vector<mlp::Matrix> s;
      for (const mlp::Parameter* q : trainer.model().parameters()) s.push_back(q->value);
      r.shards.push_back(std::move(s));
      if (const tp::ZeroOptimizer* z = trainer.zero()) {
        r.m.push_back(z->m());
        r.v.push_back(z->v());
        if (r.chunk.empty()) {
          for (std::size_t i = 0; i < z->m().size(); ++i) r.chunk.push_back(z->shard(i));
        }
      }
    }
    std::lock_guard<std::mutex> g(mu);
    runs[static_cast<std::size_t>(dist::rank())] = std::move(r);
  });
  return runs;
}

/// Expects `got` (this rank's chunk of a moment of one TP shard, padded element indices
/// chunk.begin ...) to equal the same elements of the oracle's moment `want` (the TP shard, row
/// by row), within 1e-4 relative plus 1e-5 of the shard's largest moment; the padding must be 0.
inline ::testing::AssertionResult moments_match(const std::vector<float>& got, tp::Range chunk,
                                                const mlp::Matrix& want) {
  if (got.size() != chunk.size()) {
    return ::testing::AssertionFailure()
           << "the chunk holds " << got.size() << " floats, the shard's chunk is " << chunk.size();
  }
  const double scale = want.size() ? static_cast<double>(want.cwiseAbs().maxCoeff()) : 0.0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const std::size_t e = chunk.begin + k;
    const double w = e < static_cast<std::size_t>(want.size()) ? want.data()[e] : 0.0;
    if (std::abs(got[k] - w) > 1e-5 * scale + 1e-4 * std::abs(w)) {
      return ::testing::AssertionFailure()
             << "element " << e << " of the padded shard is " << got[k] << ", single-process Adam "
             << (e < static_cast<std::size_t>(want.size()) ? "gives " : "has no element there: ")
             << w;
    }
  }
  return ::testing::AssertionSuccess();
}

/// Expects every rank's shards to equal the matching slices of the oracle after every step, and
/// under ZeRO its chunks of m and v the matching elements of the oracle's moments.
inline void expect_values(const tp::TpConfig& c, int steps = 3) {
  SCOPED_TRACE(config_name(c));
  const Oracle oracle_run = oracle(c, steps);
  const auto& ref = oracle_run.weights;
  const auto runs = run_grid(c, steps);
  int checked = 0;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const RankRun& run = runs[r];
    if (!run.ran) continue;
    ++checked;
    ASSERT_EQ(run.shards.size(), static_cast<std::size_t>(steps)) << "rank " << r;
    for (int t = 0; t < steps; ++t) {
      for (std::size_t k = 0; k < run.hidden.size(); ++k) {
        const tp::Range h = run.hidden[k];
        const auto b = static_cast<Eigen::Index>(h.begin), n = static_cast<Eigen::Index>(h.size());
        const mlp::Matrix want_col = ref[t][2 * k].middleRows(b, n);
        const mlp::Matrix want_row = ref[t][2 * k + 1].middleCols(b, n);
        const mlp::Matrix* got[2] = {&run.shards[t][2 * k], &run.shards[t][2 * k + 1]};
        const mlp::Matrix* want[2] = {&want_col, &want_row};
        for (int which = 0; which < 2; ++which) {
          ASSERT_EQ(got[which]->rows(), want[which]->rows());
          ASSERT_EQ(got[which]->cols(), want[which]->cols());
          for (Eigen::Index i = 0; i < want[which]->size(); ++i) {
            const double w = want[which]->data()[i], g = got[which]->data()[i];
            if (std::abs(g - w) > kAbsTol + kRelTol * std::abs(w)) {
              ADD_FAILURE() << "rank " << r << " (tp_rank " << run.tp_rank << ", dp_rank "
                            << run.dp_rank << "), after step " << t << ": block " << k << "'s "
                            << (which == 0 ? "column" : "row") << " weight, element " << i
                            << " of the shard: " << g << ", single-process training gives " << w;
              return;
            }
          }
        }
        if (c.zero == 0) continue;
        ASSERT_EQ(run.m.size(), static_cast<std::size_t>(steps)) << "rank " << r;
        const mlp::Matrix m_col = oracle_run.m[t][2 * k].middleRows(b, n);
        const mlp::Matrix m_row = oracle_run.m[t][2 * k + 1].middleCols(b, n);
        const mlp::Matrix v_col = oracle_run.v[t][2 * k].middleRows(b, n);
        const mlp::Matrix v_row = oracle_run.v[t][2 * k + 1].middleCols(b, n);
        const mlp::Matrix* wm[2] = {&m_col, &m_row};
        const mlp::Matrix* wv[2] = {&v_col, &v_row};
        for (int which = 0; which < 2; ++which) {
          const std::size_t i = 2 * k + static_cast<std::size_t>(which);
          ASSERT_LT(i, run.m[t].size());
          ASSERT_LT(i, run.v[t].size());
          ASSERT_LT(i, run.chunk.size());
          const char* name = which == 0 ? "column" : "row";
          EXPECT_TRUE(moments_match(run.m[t][i], run.chunk[i], *wm[which]))
              << "rank " << r << ", after step " << t << ": m of block " << k << "'s " << name
              << " weight (ZeRO: this rank's chunk)";
          EXPECT_TRUE(moments_match(run.v[t][i], run.chunk[i], *wv[which]))
              << "rank " << r << ", after step " << t << ": v of block " << k << "'s " << name
              << " weight (ZeRO: this rank's chunk)";
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

/// Bytes and messages the built-in all-reduce of `count` floats on `group` makes this rank send.
inline std::pair<std::uint64_t, std::uint64_t> all_reduce_cost(std::size_t count,
                                                               const dist::Group& group) {
  std::vector<float> buf(count, 0.0f);
  const dist::Stats before = dist::stats();
  dist::all_reduce(std::span<float>(buf), dist::ReduceOp::Sum, group);
  const dist::Stats after = dist::stats();
  return {after.bytes_sent - before.bytes_sent, after.messages_sent - before.messages_sent};
}

/// The ranks of the grid group of world rank r (the tests' own arithmetic).
inline std::vector<int> expected_tp_ranks(int t, int d, int r) {
  std::vector<int> out;
  for (int j = 0; j < t; ++j) out.push_back((r / t) * t + j);
  (void)d;
  return out;
}
inline std::vector<int> expected_dp_ranks(int t, int d, int r) {
  std::vector<int> out;
  for (int k = 0; k < d; ++k) out.push_back(k * t + r % t);
  return out;
}

/// Elements of every parameter a rank holds for the config (its TP shards).
inline std::vector<std::size_t> shard_sizes(tp::TpMLP& model) {
  std::vector<std::size_t> out;
  for (const mlp::Parameter* p : model.parameters())
    out.push_back(static_cast<std::size_t>(p->numel()));
  return out;
}

}  // namespace tptest
