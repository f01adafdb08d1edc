// SchedulerCore driven step by step: node and pod events in, binds and reports out (a recording
// fake of the Binder and Reporter interfaces, which we own), with an injected clock. The same
// behaviour against the real API server is in test/k8s/scheduler_e2e_test.cc.
#include "k8s/scheduler/scheduler_core.h"

#include "common/strings.h"
#include "core/model/profiles.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/testing/recorder.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::NodeObject;
using testing::PodObject;
using Stage = SchedulerCore::Stage;

using BindCall = testing::Recorder::BindCall;
using ReportCall = testing::Recorder::ReportCall;

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Make({}); }

  void Make(SchedulerCoreOptions o) {
    o.retry_min_interval = std::chrono::milliseconds(1000);
    o.retry_period = std::chrono::milliseconds(30'000);
    auto c = SchedulerCore::Create(o, &actions_, &actions_, &metrics_, [this] { return now_; });
    ASSERT_TRUE(c.ok()) << c.status();
    core_ = std::move(*c);
  }

  void Node(const json& node) { core_->OnNode(Change::kAdded, DecodeNode(node)); }
  void Pod(const json& pod, Change change = Change::kAdded) {
    core_->OnPod(change, DecodePod(pod));
  }
  void Group(const json& group, Change change = Change::kAdded) {
    core_->OnPodGroup(change, DecodePodGroup(group));
  }
  void Sync() { core_->SetSynced(true, true); }
  void Advance(int ms) { now_ += std::chrono::milliseconds(ms); }

  // Acknowledges every bind so far as the API server would (bind OK, then the watch shows it).
  void AckBinds(size_t from = 0) {
    for (size_t i = from; i < actions_.binds.size(); ++i) {
      const BindCall& b = actions_.binds[i];
      core_->OnBindResult(b.key, b.attempt, absl::OkStatus());
    }
  }
  // What the watch shows after our bind: the pod bound with its assignment.
  json Bound(json pod, const BindCall& b) {
    pod["spec"]["nodeName"] = b.node;
    pod["metadata"]["annotations"]["tessera.dev/assignment"] =
        records::AssignmentToJson(b.assignment);
    return pod;
  }

  testing::Recorder actions_;
  SchedulerMetrics metrics_;
  std::chrono::steady_clock::time_point now_ =
      std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  std::unique_ptr<SchedulerCore> core_;
};

TEST_F(CoreTest, NothingIsDecidedBeforeBothCachesSynced) {
  Node(NodeObject("n1").Gpus(1).Json());
  Pod(PodObject("ns", "p").Limit("tessera.dev/gpu", "1").Json());
  core_->SetSynced(true, false);
  EXPECT_EQ(core_->ScheduleSome(), 0);
  EXPECT_TRUE(actions_.binds.empty());
  core_->SetSynced(false, true);
  EXPECT_EQ(core_->ScheduleSome(), 1);
  ASSERT_EQ(actions_.binds.size(), 1u);
}

TEST_F(CoreTest, PlacesBindsWithTheAssignmentAndConfirms) {
  Node(NodeObject("n1").Gpus(2).Json());
  json pod = PodObject("ns", "p").Limit("tessera.dev/gpu-memory", "4Gi").Json();
  Pod(pod);
  Pod(PodObject("other", "x").Scheduler("default-scheduler").Limit("tessera.dev/gpu", "1").Json());
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);  // not the default-scheduler's pod
  const BindCall& b = actions_.binds[0];
  EXPECT_EQ(b.key, "ns/p");
  EXPECT_EQ(b.node, "n1");
  EXPECT_EQ(b.assignment.node, "n1");
  ASSERT_EQ(b.assignment.gpus.size(), 1u);
  EXPECT_EQ(b.assignment.gpus[0].grant.memory_mib, 4096);
  EXPECT_FALSE(b.assignment.gpus[0].grant.exclusive);
  EXPECT_EQ(b.assignment.gpus[0].uuid, StrCat("GPU-n1-", b.assignment.gpus[0].grant.gpu));
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kBinding);
  EXPECT_EQ(metrics_.binding_in_flight.load(), 1);
  // The watch may show the binding before its answer comes.
  Pod(Bound(pod, b), Change::kUpdated);
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kBound);
  AckBinds();
  EXPECT_EQ(metrics_.pods_scheduled.load(), 1);
  EXPECT_EQ(metrics_.binding_in_flight.load(), 0);
  EXPECT_EQ(metrics_.scheduling_duration.count(), 1);
  // One decision, timed on the wall clock and on the scheduler thread's CPU clock.
  EXPECT_EQ(metrics_.decision_duration.count(), 1);
  EXPECT_EQ(metrics_.decision_cpu.count(), 1);
  EXPECT_EQ(core_->engine().state().allocated_gpu_memory_mib(), 4096);
}

TEST_F(CoreTest, UnschedulableIsReportedOnceAndRetriedOnlyAfterAChange) {
  Node(NodeObject("n1").Gpus(1).Json());
  Pod(PodObject("ns", "big").Limit("tessera.dev/gpu", "2").Json());
  Pod(PodObject("ns", "wide").Limit("tessera.dev/gpu-memory", "100Gi").Json());
  Sync();
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  ASSERT_EQ(actions_.reports.size(), 2u);
  EXPECT_EQ(actions_.reports[0].reason, "Unschedulable");
  EXPECT_FALSE(actions_.reports[0].repeat);
  EXPECT_EQ(core_->StageOf("ns/big"), Stage::kUnschedulable);
  EXPECT_EQ(metrics_.failed_unschedulable.load(), 2);
  // No change: however often the loop runs, nothing is tried again.
  for (int i = 0; i < 10; ++i) {
    Advance(100);
    EXPECT_EQ(core_->ScheduleSome(), 0);
  }
  // A node arrives: retried, at most once per minimum interval.
  Node(NodeObject("n2").Gpus(2).Json());
  EXPECT_EQ(core_->ScheduleSome(), 2);  // 1 s since the last flush passed
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/big");
  EXPECT_EQ(actions_.binds[0].node, "n2");
  // The 100Gi share still fits nowhere: same message, not reported again.
  EXPECT_EQ(actions_.reports.size(), 2u);
  ASSERT_TRUE(core_->NextWakeup().has_value());
  // Periodic retry after retry_period, even without a change.
  Advance(29'000);
  EXPECT_EQ(core_->ScheduleSome(), 0);
  Advance(1'100);
  EXPECT_EQ(core_->ScheduleSome(), 1);
}

TEST_F(CoreTest, RestartRestoresBoundPodsBeforeDecidingSoNoGpuIsGrantedTwice) {
  Node(NodeObject("n1").Gpus(2).Json());
  // Bound earlier (by a previous life of this scheduler), GPU 1 exclusively.
  json held =
      PodObject("ns", "old").Limit("tessera.dev/gpu", "1").Node("n1").Phase("Running").Json();
  held["metadata"]["annotations"]["tessera.dev/assignment"] =
      R"({"version":1,"node":"n1","gpus":[{"index":1,"memory_mib":81920,"compute_milli":1000,"exclusive":true}]})";
  Pod(held);
  Pod(PodObject("ns", "new").Limit("tessera.dev/gpu", "1").Json());
  Pod(PodObject("ns", "new2").Limit("tessera.dev/gpu", "1").Json());
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].assignment.gpus[0].grant.gpu, 0);
  EXPECT_EQ(core_->StageOf("ns/new2"), Stage::kUnschedulable);
}

