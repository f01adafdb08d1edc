#include "common/duration.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ParseDuration, Units) {
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  EXPECT_EQ(ParseDuration("15s")->count(), 15000);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("24h")->count(), 86'400'000);
  EXPECT_EQ(ParseDuration("0s")->count(), 0);
}

// A bare 0 turns a rule off (--gpu-idle-window 0); any other number needs its unit.
TEST(ParseDuration, ABareZeroIsNothing) {
  EXPECT_EQ(ParseDuration("0")->count(), 0);
  EXPECT_FALSE(ParseDuration("5").ok());
}

TEST(ParseDuration, RefusedWithWhatIsAccepted) {
  for (const char* bad : {"1.5s", "s", "10d", "", "-1s", "1 s", "1000000000000s"}) {
    absl::StatusOr<std::chrono::milliseconds> d = ParseDuration(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_THAT(d.status().message(),
                ::testing::HasSubstr("is not a duration (a whole number with ms, s, m or h"));
  }
}

}  // namespace
}  // namespace tessera
