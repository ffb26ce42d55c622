// Given code for 09_tensor_parallel (see train.hpp and layout.hpp).
#include "train.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "distlab/timing.hpp"

namespace tp {

Range shard_range(std::size_t n, int parts, int index) {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = n / p, extra = n % p;
  const std::size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// ---- optimizers (the given parts) -------------------------------------------------------------

Adam::Adam(std::vector<mlp::Parameter*> params, const AdamConfig& config)
    : params_(std::move(params)), config_(config) {
  for (const mlp::Parameter* p : params_) {
    m_.emplace_back(static_cast<std::size_t>(p->numel()), 0.0f);
    v_.emplace_back(static_cast<std::size_t>(p->numel()), 0.0f);
  }
}

void Adam::step() {
  ++t_;
  const float c1 = 1.0f - std::pow(config_.beta1, static_cast<float>(t_));
  const float c2 = 1.0f - std::pow(config_.beta2, static_cast<float>(t_));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    float* w = params_[i]->value.data();
    const float* g = params_[i]->grad.data();
    std::vector<float>& m = m_[i];
    std::vector<float>& v = v_[i];
    for (std::size_t k = 0; k < m.size(); ++k) {
      m[k] = config_.beta1 * m[k] + (1.0f - config_.beta1) * g[k];
      v[k] = config_.beta2 * v[k] + (1.0f - config_.beta2) * g[k] * g[k];
      w[k] -= config_.learning_rate * (m[k] / c1) / (std::sqrt(v[k] / c2) + config_.eps);
    }
  }
}

std::int64_t Adam::state_bytes() const {
  std::int64_t b = 0;
  for (const auto& m : m_) b += static_cast<std::int64_t>(m.capacity() * sizeof(float));
  for (const auto& v : v_) b += static_cast<std::int64_t>(v.capacity() * sizeof(float));
  return b;
}

ZeroOptimizer::~ZeroOptimizer() {
  for (std::size_t i = 0; i < hooks_.size() && i < params_.size(); ++i) {
    params_[i]->remove_hook(hooks_[i]);
  }
}

std::size_t ZeroOptimizer::padded(std::size_t n, int dp) {
  const auto p = static_cast<std::size_t>(dp);
  return (n + p - 1) / p * p;
}

Range ZeroOptimizer::shard(std::size_t i) const {
  const int p = dist::world_size(dp_);
  const std::size_t c =
      padded(static_cast<std::size_t>(params_[i]->numel()), p) / static_cast<std::size_t>(p);
  const auto d = static_cast<std::size_t>(dist::rank(dp_));
  return {d * c, (d + 1) * c};
}

std::int64_t ZeroOptimizer::state_bytes() const {
  std::int64_t b = 0;
  for (const auto& m : m_) b += static_cast<std::int64_t>(m.capacity() * sizeof(float));
  for (const auto& v : v_) b += static_cast<std::int64_t>(v.capacity() * sizeof(float));
  return b;
}

std::int64_t ZeroOptimizer::gradient_bytes() const {
  std::int64_t b = 0;
  for (const auto& g : grad_shard_) b += static_cast<std::int64_t>(g.capacity() * sizeof(float));
  for (const mlp::Parameter* p : params_) {
    b += static_cast<std::int64_t>(p->grad.size()) * static_cast<std::int64_t>(sizeof(float));
  }
  return b;
}

std::int64_t ZeroOptimizer::scratch_bytes() const {
  return static_cast<std::int64_t>(scratch_.capacity() * sizeof(float));
}

// ---- the configuration ------------------------------------------------------------------------

void TpConfig::validate(int world) const {
  model.validate();
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (tp < 1 || dp < 1) fail("tp and dp must be at least 1");
  if (tp * dp != world) {
    fail("tp x dp = " + std::to_string(tp * dp) + " must equal the world size " +
         std::to_string(world));
  }
  if (model.n_layers % 2 != 0) {
    fail("n_layers must be even (blocks of a column- and a row-parallel layer), not " +
         std::to_string(model.n_layers));
  }
  if (model.dim_hidden < tp) fail("dim_hidden must be at least tp (every TP rank a feature)");
  if (model.batch_size % dp != 0) {
    fail("batch_size (" + std::to_string(model.batch_size) + ") must be a multiple of dp (" +
         std::to_string(dp) + "): equal shards make the mean of the replicas' gradients the " +
         "gradient of the batch");
  }
  if (zero < 0 || zero > 2) fail("zero must be 0, 1 or 2");
  if (!(beta1 >= 0 && beta1 < 1)) fail("beta1 must lie in [0, 1), not " + std::to_string(beta1));
  if (!(beta2 >= 0 && beta2 < 1)) fail("beta2 must lie in [0, 1), not " + std::to_string(beta2));
  if (!(eps > 0)) fail("eps must be positive, not " + std::to_string(eps));
}

std::string TpConfig::name() const {
  std::ostringstream os;
  os << "tp " << tp << " x dp " << dp << ", zero " << zero;
  return os.str();
}

// ---- the model --------------------------------------------------------------------------------

TpMLP::TpMLP(const mlp::MLP& full, const Grid& grid, double flops_per_s)
    : grid_(grid), flops_per_s_(flops_per_s) {
  const mlp::Config& c = full.config();
  if (c.n_layers % 2 != 0) throw std::invalid_argument("TpMLP: n_layers must be even");
  const std::vector<const mlp::Parameter*> w = full.parameters();
  blocks_.resize(static_cast<std::size_t>(c.n_layers / 2));
  for (std::size_t k = 0; k < blocks_.size(); ++k) {
    Block& b = blocks_[k];
    const Matrix& w1 = w[2 * k]->value;      // hidden x in
    const Matrix& w2 = w[2 * k + 1]->value;  // out x hidden
    b.hidden = shard_range(static_cast<std::size_t>(w1.rows()), grid.tp, grid.tp_rank);
    const auto begin = static_cast<Eigen::Index>(b.hidden.begin);
    const auto size = static_cast<Eigen::Index>(b.hidden.size());
    b.column.name = "blocks." + std::to_string(k) + ".column.weight";
    b.column.value = w1.middleRows(begin, size);
    b.column.grad = Matrix::Zero(b.column.value.rows(), b.column.value.cols());
    b.row.name = "blocks." + std::to_string(k) + ".row.weight";
    b.row.value = w2.middleCols(begin, size);
    b.row.grad = Matrix::Zero(b.row.value.rows(), b.row.value.cols());
    b.activation = c.activation;
  }
  h_.resize(blocks_.size());
  dh_.resize(blocks_.size());
}

namespace {
double block_forward_flops(const Block& b, Eigen::Index rows) {
  return 2.0 * static_cast<double>(rows) *
         static_cast<double>(b.column.value.size() + b.row.value.size());
}
}  // namespace

const Matrix& TpMLP::forward(const Matrix& x) {
  const Matrix* in = &x;
  for (std::size_t k = 0; k < blocks_.size(); ++k) {
    Block& b = blocks_[k];
    if (flops_per_s_ > 0)
      dist::sim_compute(block_forward_flops(b, in->rows()) / flops_per_s_, "forward");
    const Matrix& y = block_forward(b, *in, grid_.tp_group);
    if (k + 1 < blocks_.size()) {
      mlp::activation_forward(b.activation, y, h_[k]);
      in = &h_[k];
    }
  }
  return blocks_.back().y;
}

void TpMLP::backward(const Matrix& dlogits) {
  const Matrix* dy = &dlogits;
  for (std::size_t k = blocks_.size(); k-- > 0;) {
    Block& b = blocks_[k];
    if (flops_per_s_ > 0) {
      // dW and dx of both layers, except the first block's column dx (the input is data).
      double flops = 2.0 * block_forward_flops(b, dy->rows());
      if (k == 0) flops -= 2.0 * static_cast<double>(dy->rows() * b.column.value.size());
      dist::sim_compute(flops / flops_per_s_, "backward");
    }
    block_backward(b, *dy, k > 0, grid_.tp_group);
    if (k > 0) {
      Block& prev = blocks_[k - 1];
      mlp::activation_backward(b.activation, prev.y, h_[k - 1], b.dx, dh_[k - 1]);
      dy = &dh_[k - 1];
    }
  }
}

std::vector<mlp::Parameter*> TpMLP::parameters() {
  std::vector<mlp::Parameter*> out;
  for (Block& b : blocks_) {
    out.push_back(&b.column);
    out.push_back(&b.row);
  }
  return out;
}

// ---- one rank's training ----------------------------------------------------------------------

Trainer::Trainer(const TpConfig& config, const datasets::Split& data)
    : config_(config),
      loader_(data.train, config.model.batch_size, config.model.seed + 3),
      model_(mlp::MLP(config.model, config.model.seed + 2), make_grid(config.tp, config.dp),
             config.flops_per_s) {
  config_.validate(dist::world_size());
  if (config_.zero == 0) {
    adam_ = std::make_unique<Adam>(model_.parameters(), config_.adam());
  } else {
    zero_ = std::make_unique<ZeroOptimizer>(model_.parameters(), config_.adam(),
                                            model_.grid().dp_group, config_.zero);
  }
}

float Trainer::step(std::int64_t t) {
  loader_.load(t, x_, y_);
  const Grid& g = model_.grid();
  const Range rows = shard_range(static_cast<std::size_t>(x_.rows()), g.dp, g.dp_rank);
  xs_ =
      x_.middleRows(static_cast<Eigen::Index>(rows.begin), static_cast<Eigen::Index>(rows.size()));
  ys_.assign(y_.begin() + static_cast<std::ptrdiff_t>(rows.begin),
             y_.begin() + static_cast<std::ptrdiff_t>(rows.end));
  const Matrix& logits = model_.forward(xs_);
  const float loss = mlp::softmax_cross_entropy_forward(logits, ys_, probs_);
  mlp::softmax_cross_entropy_backward(probs_, ys_, dlogits_);
  model_.backward(dlogits_);
  if (zero_) {
    zero_->step();
  } else {
    const std::vector<mlp::Parameter*> params = model_.parameters();
    average_gradients(params, g);
    adam_->step();
  }
  return loss;
}

float Trainer::test_loss(const datasets::Dataset& test, int chunk) {
  model_.set_flops_per_s(0);
  Matrix x, probs;
  Labels y;
  std::vector<std::int64_t> rows;
  double total = 0.0;
  for (std::int64_t start = 0; start < test.size(); start += chunk) {
    const std::int64_t end = std::min<std::int64_t>(test.size(), start + chunk);
    rows.clear();
    for (std::int64_t r = start; r < end; ++r) rows.push_back(r);
    datasets::gather_rows(test, rows, x, y);
    const float loss = mlp::softmax_cross_entropy_forward(model_.forward(x), y, probs);
    total += static_cast<double>(loss) * static_cast<double>(end - start);
  }
  model_.set_flops_per_s(config_.flops_per_s);
  return test.size() ? static_cast<float>(total / static_cast<double>(test.size())) : 0.0f;
}

Memory Trainer::memory() const {
  Memory m;
  auto& self = const_cast<Trainer&>(*this);
  for (const mlp::Parameter* p : self.model_.parameters()) {
    m.weights += static_cast<std::int64_t>(p->value.size() * sizeof(float));
    if (!zero_) m.gradients += static_cast<std::int64_t>(p->grad.size() * sizeof(float));
  }
  if (zero_) {
    m.gradients = zero_->gradient_bytes();
    m.optimizer_state = zero_->state_bytes();
    m.scratch = zero_->scratch_bytes();
  } else {
    m.optimizer_state = adam_->state_bytes();
  }
  return m;
}

std::vector<mlp::LogLine> train_tp(const TpConfig& config, const datasets::Split& data,
                                   const std::function<void(const mlp::LogLine&)>& out) {
  Trainer trainer(config, data);
  const bool logs = dist::rank() == 0;
  mlp::TrainingLog log(config.model, logs ? out : std::function<void(const mlp::LogLine&)>{});
  for (int step = 0; step < config.model.niters; ++step) {
    distlab::Stopwatch sw;
    float loss = trainer.step(step);
    const double ms = sw.elapsed_ms();
    // The mean over the replicas' rows (equal shards): the loss of the whole batch.
    dist::all_reduce(std::span<float>(&loss, 1), dist::ReduceOp::Avg, trainer.grid().dp_group);
    log.add(loss, ms);
    if (log.due(step)) {
      const float test = trainer.test_loss(data.test);
      if (logs) {
        log.write(step, log.mean_loss(), test);
      } else {
        log.skip();
      }
    }
  }
  return log.lines();
}

StepMeasure measured_step(const TpConfig& config, const datasets::Split& data) {
  Trainer trainer(config, data);
  trainer.step(0);  // warm-up: buffers allocated, ZeRO-2's full gradients freed
  dist::barrier();
  dist::reset_stats();
  const double t0 = dist::sim_time();
  trainer.step(1);
  StepMeasure m;
  m.step_s = dist::sim_time() - t0;
  const dist::Stats s = dist::stats();
  m.bytes_sent = s.bytes_sent;
  const Grid& g = trainer.grid();
  for (int r = 0; r < dist::world_size(); ++r) {
    const std::uint64_t b = s.bytes_sent_to[static_cast<std::size_t>(r)];
    if (g.tp_group.group_rank(r) >= 0) {
      m.bytes_tp += b;
    } else if (g.dp_group.group_rank(r) >= 0) {
      m.bytes_dp += b;
    } else {
      m.bytes_other += b;
    }
  }
  m.memory = trainer.memory();
  dist::barrier();
  return m;
}

std::vector<TableRow> comparison_table(const TpConfig& config, const dist::LaunchOptions& launch,
                                       const datasets::Split& data) {
  const int p = config.tp * config.dp;
  std::vector<TableRow> rows;
  auto add = [&](const std::string& label, int tp, int dp, int zero) {
    TableRow row{label, config, {}};
    row.config.tp = tp;
    row.config.dp = dp;
    row.config.zero = zero;
    row.config.validate(p);
    dist::LaunchOptions o = launch;
    o.world_size = p;
    o.trace_path.clear();
    std::mutex mu;
    dist::launch(o, [&] {
      const StepMeasure m = measured_step(row.config, data);
      std::lock_guard<std::mutex> g(mu);
      StepMeasure& x = row.max;
      x.step_s = std::max(x.step_s, m.step_s);
      x.bytes_sent = std::max(x.bytes_sent, m.bytes_sent);
      x.bytes_tp = std::max(x.bytes_tp, m.bytes_tp);
      x.bytes_dp = std::max(x.bytes_dp, m.bytes_dp);
      x.bytes_other = std::max(x.bytes_other, m.bytes_other);
      x.memory.weights = std::max(x.memory.weights, m.memory.weights);
      x.memory.gradients = std::max(x.memory.gradients, m.memory.gradients);
      x.memory.optimizer_state = std::max(x.memory.optimizer_state, m.memory.optimizer_state);
      x.memory.scratch = std::max(x.memory.scratch, m.memory.scratch);
    });
    rows.push_back(row);
  };
  add("DDP", 1, p, 0);
  add("TP", p, 1, 0);
  add("TP+DP", config.tp, config.dp, 0);
  add("ZeRO-1", config.tp, config.dp, 1);
  add("ZeRO-2", config.tp, config.dp, 2);
  return rows;
}

std::string format_table(const std::vector<TableRow>& rows) {
  auto kib = [](std::int64_t b) { return static_cast<double>(b) / 1024.0; };
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-7s %-7s %5s | %9s | %10s %10s %10s | %9s %9s %9s %9s\n",
                "config", "tp x dp", "zero", "step ms", "sent KiB", "in TP", "in DP", "weights",
                "grads", "opt state", "scratch");
  os << line;
  for (const TableRow& r : rows) {
    const StepMeasure& m = r.max;
    const std::string grid = std::to_string(r.config.tp) + " x " + std::to_string(r.config.dp);
    std::snprintf(line, sizeof line,
                  "%-7s %-7s %5d | %9.3f | %10.1f %10.1f %10.1f | %9.1f %9.1f %9.1f %9.1f\n",
                  r.label.c_str(), grid.c_str(), r.config.zero, m.step_s * 1e3,
                  kib(static_cast<std::int64_t>(m.bytes_sent)),
                  kib(static_cast<std::int64_t>(m.bytes_tp)),
                  kib(static_cast<std::int64_t>(m.bytes_dp)), kib(m.memory.weights),
                  kib(m.memory.gradients), kib(m.memory.optimizer_state), kib(m.memory.scratch));
    os << line;
  }
  return os.str();
}

