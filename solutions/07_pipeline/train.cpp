#include "train.hpp"

#include <nlohmann/json.hpp>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "datasets/loader.hpp"
#include "dist/eigen.hpp"
#include "distlab/timing.hpp"

namespace pp {
namespace {

constexpr int kGatherTag = 90;  // weights and the loss to rank 0 (outside the measured steps)

}  // namespace

void PipelineConfig::validate(int stages) const {
  model.validate();
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw std::invalid_argument("config: " + msg);
  };
  need(stages >= 1 && stages <= model.n_layers,
       "stages (" + std::to_string(stages) + ") must be in [1, n_layers = " +
           std::to_string(model.n_layers) + "]: every stage needs a layer");
  need(chunks >= 1, "chunks must be >= 1");
  need(chunks == 1 || schedule == Schedule::Interleaved,
       "--chunks " + std::to_string(chunks) + " needs --schedule interleaved");
  need(chunks * stages <= model.n_layers,
       std::to_string(chunks) + " chunks on " + std::to_string(stages) + " stages need " +
           std::to_string(chunks * stages) + " layers, the model has " +
           std::to_string(model.n_layers) + ": every chunk needs a layer");
  need(chunks == 1 || microbatches % stages == 0,
       "interleaved with " + std::to_string(chunks) + " chunks needs microbatches (" +
           std::to_string(microbatches) + ") to be a multiple of the stages (" +
           std::to_string(stages) + ")");
  need(microbatches >= 1 && microbatches <= model.batch_size,
       "microbatches must be in [1, batch_size = " + std::to_string(model.batch_size) + "]");
  need(cost.flops_per_s > 0, "the cost model's flops_per_s must be > 0");
}

namespace {

StepMeasure measure(std::span<Stage> stages, ActivationMeter& meter,
                    const std::function<double()>& step) {
  StepMeasure m;
  dist::barrier();
  dist::reset_stats();
  for (Stage& s : stages) {
    s.clear_spans();
    s.meter().reset_peak();
  }
  meter.reset_peak();
  m.t0 = dist::sim_time();
  m.loss = step();
  m.stats = dist::stats();
  dist::barrier();  // every clock becomes the latest finish
  m.step_s = dist::sim_time() - m.t0;
  for (const Stage& st : stages) {
    m.busy_s += st.busy_seconds();
    for (const Stage::Span& s : st.spans()) m.spans.push_back({s.name, s.t0 - m.t0, s.t1 - m.t0});
  }
  std::stable_sort(m.spans.begin(), m.spans.end(),
                   [](const Stage::Span& a, const Stage::Span& b) { return a.t0 < b.t0; });
  m.peak_microbatches = meter.peak_microbatches();
  m.peak_bytes = meter.peak_bytes();
  for (const ActivationMeter::Sample& s : meter.samples())
    m.memory.push_back({s.t - m.t0, s.bytes});
  double busy = m.busy_s;
  dist::all_reduce(std::span<double>(&busy, 1), dist::ReduceOp::Sum);
  const double capacity = static_cast<double>(dist::world_size()) * m.step_s;
  m.bubble = capacity > 0 ? 1.0 - busy / capacity : 0.0;
  return m;
}

}  // namespace

StepMeasure measured_step(Stage& stage, mlp::SGD& opt, const Batch& batch, Schedule schedule) {
  return measure(std::span<Stage>(&stage, 1), stage.meter(),
                 [&] { return train_step(stage, opt, batch, schedule); });
}

StepMeasure measured_step_interleaved(std::span<Stage> chunks, ActivationMeter& meter,
                                      mlp::SGD& opt, const Batch& batch) {
  return measure(chunks, meter, [&] { return train_step_interleaved(chunks, opt, batch); });
}

std::vector<mlp::Parameter*> all_parameters(std::span<Stage> stages) {
  std::vector<mlp::Parameter*> out;
  for (Stage& s : stages) {
    for (mlp::Parameter* p : s.parameters()) out.push_back(p);
  }
  return out;
}

double formula_step_seconds(Schedule s, int stages, int microbatches, double tf, double tb,
                            bool recompute, int chunks) {
  if (s == Schedule::Interleaved) {
    return (microbatches + static_cast<double>(stages - 1) / chunks) *
           (tf + tb + (recompute ? tf : 0.0));
  }
  if (s == Schedule::ZeroBubble) {
    if (recompute) return std::nan("");
    const int m = microbatches;
    return static_cast<double>(2 * m + stages - 1 + std::max(m, stages)) * tf;
  }
  const int m = s == Schedule::Naive ? 1 : microbatches;
  return static_cast<double>(m + stages - 1) * (tf + tb + (recompute ? tf : 0.0));
}

