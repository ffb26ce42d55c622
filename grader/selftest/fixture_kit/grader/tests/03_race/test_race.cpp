#include <gtest/gtest.h>
#include "race.hpp"
TEST(Race, Counts) { EXPECT_EQ(count_parallel(20000, 4), 20000); }
