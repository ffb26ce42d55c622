// 05_mlp, instructor-only: "allocate nothing inside forward/backward" (mlp.hpp), observed by
// counting the heap allocations of the calling thread around one call, after a warm-up call with
// the same shapes has sized every output buffer.
//
// Eigen takes its matrices' storage with std::malloc (not operator new), so this file replaces the
// C library's malloc, calloc and realloc for the whole test program: each forwards to glibc's own
// (__libc_malloc, ...), and counts the call while this thread has counting switched on. free and
// the aligned allocators stay glibc's (they share its heap). Under a sanitizer (which replaces
// malloc itself) nothing is replaced and the tests skip.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/random.hpp"
#include "mlp.hpp"
#include "mlp_test_data.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DISTLAB_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define DISTLAB_COUNTS_ALLOCATIONS 0
#endif
#endif
#if !defined(DISTLAB_COUNTS_ALLOCATIONS) && defined(__GLIBC__)
#define DISTLAB_COUNTS_ALLOCATIONS 1
#endif
#ifndef DISTLAB_COUNTS_ALLOCATIONS
#define DISTLAB_COUNTS_ALLOCATIONS 0
#endif

namespace {
thread_local bool counting = false;  // constant-initialised: reading it allocates nothing
std::atomic<std::int64_t> allocations{0};
}  // namespace

#if DISTLAB_COUNTS_ALLOCATIONS
extern "C" {
void* __libc_malloc(std::size_t);               // NOLINT: glibc's own allocator
void* __libc_calloc(std::size_t, std::size_t);  // NOLINT
void* __libc_realloc(void*, std::size_t);       // NOLINT
void __libc_free(void*);                        // NOLINT

void* malloc(std::size_t n) noexcept {
  if (counting) allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) noexcept {
  if (counting) allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) noexcept {
  if (counting) allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void free(void* p) noexcept { __libc_free(p); }
}
#endif

using mlp::Matrix;

namespace {

using mlptest::random_matrix;

/// The heap allocations f makes on this thread.
template <class F>
std::int64_t allocations_of(F&& f) {
  allocations.store(0);
  // Compiler barriers: malloc is a builtin the optimiser assumes reads no memory, so without them
  // the two stores to `counting` around an inlined f could be merged past its allocations.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  counting = true;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  f();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  counting = false;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return allocations.load();
}

/// Calls f once to size its outputs, then returns the allocations of a second call.
template <class F>
std::int64_t allocations_after_warm_up(F&& f) {
  f();
  return allocations_of(f);
}

// Shapes above Eigen's small-product threshold (a product goes through its blocked kernel, whose
// workspace for these sizes is on the stack) and none square.
constexpr Eigen::Index kB = 24, kIn = 40, kOut = 32, kClasses = 10;

}  // namespace

TEST(HiddenAllocation, TheCounterSeesEigensAllocations) {
  if (!DISTLAB_COUNTS_ALLOCATIONS) GTEST_SKIP() << "allocations are not counted in this build";
  const Matrix x = random_matrix(kB, kIn, 1), w = random_matrix(kOut, kIn, 2);
  Matrix y;
  EXPECT_GE(allocations_of([&] { y = x * w.transpose(); }), 1)
      << "a product assigned without noalias into an empty matrix must be seen allocating";
  EXPECT_EQ(allocations_of([&] { y.noalias() = x * w.transpose(); }), 0)
      << "the counter counts an allocation Eigen does not make";
}

TEST(HiddenAllocation, BuildingBlocksWriteIntoTheirPreallocatedOutputs) {
  if (!DISTLAB_COUNTS_ALLOCATIONS) GTEST_SKIP() << "allocations are not counted in this build";
  const Matrix x = random_matrix(kB, kIn, 3), w = random_matrix(kOut, kIn, 4);
  const Matrix dy = random_matrix(kB, kOut, 5), z = random_matrix(kB, kOut, 6);
  const Matrix logits = random_matrix(kB, kClasses, 7);
  mlp::Labels labels;
  for (Eigen::Index i = 0; i < kB; ++i)
    labels.push_back(static_cast<std::int32_t>((3 * i) % kClasses));
  Matrix y, dw, dx, h, dz, probs, dlogits;
  struct Case {
    std::string name;
    std::int64_t allocations;
  };
  const std::vector<Case> cases = {
      {"linear_forward", allocations_after_warm_up([&] { mlp::linear_forward(x, w, y); })},
      {"linear_backward_weight",
       allocations_after_warm_up([&] { mlp::linear_backward_weight(x, dy, dw); })},
      {"linear_backward_input",
       allocations_after_warm_up([&] { mlp::linear_backward_input(w, dy, dx); })},
      {"tanh_forward", allocations_after_warm_up([&] { mlp::tanh_forward(z, h); })},
      {"tanh_backward", allocations_after_warm_up([&] { mlp::tanh_backward(h, dy, dz); })},
      {"relu_forward", allocations_after_warm_up([&] { mlp::relu_forward(z, h); })},
      {"relu_backward", allocations_after_warm_up([&] { mlp::relu_backward(z, dy, dz); })},
      {"softmax_cross_entropy_forward", allocations_after_warm_up([&] {
         mlp::softmax_cross_entropy_forward(logits, labels, probs);
       })},
      {"softmax_cross_entropy_backward", allocations_after_warm_up([&] {
         mlp::softmax_cross_entropy_backward(probs, labels, dlogits);
       })},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.allocations, 0)
        << c.name << " allocated " << c.allocations
        << " time(s) while its output already had the right shape: write the result into the "
           "output argument (`.noalias()` on a matrix product), without temporaries (mlp.hpp)";
  }
}

