#include "k8s/status/status.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;
using testing::NodeObject;
using ::testing::Not;
using testing::PodObject;

constexpr int64_t kGi = 1024;

records::Assignment Grant(const std::string& node, int gpu, int64_t memory_mib,
                          int32_t compute_milli, bool exclusive) {
  return testing::OneGpuAssignment(node, gpu, memory_mib, compute_milli, exclusive);
}

// Node a: 4 x A100-80GB (GPU 0 shared by two pods, GPU 1 held whole, GPU 2 unhealthy, GPU 3
// free); node b: 2 x A100-80GB (GPU 0 with 76Gi granted, GPU 1 free); node c without GPUs.
// Pending: a 10Gi share (the scheduler said why), a gang member asking 2 whole GPUs, and a pod
// whose request cannot be read.
ClusterSnapshot Scenario() {
  std::vector<nlohmann::json> nodes = {
      NodeObject("a")
          .Gpus(4)
          .Ready()
          .Unhealthy(2, {79}, "XID 79: GPU has fallen off the bus")
          .Json(),
      NodeObject("b").Gpus(2).Ready().Json(),
      NodeObject("c").Ready().Json(),
  };
  std::vector<nlohmann::json> pods = {
      PodObject("ns", "p1")
          .Limit("tessera.dev/gpu-memory", "4Gi")
          .Limit("tessera.dev/gpu-compute", "25")
          .Assigned(Grant("a", 0, 4 * kGi, 250, false))
          .Json(),
      PodObject("other", "p2")
          .Limit("tessera.dev/gpu-memory", "8Gi")
          .Assigned(Grant("a", 0, 8 * kGi, 0, false))
          .Json(),
      PodObject("ns", "p3")
          .Limit("tessera.dev/gpu", "1")
          .Annotation("tessera.dev/queue", "train")
          .Assigned(Grant("a", 1, 80 * kGi, 1000, true))
          .Json(),
      PodObject("ns", "p4")
          .Limit("tessera.dev/gpu-memory", "76Gi")
          .Assigned(Grant("b", 0, 76 * kGi, 0, false))
          .Json(),
      PodObject("ns", "cpu").Request("cpu", "1").Node("c").Scheduler("default-scheduler").Json(),
      PodObject("ns", "q1")
          .Limit("tessera.dev/gpu-memory", "10Gi")
          .Created("2026-03-01T10:00:00Z")
          .Unschedulable("0/3 nodes are available: 3 no GPU with room")
          .Json(),
      PodObject("ns", "q2")
          .Limit("tessera.dev/gpu", "2")
          .Gang("g", 2)
          .Created("2026-03-01T10:01:00Z")
          .Json(),
      PodObject("ns", "q3")
          .Limit("tessera.dev/gpu-compute", "150")
          .Created("2026-03-01T10:02:00Z")
          .Json(),
  };
  return ClusterSnapshot::FromObjects(nodes, pods);
}

StatusOptions At(std::string node = "", std::string ns = "") {
  StatusOptions o;
  o.node = std::move(node);
  o.ns = std::move(ns);
  o.now = std::chrono::system_clock::from_time_t(1772359500);  // 2026-03-01T10:05:00Z
  return o;
}

// StatusToJson, after checking that WriteStatusJson writes what nlohmann would for the same
// values (the tree parsed back dumps to the same bytes), indented and on one line.
nlohmann::json StreamedJson(const ClusterStatus& s) {
  nlohmann::json tree = StatusToJson(s);
  for (int indent : {2, -1}) {
    std::ostringstream streamed;
    WriteStatusJson(s, streamed, indent);
    EXPECT_EQ(streamed.str(), tree.dump(indent)) << "indent " << indent;
  }
  return tree;
}

