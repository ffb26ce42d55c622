#include "datasets/idx.hpp"

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace datasets {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw std::runtime_error(path + ": " + msg);
}

std::vector<std::uint8_t> read_idx(const std::string& path, int want_dims,
                                   std::vector<std::int64_t>& dims) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open IDX file");
  unsigned char magic[4];
  in.read(reinterpret_cast<char*>(magic), 4);
  if (!in) fail(path, "too short for an IDX header");
  if (magic[0] == 0x1f && magic[1] == 0x8b) fail(path, "gzip-compressed: run gunzip on it first");
  if (magic[0] != 0 || magic[1] != 0) fail(path, "not an IDX file (bad magic)");
  if (magic[2] != 0x08) fail(path, "only unsigned-byte IDX files (type 0x08) are supported");
  if (magic[3] != want_dims) {
    fail(path, "expected " + std::to_string(want_dims) + " dimensions, found " +
                   std::to_string(magic[3]));
  }
  dims.clear();
  std::int64_t total = 1;
  for (int i = 0; i < want_dims; ++i) {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    if (!in) fail(path, "truncated IDX header");
    const std::int64_t d = (std::int64_t{b[0]} << 24) | (std::int64_t{b[1]} << 16) |
                           (std::int64_t{b[2]} << 8) | std::int64_t{b[3]};
    dims.push_back(d);
    total *= d;
  }
  std::vector<std::uint8_t> data(static_cast<std::size_t>(total));
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(total));
  if (in.gcount() != total) {
    fail(path, "truncated data: expected " + std::to_string(total) + " bytes, read " +
                   std::to_string(in.gcount()));
  }
  return data;
}

}  // namespace

Matrix load_idx_images(const std::string& path) {
  std::vector<std::int64_t> dims;
  const auto data = read_idx(path, 3, dims);
  Matrix x(dims[0], dims[1] * dims[2]);
  for (std::size_t i = 0; i < data.size(); ++i) x.data()[i] = static_cast<float>(data[i]) / 255.0f;
  return x;
}

Labels load_idx_labels(const std::string& path) {
  std::vector<std::int64_t> dims;
  const auto data = read_idx(path, 1, dims);
  return Labels(data.begin(), data.end());
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path) {
  Dataset d;
  d.x = load_idx_images(images_path);
  d.y = load_idx_labels(labels_path);
  if (static_cast<std::int64_t>(d.y.size()) != d.x.rows()) {
    throw std::runtime_error(images_path + " has " + std::to_string(d.x.rows()) + " images but " +
                             labels_path + " has " + std::to_string(d.y.size()) + " labels");
  }
  d.n_classes = d.y.empty() ? 0 : *std::max_element(d.y.begin(), d.y.end()) + 1;
  return d;
}

}  // namespace datasets
