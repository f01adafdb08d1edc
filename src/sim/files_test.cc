// Cluster and workload files: what they accept, and every class of bad input with the file,
// line and what was expected.
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/cluster_file.h"
#include "sim/scenario.h"
#include "sim/workload_file.h"

namespace tessera::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string ClusterError(const std::string& yaml) {
  absl::StatusOr<ClusterFile> f = ParseClusterYaml(yaml, "c.yaml");
  EXPECT_FALSE(f.ok()) << yaml;
  return f.ok() ? "" : std::string(f.status().message());
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

std::string WorkloadError(const std::string& yaml) {
  absl::StatusOr<Workload> w = ParseWorkloadYaml(yaml, "w.yaml");
  EXPECT_FALSE(w.ok()) << yaml;
  return w.ok() ? "" : std::string(w.status().message());
}

TEST(ClusterFile, ReadsNodesCountsProfilesAndLabels) {
  absl::StatusOr<ClusterFile> f = ParseClusterYaml(R"(
nodes:
  - name: dgx
    count: 2
    profile: dgx-a100
    labels: {tessera.dev/rack: r1}
  - name: small
    cpu: 500m
    memory: 1.5Gi
    gpus: {model: T4, count: 4, memory: 15Gi}
  - name: cpu-only
    cpu: 64
    memory: 256Gi
)",
                                                   "c.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->nodes.size(), 4u);
  EXPECT_EQ(f->nodes[0].name, "dgx-0");
  EXPECT_EQ(f->nodes[1].name, "dgx-1");
  EXPECT_EQ(f->nodes[0].gpu_count(), 8);
  EXPECT_EQ(f->nodes[0].links.at(0, 7).kind, core::LinkKind::kNvLink);
  EXPECT_EQ(f->nodes[0].labels.at("tessera.dev/rack"), "r1");
  EXPECT_EQ(f->nodes[2].cpu_milli, 500);
  EXPECT_EQ(f->nodes[2].memory_mib, 1536);
  EXPECT_EQ(f->nodes[2].gpus[3].memory_mib, 15 * 1024);
  EXPECT_EQ(f->nodes[2].links.at(0, 1).kind, core::LinkKind::kPix);
  EXPECT_EQ(f->nodes[3].gpu_count(), 0);
  EXPECT_EQ(f->levels.size(), 4u);
}

TEST(ClusterFile, NvlinkTraysShareADomainLabel) {
  absl::StatusOr<ClusterFile> f =
      ParseClusterYaml("nodes:\n  - {name: rack-a, count: 3, profile: gb200-nvl72-tray}\n", "c");
  ASSERT_TRUE(f.ok()) << f.status();
  for (const core::NodeSpec& n : f->nodes) {
    EXPECT_EQ(n.labels.at("tessera.dev/nvlink-domain"), "rack-a");
  }
}

TEST(ClusterFile, BadInputNamesFileLineAndWhatWasExpected) {
  EXPECT_THAT(ClusterError("nodes: [\n"), HasSubstr("c.yaml:"));
  EXPECT_THAT(ClusterError("nodes: [\n"), HasSubstr("malformed YAML"));
  EXPECT_EQ(ClusterError("nodes:\n  - name: a\n    cpu: 4\n    memory: 1Gi\n    gpu: {}\n"),
            "c.yaml:5:5: unknown key \"gpu\" in a node (expected one of: name, count, cpu, "
            "memory, labels, gpus, profile, topology, mig, inventory, cordoned)");
  EXPECT_EQ(ClusterError("nodes:\n  - name: a\n    cpu: -4\n    memory: 1Gi\n"),
            "c.yaml:3:10: cpu: invalid quantity \"-4\": must not be negative (expected a number "
            "with an optional suffix such as 500m, 4Gi, 2G, 1.5)");
  EXPECT_THAT(ClusterError("nodes:\n  - name: a\n    cpu: lots\n    memory: 1Gi\n"),
              HasSubstr("c.yaml:3:10: cpu: invalid quantity \"lots\""));
  EXPECT_THAT(ClusterError("nodes:\n  - name: a\n    cpu: 4\n"), HasSubstr("missing \"memory\""));
  EXPECT_THAT(
      ClusterError("nodes:\n  - {name: a, cpu: 4, memory: 1Gi, gpus: {model: X1, count: 2}}\n"),
      HasSubstr("missing \"memory\" (tessera does not know how much memory a X1 has"));
  EXPECT_THAT(ClusterError("nodes:\n  - {name: a, profile: dgx-z}\n"),
              HasSubstr("unknown profile \"dgx-z\"; built-in profiles: dgx-a100"));
  EXPECT_THAT(ClusterError("nodes:\n  - {name: a, count: 2, profile: dgx-a100}\n"
                           "  - {name: a-1, profile: dgx-a100}\n"),
              HasSubstr("two nodes are named \"a-1\""));
  EXPECT_THAT(ClusterError(""), HasSubstr("the cluster file is empty"));
  EXPECT_THAT(ClusterError("nodes: []\n"), HasSubstr("the list is empty"));
  EXPECT_THAT(
      ClusterError("nodes:\n  - {name: a, cpu: 4, memory: 1Gi, gpus: {model: T4, count: 65}}\n"),
      HasSubstr("out of range (0..64)"));
  EXPECT_THAT(ClusterError("nodes:\n  - {name: a, cpu: 4, memory: 1Gi, gpus: {model: T4, count: 2, "
                           "interconnect: infiniband}}\n"),
              HasSubstr("\"infiniband\" is not one of: nvswitch, pcie"));
}

TEST(ClusterFile, TopologyTextOverridesLinks) {
  absl::StatusOr<ClusterFile> f = ParseClusterYaml(
      "nodes:\n"
      "  - name: a\n"
      "    cpu: 8\n"
      "    memory: 8Gi\n"
      "    gpus: {model: T4, count: 2}\n"
      "    topology: \"\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\nGPU0\\t X "
      "\\tNV4\\t0-7\\t0\\n"
      "GPU1\\tNV4\\t X \\t0-7\\t0\\n\"\n",
      "c.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->nodes[0].links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 4}));
  EXPECT_EQ(f->nodes[0].gpus[1].cpu_affinity, "0-7");
}

// The form `tessera simulate --from-cluster --save` writes: inventories, cordons, running pods.
TEST(ClusterFile, SnapshotFormReadsBackAndRestores) {
  ClusterFile f;
  core::NodeSpec n;
  n.name = "n";
  n.cpu_milli = 2500;
  n.memory_mib = 24 * 1024;
  n.labels["pool"] = "a b";
  for (int i = 0; i < 2; ++i) {
    core::GpuSpec g;
    g.index = i;
    g.uuid = StrCat("GPU-", i);
    g.model = "A100-80GB";
    g.memory_mib = 81920;
    n.gpus.push_back(g);
  }
  n.links = core::LinkMatrix::AllNvLink(2, 12);
  f.nodes.push_back(n);
  f.levels = core::DefaultTopologyLevels();
  f.cordoned = {"n"};
  f.health["n"] = {records::GpuHealth{}, records::GpuHealth{false, {79}, "XID 79"}};
  RunningPod p;
  p.name = "ns/p";
  p.cpu_milli = 500;
  p.memory_mib = 1024;
  p.assignment.node = "n";
  records::AssignedGpu a;
  a.grant = core::GpuGrant{1, 4096, 250, false, {}};
  a.uuid = "GPU-1";
  p.assignment.gpus.push_back(a);
  f.running.push_back(p);
  absl::StatusOr<ClusterFile> back = ParseClusterYaml(ClusterFileToYaml(f), "saved.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << ClusterFileToYaml(f);
  ExpectSameNodes(back->nodes, f.nodes);
  EXPECT_EQ(back->cordoned, f.cordoned);
  EXPECT_EQ(back->running, f.running);
  EXPECT_EQ(back->health, f.health);

  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(back->nodes);
  ASSERT_TRUE(cluster.ok());
  absl::StatusOr<StartState> start = ResolveStart(*cluster, *back);
  ASSERT_TRUE(start.ok()) << start.status();
  ASSERT_EQ(start->running.size(), 1u);
  EXPECT_EQ(start->running[0].second.gpus[0].memory_mib, 4096);
  EXPECT_EQ(start->running[0].second.cpu_milli, 500);
  EXPECT_EQ(start->cordoned.size(), 1u);
}

TEST(ClusterFile, SnapshotFormBadInput) {
  const std::string node = "nodes:\n  - {name: n, cpu: 1, memory: 1Gi}\n";
  EXPECT_THAT(
      ClusterError(node + "running:\n  - {pod: p, node: m}\n"),
      AllOf(HasSubstr("c.yaml:4:"), HasSubstr("running pod p: node \"m\" is not in nodes")));
  EXPECT_THAT(ClusterError(node + "running:\n  - {pod: p, node: n}\n  - {pod: p, node: n}\n"),
              HasSubstr("two running pods are named \"p\""));
  EXPECT_THAT(ClusterError(node + "running:\n  - {pod: p}\n"), HasSubstr("needs \"pod\""));
  EXPECT_THAT(ClusterError(node + "running:\n  - {pod: p, node: n, assignment: '{\"version\": 1, "
                                  "\"node\": \"x\", \"gpus\": []}'}\n"),
              HasSubstr("assignment: names node \"x\" but the pod's node is \"n\""));
  EXPECT_THAT(ClusterError("nodes:\n  - {name: n, cpu: 1, memory: 1Gi, inventory: '{nope'}\n"),
              AllOf(HasSubstr("c.yaml:2:"), HasSubstr("inventory:")));
  EXPECT_THAT(ClusterError("nodes:\n  - {name: n, cpu: 1, memory: 1Gi, profile: dgx-a100, "
                           "inventory: '{}'}\n"),
              HasSubstr("give either \"inventory\" or \"profile\""));
  EXPECT_THAT(ClusterError("nodes:\n  - {name: n, cpu: 1, memory: 1Gi, cordoned: maybe}\n"),
              HasSubstr("cordoned: expected true or false"));
}

TEST(ClusterFile, AddProfileNodes) {
  absl::StatusOr<ClusterFile> f =
      ParseClusterYaml("nodes:\n  - {name: hgx-h100-added-0, cpu: 1, memory: 1Gi}\n", "c.yaml");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(AddProfileNodes(&*f, "hgx-h100", 2).ok());
  ASSERT_EQ(f->nodes.size(), 3u);
  EXPECT_EQ(f->nodes[1].name, "hgx-h100-added-1");
  EXPECT_EQ(f->nodes[2].name, "hgx-h100-added-2");
  EXPECT_EQ(f->nodes[2].gpu_count(), 8);
  EXPECT_THAT(std::string(AddProfileNodes(&*f, "nope", 1).message()), HasSubstr("nope"));
  EXPECT_FALSE(AddProfileNodes(&*f, "hgx-h100", 0).ok());
}

TEST(WorkloadFile, ReadsEveryAskKind) {
  absl::StatusOr<Workload> w = ParseWorkloadYaml(R"(
jobs:
  - {name: share, replicas: 3, cpu: 500m, memory: 1Gi, gpu: {memory: 4Gi, compute: 25}}
  - {name: whole, gpu: {count: 2, topology: nvlink, mode: required}, model: [A100-80GB, H100-80GB]}
  - {name: frac, gpu: {fraction: 0.25}, priority: 7}
  - {name: cpu, cpu: 2}
  - {name: train, replicas: 16, gpu: {count: 1}, gang: {size: 8, topology: rack}}
)",
                                                 "w.yaml");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->jobs.size(), 5u);
  EXPECT_EQ(w->jobs[0].pod.gpu.kind, core::GpuAsk::Kind::kShare);
  EXPECT_EQ(w->jobs[0].pod.gpu.memory_mib, 4096);
  EXPECT_EQ(w->jobs[0].pod.gpu.compute_milli, 250);
  EXPECT_EQ(w->jobs[0].pod.cpu_milli, 500);
  EXPECT_EQ(w->jobs[1].pod.gpu.count, 2);
  EXPECT_EQ(w->jobs[1].pod.gpu.topology, core::GpuTopology::kNvLink);
  EXPECT_TRUE(w->jobs[1].pod.gpu.topology_required);
  EXPECT_EQ(w->jobs[1].pod.gpu_models.size(), 2u);
  EXPECT_EQ(w->jobs[2].pod.gpu.fraction_milli, 250);
  EXPECT_EQ(w->jobs[2].pod.priority, 7);
  EXPECT_EQ(w->jobs[3].pod.gpu.kind, core::GpuAsk::Kind::kNone);
  std::vector<core::PodRequest> pods = ExpandJob(w->jobs[4]);
  ASSERT_EQ(pods.size(), 16u);
  EXPECT_EQ(pods[0].name, "train-0");
  EXPECT_EQ(pods[15].name, "train-15");
  EXPECT_EQ(pods[7].gang->name, "train-g0");
  EXPECT_EQ(pods[8].gang->name, "train-g1");
  EXPECT_EQ(pods[8].gang->level, "rack");
  EXPECT_TRUE(pods[8].gang->required);
}

TEST(WorkloadFile, BadInputNamesFileLineAndWhatWasExpected) {
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    gpu: {count: 1, memory: 4Gi}\n"),
              HasSubstr("w.yaml:3:10: gpu: give exactly one of count"));
  EXPECT_THAT(
      WorkloadError("jobs:\n  - name: a\n    gpu: {memory: -4Gi}\n"),
      HasSubstr("w.yaml:3:19: gpu.memory: invalid quantity \"-4Gi\": must not be negative"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    gpu: {memory: 4GB}\n"),
              HasSubstr("unknown suffix \"GB\""));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    gpu: {compute: 150}\n"),
              HasSubstr("gpu.compute (percent): 150 is out of range (1..100)"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    replicas: 4\n    gpu: {count: 1}\n"
                            "    gang: {size: 8}\n"),
              HasSubstr("w.yaml:5:18: gang.size: 8 is larger than the job's 4 replicas"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    replicas: 6\n    gang: {size: 4}\n"),
              HasSubstr("6 replicas do not split into gangs of 4"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    replica: 4\n"),
              HasSubstr("unknown key \"replica\" in a job"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    gpu: {fraction: 1.5}\n"),
              HasSubstr("must be above 0 and below 1"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    gpu: {fraction: half}\n"),
              HasSubstr("is not a number between 0 and 1"));
  EXPECT_THAT(WorkloadError("jobs:\n  - {name: a}\n  - {name: a}\n"),
              HasSubstr("two jobs are named \"a\" (line 2)"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    gpu: {count: 1, topology: infiniband}\n"),
              HasSubstr("not one of: nvlink, pcie-switch, numa, node"));
  EXPECT_THAT(WorkloadError("jobs: {a: 1}\n"), HasSubstr("jobs: expected a list"));
  EXPECT_THAT(WorkloadError("\n"), HasSubstr("the workload file is empty"));
  EXPECT_THAT(WorkloadError("jobs:\n  - name: a\n    replicas: two\n"),
              HasSubstr("\"two\" is not a whole number"));
}

TEST(WorkloadFile, ValidatedAgainstTheCluster) {
  absl::StatusOr<ClusterFile> c =
      ParseClusterYaml("nodes:\n  - {name: a, profile: dgx-a100}\n", "c.yaml");
  ASSERT_TRUE(c.ok());
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(c->nodes);
  ASSERT_TRUE(cluster.ok());
  absl::StatusOr<Workload> big =
      ParseWorkloadYaml("jobs:\n  - name: big\n    gpu: {memory: 96Gi}\n", "w.yaml");
  ASSERT_TRUE(big.ok());
  absl::Status s = ValidateWorkload(*cluster, c->levels, *big, "w.yaml");
  EXPECT_EQ(s.message(),
            "w.yaml:2: job big: gpu.memory 96Gi is larger than any GPU of the cluster (the "
            "largest has 80Gi)");
  absl::StatusOr<Workload> level = ParseWorkloadYaml(
      "jobs:\n  - {name: g, replicas: 2, gpu: {count: 1}, gang: {topology: pod}}\n", "w.yaml");
  ASSERT_TRUE(level.ok());
  EXPECT_THAT(std::string(ValidateWorkload(*cluster, c->levels, *level, "w.yaml").message()),
              HasSubstr("gang.topology \"pod\" is not a topology level of the cluster (levels: "
                        "nvlink-domain, rack, block, zone)"));
}

}  // namespace
}  // namespace tessera::sim