// A gang bound part-way when the scheduler stopped: after the restart, the 5 members bound on
// dgx-b count as running, and the 3 pending join them there (the gang's NVLink domain), not on
// the empty dgx-a; without them the gang would wait for 8 pending members forever.
TEST_F(CoreTest, RestartKeepsAGangsBoundMembersAndPlacesTheRestBesideThem) {
  Node(NodeObject("dgx-a").Gpus(8).NvSwitch().Json());
  Node(NodeObject("dgx-b").Gpus(8).NvSwitch().Json());
  auto member = [](int i) {
    return PodObject("ns", StrCat("w-", i))
        .Limit("tessera.dev/gpu", "1")
        .Gang("train", 8, "nvlink-domain");
  };
  for (int i = 0; i < 5; ++i) {
    json bound = member(i).Node("dgx-b").Phase("Running").Json();
    bound["metadata"]["annotations"]["tessera.dev/assignment"] =
        StrCat(R"({"version":1,"node":"dgx-b","gpus":[{"index":)", i,
               R"(,"memory_mib":81920,"compute_milli":1000,"exclusive":true}]})");
    Pod(bound);
  }
  for (int i = 5; i < 8; ++i) Pod(member(i).Json());
  Sync();
  EXPECT_EQ(core_->ScheduleSome(), 3);
  ASSERT_EQ(actions_.binds.size(), 3u);
  std::set<int> gpus;
  for (const BindCall& b : actions_.binds) {
    EXPECT_EQ(b.node, "dgx-b") << b.key;
    gpus.insert(b.assignment.gpus[0].grant.gpu);
  }
  EXPECT_EQ(gpus, (std::set<int>{5, 6, 7}));
  // A pod bound by another scheduler with the same gang annotations is not a member.
  json other = member(8).Node("dgx-a").Phase("Running").Json();
  other["spec"]["schedulerName"] = "someone-else";
  Pod(other);
  EXPECT_EQ(core_->ScheduleSome(), 0);
}

// A GPU the agent marked unhealthy takes no new pods; a pod already on it keeps it, and what it
// leaves there is not given to others; once healthy again, the GPU is used.
TEST_F(CoreTest, UnhealthyGpusTakeNoNewPods) {
  auto node = [](bool gpu1_healthy) {
    absl::StatusOr<records::Inventory> inv =
        records::InventoryFromJson(NodeObject("n1").Gpus(2).InventoryJson());
    EXPECT_TRUE(inv.ok());
    if (!gpu1_healthy) {
      inv->health.resize(2);
      inv->health[1].healthy = false;
      inv->health[1].xids = {79};
      inv->health[1].reason = "XID 79: GPU has fallen off the bus";
    }
    return NodeObject("n1").Gpus(2).RawInventory(records::InventoryToJson(*inv)).Json();
  };
  Node(node(false));
  // Bound before the GPU failed: 4Gi of GPU 1.
  json old = PodObject("ns", "old")
                 .Limit("tessera.dev/gpu-memory", "4Gi")
                 .Node("n1")
                 .Phase("Running")
                 .Json();
  old["metadata"]["annotations"]["tessera.dev/assignment"] =
      R"({"version":1,"node":"n1","gpus":[{"index":1,"memory_mib":4096,"compute_milli":0}]})";
  Pod(old);
  Pod(PodObject("ns", "whole").Limit("tessera.dev/gpu", "1").Json());
  Pod(PodObject("ns", "share").Limit("tessera.dev/gpu-memory", "4Gi").Json());
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/whole");
  EXPECT_EQ(actions_.binds[0].assignment.gpus[0].grant.gpu, 0);
  EXPECT_EQ(core_->StageOf("ns/share"), Stage::kUnschedulable);
  EXPECT_NE(core_->engine().Find("ns/old"), nullptr) << "the pod on the unhealthy GPU keeps it";

  // The pod on it leaves: its room stays out of use.
  Pod(old, Change::kDeleted);
  Advance(2000);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(core_->StageOf("ns/share"), Stage::kUnschedulable);

  // Healthy again.
  core_->OnNode(Change::kUpdated, DecodeNode(node(true)));
  Advance(2000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 2u);
  EXPECT_EQ(actions_.binds[1].key, "ns/share");
  EXPECT_EQ(actions_.binds[1].assignment.gpus[0].grant.gpu, 1);
}

// A record this scheduler cannot read (a newer version, another node, garbage) never frees what
// the pod may hold: the node takes no GPU pods while the pod is there (an Event on the pod, the
// metrics), CPU-only pods still go there, and the node is used again once the pod is gone.
TEST_F(CoreTest, UnreadableAssignmentBlocksItsNodesGpusUntilThePodIsGone) {
  Node(NodeObject("n1").Gpus(2).Json());
  Node(NodeObject("n2").Gpus(1).Json());
  json bad =
      PodObject("ns", "bad").Limit("tessera.dev/gpu", "1").Node("n1").Phase("Running").Json();
  bad["metadata"]["annotations"]["tessera.dev/assignment"] =
      R"({"version":2,"node":"n1","gpus":[{"slot":1}]})";
  Pod(bad);
  json elsewhere =
      PodObject("ns", "elsewhere").Limit("tessera.dev/gpu", "1").Node("n2").Phase("Running").Json();
  elsewhere["metadata"]["annotations"]["tessera.dev/assignment"] =
      R"({"version":1,"node":"n1","gpus":[{"index":0,"memory_mib":81920,"compute_milli":1000,"exclusive":true}]})";
  Pod(elsewhere);  // names n1 but is bound to n2: n2's GPUs are unknown
  Pod(PodObject("ns", "gpu").Limit("tessera.dev/gpu", "1").Json());
  Pod(PodObject("ns", "cpu").Request("cpu", "1").Json());
  Sync();
  core_->ScheduleSome();
  // The CPU-only pod is placed; the GPU pod is not, although n1 has two GPUs the ledger sees free.
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/cpu");
  EXPECT_EQ(core_->StageOf("ns/gpu"), Stage::kUnschedulable);
  ASSERT_FALSE(actions_.reports.empty());
  EXPECT_THAT(actions_.reports.back().message, HasSubstr("2 blocked for GPU pods"));
  ASSERT_EQ(actions_.warnings.size(), 2u);
  EXPECT_EQ(actions_.warnings[0].reason, "GpuAssignmentUnreadable");
  EXPECT_THAT(actions_.warnings[0].message, HasSubstr("version 2 is not supported"));
  EXPECT_THAT(actions_.warnings[1].message, HasSubstr("names node n1 but the pod is bound to n2"));
  EXPECT_EQ(metrics_.nodes_gpu_blocked.load(), 2);
  EXPECT_EQ(metrics_.pods_unaccounted_gpus.load(), 2);
  // An update of the pod that does not fix it changes nothing and says nothing new.
  bad["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "True"}}});
  Pod(bad, Change::kUpdated);
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.warnings.size(), 2u);
  // The unreadable pod ends: n1's GPUs are free again and the GPU pod goes there.
  Pod(bad, Change::kDeleted);
  Advance(2'000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 2u);
  EXPECT_EQ(actions_.binds[1].key, "ns/gpu");
  EXPECT_EQ(actions_.binds[1].node, "n1");
  EXPECT_EQ(metrics_.nodes_gpu_blocked.load(), 1);
  EXPECT_EQ(metrics_.pods_unaccounted_gpus.load(), 1);
}

// The scheduler restores a MIG grant through the record's profile name (records converts it), so
// a restarted scheduler never grants the same MIG slices again; a pod's GPU model list is honoured.
TEST_F(CoreTest, MigAndGpuModelAsksFromPodAnnotations) {
  Node(NodeObject("mig").Gpus(1).Mig().Json());
  Node(NodeObject("h100").Gpus(2, "H100-80GB").Json());
  // Bound before the restart: a 4g.40gb at slice 0.
  json old = PodObject("ns", "old").Annotation("tessera.dev/mig", "4g.40gb").Node("mig").Json();
  old["metadata"]["annotations"]["tessera.dev/assignment"] =
      R"({"version":1,"node":"mig","gpus":[{"index":0,"memory_mib":40192,"compute_milli":571,)"
      R"("mig":{"profile":"4g.40gb","start":0}}],"mig_plan":{"create":true,"destroy":[]}})";
  Pod(old);
  Pod(PodObject("ns", "m1").Annotation("tessera.dev/mig", "3g.40gb").Json());
  Pod(PodObject("ns", "m2").Annotation("tessera.dev/mig", "3g.40gb").Json());
  Pod(PodObject("ns", "h")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/gpu-model", "H100-80GB, H200-141GB")
          .Json());
  Sync();
  core_->ScheduleSome();
  std::map<std::string, BindCall> by_pod;
  for (const BindCall& b : actions_.binds) by_pod[b.key] = b;
  ASSERT_TRUE(by_pod.contains("ns/m1"));
  const records::AssignedGpu& g = by_pod["ns/m1"].assignment.gpus.at(0);
  EXPECT_EQ(g.mig_profile, "3g.40gb");
  EXPECT_EQ(g.mig_start, 4);               // slices 0-3 are the restored 4g.40gb's
  EXPECT_FALSE(by_pod.contains("ns/m2"));  // no room for a second 3g.40gb
  EXPECT_EQ(core_->StageOf("ns/m2"), Stage::kUnschedulable);
  ASSERT_TRUE(by_pod.contains("ns/h"));
  EXPECT_EQ(by_pod["ns/h"].node, "h100");
  EXPECT_EQ(metrics_.nodes_gpu_blocked.load(), 0);
}

TEST_F(CoreTest, GangWaitsForAllMembersThenBindsThemTogetherInOneDomain) {
  Node(NodeObject("pcie").Gpus(2).Json());
  Node(NodeObject("dgx").Gpus(8).NvSwitch().Json());
  Sync();
  std::vector<json> members;
  for (int i = 0; i < 8; ++i) {
    members.push_back(PodObject("ns", StrCat("w-", i))
                          .Limit("tessera.dev/gpu", "1")
                          .Gang("train", 8, "nvlink-domain")
                          .Json());
  }
  for (int i = 0; i < 7; ++i) {
    Pod(members[i]);
    core_->ScheduleSome();
  }
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_EQ(core_->StageOf("ns/w-0"), Stage::kGangWaiting);
  EXPECT_TRUE(actions_.reports.empty());  // waiting is normal, not reported at once
  Pod(members[7]);
  EXPECT_EQ(core_->ScheduleSome(), 8);
  ASSERT_EQ(actions_.binds.size(), 8u);
  std::set<int> gpus;
  for (const BindCall& b : actions_.binds) {
    EXPECT_EQ(b.node, "dgx");
    gpus.insert(b.assignment.gpus[0].grant.gpu);
  }
  EXPECT_EQ(gpus.size(), 8u);
}

TEST_F(CoreTest, GangThatCannotFitBindsNothingAndIsReported) {
  Node(NodeObject("a").Gpus(4).NvSwitch().Json());
  Node(NodeObject("b").Gpus(4).NvSwitch().Json());
  Sync();
  for (int i = 0; i < 6; ++i) {
    Pod(PodObject("ns", StrCat("g-", i))
            .Limit("tessera.dev/gpu", "1")
            .Gang("six", 6, "nvlink-domain")
            .Json());
  }
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  ASSERT_EQ(actions_.reports.size(), 6u);
  EXPECT_THAT(actions_.reports[0].message, HasSubstr("six"));
  EXPECT_EQ(core_->engine().placed_count(), 0u);
  // Without a topology requirement the same gang spans both nodes.
  for (int i = 0; i < 6; ++i) {
    Pod(PodObject("ns", StrCat("h-", i)).Limit("tessera.dev/gpu", "1").Gang("loose", 6).Json());
  }
  Advance(2000);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 6u);
}

