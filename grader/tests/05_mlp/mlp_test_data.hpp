// Test data shared by 05_mlp's public and hidden tests.
#pragma once

#include <cstdint>

#include "datasets/random.hpp"
#include "mlp.hpp"

namespace mlptest {

/// rows x cols of scale * N(0, 1) draws from datasets::Rng(seed), in storage order.
inline mlp::Matrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed,
                                 float scale = 1.0f) {
  datasets::Rng rng(seed);
  mlp::Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = scale * rng.normal();
  return m;
}

}  // namespace mlptest
