#include "k8s/scheduler/queue.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

// Arrivals in the order of the calls.
SchedulingQueue::Arrival Next() {
  static int64_t seq = 0;
  return {0, ++seq};
}

std::vector<std::string> Drain(SchedulingQueue& q) {
  std::vector<std::string> out;
  while (auto k = q.Pop()) out.push_back(*k);
  return out;
}

// Without an order every queue is at 0: priority, then arrival, whatever the queue.
TEST(SchedulingQueue, PriorityThenArrivalWithoutAnOrder) {
  SchedulingQueue q;
  q.Push("a1", 0, "a", Next());
  q.Push("a2", 0, "a", Next());
  q.Push("b1", 0, "b", Next());
  q.Push("h1", 10, "a", Next());
  q.Push("c1", 0, "c", Next());
  q.Push("a3", 0, "a", Next());
  q.Push("low", -5, "a", Next());
  q.Push("early", 0, "c", {-1, 0});  // created before the others, seen last
  EXPECT_EQ(q.size(), 8u);
  EXPECT_EQ(Drain(q),
            (std::vector<std::string>{"h1", "early", "a1", "a2", "b1", "c1", "a3", "low"}));
  EXPECT_TRUE(q.empty());
}

const core::QueueResources kGpu = core::QueueResources::Of(1000, 81920, 1000);

core::QueueSpec Deserves(std::string name, int64_t gpu_milli, int64_t memory_mib,
                         int64_t compute_milli) {
  core::QueueSpec s;
  s.name = std::move(name);
  s.deserved = {gpu_milli, memory_mib, compute_milli};
  return s;
}

// Pops every pod, counting each in its queue as placed with `each[pod's queue]` (no longer
// pending), as the scheduler's QueueBook does.
std::vector<std::string> DrainPlacing(SchedulingQueue& q, core::QueueSet& set,
                                      const std::map<std::string, core::QueueResources>& each) {
  std::vector<std::string> out;
  while (auto k = q.Pop()) {
    out.push_back(*k);
    const std::string queue = k->substr(0, 1);
    set.AddAllocated(queue, each.at(queue));
    set.SubPending(queue, each.at(queue), 1);
  }
  return out;
}

// The worked example of queue.h: priority, then the queue furthest below its fair share, each pop
// seeing the placements before it, ties by arrival.
TEST(SchedulingQueue, PriorityThenDominantResourceFairnessThenArrival) {
  core::QueueSet set;
  set.SetSpecs({Deserves("a", 4000, 4 * 81920, 4000), Deserves("b", 4000, 4 * 81920, 4000)});
  set.set_implicit(false);
  set.SetCapacity(core::QueueResources::Of(8000, 8 * 81920, 8000));
  set.AddAllocated("a", kGpu + kGpu);
  set.AddAllocated("b", kGpu);
  set.AddPending("a", kGpu + kGpu + kGpu + kGpu, 4);
  set.AddPending("b", kGpu + kGpu + kGpu, 3);
  SchedulingQueue q;
  q.set_order(&set);
  for (const char* k : {"a1", "a2", "a3", "b1", "b2", "b3"})
    q.Push(k, 0, k[0] == 'a' ? "a" : "b", Next());
  q.Push("ah", 10, "a", Next());
  EXPECT_EQ(DrainPlacing(q, set, {{"a", kGpu}, {"b", kGpu}}),
            (std::vector<std::string>{"ah", "b1", "b2", "a1", "b3", "a2", "a3"}));
}