// tessera.dev/gang-min: the gang starts with the 4 members that fit, stays in its NVLink domain
// when room appears elsewhere, and grows to 8 there when room appears; the records and Events say
// how many run.
TEST_F(CoreTest, ElasticGangStartsAtMinAndGrowsInItsDomain) {
  Node(NodeObject("dgx").Gpus(8).NvSwitch().Json());
  json filler = PodObject("ns", "filler").Limit("tessera.dev/gpu", "4").Json();
  Pod(filler);
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  AckBinds();
  Pod(Bound(filler, actions_.binds[0]), Change::kUpdated);

  std::vector<json> members;
  for (int i = 0; i < 8; ++i) {
    members.push_back(PodObject("ns", StrCat("w-", i))
                          .Limit("tessera.dev/gpu", "1")
                          .Gang("train", 8, "nvlink-domain")
                          .Annotation("tessera.dev/gang-min", "4")
                          .Json());
  }
  for (int i = 0; i < 3; ++i) Pod(members[i]);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 1u);  // 3 of min 4: waits
  EXPECT_EQ(core_->StageOf("ns/w-0"), Stage::kGangWaiting);
  for (int i = 3; i < 8; ++i) Pod(members[i]);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 5u);
  for (size_t i = 1; i < 5; ++i) {
    const BindCall& b = actions_.binds[i];
    EXPECT_EQ(b.key, StrCat("ns/w-", i - 1));  // the oldest first
    EXPECT_EQ(b.node, "dgx");
    ASSERT_TRUE(b.assignment.gang.has_value());
    EXPECT_EQ(*b.assignment.gang, (records::GangRecord{"train", 8, 4, 4}));
  }
  // One Event for the round, on the oldest member.
  ASSERT_EQ(actions_.normals.size(), 1u);
  EXPECT_EQ(actions_.normals[0].key, "ns/w-0");
  EXPECT_EQ(actions_.normals[0].reason, "GangMembers");
  EXPECT_EQ(actions_.normals[0].message, "gang ns/train: 4 of 8 members running (min 4)");
  for (int i = 4; i < 8; ++i) {
    EXPECT_EQ(core_->StageOf(StrCat("ns/w-", i)), Stage::kUnschedulable);
  }
  ASSERT_FALSE(actions_.reports.empty());
  EXPECT_THAT(actions_.reports.back().message,
              HasSubstr("gang train: 4 of 8 members running (min 4); no room for more now"));
  AckBinds(1);
  for (size_t i = 1; i < 5; ++i) {
    Pod(Bound(members[i - 1], actions_.binds[i]), Change::kUpdated);
  }

  // Room elsewhere: a second NVSwitch node. The gang's domain is dgx: nothing moves.
  Node(NodeObject("dgx2").Gpus(8).NvSwitch().Json());
  Advance(2000);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 5u);
  EXPECT_THAT(actions_.reports.back().message,
              HasSubstr("4 of 8 members run in one nvlink-domain, and it has no room for 1 more"));

  // Room in its domain: the filler ends; the other 4 join on dgx.
  Pod(Bound(filler, actions_.binds[0]), Change::kDeleted);
  Advance(2000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 9u);
  std::set<int> gpus;
  for (size_t i = 1; i < 9; ++i) {
    EXPECT_EQ(actions_.binds[i].node, "dgx");
    gpus.insert(actions_.binds[i].assignment.gpus[0].grant.gpu);
  }
  EXPECT_EQ(gpus.size(), 8u);
  EXPECT_EQ(actions_.binds[8].assignment.gang->running, 8);
  // The oldest running member hears it (once for this round: 2 Events in all).
  ASSERT_EQ(actions_.normals.size(), 2u);
  EXPECT_EQ(actions_.normals.back().key, "ns/w-0");
  EXPECT_EQ(actions_.normals.back().message, "gang ns/train: 8 of 8 members running (min 4)");

  // Never beyond its size: a ninth member waits and says why.
  Pod(PodObject("ns", "w-8")
          .Limit("tessera.dev/gpu", "1")
          .Gang("train", 8, "nvlink-domain")
          .Annotation("tessera.dev/gang-min", "4")
          .Json());
  Advance(2000);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 9u);
  EXPECT_EQ(core_->StageOf("ns/w-8"), Stage::kGangWaiting);
  EXPECT_THAT(actions_.reports.back().message, HasSubstr("already has its 8 members"));
}

TEST_F(CoreTest, GangMembersWithAnotherMinAreBadInput) {
  Node(NodeObject("a").Gpus(4).Json());
  Sync();
  Pod(PodObject("ns", "m1")
          .Limit("tessera.dev/gpu", "1")
          .Gang("g", 4)
          .Annotation("tessera.dev/gang-min", "2")
          .Json());
  Pod(PodObject("ns", "m2")
          .Limit("tessera.dev/gpu", "1")
          .Gang("g", 4)
          .Annotation("tessera.dev/gang-min", "3")
          .Json());
  core_->ScheduleSome();
  EXPECT_EQ(core_->StageOf("ns/m2"), Stage::kBadInput);
  ASSERT_EQ(actions_.reports.size(), 1u);
  EXPECT_THAT(actions_.reports[0].message, HasSubstr("tessera.dev/gang-min]: 3 differs from 2"));
}

