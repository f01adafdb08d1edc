#include "cli/snapshot_file.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "sim/scenario.h"
#include "sim/workload_file.h"

namespace tessera::cli {
namespace {

using k8s::testing::NodeObject;
using k8s::testing::PodObject;
using ::testing::HasSubstr;

records::Assignment Grant(const std::string& node, int gpu, int64_t memory_mib, bool exclusive) {
  records::Assignment a;
  a.node = node;
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.memory_mib = memory_mib;
  g.grant.compute_milli = exclusive ? 1000 : 0;
  g.grant.exclusive = exclusive;
  g.uuid = StrCat("GPU-", node, "-", gpu);
  a.gpus.push_back(g);
  return a;
}

// NodeSpec has no operator==: the fields a cluster file carries, compared one by one.
void ExpectSameNodes(const std::vector<core::NodeSpec>& a, const std::vector<core::NodeSpec>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].cpu_milli, b[i].cpu_milli) << a[i].name;
    EXPECT_EQ(a[i].memory_mib, b[i].memory_mib) << a[i].name;
    EXPECT_EQ(a[i].labels, b[i].labels) << a[i].name;
    EXPECT_EQ(a[i].gpus, b[i].gpus) << a[i].name;
    EXPECT_EQ(a[i].links, b[i].links) << a[i].name;
    EXPECT_EQ(a[i].nics, b[i].nics) << a[i].name;
  }
}

// Node a: 2 GPUs, GPU 0 shared by a 40Gi pod, GPU 1 unhealthy; node b: 2 GPUs, cordoned, GPU 0
// held whole; node c: 1 GPU, where a pod's record names another node (the scheduler blocks c).
k8s::ClusterSnapshot Scenario() {
  return k8s::ClusterSnapshot::FromObjects(
      {NodeObject("a").Gpus(2).Label("pool", "x").Unhealthy(1, {79}, "XID 79").Json(),
       NodeObject("b").Gpus(2).NvSwitch().Cordoned().Json(), NodeObject("c").Gpus(1).Json(),
       NodeObject("cpu-only").Json()},
      {PodObject("ns", "s")
           .Limit("tessera.dev/gpu-memory", "40Gi")
           .Request("cpu", "2")
           .Assigned(Grant("a", 0, 40 * 1024, false))
           .Json(),
       PodObject("ns", "w")
           .Limit("tessera.dev/gpu", "1")
           .Assigned(Grant("b", 0, 81920, true))
           .Json(),
       PodObject("ns", "lost")
           .Limit("tessera.dev/gpu-memory", "1Gi")
           .Node("c")
           .Annotation(std::string(records::kAssignmentAnnotation),
                       records::AssignmentToJson(Grant("a", 0, 1024, false)))
           .Json(),
       PodObject("ns", "cpu")
           .Request("cpu", "500m")
           .Request("memory", "1Gi")
           .Node("cpu-only")
           .Scheduler("default-scheduler")
           .Json(),
       PodObject("ns", "pending").Limit("tessera.dev/gpu", "1").Json()});
}

TEST(SnapshotFile, NodesRunningPodsAndCordons) {
  std::vector<k8s::SnapshotProblem> problems;
  sim::ClusterFile f = SnapshotToClusterFile(Scenario(), {}, &problems);
  ASSERT_EQ(f.nodes.size(), 4u);
  EXPECT_EQ(f.nodes[0].name, "a");
  EXPECT_EQ(f.nodes[0].gpu_count(), 2);
  EXPECT_EQ(f.nodes[0].labels.at("pool"), "x");
  EXPECT_EQ(f.nodes[0].gpus[0].uuid, "GPU-a-0");
  EXPECT_EQ(f.nodes[3].gpu_count(), 0);
  EXPECT_EQ(f.cordoned, (std::vector<std::string>{"b", "c"}));
  ASSERT_TRUE(f.health.contains("a"));
  EXPECT_FALSE(f.health["a"][1].healthy);
  // The lost pod keeps its CPU and memory (its GPUs cannot be known); the pending pod holds
  // nothing.
  ASSERT_EQ(f.running.size(), 4u);
  EXPECT_EQ(f.running[0].name, "ns/cpu");
  EXPECT_EQ(f.running[0].assignment.node, "cpu-only");
  EXPECT_EQ(f.running[0].cpu_milli, 500);
  EXPECT_EQ(f.running[0].memory_mib, 1024);
  EXPECT_TRUE(f.running[0].assignment.gpus.empty());
  EXPECT_EQ(f.running[1].name, "ns/lost");
  EXPECT_EQ(f.running[1].assignment.node, "c");
  EXPECT_TRUE(f.running[1].assignment.gpus.empty());
  EXPECT_EQ(f.running[2].name, "ns/s");
  EXPECT_EQ(f.running[2].cpu_milli, 2000);
  ASSERT_EQ(f.running[2].assignment.gpus.size(), 1u);
  EXPECT_EQ(f.running[2].assignment.gpus[0].grant.memory_mib, 40 * 1024);
  EXPECT_EQ(f.running[3].name, "ns/w");
  EXPECT_TRUE(f.running[3].assignment.gpus[0].grant.exclusive);
  bool told = false;
  for (const k8s::SnapshotProblem& p : problems) {
    told = told || (p.object == "node/c" &&
                    p.message.find("cordoned in the simulation") != std::string::npos);
  }
  EXPECT_TRUE(told);
}

