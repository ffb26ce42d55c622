// Shared by the public, hidden and MPI tests of 07_pipeline: p-stage pipeline training against
// single-process training of the same model on the same batches (the oracle: 05's MLP through
// its public header), and the closed forms of the traffic, the simulated time and the stash.
//
// Values tolerance: per weight |pipeline - single| <= 1e-6 + 1e-4 |single| after every step, and
// the same for the batch loss. Accumulating a batch's gradient over microbatches instead of one
// product over the whole batch changes only the float rounding (relative ~1e-7 here), while
// a gradient that is not averaged over m microbatches moves every update by a factor m.
#pragma once

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <tuple>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/loader.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"
#include "pipeline.hpp"

namespace pptest {

inline constexpr double kRelTol = 1e-4, kAbsTol = 1e-6;

/// A small model: dim_in 12 -> hidden 10 -> ... -> 6 classes.
inline mlp::Config tiny_config(int n_layers, int batch_size = 16,
                               mlp::Activation a = mlp::Activation::Tanh) {
  mlp::Config c;
  c.n_layers = n_layers;
  c.dim_in = 12;
  c.dim_hidden = 10;
  c.n_classes = 6;
  c.train_size = 256;
  c.test_size = 16;
  c.batch_size = batch_size;
  c.learning_rate = 0.5f;
  c.seed = 11;
  c.activation = a;
  return c;
}

/// Equal stages: every layer width x width (dim_in = dim_hidden = n_classes).
inline mlp::Config equal_config(int n_layers, int width, int batch_size) {
  mlp::Config c;
  c.n_layers = n_layers;
  c.dim_in = c.dim_hidden = c.n_classes = width;
  c.train_size = 256;
  c.test_size = 16;
  c.batch_size = batch_size;
  c.learning_rate = 0.1f;
  c.seed = 5;
  return c;
}

inline std::string config_name(const mlp::Config& c) {
  std::ostringstream os;
  os << c.n_layers << " layers " << c.dim_in << "->" << c.dim_hidden << "->" << c.n_classes
     << ", batch " << c.batch_size << ", " << mlp::to_string(c.activation);
  return os.str();
}

/// The data of a config, made once per config.
inline const datasets::Split& data_for(const mlp::Config& c) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<datasets::Split>> cache;
  std::lock_guard<std::mutex> g(mu);
  const std::string key =
      config_name(c) + " " + std::to_string(c.seed) + " " + std::to_string(c.train_size);
  auto& slot = cache[key];
  if (!slot) slot = std::make_unique<datasets::Split>(mlp::make_data(c));
  return *slot;
}

