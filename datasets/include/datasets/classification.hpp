// Seeded synthetic classification data in the spirit of scikit-learn's make_classification
// (Guyon 2003, the NIPS feature-selection benchmark design):
//   * each class owns n_clusters_per_class Gaussian clusters; the cluster centres sit on distinct
//     vertices of a hypercube of side 2*class_sep in the n_informative dimensions;
//   * inside a cluster the informative features are N(0, I) times a random matrix (so clusters
//     are correlated ellipsoids), plus the centre;
//   * n_redundant features are random linear combinations of the informative ones;
//   * the remaining n_features - n_informative - n_redundant features are N(0, 1) noise;
//   * a fraction flip_y of the labels is replaced by random classes (label noise);
//   * rows are shuffled, and so are the columns (so the informative ones are not simply first).
// Classes are balanced (sizes differ by at most one). Same config and seed: same bits, everywhere.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <vector>

namespace datasets {

/// Samples in rows, row-major: the layout of numpy and PyTorch (row i is sample i).
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Labels = std::vector<std::int32_t>;

struct Dataset {
  Matrix x;  // n x dim features, one sample per row
  Labels y;  // n labels in [0, n_classes)
  int n_classes = 0;

  std::int64_t size() const { return x.rows(); }
  int dim() const { return static_cast<int>(x.cols()); }
};

struct ClassificationConfig {
  std::int64_t n_samples = 1000;  // rows
  int n_features = 20;            // columns: informative + redundant + noise
  int n_informative = 2;          // dimensions of the hypercube that carries the classes
  int n_redundant = 2;            // random linear combinations of the informative features
  int n_classes = 2;
  int n_clusters_per_class = 2;  // n_classes * n_clusters_per_class <= 2^n_informative
  float class_sep = 1.0f;        // half the hypercube's side: larger = easier
  float flip_y = 0.01f;          // fraction of labels replaced by a random class
  bool shuffle = true;           // shuffle rows and columns
  std::uint64_t seed = 0;
};

/// Generates the data set. Throws std::invalid_argument (saying which field to change) for an
/// impossible config, e.g. more clusters than hypercube vertices.
Dataset make_classification(const ClassificationConfig& config);

/// The rows listed in `rows`, in that order.
Dataset subset(const Dataset& data, std::span<const std::int64_t> rows);

struct Split {
  Dataset train;
  Dataset test;  // held out: never used for a gradient step
};

/// A seeded random split: test gets test_size rows, train the rest (disjoint, together all rows).
Split train_test_split(const Dataset& data, std::int64_t test_size, std::uint64_t seed);

/// Scales every feature to mean 0 and variance 1 using the training rows' statistics only, and
/// applies the same affine map to the test rows (so nothing about the test set leaks into training).
void standardize(Split& split);

}  // namespace datasets
