// Shared by the public and hidden tests of 06_data_parallel: N-rank training against
// single-process full-batch training (the oracle: no reference file needed).
//
// Tolerance: per element |dp - single| <= 1e-5 + 1e-3 |single| after kSteps SGD steps (the mean
// of per-rank means and the mean over the concatenated batch differ only by float rounding).
#pragma once

#include <memory>
#include <mutex>
#include <span>

#include "data_parallel.hpp"
#include "datasets/loader.hpp"
#include "ddp.hpp"
#include "dist/eigen.hpp"
#include "distlab_testing.hpp"
#include "mlp.hpp"

namespace dptest {

inline constexpr int kSteps = 4;
inline constexpr double kRelTol = 1e-3, kAbsTol = 1e-5;

inline mlp::Config small_config() {
  mlp::Config c;
  c.n_layers = 3;
  c.dim_in = 24;
  c.n_classes = 5;
  c.dim_hidden = 16;
  c.train_size = 400;
  c.test_size = 50;
  c.batch_size = 8;
  c.learning_rate = 0.5f;
  c.seed = 3;
  return c;
}

inline const datasets::Split& small_data() {
  static const datasets::Split data = mlp::make_data(small_config());
  return data;
}

struct Trajectory {
  std::vector<float> losses;         // per step: the loss of the global batch
  std::vector<mlp::Matrix> weights;  // after the last step
};

/// One process, batch world_size * B: the concatenation of the ranks' batches of each step.
inline Trajectory single_process(int world_size) {
  const mlp::Config c = small_config();
  const auto& data = small_data();
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::MLP model(c, c.seed + 2);
  mlp::SGD opt(model.parameters(), c.learning_rate);
  Trajectory t;
  mlp::Matrix x(static_cast<Eigen::Index>(world_size) * c.batch_size, c.dim_in), xb, probs, dlogits;
  mlp::Labels y, yb;
  for (int s = 0; s < kSteps; ++s) {
    y.clear();
    for (int r = 0; r < world_size; ++r) {
      loader.load(static_cast<std::int64_t>(s) * world_size + r, xb,
                  yb);  // closed form of the sharding
      x.middleRows(static_cast<Eigen::Index>(r) * c.batch_size, c.batch_size) = xb;
      y.insert(y.end(), yb.begin(), yb.end());
    }
    t.losses.push_back(mlp::train_step(model, opt, x, y, probs, dlogits));
  }
  for (const auto* p : model.parameters()) t.weights.push_back(p->value);
  return t;
}

enum class Mode { Kit, Manual, MyDPPerParameter, MyDPOneBucket, BrokenSum, BrokenNoBroadcast };

inline const char* name(Mode m) {
  switch (m) {
    case Mode::Kit:
      return "KitDDP";
    case Mode::Manual:
      return "Manual";
    case Mode::MyDPPerParameter:
      return "MyDPCap0";
    case Mode::MyDPOneBucket:
      return "MyDPDefaultCap";
    case Mode::BrokenSum:
      return "BrokenSum";
    case Mode::BrokenNoBroadcast:
      return "BrokenNoBroadcast";
  }
  return "?";
}

/// N-rank training; every rank's trajectory (loss = mean over ranks of the local losses).
inline std::vector<Trajectory> data_parallel(int world_size, Mode mode) {
  const mlp::Config c = small_config();
  const auto& data = small_data();
  std::vector<Trajectory> out(static_cast<std::size_t>(world_size));
  distlab::testing::run_ranks(distlab::testing::test_options(world_size, 10000), [&] {
    const int rank = dist::rank();
    // Each rank starts from its own seed: only the wrapper's broadcast makes the replicas equal.
    mlp::MLP model(c, c.seed + 2 + 7 * static_cast<std::uint64_t>(rank));
    std::unique_ptr<dp::KitDDP> kit;
    std::unique_ptr<dp::MyDP> mine;
    switch (mode) {
      case Mode::Kit:
        kit = std::make_unique<dp::KitDDP>(model);
        break;
      case Mode::MyDPPerParameter:
        mine = std::make_unique<dp::MyDP>(model, 0);
        break;
      case Mode::MyDPOneBucket:
        mine = std::make_unique<dp::MyDP>(model);
        break;
      case Mode::Manual:
      case Mode::BrokenSum:
        for (auto* p : model.parameters()) dist::broadcast(dist::as_span(p->value), 0);
        break;
      case Mode::BrokenNoBroadcast:
        break;
    }
    mlp::SGD opt(model.parameters(), c.learning_rate);
    const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
    mlp::Matrix x, probs, dlogits;
    mlp::Labels y;
    Trajectory t;
    for (int s = 0; s < kSteps; ++s) {
      loader.load(dp::global_batch_index(s, rank, dist::world_size()), x, y);
      const mlp::Matrix& logits = model.forward(x);
      float loss = mlp::softmax_cross_entropy_forward(logits, y, probs);
      mlp::softmax_cross_entropy_backward(probs, y, dlogits);
      model.backward(dlogits);
      switch (mode) {
        case Mode::Kit:
          kit->finish_gradient_sync();
          break;
        case Mode::MyDPPerParameter:
        case Mode::MyDPOneBucket:
          mine->finish_gradient_sync();
          break;
        case Mode::Manual:
        case Mode::BrokenNoBroadcast:
          dp::all_reduce_gradients(model);
          break;
        case Mode::BrokenSum:
          for (auto* p : model.parameters())
            dist::all_reduce(dist::as_span(p->grad), dist::ReduceOp::Sum);
          break;
      }
      opt.step();
      dist::all_reduce(std::span<float>(&loss, 1), dist::ReduceOp::Avg);
      t.losses.push_back(loss);
    }
    for (const auto* p : model.parameters()) t.weights.push_back(p->value);
    out[static_cast<std::size_t>(rank)] = std::move(t);
  });
  return out;
}

/// Empty when `got` matches `want`; else what differs first.
inline std::string compare(const Trajectory& got, const Trajectory& want) {
  if (got.losses.size() != want.losses.size() || got.weights.size() != want.weights.size()) {
    return "the run did not complete";
  }
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    if (std::abs(got.losses[s] - want.losses[s]) > kAbsTol + kRelTol * std::abs(want.losses[s])) {
      return "loss of step " + std::to_string(s) + " is " + std::to_string(got.losses[s]) +
             ", single-process full-batch training gives " + std::to_string(want.losses[s]);
    }
  }
  for (std::size_t i = 0; i < want.weights.size(); ++i) {
    const auto& g = got.weights[i];
    const auto& w = want.weights[i];
    if (g.rows() != w.rows() || g.cols() != w.cols())
      return "layer " + std::to_string(i) + " has the wrong shape";
    auto r = distlab::testing::elements_near(
        std::span<const float>(g.data(), static_cast<std::size_t>(g.size())),
        std::span<const float>(w.data(), static_cast<std::size_t>(w.size())), kRelTol, kAbsTol);
    if (!r)
      return "weights of layer " + std::to_string(i) + " after " + std::to_string(kSteps) +
             " steps: " + r.message();
  }
  return {};
}

/// The bucket layout that the greedy rule gives (closed form, from the parameter sizes).
inline std::vector<std::vector<int>> expected_buckets(const mlp::MLP& model, std::size_t cap) {
  std::vector<std::vector<int>> out;
  std::size_t used = 0;
  const auto params = model.parameters();
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const std::size_t bytes =
        static_cast<std::size_t>(params[static_cast<std::size_t>(i)]->numel()) * sizeof(float);
    if (out.empty() || used + bytes > cap) {
      out.emplace_back();
      used = 0;
    }
    out.back().push_back(i);
    used += bytes;
  }
  return out;
}

}  // namespace dptest
