#include "datasets/loader.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

#include "datasets/random.hpp"

namespace datasets {

BatchLoader::BatchLoader(const Dataset& data, int batch_size, std::uint64_t seed)
    : data_(&data), batch_size_(batch_size), seed_(seed), batches_per_epoch_(0) {
  if (batch_size < 1 || batch_size > data.size()) {
    throw std::invalid_argument("BatchLoader: batch_size " + std::to_string(batch_size) +
                                " must be in [1, " + std::to_string(data.size()) +
                                "] (the number of rows)");
  }
  batches_per_epoch_ = data.size() / batch_size;
}

void BatchLoader::ensure_epoch(std::int64_t epoch) const {
  if (epoch == epoch_) return;
  perm_.resize(static_cast<std::size_t>(data_->size()));
  std::iota(perm_.begin(), perm_.end(), 0);
  // One stream per epoch, from (seed, epoch) alone: batch i never depends on earlier calls.
  Rng rng(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch) + 1);
  for (std::size_t i = perm_.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(perm_[i - 1], perm_[j]);
  }
  epoch_ = epoch;
}

void BatchLoader::indices(std::int64_t i, std::vector<std::int64_t>& rows) const {
  if (i < 0) throw std::out_of_range("BatchLoader: batch index must be >= 0");
  ensure_epoch(i / batches_per_epoch_);
  const std::int64_t start = (i % batches_per_epoch_) * batch_size_;
  rows.assign(perm_.begin() + start, perm_.begin() + start + batch_size_);
}

void BatchLoader::load(std::int64_t i, Matrix& x, Labels& y) const {
  indices(i, scratch_);
  gather_rows(*data_, scratch_, x, y);
}

void gather_rows(const Dataset& data, const std::vector<std::int64_t>& rows, Matrix& x, Labels& y) {
  const auto n = static_cast<Eigen::Index>(rows.size());
  if (x.rows() != n || x.cols() != data.x.cols()) x.resize(n, data.x.cols());
  y.resize(rows.size());
  for (Eigen::Index i = 0; i < n; ++i) {
    const std::int64_t r = rows[static_cast<std::size_t>(i)];
    x.row(i) = data.x.row(r);
    y[static_cast<std::size_t>(i)] = data.y[static_cast<std::size_t>(r)];
  }
}

}  // namespace datasets
