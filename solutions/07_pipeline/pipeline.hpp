// 07_pipeline: 05's MLP cut into stages of consecutive layers, one stage per rank, trained with
// pipeline schedules written with dist point-to-point calls only.
//
//   rank 0: layers [0, a)   --activations-->   rank 1: layers [a, b)   -->  ...  --> rank p-1: loss
//           d loss / d input   <--gradients--
//
// A batch of B rows is cut into m microbatches (row blocks). Schedules (p stages, m microbatches;
// with equal stages tf and tb = 2 tf the time of one microbatch's forward and backward on a stage):
//
//   naive   the whole batch forward through the stages, then backward     bubble (p-1)/p
//   GPipe   all m forwards, then all m backwards                           bubble (p-1)/(m+p-1)
//   1F1B    after a warm-up of forwards, stage r alternates one forward    bubble (p-1)/(m+p-1)
//           and one backward, then finishes the backwards                  stash <= p-r microbatches
//   ZB-H1   1F1B with each backward split into B (the input gradient,      bubble (p-1)/(3m+p-1),
//           which the previous stage waits for) and W (the weight          m >= p (README: Task 10)
//           gradient, which nobody waits for), W deferred into bubbles     stash <= p microbatches
//   interleaved 1F1B: v chunks per rank (virtual stages), chunk g on rank  bubble (p-1)/(vm+p-1)
//           g mod p; a microbatch visits every rank v times               (README: Task 13)
//
// Activation recomputation (any schedule): a stage stashes only its input per microbatch and runs
// its forward again at the start of the backward: less memory, backward tb + tf instead of tb.
//
// The gradient of a batch is accumulated over its microbatches (each microbatch's loss gradient
// weighted by its share of the rows, rows_i / B, so the sum is the gradient of the batch's mean
// loss), and the stage takes ONE SGD step per batch: the result equals single-process training on
// the whole batch, which is what the tests check, together with the traffic, the simulated time and
// the peak of stashed activations (cost_meter.hpp). See README.md for the tasks.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cost_meter.hpp"
#include "dist/dist.hpp"
#include "mlp.hpp"

namespace pp {

using Matrix = mlp::Matrix;
using Labels = mlp::Labels;

enum class Schedule { Naive, GPipe, OneFOneB, ZeroBubble, Interleaved };
const char* to_string(Schedule s);  // "naive", "gpipe", "1f1b", "zb", "interleaved"
/// Parses "naive", "gpipe", "1f1b", "zb" or "interleaved" (else std::invalid_argument).
Schedule schedule_from_string(const std::string& name);

/// A half-open range [begin, begin + size) of layers or rows.
struct Range {
  int begin = 0;
  int size = 0;
  int end() const { return begin + size; }
};

/// Given: part `index` of `parts` near-equal parts of [0, n): sizes differ by at most one, the
/// first n % parts parts are the larger ones (04's shard_range). Microbatch rows use it.
Range shard_range(int n, int parts, int index);

/// Task 1. The layers of stage `stage` of `stages` for a model of `n_layers` layers: consecutive,
/// near-equal (sizes differ by at most one, the EARLIER stages get the extra layers), together
/// every layer exactly once. Needs 1 <= stages <= n_layers (else std::invalid_argument).
Range stage_layers(int n_layers, int stages, int stage);

/// What one microbatch's forward leaves on its stage for the backward: the stage's input and,
/// for every layer of the stage, its output before (z) and after (h) the activation (the model's
/// last layer has no activation: its h is empty). These bytes are what the meter counts. With
/// recomputation on, only the input (z and h are empty vectors).
struct Stash {
  Matrix input;
  std::vector<Matrix> z;
  std::vector<Matrix> h;
  std::int64_t bytes() const;
};

/// One pipeline stage: layers stage_layers(n_layers, stages, stage) of the model MLP(config, seed)
/// (the same seed on every rank gives every stage its slice of the same initial model).
class Stage {
 public:
  /// Given. Builds the whole model and keeps this stage's weights.
  Stage(const mlp::Config& config, std::uint64_t seed, int stage, int stages, CostModel cost = {});

  /// Task 2. The forward of microbatch `microbatch` on this stage, through the 05 building blocks
  /// (the model's last layer has no activation), charged once with charge_forward. Its Stash is
  /// stored with stash_push() until the backward. Returns the stage's output (the activation for
  /// the next stage, or the logits on the last stage), valid until the next call.
  /// Task 8: with recompute() on, the stash holds the input only.
  const Matrix& forward(const Matrix& x, int microbatch);
  /// Task 2. The backward of microbatch `microbatch`, given dy = d loss / d output, charged once
  /// with charge_backward; takes the microbatch's stash back with stash_pop(). The weight
  /// gradients are ADDED to grad (accumulation over microbatches); dx = d loss / d input for the
  /// previous stage (not needed, and not written, on the first stage).
  /// Task 8: with recompute() on, the stage first runs its forward again from the stashed input,
  /// charged with charge_recompute (span R<i>), and then backpropagates as without.
  void backward(const Matrix& dy, int microbatch, Matrix& dx);

