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
  DISTLAB_TODO("the consecutive layers this stage holds: a near-equal cut of the model's layers "
               "over the stages, earlier stages larger, no layer lost (README: Tasks, 1)");
}

// =============================================================================================
// Task 2: a stage's forward and backward, through 05's building blocks.

// TODO: helpers of your own for Tasks 2, 8 and 9, if you want them

const Matrix& Stage::forward(const Matrix& x, int microbatch) {
  if (x.cols() != in_features()) {
    throw std::invalid_argument("Stage::forward: stage " + std::to_string(stage_) + " expects " +
                                std::to_string(in_features()) + " input features, got " +
                                std::to_string(x.cols()));
  }
  DISTLAB_TODO("run this stage's layers on microbatch x with 05's building blocks, charging the "
               "modelled compute, and keep in the microbatch's stash everything this stage's "
               "backward will read, or only the input with recomputation on (README: Tasks 2 and "
               "8)");
  return out_;
}

void Stage::backward(const Matrix& dy, int microbatch, Matrix& dx) {
  if (dy.cols() != out_features()) {
    throw std::invalid_argument("Stage::backward: stage " + std::to_string(stage_) + " expects a " +
                                "gradient of " + std::to_string(out_features()) +
                                " features, got " + std::to_string(dy.cols()));
  }
  DISTLAB_TODO("backpropagate dy through this stage's layers from the microbatch's stash "
               "(recomputed first with recomputation on), charging the modelled compute, ADDING "
               "each weight gradient (microbatches accumulate), and producing dx except where "
               "nobody needs it (README: Tasks 2 and 8)");
}

// =============================================================================================
// Task 9: the backward split into B (input gradient) and W (weight gradient).

void Stage::backward_input(const Matrix& dy, int microbatch, Matrix& dx) {
  if (dy.cols() != out_features()) {
    throw std::invalid_argument("Stage::backward_input: stage " + std::to_string(stage_) +
                                " expects a gradient of " + std::to_string(out_features()) +
                                " features, got " + std::to_string(dy.cols()));
  }
  DISTLAB_TODO("the input-gradient half of the backward: dx as backward gives it, no weight "
               "gradient yet, and the microbatch stays stashed with what its W will need (README: "
               "Task 9)");
}

void Stage::backward_weight(int microbatch) {
  DISTLAB_TODO("the weight-gradient half: ADD this microbatch's weight gradients and release its "
               "stash; only after the microbatch's B (README: Task 9)");
}

// =============================================================================================
// Task 3: the communication helpers.

void send_forward(const Stage& stage, const Matrix& y) {
  DISTLAB_TODO("pass this stage's activations on to the next stage, if there is one (README: "
               "Tasks, 3; the tags in pipeline.hpp)");
}

void recv_forward(const Stage& stage, Matrix& x, int rows) {
  DISTLAB_TODO("receive this microbatch's input activations from the previous stage, if there is "
               "one, into a buffer of the right shape (README: Tasks, 3)");
}

void send_backward(const Stage& stage, const Matrix& dx) {
  DISTLAB_TODO("pass this stage's input gradient back to the previous stage, if there is one "
               "(README: Tasks, 3)");
}

void recv_backward(const Stage& stage, Matrix& dy, int rows) {
  DISTLAB_TODO("receive this microbatch's output gradient from the next stage, if there is one, "
               "into a buffer of the right shape (README: Tasks, 3)");
}

void send_forward_recv_backward(const Stage& stage, const Matrix& y, Matrix& dy, int rows) {
  DISTLAB_TODO("the send of send_forward and the receive of recv_backward, both with the next "
               "stage, in flight at the same time so neither waits for the other (README: Tasks, "
               "3; pipeline.hpp)");
}

void send_backward_recv_forward(const Stage& stage, const Matrix& dx, Matrix& x, int rows) {
  DISTLAB_TODO("the send of send_backward and the receive of recv_forward, both with the previous "
               "stage, in flight at the same time (README: Tasks, 3; pipeline.hpp)");
}

// =============================================================================================
// Task 4: one microbatch forward and backward, with the loss on the last stage.

const Matrix& forward_step(Stage& stage, const Batch& batch, int i, StepState& st) {
  const Matrix* out = &st.x;
  DISTLAB_TODO("the forward of microbatch i on this stage; on the last stage also its share of "
               "the batch's loss and the gradient its backward will start from (README: Task 4: "
               "weighting by rows)");
  return *out;
}

const Matrix& backward_step(Stage& stage, const Batch& batch, int i, StepState& st) {
  DISTLAB_TODO("the backward of microbatch i on this stage, starting from the right output "
               "gradient for this stage (README: Task 4)");
  return st.dx;
}

// =============================================================================================
// Task 5: the 1F1B phase counts.

