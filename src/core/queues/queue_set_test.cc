#include "core/queues/queue_set.h"

#include <map>

#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGpu = 1000;

QueueResources Gpus(int64_t milli) { return QueueResources::Of(milli, 0, 0); }

QueueSpec Queue(std::string name, std::optional<int64_t> deserved_gpu = std::nullopt,
                int64_t weight = 1, std::string parent = "") {
  QueueSpec s;
  s.name = std::move(name);
  s.parent = std::move(parent);
  s.deserved[kQueueGpu] = deserved_gpu;
  s.weight = weight;
  return s;
}

TEST(QueueResourcesTest, UsageCountsSharesAsTheirFraction) {
  Cluster c = testing::ClusterBuilder().Node("n").Gpus(2, "A100-80GB").Build();
  Placement whole;
  whole.node = NodeId(0);
  whole.gpus.push_back(GpuGrant{0, 81920, 1000, true, {}});
  EXPECT_EQ(UsageOf(c, whole), QueueResources::Of(1000, 81920, 1000));
  Placement share;
  share.node = NodeId(0);
  share.gpus.push_back(GpuGrant{1, 20480, 0, false, {}});  // 20Gi of 80Gi, best-effort compute
  EXPECT_EQ(UsageOf(c, share), QueueResources::Of(250, 20480, 0));
  share.gpus[0].compute_milli = 600;  // the larger of the two fractions
  EXPECT_EQ(UsageOf(c, share), QueueResources::Of(600, 20480, 600));
  // Memory fractions round up to the next milli-GPU: 1Mi of 80Gi denies others something.
  EXPECT_EQ(ShareGpuMilli(1, 0, 81920), 1);
  EXPECT_EQ(ShareGpuMilli(4096, 0, 81920), 50);
}

TEST(QueueResourcesTest, DemandOfEveryKindOfAsk) {
  PodRequest r;
  r.gpu = GpuAsk::Whole(2);
  EXPECT_EQ(DemandOf(r, 81920), QueueResources::Of(2000, 2 * 81920, 2000));
  r.gpu = GpuAsk::Share(4096, 250);
  EXPECT_EQ(DemandOf(r, 81920), QueueResources::Of(250, 4096, 250));
  r.gpu = GpuAsk::Fraction(500);
  EXPECT_EQ(DemandOf(r, 81920), QueueResources::Of(500, 40960, 500));
  r.gpu = GpuAsk::Mig("3g.40gb");
  EXPECT_EQ(DemandOf(r, 81920), QueueResources::Of(500, 40960, 428));
  r.gpu = GpuAsk::None();
  EXPECT_TRUE(DemandOf(r, 81920).zero());
}

TEST(QueueResourcesTest, FormatsForPeople) {
  EXPECT_EQ(FormatQueueResources(QueueResources::Of(2500, 40960, 250)),
            "2.5 GPUs, 40Gi, 25% compute");
  EXPECT_EQ(FormatQueueAmount(kQueueGpu, 1000), "1 GPU");
  EXPECT_EQ(FormatQueueAmount(kQueueGpu, 125), "0.125 GPUs");
  EXPECT_EQ(FormatQueueAmount(kQueueGpuCompute, 125), "12.5% compute");
  EXPECT_EQ(FormatQueueResources({}), "nothing");
}