TEST(Status, NodesAndGpus) {
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->nodes.size(), 2u);  // c has no GPUs
  const NodeStatus& a = s->nodes[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_TRUE(a.ready);
  EXPECT_EQ(a.pods, 3);
  ASSERT_EQ(a.gpus.size(), 4u);
  EXPECT_EQ(a.gpus[0].memory_granted_mib, 12 * kGi);
  EXPECT_EQ(a.gpus[0].compute_granted_milli, 250);
  ASSERT_EQ(a.gpus[0].pods.size(), 2u);
  EXPECT_EQ(a.gpus[0].pods[0].pod, "ns/p1");
  EXPECT_EQ(a.gpus[0].pods[1].pod, "other/p2");
  EXPECT_TRUE(a.gpus[1].exclusive);
  EXPECT_EQ(a.gpus[1].memory_granted_mib, 80 * kGi);
  EXPECT_FALSE(a.gpus[2].healthy);
  EXPECT_EQ(a.gpus[2].xids, std::vector<int32_t>{79});
  EXPECT_EQ(a.gpus[0].free_memory_mib, 68 * kGi);
  EXPECT_EQ(a.gpus[3].free_memory_mib, 80 * kGi);
}

TEST(Status, PendingPodsWithReasons) {
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->pending.size(), 3u);
  EXPECT_EQ(s->pending[0].pod, "ns/q1");
  EXPECT_EQ(s->pending[0].reason, "0/3 nodes are available: 3 no GPU with room");
  EXPECT_EQ(s->pending[0].gpu_memory_mib, 10 * kGi);
  EXPECT_EQ(s->pending[0].waiting_seconds, 300);
  EXPECT_EQ(s->pending[1].pod, "ns/q2");
  EXPECT_EQ(s->pending[1].gang, "g");
  EXPECT_EQ(s->pending[1].gpus, 2);
  EXPECT_EQ(s->pending[1].reason, "not tried by the scheduler yet");
  EXPECT_EQ(s->pending[2].pod, "ns/q3");
  EXPECT_THAT(s->pending[2].reason, HasSubstr("cannot be read"));
  EXPECT_THAT(s->pending[2].reason, HasSubstr("gpu-compute"));
}

TEST(Status, Totals) {
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(s.ok()) << s.status();
  const StatusTotals& t = s->totals;
  EXPECT_EQ(t.nodes, 3);
  EXPECT_EQ(t.gpu_nodes, 2);
  EXPECT_EQ(t.gpus, 6);
  EXPECT_EQ(t.gpus_in_use, 3);
  EXPECT_EQ(t.gpus_exclusive, 1);
  EXPECT_EQ(t.gpus_unhealthy, 1);
  EXPECT_EQ(t.memory_mib, 6 * 80 * kGi);
  EXPECT_EQ(t.memory_granted_mib, (4 + 8 + 80 + 76) * kGi);
  EXPECT_EQ(t.memory_requested_mib, (4 + 8 + 80 + 76) * kGi);
  EXPECT_EQ(t.compute_granted_milli, 1250);
  EXPECT_EQ(t.running_gpu_pods, 4);
  EXPECT_EQ(t.pending_gpu_pods, 3);
  EXPECT_EQ(t.pending_memory_mib, 10 * kGi);
  EXPECT_EQ(t.pending_whole_gpus, 2);
  // Free on healthy GPUs: a0 68Gi, a3 80Gi, b0 4Gi, b1 80Gi (a2 is unhealthy).
  EXPECT_EQ(t.free_memory_mib, (68 + 80 + 4 + 80) * kGi);
  // b0's 4Gi takes neither the 10Gi share nor a whole GPU: too small. Everything else is usable
  // (the share fits a0, a3 and b1; the 2 whole GPUs fit node a).
  EXPECT_EQ(t.stranded_mib, 4 * kGi);
  EXPECT_EQ(t.stranded_too_small_mib, 4 * kGi);
  EXPECT_TRUE(s->nodes[1].gpus[0].stranded_too_small);
}

TEST(Status, StrandedOnlyCountsWhatNoPendingPodCanUse) {
  // A pending 2-GPU pod on a node with one free GPU left and enough memory on a shared GPU for
  // nobody: both GPUs' free memory is stranded; the shared GPU's piece is too small, the free
  // GPU's is not (it is big enough, only alone).
  ClusterSnapshot snap =
      ClusterSnapshot::FromObjects({NodeObject("n").Gpus(2).Json()},
                                   {PodObject("ns", "s")
                                        .Limit("tessera.dev/gpu-memory", "40Gi")
                                        .Assigned(Grant("n", 0, 40 * kGi, 0, false))
                                        .Json(),
                                    PodObject("ns", "w").Limit("tessera.dev/gpu", "2").Json()});
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->totals.stranded_mib, 120 * kGi);
  EXPECT_EQ(s->totals.stranded_too_small_mib, 40 * kGi);
}