TEST(HiddenAllocation, ATrainingStepAllocatesNothingAfterTheFirst) {
  if (!DISTLAB_COUNTS_ALLOCATIONS) GTEST_SKIP() << "allocations are not counted in this build";
  mlp::Config c;
  c.dim_in = static_cast<int>(kIn);
  c.dim_hidden = static_cast<int>(kOut);
  c.n_classes = static_cast<int>(kClasses);
  c.batch_size = static_cast<int>(kB);
  c.train_size = 100;
  for (int layers : {1, 2, 3}) {
    for (auto act : {mlp::Activation::Tanh, mlp::Activation::ReLU}) {
      c.n_layers = layers;
      c.activation = act;
      mlp::MLP model(c, 8);
      mlp::SGD opt(model.parameters(), 0.05f);
      const Matrix x = random_matrix(kB, kIn, 9);
      mlp::Labels labels;
      for (Eigen::Index i = 0; i < kB; ++i)
        labels.push_back(static_cast<std::int32_t>(i % kClasses));
      Matrix probs, dlogits;
      std::int64_t fwd = 0, loss = 0, loss_bwd = 0, bwd = 0, step = 0;
      for (int warm = 0; warm < 2; ++warm) {  // the first pass sizes the buffers; count the second
        fwd = allocations_of([&] { model.forward(x); });
        loss = allocations_of(
            [&] { mlp::softmax_cross_entropy_forward(model.forward(x), labels, probs); });
        loss_bwd =
            allocations_of([&] { mlp::softmax_cross_entropy_backward(probs, labels, dlogits); });
        bwd = allocations_of([&] { model.backward(dlogits); });
        step = allocations_of([&] { opt.step(); });
      }
      const std::string where =
          " (" + std::to_string(layers) + " layers, " + mlp::to_string(act) +
          "; a second step with the same batch size must reuse every buffer: mlp.hpp)";
      EXPECT_EQ(fwd, 0) << "MLP::forward allocated " << fwd << " time(s)" << where;
      EXPECT_EQ(loss, 0) << "forward and softmax_cross_entropy_forward allocated " << loss
                         << " time(s)" << where;
      EXPECT_EQ(loss_bwd, 0) << "softmax_cross_entropy_backward allocated " << loss_bwd
                             << " time(s)" << where;
      EXPECT_EQ(bwd, 0) << "MLP::backward allocated " << bwd << " time(s)" << where;
      EXPECT_EQ(step, 0) << "SGD::step allocated " << step << " time(s)" << where;
    }
  }
}
