#include "core/preemption/planner.h"

#include "common/strings.h"
#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::Pod;
using testing::TwoNvSwitchServers;

constexpr int64_t kGi = 1024;
constexpr int64_t kGpu = 1000;

// A cluster whose running pods are laid out exactly (Restore), with their queues kept in step.
class World {
 public:
  explicit World(const Cluster& c) : engine_(c, *CreatePolicy("tessera", {})) {
    queues_.SetCapacity(CapacityOf(engine_.cluster()));
  }
  World& Queues(std::vector<QueueSpec> specs) {
    queues_.SetSpecs(std::move(specs));
    queues_.set_implicit(true);
    return *this;
  }
  // A pod on `node`: a whole GPU (memory 0) or a share of `memory` Gi of `gpu`.
  RunningPod& Run(std::string name, std::string_view node, int gpu, int64_t memory_gi = 0,
                  int32_t priority = 0, std::string queue = "default") {
    Placement p;
    p.node = engine_.cluster().FindNode(node);
    GpuGrant g;
    g.gpu = gpu;
    g.exclusive = memory_gi == 0;
    g.memory_mib = memory_gi == 0 ? 80 * kGi : memory_gi * kGi;
    g.compute_milli = memory_gi == 0 ? 1000 : 0;
    p.gpus.push_back(g);
    p.cpu_milli = 1000;
    absl::Status s = engine_.Restore(name, p);
    EXPECT_TRUE(s.ok()) << s;
    queues_.AddAllocated(queue, UsageOf(engine_.cluster(), p));
    running_.push_back(RunningPod{std::move(name), std::move(queue), priority, "", "", false});
    return running_.back();
  }
  PreemptionPlan Plan(std::vector<PodRequest> members, int32_t priority,
                      std::string queue = "default",
                      absl::flat_hash_map<std::string, int64_t> budgets = {},
                      std::vector<std::string> gang_running = {}) {
    PreemptionRequest r;
    r.gang_running = gang_running;
    for (PodRequest& m : members) m.priority = priority;
    r.members = members;
    r.queue = std::move(queue);
    r.priority = priority;
    for (const PodRequest& m : members) r.demand += DemandOf(m, 80 * kGi);
    r.budgets = std::move(budgets);
    const size_t placed = engine_.placed_count();
    const int in_use = engine_.state().gpus_in_use();
    PreemptionPlan plan = PreemptionPlanner(engine_, queues_).Plan(r, running_);
    // Planning changes nothing.
    EXPECT_EQ(engine_.placed_count(), placed);
    EXPECT_EQ(engine_.state().gpus_in_use(), in_use);
    engine_.state().CheckInvariants();
    if (plan.found) {
      EXPECT_TRUE(plan.reason.empty());
      // Every member, or an elastic gang's first ones (the tests say how many).
      EXPECT_FALSE(plan.placements.empty());
      EXPECT_LE(plan.placements.size(), members.size());
      for (const PlacementResult& p : plan.placements) EXPECT_TRUE(p.placed()) << p.reason;
    } else {
      EXPECT_THAT(plan.victims, IsEmpty());
      EXPECT_FALSE(plan.reason.empty());
    }
    return plan;
  }
  std::string NodeName(NodeId id) const { return engine_.cluster().node(id).name; }
  std::vector<RunningPod>& running() { return running_; }

 private:
  Engine engine_;
  QueueSet queues_;
  std::vector<RunningPod> running_;
};

PodRequest Whole(std::string name, int n = 1) { return Pod(std::move(name), GpuAsk::Whole(n)); }

