// Topology in the simulator: MIG and topology in the cluster and workload files, and the example
// of examples/topology/ where tessera's topology awareness shows against the topology-blind
// whole-gpu baseline.
#include "core/model/cluster.h"
#include "core/policy/policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/cluster_file.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/workload_file.h"

namespace tessera::sim {
namespace {

using ::testing::HasSubstr;

std::string ClusterError(const std::string& yaml) {
  absl::StatusOr<ClusterFile> f = ParseClusterYaml(yaml, "c.yaml");
  EXPECT_FALSE(f.ok()) << yaml;
  return f.ok() ? "" : std::string(f.status().message());
}

TEST(TopologyFiles, MigInTheClusterFile) {
  absl::StatusOr<ClusterFile> f = ParseClusterYaml(R"(
nodes:
  - name: all
    profile: hgx-h100
    mig: true
  - name: some
    profile: dgx-a100
    mig: {gpus: [1, 3], layout: [3g.40gb@4, 2g.20gb, 1g.10gb]}
)",
                                                   "c.yaml");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->nodes[0].gpus[7].mig_enabled);
  EXPECT_TRUE(f->nodes[0].gpus[7].mig_layout.empty());
  const core::NodeSpec& some = f->nodes[1];
  EXPECT_FALSE(some.gpus[0].mig_enabled);
  ASSERT_TRUE(some.gpus[3].mig_enabled);
  const core::MigModel& m = *core::FindMigModel("A100-80GB");
  std::vector<std::string> names;
  for (core::MigPlacement p : some.gpus[3].mig_layout)
    names.push_back(core::MigPlacementName(m, p));
  // 3g at 4 as written; 2g at the lowest start it may take (0); 1g.10gb after it (2).
  EXPECT_THAT(names, ::testing::ElementsAre("3g.40gb@4", "2g.20gb@0", "1g.10gb@2"));
  EXPECT_EQ(some.nics.size(), 10u);  // profiles bring their NICs
  absl::StatusOr<core::Cluster> c = core::Cluster::Create(f->nodes);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mig_mask(core::NodeId(1)), 0b1010u);

  EXPECT_THAT(ClusterError("nodes:\n  - {name: a, profile: l40s-4gpu, mig: true}\n"),
              HasSubstr("c.yaml:2:40: mig: tessera has no MIG profiles for L40S-48GB"));
  EXPECT_THAT(
      ClusterError("nodes:\n  - name: a\n    profile: dgx-a100\n    mig: {layout: [1g.5gb]}\n"),
      HasSubstr("c.yaml:4:20: mig.layout: \"1g.5gb\" is not a A100-80GB MIG profile"));
  EXPECT_THAT(
      ClusterError("nodes:\n  - name: a\n    profile: dgx-a100\n    mig: {layout: [4g.40gb@2]}\n"),
      HasSubstr("mig.layout: 4g.40gb cannot start at slice 2 on A100-80GB (allowed starts: 0)"));
  EXPECT_THAT(
      ClusterError(
          "nodes:\n  - name: a\n    profile: dgx-a100\n    mig: {layout: [7g.80gb, 1g.10gb]}\n"),
      HasSubstr("mig.layout: no free start left for 1g.10gb"));
  EXPECT_THAT(ClusterError("nodes:\n  - name: a\n    profile: dgx-a100\n    mig: {gpus: [8]}\n"),
              HasSubstr("mig.gpus: 8 is out of range (0..7)"));
  EXPECT_THAT(ClusterError("nodes:\n  - name: a\n    profile: dgx-a100\n    mig: maybe\n"),
              HasSubstr("mig: expected true, false, or {gpus: ..., layout: [...]}"));
}

