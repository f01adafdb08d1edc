#include "k8s/snapshot/snapshot.h"

#include <map>

#include "core/topology/domains.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/plan_inputs.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::k8s {
namespace {

using testing::NodeObject;
using testing::PodObject;

records::Assignment Share(const std::string& node, int gpu, int64_t memory_mib,
                          int32_t compute_milli = 0) {
  return testing::OneGpuAssignment(node, gpu, memory_mib, compute_milli);
}

TEST(Snapshot, SortsNodesAndPodsAndDropsTerminalPods) {
  ClusterSnapshot s = ClusterSnapshot::FromObjects(
      {NodeObject("b").Gpus(2).Ready().Json(), NodeObject("a").Json(),
       NodeObject("b").Gpus(4).Json()},
      {PodObject("ns", "z").Json(), PodObject("ns", "done").Phase("Succeeded").Json(),
       PodObject("ns", "failed").Phase("Failed").Json(), PodObject("default", "y").Json()});
  ASSERT_EQ(s.nodes().size(), 2u);
  EXPECT_EQ(s.nodes()[0].name(), "a");
  EXPECT_EQ(s.nodes()[1].name(), "b");
  EXPECT_TRUE(s.nodes()[1].ready);
  EXPECT_FALSE(s.nodes()[0].ready);  // no Ready condition
  ASSERT_EQ(s.pods().size(), 2u);
  EXPECT_EQ(s.pods()[0]->key, "default/y");
  EXPECT_EQ(s.pods()[1]->key, "ns/z");
  EXPECT_EQ(s.FindNode("b")->info->spec.gpu_count(), 2);
  EXPECT_EQ(s.FindNode("c"), nullptr);
}

TEST(Snapshot, ReadsGpuHealthAndCordon) {
  ClusterSnapshot s =
      ClusterSnapshot::FromObjects({NodeObject("n")
                                        .Gpus(4)
                                        .Unhealthy(2, {79}, "XID 79: GPU has fallen off the bus")
                                        .Cordoned()
                                        .Json()},
                                   {});
  const SnapshotNode& n = s.nodes()[0];
  EXPECT_TRUE(n.info->unschedulable);
  EXPECT_TRUE(n.healthy(0));
  EXPECT_FALSE(n.healthy(2));
  EXPECT_TRUE(n.healthy(3));
  ASSERT_EQ(n.health.size(), 4u);
  EXPECT_EQ(n.health[2].xids, std::vector<int32_t>{79});
  EXPECT_EQ(n.health[2].reason, "XID 79: GPU has fallen off the bus");
}

// The scheduler's spareGpusPerDomain as its annotations show it: the most listed in one NVLink
// domain (a node's NVSwitch island; a labelled rack; a GPU on PCIe alone is its own).
TEST(Snapshot, SparesPerDomainAsTheNodesShowThem) {
  auto node = [](const std::string& name, const std::string& spares, const std::string& rack) {
    NodeObject o(name);
    o.Gpus(8, "H100-80GB").NvSwitch(18);
    if (!rack.empty()) o.Label(std::string(core::kNvlinkDomainLabel), rack);
    nlohmann::json j = o.Json();
    if (!spares.empty()) {
      j["metadata"]["annotations"][std::string(records::kSpareGpusAnnotation)] = spares;
    }
    return j;
  };
  auto shown = [](const std::vector<nlohmann::json>& nodes) {
    ClusterSnapshot s = ClusterSnapshot::FromObjects(nodes, {});
    return SparesPerDomainShown(s, *s.Ledger({}));
  };
  EXPECT_EQ(shown({node("a", "", ""), node("b", "", "")}), 0);
  EXPECT_EQ(shown({node("a", "6,7", ""), node("b", "7", "")}), 2);  // one domain per node
  // One rack-scale domain over both nodes: their spares add up.
  EXPECT_EQ(shown({node("a", "7", "r1"), node("b", "7", "r1")}), 2);
  EXPECT_EQ(shown({node("a", "7", "r1"), node("b", "7", "r2")}), 1);
  // What the scheduler did not write (or lists GPUs the node lacks) shows nothing.
  EXPECT_EQ(shown({node("a", "seven", ""), node("b", "9", "")}), 0);
  nlohmann::json pcie = NodeObject("p").Gpus(4).Json();
  pcie["metadata"]["annotations"][std::string(records::kSpareGpusAnnotation)] = "0,1";
  EXPECT_EQ(shown({pcie}), 1);
}

TEST(Snapshot, BoundAndPendingPods) {
  nlohmann::json deleting = PodObject("ns", "going").Json();
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  ClusterSnapshot s = ClusterSnapshot::FromObjects(
      {NodeObject("n").Gpus(2).Json()},
      {PodObject("ns", "bound")
           .Limit("tessera.dev/gpu-memory", "4Gi")
           .Assigned(Share("n", 0, 4096))
           .Json(),
       PodObject("ns", "wait").Limit("tessera.dev/gpu", "1").Json(),
       PodObject("ns", "other").Scheduler("default-scheduler").Json(), deleting});
  std::vector<const PodInfo*> bound = s.BoundPods();
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_EQ(bound[0]->key, "ns/bound");
  std::vector<const PodInfo*> pending = s.PendingPods("tessera");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0]->key, "ns/wait");
  EXPECT_EQ(s.PendingPods("default-scheduler").size(), 1u);
}

