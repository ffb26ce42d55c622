// MUTANT grads_not_averaged: gradients summed over microbatches, not averaged (the loss gradient is not weighted by rows_i / B).
// 07_pipeline: your TODOs, in the order of README.md's tasks. The given parts (the shard helper,
// Stage's construction, its cost, stash and gradient bookkeeping) are at the end.
#include "pipeline.hpp"

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "dist/eigen.hpp"
#include "distlab/todo.hpp"

namespace pp {

// =============================================================================================
// Task 1: the cut.

Range stage_layers(int n_layers, int stages, int stage) {
  if (stages < 1 || stages > n_layers || stage < 0 || stage >= stages) {
    throw std::invalid_argument("stage_layers(n_layers=" + std::to_string(n_layers) + ", stages=" +
                                std::to_string(stages) + ", stage=" + std::to_string(stage) +
                                "): need 1 <= stages <= n_layers and 0 <= stage < stages");
  }
  // BEGIN SOLUTION: the near-equal consecutive split of [0, n_layers) into `stages` parts, earlier stages larger (README: Task 1)
  return shard_range(n_layers, stages, stage);
  // END SOLUTION
}

// =============================================================================================
// Task 2: a stage's forward and backward, through 05's building blocks.

const Matrix& Stage::forward(const Matrix& x, int microbatch) {
  if (x.cols() != in_features()) {
    throw std::invalid_argument("Stage::forward: stage " + std::to_string(stage_) + " expects " +
                                std::to_string(in_features()) + " input features, got " +
                                std::to_string(x.cols()));
  }
  // BEGIN SOLUTION: charge the forward, run this stage's layers keeping input, z and h in a Stash, set out_ to the stage's output, stash_push it (README: Task 2)
  charge_forward(x.rows(), microbatch);
  const int n = layers_.size;
  Stash s;
  s.input = x;
  s.z.resize(static_cast<std::size_t>(n));
  s.h.resize(static_cast<std::size_t>(n));
  const Matrix* h = &s.input;
  for (int k = 0; k < n; ++k) {
    const auto i = static_cast<std::size_t>(k);
    mlp::linear_forward(*h, weights_[i].value, s.z[i]);
    if (layers_.begin + k + 1 < config_.n_layers) {  // every layer but the model's last
      mlp::activation_forward(config_.activation, s.z[i], s.h[i]);
      h = &s.h[i];
    } else {
      h = &s.z[i];
    }
  }
  out_ = *h;
  stash_push(microbatch, std::move(s));
  // END SOLUTION
  return out_;
}

void Stage::backward(const Matrix& dy, int microbatch, Matrix& dx) {
  if (dy.cols() != out_features()) {
    throw std::invalid_argument("Stage::backward: stage " + std::to_string(stage_) + " expects a " +
                                "gradient of " + std::to_string(out_features()) +
                                " features, got " + std::to_string(dy.cols()));
  }
  // BEGIN SOLUTION: charge the backward, pop the microbatch's stash, walk the layers from the last: activation backward, accumulate the weight gradient, input gradient; dx only when not the first stage (README: Task 2)
  charge_backward(dy.rows(), microbatch);
  const Stash s = stash_pop(microbatch);
  const Matrix* dh = &dy;  // d loss / d (output of layer k)
  for (int k = layers_.size - 1; k >= 0; --k) {
    const auto i = static_cast<std::size_t>(k);
    const Matrix* dz = dh;
    if (layers_.begin + k + 1 < config_.n_layers) {
      mlp::activation_backward(config_.activation, s.z[i], s.h[i], *dh, dz_);
      dz = &dz_;
    }
    const Matrix& in = k == 0 ? s.input : s.h[i - 1];
    mlp::linear_backward_weight(in, *dz, grad_scratch_);
    weights_[i].grad += grad_scratch_;
    if (k > 0) {
      mlp::linear_backward_input(weights_[i].value, *dz, dh_);
      dh = &dh_;
    } else if (!is_first()) {
      mlp::linear_backward_input(weights_[i].value, *dz, dx);
    }
  }
  // END SOLUTION
}

// =============================================================================================
// Task 3: the communication helpers.

void send_forward(const Stage& stage, const Matrix& y) {
  // BEGIN SOLUTION: unless this is the last stage, send y to the next stage (README: Task 3)
  if (stage.is_last()) return;
  dist::send(dist::as_span(y), stage.stage() + 1, kForwardTag);
  // END SOLUTION
}

void recv_forward(const Stage& stage, Matrix& x, int rows) {
  // BEGIN SOLUTION: unless this is the first stage, resize x to rows x in_features() and receive it from the previous stage (README: Task 3)
  if (stage.is_first()) return;
  x.resize(rows, stage.in_features());
  dist::recv(dist::as_span(x), stage.stage() - 1, kForwardTag);
  // END SOLUTION
}

void send_backward(const Stage& stage, const Matrix& dx) {
  // BEGIN SOLUTION: unless this is the first stage, send dx to the previous stage (README: Task 3)
  if (stage.is_first()) return;
  dist::send(dist::as_span(dx), stage.stage() - 1, kBackwardTag);
  // END SOLUTION
}

void recv_backward(const Stage& stage, Matrix& dy, int rows) {
  // BEGIN SOLUTION: unless this is the last stage, resize dy to rows x out_features() and receive it from the next stage (README: Task 3)
  if (stage.is_last()) return;
  dy.resize(rows, stage.out_features());
  dist::recv(dist::as_span(dy), stage.stage() + 1, kBackwardTag);
  // END SOLUTION
}

void send_forward_recv_backward(const Stage& stage, const Matrix& y, Matrix& dy, int rows) {
  // BEGIN SOLUTION: unless this is the last stage, have the send of y and the receive of dy in flight together, then wait for both (README: Task 3)
  if (stage.is_last()) return;
  dy.resize(rows, stage.out_features());
  dist::Work sent = dist::isend(dist::as_span(y), stage.stage() + 1, kForwardTag);
  dist::Work got = dist::irecv(dist::as_span(dy), stage.stage() + 1, kBackwardTag);
  sent.wait();
  got.wait();
  // END SOLUTION
}

void send_backward_recv_forward(const Stage& stage, const Matrix& dx, Matrix& x, int rows) {
  // BEGIN SOLUTION: unless this is the first stage, have the send of dx and the receive of x in flight together, then wait for both (README: Task 3)
  if (stage.is_first()) return;
  x.resize(rows, stage.in_features());
  dist::Work sent = dist::isend(dist::as_span(dx), stage.stage() - 1, kBackwardTag);
  dist::Work got = dist::irecv(dist::as_span(x), stage.stage() - 1, kForwardTag);
  sent.wait();
  got.wait();
  // END SOLUTION
}

// =============================================================================================
// Task 4: one microbatch forward and backward, with the loss on the last stage.

const Matrix& forward_step(Stage& stage, const Batch& batch, int i, StepState& st) {
  const Matrix* out = &st.x;
  // BEGIN SOLUTION: stage 0 slices its microbatch out of the batch; forward; the last stage adds the microbatch's weighted loss and queues its weighted dlogits (README: Task 4)
  const Range rows = batch.microbatch_rows(i);
  if (stage.is_first()) st.x = batch.x.middleRows(rows.begin, rows.size);
  out = &stage.forward(st.x, i);
  if (stage.is_last()) {
    const std::span<const std::int32_t> labels(batch.y.data() + rows.begin,
                                               static_cast<std::size_t>(rows.size));
    const float weight = static_cast<float>(rows.size) / static_cast<float>(batch.rows());
    st.loss +=
        static_cast<double>(weight) * mlp::softmax_cross_entropy_forward(*out, labels, st.probs);
    Matrix dlogits;
    mlp::softmax_cross_entropy_backward(st.probs, labels, dlogits);
    st.dlogits.push_back(std::move(dlogits));
  }
  // END SOLUTION
  return *out;
}

const Matrix& backward_step(Stage& stage, const Batch& batch, int i, StepState& st) {
  // BEGIN SOLUTION: take the microbatch's output gradient (received, or the oldest queued dlogits on the last stage) and run the stage's backward into st.dx (README: Task 4)
  if (stage.is_last()) {
    if (st.dlogits.empty()) throw std::logic_error("backward_step: no forwarded microbatch left");
    const Matrix dlogits = std::move(st.dlogits.front());
    st.dlogits.pop_front();
    stage.backward(dlogits, i, st.dx);
  } else {
    stage.backward(st.dy, i, st.dx);
  }
  // END SOLUTION
  return st.dx;
}

// =============================================================================================
// Task 5: the 1F1B phase counts.

OneFOneBPlan one_f_one_b_plan(int stages, int stage, int microbatches) {
  // BEGIN SOLUTION: the warm-up, steady and cool-down counts of stage `stage` (README: Task 5)
  OneFOneBPlan plan;
  plan.warmup = std::min(stages - stage - 1, microbatches);
  plan.steady = microbatches - plan.warmup;
  plan.cooldown = plan.warmup;
  return plan;
  // END SOLUTION
}

// =============================================================================================
// Task 6: the schedules.

void run_naive(Stage& stage, const Batch& batch, StepState& st) {
  // BEGIN SOLUTION: the whole batch as one microbatch: receive, forward, send on; then receive the gradient, backward, send it back (README: Task 6)
  const Batch whole{batch.x, batch.y, 1};
  recv_forward(stage, st.x, whole.rows());
  send_forward(stage, forward_step(stage, whole, 0, st));
  recv_backward(stage, st.dy, whole.rows());
  send_backward(stage, backward_step(stage, whole, 0, st));
  // END SOLUTION
}

void run_gpipe(Stage& stage, const Batch& batch, StepState& st) {
  // BEGIN SOLUTION: every microbatch's forward (receive, forward, send) in order, then every microbatch's backward in the same order (README: Task 6)
  const int m = batch.microbatches;
  for (int i = 0; i < m; ++i) {
    recv_forward(stage, st.x, batch.microbatch_rows(i).size);
    send_forward(stage, forward_step(stage, batch, i, st));
  }
  for (int i = 0; i < m; ++i) {
    recv_backward(stage, st.dy, batch.microbatch_rows(i).size);
    send_backward(stage, backward_step(stage, batch, i, st));
  }
  // END SOLUTION
}

void run_1f1b(Stage& stage, const Batch& batch, StepState& st) {
  // BEGIN SOLUTION: the plan's warm-up forwards, then the steady 1F1B loop with the paired helpers, then the cool-down backwards (README: Task 6)
  const OneFOneBPlan plan = one_f_one_b_plan(stage.stages(), stage.stage(), batch.microbatches);
  auto rows = [&](int i) { return batch.microbatch_rows(i).size; };
  int fwd = 0;  // next microbatch to forward
  int bwd = 0;  // next microbatch to backward (oldest first)
  for (int k = 0; k < plan.warmup; ++k, ++fwd) {
    recv_forward(stage, st.x, rows(fwd));
    send_forward(stage, forward_step(stage, batch, fwd, st));
  }
  if (plan.steady > 0) recv_forward(stage, st.x, rows(fwd));
  for (int k = 0; k < plan.steady; ++k) {
    const Matrix& y = forward_step(stage, batch, fwd++, st);
    send_forward_recv_backward(stage, y, st.dy, rows(bwd));
    const Matrix& dx = backward_step(stage, batch, bwd++, st);
    if (k + 1 < plan.steady) {
      send_backward_recv_forward(stage, dx, st.x, rows(fwd));
    } else {
      send_backward(stage, dx);
    }
  }
  for (int k = 0; k < plan.cooldown; ++k, ++bwd) {
    recv_backward(stage, st.dy, rows(bwd));
    send_backward(stage, backward_step(stage, batch, bwd, st));
  }
  // END SOLUTION
}

// =============================================================================================
// Task 7: the training step.

double train_step(Stage& stage, mlp::SGD& opt, const Batch& batch, Schedule schedule) {
  StepState st;
  // BEGIN SOLUTION: zero the gradients, run the chosen schedule, take one optimizer step (README: Task 7)
  stage.zero_grad();
  switch (schedule) {
    case Schedule::Naive:
      run_naive(stage, batch, st);
      break;
    case Schedule::GPipe:
      run_gpipe(stage, batch, st);
      break;
    case Schedule::OneFOneB:
      run_1f1b(stage, batch, st);
      break;
  }
  opt.step();
  // END SOLUTION
  return stage.is_last() ? st.loss : 0.0;
}

// =============================================================================================
// Given code.

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::Naive:
      return "naive";
    case Schedule::GPipe:
      return "gpipe";
    case Schedule::OneFOneB:
      return "1f1b";
  }
  return "?";
}

