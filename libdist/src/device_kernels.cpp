// <dist/device_kernels.hpp>: each kernel on the calling rank's device: the real one (CUDA, through
// src/device_impl.hpp) when the backend has one, else a launch() on the simulated device.
#include "dist/device_kernels.hpp"

#include <string>

#include "src/device_impl.hpp"

namespace dist::device {

namespace {

void check_range(const char* fn, std::size_t size, std::size_t offset, std::size_t count) {
  if (offset > size || count > size - offset) {
    throw Error(std::string(fn) + ": range [" + std::to_string(offset) + ", " +
                std::to_string(offset + count) + ") outside a buffer of " + std::to_string(size) +
                " elements");
  }
}

}  // namespace

void fill(DeviceBuffer<float>& x, float value, Stream& s, double sim_seconds,
          const std::string& name) {
  if (auto* real = ::dist::detail::real_device()) {
    real->fill(s.id(), x.raw(), x.size(), value);
    return;
  }
  launch(s, {name, sim_seconds, {writes(x)}}, [&] {
    for (float& v : x.span()) v = value;
  });
}

void difference(const DeviceBuffer<float>& a, const DeviceBuffer<float>& b,
                DeviceBuffer<float>& out, std::size_t offset, std::size_t count, Stream& s,
                double sim_seconds, const std::string& name) {
  if (a.size() != out.size() || b.size() != out.size()) {
    throw Error("difference: the buffers' sizes differ");
  }
  check_range("difference", out.size(), offset, count);
  if (auto* real = ::dist::detail::real_device()) {
    real->difference(s.id(), a.raw() + offset, b.raw() + offset, out.raw() + offset, count);
    return;
  }
  launch(s, {name, sim_seconds, {reads(a), reads(b), writes(out)}}, [&] {
    const auto av = a.cspan(), bv = b.cspan();
    const auto ov = out.span();
    for (std::size_t i = offset; i < offset + count; ++i) ov[i] = av[i] - bv[i];
  });
}

void axpy(float alpha, const DeviceBuffer<float>& x, DeviceBuffer<float>& y, Stream& s,
          double sim_seconds, const std::string& name) {
  if (x.size() != y.size()) throw Error("axpy: the buffers' sizes differ");
  if (auto* real = ::dist::detail::real_device()) {
    real->axpy(s.id(), alpha, x.raw(), y.raw(), y.size());
    return;
  }
  launch(s, {name, sim_seconds, {reads(x), writes(y)}}, [&] {
    const auto xv = x.cspan();
    const auto yv = y.span();
    for (std::size_t i = 0; i < yv.size(); ++i) yv[i] += alpha * xv[i];
  });
}

}  // namespace dist::device
