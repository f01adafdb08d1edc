#include "core/queues/usage_history.h"

#include "core/queues/queue_set.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

constexpr int64_t kGpu = 1000;
constexpr int64_t kHour = 3600 * 1000;

QueueResources Gpus(int64_t milli) { return QueueResources::Of(milli, 0, 0); }

// The example of usage_history.h: 8 GPUs from 0:00 to 2:00, then nothing; half-life one hour.
TEST(DecayedUsageTest, WorkedExample) {
  DecayedUsage u;
  u.Advance(0, {}, kHour);  // starts the clock
  u.Advance(1 * kHour, Gpus(8 * kGpu), kHour);
  EXPECT_EQ(u.Rounded()[kQueueGpu], 4 * kGpu);
  u.Advance(2 * kHour, Gpus(8 * kGpu), kHour);
  EXPECT_EQ(u.Rounded()[kQueueGpu], 6 * kGpu);
  u.Advance(3 * kHour, {}, kHour);
  EXPECT_EQ(u.Rounded()[kQueueGpu], 3 * kGpu);
  u.Advance(5 * kHour, {}, kHour);
  EXPECT_EQ(u.Rounded()[kQueueGpu], 750);
  EXPECT_EQ(u.at_ms(), 5 * kHour);
}

TEST(DecayedUsageTest, StepsOfAnyLengthAgree) {
  // Holding 3 GPUs for 90 minutes in one step or in 5,400 one-second steps.
  DecayedUsage one, many;
  one.Advance(0, {}, kHour);
  many.Advance(0, {}, kHour);
  one.Advance(90 * 60 * 1000, QueueResources::Of(3 * kGpu, 240 * 1024, 3 * kGpu), kHour);
  for (int64_t t = 1; t <= 90 * 60; ++t) {
    many.Advance(t * 1000, QueueResources::Of(3 * kGpu, 240 * 1024, 3 * kGpu), kHour);
  }
  EXPECT_EQ(one.Rounded(), many.Rounded());
  // 3 x (1 - 2^-1.5) GPUs.
  EXPECT_EQ(one.Rounded()[kQueueGpu], 1939);
}

TEST(DecayedUsageTest, TheClockGoingBackIsNoTime) {
  DecayedUsage u(Gpus(2 * kGpu), 10 * kHour);
  u.Advance(9 * kHour, Gpus(8 * kGpu), kHour);
  EXPECT_EQ(u.Rounded()[kQueueGpu], 2 * kGpu);
  EXPECT_EQ(u.at_ms(), 10 * kHour);
}

TEST(DecayedUsageTest, HalfLifeZeroKeepsNothing) {
  DecayedUsage u(Gpus(2 * kGpu), 0);
  u.Advance(kHour, Gpus(8 * kGpu), 0);
  EXPECT_TRUE(u.Rounded().zero());
}

// Two queues of one priority, 8 GPUs, both with pods waiting (fair share 4 GPUs each). `steady`
// has held 2 GPUs for a day; `burst` held 6 from 0:00 to 4:00, and its pods have just ended. With
// a half-life of one hour, burst's usage is 6 x (1 - 2^-4) = 5.625 GPUs and steady's 2: steady
// goes first until it holds 4 (its key (4 + 2) / 4 passes burst's 5.625 / 4). Without a
// half-life, burst (holding nothing) goes first.
void BurstAndSteady(QueueSet& qs) {
  qs.SetCapacity(Gpus(8 * kGpu));
  qs.AdvanceTo(-24 * kHour);
  qs.AddAllocated("steady", Gpus(2 * kGpu));
  qs.AdvanceTo(0);
  qs.AddAllocated("burst", Gpus(6 * kGpu));
  qs.AdvanceTo(4 * kHour);
  qs.SubAllocated("burst", Gpus(6 * kGpu));
  qs.AddPending("burst", Gpus(8 * kGpu), 8);
  qs.AddPending("steady", Gpus(8 * kGpu), 8);
}

