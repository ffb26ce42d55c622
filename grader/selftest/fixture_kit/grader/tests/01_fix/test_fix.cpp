#include <gtest/gtest.h>
#include "fix.hpp"
TEST(Fix, Add) {
  EXPECT_EQ(add(2, 3), 5);
  EXPECT_EQ(add(-4, 1), -3);
}
TEST(Fix, Twice) { EXPECT_EQ(twice(21), 42); }
TEST(Fix, TwiceNegative) { EXPECT_EQ(twice(-5), -10); }