/// The expected cut (the tests' own: near-equal, earlier stages larger).
inline std::pair<int, int> expected_layers(int n_layers, int stages, int stage) {
  const int base = n_layers / stages, extra = n_layers % stages;
  const int begin = stage * base + std::min(stage, extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

/// Single-process training: the losses of each step and the weights after each step.
struct Reference {
  std::vector<double> losses;
  std::vector<std::vector<mlp::Matrix>> weights;  // [step][layer]
};

inline Reference single_process(const mlp::Config& c, int steps) {
  const auto& data = data_for(c);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::MLP model(c, c.seed + 2);
  mlp::SGD opt(model.parameters(), c.learning_rate);
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  Reference ref;
  for (int s = 0; s < steps; ++s) {
    loader.load(s, x, y);
    ref.losses.push_back(mlp::train_step(model, opt, x, y, probs, dlogits));
    std::vector<mlp::Matrix> w;
    for (const mlp::Parameter* p : model.parameters()) w.push_back(p->value);
    ref.weights.push_back(std::move(w));
  }
  return ref;
}

/// What one rank saw.
struct RankRecord {
  int begin = 0, end = 0;                         // the stage's layers
  std::vector<int> layers;                        // the global layer of each weight (any schedule)
  std::vector<double> losses;                     // train_step's return, per step
  std::vector<std::vector<mlp::Matrix>> weights;  // [step][k]: the stage's weights after each step
  dist::Stats stats;                              // traffic of the LAST step
  double step_s = 0;          // simulated time of the last step (barrier to barrier)
  int peak_microbatches = 0;  // of the last step
  std::int64_t peak_bytes = 0;
  int stash_after = -1;                // microbatches stashed after the last step
  std::vector<std::string> order;      // F<i>/B<i> span names of the last step
  std::vector<pp::Stage::Span> spans;  // the last step's spans, seconds since its start
};

struct PipelineRun {
  bool ok = false;
  std::string error;
  std::vector<RankRecord> ranks;
};

inline dist::NetworkModel free_network() {
  dist::NetworkModel n;
  n.latency_s = 0;
  n.bandwidth_Bps = 1e30;
  return n;
}

/// Trains `steps` steps with p stages; every step is measured between barriers.
inline PipelineRun run_pipeline(const mlp::Config& c, int p, int m, pp::Schedule schedule,
                                int steps, const dist::NetworkModel& network = dist::NetworkModel{},
                                double flops_per_s = 1e9, bool recompute = false, int chunks = 1) {
  const auto& data = data_for(c);
  PipelineRun run;
  run.ranks.resize(static_cast<std::size_t>(p));
  std::mutex mu;
  dist::LaunchOptions o = distlab::testing::test_options(p);
  o.network = network;
  try {
    dist::launch(o, [&] {
      const int rank = dist::rank();
      pp::CostModel cost;
      cost.flops_per_s = flops_per_s;
      const bool interleaved = schedule == pp::Schedule::Interleaved;
      pp::ActivationMeter rank_meter;
      std::vector<pp::Stage> stages;
      if (interleaved) {
        stages = pp::make_rank_chunks(c, c.seed + 2, chunks, cost, &rank_meter);
      } else {
        stages.emplace_back(c, c.seed + 2, rank, dist::world_size(), cost);
      }
      std::vector<mlp::Parameter*> params;
      RankRecord rec;
      for (pp::Stage& st : stages) {
        st.set_recompute(recompute);
        for (mlp::Parameter* prm : st.parameters()) params.push_back(prm);
        for (int l = st.layers().begin; l < st.layers().end(); ++l) rec.layers.push_back(l);
      }
      mlp::SGD opt(params, c.learning_rate);
      const pp::ActivationMeter& meter = interleaved ? rank_meter : stages[0].meter();
      const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
      mlp::Matrix x;
      mlp::Labels y;
      rec.begin = stages[0].layers().begin;
      rec.end = stages[0].layers().end();
      for (int s = 0; s < steps; ++s) {
        loader.load(s, x, y);
        const pp::Batch batch{x, y, m};
        dist::barrier();
        dist::reset_stats();
        rank_meter.reset_peak();
        for (pp::Stage& st : stages) {
          st.meter().reset_peak();
          st.clear_spans();
        }
        const double t0 = dist::sim_time();
        rec.losses.push_back(interleaved ? pp::train_step_interleaved(stages, opt, batch)
                                         : pp::train_step(stages[0], opt, batch, schedule));
        rec.stats = dist::stats();
        dist::barrier();
        rec.step_s = dist::sim_time() - t0;
        rec.peak_microbatches = meter.peak_microbatches();
        rec.peak_bytes = meter.peak_bytes();
        rec.stash_after = meter.microbatches();
        rec.order.clear();
        rec.spans.clear();
        for (const pp::Stage& st : stages) {
          for (const auto& span : st.spans())
            rec.spans.push_back({span.name, span.t0 - t0, span.t1 - t0});
        }
        std::stable_sort(rec.spans.begin(), rec.spans.end(),
                         [](const auto& a, const auto& b) { return a.t0 < b.t0; });
        for (const auto& span : rec.spans) rec.order.push_back(span.name);
        std::vector<mlp::Matrix> w;
        for (const mlp::Parameter* prm : params) w.push_back(prm->value);
        rec.weights.push_back(std::move(w));
      }
      std::lock_guard<std::mutex> g(mu);
      run.ranks[static_cast<std::size_t>(rank)] = std::move(rec);
    });
    run.ok = true;
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  return run;
}

inline ::testing::AssertionResult close(const mlp::Matrix& got, const mlp::Matrix& want) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) {
    return ::testing::AssertionFailure() << "shape " << got.rows() << "x" << got.cols()
                                         << ", expected " << want.rows() << "x" << want.cols();
  }
  return distlab::testing::elements_near(
      std::span<const float>(got.data(), static_cast<std::size_t>(got.size())),
      std::span<const float>(want.data(), static_cast<std::size_t>(want.size())), kRelTol, kAbsTol);
}

/// The values of ranks [first, last) of a run against single-process training: the stages'
/// layers cover the model exactly once, every weight after every step, the last stage's losses.
inline void expect_values(const PipelineRun& run, const mlp::Config& c, const Reference& ref,
                          int first, int last, const std::string& what, bool check_cut = true) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(run.ok) << run.error;
  const int p = static_cast<int>(run.ranks.size());
  int next = 0;
  for (int r = 0; r < p && check_cut; ++r) {
    EXPECT_EQ(run.ranks[static_cast<std::size_t>(r)].begin, next)
        << "stage " << r << " must start where stage " << r - 1 << " ends (consecutive layers)";
    next = run.ranks[static_cast<std::size_t>(r)].end;
  }
  if (check_cut) {
    EXPECT_EQ(next, c.n_layers) << "the stages must hold every layer of the model";
  }
  for (int r = first; r < last; ++r) {
    const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
    ASSERT_EQ(rec.weights.size(), ref.weights.size()) << "rank " << r;
    for (std::size_t s = 0; s < ref.weights.size(); ++s) {
      ASSERT_EQ(rec.weights[s].size(), rec.layers.size()) << "rank " << r;
      for (std::size_t k = 0; k < rec.layers.size(); ++k) {
        const int layer = rec.layers[k];
        EXPECT_TRUE(close(rec.weights[s][k], ref.weights[s][static_cast<std::size_t>(layer)]))
            << "stage " << r << ", layer " << layer << ", after step " << s
            << ": the weights differ from single-process training on the whole batch";
      }
      if (r == p - 1) {
        EXPECT_NEAR(rec.losses[s], ref.losses[s], kAbsTol + kRelTol * std::abs(ref.losses[s]))
            << "the last stage's loss of step " << s << " (the batch's mean loss)";
      }
    }
  }
}