TEST(Status, NothingPendingStrandsNothing) {
  ClusterSnapshot snap = ClusterSnapshot::FromObjects(
      {NodeObject("n").Gpus(1).Json()}, {PodObject("ns", "s")
                                             .Limit("tessera.dev/gpu-memory", "79Gi")
                                             .Assigned(Grant("n", 0, 79 * kGi, 0, false))
                                             .Json()});
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->totals.free_memory_mib, 1 * kGi);
  EXPECT_EQ(s->totals.stranded_mib, 0);
}

TEST(Status, CordonedNodesHaveNothingFree) {
  ClusterSnapshot snap =
      ClusterSnapshot::FromObjects({NodeObject("n").Gpus(1).Cordoned().Json()},
                                   {PodObject("ns", "w").Limit("tessera.dev/gpu", "1").Json()});
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->nodes[0].cordoned);
  EXPECT_EQ(s->totals.free_memory_mib, 0);
  EXPECT_EQ(s->totals.stranded_mib, 0);
}

// The GPUs the scheduler keeps as hot spares (its tessera.dev/spare-gpus annotation on the node).
TEST(Status, SpareGpusFromTheSchedulersAnnotation) {
  nlohmann::json node = NodeObject("n").Gpus(4).Ready().Json();
  node["metadata"]["annotations"][std::string(records::kSpareGpusAnnotation)] = "2,3";
  ClusterSnapshot snap = ClusterSnapshot::FromObjects({node}, {});
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->nodes[0].gpus.size(), 4u);
  EXPECT_FALSE(s->nodes[0].gpus[1].spare);
  EXPECT_TRUE(s->nodes[0].gpus[2].spare);
  EXPECT_TRUE(s->nodes[0].gpus[3].spare);
  EXPECT_EQ(s->totals.gpus_spare, 2);
  const std::string text = RenderStatusText(*s);
  EXPECT_THAT(text, HasSubstr("spare (kept for gang replacements)"));
  EXPECT_THAT(text, HasSubstr("2 kept spare for gang replacements"));
  const nlohmann::json j = StatusToJson(*s);
  EXPECT_EQ(j["nodes"][0]["gpus"][3]["spare"], true);
  EXPECT_EQ(j["totals"]["gpus_spare"], 2);
}

// A spare is free only to a gang's replacement: its memory is neither free to the pending pods
// nor stranded from them (a pending 4-GPU pod cannot use the 2 GPUs left, nor the spares).
TEST(Status, SpareGpusAreNotFreeMemory) {
  nlohmann::json node = NodeObject("n").Gpus(4).Ready().Json();
  node["metadata"]["annotations"][std::string(records::kSpareGpusAnnotation)] = "2,3";
  ClusterSnapshot snap = ClusterSnapshot::FromObjects(
      {node}, {PodObject("ns", "w").Limit("tessera.dev/gpu", "4").Json()});
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  const int64_t each = s->nodes[0].gpus[0].memory_mib;
  ASSERT_GT(each, 0);
  EXPECT_EQ(s->nodes[0].gpus[3].free_memory_mib, each);  // the GPU row: free, and spare
  EXPECT_EQ(s->totals.free_memory_mib, 2 * each);
  EXPECT_EQ(s->totals.stranded_mib, 2 * each);
  EXPECT_EQ(s->nodes[0].gpus[3].stranded_mib, 0);
}

TEST(Status, NodeAndNamespaceFilters) {
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), At("b", "other"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->nodes.size(), 1u);
  EXPECT_EQ(s->nodes[0].name, "b");
  EXPECT_TRUE(s->pending.empty());                  // every pending pod is in ns
  EXPECT_EQ(s->totals.gpus, 6);                     // totals stay cluster-wide
  EXPECT_FALSE(s->nodes[0].gpus[0].pods[0].shown);  // ns/p4 is hidden, still counted
  EXPECT_EQ(s->nodes[0].gpus[0].memory_granted_mib, 76 * kGi);

  EXPECT_EQ(ComputeStatus(Scenario(), At("zz")).status().code(), absl::StatusCode::kNotFound);
}