std::string format_adam_table(const std::vector<TableRow>& rows) {
  std::ostringstream os;
  os << "Adam's state per rank (m and v: 8 bytes per element the rank updates) and the same run "
        "in\n"
        "mixed precision (2 + 2 bytes of fp16 weights and gradients, 12 of fp32 master weights, m "
        "and v):\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-7s %-7s %5s | %9s %9s %8s | %9s | %10s\n", "config",
                "tp x dp", "zero", "params", "updated", "sharded", "m+v KiB", "mixed KiB");
  os << line;
  for (const TableRow& r : rows) {
    const Memory& m = r.max.memory;
    const std::int64_t params = m.weights / 4, updated = m.optimizer_state / 8;
    const std::int64_t grads = r.config.zero == 2 ? updated : params;
    const std::string grid = std::to_string(r.config.tp) + " x " + std::to_string(r.config.dp);
    std::snprintf(line, sizeof line, "%-7s %-7s %5d | %9lld %9lld %8.3f | %9.1f | %10.1f\n",
                  r.label.c_str(), grid.c_str(), r.config.zero, static_cast<long long>(params),
                  static_cast<long long>(updated),
                  static_cast<double>(updated) / static_cast<double>(params),
                  static_cast<double>(m.optimizer_state) / 1024.0,
                  static_cast<double>(2 * params + 2 * grads + 12 * updated) / 1024.0);
    os << line;
  }
  return os.str();
}

}  // namespace tp
