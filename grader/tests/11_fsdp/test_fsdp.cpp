// The public tests of 11_fsdp (its items in grader/manifest.toml filter them).
#include <gtest/gtest.h>

#include "fsdp.hpp"

TEST(Add, SmallNumbers) {
  EXPECT_EQ(fsdp::add(2, 3), 5);
  EXPECT_EQ(fsdp::add(-4, 4), 0);
}