/// Bytes stashed per ROW of a microbatch on the stage with layers [begin, end): its input, and
/// every layer's z (and h, except after the model's last layer).
inline std::int64_t stash_bytes_per_row(const mlp::Config& c, int begin, int end) {
  std::int64_t floats = c.layer_in(begin);
  for (int l = begin; l < end; ++l) floats += c.layer_out(l) * (l + 1 < c.n_layers ? 2 : 1);
  return floats * 4;
}

/// Bytes stashed per row with recomputation: the stage's input only.
inline std::int64_t input_bytes_per_row(const mlp::Config& c, int begin) {
  return static_cast<std::int64_t>(c.layer_in(begin)) * 4;
}

/// The tests' own replay of ranks' lists of operations (pp::Op) on the kit's clock rules
/// (docs/threads_backend.md, section 4) with latency alpha and unlimited bandwidth, as Task 11's
/// executor promises to run them: each F (B, BW) receives from the rank of its neighbouring chunk
/// (blocking) right before it computes and posts its send right after; the sends are waited at
/// the end. Local chunk c of rank r is global chunk c p + r (v chunks per rank; v = 1: stage r).
/// Times: F = B = W = t, BW = 2t. Messages between two ranks match first in first out per
/// direction, as the kit matches them. Also the peak number of (chunk, microbatch) stashed per
/// rank (F to W or BW).
struct OpsReplay {
  bool ok = false;        // false: a receive is never matched, or matched out of order
  std::string error;      // why not
  double step = 0;        // the last rank's finish, all sends completed
  std::vector<int> peak;  // per rank
};