TEST(Snapshot, LedgerRestoresWhatBoundPodsHold) {
  ClusterSnapshot s =
      ClusterSnapshot::FromObjects({NodeObject("n").Gpus(2).Json(), NodeObject("m").Gpus(1).Json()},
                                   {PodObject("ns", "a")
                                        .Limit("tessera.dev/gpu-memory", "4Gi")
                                        .Request("cpu", "2")
                                        .Assigned(Share("n", 1, 4096, 250))
                                        .Json()});
  std::vector<SnapshotProblem> problems;
  std::unique_ptr<ClusterLedger> ledger = s.Ledger({}, &problems);
  EXPECT_TRUE(problems.empty());
  const core::Engine& e = ledger->engine();
  const core::NodeId n = e.cluster().FindNode("n");
  ASSERT_TRUE(n.valid());
  EXPECT_EQ(e.state().gpu(n, 1).free_memory_mib, 81920 - 4096);
  EXPECT_EQ(e.state().gpu(n, 1).free_compute_milli, 750);
  EXPECT_EQ(e.state().gpu(n, 0).free_memory_mib, 81920);
  EXPECT_EQ(e.state().free_cpu_milli(n), 64000 - 2000);
  EXPECT_TRUE(ledger->Accounted("ns/a"));
}

TEST(Snapshot, LedgerReportsPodsWhoseGpusCannotBeAccounted) {
  records::Assignment elsewhere = Share("m", 0, 4096);
  nlohmann::json pod = PodObject("ns", "lost").Limit("tessera.dev/gpu-memory", "4Gi").Json();
  pod["spec"]["nodeName"] = "n";
  pod["metadata"]["annotations"][std::string(records::kAssignmentAnnotation)] =
      records::AssignmentToJson(elsewhere);
  ClusterSnapshot s = ClusterSnapshot::FromObjects(
      {NodeObject("n").Gpus(1).Json(), NodeObject("bad").RawInventory("{nope").Json()}, {pod});
  std::vector<SnapshotProblem> problems;
  std::unique_ptr<ClusterLedger> ledger = s.Ledger({}, &problems);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].object, "node/bad");
  EXPECT_NE(problems[0].message.find("unusable"), std::string::npos);
  EXPECT_EQ(problems[1].object, "pod/ns/lost");
  EXPECT_EQ(problems[1].node, "n");
  EXPECT_NE(problems[1].message.find("names node m"), std::string::npos) << problems[1].message;
}