TEST_F(CoreTest, GangMembersWithAnotherSizeAreBadInput) {
  Node(NodeObject("a").Gpus(4).Json());
  Sync();
  Pod(PodObject("ns", "m1").Limit("tessera.dev/gpu", "1").Gang("g", 2).Json());
  Pod(PodObject("ns", "m2").Limit("tessera.dev/gpu", "1").Gang("g", 3).Json());
  core_->ScheduleSome();
  EXPECT_EQ(core_->StageOf("ns/m2"), Stage::kBadInput);
  ASSERT_EQ(actions_.reports.size(), 1u);
  EXPECT_THAT(actions_.reports[0].message, HasSubstr("tessera.dev/gang-size]: 3 differs from 2"));
}

TEST_F(CoreTest, DeletionAndCompletionReleaseAndRetryThePending) {
  Node(NodeObject("n1").Gpus(1).Json());
  json first = PodObject("ns", "first").Limit("tessera.dev/gpu", "1").Json();
  Pod(first);
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  AckBinds();
  Pod(Bound(first, actions_.binds[0]), Change::kUpdated);
  json second = PodObject("ns", "second").Limit("tessera.dev/gpu", "1").Json();
  Pod(second);
  Advance(10);
  core_->ScheduleSome();
  EXPECT_EQ(core_->StageOf("ns/second"), Stage::kUnschedulable);
  // The first finishes (phase Succeeded): its GPU is free; the second gets it.
  json done = Bound(first, actions_.binds[0]);
  done["status"]["phase"] = "Succeeded";
  Pod(done, Change::kUpdated);
  Advance(1000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 2u);
  EXPECT_EQ(actions_.binds[1].key, "ns/second");
  AckBinds(1);
  // Deleted: released too; a third gets it.
  Pod(Bound(second, actions_.binds[1]), Change::kDeleted);
  Pod(PodObject("ns", "third").Limit("tessera.dev/gpu", "1").Json());
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 3u);
  EXPECT_EQ(actions_.binds[2].key, "ns/third");
}

TEST_F(CoreTest, ConflictKeepsTheGpusUntilTheWatchExplains) {
  Node(NodeObject("n1").Gpus(1).Json());
  json p = PodObject("ns", "p").Limit("tessera.dev/gpu", "1").Json();
  Pod(p);
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  absl::Status conflict = absl::AbortedError("pod p is already assigned to node n1");
  core_->OnBindResult("ns/p", actions_.binds[0].attempt, conflict);
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kBindConflict);
  Pod(PodObject("ns", "q").Limit("tessera.dev/gpu", "1").Json());
  Advance(1500);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 1u);                // the GPU is still held for p
  Pod(Bound(p, actions_.binds[0]), Change::kUpdated);  // our earlier attempt had landed
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kBound);
  EXPECT_EQ(core_->engine().placed_count(), 1u);
}

TEST_F(CoreTest, FailedBindReleasesAndRetriesAfterABackoff) {
  Node(NodeObject("n1").Gpus(1).Json());
  Pod(PodObject("ns", "p").Limit("tessera.dev/gpu", "1").Json());
  Sync();
  core_->ScheduleSome();
  core_->OnBindResult("ns/p", actions_.binds[0].attempt,
                      absl::UnavailableError("POST ...: HTTP 503"));
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kBackoff);
  EXPECT_EQ(core_->engine().placed_count(), 0u);
  ASSERT_EQ(actions_.reports.size(), 1u);
  EXPECT_EQ(actions_.reports[0].reason, "SchedulerError");
  EXPECT_EQ(metrics_.failed_bind_error.load(), 1);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 1u);
  Advance(1001);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 2u);
  EXPECT_GT(actions_.binds[1].attempt, actions_.binds[0].attempt);
  // A late answer to the first attempt changes nothing.
  core_->OnBindResult("ns/p", actions_.binds[0].attempt, absl::OkStatus());
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kBinding);
}

// A binding is final: after the bind's answer, an older unbound view of the pod (a watch event
// queued before the binding; a PodGroup's change replaying the member as last seen) neither frees
// its GPU nor places it again. Before, it was released and queued: a second bind (refused 409) and,
// meanwhile, its GPU free for another pod. Another pod of the same name (other uid) is new.
TEST_F(CoreTest, AnOlderUnboundViewOfABoundPodKeepsItsGpu) {
  Node(NodeObject("n1").Gpus(1).Json());
  const json p = PodObject("ns", "p").Uid("u1").Limit("tessera.dev/gpu", "1").Json();
  Pod(p);
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  AckBinds();
  ASSERT_EQ(core_->StageOf("ns/p"), Stage::kBound);
  Pod(p, Change::kUpdated);  // the watch's older event
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kBound);
  Pod(PodObject("ns", "q").Limit("tessera.dev/gpu", "1").Json());
  Advance(1001);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 1u) << "p placed again, or q given p's GPU";
  EXPECT_EQ(core_->StageOf("ns/q"), Stage::kUnschedulable);
  // The same name, another pod (its delete was missed): the old one's GPU goes, the new one waits
  // to be placed (q, first in line, takes the GPU).
  Pod(PodObject("ns", "p").Uid("u2").Limit("tessera.dev/gpu", "1").Json(), Change::kUpdated);
  EXPECT_NE(core_->StageOf("ns/p"), Stage::kBound);
  Advance(30'001);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 2u);
}

// The same through a PodGroup: the group's status write (tessera's own) comes back and replays its
// members as last seen, still unbound; none is placed twice.
TEST_F(CoreTest, APodGroupChangeDoesNotPlaceItsBoundMembersAgain) {
  Node(NodeObject("dgx").Gpus(8).NvSwitch().Json());
  const json group = testing::PodGroupJson("ns", "train", 4);
  Group(group);
  Sync();
  for (int i = 0; i < 4; ++i) {
    Pod(PodObject("ns", StrCat("w-", i)).Limit("tessera.dev/gpu", "1").PodGroup("train").Json());
  }
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 4u);
  AckBinds();
  Group(group, Change::kUpdated);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(core_->StageOf(StrCat("ns/w-", i)), Stage::kBound) << i;
  Advance(30'001);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 4u);
}

TEST_F(CoreTest, BadPodInputIsReportedWithTheFieldAndDoesNotBlockOthers) {
  Node(NodeObject("n1").Gpus(1).Json());
  json bad = PodObject("ns", "bad").Limit("tessera.dev/gpu-memory", "four gigs").Json();
  Pod(bad);
  Pod(PodObject("ns", "good").Limit("tessera.dev/gpu-memory", "4Gi").Json());
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/good");
  ASSERT_EQ(actions_.reports.size(), 1u);
  EXPECT_EQ(actions_.reports[0].key, "ns/bad");
  EXPECT_THAT(actions_.reports[0].message,
              HasSubstr("spec.containers[0].resources.limits[tessera.dev/gpu-memory]"));
  EXPECT_EQ(metrics_.failed_invalid_pod.load(), 1);
  // Our own status write comes back as an update: not reported again.
  Pod(bad, Change::kUpdated);
  EXPECT_EQ(actions_.reports.size(), 1u);
  // Fixed by its owner (annotations can change; here the whole object for brevity): scheduled.
  Pod(PodObject("ns", "bad").Limit("tessera.dev/gpu-memory", "4Gi").Json(), Change::kUpdated);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 2u);
}