inline OpsReplay replay_ops(const std::vector<std::vector<pp::Op>>& lists, double t,
                            double alpha = 0, int v = 1) {
  const int p = static_cast<int>(lists.size());
  const int G = v * p;
  OpsReplay out;
  out.peak.assign(static_cast<std::size_t>(p), 0);
  std::vector<std::size_t> pos(static_cast<std::size_t>(p), 0);
  std::vector<double> clock(static_cast<std::size_t>(p), 0), out_free(clock), in_free(clock),
      last_send(clock);
  std::vector<int> held(static_cast<std::size_t>(p), 0);
  struct Msg {
    int chunk, microbatch;  // the receiving global chunk and microbatch
    double ts;
  };
  std::map<std::tuple<int, int, int>, std::deque<Msg>> wire;  // (src, dst, dir) -> FIFO
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto R = static_cast<std::size_t>(r);
      while (pos[R] < lists[R].size()) {
        const pp::Op op = lists[R][pos[R]];
        const int g = op.chunk * p + r;
        const bool fwd = op.kind == pp::OpKind::F;
        const bool bwd = op.kind == pp::OpKind::B || op.kind == pp::OpKind::BW;
        const bool needs = (fwd && g > 0) || (bwd && g + 1 < G);
        if (needs) {
          const int src = ((fwd ? g - 1 : g + 1) % p + p) % p;
          auto& q = wire[std::make_tuple(src, r, fwd ? 0 : 1)];
          if (q.empty()) break;
          if (q.front().chunk != g || q.front().microbatch != op.microbatch) {
            out.error = "rank " + std::to_string(r) + "'s " + pp::to_string(op) +
                        " would take the message of global chunk " +
                        std::to_string(q.front().chunk) + ", microbatch " +
                        std::to_string(q.front().microbatch) + " (rank " + std::to_string(src) +
                        " sends in another order)";
            return out;
          }
          const double ti = std::max(q.front().ts, in_free[R]);
          q.pop_front();
          in_free[R] = ti + alpha;
          clock[R] = std::max(clock[R], ti + alpha);
        }
        clock[R] += op.kind == pp::OpKind::BW ? 2 * t : t;
        if (fwd) out.peak[R] = std::max(out.peak[R], ++held[R]);
        if (op.kind == pp::OpKind::W || op.kind == pp::OpKind::BW) --held[R];
        if ((fwd && g + 1 < G) || (bwd && g > 0)) {
          const int to = fwd ? g + 1 : g - 1;
          const double ts = std::max(clock[R], out_free[R]);
          out_free[R] = ts + alpha;
          last_send[R] = std::max(last_send[R], ts + alpha);
          wire[std::make_tuple(r, to % p, fwd ? 0 : 1)].push_back({to, op.microbatch, ts});
        }
        ++pos[R];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    const auto R = static_cast<std::size_t>(r);
    if (pos[R] < lists[R].size()) {
      out.error = "rank " + std::to_string(r) + " waits forever at its operation " +
                  pp::to_string(lists[R][pos[R]]);
      return out;
    }
    out.step = std::max({out.step, clock[R], last_send[R]});
  }
  out.ok = true;
  return out;
}

inline std::vector<std::vector<pp::Op>> interleaved_lists(int p, int m, int v) {
  std::vector<std::vector<pp::Op>> lists;
  for (int r = 0; r < p; ++r) lists.push_back(pp::interleaved_ops(p, r, m, v));
  return lists;
}

/// Interleaved 1F1B's step in units of one chunk's forward (BW = 2), equal chunks, free network:
/// (m + (p-1)/v)(tf + tb) with tf = v units.
inline double interleaved_formula_units(int p, int m, int v) { return 3.0 * (m * v + p - 1); }

inline std::vector<std::vector<pp::Op>> zb_lists(int p, int m) {
  std::vector<std::vector<pp::Op>> lists;
  for (int r = 0; r < p; ++r) lists.push_back(pp::zb_h1_ops(p, r, m));
  return lists;
}

/// ZB-H1's step in units of t = tf (F = B = W = t) on equal stages, free communication.
inline double zb_formula_units(int p, int m) { return 2.0 * m + p - 1 + std::max(m, p); }

}  // namespace pptest
