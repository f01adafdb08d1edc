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

}  // namespace
}  // namespace tessera::k8s