Schedule schedule_from_string(const std::string& name) {
  if (name == "naive") return Schedule::Naive;
  if (name == "gpipe") return Schedule::GPipe;
  if (name == "1f1b") return Schedule::OneFOneB;
  throw std::invalid_argument("unknown schedule '" + name + "': use naive, gpipe or 1f1b");
}

Range shard_range(int n, int parts, int index) {
  if (n < 0 || parts < 1 || index < 0 || index >= parts) {
    throw std::invalid_argument(
        "shard_range(n=" + std::to_string(n) + ", parts=" + std::to_string(parts) +
        ", index=" + std::to_string(index) + "): need n >= 0, parts >= 1 and 0 <= index < parts");
  }
  const int base = n / parts;
  const int extra = n % parts;
  return Range{index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

std::int64_t Stash::bytes() const {
  std::int64_t n = input.size();
  for (const Matrix& m : z) n += m.size();
  for (const Matrix& m : h) n += m.size();
  return n * static_cast<std::int64_t>(sizeof(float));
}

Stage::Stage(const mlp::Config& config, std::uint64_t seed, int stage, int stages, CostModel cost)
    : config_(config), stage_(stage), stages_(stages), cost_(cost) {
  config_.validate();
  layers_ = stage_layers(config_.n_layers, stages, stage);
  if (layers_.size < 1) {
    throw std::invalid_argument("Stage: stage " + std::to_string(stage) + " of " +
                                std::to_string(stages) + " got no layers");
  }
  mlp::MLP whole(config_, seed);
  const auto params = whole.parameters();
  for (int k = 0; k < layers_.size; ++k) {
    weights_.push_back(*params.at(static_cast<std::size_t>(layers_.begin + k)));
  }
  zero_grad();
}

void Stage::zero_grad() {
  for (mlp::Parameter& p : weights_) p.grad.setZero(p.value.rows(), p.value.cols());
}

std::vector<mlp::Parameter*> Stage::parameters() {
  std::vector<mlp::Parameter*> out;
  for (auto& p : weights_) out.push_back(&p);
  return out;
}

std::vector<const mlp::Parameter*> Stage::parameters() const {
  std::vector<const mlp::Parameter*> out;
  for (const auto& p : weights_) out.push_back(&p);
  return out;
}

void Stage::charge_forward(std::int64_t rows, int microbatch) {
  double s = 0;
  for (int l = layers_.begin; l < layers_.end(); ++l) s += cost_.forward_seconds(config_, l, rows);
  std::string name(1, 'F');
  name += std::to_string(microbatch);
  const double t0 = dist::in_launch() ? dist::sim_time() : 0.0;
  if (dist::in_launch()) dist::sim_compute(s, name.c_str());
  spans_.push_back({name, t0, t0 + s});
  busy_s_ += s;
}

void Stage::charge_backward(std::int64_t rows, int microbatch) {
  double s = 0;
  for (int l = layers_.begin; l < layers_.end(); ++l) s += cost_.backward_seconds(config_, l, rows);
  std::string name(1, 'B');
  name += std::to_string(microbatch);
  const double t0 = dist::in_launch() ? dist::sim_time() : 0.0;
  if (dist::in_launch()) dist::sim_compute(s, name.c_str());
  spans_.push_back({name, t0, t0 + s});
  busy_s_ += s;
}

void Stage::stash_push(int microbatch, Stash stash) {
  const std::int64_t bytes = stash.bytes();
  if (!stash_.emplace(microbatch, std::move(stash)).second) {
    throw std::logic_error("Stage::stash_push: stage " + std::to_string(stage_) +
                           " already holds the stash of microbatch " + std::to_string(microbatch));
  }
  meter_.add(bytes);
}

Stash Stage::stash_pop(int microbatch) {
  auto it = stash_.find(microbatch);
  if (it == stash_.end()) {
    throw std::logic_error("Stage::stash_pop: stage " + std::to_string(stage_) +
                           " has no stash for microbatch " + std::to_string(microbatch) +
                           " (backward before its forward?)");
  }
  Stash s = std::move(it->second);
  stash_.erase(it);
  meter_.remove(s.bytes());
  return s;
}

}  // namespace pp
