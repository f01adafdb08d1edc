#include "agent/pods/idle_watch.h"

#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr char kGpu[] = "GPU-6f1c2a9e-0000-4000-8000-000000000000";

// One observation a second for `seconds`, busy `permille` of each.
void Watch(IdleWatch& w, int64_t* now, int seconds, uint64_t permille) {
  for (int i = 0; i < seconds; ++i) {
    *now += kS;
    w.Observe("a", kGpu, *now, kS, kS * permille / 1000);
  }
}

TEST(IdleWatchTest, IdleOnlyAfterAWholeWindowUnderTheThreshold) {
  IdleWatch w({.threshold_permille = 50, .window = std::chrono::minutes(10)});
  int64_t now = 0;
  Watch(w, &now, 599, 10);
  EXPECT_FALSE(w.Idle("a", kGpu)) << "not watched for a whole window yet";
  Watch(w, &now, 1, 10);
  uint32_t busy = 0;
  EXPECT_TRUE(w.Idle("a", kGpu, &busy));
  EXPECT_EQ(busy, 10u);
  // It starts working: within the window the mean passes 5% and it is no longer idle.
  Watch(w, &now, 60, 500);
  EXPECT_FALSE(w.Idle("a", kGpu, &busy));
  EXPECT_GT(busy, 50u);
  // Ten quiet minutes later the busy minute has left the window.
  Watch(w, &now, 600, 0);
  EXPECT_TRUE(w.Idle("a", kGpu, &busy));
  EXPECT_EQ(busy, 0u);
  EXPECT_FALSE(w.Idle("b", kGpu));
  w.Forget("a");
  EXPECT_FALSE(w.Idle("a", kGpu));
}

TEST(IdleWatchTest, ATimeNotObservedDoesNotCountAndAZeroWindowTurnsItOff) {
  IdleWatch w({.threshold_permille = 50, .window = std::chrono::minutes(1)});
  int64_t now = 0;
  Watch(w, &now, 30, 0);
  now += 3600 * kS;  // an hour sharing the GPU with other running pods: nothing observed
  Watch(w, &now, 29, 0);
  EXPECT_FALSE(w.Idle("a", kGpu)) << "59 s observed";
  Watch(w, &now, 1, 0);
  EXPECT_TRUE(w.Idle("a", kGpu));
  IdleWatch off({.threshold_permille = 50, .window = std::chrono::minutes(0)});
  now = 0;
  Watch(off, &now, 3600, 0);
  EXPECT_FALSE(off.Idle("a", kGpu));
}

}  // namespace
}  // namespace tessera::agent
