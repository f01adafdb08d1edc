#include "k8s/snapshot/snapshot.h"

#include "gtest/gtest.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"

namespace tessera::k8s {
namespace {

using testing::NodeObject;
using testing::PodObject;

records::Assignment Share(const std::string& node, int gpu, int64_t memory_mib,
                          int32_t compute_milli = 0) {
  records::Assignment a;
  a.node = node;
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.memory_mib = memory_mib;
  g.grant.compute_milli = compute_milli;
  g.uuid = StrCat("GPU-", node, "-", gpu);
  a.gpus.push_back(g);
  return a;
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

}  // namespace
}  // namespace tessera::k8s