TEST(Status, Queues) {
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->queues.size(), 2u);
  EXPECT_EQ(s->queues[0].name, "default");
  EXPECT_EQ(s->queues[0].running, 3);
  EXPECT_EQ(s->queues[0].pending, 3);
  EXPECT_EQ(s->queues[1].name, "train");
  EXPECT_EQ(s->queues[1].running, 1);
  EXPECT_EQ(s->queues[1].gpus_whole, 1);
}

// The queues' figures, counted as the scheduler counts them: a share is its fraction of its GPU
// (p1: 4Gi with 25% compute = 250 milli-GPU; p2: 8Gi = 100; p4: 76Gi = 950), pending asks of
// pods the scheduler would try (q3's request cannot be read), fair shares over the 6 GPUs, and
// every Queue object, even one with no pods, or one that cannot be read.
TEST(Status, QueueFiguresWithQueueObjects) {
  StatusOptions o = At();
  core::QueueSpec train, idle;
  train.name = "train";
  train.deserved[core::kQueueGpu] = 2000;
  idle.name = "idle";
  idle.deserved[core::kQueueGpu] = 1000;
  o.queues = std::vector<core::QueueSpec>{train, idle};
  o.queue_errors = {{"broken", "spec.deserved.gpu: \"x\" is not a quantity"}};
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->queues.size(), 4u);
  const QueueStatus& d = s->queues[0];
  EXPECT_EQ(d.name, "default");
  EXPECT_EQ(d.allocated, core::QueueResources::Of(1300, 88 * kGi, 250));
  EXPECT_EQ(d.pending_ask, core::QueueResources::Of(125 + 2000, 10 * kGi + 160 * kGi, 2000));
  EXPECT_EQ(d.pending_pods, 2);
  EXPECT_EQ(d.deserved, core::QueueResources{});
  EXPECT_EQ(d.borrowed, d.allocated);
  EXPECT_EQ(d.fair_share[core::kQueueGpu], 3425);  // all it wants: 6000 - train's 1000
  EXPECT_EQ(d.running, 3);
  const QueueStatus& i = s->queues[1];
  EXPECT_EQ(i.name, "idle");
  EXPECT_EQ(i.deserved[core::kQueueGpu], 1000);
  EXPECT_EQ(i.allocated, core::QueueResources{});
  EXPECT_EQ(i.fair_share[core::kQueueGpu], 0);  // it wants nothing
  const QueueStatus& t = s->queues[2];
  EXPECT_EQ(t.name, "train");
  EXPECT_EQ(t.allocated, core::QueueResources::Of(1000, 80 * kGi, 1000));
  EXPECT_EQ(t.borrowed[core::kQueueGpu], 0);
  EXPECT_EQ(t.fair_share[core::kQueueGpu], 1000);
  EXPECT_EQ(s->queues[3].name, "broken");
  EXPECT_THAT(s->queues[3].invalid, HasSubstr("cannot be read"));

  const std::string text = RenderStatusText(*s);
  EXPECT_THAT(text, HasSubstr("QUEUES (GPUs; a share counts its fraction)"));
  EXPECT_THAT(text, HasSubstr("DESERVED  FAIR SHARE  ALLOCATED  BORROWED  PENDING"));
  EXPECT_THAT(text, HasSubstr("2.125 (2 pods)"));
  EXPECT_THAT(text, HasSubstr("broken: queue broken cannot be read"));
  const nlohmann::json j = StreamedJson(*s);
  EXPECT_EQ(j["queues"][0]["allocated"]["gpu_milli"], 1300);
  EXPECT_EQ(j["queues"][0]["pending_ask"]["gpu_memory_mib"], 170 * kGi);
  EXPECT_EQ(j["queues"][2]["deserved"]["gpu_milli"], 2000);
  EXPECT_EQ(j["queues"][0]["pending_pods"], 2);
}