TEST(QueueSetTest, FairShareIsDeservedThenWeightsCappedByDemandAndLimit) {
  QueueSet qs;
  QueueSpec capped = Queue("c", 1 * kGpu);
  capped.limit[kQueueGpu] = 2 * kGpu;
  qs.SetSpecs({Queue("a", 2 * kGpu, 1), Queue("b", 2 * kGpu, 3), capped, Queue("d", 0, 1)});
  qs.SetCapacity(Gpus(12 * kGpu));
  qs.AddPending("a", Gpus(20 * kGpu), 20);
  qs.AddPending("b", Gpus(20 * kGpu), 20);
  qs.AddPending("c", Gpus(20 * kGpu), 20);  // wants much, limited to 2
  qs.AddPending("d", Gpus(500), 1);         // wants half a GPU
  // Deserved first: a 2, b 2, c 1, d 0 (5); 7 left by weight among a (1), b (3), c (1), d (1):
  // d takes its half GPU, c one more to its limit, then a and b share the rest 1:3.
  EXPECT_EQ(qs.FairShare("d")[kQueueGpu], 500);
  EXPECT_EQ(qs.FairShare("c")[kQueueGpu], 2 * kGpu);
  const int64_t a = qs.FairShare("a")[kQueueGpu], b = qs.FairShare("b")[kQueueGpu];
  EXPECT_EQ(a + b + 2 * kGpu + 500, 12 * kGpu);
  EXPECT_NEAR(static_cast<double>(b - 2 * kGpu) / static_cast<double>(a - 2 * kGpu), 3.0, 0.01);
}

TEST(QueueSetTest, MoreDeservedThanThereIsIsSharedInProportion) {
  QueueSet qs;
  qs.SetSpecs({Queue("a", 6 * kGpu), Queue("b", 2 * kGpu)});
  qs.SetCapacity(Gpus(4 * kGpu));
  qs.AddPending("a", Gpus(10 * kGpu), 10);
  qs.AddPending("b", Gpus(10 * kGpu), 10);
  EXPECT_EQ(qs.FairShare("a")[kQueueGpu], 3 * kGpu);
  EXPECT_EQ(qs.FairShare("b")[kQueueGpu], 1 * kGpu);
}

// The worked example of the class comment.
TEST(QueueSetTest, WorkedExampleOrderAndReclaim) {
  QueueSet qs;
  qs.SetSpecs({Queue("train", 6 * kGpu), Queue("infer", 2 * kGpu)});
  qs.SetCapacity(Gpus(8 * kGpu));
  qs.AddAllocated("train", Gpus(7 * kGpu));
  qs.AddPending("train", Gpus(4 * kGpu), 4);
  qs.AddAllocated("infer", Gpus(1 * kGpu));
  qs.AddPending("infer", Gpus(2 * kGpu), 2);
  EXPECT_EQ(qs.FairShare("train")[kQueueGpu], 6 * kGpu);
  EXPECT_EQ(qs.FairShare("infer")[kQueueGpu], 2 * kGpu);
  std::vector<QueueSet::Candidate> c = {{"train", {0, 0}}, {"infer", {5, 5}}};
  EXPECT_EQ(c[qs.Pick(c)].queue, "infer");
  std::string why;
  EXPECT_TRUE(qs.MayReclaim("infer", Gpus(kGpu), "train", &why)) << why;
  const std::pair<std::string, QueueResources> one[] = {{"train", Gpus(kGpu)}};
  const std::pair<std::string, QueueResources> two[] = {{"train", Gpus(2 * kGpu)}};
  EXPECT_TRUE(qs.KeepsDeserved("infer", one));
  EXPECT_FALSE(qs.KeepsDeserved("infer", two));
  // infer asking two more would be above its deserved share: no reclaim.
  EXPECT_FALSE(qs.MayReclaim("infer", Gpus(2 * kGpu), "train", &why));
  EXPECT_THAT(why, HasSubstr("more than it deserves"));
  // train is above its share: it may never reclaim from infer.
  EXPECT_FALSE(qs.MayReclaim("train", Gpus(kGpu), "infer", &why));
}

TEST(QueueSetTest, ReclaimNeedsAVictimAboveItsShare) {
  QueueSet qs;
  qs.SetSpecs({Queue("a", 4 * kGpu), Queue("b", 4 * kGpu)});
  qs.SetCapacity(Gpus(8 * kGpu));
  qs.AddAllocated("a", Gpus(4 * kGpu));
  qs.AddAllocated("b", Gpus(3 * kGpu));
  std::string why;
  EXPECT_FALSE(qs.MayReclaim("b", Gpus(kGpu), "a", &why));
  EXPECT_THAT(why, HasSubstr("queue a holds no more than it deserves"));
  // A queue that deserves nothing (implicit) never reclaims.
  qs.AddAllocated("a", Gpus(kGpu));
  EXPECT_FALSE(qs.MayReclaim("other", Gpus(kGpu), "a", &why));
}

