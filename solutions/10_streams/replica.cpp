#include "replica.hpp"

#include "dist/device_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace streams {

namespace dd = dist::device;

namespace {
// A timeline label such as "B3", built by appending (GCC 12 at -O3 warns, wrongly, with -Wrestrict
// on a one-character literal + std::to_string).
std::string label(const char* kind, int index) {
  std::string s(kind);
  s += std::to_string(index);
  return s;
}
}  // namespace

std::string render_timeline(const std::vector<Span>& spans, const std::vector<std::string>& rows,
                            int columns) {
  double end = 0;
  std::size_t width = 0;
  for (const auto& s : spans) end = std::max(end, s.t1);
  for (const auto& r : rows) width = std::max(width, r.size());
  if (end <= 0) return "(nothing ran)\n";
  const double per_col = end / columns;
  std::ostringstream os;
  for (const auto& row : rows) {
    std::string line(static_cast<std::size_t>(columns), '.');
    for (const auto& s : spans) {
      if (s.row != row || s.t1 <= s.t0) continue;
      const int c0 = std::clamp(static_cast<int>(std::lround(s.t0 / per_col)), 0, columns - 1);
      const int c1 = std::clamp(static_cast<int>(std::lround(s.t1 / per_col)), c0 + 1, columns);
      for (int c = c0; c < c1; ++c) line[static_cast<std::size_t>(c)] = '=';
      const int w = c1 - c0;
      const int label = w >= 3 ? std::min(static_cast<int>(s.label.size()), w - 1) : 1;
      for (int k = 0; k < label; ++k)
        line[static_cast<std::size_t>(c0 + k)] = s.label[static_cast<std::size_t>(k)];
      if (w >= 3) line[static_cast<std::size_t>(c1 - 1)] = ' ';
    }
    os << row << std::string(width - row.size(), ' ') << " |" << line << "|\n";
  }
  std::ostringstream last;
  last.setf(std::ios::fixed);
  last.precision(3);
  last << end * 1e3 << " ms";
  const std::string tail = last.str();
  os << std::string(width + 2, ' ') << '0'
     << std::string(
            static_cast<std::size_t>(std::max<int>(1, columns - 1 - static_cast<int>(tail.size()))),
            ' ')
     << tail << "\n";
  return os.str();
}

float Replica::target(int rank, int layer, std::size_t i) {
  return 0.25f * static_cast<float>(rank + 1) *
         std::cos(0.37f * static_cast<float>(i % 1024) + static_cast<float>(layer));
}

float Replica::initial(int layer, std::size_t i) {
  return 0.5f * std::sin(0.013f * static_cast<float>(i % 4096) + static_cast<float>(layer));
}