TEST_F(CoreTest, BadNodeInventoryMakesOnlyThatNodeUnusableForGpus) {
  Node(NodeObject("broken").Gpus(8).RawInventory("{\"version\": 1, \"gpus\": 7}").Json());
  Node(NodeObject("fine").Gpus(1).Json());
  Pod(PodObject("ns", "gpu-a").Limit("tessera.dev/gpu", "1").Json());
  Pod(PodObject("ns", "gpu-b").Limit("tessera.dev/gpu", "1").Json());
  Pod(PodObject("ns", "cpu").Request("cpu", "60").Json());
  Sync();
  core_->ScheduleSome();
  core_->PublishMetrics();
  EXPECT_EQ(metrics_.nodes_bad_inventory.load(), 1);
  std::map<std::string, std::string> where;
  for (const BindCall& b : actions_.binds) where[b.key] = b.node;
  EXPECT_EQ(where["ns/gpu-a"], "fine");
  EXPECT_EQ(where.count("ns/gpu-b"), 0u);
  EXPECT_EQ(where.count("ns/cpu"), 1u);  // CPU pods still use the node
  EXPECT_THAT(metrics_.Render(),
              HasSubstr("tessera_scheduler_node_inventory_valid{node=\"broken\"} 0"));
  // Fixed: its GPUs are used.
  Node(NodeObject("broken").Gpus(8).Json());
  Advance(1000);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.back().key, "ns/gpu-b");
  EXPECT_EQ(actions_.binds.back().node, "broken");
  core_->PublishMetrics();
  EXPECT_EQ(metrics_.nodes_bad_inventory.load(), 0);
}

// Node changes are applied to the engine in place: labels, taints and cordons change nothing
// that pods hold; a resized node's pods are restored on the new spec; a node deleted and added
// again gets its bound pods back.
TEST_F(CoreTest, NodeChangesApplyInPlaceAndKeepWhatPodsHold) {
  json n1 = NodeObject("n1").Gpus(4).Json();
  Node(n1);
  Node(NodeObject("n2").Gpus(4).Json());
  json held = PodObject("ns", "old").Limit("tessera.dev/gpu", "1").Node("n1").Json();
  held["metadata"]["annotations"]["tessera.dev/assignment"] =
      R"({"version":1,"node":"n1","gpus":[{"index":2,"memory_mib":81920,"compute_milli":1000,"exclusive":true}]})";
  Pod(held);
  Sync();
  core_->ScheduleSome();
  ASSERT_TRUE(core_->HeldFor("ns/old").has_value());
  const size_t placed = core_->engine().placed_count();
  // Labels, a taint, a cordon: in place, nothing released.
  json relabelled = n1;
  relabelled["metadata"]["labels"]["team"] = "vision";
  relabelled["spec"]["taints"] =
      json::array({{{"key", "maintenance"}, {"value", "soon"}, {"effect", "NoSchedule"}}});
  relabelled["spec"]["unschedulable"] = true;
  core_->OnNode(Change::kUpdated, DecodeNode(relabelled));
  Pod(PodObject("ns", "new").Limit("tessera.dev/gpu", "4").Json());
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].node, "n2");  // n1 is cordoned and tainted
  EXPECT_EQ(core_->engine().placed_count(), placed + 1);
  EXPECT_EQ(core_->HeldFor("ns/old")->gpus.at(0).grant.gpu, 2);
  // More CPU on n1: its pod is restored on the new spec, on the same GPU.
  json bigger = relabelled;
  bigger["status"]["allocatable"]["cpu"] = "128";
  bigger["status"]["capacity"]["cpu"] = "128";
  core_->OnNode(Change::kUpdated, DecodeNode(bigger));
  core_->ScheduleSome();
  ASSERT_TRUE(core_->HeldFor("ns/old").has_value());
  EXPECT_EQ(core_->HeldFor("ns/old")->gpus.at(0).grant.gpu, 2);
  EXPECT_EQ(metrics_.restore_failures.load(), 0);
  // Deleted: nothing to account on it; added again: restored before anything is decided.
  core_->OnNode(Change::kDeleted, DecodeNode(bigger));
  core_->ScheduleSome();
  EXPECT_FALSE(core_->HeldFor("ns/old").has_value());
  core_->OnNode(Change::kAdded, DecodeNode(n1));  // uncordoned, untainted
  Pod(PodObject("ns", "four").Limit("tessera.dev/gpu", "4").Json());
  Pod(PodObject("ns", "three").Limit("tessera.dev/gpu", "3").Json());
  core_->ScheduleSome();
  ASSERT_TRUE(core_->HeldFor("ns/old").has_value());
  EXPECT_EQ(core_->StageOf("ns/four"), Stage::kUnschedulable);  // GPU 2 is held
  EXPECT_EQ(core_->StageOf("ns/three"), Stage::kBinding);
  EXPECT_EQ(metrics_.node_changes.load(), 6);  // 2 added, 2 updated, 1 removed, 1 added again
}

TEST_F(CoreTest, CordonedNodesTakeNoNewPods) {
  json cordoned = NodeObject("n1").Gpus(2).Json();
  cordoned["spec"]["unschedulable"] = true;
  Node(cordoned);
  Pod(PodObject("ns", "p").Limit("tessera.dev/gpu", "1").Json());
  Sync();
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_EQ(core_->StageOf("ns/p"), Stage::kUnschedulable);
  cordoned["spec"].erase("unschedulable");
  Node(cordoned);
  Advance(1000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].node, "n1");
}

// The allowed nodes of pods with the same constraints are worked out once and kept until the
// cluster changes: a label added later makes the waiting pod fit, and the control-plane taint
// keeps every pod that does not tolerate it off that node.
TEST_F(CoreTest, AllowedNodesFollowNodeChanges) {
  json control = NodeObject("control-plane").Gpus(8).NvSwitch().Json();
  control["spec"]["taints"] =
      json::array({{{"key", "node-role.kubernetes.io/control-plane"}, {"effect", "NoSchedule"}}});
  Node(control);
  Node(NodeObject("worker").Gpus(2).Json());
  Sync();
  for (int i = 0; i < 3; ++i)
    Pod(PodObject("ns", StrCat("p", i)).Limit("tessera.dev/gpu", "1").Json());
  json picky = PodObject("ns", "picky").Limit("tessera.dev/gpu", "1").Json();
  picky["spec"]["nodeSelector"] = {{"pool", "a"}};
  Pod(picky);
  core_->ScheduleSome();
  // Two fit on the worker; the third finds the control plane excluded, not full.
  ASSERT_EQ(actions_.binds.size(), 2u);
  for (const auto& bind : actions_.binds) EXPECT_EQ(bind.node, "worker");
  bool excluded = false, no_pool = false;
  for (const auto& report : actions_.reports) {
    excluded |= report.message.find("1 excluded by the pod's tolerations") != std::string::npos;
    no_pool |= report.message.find("not matching its nodeSelector") != std::string::npos;
  }
  EXPECT_TRUE(excluded);
  EXPECT_TRUE(no_pool);
  // The label arrives: the cluster is rebuilt and the picky pod's nodes worked out again.
  Node(NodeObject("worker-a").Gpus(2).Label("pool", "a").Json());
  Advance(1000);  // retries after a change come at most once a second
  core_->ScheduleSome();
  bool picky_bound = false;
  for (const auto& bind : actions_.binds) {
    if (bind.key == "ns/picky") {
      picky_bound = true;
      EXPECT_EQ(bind.node, "worker-a");
    }
  }
  EXPECT_TRUE(picky_bound);
}