TEST(PreemptionPlanner, FourSharesGoForOneWholeGpuAndNoMore) {
  World w(ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Build());
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < 4; ++i) w.Run(StrCat("s", g, i), "a", g, 20);
  }
  PreemptionPlan plan = w.Plan({Whole("urgent")}, 100);
  ASSERT_TRUE(plan.found) << plan.reason;
  // Either GPU's four shares, not eight.
  ASSERT_EQ(plan.victims.size(), 4u);
  const char gpu = plan.victims[0][1];
  for (const std::string& v : plan.victims) EXPECT_EQ(v[1], gpu) << v;
  EXPECT_EQ(plan.placements[0].placement.gpus[0].gpu, gpu - '0');
  EXPECT_EQ(w.NodeName(plan.nodes[0]), "a");
}

TEST(PreemptionPlanner, ChoosesTheNodeWithTheFewestVictims) {
  // The class comment's example.
  World w(ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Node("b").Gpus(2, "A100-80GB").Build());
  for (int i = 0; i < 4; ++i) w.Run(StrCat("share", i), "a", 0, 20);
  w.Run("important", "a", 1, 0, 10);
  w.Run("big", "b", 0);
  w.Run("small", "b", 1, 10);
  PreemptionPlan plan = w.Plan({Whole("p")}, 5);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("big"));
  EXPECT_EQ(w.NodeName(plan.nodes[0]), "b");
}

TEST(PreemptionPlanner, NobodyIsEvictedWhenItWouldNotHelp) {
  World w(ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Build());
  w.Run("low", "a", 0, 20);
  w.Run("high", "a", 1, 0, 50);
  // Two GPUs: the higher-priority pod holds one of them.
  PreemptionPlan two = w.Plan({Whole("p", 2)}, 10);
  EXPECT_FALSE(two.found);
  EXPECT_THAT(two.reason, HasSubstr("evicting would not help"));
  // Equal priority in the same queue is no victim.
  PreemptionPlan equal = w.Plan({Whole("p")}, 0);
  EXPECT_FALSE(equal.found);
  // Never fits this cluster at all.
  PreemptionPlan never = w.Plan({Whole("p", 3)}, 1000);
  EXPECT_FALSE(never.found);
  EXPECT_THAT(never.reason, HasSubstr("needs 3 GPUs on one node"));
}

TEST(PreemptionPlanner, AGangIsEvictedWholeOrNotAtAll) {
  World w(ClusterBuilder().Node("a").Gpus(1, "A100-80GB").Node("b").Gpus(1, "A100-80GB").Build());
  w.Run("g-0", "a", 0).gang = "g";
  w.Run("g-1", "b", 0).gang = "g";
  PreemptionPlan plan = w.Plan({Whole("p")}, 5);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("g-0", "g-1"));
  // One member the preemptor may not evict protects the whole gang.
  w.running()[1].priority = 10;
  EXPECT_FALSE(w.Plan({Whole("p")}, 5).found);
}

TEST(PreemptionPlanner, AGangPreemptorEvictsWhereItLands) {
  World w(ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Node("b").Gpus(2, "A100-80GB").Build());
  w.Run("a0", "a", 0);
  w.Run("a1", "a", 1);
  w.Run("b0", "b", 0, 0, 50);
  w.Run("b1", "b", 1, 0, 50);
  std::vector<PodRequest> gang;
  for (int i = 0; i < 2; ++i) {
    gang.push_back(Whole(StrCat("t-", i)));
    gang.back().gang = GangAsk{"t", 2, "", false};
  }
  PreemptionPlan plan = w.Plan(gang, 10);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("a0", "a1"));
  ASSERT_EQ(plan.nodes.size(), 1u);
  EXPECT_EQ(w.NodeName(plan.nodes[0]), "a");
  // A gang of three does not fit even with both gone: nobody is evicted.
  gang.push_back(Whole("t-2"));
  for (PodRequest& m : gang) m.gang = GangAsk{"t", 3, "", false};
  PreemptionPlan three = w.Plan(gang, 10);
  EXPECT_FALSE(three.found);
  EXPECT_THAT(three.reason, HasSubstr("evicting would not help"));
}