Replica::Replica(const StepConfig& config, Stream& compute) : config_(config), origin_("origin") {
  if (config_.layer_floats.empty()) throw std::invalid_argument("Replica: no layers");
  const int n = num_layers();
  bucket_of_.assign(static_cast<std::size_t>(n), -1);
  offset_.assign(static_cast<std::size_t>(n), 0);
  std::size_t bytes = 0;
  for (int l = n - 1; l >= 0; --l) {  // 06's rule: reverse order, a bucket stays <= the cap
    const std::size_t b = config_.layer_floats[static_cast<std::size_t>(l)] * sizeof(float);
    if (buckets_.empty() || bytes + b > config_.bucket_cap_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    offset_[static_cast<std::size_t>(l)] = bytes / sizeof(float);
    buckets_.back().push_back(l);
    bucket_of_[static_cast<std::size_t>(l)] = num_buckets() - 1;
    bytes += b;
  }
  for (int b = 0; b < num_buckets(); ++b) {
    params_.emplace_back("params bucket " + std::to_string(b), bucket_floats(b));
    grads_.emplace_back("grads bucket " + std::to_string(b), bucket_floats(b));
    targets_.emplace_back("targets bucket " + std::to_string(b), bucket_floats(b));
  }
  // Upload the initial parameters (the same on every rank) and this rank's targets, and wait for
  // the copies: the host vectors go away at the end of the constructor.
  std::vector<std::vector<float>> p(params_.size()), t(params_.size());
  for (int b = 0; b < num_buckets(); ++b) {
    p[static_cast<std::size_t>(b)].resize(bucket_floats(b));
    t[static_cast<std::size_t>(b)].resize(bucket_floats(b));
  }
  const int rank = dist::rank();
  for (int l = 0; l < n; ++l) {
    const auto b = static_cast<std::size_t>(bucket_of(l));
    const std::size_t off = offset_[static_cast<std::size_t>(l)];
    for (std::size_t i = 0; i < config_.layer_floats[static_cast<std::size_t>(l)]; ++i) {
      p[b][off + i] = initial(l, i);
      t[b][off + i] = target(rank, l, i);
    }
  }
  for (std::size_t b = 0; b < params_.size(); ++b) {
    dd::memcpy_async(params_[b], std::span<const float>(p[b]), compute);
    dd::memcpy_async(targets_[b], std::span<const float>(t[b]), compute);
  }
  compute.synchronize();
  origin_.record(compute);
}

std::size_t Replica::bucket_floats(int bucket) const {
  std::size_t n = 0;
  for (int l : buckets_.at(static_cast<std::size_t>(bucket)))
    n += config_.layer_floats[static_cast<std::size_t>(l)];
  return n;
}

double Replica::backward_seconds(int layer) const {
  return static_cast<double>(config_.layer_floats.at(static_cast<std::size_t>(layer))) *
         config_.backward_s_per_float;
}

double Replica::sgd_seconds(int bucket) const {
  return static_cast<double>(bucket_floats(bucket)) * config_.sgd_s_per_float;
}

void Replica::mark(const std::string& row, const std::string& label, Event begin, Stream& s) {
  Event end("timeline");
  end.record(s);
  pending_.push_back({row, label, begin, end});
}

void Replica::launch_backward(int layer, Stream& compute) {
  const auto b = static_cast<std::size_t>(bucket_of(layer));
  Event begin("timeline");
  begin.record(compute);
  dd::difference(params_[b], targets_[b], grads_[b], offset_[static_cast<std::size_t>(layer)],
                 config_.layer_floats[static_cast<std::size_t>(layer)], compute,
                 backward_seconds(layer), "backward " + std::to_string(layer));
  mark("compute", label("B", layer), begin, compute);
}

AllReduceWork Replica::all_reduce_bucket(int bucket, Stream& comm) {
  Event begin("timeline");
  begin.record(comm);
  AllReduceWork work(grads_.at(static_cast<std::size_t>(bucket)), comm, dist::ReduceOp::Avg);
  mark("comm", label("R", bucket), begin, comm);
  return work;
}

void Replica::launch_sgd(int bucket, Stream& compute) {
  const auto b = static_cast<std::size_t>(bucket);
  Event begin("timeline");
  begin.record(compute);
  dd::axpy(-config_.learning_rate, grads_.at(b), params_.at(b), compute, sgd_seconds(bucket),
           "sgd bucket " + std::to_string(bucket));
  mark("compute", label("S", bucket), begin, compute);
}

std::vector<float> Replica::parameters(Stream& s) {
  std::vector<std::vector<float>> host(params_.size());
  for (std::size_t b = 0; b < params_.size(); ++b) {
    host[b].resize(params_[b].size());
    dd::memcpy_async(std::span<float>(host[b]), params_[b], s);
  }
  s.synchronize();
  std::vector<float> out;
  for (int l = 0; l < num_layers(); ++l) {
    const auto& h = host[static_cast<std::size_t>(bucket_of(l))];
    const auto off = static_cast<std::ptrdiff_t>(offset_[static_cast<std::size_t>(l)]);
    out.insert(out.end(), h.begin() + off,
               h.begin() + off +
                   static_cast<std::ptrdiff_t>(config_.layer_floats[static_cast<std::size_t>(l)]));
  }
  return out;
}

std::vector<Span> Replica::spans() const {
  std::vector<Span> out;
  for (const auto& p : pending_) {
    out.push_back({p.row, p.label, dd::elapsed_seconds(origin_, p.begin),
                   dd::elapsed_seconds(origin_, p.end)});
  }
  return out;
}

void optimizer_step_unordered(Replica& replica, Stream& compute) {
  for (int b = 0; b < replica.num_buckets(); ++b) replica.launch_sgd(b, compute);
}

WaitingResult measure_waiting(Strategy s, const WaitingSetup& w) {
  Stream compute("compute"), comm("comm");
  DeviceBuffer<float> grad("grad", w.floats), params("params", w.floats);
  const int rank = dist::rank();
  const double t0 = dist::sim_time();
  Event origin("origin"), ready("grad ready"), comm_begin("timeline"), comm_end("timeline");
  origin.record(compute);
  dd::fill(grad, static_cast<float>(rank + 1), compute, w.backward_s, "backward");
  ready.record(compute);
  comm.wait_event(ready);
  comm_begin.record(comm);
  AllReduceWork work(grad, comm, dist::ReduceOp::Avg);
  comm_end.record(comm);

  WaitingResult r;
  const double h0 = dist::sim_time() - t0;
  r.host_lost_s = wait_for(work, s, compute, w.poll_interval_s);
  const double h1 = dist::sim_time() - t0;
  dist::sim_compute(w.host_work_s, "load next batch");
  Event opt_begin("timeline"), opt_end("timeline");
  opt_begin.record(compute);
  dd::axpy(-0.1f, grad, params, compute, w.optimizer_s, "optimizer");
  opt_end.record(compute);
  dd::device_synchronize();
  r.step_s = dist::sim_time() - t0;
  r.spans = {{"compute", "backward", 0, dd::elapsed_seconds(origin, ready)},
             {"comm", "all-reduce", dd::elapsed_seconds(origin, comm_begin),
              dd::elapsed_seconds(origin, comm_end)},
             {"compute", "optimizer", dd::elapsed_seconds(origin, opt_begin),
              dd::elapsed_seconds(origin, opt_end)},
             {"host", s == Strategy::Poll ? "poll" : "synchronize", h0, h1},
             {"host", "load next batch", h1, h1 + w.host_work_s}};
  r.grad.resize(w.floats);
  dd::memcpy_async(std::span<float>(r.grad), grad, compute);
  compute.synchronize();
  return r;
}

double all_reduce_seconds(std::size_t bytes, int p, const dist::NetworkModel& net) {
  if (p <= 1) return 0;
  const double chunk = static_cast<double>(bytes) / p;
  double t = 2.0 * (p - 1) * (net.latency_s + chunk / net.bandwidth_Bps);
  if (net.reduce_Bps > 0) t += (p - 1) * chunk / net.reduce_Bps;
  return t;
}

WaitingFormula waiting_formula(Strategy s, const WaitingSetup& w, int p,
                               const dist::NetworkModel& net) {
  const double done = w.backward_s + all_reduce_seconds(w.floats * sizeof(float), p, net);
  WaitingFormula f;
  switch (s) {
    case Strategy::Synchronize:
      f.host_lost_s = done;
      break;
    case Strategy::Poll:  // the first poll at or after `done`; polls at 0, q, 2q, ...
      f.host_lost_s = std::ceil(done / w.poll_interval_s - 1e-9) * w.poll_interval_s;
      break;
    case Strategy::StreamOrder:
      f.host_lost_s = 0;
      break;
  }
  f.step_s = std::max(done, f.host_lost_s + w.host_work_s) + w.optimizer_s;
  return f;
}

double step_formula(const Replica& r, int p, const dist::NetworkModel& net, bool overlap) {
  std::vector<double> complete;  // C_b
  double t = 0;
  for (int l = r.num_layers() - 1; l >= 0; --l) {
    t += r.backward_seconds(l);
    const int b = r.bucket_of(l);
    if (static_cast<int>(complete.size()) <= b) complete.resize(static_cast<std::size_t>(b) + 1);
    complete[static_cast<std::size_t>(b)] = t;
  }
  const double backward_end = t;
  double reduced = 0, step = backward_end;
  for (int b = 0; b < r.num_buckets(); ++b) {
    const double ready = overlap ? complete[static_cast<std::size_t>(b)] : backward_end;
    reduced =
        std::max(reduced, ready) + all_reduce_seconds(r.bucket_floats(b) * sizeof(float), p, net);
    step = std::max(step, reduced) + r.sgd_seconds(b);
  }
  return step;
}

}  // namespace streams
