#include "k8s/scheduler/unix_clock.h"

#include <gtest/gtest.h>

namespace tessera::k8s {
namespace {

int64_t WallNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(UnixClock, AnchoredToTheWallClockAndMovedByTheSchedulersClock) {
  UnixClock::TimePoint now{std::chrono::hours(1)};  // a fake steady clock, far from the real one
  UnixClock clock([&now] { return now; });
  const int64_t before = WallNow();
  const int64_t start = clock.Now();
  EXPECT_GE(start, before);
  EXPECT_LE(start, WallNow());
  // The fake clock moves what is written; the wall clock alone does not.
  now += std::chrono::minutes(10);
  EXPECT_EQ(clock.Now(), start + 600);
  EXPECT_EQ(clock.Of(now + std::chrono::seconds(30)), start + 630);
  // And back: a time written down is a time point on the same clock.
  EXPECT_EQ(clock.TimeOf(start + 630), now + std::chrono::seconds(30));
  EXPECT_EQ(clock.Of(clock.TimeOf(start - 5)), start - 5);
}

TEST(UnixClock, WithoutAClockItIsTheRealOne) {
  UnixClock clock(nullptr);
  const int64_t before = WallNow();
  const int64_t now = clock.Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, WallNow());
}

}  // namespace
}  // namespace tessera::k8s
