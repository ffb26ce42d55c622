#include "datasets/npy.hpp"

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace datasets {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy code assumes little-endian");

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw std::runtime_error(path + ": " + msg);
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) s += ",";
    if (i + 1 < shape.size()) s += " ";
  }
  return s + ")";
}

std::int64_t count_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void write(const std::string& path, const char* descr, const void* data, std::size_t elem,
           std::size_t n, const std::vector<std::int64_t>& shape) {
  if (static_cast<std::size_t>(count_of(shape)) != n) {
    fail(path, "save_npy: shape " + shape_str(shape) + " does not hold " + std::to_string(n) +
                   " elements");
  }
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + shape_str(shape) + ", }";
  // magic(6) + version(2) + header length(2) + header, padded with spaces to a multiple of 64,
  // ending in '\n'.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(path, "cannot open for writing (does the folder exist?)");
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(elem * n));
  if (!out) fail(path, "write failed");
}

struct Raw {
  std::string descr;
  std::vector<std::int64_t> shape;
  std::vector<char> bytes;
};

std::string field(const std::string& header, const std::string& key) {
  const auto k = header.find("'" + key + "'");
  if (k == std::string::npos) return {};
  auto p = header.find(':', k);
  if (p == std::string::npos) return {};
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p >= header.size()) return {};
  if (header[p] == '\'') {
    const auto e = header.find('\'', p + 1);
    return header.substr(p + 1, e - p - 1);
  }
  if (header[p] == '(') {
    const auto e = header.find(')', p);
    return header.substr(p, e - p + 1);
  }
  const auto e = header.find_first_of(",}", p);
  return header.substr(p, e - p);
}

Raw read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail(path, "cannot open (missing file? regenerate reference outputs with ./distlab golden)");
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail(path, "not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]);
  std::size_t hlen = 0;
  if (major == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    hlen = b[0] | (static_cast<std::size_t>(b[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    hlen = b[0] | (static_cast<std::size_t>(b[1]) << 8) | (static_cast<std::size_t>(b[2]) << 16) |
           (static_cast<std::size_t>(b[3]) << 24);
  } else {
    fail(path, "unsupported .npy version " + std::to_string(major));
  }
  std::string header(hlen, '\0');
  in.read(header.data(), static_cast<std::streamsize>(hlen));
  if (!in) fail(path, "truncated header");
  Raw r;
  r.descr = field(header, "descr");
  if (field(header, "fortran_order") != "False") {
    fail(path, "Fortran-order arrays are not supported: save with numpy.ascontiguousarray(a)");
  }
  const std::string shape = field(header, "shape");
  std::stringstream ss(shape.size() >= 2 ? shape.substr(1, shape.size() - 2) : "");
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    if (tok.find_first_not_of(' ') == std::string::npos) continue;
    r.shape.push_back(std::stoll(tok));
  }
  std::size_t elem = 0;
  if (r.descr == "<f4" || r.descr == "<i4")
    elem = 4;
  else if (r.descr == "<f8" || r.descr == "<i8")
    elem = 8;
  else
    fail(path, "unsupported dtype '" + r.descr + "': use float32, float64, int32 or int64");
  const std::size_t bytes = elem * static_cast<std::size_t>(count_of(r.shape));
  r.bytes.resize(bytes);
  in.read(r.bytes.data(), static_cast<std::streamsize>(bytes));
  if (static_cast<std::size_t>(in.gcount()) != bytes) {
    fail(path, "truncated data: expected " + std::to_string(bytes) + " bytes for shape " +
                   shape_str(r.shape));
  }
  return r;
}

template <typename T>
std::vector<T> convert(const Raw& r) {
  const std::size_t n = static_cast<std::size_t>(count_of(r.shape));
  std::vector<T> out(n);
  auto copy = [&](auto tag) {
    using S = decltype(tag);
    for (std::size_t i = 0; i < n; ++i) {
      S v;
      std::memcpy(&v, r.bytes.data() + i * sizeof(S), sizeof(S));
      out[i] = static_cast<T>(v);
    }
  };
  if (r.descr == "<f4")
    copy(float{});
  else if (r.descr == "<f8")
    copy(double{});
  else if (r.descr == "<i4")
    copy(std::int32_t{});
  else
    copy(std::int64_t{});
  return out;
}

}  // namespace

void save_npy(const std::string& path, std::span<const float> d,
              const std::vector<std::int64_t>& s) {
  write(path, "<f4", d.data(), 4, d.size(), s);
}
void save_npy(const std::string& path, std::span<const double> d,
              const std::vector<std::int64_t>& s) {
  write(path, "<f8", d.data(), 8, d.size(), s);
}
void save_npy(const std::string& path, std::span<const std::int32_t> d,
              const std::vector<std::int64_t>& s) {
  write(path, "<i4", d.data(), 4, d.size(), s);
}
void save_npy(const std::string& path, std::span<const std::int64_t> d,
              const std::vector<std::int64_t>& s) {
  write(path, "<i8", d.data(), 8, d.size(), s);
}
void save_npy(const std::string& path, const Matrix& m) {
  save_npy(path, std::span<const float>(m.data(), static_cast<std::size_t>(m.size())),
           {m.rows(), m.cols()});
}
void save_npy(const std::string& path, const Labels& labels) {
  save_npy(path, std::span<const std::int32_t>(labels), {static_cast<std::int64_t>(labels.size())});
}

NpyArray<float> load_npy_float(const std::string& path) {
  Raw r = read(path);
  return {r.shape, convert<float>(r)};
}

NpyArray<std::int32_t> load_npy_int32(const std::string& path) {
  Raw r = read(path);
  if (r.descr != "<i4" && r.descr != "<i8")
    fail(path, "expected an integer array, found " + r.descr);
  return {r.shape, convert<std::int32_t>(r)};
}

Matrix load_npy_matrix(const std::string& path) {
  NpyArray<float> a = load_npy_float(path);
  if (a.shape.size() > 2)
    fail(path, "expected a 1-D or 2-D array, found shape " + shape_str(a.shape));
  const Eigen::Index rows = a.shape.size() == 2 ? a.shape[0] : 1;
  const Eigen::Index cols = a.shape.empty() ? 1 : a.shape.back();
  Matrix m(rows, cols);
  std::memcpy(m.data(), a.data.data(), a.data.size() * sizeof(float));
  return m;
}

}  // namespace datasets