// Waiting: every pod of the three parts at once, priority, then the queue below its share now
// (b holds 1 of 4, a 2 of 4), then arrival; popping nothing.
TEST(SchedulingQueue, WaitingListsEveryPartInServingOrder) {
  core::QueueSet set;
  set.SetSpecs({Deserves("a", 4000, 4 * 81920, 4000), Deserves("b", 4000, 4 * 81920, 4000)});
  set.set_implicit(false);
  set.SetCapacity(core::QueueResources::Of(8000, 8 * 81920, 8000));
  set.AddAllocated("a", kGpu + kGpu);
  set.AddAllocated("b", kGpu);
  set.AddPending("a", kGpu + kGpu + kGpu, 3);
  set.AddPending("b", kGpu + kGpu + kGpu, 3);
  SchedulingQueue q;
  q.set_order(&set);
  q.Push("a1", 0, "a", Next());
  q.Unschedulable("b1", 0, "b", Next());
  q.Backoff("a2", 0, "a", Next(), std::chrono::steady_clock::time_point::max());
  q.Push("b2", 0, "b", Next());
  q.Unschedulable("h", 10, "a", Next());
  q.Push("low", -1, "b", Next());
  EXPECT_EQ(q.Waiting(), (std::vector<std::string>{"h", "b1", "b2", "a1", "a2", "low"}));
  EXPECT_EQ(q.size(), 6u);
  SchedulingQueue plain;  // no order: arrival within a priority
  plain.Push("x", 0, "b", Next());
  plain.Unschedulable("y", 0, "a", Next());
  EXPECT_EQ(plain.Waiting(), (std::vector<std::string>{"x", "y"}));
}

// Dominant resource: a queue holding half its memory but no compute is behind one holding 60% of
// its compute, whatever the GPU counts say; fractions are compared exactly (1/3 > 333/1000).
TEST(SchedulingQueue, DominantResourceOverMemoryAndComputeExactly) {
  core::QueueSet set;
  set.SetSpecs({Deserves("m", 1000, 81920, 1000), Deserves("c", 1000, 81920, 1000)});
  set.set_implicit(false);
  set.SetCapacity(core::QueueResources::Of(2000, 2 * 81920, 2000));
  set.AddAllocated("m", core::QueueResources::Of(500, 40960, 0));  // a 40Gi share
  set.AddAllocated("c", core::QueueResources::Of(600, 0, 600));    // a 60% compute share
  set.AddPending("m", kGpu, 1);
  set.AddPending("c", kGpu, 1);
  SchedulingQueue q;
  q.set_order(&set);
  q.Push("c1", 0, "c", Next());  // arrived first, but c is at 6/10, m at 1/2
  q.Push("m1", 0, "m", Next());
  EXPECT_EQ(*q.Pop(), "m1");
  EXPECT_EQ(*q.Pop(), "c1");

  core::QueueSet exact;
  exact.SetSpecs({Deserves("x", 3000, 0, 0), Deserves("y", 1000, 0, 0)});
  exact.set_implicit(false);
  exact.SetCapacity(core::QueueResources::Of(4000, 0, 0));
  exact.AddAllocated("x", core::QueueResources::Of(1000, 0, 0));  // 1/3 of its share
  exact.AddAllocated("y", core::QueueResources::Of(333, 0, 0));   // 333/1000 of its share
  exact.AddPending("x", core::QueueResources::Of(3000, 0, 0), 1);
  exact.AddPending("y", core::QueueResources::Of(1000, 0, 0), 1);
  SchedulingQueue q2;
  q2.set_order(&exact);
  q2.Push("x1", 0, "x", Next());
  q2.Push("y1", 0, "y", Next());
  EXPECT_EQ(*q2.Pop(), "y1");
}

