#include "common/backoff.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;

TEST(Backoff, DoublesFrom800msUpTo30sWithoutJitter) {
  Backoff::Params p;
  p.jitter = 0;
  Backoff b(p, 1);
  auto t = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  std::vector<int64_t> got;
  for (int i = 0; i < 8; ++i) got.push_back(b.Next(t += milliseconds(10)).count());
  EXPECT_EQ(got, (std::vector<int64_t>{800, 1600, 3200, 6400, 12800, 25600, 30000, 30000}));
}

TEST(Backoff, JitterAddsUpToOneTimesTheDelayButNeverPassesTheCap) {
  Backoff b(Backoff::Params{}, 42);
  auto t = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  int64_t base = 800;
  bool some_jitter = false;
  for (int i = 0; i < 12; ++i) {
    int64_t d = b.Next(t += milliseconds(10)).count();
    EXPECT_GE(d, std::min<int64_t>(base, 30000)) << i;
    EXPECT_LE(d, std::min<int64_t>(2 * base, 30000)) << i;
    if (d != base) some_jitter = true;
    base = std::min<int64_t>(base * 2, 30000);
  }
  EXPECT_TRUE(some_jitter);
}

TEST(Backoff, StartsOverAfterTwoMinutesWithoutFailuresOrOnReset) {
  Backoff::Params p;
  p.jitter = 0;
  Backoff b(p, 1);
  auto t = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  b.Next(t);
  b.Next(t += milliseconds(1));
  EXPECT_EQ(b.Next(t += milliseconds(1)).count(), 3200);
  EXPECT_EQ(b.Next(t += std::chrono::minutes(3)).count(), 800);
  EXPECT_EQ(b.Next(t += milliseconds(1)).count(), 1600);
  b.Reset();
  EXPECT_EQ(b.Next(t += milliseconds(1)).count(), 800);
}

// The formula by attempt number, for callers that count attempts themselves: the same delays as
// the stateful Backoff gives.
TEST(Backoff, DelayByAttemptIsTheSameFormula) {
  Backoff::Params p;
  p.jitter = 0;
  Backoff b(p, 1);
  auto t = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  for (int failures = 1; failures <= 9; ++failures) {
    EXPECT_EQ(Backoff::Delay(p, failures, 0.0), b.Next(t += milliseconds(10))) << failures;
  }
  Backoff::Params bind{milliseconds(1000), 2.0, milliseconds(60'000), 0.0};
  EXPECT_EQ(Backoff::Delay(bind, 1, 0.5).count(), 1000);
  EXPECT_EQ(Backoff::Delay(bind, 6, 0.5).count(), 32'000);
  EXPECT_EQ(Backoff::Delay(bind, 7, 0.5).count(), 60'000);
  EXPECT_EQ(Backoff::Delay(bind, 40, 0.5).count(), 60'000);
  Backoff::Params jittered{milliseconds(200), 2.0, milliseconds(5'000), 1.0};
  EXPECT_EQ(Backoff::Delay(jittered, 2, 0.5).count(), 600);
  EXPECT_EQ(Backoff::Delay(jittered, 6, 0.9).count(), 5'000);
}

}  // namespace
}  // namespace tessera