// A gang that needs one free node and one emptied: the free node is part of the plan, and only
// the other node's pods are evicted. Pods the preemptor may not evict there: no plan.
TEST(PreemptionPlanner, AGangUsesAFreeNodeBesideAnEmptiedOne) {
  World w(
      ClusterBuilder().Node("busy").Gpus(8, "A100-80GB").Node("free").Gpus(8, "A100-80GB").Build());
  for (int g = 0; g < 8; ++g) w.Run(StrCat("b", g), "busy", g);
  std::vector<PodRequest> gang;
  for (int i = 0; i < 2; ++i) {
    gang.push_back(Whole(StrCat("t-", i), 8));
    gang.back().gang = GangAsk{"t", 2, "", false};
  }
  PreemptionPlan plan = w.Plan(gang, 10);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"));
  ASSERT_EQ(plan.nodes.size(), 2u);
  EXPECT_THAT((std::vector<std::string>{w.NodeName(plan.nodes[0]), w.NodeName(plan.nodes[1])}),
              ::testing::UnorderedElementsAre("busy", "free"));
  for (RunningPod& r : w.running()) r.priority = 20;
  EXPECT_FALSE(w.Plan(gang, 10).found);
}

// An elastic gang of min 4 running 6: its two newest members may go one by one; its core of 4
// goes only with the whole gang.
TEST(PreemptionPlanner, AnElasticGangShrinksToItsMinNeverBelow) {
  auto world = [](int members) {
    auto w = std::make_unique<World>(
        ClusterBuilder().Node("a").Gpus(4, "A100-80GB").Node("b").Gpus(4, "A100-80GB").Build());
    for (int i = 0; i < members; ++i) {
      RunningPod& m = w->Run(StrCat("g-", i), i < 4 ? "a" : "b", i % 4);
      m.gang = "g";
      m.gang_min = 4;
      m.created = StrCat("2026-01-01T00:00:0", i, "Z");
    }
    w->Run("x2", "b", 2, 0, 50);
    w->Run("x3", "b", 3, 0, 50);
    return w;
  };
  std::unique_ptr<World> w = world(6);
  // One GPU: one member above the min, not the whole gang.
  PreemptionPlan one = w->Plan({Whole("p")}, 5);
  ASSERT_TRUE(one.found) << one.reason;
  EXPECT_THAT(one.victims, ElementsAre("g-5"));
  // Two GPUs on one node: both members above the min (6 -> 4).
  PreemptionPlan two = w->Plan({Whole("p", 2)}, 5);
  ASSERT_TRUE(two.found) << two.reason;
  EXPECT_THAT(two.victims, ElementsAre("g-4", "g-5"));
  // Three GPUs: only node a can free them, where the gang's core of 4 runs: the whole gang goes
  // (as any gang does), never 3 of its core alone.
  PreemptionPlan three = w->Plan({Whole("p", 3)}, 5);
  ASSERT_TRUE(three.found) << three.reason;
  EXPECT_THAT(three.victims, ElementsAre("g-0", "g-1", "g-2", "g-3", "g-4", "g-5"));
  // Which members are above the min: the newest, whatever their names or nodes.
  std::unique_ptr<World> order = world(6);
  order->running()[0].created = "2026-01-01T00:00:09Z";  // g-0 (on a) is the newest now
  PreemptionPlan newest = order->Plan({Whole("p")}, 5);
  ASSERT_TRUE(newest.found) << newest.reason;
  // g-0 and g-5 are above the min; of the two equal choices, the lower node (a).
  EXPECT_THAT(newest.victims, ElementsAre("g-0"));
  // At its min, a gang has nothing to give one by one.
  std::unique_ptr<World> at_min = world(4);
  PreemptionPlan whole = at_min->Plan({Whole("p")}, 5);
  ASSERT_TRUE(whole.found) << whole.reason;
  EXPECT_THAT(whole.victims, ElementsAre("g-0", "g-1", "g-2", "g-3"));
  // A member above the min that the preemptor may not evict stays; the other still may go.
  std::unique_ptr<World> guarded = world(6);
  guarded->running()[5].priority = 10;
  PreemptionPlan spared = guarded->Plan({Whole("p")}, 5);
  ASSERT_TRUE(spared.found) << spared.reason;
  EXPECT_THAT(spared.victims, ElementsAre("g-4"));
}