TEST_F(CoreTest, TaintsAndNodeSelectorsRestrictPodsAndGangs) {
  json tainted = NodeObject("tainted").Gpus(8).NvSwitch().Label("pool", "train").Json();
  tainted["spec"]["taints"] =
      json::array({{{"key", "dedicated"}, {"value", "train"}, {"effect", "NoSchedule"}}});
  Node(tainted);
  Node(NodeObject("open").Gpus(8).NvSwitch().Label("pool", "serve").Json());
  Sync();
  json plain = PodObject("ns", "plain").Limit("tessera.dev/gpu", "1").Json();
  plain["spec"]["nodeSelector"] = {{"pool", "train"}};
  Pod(plain);  // selects the tainted node but does not tolerate it
  json tolerant = PodObject("ns", "tolerant").Limit("tessera.dev/gpu", "1").Json();
  tolerant["spec"]["tolerations"] = json::array({{{"key", "dedicated"}, {"operator", "Exists"}}});
  tolerant["spec"]["nodeSelector"] = {{"pool", "train"}};
  Pod(tolerant);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/tolerant");
  EXPECT_EQ(actions_.binds[0].node, "tainted");
  EXPECT_THAT(actions_.reports[0].message, HasSubstr("1 with taints it does not tolerate"));
  // A gang whose members do not tolerate the taint stays off that node, though it has room.
  for (int i = 0; i < 4; ++i) {
    Pod(PodObject("ns", StrCat("g", i))
            .Limit("tessera.dev/gpu", "2")
            .Gang("g", 4, "nvlink-domain")
            .Json());
  }
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 5u);
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(actions_.binds[i].node, "open");
}

TEST_F(CoreTest, HigherPriorityGoesFirst) {
  Node(NodeObject("n1").Gpus(1).Json());
  Pod(PodObject("ns", "low").Limit("tessera.dev/gpu", "1").Priority(0).Json());
  Pod(PodObject("ns", "high").Limit("tessera.dev/gpu", "1").Priority(1000).Json());
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/high");
}

// The queue furthest below its fair share goes first, seeing the placements made before it in
// the same cycle: `big` holds 3 GPUs (bound by others); 4 of its pods wait, then 2 of `small`'s
// arrive; 2 GPUs are free. Implicit queues share 5 GPUs by demand (big 7, small 2): fair shares
// big 3, small 2; small is at 0: both of its pods get the GPUs.
TEST_F(CoreTest, TheQueueFurthestBelowItsFairShareGoesFirst) {
  Node(NodeObject("n1").Gpus(5).Json());
  for (int i = 0; i < 3; ++i) {
    records::Assignment a;
    a.node = "n1";
    records::AssignedGpu g;
    g.grant.gpu = i;
    g.grant.memory_mib = 81920;
    g.grant.compute_milli = 1000;
    g.grant.exclusive = true;
    g.uuid = StrCat("GPU-n1-", i);
    a.gpus.push_back(g);
    Pod(PodObject("ns", StrCat("held-", i))
            .Limit("tessera.dev/gpu", "1")
            .Annotation("tessera.dev/queue", "big")
            .Assigned(a)
            .Json());
  }
  for (int i = 0; i < 4; ++i) {
    Pod(PodObject("ns", StrCat("big-", i))
            .Limit("tessera.dev/gpu", "1")
            .Annotation("tessera.dev/queue", "big")
            .Created("2026-03-01T10:00:00Z")
            .Json());
  }
  for (int i = 0; i < 2; ++i) {
    Pod(PodObject("ns", StrCat("small-", i))
            .Limit("tessera.dev/gpu", "1")
            .Annotation("tessera.dev/queue", "small")
            .Created("2026-03-01T10:00:05Z")
            .Json());
  }
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 2u);
  EXPECT_EQ(actions_.binds[0].key, "ns/small-0");
  EXPECT_EQ(actions_.binds[1].key, "ns/small-1");

  // The per-queue figures, as /metrics shows them.
  core_->PublishMetrics();
  const std::string m = metrics_.Render();
  EXPECT_THAT(m, HasSubstr("tessera_scheduler_queue_allocated_gpus{queue=\"big\"} 3\n"));
  EXPECT_THAT(m, HasSubstr("tessera_scheduler_queue_allocated_gpu_memory_bytes{queue=\"small\"} "
                           "171798691840\n"));  // 160Gi
  EXPECT_THAT(m, HasSubstr("tessera_scheduler_queue_fair_share_gpus{queue=\"big\"} 3\n"));
  EXPECT_THAT(m, HasSubstr("tessera_scheduler_queue_pending_gpu_compute_gpus{queue=\"big\"} 4\n"));
  EXPECT_THAT(m, HasSubstr("tessera_scheduler_queue_pending_pods{queue=\"big\"} 4\n"));
  EXPECT_THAT(m, HasSubstr("tessera_scheduler_queue_pending_pods{queue=\"small\"} 0\n"));
  EXPECT_THAT(m, HasSubstr("tessera_scheduler_queue_borrowed_gpus{queue=\"small\"} 2\n"));

  // The GPU time granted reconciles with the grants: 100 s of 3 GPUs for big, 2 for small.
  now_ += std::chrono::seconds(100);
  core_->PublishMetrics();
  EXPECT_THAT(metrics_.Render(),
              HasSubstr("tessera_scheduler_queue_granted_gpu_seconds_total{queue=\"big\"} 300\n"));
  EXPECT_THAT(metrics_.Render(), HasSubstr("tessera_scheduler_queue_granted_gpu_seconds_total{"
                                           "queue=\"small\"} 200\n"));
  // And by namespace: every pod is in "ns".
  EXPECT_THAT(metrics_.Render(), HasSubstr("tessera_scheduler_namespace_granted_gpu_seconds_total{"
                                           "namespace=\"ns\"} 500\n"));

  // The node goes: nothing is held any more, in the queues either, and no more time is granted.
  core_->OnNode(Change::kDeleted, DecodeNode(NodeObject("n1").Gpus(5).Json()));
  core_->ScheduleSome();
  core_->PublishMetrics();
  EXPECT_THAT(metrics_.Render(),
              HasSubstr("tessera_scheduler_queue_allocated_gpus{queue=\"big\"} 0\n"));
  now_ += std::chrono::seconds(50);
  core_->PublishMetrics();
  EXPECT_THAT(metrics_.Render(),
              HasSubstr("tessera_scheduler_queue_granted_gpu_seconds_total{queue=\"big\"} 300\n"));
  EXPECT_THAT(metrics_.Render(), HasSubstr("tessera_scheduler_namespace_granted_gpu_seconds_total{"
                                           "namespace=\"ns\"} 500\n"));
}

// A queue's limit and an unusable queue stop its pods before the engine is asked, with why.
TEST_F(CoreTest, QueueLimitsAndUnusableQueuesAreReported) {
  core::QueueSpec capped;
  capped.name = "capped";
  capped.limit[core::kQueueGpu] = 1000;
  core::QueueSpec parent;
  parent.name = "team";
  core::QueueSpec child;
  child.name = "team-a";
  child.parent = "team";
  core_->SetQueues({capped, parent, child}, true);
  Node(NodeObject("n1").Gpus(4).Json());
  Pod(PodObject("ns", "one")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/queue", "capped")
          .Json());
  Pod(PodObject("ns", "two")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/queue", "capped")
          .Created("2026-03-01T10:00:05Z")
          .Json());
  Pod(PodObject("ns", "lost")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/queue", "nope")
          .Json());
  Pod(PodObject("ns", "mid")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/queue", "team")
          .Json());
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  const std::string other = actions_.binds[0].key == "ns/one" ? "two" : "one";
  EXPECT_EQ(core_->StageOf("ns/" + other), Stage::kUnschedulable);
  EXPECT_THAT(actions_.LastFailure("ns/" + other), HasSubstr("over its limit of 1 GPU"));
  EXPECT_THAT(actions_.LastFailure("ns/lost"), HasSubstr("queue nope does not exist"));
  EXPECT_THAT(actions_.LastFailure("ns/mid"), HasSubstr("has child queues (team-a)"));
}

// The queue hijack at start (issue 27): an intruder's pod, created before the scheduler started,
// names a team's queue. Until the Queues are listed nothing is decided, so the Queue's namespaces
// bind it: it is refused, with why, and the team's pod is placed. (Before, the pods were decided
// as soon as nodes and pods were listed, the queue was implicit, open to every namespace, and the
// intruder was placed.)
TEST_F(CoreTest, NothingIsDecidedUntilTheQueuesAreListed) {
  core_->SetQueues({}, false);
  Node(NodeObject("n1").Gpus(1).Json());
  Pod(PodObject("intruders", "intruder")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/queue", "team")
          .Created("2026-03-01T10:00:00Z")
          .Json());
  Pod(PodObject("team-ns", "member")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/queue", "team")
          .Created("2026-03-01T10:00:05Z")
          .Json());
  Sync();
  EXPECT_FALSE(core_->synced());
  EXPECT_EQ(core_->ScheduleSome(), 0);
  EXPECT_TRUE(actions_.binds.empty());
  core::QueueSpec team;
  team.name = "team";
  team.namespaces = {"team-ns"};
  core_->SetQueues({team}, true);
  EXPECT_TRUE(core_->synced());
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "team-ns/member");
  EXPECT_THAT(actions_.LastFailure("intruders/intruder"),
              HasSubstr("queue team does not admit pods of namespace intruders"));
}