// What a queue held lately, from its status.usage (written an hour ago: 3 GPUs), carried to now
// as a restarted scheduler carries it: the hour since counts as holding what it holds now (train:
// 1 GPU), so 3 x 1/2 + 1 x 1/2 = 2 GPUs with a one-hour half-life.
TEST(Status, QueueUsageCarriedToNow) {
  StatusOptions o = At();
  core::QueueSpec train;
  train.name = "train";
  o.queues = std::vector<core::QueueSpec>{train};
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(o.now.time_since_epoch()).count();
  o.queue_usage = {records::QueueUsageStatus{"train", core::QueueResources::Of(3000, 0, 3000), 3600,
                                             now_ms - 3600 * 1000}};
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  const QueueStatus* t = nullptr;
  for (const QueueStatus& q : s->queues) {
    if (q.name == "train") t = &q;
  }
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->usage[core::kQueueGpu], 2000);
  EXPECT_EQ(s->queue_usage_half_life, "1h");
  const std::string text = RenderStatusText(*s);
  EXPECT_THAT(text, HasSubstr("USED LATELY"));
  EXPECT_THAT(text, HasSubstr("halve every 1h"));
  const nlohmann::json j = StreamedJson(*s);
  EXPECT_EQ(j["queue_usage_half_life"], "1h");
  // Without records there is no column and no half-life.
  absl::StatusOr<ClusterStatus> plain = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(RenderStatusText(*plain), Not(HasSubstr("USED LATELY")));
  EXPECT_TRUE(StreamedJson(*plain)["queue_usage_half_life"].is_null());
}

TEST(Status, ProblemsBlockTheNode) {
  nlohmann::json pod =
      PodObject("ns", "bad").Limit("tessera.dev/gpu-memory", "4Gi").Node("n").Json();
  pod["metadata"]["annotations"]["tessera.dev/assignment"] = "{broken";
  ClusterSnapshot snap = ClusterSnapshot::FromObjects({NodeObject("n").Gpus(1).Json()}, {pod});
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->problems.size(), 1u);
  EXPECT_THAT(s->nodes[0].gpus_blocked, HasSubstr("cannot be read"));
  EXPECT_EQ(s->totals.free_memory_mib, 0);  // a blocked node offers nothing
}

TEST(Status, Text) {
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(s.ok()) << s.status();
  std::string text = RenderStatusText(*s);
  EXPECT_THAT(text, HasSubstr("NODE a  4 x A100-80GB, PCIe  Ready"));
  // GPU 1 held whole: full bars; GPU 0: 12Gi of 80Gi.
  EXPECT_THAT(text,
              HasSubstr("[####################]  80Gi/80Gi  [##########]  100%  ns/p3 (whole)"));
  EXPECT_THAT(text, HasSubstr("[###.................]  12Gi/80Gi"));
  EXPECT_THAT(text, HasSubstr("ns/p1 4Gi 25%, other/p2 8Gi"));
  EXPECT_THAT(text, HasSubstr("XID 79"));
  EXPECT_THAT(text, HasSubstr("PENDING GPU PODS (3, scheduler tessera)"));
  EXPECT_THAT(text, HasSubstr("0/3 nodes are available: 3 no GPU with room"));
  EXPECT_THAT(text, HasSubstr("a share of one GPU (10Gi memory)"));
  EXPECT_THAT(text, HasSubstr("2 whole GPUs, gang g"));
  EXPECT_THAT(text, HasSubstr("3 of 6 in use (1 held whole); 1 unhealthy"));
  EXPECT_THAT(text, HasSubstr("4Gi of it in pieces too small for every pending ask"));
}

// -o wide and JSON show what the node agents measured per pod and GPU beside the grant.
TEST(Status, WideShowsWhatTheAgentsMeasured) {
  absl::StatusOr<ClusterStatus> plain = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::string gpu0 = plain->nodes[0].gpus[0].uuid, gpu1 = plain->nodes[0].gpus[1].uuid;
  AgentUsage usage;
  usage[{"ns/p1", gpu0}] = {.memory_used_bytes = int64_t{3} << 30, .busy_seconds = -1, .idle = 0};
  usage[{"ns/p3", gpu1}] = {.memory_used_bytes = -1, .busy_seconds = 754.5, .idle = 1};
  usage[{"ns/p3", "GPU-elsewhere"}] = {.memory_used_bytes = 1, .busy_seconds = 1, .idle = 1};
  StatusOptions o = At();
  o.agent_usage = &usage;
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string wide = RenderStatusText(*s, {.wide = true});
  EXPECT_THAT(wide, HasSubstr("ns/p1 4Gi 25% [used 3Gi], other/p2 8Gi"));
  EXPECT_THAT(wide, HasSubstr("ns/p3 (whole) [busy 12m, IDLE]"));
  EXPECT_THAT(RenderStatusText(*s), Not(HasSubstr("[used")));  // only -o wide
  const nlohmann::json j = StreamedJson(*s);
  const nlohmann::json& a = j["nodes"][0]["gpus"];
  EXPECT_EQ(a[0]["pods"][0]["usage"],
            nlohmann::json({{"memory_used_bytes", int64_t{3} << 30}, {"idle", false}}));
  EXPECT_FALSE(a[0]["pods"][1].contains("usage"));  // nothing read for other/p2
  EXPECT_EQ(a[1]["pods"][0]["usage"], nlohmann::json({{"busy_seconds", 754.5}, {"idle", true}}));
}