// Two 8-GPU NVSwitch servers (one NVLink domain each), every GPU held by a pod of priority 0 (on
// b, one of them priority 1), and an elastic gang of size 8, min 4 in one NVLink domain.
std::unique_ptr<World> FullServers() {
  auto w = std::make_unique<World>(TwoNvSwitchServers());
  for (int g = 0; g < 8; ++g) w->Run(StrCat("a", g), "a", g);
  for (int g = 0; g < 8; ++g) w->Run(StrCat("b", g), "b", g, 0, g == 0 ? 1 : 0);
  return w;
}

std::vector<PodRequest> ElasticMembers(int from, int to, int min = 4) {
  std::vector<PodRequest> out;
  for (int i = from; i < to; ++i) {
    out.push_back(Whole(StrCat("t-", i)));
    out.back().gang = GangAsk{"t", 8, "nvlink-domain", true, min};
  }
  return out;
}

// A pending elastic gang makes room for its min, not its size: 4 victims in one domain.
TEST(PreemptionPlanner, APendingElasticGangPreemptsForItsMinOnly) {
  std::unique_ptr<World> w = FullServers();
  PreemptionPlan plan = w->Plan(ElasticMembers(0, 8), 10);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_EQ(plan.placements.size(), 4u);  // t-0 .. t-3, the oldest
  EXPECT_EQ(plan.victims.size(), 4u);
  ASSERT_EQ(plan.nodes.size(), 1u);  // one NVLink domain, as the gang asks
  // Node a: there every victim has priority 0 (b has one of priority 1 among its 8).
  EXPECT_EQ(w->NodeName(plan.nodes[0]), "a");
  for (const std::string& v : plan.victims) EXPECT_EQ(v[0], 'a') << v;
  // The same gang all or nothing (min = size) needs all 8 GPUs of a server.
  PreemptionPlan whole = w->Plan(ElasticMembers(0, 8, 8), 10);
  ASSERT_TRUE(whole.found) << whole.reason;
  EXPECT_EQ(whole.placements.size(), 8u);
  EXPECT_EQ(whole.victims.size(), 8u);
  // With 2 members present of a min of 4 the gang cannot start: nobody is evicted.
  EXPECT_FALSE(w->Plan(ElasticMembers(0, 2), 10).found);
}

// A running elastic gang at its min grows only into free room; below its min (a member lost), it
// makes room for the members it lacks, in its domain, and never evicts its own members.
TEST(PreemptionPlanner, ARunningElasticGangPreemptsOnlyBackToItsMin) {
  auto world = [](int running) {
    auto w = std::make_unique<World>(TwoNvSwitchServers());
    for (int g = 0; g < 8; ++g) {
      if (g < running) {
        RunningPod& m = w->Run(StrCat("t-", g), "b", g);  // the gang, on b
        m.gang = "t";
        m.gang_min = 4;
        m.created = StrCat("2026-01-01T00:00:0", g, "Z");
      } else {
        w->Run(StrCat("b", g), "b", g, 0, 1);
      }
      w->Run(StrCat("a", g), "a", g);  // priority 0: cheaper victims, in another domain
    }
    return w;
  };
  auto names = [](int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(StrCat("t-", i));
    return out;
  };
  std::unique_ptr<World> at_min = world(4);
  PreemptionPlan grow = at_min->Plan(ElasticMembers(4, 8), 10, "default", {}, names(4));
  EXPECT_FALSE(grow.found);
  EXPECT_THAT(grow.reason, HasSubstr("evicts nobody to grow"));
  // Three of 4 run (one was lost): room for one more, next to them on b (a's pods are cheaper
  // but in another NVLink domain).
  std::unique_ptr<World> below = world(3);
  PreemptionPlan back = below->Plan(ElasticMembers(3, 8), 10, "default", {}, names(3));
  ASSERT_TRUE(back.found) << back.reason;
  EXPECT_EQ(back.placements.size(), 1u);
  ASSERT_EQ(back.victims.size(), 1u);
  EXPECT_EQ(back.victims[0][0], 'b');
  EXPECT_EQ(below->NodeName(back.nodes[0]), "b");
  // With nobody on b it may evict, a's pods do not help: the gang stays in its domain.
  std::unique_ptr<World> kept = world(3);
  for (int g = 3; g < 8; ++g) kept->running()[2 * g].priority = 20;  // b's other pods
  PreemptionPlan none = kept->Plan(ElasticMembers(3, 8), 10, "default", {}, names(3));
  EXPECT_FALSE(none.found);
  EXPECT_THAT(none.reason, HasSubstr("evicting would not help"));
}