TEST(TopologyFiles, MigAndTopologyInTheWorkloadFile) {
  absl::StatusOr<Workload> w = ParseWorkloadYaml(R"(
jobs:
  - {name: slice, gpu: {mig: 1g.10gb}, model: H100-80GB}
  - {name: node, gpu: {count: 4, topology: node, mode: required}}
  - {name: pix, gpu: {count: 2, topology: pcie-switch}}
)",
                                                 "w.yaml");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->jobs[0].pod.gpu.kind, core::GpuAsk::Kind::kMig);
  EXPECT_EQ(w->jobs[0].pod.gpu.mig_profile, "1g.10gb");
  EXPECT_EQ(w->jobs[1].pod.gpu.topology, core::GpuTopology::kNode);
  EXPECT_TRUE(w->jobs[1].pod.gpu.topology_required);
  EXPECT_EQ(w->jobs[2].pod.gpu.topology, core::GpuTopology::kPcieSwitch);
  EXPECT_FALSE(w->jobs[2].pod.gpu.topology_required);
  absl::StatusOr<Workload> bad =
      ParseWorkloadYaml("jobs:\n  - {name: x, gpu: {mig: 2g.11gb}}\n", "w.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("w.yaml:2:26: gpu.mig: \"2g.11gb\" is not a MIG profile tessera knows"));
  absl::StatusOr<Workload> both =
      ParseWorkloadYaml("jobs:\n  - {name: x, gpu: {mig: 1g.10gb, count: 1}}\n", "w.yaml");
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(std::string(both.status().message()), HasSubstr("give exactly one of"));
}

std::vector<ScenarioResult> RunExample(const std::vector<std::string>& policies) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR) + "/examples/topology/";
  absl::StatusOr<ClusterFile> file = LoadClusterFile(dir + "cluster.yaml");
  EXPECT_TRUE(file.ok()) << file.status();
  static core::Cluster* cluster = nullptr;
  if (!cluster) cluster = new core::Cluster(*core::Cluster::Create(file->nodes));
  absl::StatusOr<Workload> workload = LoadWorkloadFile(dir + "workload.yaml");
  EXPECT_TRUE(workload.ok()) << workload.status();
  EXPECT_TRUE(ValidateWorkload(*cluster, file->levels, *workload, "workload.yaml").ok());
  std::vector<ScenarioResult> out;
  for (const std::string& p : policies) {
    out.push_back(RunScenario(*cluster, file->levels, *workload, *core::CreatePolicy(p, {})));
  }
  return out;
}

double Share(int part, int whole) { return whole ? double(part) / whole : 0; }

TEST(TopologyExample, TesseraBeatsTheTopologyBlindBaseline) {
  std::vector<ScenarioResult> r = RunExample({"whole-gpu", "tessera"});
  const ScenarioResult& blind = r[0];
  const ScenarioResult& tessera = r[1];
  EXPECT_EQ(tessera.pending, 0);
  EXPECT_GT(Share(tessera.multi_gpu_nvlink_pods, tessera.multi_gpu_pods),
            Share(blind.multi_gpu_nvlink_pods, blind.multi_gpu_pods));
  ASSERT_EQ(tessera.gangs.size(), 4u);
  EXPECT_EQ(tessera.gangs_one_domain, 4);
  EXPECT_LT(blind.gangs_one_domain, 4);
  // The 16-GPU gang needs the NVL72 domain: tessera kept it whole.
  EXPECT_TRUE(tessera.gangs[1].placed && tessera.gangs[1].one_nvlink_domain);
  // MIG: ten 1g.10gb reuse idle instances, three 3g.40gb need re-partitioning plans.
  EXPECT_EQ(tessera.mig_pods, 13);
  ASSERT_EQ(tessera.mig_plans.size(), 3u);
  EXPECT_THAT(tessera.mig_plans[0], HasSubstr("medium-infer-0: node mig GPU "));
  EXPECT_THAT(tessera.mig_plans[0], HasSubstr(": destroy idle 1g.10gb@"));
  // The report shows both metrics and the plans.
  std::string table = FormatComparison(r);
  EXPECT_THAT(table, HasSubstr("multi-GPU pods on NVLink"));
  EXPECT_THAT(table, HasSubstr("gangs inside one domain of their level"));
  EXPECT_THAT(table, HasSubstr("MIG re-partitioning plans under tessera"));
}

}  // namespace
}  // namespace tessera::sim