TEST(QueueSetTest, OrderPrefersTheQueueFurthestBelowItsShareThenArrival) {
  QueueSet qs;
  qs.SetCapacity(Gpus(10 * kGpu));
  qs.AddAllocated("a", Gpus(3 * kGpu));
  qs.AddPending("a", Gpus(10 * kGpu), 10);
  qs.AddAllocated("b", Gpus(1 * kGpu));
  qs.AddPending("b", Gpus(10 * kGpu), 10);
  std::vector<QueueSet::Candidate> c = {{"a", {1, 0}}, {"b", {2, 0}}};
  EXPECT_EQ(c[qs.Pick(c)].queue, "b");  // both deserve 5 (weights), b holds less
  qs.AddAllocated("b", Gpus(2 * kGpu));
  EXPECT_EQ(c[qs.Pick(c)].queue, "a");  // equal: the earlier pod
  c[0].head = {3, 0};
  EXPECT_EQ(c[qs.Pick(c)].queue, "b");
}

TEST(QueueSetTest, DominantShareIsComparedExactly) {
  // a: 1/3 of its fair GPUs exactly; b: a hair below 1/3, which doubles cannot tell apart.
  QueueSet qs;
  const int64_t big = 500'000'000'000'000'000;
  QueueSpec a = Queue("a"), b = Queue("b");
  a.limit[kQueueGpu] = 3 * big + 3;
  b.limit[kQueueGpu] = 3 * big + 1;
  qs.SetSpecs({a, b});
  qs.SetCapacity(Gpus(4 * (3 * big + 3)));
  qs.AddAllocated("a", Gpus(big + 1));
  qs.AddPending("a", Gpus(3 * big + 3), 1);
  qs.AddAllocated("b", Gpus(big));
  qs.AddPending("b", Gpus(3 * big + 1), 1);
  ASSERT_EQ(qs.FairShare("a")[kQueueGpu], 3 * big + 3);
  ASSERT_EQ(qs.FairShare("b")[kQueueGpu], 3 * big + 1);
  ASSERT_EQ(static_cast<double>(big + 1) / static_cast<double>(3 * big + 3),
            static_cast<double>(big) / static_cast<double>(3 * big + 1));
  std::vector<QueueSet::Candidate> c = {{"a", {0, 0}}, {"b", {1, 0}}};
  EXPECT_EQ(c[qs.Pick(c)].queue, "b");
}

TEST(QueueSetTest, DominantResourceDecides) {
  // a holds little compute but much memory; b the other way round. a's memory share dominates.
  QueueSet qs;
  qs.SetCapacity(QueueResources::Of(4 * kGpu, 4 * 81920, 4 * kGpu));
  qs.AddAllocated("a", QueueResources::Of(500, 40960, 100));
  qs.AddPending("a", QueueResources::Of(4000, 4 * 81920, 4000), 4);
  qs.AddAllocated("b", QueueResources::Of(300, 1024, 300));
  qs.AddPending("b", QueueResources::Of(4000, 4 * 81920, 4000), 4);
  std::vector<QueueSet::Candidate> c = {{"a", {0, 0}}, {"b", {1, 0}}};
  EXPECT_EQ(c[qs.Pick(c)].queue, "b");
  EXPECT_GT(qs.DominantShare("a"), qs.DominantShare("b"));
}

