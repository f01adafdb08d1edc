#include "records/gpu_indices.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::records {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GpuIndices, ReadsWhatItWrites) {
  EXPECT_EQ(GpuIndicesText({0, 1, 3}), "0,1,3");
  EXPECT_EQ(GpuIndicesText({}), "");
  absl::StatusOr<std::vector<int32_t>> read = ParseGpuIndices("0,1,3");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(0, 1, 3));
  read = ParseGpuIndices("63");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(*read, ElementsAre(63));
}

TEST(GpuIndices, AMaskIsItsIndicesAscending) {
  EXPECT_THAT(GpuIndicesOfMask(0b1011), ElementsAre(0, 1, 3));
  EXPECT_THAT(GpuIndicesOfMask(0), ::testing::IsEmpty());
  EXPECT_THAT(GpuIndicesOfMask(uint64_t{1} << 63), ElementsAre(63));
  EXPECT_EQ(GpuMaskOf({0, 1, 3}), 0b1011u);
  EXPECT_EQ(GpuMaskOf({}), 0u);
}

TEST(GpuIndices, RefusesWhatNamesNoGpuInOrder) {
  for (const char* bad : {"1,1", "3,2", "-1", "64", "a", "1,,2", " 1", "1 "}) {
    EXPECT_THAT(ParseGpuIndices(bad).status().message(),
                HasSubstr("GPU indices must be ascending integers 0-63 separated by commas"))
        << bad;
  }
  EXPECT_THAT(ParseGpuIndices("").status().message(), HasSubstr("no GPU index"));
  EXPECT_THAT(ParseGpuIndices("1,").status().message(), HasSubstr("missing after a comma"));
}

}  // namespace
}  // namespace tessera::records