QueueSpec Deserving(std::string name, int64_t gpus) {
  QueueSpec s;
  s.name = std::move(name);
  s.deserved[kQueueGpu] = gpus * kGpu;
  return s;
}

TEST(PreemptionPlanner, ReclaimTakesBackFromAQueueAboveItsShareNeverBelow) {
  // queue_set.h's example: train deserves 6 and holds 7, infer deserves 2 and holds 1.
  World w(ClusterBuilder().Node("a").Gpus(4, "A100-80GB").Node("b").Gpus(4, "A100-80GB").Build());
  w.Queues({Deserving("train", 6), Deserving("infer", 2)});
  for (int i = 0; i < 7; ++i) w.Run(StrCat("t", i), i < 4 ? "a" : "b", i % 4, 0, 100, "train");
  w.Run("i0", "b", 3, 0, 0, "infer");
  // Priority does not protect train's pods from reclaim: one of them goes, not two.
  PreemptionPlan plan = w.Plan({Whole("i1")}, 0, "infer");
  ASSERT_TRUE(plan.found) << plan.reason;
  ASSERT_EQ(plan.victims.size(), 1u);
  EXPECT_EQ(plan.victims[0][0], 't');
  // Two more GPUs would take infer beyond what it deserves: no reclaim.
  PreemptionPlan two = w.Plan({Whole("i2", 2)}, 0, "infer");
  EXPECT_FALSE(two.found);
  EXPECT_THAT(two.reason, HasSubstr("more than it deserves"));
  // A queue deserving nothing reclaims nothing.
  EXPECT_FALSE(w.Plan({Whole("x")}, 0, "other").found);
}

TEST(PreemptionPlanner, ReclaimSparesAQueueAtItsShare) {
  World w(ClusterBuilder().Node("a").Gpus(4, "A100-80GB").Node("b").Gpus(4, "A100-80GB").Build());
  w.Queues({Deserving("train", 6), Deserving("infer", 2)});
  for (int i = 0; i < 6; ++i) w.Run(StrCat("t", i), i < 4 ? "a" : "b", i % 4, 0, 0, "train");
  w.Run("batch", "b", 2, 0, 100, "batch");  // an implicit queue: deserves nothing
  w.Run("i0", "b", 3, 0, 0, "infer");
  PreemptionPlan plan = w.Plan({Whole("i1")}, 0, "infer");
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("batch"));
  // With the batch pod gone, train at its share gives nothing back.
  w.running()[6].terminating = true;
  PreemptionPlan awaiting = w.Plan({Whole("i1")}, 0, "infer");
  ASSERT_TRUE(awaiting.found) << awaiting.reason;
  EXPECT_THAT(awaiting.victims, IsEmpty());
  EXPECT_THAT(awaiting.awaited, ElementsAre("batch"));
}

