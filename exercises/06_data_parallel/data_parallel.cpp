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
  DISTLAB_TODO("the global batch this rank trains on at this step, so that the ranks together "
               "see, step by step, what one process with a world_size-times-larger batch would "
               "see (data_parallel.hpp, Task 1; README: Tasks, 1)");
}

bool check_parameter_closeness(const mlp::MLP& model, float rtol) {
  DISTLAB_TODO("decide on rank 0 whether every rank's parameters equal rank 0's within rtol (the "
               "comparison data_parallel.hpp defines), and give every rank the same answer, using "
               "only built-in collectives (data_parallel.hpp, Task 2)");
}

void all_reduce_gradients(mlp::MLP& model) {
  DISTLAB_TODO("after backward, make every rank's gradients the mean over the ranks "
               "(data_parallel.hpp, Task 3: why the mean and not the sum)");
}

void MyDP::broadcast_parameters() {
  DISTLAB_TODO("make every rank start from rank 0's parameter values; every rank must issue the "
               "same collectives in the same order (README: Tasks, 4)");
}

void MyDP::build_buckets() {
  DISTLAB_TODO("group the parameters into buckets in the order backward produces their gradients, "
               "following the cap rule in data_parallel.hpp (Task 4), and record where each "
               "parameter's gradient lives in its bucket's flat buffer");
}

void MyDP::on_gradient_ready(int index) {
  DISTLAB_TODO("the hook of one parameter: put its gradient into its bucket, and start the "
               "bucket's averaging all-reduce without waiting as soon as the bucket has all its "
               "gradients (data_parallel.hpp, Task 4)");
}

void MyDP::finish_gradient_sync() {
  DISTLAB_TODO("wait for every bucket's all-reduce and give each parameter its averaged gradient "
               "back, leaving the buckets ready for the next step; a bucket that was never "
               "started is an error (data_parallel.hpp, Task 4)");
}

// =============================================================================================
// Given code.

MyDP::MyDP(mlp::MLP& model, std::size_t bucket_cap_bytes)
    : model_(model), params_(model.parameters()), bucket_cap_bytes_(bucket_cap_bytes) {
  build_buckets();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const int index = static_cast<int>(i);
    hook_handles_.push_back(
        params_[i]->add_hook([this, index](mlp::Parameter&) { on_gradient_ready(index); }));
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
