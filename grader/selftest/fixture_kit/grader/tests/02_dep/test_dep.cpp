#include <gtest/gtest.h>
#include "dep.hpp"
#include "testing.hpp"
TEST(Dep, Quadruple) { EXPECT_TRUE(distlab::testing::same(quadruple(3), 12)); }