TEST(PreemptionPlanner, ABudgetIsHonoured) {
  World w(ClusterBuilder().Node("a").Gpus(1, "A100-80GB").Node("b").Gpus(1, "A100-80GB").Build());
  w.Run("covered", "a", 0).budget = "pdb";
  for (int i = 0; i < 2; ++i) w.Run(StrCat("free", i), "b", 0, 20);
  // The one-victim node is covered by a budget that allows nothing now: the two shares go.
  PreemptionPlan plan = w.Plan({Whole("p")}, 5);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("free0", "free1"));
  // The budget allows one: the single victim.
  PreemptionPlan allowed = w.Plan({Whole("p")}, 5, "default", {{"pdb", 1}});
  EXPECT_THAT(allowed.victims, ElementsAre("covered"));
  // The shares may not go either: nothing is allowed.
  w.running()[1].priority = 10;
  PreemptionPlan none = w.Plan({Whole("p")}, 5);
  EXPECT_FALSE(none.found);
  EXPECT_THAT(none.reason, HasSubstr("disruption budget pdb, which allows no eviction now"));
}

// The fewest victims (node a: two shares) are two pods of one budget: while it allows two, they
// go; while it allows one, the plan counts both against it and goes around them (node b's three
// shares) instead of planning evictions the Eviction API would refuse part-way.
TEST(PreemptionPlanner, ABudgetCountsEveryVictimOfThePlan) {
  World w(ClusterBuilder().Node("a").Gpus(1, "A100-80GB").Node("b").Gpus(1, "A100-80GB").Build());
  w.Run("c0", "a", 0, 40).budget = "pdb";
  w.Run("c1", "a", 0, 40).budget = "pdb";
  for (int i = 0; i < 3; ++i) w.Run(StrCat("f", i), "b", 0, 26);
  PreemptionPlan two = w.Plan({Whole("p")}, 5, "default", {{"pdb", 2}});
  ASSERT_TRUE(two.found) << two.reason;
  EXPECT_THAT(two.victims, ElementsAre("c0", "c1"));
  PreemptionPlan one = w.Plan({Whole("p")}, 5, "default", {{"pdb", 1}});
  ASSERT_TRUE(one.found) << one.reason;
  EXPECT_THAT(one.victims, ElementsAre("f0", "f1", "f2"));
  // Node b's shares may not go either: no plan.
  w.running()[2].priority = 10;
  PreemptionPlan none = w.Plan({Whole("p")}, 5, "default", {{"pdb", 1}});
  EXPECT_FALSE(none.found);
  EXPECT_THAT(none.reason, HasSubstr("disruption budgets there allow too few evictions"));
}

// Within one node, a budget that allows one of the two pods the fewest victims would take: the
// other victims on that node are found instead.
TEST(PreemptionPlanner, ABudgetTurnsThePlanToOtherVictimsOnTheNode) {
  World w(ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Build());
  w.Run("c0", "a", 0, 40).budget = "pdb";
  w.Run("c1", "a", 0, 40).budget = "pdb";
  w.Run("f0", "a", 1, 40, 3).budget = "other";
  w.Run("f1", "a", 1, 40, 3).budget = "other";
  PreemptionPlan plan = w.Plan({Whole("p")}, 5, "default", {{"pdb", 1}, {"other", 2}});
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("f0", "f1"));
  PreemptionPlan back = w.Plan({Whole("p")}, 5, "default", {{"pdb", 2}, {"other", 1}});
  ASSERT_TRUE(back.found) << back.reason;
  EXPECT_THAT(back.victims, ElementsAre("c0", "c1"));
}

