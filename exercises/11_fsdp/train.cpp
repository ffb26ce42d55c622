// Given code for 11_fsdp (see train.hpp).
#include "train.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace fsdp {

void TrainConfig::validate(int dp) const {
  model.validate();
  auto fail = [](const std::string& what) { throw std::invalid_argument(what); };
  if (dp < 1) fail("dp must be at least 1");
  if (model.batch_size % dp != 0) {
    fail("batch_size (" + std::to_string(model.batch_size) + ") must be a multiple of dp (" +
         std::to_string(dp) + "): equal row shards make the mean of the ranks' gradients the " +
         "gradient of the batch");
  }
  if (fsdp.prefetch < 0) fail("fsdp.prefetch must be >= 0");
  if (flops_per_s < 0 || adam_s_per_float < 0) fail("kernel speeds must be >= 0");
}

namespace {
std::vector<std::size_t> padded_sizes(const mlp::Config& c, int p) {
  std::vector<std::size_t> out;
  for (int u = 0; u < c.n_layers; ++u) {
    out.push_back(padded(
        static_cast<std::size_t>(c.layer_out(u)) * static_cast<std::size_t>(c.layer_in(u)), p));
  }
  return out;
}

std::int64_t shard_bytes_of(const mlp::Config& c, int p) {
  std::int64_t b = 0;
  for (std::size_t n : padded_sizes(c, p)) {
    b += 4 * static_cast<std::int64_t>(n / static_cast<std::size_t>(p) * sizeof(float));
  }
  return b;
}

Shards make_shards(const mlp::Config& c, int p, int rank, Stream& s) {
  const mlp::MLP full(c, c.seed + 2);
  const std::vector<const mlp::Parameter*> w = full.parameters();
  Shards out;
  for (int u = 0; u < c.n_layers; ++u) {
    const mlp::Matrix& value = w[static_cast<std::size_t>(u)]->value;
    const std::size_t n = static_cast<std::size_t>(value.size());
    const std::size_t cu = padded(n, p) / static_cast<std::size_t>(p);
    const std::string name = std::to_string(u);
    // Whatever the memory held before: the padding must come from shard_unit.
    std::vector<float> host(cu, std::nanf(""));
    shard_unit(std::span<const float>(value.data(), n), p, rank, host);
    out.w.emplace_back("w shard " + name, cu);
    out.g.emplace_back("g shard " + name, cu);
    out.m.emplace_back("m shard " + name, cu);
    out.v.emplace_back("v shard " + name, cu);
    dist::device::memcpy_async(out.w.back(), std::span<const float>(host), s);
  }
  s.synchronize();
  return out;
}
}  // namespace

Trainer::Trainer(const TrainConfig& config, const datasets::Split& data)
    : config_(config),
      loader_(data.train, config.model.batch_size, config.model.seed + 3),
      model_(config.model, dist::world_size(), config.flops_per_s, config.adam_s_per_float),
      compute_("compute"),
      comm_("comm"),
      shards_((config_.validate(dist::world_size()),
               make_shards(config.model, dist::world_size(), dist::rank(), compute_))),
      buffers_(padded_sizes(config.model, dist::world_size()),
               shard_bytes_of(config.model, dist::world_size()), dist::world_size()),
      fsdp_(model_, shards_, buffers_, compute_, comm_, config.fsdp) {}

float Trainer::step(std::int64_t t) {
  loader_.load(t, x_, y_);
  const Range rows = rows_of(static_cast<std::size_t>(x_.rows()), dist::world_size(), dist::rank());
  xs_ =
      x_.middleRows(static_cast<Eigen::Index>(rows.begin), static_cast<Eigen::Index>(rows.size()));
  ys_.assign(y_.begin() + static_cast<std::ptrdiff_t>(rows.begin),
             y_.begin() + static_cast<std::ptrdiff_t>(rows.end));
  model_.set_batch(xs_, ys_);
  fsdp_.forward();
  const float loss = model_.launch_loss(compute_);
  fsdp_.backward();
  fsdp_.step();
  dist::device::device_synchronize();
  return loss;
}