TEST_F(CoreTest, PodsBoundByOthersCountTheirCpuAndMemory) {
  Node(NodeObject("n1").Gpus(1).Cpu("4").Json());
  Pod(PodObject("ns", "theirs")
          .Scheduler("default-scheduler")
          .Request("cpu", "3")
          .Node("n1")
          .Phase("Running")
          .Json());
  Pod(PodObject("ns", "mine").Request("cpu", "2").Json());
  Sync();
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_EQ(core_->StageOf("ns/mine"), Stage::kUnschedulable);
}

// The scale-up signal: the pods that wait, which configured template and how many nodes of it
// would let them run (the what-if of `tessera plan scale-up`), as a metric and one Event per
// pod whenever what it says about the pod changes.
TEST_F(CoreTest, ScaleUpSignalNamesTemplatesAsMetricAndEvent) {
  SchedulerCoreOptions o;
  o.scale_up.templates = {core::NodeOfProfile(*core::FindProfile("hgx-h100"), "h100"),
                          core::NodeOfProfile(*core::FindProfile("l40s-4gpu"), "l40s")};
  o.scale_up.interval = std::chrono::milliseconds(10'000);
  Make(o);
  Node(NodeObject("n1").Gpus(4).Json());
  Pod(PodObject("ns", "small").Limit("tessera.dev/gpu", "2").Json());
  Pod(PodObject("ns", "big").Limit("tessera.dev/gpu", "8").Json());
  Pod(PodObject("ns", "mid").Limit("tessera.dev/gpu", "4").Json());
  Sync();
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);  // small; big and mid wait
  ASSERT_EQ(actions_.normals.size(), 2u);
  for (const ReportCall& n : actions_.normals) {
    EXPECT_EQ(n.reason, "ScaleUpSignal");
    // One h100 (8 GPUs) runs big; a second runs mid: 2 nodes run both (l40s: 4 GPUs a node,
    // never big).
    EXPECT_THAT(n.message, HasSubstr("adding 2 nodes of template h100 (16 GPUs)")) << n.message;
  }
  const plan::ScaleUpPlan& last = core_->scale_up().last();
  EXPECT_EQ(last.waiting_pods, 2);
  ASSERT_EQ(last.options.size(), 2u);
  EXPECT_EQ(last.options[1].pods_placed, 1);  // l40s: one node runs mid
  std::string metrics = metrics_.Render();
  EXPECT_THAT(metrics, HasSubstr("tessera_scheduler_scale_up_nodes{template=\"h100\"} 2\n"));
  EXPECT_THAT(metrics, HasSubstr("tessera_scheduler_scale_up_nodes{template=\"l40s\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tessera_scheduler_scale_up_pods{template=\"l40s\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("tessera_scheduler_scale_up_waiting_pods 2\n"));

  // Recomputed after the interval; nothing changed, so no new Event.
  Advance(31'000);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.normals.size(), 2u);

  // mid goes away: one h100 is enough, and big is told so.
  Pod(PodObject("ns", "mid").Limit("tessera.dev/gpu", "4").Json(), Change::kDeleted);
  Advance(31'000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.normals.size(), 3u);
  EXPECT_EQ(actions_.normals[2].key, "ns/big");
  EXPECT_THAT(actions_.normals[2].message, HasSubstr("adding 1 node of template h100 (8 GPUs)"));

  // Nothing waits: the signal is cleared at once.
  Pod(PodObject("ns", "big").Limit("tessera.dev/gpu", "8").Json(), Change::kDeleted);
  core_->ScheduleSome();
  metrics = metrics_.Render();
  EXPECT_THAT(metrics, HasSubstr("tessera_scheduler_scale_up_nodes{template=\"h100\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("tessera_scheduler_scale_up_waiting_pods 0\n"));
}

TEST_F(CoreTest, ScaleUpSignalIsOffWithoutTemplates) {
  Node(NodeObject("n1").Gpus(1).Json());
  Pod(PodObject("ns", "big").Limit("tessera.dev/gpu", "8").Json());
  Sync();
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.normals.empty());
  EXPECT_THAT(metrics_.Render(), ::testing::Not(HasSubstr("scale_up")));
}

// An upstream PodGroup's gang (scheduling.k8s.io/v1beta1): its pods wait for the PodGroup (not an
// error), then as one gang of at least minCount inside one NVLink domain (the topology key), all
// or nothing; the PodGroupInitiallyScheduled condition says why not, then Scheduled, once.
TEST_F(CoreTest, PodGroupGangWaitsForItsGroupThenPlacesAllOrNothing) {
  Node(NodeObject("a").Gpus(4).NvSwitch().Json());
  Node(NodeObject("b").Gpus(4).NvSwitch().Json());
  Sync();
  for (int i = 0; i < 6; ++i) {
    Pod(PodObject("ns", StrCat("w-", i)).Limit("tessera.dev/gpu", "1").PodGroup("train").Json());
  }
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_EQ(core_->StageOf("ns/w-0"), Stage::kGangWaiting);
  EXPECT_THAT(actions_.LastFailure("ns/w-0"), HasSubstr("waiting for PodGroup ns/train"));
  Group(testing::PodGroupJson("ns", "train", 6, "tessera.dev/nvlink-domain"));
  core_->ScheduleSome();
  // Six GPUs are free, but no NVLink domain has six.
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_EQ(core_->engine().placed_count(), 0u);
  ASSERT_EQ(actions_.groups.size(), 1u);
  EXPECT_EQ(actions_.groups[0].key, "ns/train");
  EXPECT_EQ(actions_.groups[0].reason, "Unschedulable");
  EXPECT_EQ(core_->StageOf("ns/w-5"), Stage::kUnschedulable);
  Node(NodeObject("big").Gpus(8).NvSwitch().Json());
  Advance(2000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 6u);
  for (const BindCall& b : actions_.binds) EXPECT_EQ(b.node, "big") << b.key;
  ASSERT_EQ(actions_.groups.size(), 2u);
  EXPECT_EQ(actions_.groups[1].reason, "Scheduled");
  EXPECT_EQ(actions_.groups[1].message, "6 pods of gang ns/train scheduled together");
}

// At start the PodGroups may list after the pods: a pod of a group not seen yet waits without a
// report until the groups are listed; a bound member (placed before a restart) runs in its gang
// once its group is known, so a later member joins it instead of waiting for minCount new ones.
TEST_F(CoreTest, PodGroupsListedAfterThePodsLoseNothing) {
  core_->SetPodGroupsKnown(false);
  Node(NodeObject("dgx").Gpus(8).NvSwitch().Json());
  Sync();
  Pod(PodObject("ns", "w-0")
          .Limit("tessera.dev/gpu", "1")
          .PodGroup("train")
          .Assigned(testing::OneGpuAssignment("dgx", 0, 81920, 1000, true))
          .Json());
  Pod(PodObject("ns", "w-1").Limit("tessera.dev/gpu", "1").PodGroup("train").Json());
  Pod(PodObject("ns", "lost").Limit("tessera.dev/gpu", "1").PodGroup("nobody").Json());
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_TRUE(actions_.reports.empty());
  Group(testing::PodGroupJson("ns", "train", 2));
  core_->SetPodGroupsKnown(true);
  EXPECT_THAT(actions_.LastFailure("ns/lost"), HasSubstr("waiting for PodGroup ns/nobody"));
  EXPECT_EQ(actions_.LastFailure("ns/w-1"), "");
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/w-1");
  EXPECT_EQ(actions_.binds[0].assignment.gang->running, 2);
}

// minCount is the fewest that start; the group has no fixed size: members beyond it start together
// with the others when there is room, and later members join (kube-scheduler's semantics).
TEST_F(CoreTest, PodGroupGangStartsWithAtLeastMinCountAndGrows) {
  Node(NodeObject("dgx").Gpus(8).NvSwitch().Json());
  Group(testing::PodGroupJson("ns", "train", 2));
  Sync();
  Pod(PodObject("ns", "w-0").Limit("tessera.dev/gpu", "1").PodGroup("train").Json());
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());  // 1 of minCount 2
  Pod(PodObject("ns", "w-1").Limit("tessera.dev/gpu", "1").PodGroup("train").Json());
  Pod(PodObject("ns", "w-2").Limit("tessera.dev/gpu", "1").PodGroup("train").Json());
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 3u);
  ASSERT_TRUE(actions_.binds[0].assignment.gang.has_value());
  EXPECT_EQ(actions_.binds[0].assignment.gang->min, 2);
  AckBinds();
  Pod(PodObject("ns", "w-3").Limit("tessera.dev/gpu", "1").PodGroup("train").Json());
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 4u);
  EXPECT_EQ(actions_.binds[3].key, "ns/w-3");
  EXPECT_EQ(actions_.binds[3].assignment.gang->running, 4);
  // Scheduled is written once: later members do not write it again.
  ASSERT_EQ(actions_.groups.size(), 1u);
  EXPECT_EQ(actions_.groups[0].reason, "Scheduled");
  for (const ReportCall& n : actions_.normals) {
    EXPECT_THAT(n.message, ::testing::Not(HasSubstr("10000"))) << "an open gang has no size";
  }
  // One GangMembers Event per placement round, on the group's oldest member: not one per member.
  ASSERT_EQ(actions_.normals.size(), 2u);
  EXPECT_EQ(actions_.normals[0].key, "ns/w-0");
  EXPECT_EQ(actions_.normals[1].key, "ns/w-0");
}

// basic: independent pods; the group's condition says Scheduled when the first one is.
TEST_F(CoreTest, BasicPodGroupPodsAreIndependent) {
  Node(NodeObject("n").Gpus(2).Json());
  Group(testing::PodGroupJson("ns", "serve", 0));
  Sync();
  for (int i = 0; i < 3; ++i) {
    Pod(PodObject("ns", StrCat("s-", i)).Limit("tessera.dev/gpu", "1").PodGroup("serve").Json());
  }
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 2u);
  EXPECT_EQ(core_->StageOf("ns/s-2"), Stage::kUnschedulable);
  ASSERT_EQ(actions_.groups.size(), 1u);
  EXPECT_EQ(actions_.groups[0].reason, "Scheduled");
}

// A pod with both: the PodGroup decides, and the pod hears once that its annotation is ignored.
// A PodGroup whose topology key is no level of this scheduler makes its pods invalid input.
TEST_F(CoreTest, PodGroupDecidesOverGangAnnotationsAndBadGroupsAreReported) {
  Node(NodeObject("dgx").Gpus(8).NvSwitch().Json());
  Group(testing::PodGroupJson("ns", "train", 2));
  Sync();
  for (int i = 0; i < 2; ++i) {
    Pod(PodObject("ns", StrCat("w-", i))
            .Limit("tessera.dev/gpu", "1")
            .Gang("other", 4)
            .PodGroup("train")
            .Json());
  }
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 2u);
  ASSERT_EQ(actions_.warnings.size(), 2u);
  EXPECT_EQ(actions_.warnings[0].reason, "GangAnnotationIgnored");
  EXPECT_THAT(actions_.warnings[0].message,
              HasSubstr("the pod's gang other (tessera.dev/gang or kueue.x-k8s.io/pod-group-name, "
                        "min 4) is ignored: spec.schedulingGroup names PodGroup ns/train"));
  Group(testing::PodGroupJson("ns", "odd", 2, "example.com/row"));
  Pod(PodObject("ns", "o-0").Limit("tessera.dev/gpu", "1").PodGroup("odd").Json());
  core_->ScheduleSome();
  EXPECT_EQ(core_->StageOf("ns/o-0"), Stage::kBadInput);
  EXPECT_THAT(actions_.LastFailure("ns/o-0"),
              HasSubstr("PodGroup ns/odd: spec.schedulingConstraints.topology[0].key: "
                        "\"example.com/row\" is not a topology level of this scheduler"));
}