TEST(Status, JsonIsStable) {
  absl::StatusOr<ClusterStatus> s = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(s.ok()) << s.status();
  nlohmann::json j = StreamedJson(*s);
  EXPECT_EQ(j["version"], 1);
  for (const char* key : {"server", "time", "nodes", "pending", "queues", "totals", "problems"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const nlohmann::json& g0 = j["nodes"][0]["gpus"][0];
  EXPECT_EQ(g0["memory_granted_mib"], 12 * kGi);
  EXPECT_EQ(g0["pods"][0]["pod"], "ns/p1");
  EXPECT_EQ(g0["pods"][0]["compute_milli"], 250);
  EXPECT_EQ(j["nodes"][0]["gpus"][2]["healthy"], false);
  EXPECT_EQ(j["pending"][1]["gang"], "g");
  EXPECT_EQ(j["pending"][0]["gang"], nullptr);
  EXPECT_EQ(j["totals"]["stranded_too_small_mib"], 4 * kGi);
  EXPECT_EQ(j["queues"][1]["name"], "train");
}

TEST(Status, ScaleUpSignalFromTheScheduler) {
  nlohmann::json waiting = PodObject("ns", "big").Limit("tessera.dev/gpu", "8").Json();
  waiting["status"]["conditions"] = {
      {{"type", "PodScheduled"}, {"status", "False"}, {"message", "no node has 8 free GPUs"}},
      {{"type", "tessera.dev/ScaleUp"},
       {"status", "True"},
       {"reason", "NodesWouldHelp"},
       {"message", "adding 1 node of template h100 (8 GPUs) would let it run"}}};
  ClusterSnapshot snap = ClusterSnapshot::FromObjects(
      {NodeObject("a").Gpus(4).Json()},
      {waiting, PodObject("ns", "small").Limit("tessera.dev/gpu", "1").Json()});
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->pending.size(), 2u);
  EXPECT_EQ(s->pending[0].pod, "ns/big");
  EXPECT_EQ(s->pending[0].reason, "no node has 8 free GPUs");
  EXPECT_EQ(s->pending[0].scale_up, "adding 1 node of template h100 (8 GPUs) would let it run");
  EXPECT_EQ(s->pending[1].scale_up, "");
  nlohmann::json j = StreamedJson(*s);
  EXPECT_EQ(j["pending"][0]["scale_up"], s->pending[0].scale_up);
  EXPECT_EQ(j["pending"][1]["scale_up"], nullptr);
  std::string text = RenderStatusText(*s);
  EXPECT_THAT(text, HasSubstr("SCALE-UP SIGNAL"));
  EXPECT_THAT(text, HasSubstr("ns/big  adding 1 node of template h100 (8 GPUs) would let it run"));
  // Without any signal, no section.
  absl::StatusOr<ClusterStatus> plain = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(RenderStatusText(*plain), ::testing::Not(HasSubstr("SCALE-UP")));
}

// Reservations as the scheduler writes them in the waiting pods' condition tessera.dev/Reserved:
// one row per owner (a gang's members together), the bound pod's stale condition unread, an
// unreadable one shown with why; the --namespace filter applies.
TEST(Status, ReservationsFromThePodsConditions) {
  auto reserved = [](PodObject p, const std::string& message, const std::string& since) {
    nlohmann::json j = p.Json();
    j["status"]["conditions"] = {{{"type", "PodScheduled"}, {"status", "False"}},
                                 {{"type", "tessera.dev/Reserved"},
                                  {"status", "True"},
                                  {"reason", "RoomReserved"},
                                  {"message", message},
                                  {"lastTransitionTime", since}}};
    return j;
  };
  // now: 2026-03-01T10:05:00Z
  const std::string gang =
      "room reserved for gang ml/train: node a GPUs 0,1,2,3; node b GPUs 0,1; expected start "
      "2026-03-01T10:45:00Z";
  std::vector<nlohmann::json> pods = {
      reserved(PodObject("ml", "t-0").Limit("tessera.dev/gpu", "1").Gang("train", 6), gang,
               "2026-03-01T10:03:00Z"),
      reserved(PodObject("ml", "t-1").Limit("tessera.dev/gpu", "1").Gang("train", 6), gang,
               "2026-03-01T10:03:00Z"),
      reserved(PodObject("ns", "big").Limit("tessera.dev/gpu", "2"),
               "room reserved for pod ns/big: node b GPUs 2,3; expected start "
               "2026-03-01T10:04:00Z",
               "2026-03-01T09:05:00Z"),
      reserved(PodObject("ns", "bad").Limit("tessera.dev/gpu", "2"), "held somewhere",
               "2026-03-01T10:04:00Z"),
      // Bound: the reservation ended when it started (the condition is stale).
      reserved(PodObject("ns", "ran")
                   .Limit("tessera.dev/gpu", "1")
                   .Assigned(Grant("a", 4, 80 * kGi, 1000, true)),
               "room reserved for pod ns/ran: node a GPUs 4; expected start 2026-03-01T10:00:00Z",
               "2026-03-01T09:00:00Z"),
      PodObject("ns", "plain").Limit("tessera.dev/gpu", "1").Json(),
  };
  ClusterSnapshot snap = ClusterSnapshot::FromObjects(
      {NodeObject("a").Gpus(8).Json(), NodeObject("b").Gpus(4).Json()}, pods);
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, At());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->reservations.size(), 3u);
  // By expected start: the unreadable one has none (first), then ns/big (10:04), then the gang.
  const ReservationStatus& bad = s->reservations[0];
  EXPECT_EQ(bad.owner, "ns/bad");
  EXPECT_THAT(bad.error, HasSubstr("does not start"));
  const ReservationStatus& big = s->reservations[1];
  EXPECT_FALSE(big.gang);
  EXPECT_EQ(big.owner, "ns/big");
  EXPECT_EQ(big.held_seconds, 3600);
  EXPECT_EQ(big.starts_in_seconds, -60);
  const ReservationStatus& g = s->reservations[2];
  EXPECT_TRUE(g.gang);
  EXPECT_EQ(g.owner, "ml/train");
  EXPECT_THAT(g.pods, ::testing::ElementsAre("ml/t-0", "ml/t-1"));
  ASSERT_EQ(g.sites.size(), 2u);
  EXPECT_EQ(g.sites[1].node, "b");
  EXPECT_THAT(g.sites[1].gpus, ::testing::ElementsAre(0, 1));
  EXPECT_EQ(g.since, "2026-03-01T10:03:00Z");
  EXPECT_EQ(g.held_seconds, 120);
  EXPECT_EQ(g.expected_start, "2026-03-01T10:45:00Z");
  EXPECT_EQ(g.starts_in_seconds, 2400);

  const std::string text = RenderStatusText(*s);
  EXPECT_THAT(text, HasSubstr("RESERVATIONS (3;"));
  EXPECT_THAT(text,
              ::testing::ContainsRegex("gang ml/train +2 +a GPUs 0-3; b GPUs 0,1 +2m ago +in 40m "
                                       "\\(2026-03-01T10:45:00Z\\)"));
  EXPECT_THAT(text, ::testing::ContainsRegex("pod ns/big +1 +b GPUs 2,3 +60m ago +overdue 60s"));
  EXPECT_THAT(text,
              ::testing::ContainsRegex("pod ns/bad +1 +\\(cannot be read: .*\\) +60s ago +\\?"));
  EXPECT_THAT(text, Not(HasSubstr("pod ns/ran")));  // bound: its condition is not read

  nlohmann::json j = StreamedJson(*s);
  ASSERT_EQ(j["reservations"].size(), 3u);
  const nlohmann::json& jg = j["reservations"][2];
  EXPECT_EQ(jg["owner"], "ml/train");
  EXPECT_EQ(jg["kind"], "gang");
  EXPECT_EQ(jg["pods"], nlohmann::json::array({"ml/t-0", "ml/t-1"}));
  EXPECT_EQ(jg["where"][0], nlohmann::json({{"node", "a"}, {"gpus", {0, 1, 2, 3}}}));
  EXPECT_EQ(jg["since"], "2026-03-01T10:03:00Z");
  EXPECT_EQ(jg["expected_start"], "2026-03-01T10:45:00Z");
  EXPECT_EQ(jg["starts_in_seconds"], 2400);
  EXPECT_EQ(jg["error"], nullptr);
  EXPECT_EQ(j["reservations"][0]["expected_start"], nullptr);

  // One namespace: only its owners.
  absl::StatusOr<ClusterStatus> ml = ComputeStatus(snap, At("", "ml"));
  ASSERT_TRUE(ml.ok()) << ml.status();
  ASSERT_EQ(ml->reservations.size(), 1u);
  EXPECT_EQ(ml->reservations[0].owner, "ml/train");
  // None: no section, an empty list.
  absl::StatusOr<ClusterStatus> plain = ComputeStatus(Scenario(), At());
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(RenderStatusText(*plain), Not(HasSubstr("RESERVATIONS")));
  EXPECT_EQ(StreamedJson(*plain)["reservations"], nlohmann::json::array());
}

