#include <gtest/gtest.h>
#include "dep.hpp"
TEST(Dep, Quadruple) { EXPECT_EQ(quadruple(3), 12); }
