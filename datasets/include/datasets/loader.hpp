// Mini-batches with seeded shuffling.
//
// The loader describes an endless sequence of batches: epoch e is a permutation of the rows drawn
// from (seed, e); batch i is rows [b*B, (b+1)*B) of epoch i / batches_per_epoch() (b = i mod that),
// and an incomplete last batch is dropped. Batch i is therefore a pure function of (data, B, seed,
// i): rank r of a data-parallel job can take batches i with i % world_size == r and the union over
// ranks is exactly what one process would have seen.
#pragma once

#include <cstdint>
#include <vector>

#include "datasets/classification.hpp"

namespace datasets {

class BatchLoader {
 public:
  /// data must outlive the loader. Throws std::invalid_argument when batch_size is not in
  /// [1, data.size()].
  BatchLoader(const Dataset& data, int batch_size, std::uint64_t seed);

  int batch_size() const { return batch_size_; }
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }

  /// The row indices of batch i (i >= 0), in order.
  void indices(std::int64_t i, std::vector<std::int64_t>& rows) const;
  /// Copies batch i into x (batch_size x dim, resized if needed) and y.
  void load(std::int64_t i, Matrix& x, Labels& y) const;

 private:
  void ensure_epoch(std::int64_t epoch) const;

  const Dataset* data_;
  int batch_size_;
  std::uint64_t seed_;
  std::int64_t batches_per_epoch_;
  mutable std::int64_t epoch_ = -1;  // the epoch whose permutation is cached
  mutable std::vector<std::int64_t> perm_;
  mutable std::vector<std::int64_t> scratch_;
};

/// Copies the rows listed in `rows` of data into x and y (x resized when its shape differs).
void gather_rows(const Dataset& data, const std::vector<std::int64_t>& rows, Matrix& x, Labels& y);

}  // namespace datasets
