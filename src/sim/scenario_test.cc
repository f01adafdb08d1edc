// The reality check, end to end through the embedded files: the figures the README promises.
#include "sim/scenario.h"

#include "core/policy/policy.h"
#include "gtest/gtest.h"
#include "sim/cluster_file.h"
#include "sim/reality_check.h"
#include "sim/report.h"

namespace tessera::sim {
namespace {

class RealityCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ClusterFile> f = ParseClusterYaml(RealityCheckClusterYaml(), "embedded");
    ASSERT_TRUE(f.ok()) << f.status();
    file_ = *f;
    absl::StatusOr<core::Cluster> c = core::Cluster::Create(file_.nodes);
    ASSERT_TRUE(c.ok());
    cluster_ = std::make_unique<core::Cluster>(*std::move(c));
  }
  ScenarioResult Run(int part, const char* policy) {
    absl::StatusOr<Workload> w = ParseWorkloadYaml(RealityCheckParts()[part].workload_yaml, "p");
    EXPECT_TRUE(w.ok()) << w.status();
    return RunScenario(*cluster_, file_.levels, *w, *core::CreatePolicy(policy, {}));
  }
  ClusterFile file_;
  std::unique_ptr<core::Cluster> cluster_;
};

TEST_F(RealityCheck, Part1WholeGpuRunsTenTesseraRunsAllTwentyOnTheOnePcieGpu) {
  ScenarioResult whole = Run(0, "whole-gpu");
  EXPECT_EQ(whole.placed, 10);
  EXPECT_EQ(whole.pending, 10);
  EXPECT_EQ(whole.gpus_in_use, 10);
  EXPECT_EQ(whole.gpu_memory_requested_mib, 10 * 4096);
  EXPECT_EQ(whole.gpu_memory_allocated_mib, 10 * 81920);

  ScenarioResult t = Run(0, "tessera");
  EXPECT_EQ(t.placed, 20);
  EXPECT_EQ(t.gpus_in_use, 1);
  for (const PodOutcome& p : t.pods) {
    EXPECT_EQ(cluster_->node(p.result.placement.node).name, "pcie-server");
    EXPECT_EQ(p.result.placement.gpus.size(), 1u);
    EXPECT_EQ(p.result.placement.gpus[0].gpu, t.pods[0].result.placement.gpus[0].gpu);
  }
}

TEST_F(RealityCheck, Part2TheGangLandsOnTheEightNvswitchGpus) {
  ScenarioResult t = Run(1, "tessera");
  ASSERT_EQ(t.gangs.size(), 1u);
  EXPECT_TRUE(t.gangs[0].placed);
  EXPECT_TRUE(t.gangs[0].one_nvlink_domain);
  EXPECT_EQ(t.gangs[0].where, "nvswitch-server x8");
  ScenarioResult whole = Run(1, "whole-gpu");
  EXPECT_EQ(whole.placed, 8);
  EXPECT_FALSE(whole.gangs[0].one_nvlink_domain);
}

TEST_F(RealityCheck, Part3TesseraPlacesAllTwentyEight) {
  ScenarioResult t = Run(2, "tessera");
  EXPECT_EQ(t.placed, 28);
  EXPECT_EQ(t.pending, 0);
  EXPECT_TRUE(t.gangs[0].one_nvlink_domain);
  ScenarioResult whole = Run(2, "whole-gpu");
  EXPECT_EQ(whole.placed, 10);
  EXPECT_EQ(whole.pending, 18);
}

TEST_F(RealityCheck, JsonHasTheDocumentedShape) {
  ScenarioResult t = Run(0, "tessera");
  nlohmann::json j = ResultToJson(*cluster_, t);
  EXPECT_EQ(j["policy"], "tessera");
  EXPECT_EQ(j["placed"], 20);
  EXPECT_EQ(j["pending"], 0);
  EXPECT_EQ(j["gpus_in_use"], 1);
  ASSERT_EQ(j["placements"].size(), 20u);
  EXPECT_EQ(j["placements"][0]["pod"], "inference-0");
  EXPECT_EQ(j["placements"][0]["node"], "pcie-server");
  EXPECT_EQ(j["placements"][0]["gpus"][0]["memory_mib"], 4096);
  EXPECT_EQ(j["placements"][0]["gpus"][0]["compute_milli"], 0);
  EXPECT_TRUE(j["placements"][0]["gpus"][0].contains("index"));
  EXPECT_TRUE(j["unplaced"].is_array());
  nlohmann::json w = ResultToJson(*cluster_, Run(0, "whole-gpu"));
  ASSERT_EQ(w["unplaced"].size(), 10u);
  EXPECT_EQ(w["unplaced"][0]["pod"], "inference-10");
  EXPECT_FALSE(w["unplaced"][0]["reason"].get<std::string>().empty());
}

}  // namespace
}  // namespace tessera::sim

namespace tessera::sim {
namespace {

// An elastic gang in a workload file starts with as many members as one domain takes (at least
// its min), as the scheduler's does (the same Engine::PlaceElasticGang).
TEST_F(RealityCheck, ElasticGangStartsWithWhatFitsFromItsMin) {
  absl::StatusOr<Workload> w = ParseWorkloadYaml(R"(jobs:
  - name: first
    replicas: 3
    gpu: {count: 1}
    gang: {size: 3, topology: nvlink-domain}
  - name: train
    replicas: 8
    gpu: {count: 1}
    gang: {size: 8, min: 4, topology: nvlink-domain}
  - name: late
    replicas: 4
    gpu: {count: 1}
    gang: {size: 4, min: 2, topology: nvlink-domain}
)",
                                                 "w");
  ASSERT_TRUE(w.ok()) << w.status();
  ScenarioResult t = RunScenario(*cluster_, file_.levels, *w, *core::CreatePolicy("tessera", {}));
  ASSERT_EQ(t.gangs.size(), 3u);
  const GangOutcome& train = t.gangs[1];
  EXPECT_TRUE(train.placed);
  EXPECT_EQ(train.running, 5);
  EXPECT_EQ(train.min, 4);
  EXPECT_EQ(train.where, "nvswitch-server x5");
  EXPECT_TRUE(train.one_domain);
  const GangOutcome& late = t.gangs[2];
  EXPECT_FALSE(late.placed);
  EXPECT_EQ(late.running, 0);
  EXPECT_EQ(t.placed, 8);
  EXPECT_EQ(t.pending, 7);
  std::string text = ResultToJson(*cluster_, t).dump();
  EXPECT_NE(text.find(R"("min":4)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("running":5)"), std::string::npos) << text;

  absl::StatusOr<Workload> bad = ParseWorkloadYaml(R"(jobs:
  - name: t
    replicas: 8
    gang: {size: 8, min: 9}
)",
                                                   "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("gang.min: 9 is more than gang.size 8"),
            std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace tessera::sim