  /// Task 9. The backward split in two (ZB-H1). backward_input is B: charged once with
  /// charge_backward_input (span B<i>), it writes dx as backward does (not on the first stage) and
  /// touches no gradient; the microbatch stays stashed (same bytes) until its W. backward_weight is
  /// W: charged once with charge_backward_weight (span W<i>), it ADDS the weight gradients and
  /// releases the stash. B then W of a microbatch give the same dx and gradients as backward; W
  /// before the microbatch's B throws std::logic_error. With recompute() on, B recomputes first.
  void backward_input(const Matrix& dy, int microbatch, Matrix& dx);
  void backward_weight(int microbatch);

  /// Given. Activation recomputation on or off (off by default); see forward and backward.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

  /// Given, for interleaved 1F1B, where a rank holds several chunks (each a Stage whose stage()
  /// is the global chunk number and stages() = v p): the rank's local chunk number c of this
  /// chunk (its spans are named F<i>.c, B<i>.c when c > 0), and a meter of the whole rank that
  /// stash_push / stash_pop also count in (nullptr: none).
  void set_chunk(int local_chunk) { chunk_ = local_chunk; }
  int chunk() const { return chunk_; }
  void set_rank_meter(ActivationMeter* meter) { rank_meter_ = meter; }

  /// Given. Zeroes this stage's gradients (call before the first microbatch of a batch).
  void zero_grad();
  /// This stage's weights, first layer first (parameters()[k] is layer layers().begin + k).
  std::vector<mlp::Parameter*> parameters();
  std::vector<const mlp::Parameter*> parameters() const;

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages_ - 1; }
  Range layers() const { return layers_; }
  int in_features() const { return config_.layer_in(layers_.begin); }
  int out_features() const { return config_.layer_out(layers_.end() - 1); }
  const mlp::Config& config() const { return config_; }
  const CostModel& cost() const { return cost_; }
  ActivationMeter& meter() { return meter_; }
  const ActivationMeter& meter() const { return meter_; }

  /// A span charged on the simulated clock from t0 to t1 (seconds): "F<i>" forward, "B<i>"
  /// backward (whole, or B of ZB-H1), "W<i>" weight gradient, "R<i>" recomputed forward.
  struct Span {
    std::string name;
    double t0;
    double t1;
  };
  const std::vector<Span>& spans() const { return spans_; }
  /// Total compute charged so far (seconds); the busy time of the bubble fraction.
  double busy_seconds() const { return busy_s_; }
  void clear_spans() {
    spans_.clear();
    busy_s_ = 0;
  }

  /// Given. Charge this stage's forward / backward of `rows` rows to the simulated clock, as one
  /// span named F<microbatch> / B<microbatch> (the cost model in cost_meter.hpp).
  void charge_forward(std::int64_t rows, int microbatch);
  void charge_backward(std::int64_t rows, int microbatch);
  /// Given. The two halves of charge_backward (each half its time): B<microbatch> and
  /// W<microbatch>; and a recomputed forward (a forward's time), R<microbatch>.
  void charge_backward_input(std::int64_t rows, int microbatch);
  void charge_backward_weight(std::int64_t rows, int microbatch);
  void charge_recompute(std::int64_t rows, int microbatch);
  /// Given. Store / take back (and remove from the store) the stash of a microbatch; the meter
  /// counts it from push to pop. Popping a microbatch that was not pushed throws.
  void stash_push(int microbatch, Stash stash);
  Stash stash_pop(int microbatch);

 private:
  mlp::Config config_;
  int stage_;
  int stages_;
  Range layers_;
  CostModel cost_;
  std::vector<mlp::Parameter> weights_;  // weights_[k]: layer layers_.begin + k
  std::map<int, Stash> stash_;           // microbatch -> its stash, from forward to backward
  ActivationMeter meter_;
  std::vector<Span> spans_;
  double busy_s_ = 0;
  bool recompute_ = false;
  int chunk_ = 0;
  ActivationMeter* rank_meter_ = nullptr;
  Matrix out_;                     // forward's output
  Matrix grad_scratch_, dh_, dz_;  // backward's buffers
  void charge(char kind, double seconds, int microbatch);
  std::set<int> pending_w_;  // Task 9: microbatches whose B has run and whose W has not
};