// A gang counts its victims against a budget across nodes: two whole-GPU members, and the only
// victims it may take are two pods of one budget.
TEST(PreemptionPlanner, AGangPlanStaysWithinABudget) {
  World w(ClusterBuilder()
              .Node("a")
              .Gpus(1, "A100-80GB")
              .Node("b")
              .Gpus(1, "A100-80GB")
              .Node("c")
              .Gpus(1, "A100-80GB")
              .Build());
  w.Run("c0", "a", 0).budget = "pdb";
  w.Run("c1", "b", 0).budget = "pdb";
  w.Run("f", "c", 0, 0, 10);
  std::vector<PodRequest> gang = {Whole("g-0"), Whole("g-1")};
  for (PodRequest& m : gang) m.gang = GangAsk{"g", 2};
  PreemptionPlan two = w.Plan(gang, 5, "default", {{"pdb", 2}});
  ASSERT_TRUE(two.found) << two.reason;
  EXPECT_THAT(two.victims, ElementsAre("c0", "c1"));
  PreemptionPlan one = w.Plan(gang, 5, "default", {{"pdb", 1}});
  EXPECT_FALSE(one.found);
  EXPECT_THAT(one.reason, HasSubstr("allow too few evictions now"));
  PreemptionPlan none = w.Plan(gang, 5, "default", {{"pdb", 0}});
  EXPECT_FALSE(none.found);
  EXPECT_THAT(none.reason, HasSubstr("disruption budget pdb, which allows no eviction now"));
}

TEST(PreemptionPlanner, TerminatingPodsAreAwaitedNotEvictedAgain) {
  World w(ClusterBuilder().Node("a").Gpus(1, "A100-80GB").Build());
  for (int i = 0; i < 4; ++i) w.Run(StrCat("s", i), "a", 0, 20);
  for (int i = 0; i < 4; ++i) w.running()[i].terminating = i < 3;
  // Three are already going: only the fourth is evicted now.
  PreemptionPlan plan = w.Plan({Whole("p")}, 5);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.victims, ElementsAre("s3"));
  EXPECT_THAT(plan.awaited, ElementsAre("s0", "s1", "s2"));
}

// Several preemptors planned one after another (issue 35): a pod leaving whose room an earlier
// plan's pod is nominated to is claimed; the next plan neither counts on its room nor evicts it,
// and evicts a victim of its own at once.
TEST(PreemptionPlanner, ClaimedPodsAreNeitherRoomNorCandidates) {
  World w(ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Build());
  w.Run("low0", "a", 0);
  w.Run("low1", "a", 1);
  w.running()[0].terminating = true;  // the first plan's victim
  PreemptionPlan alone = w.Plan({Whole("p")}, 5);
  ASSERT_TRUE(alone.found) << alone.reason;
  EXPECT_THAT(alone.victims, IsEmpty());
  EXPECT_THAT(alone.awaited, ElementsAre("low0"));
  w.running()[0].claimed = true;  // its room is the first preemptor's
  PreemptionPlan second = w.Plan({Whole("p")}, 5);
  ASSERT_TRUE(second.found) << second.reason;
  EXPECT_THAT(second.victims, ElementsAre("low1"));
  EXPECT_THAT(second.awaited, IsEmpty());
}

// The pods a queue is losing already (earlier plans' victims, terminating or claimed) count
// against its deserved share: plans made one after another never take it below its share
// together.
TEST(PreemptionPlanner, PodsLeavingCountAgainstTheirQueuesShare) {
  World w(ClusterBuilder().Node("a").Gpus(4, "A100-80GB").Build());
  w.Queues({Deserving("train", 2), Deserving("infer", 2)});
  for (int i = 0; i < 4; ++i) w.Run(StrCat("t", i), "a", i, 0, 0, "train");
  w.running()[0].terminating = true;
  w.running()[0].claimed = true;
  // train holds 4, loses t0 already: one more may go (down to its 2).
  PreemptionPlan one = w.Plan({Whole("i1")}, 0, "infer");
  ASSERT_TRUE(one.found) << one.reason;
  EXPECT_EQ(one.victims.size(), 1u);
  // With t1 leaving too, another would take train to 1: no plan.
  w.running()[1].terminating = true;
  w.running()[1].claimed = true;
  PreemptionPlan none = w.Plan({Whole("i2")}, 0, "infer");
  EXPECT_FALSE(none.found) << StrJoin(none.victims, ",");
}

}  // namespace
}  // namespace tessera::core
