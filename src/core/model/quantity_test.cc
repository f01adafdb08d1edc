#include "core/model/quantity.h"

#include "gtest/gtest.h"

namespace tessera::core {
namespace {

TEST(Quantity, MemoryBinaryAndDecimalSuffixes) {
  EXPECT_EQ(*ParseMemoryMiB("4Gi"), 4096);
  EXPECT_EQ(*ParseMemoryMiB("1536Mi"), 1536);
  EXPECT_EQ(*ParseMemoryMiB("1Ti"), 1024 * 1024);
  EXPECT_EQ(*ParseMemoryMiB("1.5Gi"), 1536);
  EXPECT_EQ(*ParseMemoryMiB("1G"), 954);  // 1e9 bytes = 953.67 MiB, requests round up
  EXPECT_EQ(*ParseMemoryMiB("1G", Rounding::kDown), 953);
  EXPECT_EQ(*ParseMemoryMiB("1048576"), 1);  // plain bytes
  EXPECT_EQ(*ParseMemoryMiB("1"), 1);        // one byte rounds up to a MiB
  EXPECT_EQ(*ParseMemoryMiB("0"), 0);
  EXPECT_EQ(*ParseMemoryMiB("2e9"), 1908);
}

TEST(Quantity, CpuMilli) {
  EXPECT_EQ(*ParseCpuMilli("500m"), 500);
  EXPECT_EQ(*ParseCpuMilli("2"), 2000);
  EXPECT_EQ(*ParseCpuMilli("0.25"), 250);
  EXPECT_EQ(*ParseCpuMilli("0.0001"), 1);  // rounds up to the smallest unit
  EXPECT_EQ(*ParseCpuMilli("0.0001", Rounding::kDown), 0);
  EXPECT_EQ(*ParseCpuMilli("1k"), 1'000'000);
}

TEST(Quantity, Count) {
  EXPECT_EQ(*ParseCount("8"), 8);
  EXPECT_EQ(*ParseCount("1k"), 1000);
  EXPECT_FALSE(ParseCount("1.5").ok());
  EXPECT_FALSE(ParseCount("500m").ok());
}

TEST(Quantity, RejectsGarbageWithAClearMessage) {
  for (const char* bad : {"", "Gi", "4GB", "-1Gi", "abc", "1..5", "4 Gi", "1e", "1e9999"}) {
    absl::StatusOr<int64_t> r = ParseMemoryMiB(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(std::string(r.status().message()).find("invalid quantity"), std::string::npos);
    }
  }
  EXPECT_FALSE(ParseMemoryMiB("99999999999999999999999999999Ei").ok());
}

TEST(Quantity, FormatMiB) {
  EXPECT_EQ(FormatMiB(81920), "80Gi");
  EXPECT_EQ(FormatMiB(1536), "1.5Gi");
  EXPECT_EQ(FormatMiB(300), "300Mi");
}

}  // namespace
}  // namespace tessera::core
