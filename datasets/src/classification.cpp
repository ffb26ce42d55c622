#include "datasets/classification.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>

#include "datasets/random.hpp"

namespace datasets {
namespace {

void check(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument("make_classification: " + msg);
}

void shuffle(std::vector<std::int64_t>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace

Dataset make_classification(const ClassificationConfig& c) {
  check(c.n_samples >= 1, "n_samples must be >= 1");
  check(c.n_classes >= 1 && c.n_clusters_per_class >= 1,
        "n_classes and n_clusters_per_class must be >= 1");
  check(c.n_informative >= 1, "n_informative must be >= 1");
  check(c.n_redundant >= 0, "n_redundant must be >= 0");
  check(c.n_informative + c.n_redundant <= c.n_features,
        "n_informative + n_redundant (" + std::to_string(c.n_informative + c.n_redundant) +
            ") must be <= n_features (" + std::to_string(c.n_features) + ")");
  const int n_clusters = c.n_classes * c.n_clusters_per_class;
  check(c.n_informative >= 62 || n_clusters <= (std::int64_t{1} << c.n_informative),
        "n_classes * n_clusters_per_class (" + std::to_string(n_clusters) +
            ") must be <= 2^n_informative: raise n_informative");
  check(c.flip_y >= 0.0f && c.flip_y <= 1.0f, "flip_y must be in [0, 1]");

  Rng rng(c.seed);
  const int ni = c.n_informative;
  const int nr = c.n_redundant;
  const std::int64_t n = c.n_samples;

  // Cluster centres: distinct random hypercube vertices, scaled to +-class_sep.
  std::set<std::string> seen;  // vertices as strings of '0'/'1'
  Matrix centroids(n_clusters, ni);
  for (int k = 0; k < n_clusters; ++k) {
    std::string v(static_cast<std::size_t>(ni), '0');
    do {
      for (auto& b : v) b = (rng.bits() >> 63) ? '1' : '0';
    } while (!seen.insert(v).second);
    for (int j = 0; j < ni; ++j) {
      centroids(k, j) = v[static_cast<std::size_t>(j)] == '1' ? c.class_sep : -c.class_sep;
    }
  }

  Dataset d;
  d.n_classes = c.n_classes;
  d.x.resize(n, c.n_features);
  d.y.resize(static_cast<std::size_t>(n));

  // Informative features, cluster by cluster: N(0, I) A_k + centre_k; cluster k is class k % C.
  const std::int64_t per_cluster = n / n_clusters;
  const std::int64_t extra = n % n_clusters;
  Matrix a(ni, ni);
  Matrix z;
  std::int64_t row = 0;
  for (int k = 0; k < n_clusters; ++k) {
    const std::int64_t m = per_cluster + (k < extra ? 1 : 0);
    if (m == 0) continue;
    z.resize(m, ni);
    for (std::int64_t i = 0; i < m; ++i)
      for (int j = 0; j < ni; ++j) z(i, j) = rng.normal();
    for (int i = 0; i < ni; ++i)
      for (int j = 0; j < ni; ++j) a(i, j) = rng.uniform(-1.0f, 1.0f);
    d.x.block(row, 0, m, ni).noalias() = z * a;
    d.x.block(row, 0, m, ni).rowwise() += centroids.row(k);
    for (std::int64_t i = 0; i < m; ++i) d.y[static_cast<std::size_t>(row + i)] = k % c.n_classes;
    row += m;
  }

  // Redundant features: random linear combinations of the informative ones.
  if (nr > 0) {
    Matrix b(ni, nr);
    for (int i = 0; i < ni; ++i)
      for (int j = 0; j < nr; ++j) b(i, j) = rng.uniform(-1.0f, 1.0f);
    d.x.block(0, ni, n, nr).noalias() = d.x.block(0, 0, n, ni) * b;
  }
  // Noise features.
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = ni + nr; j < c.n_features; ++j) d.x(i, j) = rng.normal();

  // Label noise.
  for (std::int64_t i = 0; i < n; ++i) {
    if (rng.uniform() < c.flip_y) {
      d.y[static_cast<std::size_t>(i)] =
          static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(c.n_classes)));
    }
  }

  if (c.shuffle) {
    std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
    std::iota(rows.begin(), rows.end(), 0);
    shuffle(rows, rng);
    std::vector<std::int64_t> cols(static_cast<std::size_t>(c.n_features));
    std::iota(cols.begin(), cols.end(), 0);
    shuffle(cols, rng);
    Dataset s;
    s.n_classes = d.n_classes;
    s.x.resize(n, c.n_features);
    s.y.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t src = rows[static_cast<std::size_t>(i)];
      for (int j = 0; j < c.n_features; ++j)
        s.x(i, j) = d.x(src, cols[static_cast<std::size_t>(j)]);
      s.y[static_cast<std::size_t>(i)] = d.y[static_cast<std::size_t>(src)];
    }
    return s;
  }
  return d;
}

Dataset subset(const Dataset& data, std::span<const std::int64_t> rows) {
  Dataset s;
  s.n_classes = data.n_classes;
  s.x.resize(static_cast<Eigen::Index>(rows.size()), data.x.cols());
  s.y.resize(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t r = rows[i];
    if (r < 0 || r >= data.size()) {
      throw std::out_of_range("subset: row " + std::to_string(r) + " outside [0, " +
                              std::to_string(data.size()) + ")");
    }
    s.x.row(static_cast<Eigen::Index>(i)) = data.x.row(r);
    s.y[i] = data.y[static_cast<std::size_t>(r)];
  }
  return s;
}

Split train_test_split(const Dataset& data, std::int64_t test_size, std::uint64_t seed) {
  if (test_size < 0 || test_size > data.size()) {
    throw std::invalid_argument("train_test_split: test_size " + std::to_string(test_size) +
                                " must be in [0, " + std::to_string(data.size()) + "]");
  }
  std::vector<std::int64_t> rows(static_cast<std::size_t>(data.size()));
  std::iota(rows.begin(), rows.end(), 0);
  Rng rng(seed ^ 0x7e57'5e7bULL);
  shuffle(rows, rng);
  const auto cut = rows.begin() + static_cast<std::ptrdiff_t>(test_size);
  std::vector<std::int64_t> test_rows(rows.begin(), cut), train_rows(cut, rows.end());
  std::sort(test_rows.begin(), test_rows.end());
  std::sort(train_rows.begin(), train_rows.end());
  return Split{subset(data, train_rows), subset(data, test_rows)};
}

void standardize(Split& split) {
  const Matrix& x = split.train.x;
  if (x.rows() == 0) return;
  const Eigen::RowVectorXf mean = x.colwise().mean();
  Eigen::RowVectorXf sd =
      ((x.rowwise() - mean).array().square().colwise().sum() / static_cast<float>(x.rows()))
          .sqrt()
          .matrix();
  for (Eigen::Index j = 0; j < sd.size(); ++j) sd(j) = sd(j) > 1e-12f ? 1.0f / sd(j) : 1.0f;
  for (Dataset* d : {&split.train, &split.test}) {
    d->x.rowwise() -= mean;
    d->x.array().rowwise() *= sd.array();
  }
}

}  // namespace datasets
