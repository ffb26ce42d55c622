// .npy files (NumPy format version 1.0, little-endian, C order), so data and reference outputs
// can be inspected from Python:  numpy.load("x.npy").
// Supported element types: float32 ('<f4'), float64 ('<f8'), int32 ('<i4'), int64 ('<i8').
// Errors (missing file, other dtype, Fortran order, truncated data) throw std::runtime_error
// naming the file and what was found.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "datasets/classification.hpp"

namespace datasets {

/// A loaded array: its shape and its elements converted to the requested type.
template <typename T>
struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<T> data;  // row-major
};

/// Writes data with the given shape (product of shape == data.size()).
void save_npy(const std::string& path, std::span<const float> data,
              const std::vector<std::int64_t>& shape);
void save_npy(const std::string& path, std::span<const double> data,
              const std::vector<std::int64_t>& shape);
void save_npy(const std::string& path, std::span<const std::int32_t> data,
              const std::vector<std::int64_t>& shape);
void save_npy(const std::string& path, std::span<const std::int64_t> data,
              const std::vector<std::int64_t>& shape);
/// A 2-D float32 array of m's shape.
void save_npy(const std::string& path, const Matrix& m);
/// A 1-D int32 array.
void save_npy(const std::string& path, const Labels& labels);

/// Reads a float array of any float/int dtype (converted to float).
NpyArray<float> load_npy_float(const std::string& path);
/// Reads an int32 or int64 array (converted to int32; values must fit).
NpyArray<std::int32_t> load_npy_int32(const std::string& path);
/// Reads a 1-D or 2-D array as a matrix (a 1-D array of n becomes 1 x n).
Matrix load_npy_matrix(const std::string& path);

}  // namespace datasets