// What `tessera plan --from-cluster` plans on: the snapshot's ledger read as the planners take
// it (k8s/scheduler/plan_inputs.h), then a plan on it.
TEST(Snapshot, PlanViewAndWaitingGroups) {
  ClusterSnapshot s = ClusterSnapshot::FromObjects(
      {NodeObject("a").Gpus(4).NvSwitch().Json(), NodeObject("b").Gpus(4).NvSwitch().Json(),
       NodeObject("c").Gpus(4).NvSwitch().Cordoned().Json(),
       NodeObject("d").Gpus(2).Unhealthy(1, {79}, "XID 79").Json()},
      {PodObject("ns", "a0")
           .Limit("tessera.dev/gpu-memory", "20Gi")
           .Controller("ReplicaSet", "web")
           .Assigned(Share("a", 0, 20480))
           .Json(),
       PodObject("ns", "a1")
           .Limit("tessera.dev/gpu-memory", "20Gi")
           .Controller("ReplicaSet", "web")
           .Assigned(Share("a", 1, 20480))
           .Json(),
       PodObject("ns", "a2")
           .Limit("tessera.dev/gpu-memory", "20Gi")
           .Controller("ReplicaSet", "web")
           .Assigned(Share("a", 2, 20480))
           .Json(),
       PodObject("ns", "b0")
           .Limit("tessera.dev/gpu-memory", "20Gi")
           .Controller("ReplicaSet", "web")
           .Assigned(Share("b", 0, 20480))
           .Json(),
       PodObject("ns", "bare")
           .Limit("tessera.dev/gpu-memory", "10Gi")
           .Assigned(Share("b", 1, 10240))
           .Json(),
       PodObject("ns", "big")
           .Limit("tessera.dev/gpu", "4")
           .Priority(10)
           .Created("2026-01-01T00:00:02Z")
           .Json(),
       PodObject("ns", "g-0")
           .Limit("tessera.dev/gpu", "1")
           .Gang("g", 2)
           .Created("2026-01-01T00:00:01Z")
           .Json(),
       PodObject("ns", "g-1")
           .Limit("tessera.dev/gpu", "1")
           .Gang("g", 2)
           .Created("2026-01-01T00:00:01Z")
           .Json(),
       PodObject("ns", "h-0").Limit("tessera.dev/gpu", "1").Gang("h", 3).Json()});
  std::unique_ptr<ClusterLedger> ledger = s.Ledger({});
  std::map<std::string, const PodInfo*> by_key;
  for (const auto& p : s.pods()) by_key[p->key] = p.get();
  auto find = [&](const std::string& k) -> const PodInfo* {
    auto it = by_key.find(k);
    return it == by_key.end() ? nullptr : it->second;
  };
  PlanView view = ViewForPlans(*ledger, find, [](const PodInfo& p) { return p.name != "a2"; });
  ASSERT_EQ(view.running.size(), 6u);  // five pods and the unhealthy GPU's free part
  std::map<std::string, bool> movable;
  for (const plan::RunningPod& r : view.running) movable[r.request.name] = r.movable;
  EXPECT_TRUE(movable["ns/a0"]);
  EXPECT_FALSE(movable["ns/a2"]);    // refused by the caller (--pin)
  EXPECT_FALSE(movable["ns/bare"]);  // no controller would bring it back
  EXPECT_FALSE(movable[UnhealthyKey("d", 1)]);
  ASSERT_EQ(view.cordoned.size(), 1u);
  EXPECT_EQ(view.cluster->node(view.cordoned[0]).name, "c");

  std::vector<std::string> incomplete;
  std::vector<WaitingGroup> groups = GroupWaiting(s.PendingPods("tessera"), &incomplete);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].name, "ns/big");  // the highest priority first
  EXPECT_EQ(groups[1].name, "ns/g");
  EXPECT_EQ(groups[1].pods.size(), 2u);
  EXPECT_EQ(incomplete, std::vector<std::string>{"ns/h"});

  // The 4-GPU pod: c is cordoned and d has 2 GPUs; b keeps its bare pod (nothing would bring
  // it back) and a keeps a2 (pinned): no move can make room.
  plan::DefragInput in;
  in.cluster = view.cluster;
  in.make_policy = [] { return *core::CreatePolicy("tessera", {}); };
  in.running = view.running;
  in.cordoned = view.cordoned;
  in.target = groups[0].requests();
  absl::StatusOr<plan::DefragPlan> p = plan::PlanDefrag(in);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->verdict, plan::DefragVerdict::kNeedsCapacity) << p->reason;
  // Without the pin, a's three shares move (to b's free GPUs 2, 3 and beside b0 or bare).
  view = ViewForPlans(*ledger, find);
  in.running = view.running;
  p = plan::PlanDefrag(in);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->verdict, plan::DefragVerdict::kPlan) << p->reason;
  EXPECT_EQ(p->moves.size(), 3u);
  EXPECT_EQ(view.cluster->node(p->target[0].node).name, "a");
}

}  // namespace
}  // namespace tessera::k8s

