// Turn contiguous Eigen storage into the spans that dist takes.
//   Eigen::MatrixXf w(64, 32);
//   dist::all_reduce(dist::as_span(w));
#pragma once

#include <Eigen/Core>
#include <span>

namespace dist {

template <typename Derived>
auto as_span(Eigen::PlainObjectBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  return std::span<Scalar>(m.data(), static_cast<std::size_t>(m.size()));
}

template <typename Derived>
auto as_span(const Eigen::PlainObjectBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  return std::span<const Scalar>(m.data(), static_cast<std::size_t>(m.size()));
}

}  // namespace dist
