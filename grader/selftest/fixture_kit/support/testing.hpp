// Helpers shared by the miniature kit's tests (as libdist/testing/distlab_testing.hpp is for the
// real kit's): an owned header must not be able to add an overload of one of them.
#pragma once
#include <gtest/gtest.h>

namespace distlab::testing {

/// Whether got equals want; the failure message shows both.
template <class T>
::testing::AssertionResult same(const T& got, const T& want) {
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " != " << want;
}

}  // namespace distlab::testing