std::vector<std::vector<float>> Trainer::full_weights() {
  const int p = dist::world_size();
  std::vector<std::vector<float>> out;
  for (int u = 0; u < model_.num_units(); ++u) {
    DeviceBuffer<float>& w = shards_.w[static_cast<std::size_t>(u)];
    std::vector<float> shard(w.size()), full(w.size() * static_cast<std::size_t>(p));
    dist::device::memcpy_async(std::span<float>(shard), w, compute_);
    compute_.synchronize();
    dist::all_gather(std::span<const float>(shard), std::span<float>(full));
    full.resize(model_.numel(u));
    out.push_back(std::move(full));
  }
  return out;
}

std::vector<std::vector<float>> reference_weights(const TrainConfig& config,
                                                  const datasets::Split& data, int steps) {
  const mlp::Config& c = config.model;
  mlp::MLP model(c, c.seed + 2);
  datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  const AdamConfig& a = config.fsdp.adam;
  std::vector<mlp::Parameter*> params = model.parameters();
  std::vector<std::vector<float>> m, v;
  for (const mlp::Parameter* p : params) {
    m.emplace_back(static_cast<std::size_t>(p->numel()), 0.0f);
    v.emplace_back(static_cast<std::size_t>(p->numel()), 0.0f);
  }
  Matrix x, probs, dlogits;
  Labels y;
  for (int t = 1; t <= steps; ++t) {
    loader.load(t - 1, x, y);
    mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    model.backward(dlogits);
    const float c1 = 1.0f - std::pow(a.beta1, static_cast<float>(t));
    const float c2 = 1.0f - std::pow(a.beta2, static_cast<float>(t));
    for (std::size_t i = 0; i < params.size(); ++i) {
      float* w = params[i]->value.data();
      const float* g = params[i]->grad.data();
      for (std::size_t k = 0; k < m[i].size(); ++k) {
        m[i][k] = a.beta1 * m[i][k] + (1.0f - a.beta1) * g[k];
        v[i][k] = a.beta2 * v[i][k] + (1.0f - a.beta2) * g[k] * g[k];
        w[k] -= a.learning_rate * (m[i][k] / c1) / (std::sqrt(v[i][k] / c2) + a.eps);
      }
    }
  }
  std::vector<std::vector<float>> out;
  for (const mlp::Parameter* p : params) {
    out.emplace_back(p->value.data(), p->value.data() + p->value.size());
  }
  return out;
}

std::vector<std::vector<float>> reference_weights_bf16(const TrainConfig& config,
                                                       const datasets::Split& data, int steps,
                                                       int p) {
  const mlp::Config& c = config.model;
  config.validate(p);
  const int L = c.n_layers;
  std::vector<std::vector<float>> w, m, v;
  {
    const mlp::MLP init(c, c.seed + 2);
    for (const mlp::Parameter* param : init.parameters()) {
      w.emplace_back(param->value.data(), param->value.data() + param->value.size());
      m.emplace_back(w.back().size(), 0.0f);
      v.emplace_back(w.back().size(), 0.0f);
    }
  }
  // One simulated rank runs the trainer's own kernels (Model) for each rank's rows in turn.
  dist::LaunchOptions o;
  o.world_size = 1;
  o.backend = dist::Backend::Threads;
  dist::launch(o, [&] {
    Model model(c, p, 0.0, 0.0);
    Stream s("reference");
    std::vector<std::size_t> sizes = padded_sizes(c, p);
    UnitBuffers log(sizes, 0, p);
    datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
    Matrix x, xs;
    Labels y, ys;
    for (int t = 1; t <= steps; ++t) {
      loader.load(t - 1, x, y);
      std::vector<DeviceBuffer<bf16>> full, grad;
      for (int u = 0; u < L; ++u) {
        const auto iu = static_cast<std::size_t>(u);
        std::vector<bf16> host(sizes[iu], bf16(0.0f));
        for (std::size_t i = 0; i < w[iu].size(); ++i) host[i] = bf16(w[iu][i]);  // rounded once
        full.emplace_back("reference weights " + std::to_string(u), sizes[iu]);
        grad.emplace_back("reference gradient " + std::to_string(u), sizes[iu]);
        dist::device::memcpy_async(full.back(), std::span<const bf16>(host), s);
      }
      // acc[u][i]: the reduce-scatter's fold over ranks 0 .. p-1 (dist.hpp: each step in fp32,
      // rounded to bf16), then the mean rounded once more.
      std::vector<std::vector<bf16>> acc(static_cast<std::size_t>(L));
      for (int r = 0; r < p; ++r) {
        const Range rows = rows_of(static_cast<std::size_t>(x.rows()), p, r);
        xs = x.middleRows(static_cast<Eigen::Index>(rows.begin),
                          static_cast<Eigen::Index>(rows.size()));
        ys.assign(y.begin() + static_cast<std::ptrdiff_t>(rows.begin),
                  y.begin() + static_cast<std::ptrdiff_t>(rows.end));
        model.set_batch(xs, ys);
        for (int u = 0; u < L; ++u)
          model.launch_forward(u, full[static_cast<std::size_t>(u)], s, log);
        (void)model.launch_loss(s);
        for (int u = L - 1; u >= 0; --u) {
          const auto iu = static_cast<std::size_t>(u);
          model.launch_backward(u, full[iu], grad[iu], s, log);
          std::vector<bf16> g(sizes[iu]);
          dist::device::memcpy_async(std::span<bf16>(g), grad[iu], s);
          s.synchronize();
          if (r == 0) {
            acc[iu] = g;
          } else {
            for (std::size_t i = 0; i < g.size(); ++i)
              acc[iu][i] = bf16(static_cast<float>(acc[iu][i]) + static_cast<float>(g[i]));
          }
        }
        log.log().clear();
      }
      for (int u = 0; u < L; ++u) {
        const auto iu = static_cast<std::size_t>(u);
        std::vector<float> g(w[iu].size());
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = static_cast<float>(bf16(static_cast<float>(acc[iu][i]) / static_cast<float>(p)));
        adam_update(w[iu], g, m[iu], v[iu], t, config.fsdp.adam);
      }
    }
  });
  return w;
}

