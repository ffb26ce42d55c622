// The configurations behind grader/golden/05_mlp/, shared by the generator (golden_05_mlp) and
// the tests. Changing anything here requires regenerating: ./distlab golden 05_mlp
//
// Files per case (prefix = case name, "tanh" or "relu"), all .npy float32 unless noted:
//   <p>_x.npy        batch input, batch x dim_in         <p>_y.npy   labels (int32)
//   <p>_w<i>.npy     initial weight of layer i           <p>_logits.npy  forward output
//   <p>_loss.npy     mean loss (1 element)               <p>_grad<i>.npy d loss / d W_i
//   <p>_steps_x.npy  the batches of `steps` SGD steps, stacked (steps*batch x dim_in)
//   <p>_steps_y.npy  their labels (int32)                <p>_losses.npy  each step's loss
//   <p>_final_w<i>.npy  weights after the steps
// Tolerance used by the tests: |got - want| <= 1e-5 + 1e-3 |want| per element (float32 results
// that may be summed in another order), 1e-4 + 1e-3 |want| for weights after several steps.
#pragma once

#include <string>
#include <vector>

#include "mlp.hpp"

namespace golden05 {

struct Case {
  std::string name;
  mlp::Config config;
  int steps;
};

inline std::vector<Case> cases() {
  mlp::Config c;
  c.n_layers = 3;
  c.dim_in = 24;
  c.n_classes = 5;
  c.dim_hidden = 16;
  c.train_size = 200;
  c.test_size = 50;
  c.batch_size = 8;
  c.learning_rate = 0.5f;
  c.seed = 7;
  c.activation = mlp::Activation::Tanh;
  mlp::Config r = c;
  r.n_layers = 4;
  r.activation = mlp::Activation::ReLU;
  r.seed = 8;
  return {{"tanh", c, 5}, {"relu", r, 5}};
}

inline constexpr double kRelTol = 1e-3;
inline constexpr double kAbsTol = 1e-5;
inline constexpr double kAbsTolSteps = 1e-4;

}  // namespace golden05