// ---------------------------------------------------------------------------------------------
// Communication helpers, named for the direction the data goes (picotron's pp_communications).
// Stage s is rank s. Activations go forward to s+1, gradients backward to s-1; a helper whose
// peer does not exist (sending forward from the last stage, receiving forward on the first, ...)
// does nothing. Receives resize the matrix to rows x (the features the peer sends) first.
// send is synchronous (it returns once the peer has received), so a schedule in which two
// neighbours both send at the same moment deadlocks: the paired helpers post both directions
// at once (isend + irecv, then wait on both).

/// The tags of the two directions (so a forward and a backward message are never confused).
inline constexpr int kForwardTag = 7;   // activations, stage s -> s+1
inline constexpr int kBackwardTag = 8;  // gradients, stage s -> s-1

/// Task 3.
void send_forward(const Stage& stage, const Matrix& y);
void recv_forward(const Stage& stage, Matrix& x, int rows);
void send_backward(const Stage& stage, const Matrix& dx);
void recv_backward(const Stage& stage, Matrix& dy, int rows);
/// Send y to the next stage and receive dy (rows rows) from it, both in flight at once.
void send_forward_recv_backward(const Stage& stage, const Matrix& y, Matrix& dy, int rows);
/// Send dx to the previous stage and receive x (rows rows) from it, both in flight at once.
void send_backward_recv_forward(const Stage& stage, const Matrix& dx, Matrix& x, int rows);

// ---------------------------------------------------------------------------------------------
// One batch and the schedules.

/// The batch of one step, the same on every rank (stage 0 reads x, the last stage y), cut into
/// `microbatches` row blocks: microbatch i is rows shard_range(B, microbatches, i).
struct Batch {
  const Matrix& x;
  const Labels& y;
  int microbatches = 1;
  int rows() const { return static_cast<int>(x.rows()); }
  Range microbatch_rows(int i) const { return shard_range(rows(), microbatches, i); }
};

/// What a step's microbatches pass between forward_step and backward_step on one rank.
struct StepState {
  Matrix x;                    // the input of the microbatch being forwarded (received or sliced)
  Matrix dy;                   // the gradient of the microbatch being backwarded (received)
  Matrix dx;                   // backward_step's output, for the previous stage
  Matrix probs;                // softmax scratch (last stage)
  std::deque<Matrix> dlogits;  // last stage: loss gradients of forwarded microbatches, oldest first
  double loss = 0;             // last stage: the batch's mean loss, summed over microbatches
  std::deque<Matrix> outbox;   // run_ops: copies of the messages still in flight
  std::vector<dist::Work> sends;  // run_ops: their sends
};

/// Task 4. Forward of microbatch i on this stage. Stage 0 takes the microbatch's rows of batch.x
/// into st.x; other stages forward st.x as received. On the last stage also: the microbatch's
/// softmax cross-entropy (05's functions), st.loss += loss * rows_i / B, and its dlogits scaled by
/// rows_i / B pushed to st.dlogits. Returns the stage's output (to send forward).
const Matrix& forward_step(Stage& stage, const Batch& batch, int i, StepState& st);
/// Task 4. Backward of microbatch i: dy is st.dy as received, or on the last stage the oldest
/// st.dlogits (popped). On the last stage an empty st.dlogits (no forwarded microbatch left to
/// backward) throws std::logic_error. Returns st.dx (to send backward).
const Matrix& backward_step(Stage& stage, const Batch& batch, int i, StepState& st);

/// How many microbatches stage r of p runs in each phase of 1F1B with m microbatches.
/// Contracts: every microbatch is forwarded once and backwarded once (warmup + steady = m =
/// steady + cooldown); stage r never holds more than p - r microbatches stashed (nor more than
/// m); the last stage starts each microbatch's backward right after its forward; and no stage
/// waits longer than it must, so on equal stages the step takes (m+p-1)(tf+tb).
struct OneFOneBPlan {
  int warmup = 0;    // forwards before the first backward
  int steady = 0;    // one forward + one backward each
  int cooldown = 0;  // backwards after the last forward
};
/// Task 5.
OneFOneBPlan one_f_one_b_plan(int stages, int stage, int microbatches);

/// Task 6. The schedules: one step's forwards and backwards on this stage, with the helpers above.
/// naive ignores batch.microbatches (the whole batch is microbatch 0).
void run_naive(Stage& stage, const Batch& batch, StepState& st);
void run_gpipe(Stage& stage, const Batch& batch, StepState& st);
void run_1f1b(Stage& stage, const Batch& batch, StepState& st);

// ---------------------------------------------------------------------------------------------
// Schedules as data (Megatron-LM's and the zero-bubble repository's way): one stage's operations
// in order, computed first, checked, then run by one executor.