TEST(QueueSetTest, HierarchyIsDescendedTopDown) {
  QueueSet qs;
  qs.SetSpecs({Queue("research", 6 * kGpu), Queue("vision", std::nullopt, 1, "research"),
               Queue("nlp", std::nullopt, 1, "research"), Queue("prod", 2 * kGpu)});
  qs.SetCapacity(Gpus(8 * kGpu));
  qs.AddAllocated("vision", Gpus(1 * kGpu));
  qs.AddPending("vision", Gpus(8 * kGpu), 8);
  qs.AddAllocated("nlp", Gpus(4 * kGpu));
  qs.AddPending("nlp", Gpus(8 * kGpu), 8);
  qs.AddAllocated("prod", Gpus(1 * kGpu));
  qs.AddPending("prod", Gpus(8 * kGpu), 8);
  // research holds 5 of its 6, prod 1 of its 2: both at 5/6 and 1/2: prod first, though vision
  // (1 of 3) is further below its own share than prod.
  std::vector<QueueSet::Candidate> c = {{"vision", {0, 0}}, {"nlp", {0, 1}}, {"prod", {0, 2}}};
  EXPECT_EQ(c[qs.Pick(c)].queue, "prod");
  c.pop_back();
  EXPECT_EQ(c[qs.Pick(c)].queue, "vision");
  EXPECT_EQ(qs.FairShare("research")[kQueueGpu], 6 * kGpu);
  EXPECT_EQ(qs.FairShare("vision")[kQueueGpu], 3 * kGpu);
  EXPECT_EQ(qs.Allocated("research")[kQueueGpu], 5 * kGpu);
  // Pods go to leaves only; reclaim compares the siblings under the common ancestor.
  std::string why;
  EXPECT_FALSE(qs.Usable("research", &why));
  EXPECT_THAT(why, HasSubstr("has child queues (nlp, vision)"));
}

TEST(QueueSetTest, LimitsHoldForTheQueueAndItsAncestors) {
  QueueSet qs;
  QueueSpec parent = Queue("org");
  parent.limit[kQueueGpu] = 4 * kGpu;
  QueueSpec team = Queue("team", std::nullopt, 1, "org");
  team.limit[kQueueGpu] = 3 * kGpu;
  qs.SetSpecs({parent, team, Queue("other", std::nullopt, 1, "org")});
  qs.AddAllocated("team", Gpus(2 * kGpu));
  qs.AddAllocated("other", Gpus(1 * kGpu));
  EXPECT_EQ(qs.OverLimit("team", Gpus(kGpu)), "");
  EXPECT_THAT(qs.OverLimit("team", Gpus(2 * kGpu)),
              HasSubstr("queue team would hold 4 GPUs, over its limit of 3 GPUs"));
  qs.AddAllocated("other", Gpus(kGpu));
  EXPECT_THAT(qs.OverLimit("team", Gpus(kGpu)), HasSubstr("queue org would hold 5 GPUs"));
}

TEST(QueueSetTest, InvalidSpecsMakeQueuesUnusableWithTheReason) {
  QueueSet qs;
  QueueSpec bad_limit = Queue("bad", 4 * kGpu);
  bad_limit.limit[kQueueGpu] = 2 * kGpu;
  qs.SetSpecs({Queue("orphan", std::nullopt, 1, "missing"), Queue("x", std::nullopt, 1, "y"),
               Queue("y", std::nullopt, 1, "x"), bad_limit, Queue("child", std::nullopt, 1, "bad"),
               Queue("ok")});
  qs.set_implicit(false);
  std::string why;
  EXPECT_FALSE(qs.Usable("orphan", &why));
  EXPECT_THAT(why, HasSubstr("parent queue missing does not exist"));
  EXPECT_FALSE(qs.Usable("x", &why));
  EXPECT_THAT(why, HasSubstr("loop"));
  EXPECT_FALSE(qs.Usable("bad", &why));
  EXPECT_THAT(why, HasSubstr("limit.gpu (2 GPUs) is below deserved.gpu (4 GPUs)"));
  EXPECT_FALSE(qs.Usable("child", &why));
  EXPECT_THAT(why, HasSubstr("ancestor queue bad is unusable"));
  EXPECT_TRUE(qs.Usable("ok"));
  // Without implicit queues, a name without a Queue waits; `default` always exists.
  EXPECT_FALSE(qs.Usable("typo", &why));
  EXPECT_THAT(why, HasSubstr("queue typo does not exist"));
  EXPECT_TRUE(qs.Usable("default"));
  qs.set_implicit(true);
  EXPECT_TRUE(qs.Usable("typo"));
}

