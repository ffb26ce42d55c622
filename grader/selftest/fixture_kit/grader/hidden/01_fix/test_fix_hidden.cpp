#include <gtest/gtest.h>
#include "fix.hpp"
TEST(FixHidden, AddLarge) { EXPECT_EQ(add(1000000, 2000000), 3000000); }
