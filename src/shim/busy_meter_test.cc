#include "shim/busy_meter.h"

#include "gtest/gtest.h"

namespace tessera::shim {
namespace {

constexpr int64_t kMs = 1'000'000;

// Launches at `at`, `count` of them (the clock is read only for the first).
void Launches(BusyMeter& m, int64_t at, int count, int* clock_reads) {
  for (int i = 0; i < count; ++i) {
    m.Launch([&] {
      ++*clock_reads;
      return at;
    });
  }
}

TEST(BusyMeterTest, ABusySyncChargesFromTheFirstLaunchToItsReturn) {
  BusyMeter m;
  int reads = 0;
  Launches(m, 0, 10, &reads);
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(m.Sync(1 * kMs, 16 * kMs), uint64_t{16 * kMs});
  EXPECT_EQ(m.cost_ns(), 16 * kMs / 10);
  // Nothing launched since: nothing charged.
  EXPECT_EQ(m.Sync(17 * kMs, 30 * kMs), 0u);
}

TEST(BusyMeterTest, AnIdleSyncChargesTheLearntCostAtMostTheTimeSinceTheFirstLaunch) {
  BusyMeter m;
  int reads = 0;
  // Before any busy sync no cost is known: nothing is guessed.
  Launches(m, 0, 3, &reads);
  EXPECT_EQ(m.Sync(5 * kMs, 5 * kMs + 10'000), 0u);
  Launches(m, 10 * kMs, 10, &reads);
  EXPECT_EQ(m.Sync(11 * kMs, 26 * kMs), uint64_t{16 * kMs});  // cost 1.6 ms
  // The worked example of busy_meter.h: 5 launches at 20 ms, an idle sync at 40 ms.
  Launches(m, 40 * kMs, 5, &reads);
  EXPECT_EQ(m.Sync(60 * kMs, 60 * kMs + 1'000), uint64_t{8 * kMs});
  // 50 launches in 2 ms, done by then: at most the 2 ms.
  Launches(m, 100 * kMs, 50, &reads);
  EXPECT_EQ(m.Sync(102 * kMs, 102 * kMs + 1'000), uint64_t{2 * kMs});
  EXPECT_EQ(reads, 4);
}

TEST(BusyMeterTest, ItOverCountsAnIdleGapBetweenLaunchesOfOneInterval) {
  // 1 ms of work at 0, 10 ms of CPU, 2 ms of work at 10 ms, a busy sync at 10.1 ms: 12 ms
  // charged for 3 ms of GPU time (the bound busy_meter.h states: the gap is in [first, done]).
  BusyMeter m;
  m.Launch([] { return int64_t{0}; });
  m.Launch([] { return 10 * kMs; });
  EXPECT_EQ(m.Sync(10 * kMs + 100'000, 12 * kMs), uint64_t{12 * kMs});
}

TEST(BusyMeterTest, ANonsenseClockChargesNothingNegative) {
  BusyMeter m;
  m.Launch([] { return 50 * kMs; });
  EXPECT_EQ(m.Sync(10 * kMs, 20 * kMs), 0u);  // done before the first launch: 0, not negative
  m.Launch([] { return 50 * kMs; });
  EXPECT_EQ(m.Sync(40 * kMs, 40 * kMs), 0u);
}

}  // namespace
}  // namespace tessera::shim
