#include "core/model/shared_chunks.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using Chunks = SharedChunks<std::string, 2>;  // chunks of 4

std::vector<std::string> All(const Chunks& c) {
  return std::vector<std::string>(c.begin(), c.end());
}

TEST(SharedChunks, CopiesShareChunksUntilOneChangesThem) {
  Chunks base;
  for (int i = 0; i < 10; ++i) base.Append(std::to_string(i));
  ASSERT_EQ(base.size(), 10u);
  const std::string* zero = &base[0];
  Chunks copy = base;
  EXPECT_EQ(&copy[0], zero);  // the same element, not a copy of it

  copy.Mutable(5) = "five";   // copies the middle chunk alone
  copy.Append("10");          // copies the last chunk (two elements in it)
  EXPECT_EQ(&copy[0], zero);  // the first chunk still shared
  EXPECT_EQ(&copy[3], &base[3]);
  EXPECT_NE(&copy[4], &base[4]);  // the middle chunk (4..7) is the copy's own
  EXPECT_NE(&copy[8], &base[8]);  // and so is the last

  EXPECT_EQ(All(base),
            (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
  EXPECT_EQ(All(copy),
            (std::vector<std::string>{"0", "1", "2", "3", "4", "five", "6", "7", "8", "9", "10"}));
  EXPECT_EQ(copy.back(), "10");
  EXPECT_EQ(copy.size(), 11u);
  EXPECT_EQ(base.size(), 10u);
}

TEST(SharedChunks, AnElementNeverMovesWhileItsChunkLives) {
  Chunks c;
  c.Append("a");
  const std::string* a = &c[0];
  for (int i = 0; i < 20; ++i) c.Append("x");
  EXPECT_EQ(&c[0], a);
  c.Mutable(0) = "b";  // alone: changed in place
  EXPECT_EQ(&c[0], a);
  EXPECT_EQ(*a, "b");
  c.clear();
  EXPECT_TRUE(c.empty());
}

}  // namespace
}  // namespace tessera::core