StepMeasure measured_step(const TrainConfig& config, const datasets::Split& data) {
  Trainer trainer(config, data);
  trainer.step(0);  // warm-up
  dist::barrier();
  dist::reset_stats();
  trainer.buffers().reset_peak();
  const double t0 = dist::sim_time();
  trainer.step(1);
  StepMeasure m;
  m.step_s = dist::sim_time() - t0;
  const dist::Stats s = dist::stats();
  m.bytes_sent = s.bytes_sent;
  m.collectives = s.builtin_collectives;
  const UnitBuffers& b = trainer.buffers();
  m.peak = b.peak_bytes();
  m.shards = b.shard_bytes();
  m.peak_weights = b.peak_weight_bytes();
  m.peak_gradients = b.peak_gradient_bytes();
  dist::barrier();
  return m;
}

// ---- the formulas -----------------------------------------------------------------------------

std::size_t shard_floats(const mlp::Config& model, int u, int p) {
  const std::size_t n =
      static_cast<std::size_t>(model.layer_out(u)) * static_cast<std::size_t>(model.layer_in(u));
  return padded(n, p) / static_cast<std::size_t>(p);
}

std::size_t element_bytes(const TrainConfig& config) { return config.fsdp.bf16_comm ? 2 : 4; }

double gather_seconds(std::size_t c, int p, const dist::NetworkModel& net, std::size_t e) {
  return (p - 1) * net.message_cost(0, p > 1 ? 1 : 0, c * e);
}

double reduce_scatter_seconds(std::size_t c, int p, const dist::NetworkModel& net, std::size_t e) {
  return (p - 1) * (net.message_cost(0, p > 1 ? 1 : 0, c * e) + net.reduce_cost(c * e));
}