OneFOneBPlan one_f_one_b_plan(int stages, int stage, int microbatches) {
  DISTLAB_TODO("how many forwards stage `stage` runs before its first backward, how many "
               "one-forward-one-backward steps follow, and how many backwards finish the batch "
               "(README: Tasks, 5)");
}

// =============================================================================================
// Task 6: the schedules.

void run_naive(Stage& stage, const Batch& batch, StepState& st) {
  DISTLAB_TODO("the naive schedule: the whole batch as one microbatch through all stages forward, "
               "then backward (README: Task 6)");
}

void run_gpipe(Stage& stage, const Batch& batch, StepState& st) {
  DISTLAB_TODO("the GPipe schedule: all microbatches forward, then all backward (README: Task 6)");
}

void run_1f1b(Stage& stage, const Batch& batch, StepState& st) {
  DISTLAB_TODO("the 1F1B schedule from one_f_one_b_plan: warm-up, steady one-forward-one-backward "
               "phase with the paired helpers, cool-down (README: Task 6)");
}

// =============================================================================================
// Task 10: ZB-H1 as a list of operations.

std::vector<Op> zb_h1_ops(int stages, int stage, int microbatches) {
  if (stages < 1 || stage < 0 || stage >= stages || microbatches < 1) {
    throw std::invalid_argument("zb_h1_ops(stages=" + std::to_string(stages) +
                                ", stage=" + std::to_string(stage) +
                                ", microbatches=" + std::to_string(microbatches) +
                                "): need stages >= 1, 0 <= stage < stages, microbatches >= 1");
  }
  std::vector<Op> ops;
  DISTLAB_TODO("this stage's F, B and W of every microbatch, in an order that keeps at most p "
               "microbatches stashed and fills the stage's bubbles with W (README: Task 10)");
  return ops;
}

// =============================================================================================
// Task 11: the executor of a schedule given as data.

void run_ops(std::span<Stage> chunks, const Batch& batch, const std::vector<Op>& ops,
             StepState& st) {
  DISTLAB_TODO("run each operation in order on its chunk: receive its input from the rank of the "
               "neighbouring chunk, compute, send the result on without waiting for it to be "
               "taken; every send complete before returning (README: Task 11)");
}

// =============================================================================================
// Task 12: which rank holds a chunk.

int chunk_rank(int chunk, int ranks) {
  if (ranks < 1 || chunk < 0) {
    throw std::invalid_argument("chunk_rank(chunk=" + std::to_string(chunk) + ", ranks=" +
                                std::to_string(ranks) + "): need chunk >= 0 and ranks >= 1");
  }
  DISTLAB_TODO("the rank of global chunk `chunk` in the interleaved layout (README: Task 12)");
}

// =============================================================================================
// Task 13: interleaved 1F1B as a list of operations.

std::vector<Op> interleaved_ops(int ranks, int rank, int microbatches, int chunks) {
  if (ranks < 1 || rank < 0 || rank >= ranks || microbatches < 1 || chunks < 1) {
    throw std::invalid_argument(
        "interleaved_ops(ranks=" + std::to_string(ranks) + ", rank=" + std::to_string(rank) +
        ", microbatches=" + std::to_string(microbatches) + ", chunks=" + std::to_string(chunks) +
        "): need ranks >= 1, 0 <= rank < ranks, microbatches >= 1, "
        "chunks >= 1");
  }
  std::vector<Op> ops;
  DISTLAB_TODO("this rank's forwards and backwards over its chunks: warm-up, the steady "
               "one-forward-one-backward phase across chunks, cool-down; m a multiple of p when "
               "there are several chunks (README: Task 13)");
  return ops;
}

// =============================================================================================
// Task 7: the training step.

double train_step(Stage& stage, mlp::SGD& opt, const Batch& batch, Schedule schedule) {
  if (schedule == Schedule::Interleaved) {
    throw std::invalid_argument(
        "train_step: interleaved 1F1B runs on a rank's chunks: use train_step_interleaved");
  }
  StepState st;
  DISTLAB_TODO("one optimizer step on this stage for the whole batch with the chosen schedule "
               "(README: Tasks, 7)");
  return stage.is_last() ? st.loss : 0.0;
}

// =============================================================================================
// Given code.

void run_ops(Stage& stage, const Batch& batch, const std::vector<Op>& ops, StepState& st) {
  run_ops(std::span<Stage>(&stage, 1), batch, ops, st);
}