namespace tessera::k8s {
namespace {

// The next page's token as the API server writes it before the items (a page of a pod list of
// kube-apiserver v1.37.2, shortened), without parsing the page.
TEST(PeekContinue, ReadsTheTokenBeforeTheItems) {
  EXPECT_EQ(
      PeekContinue(
          R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"58191","continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NTgxOTF9","remainingItemCount":37793},"items":[{"metadata":{"name":"a","annotations":{"x":"\"continue\":\"no\""}}}]})"),
      std::optional<std::string>("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NTgxOTF9"));
  // The last page: no token.
  EXPECT_EQ(
      PeekContinue(
          R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"annotations":{"k":"\"continue\":\"x\""}}}]})"),
      std::optional<std::string>(""));
  EXPECT_EQ(
      PeekContinue(
          R"({"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]})"),
      std::optional<std::string>(""));
}

TEST(PeekContinue, LeavesOtherLayoutsToTheParser) {
  // Items before metadata, no items, an escaped token: the page is parsed for its token.
  EXPECT_EQ(PeekContinue(R"({"items":[],"metadata":{"continue":"abc"}})"), std::nullopt);
  EXPECT_EQ(PeekContinue(R"({"kind":"Status","metadata":{},"message":"gone"})"), std::nullopt);
  EXPECT_EQ(PeekContinue(R"({"metadata":{"continue":"a\"b"},"items":[]})"), std::nullopt);
  EXPECT_EQ(PeekContinue(""), std::nullopt);
}

// Elastic gangs (tessera.dev/gang-min) wait as a group once their min members do; a gang some of
// whose members run is left to grow (DropRunningGangs), not planned for.
TEST(Snapshot, ElasticGangsWaitFromTheirMinAndNotWhileRunning) {
  auto member = [](const std::string& gang, int i) {
    return PodObject("ns", StrCat(gang, "-", i))
        .Limit("tessera.dev/gpu-memory", "20Gi")
        .Gang(gang, 4)
        .Annotation("tessera.dev/gang-min", "2");
  };
  ClusterSnapshot s = ClusterSnapshot::FromObjects(
      {NodeObject("a").Gpus(4).Json()},
      {member("e", 0).Json(), member("e", 1).Json(),          // 2 of 4 wait: its min
       member("f", 0).Json(),                                 // 1 of min 2 waits
       member("r", 0).Assigned(Share("a", 0, 20480)).Json(),  // r runs one member
       member("r", 1).Json(), member("r", 2).Json(), member("r", 3).Json()});
  std::vector<std::string> incomplete;
  std::vector<WaitingGroup> groups = GroupWaiting(s.PendingPods("tessera"), &incomplete);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].name, "ns/e");
  EXPECT_EQ(groups[0].pods.size(), 2u);
  EXPECT_EQ(groups[1].name, "ns/r");
  EXPECT_EQ(incomplete, std::vector<std::string>{"ns/f"});
  std::unique_ptr<ClusterLedger> ledger = s.Ledger({});
  std::map<std::string, const PodInfo*> by_key;
  for (const auto& p : s.pods()) by_key[p->key] = p.get();
  PlanView view = ViewForPlans(*ledger, [&](const std::string& k) -> const PodInfo* {
    auto it = by_key.find(k);
    return it == by_key.end() ? nullptr : it->second;
  });
  std::vector<std::string> dropped;
  DropRunningGangs(RunningGangs(view.running), &groups, &dropped);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].name, "ns/e");
  EXPECT_EQ(dropped, std::vector<std::string>{"ns/r"});
}

}  // namespace
}  // namespace tessera::k8s