// Kueue's pod group: a gang of its total count; a member still gated by Kueue (not admitted) is
// not scheduled, and the gang waits for it.
TEST_F(CoreTest, KueuePodGroupIsAGangOfItsTotalCount) {
  Node(NodeObject("dgx").Gpus(8).NvSwitch().Json());
  Sync();
  auto member = [](int i) {
    return PodObject("ns", StrCat("k-", i))
        .Limit("tessera.dev/gpu", "1")
        .Label("kueue.x-k8s.io/pod-group-name", "job-a")
        .Annotation("kueue.x-k8s.io/pod-group-total-count", "3")
        .Json();
  };
  Pod(member(0));
  Pod(member(1));
  json gated = member(2);
  gated["spec"]["schedulingGates"] = {{{"name", "kueue.x-k8s.io/admission"}}};
  Pod(gated);
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_EQ(core_->StageOf("ns/k-2"), Stage::kIgnored);
  Pod(member(2), Change::kUpdated);  // Kueue admitted the group: the gate is gone
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 3u);
}

// A pod with spec.schedulingGates (Kueue's kueue.x-k8s.io/admission, or any other) is neither
// placed nor reported, whether it would fit or not: it waits for whoever set the gate, not for
// tessera, and holds nothing. When the gates are removed it is scheduled like any pod.
TEST_F(CoreTest, GatedPodIsNeitherPlacedNorReportedUntilItsGatesAreRemoved) {
  Node(NodeObject("n1").Gpus(2).Json());
  Sync();
  json fits = PodObject("ns", "fits").Limit("tessera.dev/gpu", "2").Json();
  json too_big = PodObject("ns", "too-big").Limit("tessera.dev/gpu", "4").Json();
  json gated_fits = fits, gated_too_big = too_big;
  gated_fits["spec"]["schedulingGates"] = {{{"name", "kueue.x-k8s.io/admission"}}};
  gated_too_big["spec"]["schedulingGates"] = {{{"name", "example.com/quota"}}};
  Pod(gated_fits);
  Pod(gated_too_big);
  core_->ScheduleSome();
  EXPECT_TRUE(actions_.binds.empty());
  EXPECT_TRUE(actions_.reports.empty());
  EXPECT_EQ(core_->StageOf("ns/fits"), Stage::kIgnored);
  EXPECT_EQ(core_->StageOf("ns/too-big"), Stage::kIgnored);
  // A pod without a gate takes one GPU meanwhile: the gated ones held none.
  Pod(PodObject("ns", "other").Limit("tessera.dev/gpu", "1").Json());
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 1u);
  EXPECT_EQ(actions_.binds[0].key, "ns/other");

  // The gates go: the one that does not fit is reported, the other binds once room appears.
  Pod(too_big, Change::kUpdated);
  Pod(fits, Change::kUpdated);
  core_->ScheduleSome();
  EXPECT_EQ(actions_.binds.size(), 1u);  // 1 GPU left, `fits` asks for 2
  EXPECT_TRUE(actions_.failures.contains("ns/too-big"));
  EXPECT_TRUE(actions_.failures.contains("ns/fits"));
  EXPECT_NE(core_->StageOf("ns/fits"), Stage::kIgnored);
  Node(NodeObject("n2").Gpus(2).Json());
  Advance(30'000);
  core_->ScheduleSome();
  ASSERT_EQ(actions_.binds.size(), 2u);
  EXPECT_EQ(actions_.binds[1].key, "ns/fits");
  EXPECT_EQ(actions_.binds[1].node, "n2");
}

}  // namespace
}  // namespace tessera::k8s