/// One operation of a rank: F forward, BW the whole backward (B and W together), B the input
/// gradient only, W the weight gradient only (the spans F<i>, B<i>, B<i>, W<i>), of microbatch
/// `microbatch` on the rank's local chunk `chunk` (0 except in interleaved 1F1B).
enum class OpKind { F, BW, B, W };
struct Op {
  OpKind kind = OpKind::F;
  int microbatch = 0;
  int chunk = 0;
  bool operator==(const Op&) const = default;
};
std::string to_string(const Op& op);  // "F3", "BW3", "B3", "W3"; chunk c > 0: "F3.1", ...

/// Task 10. Stage `stage`'s operations in ZB-H1 with m microbatches (any m >= 1, else
/// std::invalid_argument): each microbatch's F, B and W once, F before B before W; forwards in
/// microbatch order, B in microbatch order, W in microbatch order. The contracts (README: Task 10):
/// at most p microbatches stashed at once on any stage (1F1B's peak on stage 0: a microbatch is
/// stashed from its F to its W), and on equal stages with F = B = W = tf and free communication the
/// step takes (3m + p - 1) tf when m >= p, (2m + 2p - 1) tf when m < p.
std::vector<Op> zb_h1_ops(int stages, int stage, int microbatches);

/// Task 12. The rank that holds global chunk `chunk` when the model is cut into `ranks` x v
/// chunks (interleaved 1F1B: chunk g on rank g mod p, so rank r holds chunks r, r + p, r + 2p,
/// ...; with v = 1 chunk g is stage g on rank g).
int chunk_rank(int chunk, int ranks);

/// Task 11. Runs a rank's operations in order; chunks[c] is the rank's local chunk c (one Stage
/// per chunk, stage() its global chunk number; a single Stage without interleaving), and an
/// operation runs on chunks[op.chunk]. Each F and each backward first receives what it needs
/// from the rank of the neighbouring chunk (chunk_rank; activations with kForwardTag, gradients
/// with kBackwardTag, shaped like the task 3 helpers' receives) and, once computed, sends its
/// result to the rank of the other neighbouring chunk without waiting for it to be taken: no rank
/// is ever blocked sending, so any lists in which every receive's message is produced by the
/// neighbour's list (and a rank sends to a neighbour in the order the neighbour receives) run
/// without deadlock, and each message leaves as soon as it is computed. Every send has completed
/// when run_ops returns. F, BW: forward_step, backward_step; B: the input gradient of the last
/// chunk's oldest queued dlogits or of the received gradient; W: backward_weight. Traffic: one
/// message per F and per B or BW whose chunk has a neighbour in that direction.
void run_ops(std::span<Stage> chunks, const Batch& batch, const std::vector<Op>& ops,
             StepState& st);
/// Given: run_ops on a single stage.
void run_ops(Stage& stage, const Batch& batch, const std::vector<Op>& ops, StepState& st);

/// Task 13. Rank `rank`'s operations in interleaved 1F1B with v = `chunks` chunks per rank and m
/// microbatches: F and BW of every (local chunk, microbatch) once. Needs chunks >= 1 and m >= 1,
/// and m a multiple of p when v >= 2 (else std::invalid_argument, saying so). Contracts (README:
/// Task 13): a microbatch's F on global chunk g after its F on g - 1, its BW on g after its BW on
/// g + 1; a rank sends to each neighbour in the order the neighbour receives; at most v p - r
/// (chunk, microbatch) stashes on rank r (nor more than v m); with v = 1 it is 1F1B (the same
/// order as run_1f1b); on equal chunks with free communication the step takes
/// (m + (p-1)/v)(tf + tb), tf and tb a whole rank's (v chunks') forward and backward.
std::vector<Op> interleaved_ops(int ranks, int rank, int microbatches, int chunks);

/// Given. This rank's chunks for interleaved 1F1B with v = `chunks` chunks per rank: the model
/// cut into v p chunks by stage_layers, the chunks g with chunk_rank(g, p) == this rank in
/// increasing g (local chunk c is the c-th), each with set_chunk(c) and the rank meter. Every rank
/// builds its chunks of the same model (same seed). Needs v p <= the layers (else
/// std::invalid_argument).
std::vector<Stage> make_rank_chunks(const mlp::Config& config, std::uint64_t seed, int chunks,
                                    CostModel cost = {}, ActivationMeter* rank_meter = nullptr);

/// Given. One training step of interleaved 1F1B on a rank's chunks (as run_ops takes them; the
/// optimizer holds every chunk's weights): zero every chunk's gradients, run
/// interleaved_ops(p, rank, m, chunks.size()) with run_ops, one SGD step. Returns the batch's
/// mean loss on the rank of the last chunk (0 on the others).
double train_step_interleaved(std::span<Stage> chunks, mlp::SGD& opt, const Batch& batch);

/// Task 7. One training step: zero the gradients, run the schedule, one SGD step. Returns the
/// batch's mean loss on the last stage (0 on the others).
double train_step(Stage& stage, mlp::SGD& opt, const Batch& batch, Schedule schedule);

}  // namespace pp
