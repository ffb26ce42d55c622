// IDX files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
//   magic: two zero bytes, a type byte (0x08 = unsigned byte), the number of dimensions;
//   then each dimension as a big-endian uint32; then the data, row-major.
// Only uncompressed files are read: gunzip the downloads first (gunzip train-images-idx3-ubyte.gz).
#pragma once

#include <string>

#include "datasets/classification.hpp"

namespace datasets {

/// Images file (3 dimensions: n x rows x cols, unsigned bytes) -> n x (rows*cols), scaled to [0, 1].
Matrix load_idx_images(const std::string& path);
/// Labels file (1 dimension: n, unsigned bytes).
Labels load_idx_labels(const std::string& path);
/// Both files as one data set; n_classes = max label + 1.
Dataset load_idx(const std::string& images_path, const std::string& labels_path);

}  // namespace datasets