double step_formula(const TrainConfig& config, int p, const dist::NetworkModel& net) {
  const mlp::Config& c = config.model;
  const Model model(c, p, config.flops_per_s, config.adam_s_per_float);
  const int L = c.n_layers, k = config.fsdp.prefetch;
  const auto rows = static_cast<std::size_t>(c.batch_size / p);
  double compute = 0, comm = 0;  // the streams' tails
  auto on_comm = [&](double after, double seconds) {
    return comm = std::max(comm, after) + seconds;
  };
  auto on_compute = [&](double after, double seconds) {
    return compute = std::max(compute, after) + seconds;
  };
  // Every gather but forward's first k + 1 waits for the kernel launched before it was issued.
  auto gather = [&](int u, double after) {
    return on_comm(after, gather_seconds(shard_floats(c, u, p), p, net, element_bytes(config)));
  };
  std::vector<double> gathered(static_cast<std::size_t>(L)), reduced(static_cast<std::size_t>(L));
  int issued = 0;
  double previous = 0;  // end of the pass's previous kernel (0: none yet)
  for (int u = 0; u < L; ++u) {
    for (; issued < L && issued <= u + k; ++issued)
      gathered[static_cast<std::size_t>(issued)] = gather(issued, previous);
    previous = on_compute(gathered[static_cast<std::size_t>(u)], model.forward_seconds(u, rows));
  }
  issued = 0;  // backward's first gathers wait for the last forward kernel (previous)
  for (int q = 0; q < L; ++q) {
    const int u = L - 1 - q;
    double ready = 0;
    if (config.fsdp.reshard_after_forward) {
      for (; issued < L && issued <= q + k; ++issued)
        gathered[static_cast<std::size_t>(L - 1 - issued)] = gather(L - 1 - issued, previous);
      ready = gathered[static_cast<std::size_t>(u)];
    }
    const double done = previous = on_compute(ready, model.backward_seconds(u, rows));
    reduced[static_cast<std::size_t>(u)] =
        on_comm(done, reduce_scatter_seconds(shard_floats(c, u, p), p, net, element_bytes(config)));
  }
  for (int u = L - 1; u >= 0; --u)
    on_compute(reduced[static_cast<std::size_t>(u)], model.adam_seconds(u));
  return std::max(compute, comm);
}

std::uint64_t collectives_formula(const TrainConfig& config, int /*p*/) {
  const std::uint64_t passes = config.fsdp.reshard_after_forward ? 2 : 1;
  return (passes + 1) * static_cast<std::uint64_t>(config.model.n_layers);
}

std::uint64_t bytes_formula(const TrainConfig& config, int p) {
  const std::uint64_t passes = config.fsdp.reshard_after_forward ? 2 : 1;
  std::uint64_t per_pass = 0;
  for (int u = 0; u < config.model.n_layers; ++u) {
    per_pass += static_cast<std::uint64_t>(p - 1) * element_bytes(config) *
                shard_floats(config.model, u, p);
  }
  return (passes + 1) * per_pass;
}

std::int64_t memory_formula(const TrainConfig& config, int p) {
  const mlp::Config& c = config.model;
  const int L = c.n_layers, k = config.fsdp.prefetch;
  const auto e = static_cast<std::int64_t>(element_bytes(config));
  // A full unit, and with bf16 the shard-sized bf16 buffer held with it.
  auto full = [&](int u) {
    return e * (static_cast<std::int64_t>(p) + (config.fsdp.bf16_comm ? 1 : 0)) *
           static_cast<std::int64_t>(shard_floats(c, u, p));
  };
  std::int64_t shards = 0, all = 0;
  for (int u = 0; u < L; ++u) {
    shards += 4 * static_cast<std::int64_t>(sizeof(float) * shard_floats(c, u, p));
    all += full(u);
  }
  std::int64_t most = 0;
  if (!config.fsdp.reshard_after_forward) {
    // Backward at unit u holds the weights of units 0 .. u and u's gradient.
    std::int64_t held = 0;
    for (int u = 0; u < L; ++u) {
      held += full(u);
      most = std::max(most, held + full(u));
    }
    (void)all;
    return shards + most;
  }
  for (int q = 0; q < L; ++q) {
    std::int64_t held = full(L - 1 - q);  // the gradient
    for (int j = q; j <= std::min(q + k, L - 1); ++j) held += full(L - 1 - j);
    most = std::max(most, held);
  }
  // Forward holds at most the same window without a gradient: never more.
  return shards + most;
}

// ---- the table --------------------------------------------------------------------------------

