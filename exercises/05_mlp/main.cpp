// run_05_mlp: trains the MLP on the seeded synthetic data set and prints the config, then
// "step N | train_loss X | test_loss Y | step time Z ms" every --log-every steps.
//
//   ./distlab run 05_mlp                    your version, seed config (1000 steps, a few seconds)
//   ./distlab run 05_mlp --solutions        the reference
//   ./distlab run 05_mlp -- --niters 300 --activation relu
//   ./distlab run 05_mlp -- --bench 200     median wall time of one training step, no training log
//
// train_loss is the mean over the steps since the previous line; test_loss is measured on the
// held-out rows; step time is the median of those steps (forward + loss + backward + SGD).
#include <CLI/CLI.hpp>

#include <Eigen/Core>
#include <cstdio>
#include <exception>

#include "datasets/loader.hpp"
#include "distlab/timing.hpp"
#include "distlab/program.hpp"
#include "distlab/todo.hpp"
#include "mlp.hpp"

namespace {

int bench(const mlp::Config& c, int steps) {
  Eigen::setNbThreads(1);
  const datasets::Split data = mlp::make_data(c);
  mlp::MLP model(c, c.seed + 2);
  mlp::SGD opt(model.parameters(), c.learning_rate);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  std::vector<double> ms;
  for (int step = -20; step < steps; ++step) {  // 20 warm-up steps
    loader.load(step < 0 ? 0 : step, x, y);
    distlab::Stopwatch sw;
    mlp::train_step(model, opt, x, y, probs, dlogits);
    if (step >= 0) ms.push_back(sw.elapsed_ms());
  }
  std::sort(ms.begin(), ms.end());
  const double med = distlab::median(ms);
  // Matrix-product FLOPs of a step: forward 2 B |W| per layer; backward 2 B |W| for every dW plus
  // 2 B |W| for every dx except the first layer's, which backward never computes. (Not 3x the
  // forward: in the seed config the first layer holds 65% of the weights.)
  const double first_layer = static_cast<double>(model.parameters().front()->numel());
  const double flops = 3.0 * model.forward_flops(c.batch_size) - 2.0 * c.batch_size * first_layer;
  std::printf("training step, batch %d, %d steps, 1 thread (Eigen %d.%d.%d):\n", c.batch_size,
              steps, EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  std::printf(
      "  median %.3f ms | min %.3f ms | p90 %.3f ms | %.1f GFLOP/s at the median "
      "(%.1f MFLOP of matrix products per step)\n",
      med, ms.front(), ms[ms.size() * 9 / 10], flops / (med * 1e-3) / 1e9, flops / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mlp::Config c;
  std::string activation = "tanh";
  int bench_steps = 0;
  CLI::App app{"05_mlp: train an MLP with SGD on a seeded synthetic classification set"};
  app.add_option("--n-layers", c.n_layers, "linear layers")->check(CLI::PositiveNumber);
  app.add_option("--dim-in", c.dim_in, "input features")->check(CLI::PositiveNumber);
  app.add_option("--n-classes", c.n_classes, "classes (outputs)")->check(CLI::Range(2, 1 << 20));
  app.add_option("--dim-hidden", c.dim_hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--train-size", c.train_size, "training rows")->check(CLI::PositiveNumber);
  app.add_option("--test-size", c.test_size, "held-out rows")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", c.batch_size, "rows per step")->check(CLI::PositiveNumber);
  app.add_option("--lr,--learning-rate", c.learning_rate, "SGD step size")
      ->check(CLI::PositiveNumber);
  app.add_option("--niters", c.niters, "SGD steps")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", c.seed, "seed of data, weights and shuffling");
  app.add_option("--activation", activation, "tanh or relu")
      ->check(CLI::IsMember({"tanh", "relu"}));
  app.add_option("--log-every", c.log_every, "steps between log lines")->check(CLI::PositiveNumber);
  app.add_option("--bench", bench_steps, "time this many training steps instead of training");
  CLI11_PARSE(app, argc, argv);
  c.activation = activation == "relu" ? mlp::Activation::ReLU : mlp::Activation::Tanh;

  return distlab::run_main([&]() -> int {
    c.validate();
    if (bench_steps > 0) return bench(c, bench_steps);
    std::printf("%s\n", mlp::describe(c).c_str());
    std::fflush(stdout);
    mlp::train(c, [](const mlp::LogLine& l) {
      // Step 0's line times that one step alone (cold caches, first allocations); later lines give
      // the median of the steps since the previous line.
      std::printf("step %d | train_loss %.4f | test_loss %.4f | step time %.3f ms%s\n", l.step,
                  l.train_loss, l.test_loss, l.step_ms,
                  l.step == 0 ? " (step 0 alone: a cold step)" : "");
      std::fflush(stdout);
    });
    return 0;
  });
}
