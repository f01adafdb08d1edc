#include "shim/busy_meter.h"

#include "gtest/gtest.h"

namespace tessera::shim {
namespace {

constexpr int64_t kMs = 1'000'000;

// `count` launches at `at` (no pause between them: the driver is never asked).
void Launches(BusyMeter& m, int64_t at, int count) {
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(m.Launch(at,
                       [] {
                         ADD_FAILURE() << "asked without a pause";
                         return false;
                       }),
              0u);
  }
}

TEST(BusyMeterTest, ABusySyncChargesFromTheFirstLaunchToItsReturn) {
  BusyMeter m;
  Launches(m, 0, 10);
  EXPECT_EQ(m.Sync(1 * kMs, 16 * kMs), uint64_t{16 * kMs});
  EXPECT_EQ(m.cost_ns(), 16 * kMs / 10);
  // Nothing launched since: nothing charged.
  EXPECT_EQ(m.Sync(17 * kMs, 30 * kMs), 0u);
}

TEST(BusyMeterTest, AnIdleSyncChargesTheLearntCostAtMostTheTimeSinceTheFirstLaunch) {
  BusyMeter m;
  // Before any busy sync no cost is known: nothing is guessed.
  Launches(m, 0, 3);
  EXPECT_EQ(m.Sync(5 * kMs, 5 * kMs + 10'000), 0u);
  Launches(m, 10 * kMs, 10);
  EXPECT_EQ(m.Sync(11 * kMs, 26 * kMs), uint64_t{16 * kMs});  // cost 1.6 ms
  // The worked example of busy_meter.h: 5 launches at 20 ms, an idle sync at 40 ms.
  Launches(m, 40 * kMs, 5);
  EXPECT_EQ(m.Sync(60 * kMs, 60 * kMs + 1'000), uint64_t{8 * kMs});
  // 50 launches in 2 ms, done by then: at most the 2 ms.
  Launches(m, 100 * kMs, 50);
  EXPECT_EQ(m.Sync(102 * kMs, 102 * kMs + 1'000), uint64_t{2 * kMs});
}

TEST(BusyMeterTest, APauseAfterWhichTheGpuWasIdleIsNotCounted) {
  BusyMeter m;
  Launches(m, 0, 10);
  EXPECT_EQ(m.Sync(1 * kMs, 20 * kMs), uint64_t{20 * kMs});  // cost 2 ms
  // 2 ms of work at 30 ms, 10 ms of CPU, 2 ms at 40 ms, a busy sync at 40.1 ms returning at
  // 42 ms. The driver says the first was done by 40 ms: it is charged at the learnt cost, and
  // the sync from 40 ms on.
  int asked = 0;
  auto done = [&asked] {
    ++asked;
    return true;
  };
  EXPECT_EQ(m.Launch(30 * kMs, done), 0u);
  EXPECT_EQ(m.Launch(40 * kMs, done), uint64_t{2 * kMs});
  EXPECT_EQ(m.Sync(40 * kMs + 100'000, 42 * kMs), uint64_t{2 * kMs});
  EXPECT_EQ(asked, 1);
  // A pause while the GPU still runs the work (the driver says not done): one interval, the
  // pause inside it is GPU time.
  EXPECT_EQ(m.Launch(50 * kMs, done), 0u);
  EXPECT_EQ(m.Launch(51 * kMs, [] { return false; }), 0u);
  EXPECT_EQ(m.Sync(51 * kMs + 100'000, 60 * kMs), uint64_t{10 * kMs});
}

TEST(BusyMeterTest, APauseShorterThanTheThresholdStaysInTheInterval) {
  // 1 ms of work at 0, a pause under kPauseNs, 2 ms more, a busy sync: the pause is counted
  // (the bound busy_meter.h states).
  BusyMeter m;
  Launches(m, 0, 1);
  Launches(m, BusyMeter::kPauseNs, 1);
  EXPECT_EQ(m.Sync(BusyMeter::kPauseNs + 100'000, 3 * kMs), uint64_t{3 * kMs});
}

TEST(BusyMeterTest, ItAsksAboutALaunchOnlyWhereItOpensAnIntervalOrFollowsAPause) {
  BusyMeter m;
  EXPECT_TRUE(m.Asks(0));  // the first: it would open an interval
  Launches(m, 0, 1);
  EXPECT_FALSE(m.Asks(BusyMeter::kPauseNs));
  EXPECT_TRUE(m.Asks(BusyMeter::kPauseNs + 1));
  // A launch the caller left out (recorded into a graph) does not move the interval.
  EXPECT_TRUE(m.Asks(5 * kMs));
  EXPECT_EQ(m.Sync(6 * kMs, 7 * kMs), uint64_t{7 * kMs});
  EXPECT_TRUE(m.Asks(8 * kMs));
}

TEST(BusyMeterTest, ANonsenseClockChargesNothingNegative) {
  BusyMeter m;
  Launches(m, 50 * kMs, 1);
  EXPECT_EQ(m.Sync(10 * kMs, 20 * kMs), 0u);  // done before the first launch: 0, not negative
  Launches(m, 50 * kMs, 1);
  EXPECT_EQ(m.Sync(40 * kMs, 40 * kMs), 0u);
}

}  // namespace
}  // namespace tessera::shim