double formula_bubble(Schedule s, int stages, int microbatches, bool recompute, int chunks) {
  if (s == Schedule::Interleaved) {
    return static_cast<double>(stages - 1) /
           static_cast<double>(chunks * microbatches + stages - 1);
  }
  if (s == Schedule::ZeroBubble) {
    if (recompute) return std::nan("");
    const int m = microbatches;
    return 1.0 - 3.0 * m / static_cast<double>(2 * m + stages - 1 + std::max(m, stages));
  }
  const int m = s == Schedule::Naive ? 1 : microbatches;
  return static_cast<double>(stages - 1) / static_cast<double>(m + stages - 1);
}

const char* formula_bubble_text(Schedule s, int stages, int microbatches) {
  switch (s) {
    case Schedule::Naive:
      return "(p-1)/p";
    case Schedule::GPipe:
    case Schedule::OneFOneB:
      return "(p-1)/(m+p-1)";
    case Schedule::ZeroBubble:
      return microbatches >= stages ? "(p-1)/(3m+p-1)" : "(2p-m-1)/(2m+2p-1)";
    case Schedule::Interleaved:
      return "(p-1)/(vm+p-1)";
  }
  return "?";
}

void gather_weights(std::span<const Stage> stages, mlp::MLP* model_on_rank0) {
  const int rank = dist::rank(), p = dist::world_size();
  std::vector<std::int32_t> layers;  // the global layer of each of this rank's weights
  std::vector<const mlp::Parameter*> mine;
  for (const Stage& s : stages) {
    const auto params = s.parameters();
    for (int k = 0; k < s.layers().size; ++k) {
      layers.push_back(s.layers().begin + k);
      mine.push_back(params[static_cast<std::size_t>(k)]);
    }
  }
  if (rank != 0) {
    std::int32_t n = static_cast<std::int32_t>(layers.size());
    dist::send(std::span<const std::int32_t>(&n, 1), 0, kGatherTag);
    dist::send(std::span<const std::int32_t>(layers), 0, kGatherTag);
    for (const mlp::Parameter* w : mine) dist::send(dist::as_span(w->value), 0, kGatherTag);
    return;
  }
  if (model_on_rank0 == nullptr)
    throw std::invalid_argument("gather_weights: rank 0 needs a model");
  const auto dst = model_on_rank0->parameters();
  for (std::size_t k = 0; k < mine.size(); ++k)
    dst.at(static_cast<std::size_t>(layers[k]))->value = mine[k]->value;
  for (int r = 1; r < p; ++r) {
    std::int32_t n = 0;
    dist::recv(std::span<std::int32_t>(&n, 1), r, kGatherTag);
    std::vector<std::int32_t> theirs(static_cast<std::size_t>(n));
    dist::recv(std::span<std::int32_t>(theirs), r, kGatherTag);
    for (const std::int32_t l : theirs)
      dist::recv(dist::as_span(dst.at(static_cast<std::size_t>(l))->value), r, kGatherTag);
  }
}

std::vector<Stage> make_stages(const PipelineConfig& c, ActivationMeter* rank_meter) {
  std::vector<Stage> stages;
  if (c.schedule == Schedule::Interleaved) {
    stages = make_rank_chunks(c.model, c.model.seed + 2, c.chunks, c.cost, rank_meter);
  } else {
    stages.emplace_back(c.model, c.model.seed + 2, dist::rank(), dist::world_size(), c.cost);
  }
  for (Stage& s : stages) s.set_recompute(c.recompute);
  return stages;
}

