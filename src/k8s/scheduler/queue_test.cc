#include "k8s/scheduler/queue.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

std::vector<std::string> Drain(SchedulingQueue& q) {
  std::vector<std::string> out;
  while (auto k = q.Pop()) out.push_back(*k);
  return out;
}

TEST(SchedulingQueue, PriorityThenQueuesTakeTurnsThenFifo) {
  SchedulingQueue q;
  q.Push("a1", 0, "a");
  q.Push("a2", 0, "a");
  q.Push("a3", 0, "a");
  q.Push("b1", 0, "b");
  q.Push("h1", 10, "a");
  q.Push("c1", 0, "c");
  q.Push("low", -5, "a");
  EXPECT_EQ(q.size(), 7u);
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"h1", "a1", "b1", "c1", "a2", "a3", "low"}));
  EXPECT_TRUE(q.empty());
}

TEST(SchedulingQueue, RemoveAndPushAgain) {
  SchedulingQueue q;
  q.Push("x", 0, "q");
  q.Push("y", 0, "q");
  q.Push("z", 0, "q");
  EXPECT_TRUE(q.Remove("y"));
  EXPECT_FALSE(q.Remove("y"));
  q.Push("x", 0, "q");  // moves to the back
  EXPECT_TRUE(q.Contains("x"));
  EXPECT_FALSE(q.Contains("y"));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"z", "x"}));
  q.Push("p", 1, "q");
  q.Push("p", 0, "q");  // a new priority replaces the old place
  q.Push("o", 0, "q");
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"p", "o"}));
}

TEST(SchedulingQueue, TurnsContinueAcrossPops) {
  SchedulingQueue q;
  for (int i = 0; i < 3; ++i) {
    q.Push("a" + std::to_string(i), 0, "a");
    q.Push("b" + std::to_string(i), 0, "b");
  }
  EXPECT_EQ(*q.Pop(), "a0");
  q.Push("a9", 0, "a");
  EXPECT_EQ(*q.Pop(), "b0");
  EXPECT_EQ(*q.Pop(), "a1");
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"b1", "a2", "b2", "a9"}));
}

using std::chrono::milliseconds;

// Back-off: not tried before its time, then in the active order; a pod is in one part at a time.
TEST(SchedulingQueue, BackoffPodsBecomeActiveWhenDue) {
  const auto t0 = SchedulingQueue::TimePoint() + std::chrono::hours(1);
  SchedulingQueue q({milliseconds(1000), milliseconds(30'000)}, t0);
  q.Backoff("late", 0, "q", t0 + milliseconds(2000));
  q.Backoff("soon", 0, "q", t0 + milliseconds(1000));
  q.Push("now", 0, "q");
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.active_size(), 1u);
  EXPECT_EQ(q.NextWakeup(), t0 + milliseconds(1000));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"now"}));
  q.Flush(t0 + milliseconds(1500));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"soon"}));
  q.Push("late", 0, "q");  // pushed again before its time: active now, no longer backing off
  EXPECT_EQ(q.backoff_size(), 0u);
  q.Flush(t0 + milliseconds(3000));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"late"}));
  EXPECT_TRUE(q.empty());
}

// Unschedulable: back to active after a change it has not been tried under, at most once per
// min_interval, and after the period in any case; never a busy loop without a change.
TEST(SchedulingQueue, UnschedulablePodsWaitForAChangeOrThePeriod) {
  const auto t0 = SchedulingQueue::TimePoint() + std::chrono::hours(1);
  SchedulingQueue q({milliseconds(1000), milliseconds(30'000)}, t0);
  q.Unschedulable("u", 0, "q");
  EXPECT_FALSE(q.Flush(t0 + milliseconds(5000)));  // nothing changed
  EXPECT_TRUE(q.active_empty());
  q.NoteChange();
  EXPECT_EQ(q.NextWakeup(), t0 + milliseconds(1000));
  q.Flush(t0 + milliseconds(5100));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"u"}));
  // A change soon after the last flush waits out min_interval.
  q.Unschedulable("u", 0, "q");
  q.NoteChange();
  q.Flush(t0 + milliseconds(5500));
  EXPECT_TRUE(q.active_empty());
  q.Flush(t0 + milliseconds(6200));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"u"}));
  // Tried again under the same change: it waits for the next one (or the period).
  q.Unschedulable("u", 0, "q");
  EXPECT_FALSE(q.Flush(t0 + milliseconds(9000)));
  EXPECT_TRUE(q.active_empty());
  // The period moves it without a change, and says the period elapsed.
  q.Unschedulable("u", 0, "q");
  EXPECT_EQ(q.NextWakeup(), t0 + milliseconds(36'200));
  EXPECT_FALSE(q.Flush(t0 + milliseconds(36'000)));
  EXPECT_TRUE(q.Flush(t0 + milliseconds(36'300)));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"u"}));
  EXPECT_EQ(q.NextWakeup(), std::nullopt);
}

}  // namespace
}  // namespace tessera::k8s
