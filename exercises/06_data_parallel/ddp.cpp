#include "ddp.hpp"

#include <memory>
#include <stdexcept>

#include "datasets/loader.hpp"
#include "dist/eigen.hpp"
#include "distlab/timing.hpp"

namespace dp {

KitDDP::KitDDP(mlp::MLP& model) : model_(model) {
  for (mlp::Parameter* p : model_.parameters()) dist::broadcast(dist::as_span(p->value), 0);
}

void KitDDP::finish_gradient_sync() {
  for (mlp::Parameter* p : model_.parameters())
    dist::all_reduce(dist::as_span(p->grad), dist::ReduceOp::Avg);
}

double StepFlops::backward_total() const {
  double total = 0;
  for (double f : backward) total += f;
  return total;
}

StepFlops step_flops(const mlp::MLP& model, int batch) {
  StepFlops f;
  const auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double one_product = 2.0 * batch * static_cast<double>(params[i]->numel());
    f.forward += one_product;
    f.backward.push_back(i == 0 ? one_product : 2.0 * one_product);  // dW; dx except layer 0
  }
  return f;
}

ComputeModel::ComputeModel(mlp::MLP& model, int batch_size, double flops_per_s)
    : model_(model), batch_size_(batch_size), flops_per_s_(flops_per_s) {
  if (flops_per_s <= 0) throw std::invalid_argument("ComputeModel: flops_per_s must be > 0");
  const StepFlops flops = step_flops(model_, batch_size_);
  const auto params = model_.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double seconds = flops.backward[i] / flops_per_s_;
    handles_.push_back(params[i]->add_hook(
        [seconds](mlp::Parameter&) { dist::sim_compute(seconds, "backward"); }));
  }
}

ComputeModel::~ComputeModel() {
  const auto params = model_.parameters();
  for (std::size_t i = 0; i < handles_.size(); ++i) params[i]->remove_hook(handles_[i]);
}

void ComputeModel::charge_forward() const {
  dist::sim_compute(step_flops(model_, batch_size_).forward / flops_per_s_, "forward");
}

const char* to_string(Sync s) {
  switch (s) {
    case Sync::Kit:
      return "kit DDP";
    case Sync::Manual:
      return "all_reduce_gradients after backward";
    case Sync::MyDP:
      return "MyDP (buckets, overlap)";
  }
  return "?";
}

SyncWrapper::SyncWrapper(mlp::MLP& model, Sync mode, std::size_t bucket_cap_bytes) {
  if (mode == Sync::Kit) {
    kit_ = std::make_unique<KitDDP>(model);
  } else if (mode == Sync::MyDP) {
    mine_ = std::make_unique<MyDP>(model, bucket_cap_bytes);
  } else {
    for (mlp::Parameter* p : model.parameters()) dist::broadcast(dist::as_span(p->value), 0);
  }
}

SyncWrapper::~SyncWrapper() = default;

GradientSync SyncWrapper::sync() const {
  if (kit_) return kit_.get();
  if (mine_) return mine_.get();
  return ManualAllReduce{};
}

float dp_step(const GradientSync& sync, mlp::MLP& model, mlp::SGD& opt, const mlp::Matrix& x,
              const mlp::Labels& y, mlp::Matrix& probs, mlp::Matrix& dlogits,
              const ComputeModel* compute) {
  if (compute) compute->charge_forward();
  const mlp::Matrix& logits = model.forward(x);
  const float loss = mlp::softmax_cross_entropy_forward(logits, y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  struct Finish {
    mlp::MLP& model;
    void operator()(ManualAllReduce) const { all_reduce_gradients(model); }
    void operator()(KitDDP* kit) const { kit->finish_gradient_sync(); }
    void operator()(MyDP* mine) const { mine->finish_gradient_sync(); }
  };
  std::visit(Finish{model}, sync);
  opt.step();
  return loss;
}

std::vector<mlp::LogLine> train_data_parallel(const mlp::Config& c, const datasets::Split& data,
                                              const RunOptions& o,
                                              const std::function<void(const mlp::LogLine&)>& out,
                                              mlp::MLP* trained) {
  c.validate();
  const int rank = dist::rank(), world = dist::world_size();
  mlp::MLP model(c, c.seed + 2 + static_cast<std::uint64_t>(rank));
  std::unique_ptr<ComputeModel> compute;
  if (o.compute_flops_per_s > 0)
    compute = std::make_unique<ComputeModel>(model, c.batch_size, o.compute_flops_per_s);
  const SyncWrapper wrapper(model, o.sync, o.bucket_cap_bytes);
  mlp::SGD opt(model.parameters(), c.learning_rate);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  mlp::TrainingLog log(c, out);
  for (int step = 0; step < c.niters; ++step) {
    loader.load(global_batch_index(step, rank, world), x, y);
    distlab::Stopwatch sw;
    const double loss = dp_step(wrapper.sync(), model, opt, x, y, probs, dlogits, compute.get());
    log.add(loss, sw.elapsed_ms());
    if (log.due(step)) {
      double mean = log.mean_loss();
      dist::all_reduce(std::span<double>(&mean, 1), dist::ReduceOp::Avg);
      if (rank == 0) {
        log.write(step, mean, mlp::evaluate_loss(model, data.test));
      } else {
        log.skip();
      }
    }
  }
  if (trained) {  // values only: the hooks stay with (and leave with) this rank's model
    const auto src = model.parameters();
    const auto dst = trained->parameters();
    for (std::size_t i = 0; i < src.size() && i < dst.size(); ++i) dst[i]->value = src[i]->value;
  }
  return log.lines();
}

}  // namespace dp