std::vector<mlp::LogLine> train_pipeline(const PipelineConfig& c, const datasets::Split& data,
                                         const std::function<void(const mlp::LogLine&)>& out) {
  const int rank = dist::rank(), p = dist::world_size();
  c.validate(p);
  Eigen::setNbThreads(1);
  const mlp::Config& mc = c.model;
  ActivationMeter rank_meter;
  std::vector<Stage> stages = make_stages(c, &rank_meter);
  mlp::SGD opt(all_parameters(stages), mc.learning_rate);
  bool holds_last = false;
  for (const Stage& s : stages) holds_last = holds_last || s.is_last();
  const datasets::BatchLoader loader(data.train, mc.batch_size, mc.seed + 3);
  std::unique_ptr<mlp::MLP> whole;
  if (rank == 0) whole = std::make_unique<mlp::MLP>(mc, mc.seed + 2);
  Matrix x;
  Labels y;
  mlp::TrainingLog log(mc, out);
  for (int step = 0; step < mc.niters; ++step) {
    loader.load(step, x, y);
    const Batch batch{x, y, c.microbatches};
    distlab::Stopwatch sw;
    const double loss = c.schedule == Schedule::Interleaved
                            ? train_step_interleaved(stages, opt, batch)
                            : train_step(stages[0], opt, batch, c.schedule);
    log.add(loss, sw.elapsed_ms());
    if (log.due(step)) {
      double mean = log.mean_loss();
      if (p > 1 && holds_last) dist::send(std::span<const double>(&mean, 1), 0, kGatherTag + 1);
      if (p > 1 && rank == 0) dist::recv(std::span<double>(&mean, 1), p - 1, kGatherTag + 1);
      gather_weights(stages, whole.get());
      if (rank == 0) {
        log.write(step, mean, mlp::evaluate_loss(*whole, data.test));
      } else {
        log.skip();
      }
    }
  }
  return log.lines();
}

std::string render_timeline(const std::vector<std::vector<Stage::Span>>& spans, int columns) {
  double end = 0;
  for (const auto& row : spans) {
    for (const auto& s : row) end = std::max(end, s.t1);
  }
  std::ostringstream os;
  if (end <= 0) return "(no compute spans)\n";
  const double per_col = end / columns;
  for (std::size_t r = 0; r < spans.size(); ++r) {
    std::string line(static_cast<std::size_t>(columns), '.');
    for (const auto& s : spans[r]) {  // [c0, c1): the span's columns, at least one
      const int c0 = std::clamp(static_cast<int>(std::lround(s.t0 / per_col)), 0, columns - 1);
      const int c1 = std::clamp(static_cast<int>(std::lround(s.t1 / per_col)), c0 + 1, columns);
      const int w = c1 - c0;
      const char fill = s.name[0] == 'F'   ? '-'
                        : s.name[0] == 'W' ? '~'
                        : s.name[0] == 'R' ? '+'
                                           : '=';
      for (int c = c0; c < c1; ++c) line[static_cast<std::size_t>(c)] = fill;
      const int label = w >= 3 ? std::min(static_cast<int>(s.name.size()), w - 1) : 1;
      for (int k = 0; k < label; ++k)
        line[static_cast<std::size_t>(c0 + k)] = s.name[static_cast<std::size_t>(k)];
      if (w >= 3)
        line[static_cast<std::size_t>(c1 - 1)] = ' ';  // a gap between neighbouring blocks
    }
    os << "stage " << r << " |" << line << "|\n";
  }
  os << "         0" << std::string(static_cast<std::size_t>(std::max(0, columns - 12)), ' ')
     << std::fixed;
  os.precision(3);
  os << end * 1e3 << " ms\n";
  return os.str();
}

void add_memory_counters(const std::string& trace_path,
                         const std::vector<std::vector<ActivationMeter::Sample>>& memory) {
  nlohmann::json doc;
  {
    std::ifstream in(trace_path);
    if (!in) throw std::runtime_error("cannot read the trace '" + trace_path + "'");
    in >> doc;
  }
  auto& events = doc["traceEvents"];
  for (std::size_t s = 0; s < memory.size(); ++s) {
    const std::string name = "stashed bytes, stage " + std::to_string(s);
    events.push_back({{"name", name},
                      {"ph", "C"},
                      {"pid", 0},
                      {"tid", s},
                      {"ts", 0.0},
                      {"args", {{"bytes", 0}}}});
    for (const auto& sample : memory[s]) {
      events.push_back({{"name", name},
                        {"ph", "C"},
                        {"pid", 0},
                        {"tid", s},
                        {"ts", sample.t * 1e6},
                        {"args", {{"bytes", sample.bytes}}}});
    }
  }
  std::ofstream f(trace_path);
  f << doc.dump() << "\n";
  if (!f) throw std::runtime_error("writing the trace '" + trace_path + "' failed");
}

}  // namespace pp