std::vector<TableRow> comparison_table(const TrainConfig& config, const dist::LaunchOptions& launch,
                                       const datasets::Split& data) {
  const int p = launch.world_size;
  std::vector<TableRow> rows;
  auto add = [&](const std::string& label, int prefetch, bool reshard, bool bf16_comm = false) {
    TableRow row{label, config, {}, 0, 0, 0};
    row.config.fsdp.prefetch = prefetch;
    row.config.fsdp.reshard_after_forward = reshard;
    row.config.fsdp.bf16_comm = bf16_comm;
    row.config.validate(p);
    dist::LaunchOptions o = launch;
    o.trace_path.clear();
    std::mutex mu;
    dist::launch(o, [&] {
      const StepMeasure m = measured_step(row.config, data);
      std::lock_guard<std::mutex> g(mu);
      StepMeasure& x = row.max;
      x.step_s = std::max(x.step_s, m.step_s);
      x.bytes_sent = std::max(x.bytes_sent, m.bytes_sent);
      x.collectives = std::max(x.collectives, m.collectives);
      if (m.peak > x.peak) {
        x.peak = m.peak;
        x.shards = m.shards;
        x.peak_weights = m.peak_weights;
        x.peak_gradients = m.peak_gradients;
      }
    });
    row.step_formula_s = step_formula(row.config, p, o.network);
    row.bytes_formula = bytes_formula(row.config, p);
    row.memory_formula = memory_formula(row.config, p);
    rows.push_back(row);
  };
  add("FSDP", 0, true);
  add("FSDP prefetch 1", 1, true);
  add("FSDP prefetch 2", 2, true);
  add("FSDP keep", 0, false);
  add("FSDP keep pf 1", 1, false);
  add("FSDP bf16", 0, true, true);
  add("FSDP bf16 pf 1", 1, true, true);
  return rows;
}

std::string format_table(const std::vector<TableRow>& rows, int p) {
  auto kib = [](double b) { return b / 1024.0; };
  std::ostringstream os;
  char line[320];
  std::snprintf(line, sizeof line, "%-16s %3s | %9s %9s | %9s %9s | %9s %9s %9s %9s %9s\n",
                "config", "p", "step ms", "formula", "sent KiB", "formula", "peak KiB", "shards",
                "weights", "grads", "formula");
  os << line;
  for (const TableRow& r : rows) {
    const StepMeasure& m = r.max;
    std::snprintf(
        line, sizeof line,
        "%-16s %3d | %9.4f %9.4f | %9.1f %9.1f | %9.1f %9.1f %9.1f %9.1f %9.1f\n", r.label.c_str(),
        p, m.step_s * 1e3, r.step_formula_s * 1e3, kib(static_cast<double>(m.bytes_sent)),
        kib(static_cast<double>(r.bytes_formula)), kib(static_cast<double>(m.peak)),
        kib(static_cast<double>(m.shards)), kib(static_cast<double>(m.peak_weights)),
        kib(static_cast<double>(m.peak_gradients)), kib(static_cast<double>(r.memory_formula)));
    os << line;
  }
  return os.str();
}

std::string zero_formula_rows(const mlp::Config& model, int p) {
  std::int64_t n = 0, c = 0, sent = 0;
  for (int u = 0; u < model.n_layers; ++u) {
    n += static_cast<std::int64_t>(model.layer_in(u)) * model.layer_out(u);
    const auto cu = static_cast<std::int64_t>(shard_floats(model, u, p));
    c += cu;
    sent += 2 * (p - 1) * 4 * cu;  // ring all-reduce = reduce-scatter + all-gather of the unit
  }
  auto kib = [](std::int64_t b) { return static_cast<double>(b) / 1024.0; };
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %3s | %9s | %9s %9s %9s %9s\n", "formula only", "p",
                "sent KiB", "weights", "grads", "opt state", "total");
  os << line;
  struct Row {
    const char* label;
    std::int64_t grads, state;
  };
  for (const Row& r :
       {Row{"DDP", 4 * n, 8 * n}, Row{"ZeRO-1", 4 * n, 8 * c}, Row{"ZeRO-2", 4 * c, 8 * c}}) {
    std::snprintf(line, sizeof line, "%-16s %3d | %9.1f | %9.1f %9.1f %9.1f %9.1f\n", r.label, p,
                  kib(sent), kib(4 * n), kib(r.grads), kib(r.state),
                  kib(4 * n + r.grads + r.state));
    os << line;
  }
  return os.str();
}

}  // namespace fsdp