std::vector<Stage> make_rank_chunks(const mlp::Config& config, std::uint64_t seed, int chunks,
                                    CostModel cost, ActivationMeter* rank_meter) {
  const int p = dist::world_size(), rank = dist::rank();
  if (chunks < 1 || chunks * p > config.n_layers) {
    throw std::invalid_argument("make_rank_chunks: " + std::to_string(chunks) +
                                " chunks per rank on " + std::to_string(p) + " ranks need " +
                                std::to_string(chunks * p) + " layers or more, the model has " +
                                std::to_string(config.n_layers));
  }
  std::vector<Stage> out;
  out.reserve(static_cast<std::size_t>(chunks));
  for (int g = 0; g < chunks * p; ++g) {
    if (chunk_rank(g, p) != rank) continue;
    out.emplace_back(config, seed, g, chunks * p, cost);
    out.back().set_chunk(static_cast<int>(out.size()) - 1);
    out.back().set_rank_meter(rank_meter);
  }
  if (static_cast<int>(out.size()) != chunks) {
    throw std::logic_error("make_rank_chunks: rank " + std::to_string(rank) + " got " +
                           std::to_string(out.size()) + " chunks, expected " +
                           std::to_string(chunks) + " (check chunk_rank)");
  }
  return out;
}

double train_step_interleaved(std::span<Stage> chunks, mlp::SGD& opt, const Batch& batch) {
  if (chunks.empty()) throw std::invalid_argument("train_step_interleaved: no chunks");
  StepState st;
  for (Stage& c : chunks) c.zero_grad();
  run_ops(chunks, batch,
          interleaved_ops(dist::world_size(), dist::rank(), batch.microbatches,
                          static_cast<int>(chunks.size())),
          st);
  opt.step();
  for (const Stage& c : chunks) {
    if (c.is_last()) return st.loss;
  }
  return 0.0;
}

const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::Naive:
      return "naive";
    case Schedule::GPipe:
      return "gpipe";
    case Schedule::OneFOneB:
      return "1f1b";
    case Schedule::ZeroBubble:
      return "zb";
    case Schedule::Interleaved:
      return "interleaved";
  }
  return "?";
}

std::string to_string(const Op& op) {
  static const char* const names[] = {"F", "BW", "B", "W"};
  std::string s = names[static_cast<int>(op.kind)] + std::to_string(op.microbatch);
  if (op.chunk > 0) s += "." + std::to_string(op.chunk);
  return s;
}

Schedule schedule_from_string(const std::string& name) {
  if (name == "naive") return Schedule::Naive;
  if (name == "gpipe") return Schedule::GPipe;
  if (name == "1f1b") return Schedule::OneFOneB;
  if (name == "zb") return Schedule::ZeroBubble;
  if (name == "interleaved") return Schedule::Interleaved;
  throw std::invalid_argument("unknown schedule '" + name +
                              "': use naive, gpipe, 1f1b, zb or interleaved");
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

void Stage::charge(char kind, double seconds, int microbatch) {
  std::string name(1, kind);
  name += std::to_string(microbatch);
  if (chunk_ > 0) name += "." + std::to_string(chunk_);
  const double t0 = dist::in_launch() ? dist::sim_time() : 0.0;
  if (dist::in_launch()) dist::sim_compute(seconds, name.c_str());
  spans_.push_back({name, t0, t0 + seconds});
  busy_s_ += seconds;
}

void Stage::charge_forward(std::int64_t rows, int microbatch) {
  double s = 0;
  for (int l = layers_.begin; l < layers_.end(); ++l) s += cost_.forward_seconds(config_, l, rows);
  charge('F', s, microbatch);
}

void Stage::charge_backward(std::int64_t rows, int microbatch) {
  double s = 0;
  for (int l = layers_.begin; l < layers_.end(); ++l) s += cost_.backward_seconds(config_, l, rows);
  charge('B', s, microbatch);
}

void Stage::charge_backward_input(std::int64_t rows, int microbatch) {
  double s = 0;
  for (int l = layers_.begin; l < layers_.end(); ++l) s += cost_.backward_seconds(config_, l, rows);
  charge('B', s / 2, microbatch);
}

void Stage::charge_backward_weight(std::int64_t rows, int microbatch) {
  double s = 0;
  for (int l = layers_.begin; l < layers_.end(); ++l) s += cost_.backward_seconds(config_, l, rows);
  charge('W', s / 2, microbatch);
}

void Stage::charge_recompute(std::int64_t rows, int microbatch) {
  double s = 0;
  for (int l = layers_.begin; l < layers_.end(); ++l) s += cost_.forward_seconds(config_, l, rows);
  charge('R', s, microbatch);
}

void Stage::stash_push(int microbatch, Stash stash) {
  const std::int64_t bytes = stash.bytes();
  if (!stash_.emplace(microbatch, std::move(stash)).second) {
    throw std::logic_error("Stage::stash_push: stage " + std::to_string(stage_) +
                           " already holds the stash of microbatch " + std::to_string(microbatch));
  }
  meter_.add(bytes);
  if (rank_meter_ != nullptr) rank_meter_->add(bytes);
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
  if (rank_meter_ != nullptr) rank_meter_->remove(s.bytes());
  return s;
}

}  // namespace pp
