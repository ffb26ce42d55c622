// Given code for 11_fsdp (see model.hpp).
#include "model.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <stdexcept>
#include <string>

#include "fsdp.hpp"

namespace fsdp {

std::size_t padded(std::size_t n, int dp) {
  const auto p = static_cast<std::size_t>(dp);
  return (n + p - 1) / p * p;
}

Range rows_of(std::size_t n, int parts, int index) {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = n / p, extra = n % p;
  const std::size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

std::int64_t Shards::bytes() const {
  std::int64_t b = 0;
  for (const auto* set : {&w, &g, &m, &v}) {
    for (const auto& buf : *set) b += static_cast<std::int64_t>(buf.bytes());
  }
  return b;
}

void launch_convert(const DeviceBuffer<float>& in, DeviceBuffer<bf16>& out, Stream& s) {
  if (in.size() != out.size()) {
    throw dist::Error("launch_convert: " + std::to_string(in.size()) + " floats into " +
                      std::to_string(out.size()) + " bf16s: sizes must match");
  }
  dist::device::launch(s, {"to bf16", 0.0, {dist::device::reads(in), dist::device::writes(out)}},
                       [&] {
                         const std::span<const float> from = in.cspan();
                         const std::span<bf16> to = out.span();
                         for (std::size_t i = 0; i < from.size(); ++i) to[i] = bf16(from[i]);
                       });
}

void launch_convert(const DeviceBuffer<bf16>& in, DeviceBuffer<float>& out, Stream& s) {
  if (in.size() != out.size()) {
    throw dist::Error("launch_convert: " + std::to_string(in.size()) + " bf16s into " +
                      std::to_string(out.size()) + " floats: sizes must match");
  }
  dist::device::launch(s, {"to fp32", 0.0, {dist::device::reads(in), dist::device::writes(out)}},
                       [&] {
                         const std::span<const bf16> from = in.cspan();
                         const std::span<float> to = out.span();
                         for (std::size_t i = 0; i < from.size(); ++i)
                           to[i] = static_cast<float>(from[i]);
                       });
}

// ---- the full buffers and the meter -----------------------------------------------------------

UnitBuffers::UnitBuffers(std::vector<std::size_t> padded_sizes, std::int64_t shard_bytes, int dp)
    : padded_(std::move(padded_sizes)), shard_bytes_(shard_bytes), dp_(dp) {
  if (dp_ < 1) throw dist::Error("UnitBuffers: dp must be at least 1");
  weights_.reserve(padded_.size());
  gradients_.reserve(padded_.size());
  for (std::size_t u = 0; u < padded_.size(); ++u) {
    weights_.emplace_back("full weights " + std::to_string(u), 0);
    gradients_.emplace_back("full gradient " + std::to_string(u), 0);
    weights16_.emplace_back("full weights " + std::to_string(u), 0);
    gradients16_.emplace_back("full gradient " + std::to_string(u), 0);
    weight_shards16_.emplace_back("bf16 weight shard " + std::to_string(u), 0);
    gradient_shards16_.emplace_back("bf16 gradient shard " + std::to_string(u), 0);
  }
  has_weights_.assign(padded_.size(), false);
  has_gradient_.assign(padded_.size(), false);
  weights_are_bf16_.assign(padded_.size(), false);
  gradient_is_bf16_.assign(padded_.size(), false);
  reset_peak();
}

std::size_t UnitBuffers::shard_of(std::size_t padded) const {
  return padded / static_cast<std::size_t>(dp_);
}

std::size_t UnitBuffers::padded_size(int u) const {
  if (u < 0 || u >= num_units()) {
    throw dist::Error("UnitBuffers: unit " + std::to_string(u) + " does not exist (units 0.." +
                      std::to_string(num_units() - 1) + ")");
  }
  return padded_[static_cast<std::size_t>(u)];
}

std::int64_t UnitBuffers::live_bytes() const {
  return shard_bytes_ + weight_bytes_ + gradient_bytes_;
}

void UnitBuffers::reset_peak() {
  peak_ = live_bytes();
  peak_weights_ = weight_bytes_;
  peak_gradients_ = gradient_bytes_;
}

void UnitBuffers::update_peak() {
  if (live_bytes() > peak_) {
    peak_ = live_bytes();
    peak_weights_ = weight_bytes_;
    peak_gradients_ = gradient_bytes_;
  }
}

DeviceBuffer<float>& UnitBuffers::acquire_weights(int u) {
  const std::size_t n = padded_size(u);
  const auto i = static_cast<std::size_t>(u);
  if (has_weights_[i]) {
    throw dist::Error("UnitBuffers::acquire_weights: unit " + std::to_string(u) +
                      "'s full weights are held already: release them before gathering again");
  }
  weights_[i] = DeviceBuffer<float>("full weights " + std::to_string(u), n);
  has_weights_[i] = true;
  weights_are_bf16_[i] = false;
  weight_bytes_ += static_cast<std::int64_t>(weights_[i].bytes());
  log_.push_back({LogEntry::Gather, u});
  update_peak();
  return weights_[i];
}

DeviceBuffer<bf16>& UnitBuffers::acquire_weights_bf16(int u) {
  const std::size_t n = padded_size(u);
  const auto i = static_cast<std::size_t>(u);
  if (has_weights_[i]) {
    throw dist::Error("UnitBuffers::acquire_weights_bf16: unit " + std::to_string(u) +
                      "'s full weights are held already: release them before gathering again");
  }
  weights16_[i] = DeviceBuffer<bf16>("full weights " + std::to_string(u), n);
  weight_shards16_[i] = DeviceBuffer<bf16>("bf16 weight shard " + std::to_string(u), shard_of(n));
  has_weights_[i] = true;
  weights_are_bf16_[i] = true;
  weight_bytes_ += static_cast<std::int64_t>(weights16_[i].bytes() + weight_shards16_[i].bytes());
  log_.push_back({LogEntry::Gather, u});
  update_peak();
  return weights16_[i];
}

bool UnitBuffers::holds_weights(int u) const {
  (void)padded_size(u);
  return has_weights_[static_cast<std::size_t>(u)];
}

DeviceBuffer<float>& UnitBuffers::weights(int u) {
  if (!holds_weights(u)) {
    throw dist::Error("UnitBuffers::weights: unit " + std::to_string(u) +
                      "'s full weights are not held: acquire (and gather) them first");
  }
  if (weights_are_bf16_[static_cast<std::size_t>(u)]) {
    throw dist::Error("UnitBuffers::weights: unit " + std::to_string(u) +
                      "'s full weights are held in bf16: use weights_bf16");
  }
  return weights_[static_cast<std::size_t>(u)];
}

DeviceBuffer<bf16>& UnitBuffers::weights_bf16(int u) {
  if (!holds_weights(u)) {
    throw dist::Error("UnitBuffers::weights_bf16: unit " + std::to_string(u) +
                      "'s full weights are not held: acquire (and gather) them first");
  }
  if (!weights_are_bf16_[static_cast<std::size_t>(u)]) {
    throw dist::Error("UnitBuffers::weights_bf16: unit " + std::to_string(u) +
                      "'s full weights are held in fp32: use weights");
  }
  return weights16_[static_cast<std::size_t>(u)];
}

DeviceBuffer<bf16>& UnitBuffers::weight_shard_bf16(int u) {
  (void)weights_bf16(u);  // held in bf16, else the error
  return weight_shards16_[static_cast<std::size_t>(u)];
}

void UnitBuffers::release_weights(int u) {
  if (!holds_weights(u)) {
    throw dist::Error("UnitBuffers::release_weights: unit " + std::to_string(u) +
                      "'s full weights are not held");
  }
  const auto i = static_cast<std::size_t>(u);
  if (weights_are_bf16_[i]) {
    weight_bytes_ -= static_cast<std::int64_t>(weights16_[i].bytes() + weight_shards16_[i].bytes());
    weights16_[i] = DeviceBuffer<bf16>("full weights " + std::to_string(u), 0);
    weight_shards16_[i] = DeviceBuffer<bf16>("bf16 weight shard " + std::to_string(u), 0);
  } else {
    weight_bytes_ -= static_cast<std::int64_t>(weights_[i].bytes());
    weights_[i] = DeviceBuffer<float>("full weights " + std::to_string(u), 0);
  }
  has_weights_[i] = false;
  weights_are_bf16_[i] = false;
  log_.push_back({LogEntry::Release, u});
}

DeviceBuffer<float>& UnitBuffers::acquire_gradient(int u) {
  const std::size_t n = padded_size(u);
  const auto i = static_cast<std::size_t>(u);
  if (has_gradient_[i]) {
    throw dist::Error("UnitBuffers::acquire_gradient: unit " + std::to_string(u) +
                      "'s full gradient is held already: release it first");
  }
  gradients_[i] = DeviceBuffer<float>("full gradient " + std::to_string(u), n);
  has_gradient_[i] = true;
  gradient_is_bf16_[i] = false;
  gradient_bytes_ += static_cast<std::int64_t>(gradients_[i].bytes());
  update_peak();
  return gradients_[i];
}

DeviceBuffer<bf16>& UnitBuffers::acquire_gradient_bf16(int u) {
  const std::size_t n = padded_size(u);
  const auto i = static_cast<std::size_t>(u);
  if (has_gradient_[i]) {
    throw dist::Error("UnitBuffers::acquire_gradient_bf16: unit " + std::to_string(u) +
                      "'s full gradient is held already: release it first");
  }
  gradients16_[i] = DeviceBuffer<bf16>("full gradient " + std::to_string(u), n);
  gradient_shards16_[i] =
      DeviceBuffer<bf16>("bf16 gradient shard " + std::to_string(u), shard_of(n));
  has_gradient_[i] = true;
  gradient_is_bf16_[i] = true;
  gradient_bytes_ +=
      static_cast<std::int64_t>(gradients16_[i].bytes() + gradient_shards16_[i].bytes());
  update_peak();
  return gradients16_[i];
}

namespace {
void check_gradient_held(const char* what, int u, bool held, bool is_bf16, bool want_bf16) {
  if (!held) {
    throw dist::Error(std::string("UnitBuffers::") + what + ": unit " + std::to_string(u) +
                      "'s full gradient is not held: acquire it first");
  }
  if (is_bf16 != want_bf16) {
    throw dist::Error(std::string("UnitBuffers::") + what + ": unit " + std::to_string(u) +
                      "'s full gradient is held in " +
                      (is_bf16 ? "bf16: use gradient_bf16" : "fp32: use gradient"));
  }
}
}  // namespace

DeviceBuffer<float>& UnitBuffers::gradient(int u) {
  (void)padded_size(u);
  const auto i = static_cast<std::size_t>(u);
  check_gradient_held("gradient", u, has_gradient_[i], gradient_is_bf16_[i], false);
  return gradients_[i];
}

DeviceBuffer<bf16>& UnitBuffers::gradient_bf16(int u) {
  (void)padded_size(u);
  const auto i = static_cast<std::size_t>(u);
  check_gradient_held("gradient_bf16", u, has_gradient_[i], gradient_is_bf16_[i], true);
  return gradients16_[i];
}

DeviceBuffer<bf16>& UnitBuffers::gradient_shard_bf16(int u) {
  (void)gradient_bf16(u);  // held in bf16, else the error
  return gradient_shards16_[static_cast<std::size_t>(u)];
}

void UnitBuffers::release_gradient(int u) {
  (void)padded_size(u);
  const auto i = static_cast<std::size_t>(u);
  if (!has_gradient_[i]) {
    throw dist::Error("UnitBuffers::release_gradient: unit " + std::to_string(u) +
                      "'s full gradient is not held");
  }
  if (gradient_is_bf16_[i]) {
    gradient_bytes_ -=
        static_cast<std::int64_t>(gradients16_[i].bytes() + gradient_shards16_[i].bytes());
    gradients16_[i] = DeviceBuffer<bf16>("full gradient " + std::to_string(u), 0);
    gradient_shards16_[i] = DeviceBuffer<bf16>("bf16 gradient shard " + std::to_string(u), 0);
  } else {
    gradient_bytes_ -= static_cast<std::int64_t>(gradients_[i].bytes());
    gradients_[i] = DeviceBuffer<float>("full gradient " + std::to_string(u), 0);
  }
  has_gradient_[i] = false;
  gradient_is_bf16_[i] = false;
}

// ---- the model --------------------------------------------------------------------------------

Model::Model(const mlp::Config& config, int dp, double flops_per_s, double adam_s_per_float)
    : config_(config), dp_(dp), flops_per_s_(flops_per_s), adam_s_per_float_(adam_s_per_float) {
  config_.validate();
  const auto L = static_cast<std::size_t>(config_.n_layers);
  z_.resize(L);
  h_.resize(L);
  dh_.resize(L);
  dz_.resize(L);
}

std::size_t Model::numel(int u) const {
  return static_cast<std::size_t>(config_.layer_out(u)) *
         static_cast<std::size_t>(config_.layer_in(u));
}

void Model::set_batch(const Matrix& x, const Labels& y) {
  x_ = x;
  y_ = y;
}

double Model::forward_seconds(int u, std::size_t rows) const {
  return flops_per_s_ > 0
             ? 2.0 * static_cast<double>(rows) * static_cast<double>(numel(u)) / flops_per_s_
             : 0.0;
}

double Model::backward_seconds(int u, std::size_t rows) const {
  // dW and dx, except the first unit's dx (its input is data).
  return (u == 0 ? 1.0 : 2.0) * forward_seconds(u, rows);
}

double Model::adam_seconds(int u) const {
  return adam_s_per_float_ *
         static_cast<double>(padded(numel(u), dp_) / static_cast<std::size_t>(dp_));
}

namespace {
using ConstMap = Eigen::Map<const Matrix>;
using MutMap = Eigen::Map<Matrix>;

void check_size(const char* what, int u, std::size_t have, std::size_t want) {
  if (have != want) {
    throw dist::Error(std::string(what) + ": unit " + std::to_string(u) + "'s buffer has " +
                      std::to_string(have) + " floats, the unit's padded size is " +
                      std::to_string(want));
  }
}
}  // namespace

void Model::forward_body(int u, const float* w_data) {
  const auto iu = static_cast<std::size_t>(u);
  const ConstMap w(w_data, config_.layer_out(u), config_.layer_in(u));
  const Matrix& in = u == 0 ? x_ : h_[iu - 1];
  z_[iu].resize(in.rows(), w.rows());
  z_[iu].noalias() = in * w.transpose();
  if (u + 1 < config_.n_layers) mlp::activation_forward(config_.activation, z_[iu], h_[iu]);
}

void Model::backward_body(int u, const float* w_data, float* dw_data) {
  const auto iu = static_cast<std::size_t>(u);
  const ConstMap w(w_data, config_.layer_out(u), config_.layer_in(u));
  MutMap dw(dw_data, config_.layer_out(u), config_.layer_in(u));
  const Matrix& dz = u + 1 == config_.n_layers ? dlogits_ : dz_[iu];
  const Matrix& in = u == 0 ? x_ : h_[iu - 1];
  dw.noalias() = dz.transpose() * in;
  if (u > 0) {
    dh_[iu - 1].resize(dz.rows(), w.cols());
    dh_[iu - 1].noalias() = dz * w;
    mlp::activation_backward(config_.activation, z_[iu - 1], h_[iu - 1], dh_[iu - 1], dz_[iu - 1]);
  }
}

void Model::launch_forward(int u, const DeviceBuffer<float>& weights, Stream& s, UnitBuffers& log) {
  check_size("launch_forward", u, weights.size(), padded(numel(u), dp_));
  log.log().push_back({LogEntry::Forward, u});
  dist::device::launch(s,
                       {"forward " + std::to_string(u),
                        forward_seconds(u, static_cast<std::size_t>(x_.rows())),
                        {dist::device::reads(weights)}},
                       [&, u] { forward_body(u, weights.cspan().data()); });
}

void Model::launch_forward(int u, const DeviceBuffer<bf16>& weights, Stream& s, UnitBuffers& log) {
  check_size("launch_forward", u, weights.size(), padded(numel(u), dp_));
  log.log().push_back({LogEntry::Forward, u});
  dist::device::launch(s,
                       {"forward " + std::to_string(u),
                        forward_seconds(u, static_cast<std::size_t>(x_.rows())),
                        {dist::device::reads(weights)}},
                       [&, u] {
                         const std::span<const bf16> w = weights.cspan();
                         w_.resize(config_.layer_out(u), config_.layer_in(u));
                         for (std::size_t i = 0; i < numel(u); ++i)
                           w_.data()[i] = static_cast<float>(w[i]);
                         forward_body(u, w_.data());
                       });
}

float Model::launch_loss(Stream& s) {
  float loss = 0;
  dist::device::launch(s, {"loss", 0.0, {}}, [&] {
    loss = mlp::softmax_cross_entropy_forward(z_.back(), y_, probs_);
    mlp::softmax_cross_entropy_backward(probs_, y_, dlogits_);
  });
  return loss;
}

void Model::launch_backward(int u, const DeviceBuffer<float>& weights,
                            DeviceBuffer<float>& gradient, Stream& s, UnitBuffers& log) {
  check_size("launch_backward", u, weights.size(), padded(numel(u), dp_));
  check_size("launch_backward", u, gradient.size(), padded(numel(u), dp_));
  log.log().push_back({LogEntry::Backward, u});
  dist::device::launch(s,
                       {"backward " + std::to_string(u),
                        backward_seconds(u, static_cast<std::size_t>(x_.rows())),
                        {dist::device::reads(weights), dist::device::writes(gradient)}},
                       [&, u] {
                         std::span<float> g = gradient.span();
                         backward_body(u, weights.cspan().data(), g.data());
                         std::fill(g.begin() + static_cast<std::ptrdiff_t>(numel(u)), g.end(),
                                   0.0f);
                       });
}

void Model::launch_backward(int u, const DeviceBuffer<bf16>& weights, DeviceBuffer<bf16>& gradient,
                            Stream& s, UnitBuffers& log) {
  check_size("launch_backward", u, weights.size(), padded(numel(u), dp_));
  check_size("launch_backward", u, gradient.size(), padded(numel(u), dp_));
  log.log().push_back({LogEntry::Backward, u});
  dist::device::launch(s,
                       {"backward " + std::to_string(u),
                        backward_seconds(u, static_cast<std::size_t>(x_.rows())),
                        {dist::device::reads(weights), dist::device::writes(gradient)}},
                       [&, u] {
                         const std::span<const bf16> w = weights.cspan();
                         const std::span<bf16> g = gradient.span();
                         const std::size_t n = numel(u);
                         w_.resize(config_.layer_out(u), config_.layer_in(u));
                         dw_.resize(config_.layer_out(u), config_.layer_in(u));
                         for (std::size_t i = 0; i < n; ++i)
                           w_.data()[i] = static_cast<float>(w[i]);
                         backward_body(u, w_.data(), dw_.data());
                         for (std::size_t i = 0; i < n; ++i) g[i] = bf16(dw_.data()[i]);
                         std::fill(g.begin() + static_cast<std::ptrdiff_t>(n), g.end(), bf16(0.0f));
                       });
}

void Model::launch_adam(int u, Shards& shards, std::int64_t t, const AdamConfig& config,
                        Stream& s) {
  const auto i = static_cast<std::size_t>(u);
  DeviceBuffer<float>& w = shards.w.at(i);
  const DeviceBuffer<float>& g = shards.g.at(i);
  DeviceBuffer<float>& m = shards.m.at(i);
  DeviceBuffer<float>& v = shards.v.at(i);
  dist::device::launch(s,
                       {"adam " + std::to_string(u),
                        adam_seconds(u),
                        {dist::device::writes(w), dist::device::reads(g), dist::device::writes(m),
                         dist::device::writes(v)}},
                       [&] { adam_update(w.span(), g.cspan(), m.span(), v.span(), t, config); });
}

}  // namespace fsdp
