// golden_05_mlp OUTDIR: writes the reference outputs of 05_mlp (see mlp_golden_cases.hpp) into
// OUTDIR. Built from solutions/ and run by `./distlab golden 05_mlp`
// (OUTDIR = grader/golden/05_mlp); the kit's self-test regenerates into a temporary folder and
// compares.
#include <cstdio>
#include <exception>
#include <filesystem>

#include "datasets/loader.hpp"
#include "datasets/npy.hpp"
#include "mlp_golden_cases.hpp"

namespace {

/// "<what><i>" (snprintf: GCC 12 warns falsely about "w" + std::to_string(i)).
std::string indexed(const char* what, std::size_t i) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%zu", what, i);
  return buf;
}

void write_case(const std::filesystem::path& dir, const golden05::Case& gc) {
  const mlp::Config& c = gc.config;
  const auto file = [&](const std::string& what) {
    std::string name = gc.name;
    name.append("_").append(what).append(".npy");
    return (dir / name).string();
  };
  const datasets::Split data = mlp::make_data(c);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::MLP model(c, c.seed + 2);
  const auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    datasets::save_npy(file(indexed("w", i)), params[i]->value);

  // One forward/backward on batch 0.
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  loader.load(0, x, y);
  datasets::save_npy(file("x"), x);
  datasets::save_npy(file("y"), y);
  const mlp::Matrix logits = model.forward(x);
  datasets::save_npy(file("logits"), logits);
  const float loss = mlp::softmax_cross_entropy_forward(logits, y, probs);
  datasets::save_npy(file("loss"), std::span<const float>(&loss, 1), {1});
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  for (std::size_t i = 0; i < params.size(); ++i)
    datasets::save_npy(file(indexed("grad", i)), params[i]->grad);

  // A few SGD steps from the initial weights, on batches 0, 1, ...
  mlp::MLP fresh(c, c.seed + 2);
  mlp::SGD opt(fresh.parameters(), c.learning_rate);
  mlp::Matrix xs(static_cast<Eigen::Index>(gc.steps) * c.batch_size, c.dim_in);
  mlp::Labels ys;
  std::vector<float> losses;
  for (int s = 0; s < gc.steps; ++s) {
    loader.load(s, x, y);
    xs.middleRows(static_cast<Eigen::Index>(s) * c.batch_size, c.batch_size) = x;
    ys.insert(ys.end(), y.begin(), y.end());
    losses.push_back(mlp::train_step(fresh, opt, x, y, probs, dlogits));
  }
  datasets::save_npy(file("steps_x"), xs);
  datasets::save_npy(file("steps_y"), ys);
  datasets::save_npy(file("losses"), std::span<const float>(losses),
                     {static_cast<std::int64_t>(losses.size())});
  const auto fp = fresh.parameters();
  for (std::size_t i = 0; i < fp.size(); ++i)
    datasets::save_npy(file(indexed("final_w", i)), fp[i]->value);
  std::printf("%s: loss %.6f, after %d steps %.6f\n", gc.name.c_str(), static_cast<double>(loss),
              gc.steps, static_cast<double>(losses.back()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR   (writes 05_mlp's reference outputs there)\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path dir(argv[1]);
    std::filesystem::create_directories(dir);
    for (const auto& gc : golden05::cases()) write_case(dir, gc);
    std::printf("wrote 05_mlp reference outputs to %s\n", dir.string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "golden_05_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