// A queue names the namespaces whose pods may use it: a pod of another namespace naming it is
// refused with the reason (the queue hijack: any pod could name any queue).
TEST(QueueSetTest, AQueueAdmitsOnlyItsNamespaces) {
  QueueSet qs;
  QueueSpec closed = Queue("train");
  closed.namespaces = {"team-a", "team-b"};
  qs.SetSpecs({closed, Queue("open")});
  std::string why;
  EXPECT_TRUE(qs.Admits("train", "team-a"));
  EXPECT_TRUE(qs.Admits("train", "team-b"));
  EXPECT_FALSE(qs.Admits("train", "intruder", &why));
  EXPECT_EQ(why,
            "queue train does not admit pods of namespace intruder (its spec.namespaces: "
            "team-a, team-b)");
  EXPECT_TRUE(qs.Admits("open", "intruder"));     // no list: any namespace
  EXPECT_TRUE(qs.Admits("default", "intruder"));  // default is everyone's
  EXPECT_TRUE(qs.Admits("implicit", "intruder"));
}

TEST(QueueSetTest, AccountingSurvivesSpecChanges) {
  QueueSet qs;
  qs.set_implicit(false);
  qs.AddAllocated("team", Gpus(3 * kGpu));
  EXPECT_FALSE(qs.Usable("team"));
  qs.SetSpecs({Queue("team", 2 * kGpu)});
  EXPECT_EQ(qs.Allocated("team")[kQueueGpu], 3 * kGpu);
  auto reports = qs.Snapshot();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].borrowed[kQueueGpu], 1 * kGpu);
  qs.SubAllocated("team", Gpus(3 * kGpu));
  EXPECT_EQ(qs.Allocated("team")[kQueueGpu], 0);
}

// No queue starves: two queues of equal weight, one with a backlog a hundred times the other's,
// served one GPU at a time from a cluster that frees one GPU per step: each ends with its fair
// half while both have work, and the small queue is never kept waiting more than one turn.
TEST(QueueSetTest, StatisticallyNoQueueStarvesBehindABacklog) {
  QueueSet qs;
  qs.SetSpecs({Queue("big"), Queue("small")});
  qs.SetCapacity(Gpus(100 * kGpu));
  std::map<std::string, int> backlog = {{"big", 10'000}, {"small", 100}};
  for (auto& [q, n] : backlog) qs.AddPending(q, Gpus(n * kGpu), n);
  std::map<std::string, int> served;
  std::vector<std::string> running;  // FIFO of what holds a GPU
  int64_t seq = 0;
  int small_wait = 0, worst_small_wait = 0;
  int64_t small_at_150 = 0;
  for (int step = 0; step < 250; ++step) {
    if (step == 150) small_at_150 = qs.Allocated("small")[kQueueGpu];
    if (running.size() == 100) {  // one leaves
      qs.SubAllocated(running.front(), Gpus(kGpu));
      running.erase(running.begin());
    }
    std::vector<QueueSet::Candidate> c;
    for (const auto& [q, n] : backlog) {
      if (n > 0) c.push_back({q, {seq, 0}});
    }
    const std::string q(c[qs.Pick(c)].queue);
    ++seq;
    --backlog[q];
    ++served[q];
    qs.SubPending(q, Gpus(kGpu), 1);
    qs.AddAllocated(q, Gpus(kGpu));
    running.push_back(q);
    small_wait = q == "small" ? 0 : small_wait + 1;
    if (backlog["small"] > 0) worst_small_wait = std::max(worst_small_wait, small_wait);
  }
  EXPECT_EQ(served["small"], 100);
  EXPECT_LE(worst_small_wait, 1);
  EXPECT_NEAR(small_at_150, 50 * kGpu, 2 * kGpu);
}

}  // namespace
}  // namespace tessera::core