// No queue starves: a queue that holds nothing goes before one with a long backlog that holds
// something, even when the backlog's pods arrived first; between queues holding nothing, arrival.
TEST(SchedulingQueue, AQueueHoldingNothingIsNotStarved) {
  core::QueueSet set;  // implicit queues: nothing deserved, weight 1
  set.SetCapacity(core::QueueResources::Of(8000, 8 * 81920, 8000));
  SchedulingQueue q;
  q.set_order(&set);
  for (int i = 0; i < 5; ++i) q.Push("a" + std::to_string(i), 0, "a", Next());
  q.Push("b0", 0, "b", Next());
  q.Push("b1", 0, "b", Next());
  // Fair shares (water filling over the demands, a 6 GPUs, b 2): a 6, b 2. a holds 1 GPU (1/6),
  // b nothing (0): b0 first, then a (1/6 < 1/2), a again (2/6), then a tie at 1/2 goes to the
  // earlier head (a2), then b1 (1/2 < 4/6), then a's rest.
  set.AddAllocated("a", kGpu);
  set.AddPending("a", core::QueueResources::Of(5000, 5 * 81920, 5000), 5);
  set.AddPending("b", core::QueueResources::Of(2000, 2 * 81920, 2000), 2);
  EXPECT_EQ(DrainPlacing(q, set, {{"a", kGpu}, {"b", kGpu}}),
            (std::vector<std::string>{"b0", "a0", "a1", "a2", "b1", "a3", "a4"}));
}

TEST(SchedulingQueue, RemoveAndPushAgain) {
  SchedulingQueue q;
  q.Push("x", 0, "q", Next());
  q.Push("y", 0, "q", Next());
  q.Push("z", 0, "q", Next());
  EXPECT_TRUE(q.Remove("y"));
  EXPECT_FALSE(q.Remove("y"));
  q.Push("x", 0, "q", Next());  // moves to the back
  EXPECT_TRUE(q.Contains("x"));
  EXPECT_FALSE(q.Contains("y"));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"z", "x"}));
  q.Push("p", 1, "q", Next());
  q.Push("p", 0, "q", Next());  // a new priority replaces the old place
  q.Push("o", 0, "q", Next());
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"p", "o"}));
}

using std::chrono::milliseconds;

// Back-off: not tried before its time, then in the active order; a pod is in one part at a time.
TEST(SchedulingQueue, BackoffPodsBecomeActiveWhenDue) {
  const auto t0 = SchedulingQueue::TimePoint() + std::chrono::hours(1);
  SchedulingQueue q({milliseconds(1000), milliseconds(30'000)}, t0);
  q.Backoff("late", 0, "q", Next(), t0 + milliseconds(2000));
  q.Backoff("soon", 0, "q", Next(), t0 + milliseconds(1000));
  q.Push("now", 0, "q", Next());
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(q.active_size(), 1u);
  EXPECT_EQ(q.NextWakeup(), t0 + milliseconds(1000));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"now"}));
  q.Flush(t0 + milliseconds(1500));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"soon"}));
  q.Push("late", 0, "q",
         Next());  // pushed again before its time: active now, no longer backing off
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
  q.Unschedulable("u", 0, "q", Next());
  EXPECT_FALSE(q.Flush(t0 + milliseconds(5000)));  // nothing changed
  EXPECT_TRUE(q.active_empty());
  q.NoteChange();
  EXPECT_EQ(q.NextWakeup(), t0 + milliseconds(1000));
  q.Flush(t0 + milliseconds(5100));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"u"}));
  // A change soon after the last flush waits out min_interval.
  q.Unschedulable("u", 0, "q", Next());
  q.NoteChange();
  q.Flush(t0 + milliseconds(5500));
  EXPECT_TRUE(q.active_empty());
  q.Flush(t0 + milliseconds(6200));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"u"}));
  // Tried again under the same change: it waits for the next one (or the period).
  q.Unschedulable("u", 0, "q", Next());
  EXPECT_FALSE(q.Flush(t0 + milliseconds(9000)));
  EXPECT_TRUE(q.active_empty());
  // The period moves it without a change, and says the period elapsed.
  q.Unschedulable("u", 0, "q", Next());
  EXPECT_EQ(q.NextWakeup(), t0 + milliseconds(36'200));
  EXPECT_FALSE(q.Flush(t0 + milliseconds(36'000)));
  EXPECT_TRUE(q.Flush(t0 + milliseconds(36'300)));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"u"}));
  EXPECT_EQ(q.NextWakeup(), std::nullopt);
}

}  // namespace
}  // namespace tessera::k8s
