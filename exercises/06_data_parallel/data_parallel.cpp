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
  DISTLAB_TODO("step * world_size + rank");
}

bool check_parameter_closeness(const mlp::MLP& model, float rtol) {
  DISTLAB_TODO("flatten this rank's parameters; dist::gather them on rank 0; rank 0 compares each "
               "rank's copy with its own; dist::broadcast the answer (an int32) from rank 0; "
               "return it");
}

void allreduce_gradients(mlp::MLP& model) {
  DISTLAB_TODO("for every parameter: dist::all_reduce its grad with ReduceOp::Avg (dist::as_span "
               "turns a matrix into a span)");
}

void MyDP::broadcast_parameters() {
  DISTLAB_TODO("dist::broadcast every parameter's value from rank 0, in the same order on every "
               "rank");
}

void MyDP::build_buckets() {
  DISTLAB_TODO("walk params_ from the last to the first; open a new bucket when the current one "
               "is empty or adding this parameter's bytes (numel * sizeof(float)) would exceed "
               "bucket_cap_bytes_; record bucket_of_[i] and offset_[i] (floats into the bucket); "
               "size each bucket's buffer");
}

void MyDP::on_gradient_ready(int index) {
  DISTLAB_TODO("copy params_[index]->grad into its bucket's buffer at offset_[index]; count it; "
               "when the bucket has all its gradients, start dist::all_reduce_async(buffer, Avg), "
               "keep the Work, mark it launched");
}

void MyDP::finish_gradient_sync() {
  DISTLAB_TODO("for every bucket in launch order: throw std::logic_error if it was not launched; "
               "wait on its Work; copy each parameter's averaged gradient back from the buffer; "
               "reset ready and launched for the next step");
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
