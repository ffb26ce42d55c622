// MUTANT bucket_cap_exclusive: build_buckets opens a new bucket when the size would reach the cap (>=), not only when it would exceed it: a bucket of exactly bucket_cap_bytes is split.
// 06_data_parallel: your TODOs. The given parts of MyDP (constructor, destructor, layout) are at
// the end.
#include "data_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dist/eigen.hpp"
#include "distlab/todo.hpp"

namespace dp {

std::int64_t global_batch_index(std::int64_t step, int rank, int world_size) {
  // BEGIN SOLUTION: step * world_size + rank
  return step * world_size + rank;
  // END SOLUTION
}

bool check_parameter_closeness(const mlp::MLP& model, float rtol) {
  // BEGIN SOLUTION: flatten this rank's parameters; dist::gather them on rank 0; rank 0 compares each rank's copy with its own; dist::broadcast the answer (an int32) from rank 0; return it
  const auto params = model.parameters();
  std::size_t n = 0;
  for (const auto* p : params) n += static_cast<std::size_t>(p->numel());
  std::vector<float> mine;
  mine.reserve(n);
  for (const auto* p : params) mine.insert(mine.end(), p->value.data(), p->value.data() + p->numel());
  const int world = dist::world_size();
  std::vector<float> all(dist::rank() == 0 ? n * static_cast<std::size_t>(world) : 0);
  dist::gather(std::span<const float>(mine), std::span<float>(all), 0);
  std::int32_t ok = 1;
  if (dist::rank() == 0) {
    for (int r = 1; r < world && ok; ++r) {
      const float* theirs = all.data() + static_cast<std::size_t>(r) * n;
      for (std::size_t i = 0; i < n; ++i) {
        const float a = theirs[i], b = mine[i];
        if (!(std::abs(a - b) <= rtol * std::max(std::abs(a), std::abs(b)))) {
          ok = 0;
          break;
        }
      }
    }
  }
  dist::broadcast(std::span<std::int32_t>(&ok, 1), 0);
  return ok != 0;
  // END SOLUTION
}

void allreduce_gradients(mlp::MLP& model) {
  // BEGIN SOLUTION: for every parameter: dist::all_reduce its grad with ReduceOp::Avg (dist::as_span turns a matrix into a span)
  for (mlp::Parameter* p : model.parameters()) dist::all_reduce(dist::as_span(p->grad), dist::ReduceOp::Avg);
  // END SOLUTION
}

void MyDP::broadcast_parameters() {
  // BEGIN SOLUTION: dist::broadcast every parameter's value from rank 0, in the same order on every rank
  for (mlp::Parameter* p : params_) dist::broadcast(dist::as_span(p->value), 0);
  // END SOLUTION
}

void MyDP::build_buckets() {
  // BEGIN SOLUTION: walk params_ from the last to the first; open a new bucket when the current one is empty or adding this parameter's bytes (numel * sizeof(float)) would exceed bucket_cap_bytes_; record bucket_of_[i] and offset_[i] (floats into the bucket); size each bucket's buffer
  const int n = static_cast<int>(params_.size());
  bucket_of_.assign(static_cast<std::size_t>(n), -1);
  offset_.assign(static_cast<std::size_t>(n), 0);
  buckets_.clear();
  std::size_t used = 0;  // floats in the current bucket
  for (int i = n - 1; i >= 0; --i) {
    const auto numel = static_cast<std::size_t>(params_[static_cast<std::size_t>(i)]->numel());
    if (buckets_.empty() || (used + numel) * sizeof(float) >= bucket_cap_bytes_) {
      buckets_.emplace_back();
      used = 0;
    }
    Bucket& b = buckets_.back();
    b.params.push_back(i);
    bucket_of_[static_cast<std::size_t>(i)] = static_cast<int>(buckets_.size()) - 1;
    offset_[static_cast<std::size_t>(i)] = used;
    used += numel;
    b.buffer.resize(used);
  }
  // END SOLUTION
}

void MyDP::on_gradient_ready(int index) {
  // BEGIN SOLUTION: copy params_[index]->grad into its bucket's buffer at offset_[index]; count it; when the bucket has all its gradients, start dist::all_reduce_async(buffer, Avg), keep the Work, mark it launched
  const auto k = static_cast<std::size_t>(index);
  Bucket& b = buckets_[static_cast<std::size_t>(bucket_of_[k])];
  const mlp::Parameter& p = *params_[k];
  std::memcpy(b.buffer.data() + offset_[k], p.grad.data(), static_cast<std::size_t>(p.numel()) * sizeof(float));
  if (++b.ready == static_cast<int>(b.params.size())) {
    b.work = dist::all_reduce_async(std::span<float>(b.buffer), dist::ReduceOp::Avg);
    b.launched = true;
  }
  // END SOLUTION
}

void MyDP::finish_gradient_sync() {
  // BEGIN SOLUTION: for every bucket in launch order: throw std::logic_error if it was not launched; wait on its Work; copy each parameter's averaged gradient back from the buffer; reset ready and launched for the next step
  for (std::size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    if (!b.launched) {
      throw std::logic_error("MyDP::finish_gradient_sync: bucket " + std::to_string(bi) + " got " +
                             std::to_string(b.ready) + " of its " + std::to_string(b.params.size()) +
                             " gradients; call model.backward() before finish_gradient_sync()");
    }
    b.work.wait();
    for (int i : b.params) {
      mlp::Parameter& p = *params_[static_cast<std::size_t>(i)];
      std::memcpy(p.grad.data(), b.buffer.data() + offset_[static_cast<std::size_t>(i)],
                  static_cast<std::size_t>(p.numel()) * sizeof(float));
    }
    b.ready = 0;
    b.launched = false;
  }
  // END SOLUTION
}

// =============================================================================================
// Given code.

MyDP::MyDP(mlp::MLP& model, std::size_t bucket_cap_bytes)
    : model_(model), params_(model.parameters()), bucket_cap_bytes_(bucket_cap_bytes) {
  build_buckets();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const int index = static_cast<int>(i);
    hook_handles_.push_back(params_[i]->add_hook([this, index](mlp::Parameter&) { on_gradient_ready(index); }));
  }
  broadcast_parameters();
}

MyDP::~MyDP() {
  for (std::size_t i = 0; i < hook_handles_.size() && i < params_.size(); ++i) {
    params_[i]->remove_hook(hook_handles_[i]);
  }
  // An all-reduce still in flight writes into a buffer that is about to go away: wait for it.
  for (Bucket& b : buckets_) {
    if (b.launched) {
      try {
        b.work.wait();
      } catch (...) {
      }
    }
  }
}

std::vector<std::vector<int>> MyDP::bucket_layout() const {
  std::vector<std::vector<int>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

}  // namespace dp