TEST(QueueSetUsageTest, WorkedExampleTheSteadyQueueGoesFirstAfterABurst) {
  QueueSet qs;
  qs.SetHalfLife(kHour);
  BurstAndSteady(qs);
  EXPECT_EQ(qs.Usage("burst")[kQueueGpu], 5625);
  EXPECT_EQ(qs.Usage("steady")[kQueueGpu], 2 * kGpu);
  EXPECT_EQ(qs.FairShare("steady")[kQueueGpu], 4 * kGpu);
  // burst's pod arrived first: only the usage puts steady ahead.
  std::vector<QueueSet::Candidate> c = {{"burst", {0, 0}}, {"steady", {1, 0}}};
  std::vector<std::string> order;
  for (int k = 0; k < 4; ++k) {
    const std::string q(c[qs.Pick(c)].queue);
    order.push_back(q);
    qs.AddAllocated(q, Gpus(kGpu));  // placed at once (4:00): no time passes
  }
  EXPECT_EQ(order, (std::vector<std::string>{"steady", "steady", "burst", "steady"}));
}

TEST(QueueSetUsageTest, HalfLifeZeroIsTodaysOrder) {
  QueueSet qs;
  BurstAndSteady(qs);
  EXPECT_TRUE(qs.Usage("burst").zero());
  std::vector<QueueSet::Candidate> c = {{"burst", {0, 0}}, {"steady", {1, 0}}};
  std::vector<std::string> order;
  for (int k = 0; k < 4; ++k) {
    const std::string q(c[qs.Pick(c)].queue);
    order.push_back(q);
    qs.AddAllocated(q, Gpus(kGpu));
  }
  // burst at 0, 1/4, then 2/4 ties steady's 2/4 (burst's pod is older), 3/4 against 2/4.
  EXPECT_EQ(order, (std::vector<std::string>{"burst", "burst", "burst", "steady"}));
}

TEST(QueueSetUsageTest, ParentsSumTheirLeavesAndSnapshotShowsIt) {
  QueueSet qs;
  QueueSpec research{.name = "research"}, a{.name = "a", .parent = "research"},
      b{.name = "b", .parent = "research"};
  qs.SetSpecs({research, a, b});
  qs.SetHalfLife(kHour);
  qs.SetCapacity(Gpus(8 * kGpu));
  qs.AdvanceTo(0);
  qs.AddAllocated("a", Gpus(2 * kGpu));
  qs.AddAllocated("b", Gpus(4 * kGpu));
  qs.AdvanceTo(kHour);
  std::map<std::string, int64_t> usage;
  for (const QueueSet::Report& r : qs.Snapshot()) usage[r.name] = r.usage[kQueueGpu];
  EXPECT_EQ(usage["a"], 1 * kGpu);
  EXPECT_EQ(usage["b"], 2 * kGpu);
  EXPECT_EQ(usage["research"], 3 * kGpu);
}

TEST(QueueSetUsageTest, ARecordReadBackAfterARestart) {
  QueueSet before;
  before.SetHalfLife(kHour);
  before.AdvanceTo(0);
  before.AddAllocated("train", Gpus(4 * kGpu));
  before.AdvanceTo(2 * kHour);  // 4 x (1 - 1/4) = 3 GPUs
  const std::vector<QueueSet::UsageRecord> records = before.UsageRecords();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].queue, "train");
  EXPECT_EQ(records[0].usage[kQueueGpu], 3 * kGpu);
  EXPECT_EQ(records[0].at_ms, 2 * kHour);

  // A scheduler started at 3:00 finds the pods (4 GPUs) and then the record: it takes the record
  // and counts 2:00 to 3:00 as holding the 4 GPUs it finds: 3 x 1/2 + 4 x 1/2 = 3.5 GPUs.
  QueueSet after;
  after.SetHalfLife(kHour);
  after.AdvanceTo(3 * kHour);
  after.AddAllocated("train", Gpus(4 * kGpu));
  EXPECT_TRUE(after.Usage("train").zero());
  EXPECT_TRUE(after.RestoreUsage("train", records[0].usage, records[0].at_ms));
  EXPECT_EQ(after.Usage("train")[kQueueGpu], 3500);
  // Its own record, read back later (written after it began keeping history), changes nothing.
  after.AdvanceTo(4 * kHour);
  const QueueSet::UsageRecord own = after.UsageRecords()[0];
  EXPECT_FALSE(after.RestoreUsage("train", Gpus(0), own.at_ms));
  EXPECT_EQ(after.Usage("train")[kQueueGpu], 3750);
  // Without a half-life nothing is kept or restored.
  QueueSet plain;
  EXPECT_FALSE(plain.RestoreUsage("train", records[0].usage, records[0].at_ms));
  EXPECT_TRUE(plain.UsageRecords().empty());
}

}  // namespace
}  // namespace tessera::core
