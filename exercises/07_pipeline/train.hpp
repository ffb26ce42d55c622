// Given code for 07_pipeline: the training loop, the measurement of one step on the simulated
// clock (step time, bubble fraction, peak stash, traffic), the text timeline and the trace's
// memory counter tracks.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "datasets/classification.hpp"
#include "pipeline.hpp"

namespace pp {

/// The settings of a pipeline run; the stages are the ranks (--stages / --world-size).
struct PipelineConfig {
  mlp::Config model;                       // 05's model and training settings (seed config)
  int microbatches = 8;                    // m: microbatches per batch (naive ignores it)
  Schedule schedule = Schedule::OneFOneB;  // naive, gpipe, 1f1b or zb
  bool recompute = false;                  // activation recomputation on every stage
  int chunks = 1;                          // v: chunks per rank (interleaved only)
  CostModel cost;                          // modelled compute speed of every stage
  /// Throws std::invalid_argument saying which field is wrong (for `stages` ranks).
  void validate(int stages) const;
};

/// One step as the simulated clock saw it, on this rank.
struct StepMeasure {
  double loss = 0;                 // the batch's mean loss (last stage; 0 elsewhere)
  double t0 = 0;                   // simulated time of the step's start (the same on every rank)
  double step_s = 0;               // the step's simulated time, first start to last finish
  double busy_s = 0;               // this stage's compute in the step
  double bubble = 0;               // 1 - (sum of every stage's busy) / (stages * step_s)
  int peak_microbatches = 0;       // most microbatches stashed at once on this stage
  std::int64_t peak_bytes = 0;     // most stashed bytes at once on this stage
  dist::Stats stats;               // this rank's traffic in the step
  std::vector<Stage::Span> spans;  // this stage's F/B spans, seconds since the step's start
  std::vector<ActivationMeter::Sample> memory;  // stash changes, seconds since the step's start
};

/// One train_step between two barriers, measured. A collective: every rank calls it.
StepMeasure measured_step(Stage& stage, mlp::SGD& opt, const Batch& batch, Schedule schedule);
/// The same for interleaved 1F1B on a rank's chunks (make_rank_chunks with `meter` as the rank
/// meter): peak stash from `meter`, spans of every chunk in time order.
StepMeasure measured_step_interleaved(std::span<Stage> chunks, ActivationMeter& meter,
                                      mlp::SGD& opt, const Batch& batch);
/// Every weight of a rank's stages (one stage, or its chunks), in local order.
std::vector<mlp::Parameter*> all_parameters(std::span<Stage> stages);

/// The closed forms with equal stages and free communication, tf and tb being one stage's
/// forward and backward of ONE microbatch (naive: of the whole batch, m = 1); the kit's cost
/// model has tb = 2 tf, and ZB-H1's B and W take tf each:
///   naive        p (tf + tb)                             bubble (p-1)/p
///   gpipe, 1f1b  (m + p - 1)(tf + tb)                    bubble (p-1)/(m+p-1)
///   zb           (2m + p - 1 + max(m, p)) tf             bubble 1 - 3m/(2m + p - 1 + max(m, p)),
///                                                        = (p-1)/(3m+p-1) when m >= p
///   interleaved  (m + (p-1)/v)(tf + tb)                  bubble (p-1)/(vm+p-1)
///                (v chunks per rank, tf and tb a rank's: v chunks' together; m a multiple of p)
/// With recomputation every backward also runs a forward: naive, gpipe and 1f1b take
/// (m + p - 1)(2 tf + tb) (the same bubble fractions); zb with recomputation has no formula here
/// (NaN).
double formula_step_seconds(Schedule s, int stages, int microbatches, double tf, double tb,
                            bool recompute = false, int chunks = 1);
double formula_bubble(Schedule s, int stages, int microbatches, bool recompute = false,
                      int chunks = 1);
/// The formula as text, for the program's output: "(p-1)/(m+p-1)", ...
const char* formula_bubble_text(Schedule s, int stages, int microbatches);

/// Copies every rank's weights (its stage, or its chunks) into `model` on rank 0 (a model of the
/// same config), with point-to-point sends from each rank to rank 0. A collective: every rank
/// calls it.
void gather_weights(std::span<const Stage> stages, mlp::MLP* model_on_rank0);

/// This rank's stages for config: one Stage (stage = rank), or its chunks for interleaved
/// (make_rank_chunks, counted in `rank_meter`); recomputation set as configured.
std::vector<Stage> make_stages(const PipelineConfig& config, ActivationMeter* rank_meter);

/// Trains config.model.niters steps on every rank (inside dist::launch): stage = rank, the
/// batches of 05's train() (BatchLoader seed + 3, initial model seed + 2), one train_step each.
/// Every log_every steps rank 0 gathers the weights, measures the held-out loss and calls `out`
/// with a 05-style log line (train_loss from the last stage, step time = rank 0's median wall
/// time). Returns rank 0's log.
std::vector<mlp::LogLine> train_pipeline(const PipelineConfig& config, const datasets::Split& data,
                                         const std::function<void(const mlp::LogLine&)>& out = {});

/// One row per stage, time across: F<i> and B<i> blocks where the stage computes, '.' where it
/// is idle. `spans[s]` are stage s's spans; `columns` is the width of the time axis.
std::string render_timeline(const std::vector<std::vector<Stage::Span>>& spans, int columns = 96);

/// Adds one counter track per stage ("stashed bytes, stage S") to a Chrome trace written by
/// dist::launch, from each stage's meter samples (simulated seconds, absolute).
void add_memory_counters(const std::string& trace_path,
                         const std::vector<std::vector<ActivationMeter::Sample>>& memory);

}  // namespace pp