TEST(SnapshotFile, SavedYamlReadsBackEqual) {
  sim::ClusterFile f = SnapshotToClusterFile(Scenario(), {});
  const std::string text = sim::ClusterFileToYaml(f);
  absl::StatusOr<sim::ClusterFile> back = sim::ParseClusterYaml(text, "saved.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  ExpectSameNodes(back->nodes, f.nodes);
  EXPECT_EQ(back->cordoned, f.cordoned);
  EXPECT_EQ(back->running, f.running);
  EXPECT_EQ(back->health, f.health);
  EXPECT_EQ(sim::ClusterFileToYaml(*back), text);
}

TEST(SnapshotFile, SimulationStartsFromWhatRuns) {
  sim::ClusterFile f = SnapshotToClusterFile(Scenario(), {});
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(f.nodes);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<sim::StartState> start = sim::ResolveStart(*cluster, f);
  ASSERT_TRUE(start.ok()) << start.status();
  // Three whole GPUs asked: a's GPU 0 is shared and b is cordoned, so only a's GPU 1 (unhealthy,
  // which the engine does not know yet) and nothing else is free: one fits.
  absl::StatusOr<sim::Workload> w = sim::ParseWorkloadYaml(
      "jobs:\n  - {name: train, replicas: 3, cpu: 1, memory: 1Gi, "
      "gpu: {count: 1}}\n",
      "w.yaml");
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<sim::ScenarioResult> r =
      sim::RunScenarioFrom(*cluster, f.levels, *start, *w, *core::CreatePolicy("tessera", {}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed, 1);
  EXPECT_EQ(r->pending, 2);
  EXPECT_EQ(r->pods[0].result.placement.gpus[0].gpu, 1);
  EXPECT_EQ(r->gpus_in_use, 3);  // a0 (share), b0 (whole), a1 (the new pod)
}

TEST(SnapshotFile, AddedNodesTakeWhatDidNotFit) {
  sim::ClusterFile f = SnapshotToClusterFile(Scenario(), {});
  ASSERT_TRUE(sim::AddProfileNodes(&f, "dgx-a100", 1).ok());
  EXPECT_EQ(f.nodes.back().name, "dgx-a100-added-0");
  EXPECT_EQ(f.nodes.back().gpu_count(), 8);
  EXPECT_FALSE(sim::AddProfileNodes(&f, "no-such-profile", 1).ok());
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(f.nodes);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<sim::StartState> start = sim::ResolveStart(*cluster, f);
  ASSERT_TRUE(start.ok()) << start.status();
  absl::StatusOr<sim::Workload> w = sim::ParseWorkloadYaml(
      "jobs:\n  - {name: train, replicas: 3, cpu: 1, memory: 1Gi, gpu: {count: 1}}\n", "w.yaml");
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<sim::ScenarioResult> r =
      sim::RunScenarioFrom(*cluster, f.levels, *start, *w, *core::CreatePolicy("tessera", {}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placed, 3);
}

TEST(SnapshotFile, OverCommittedRunningPodsAreAnError) {
  sim::ClusterFile f = SnapshotToClusterFile(Scenario(), {});
  sim::RunningPod twice = f.running[3];  // ns/w holds b's GPU 0 whole
  twice.name = "ns/again";
  f.running.push_back(twice);
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(f.nodes);
  ASSERT_TRUE(cluster.ok());
  absl::StatusOr<sim::StartState> start = sim::ResolveStart(*cluster, f);
  ASSERT_TRUE(start.ok());
  absl::StatusOr<sim::ScenarioResult> r = sim::RunScenarioFrom(
      *cluster, f.levels, *start, sim::Workload{}, *core::CreatePolicy("tessera", {}));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("running pod ns/again on b"));
}

}  // namespace
}  // namespace tessera::cli