// A namespace-scoped user's view: only its namespace's pods were listed, and no nodes (403). Its
// running GPU pods are listed from their assignments; no node, GPU or total is shown.
TEST(Status, OneNamespaceWithoutNodes) {
  ClusterSnapshot all = Scenario();
  std::vector<std::shared_ptr<const PodInfo>> mine;
  for (const auto& p : all.pods()) {
    if (p->ns == "ns") mine.push_back(p);
  }
  ClusterSnapshot snapshot({}, mine);
  snapshot.pod_namespace = "ns";
  snapshot.nodes_error = "list nodes: GET /api/v1/nodes: HTTP 403 Forbidden";
  StatusOptions o;
  o.ns = "ns";
  absl::StatusOr<ClusterStatus> s = ComputeStatus(snapshot, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->nodes.empty());
  ASSERT_EQ(s->running.size(), 3u);  // p1, p3, p4 (cpu holds no GPU)
  EXPECT_EQ(s->running[0].pod, "ns/p1");
  EXPECT_EQ(s->running[0].node, "a");
  EXPECT_EQ(s->running[0].gpus[0].grant.memory_mib, 4 * kGi);
  EXPECT_EQ(s->running[1].queue, "train");
  const std::string text = RenderStatusText(*s);
  EXPECT_THAT(text, HasSubstr("only namespace ns's pods were listed"));
  EXPECT_THAT(text, HasSubstr("Nodes cannot be read (list nodes: GET /api/v1/nodes: HTTP 403"));
  EXPECT_THAT(text, HasSubstr("RUNNING GPU PODS (3, namespace ns)"));
  EXPECT_THAT(text, HasSubstr("ns/p3  a     train    GPU 1 (whole)"));
  EXPECT_THAT(text, HasSubstr("ns/p1  a     default  GPU 0 4Gi 25%"));
  EXPECT_THAT(text, HasSubstr("PENDING GPU PODS"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("TOTALS")));
  nlohmann::json j = StreamedJson(*s);
  EXPECT_EQ(j["pods_namespace"], "ns");
  EXPECT_EQ(j["running"][1]["gpus"][0]["exclusive"], true);
  EXPECT_EQ(j["running"][0]["gpus"][0]["compute_milli"], 250);
  EXPECT_THAT(j["nodes_error"].get<std::string>(), HasSubstr("403"));
}

TEST(Status, Bar) {
  EXPECT_EQ(Bar(0, 100, 4), "[....]");
  EXPECT_EQ(Bar(1, 100, 4), "[#...]");  // anything granted shows
  EXPECT_EQ(Bar(100, 100, 4), "[####]");
  EXPECT_EQ(Bar(150, 100, 4), "[####]");
  EXPECT_EQ(Bar(5, 0, 4), "[....]");
}

}  // namespace
}  // namespace tessera::k8s
