// The cluster's preflight judged on facts as GatherClusterFacts reads them: a clean cluster,
// then each fault planted. The e2e test plants the same faults on a real API server.
#include "k8s/doctor/cluster_checks.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::NodeObject;

json Pod(const std::string& name, const std::string& role, const std::string& image,
         const std::string& node = "", const std::string& phase = "Running") {
  return {{"metadata", {{"name", name}, {"namespace", "tessera-system"}}},
          {"spec",
           {{"nodeName", node},
            {"containers", {{{"name", "c"}, {"image", image}, {"args", {role, "--x"}}}}}}},
          {"status", {{"phase", phase}}}};
}

ClusterFacts Clean() {
  ClusterFacts f;
  f.server = "https://k:6443";
  f.version = "v1.37.2";
  f.dra_v1_served = true;
  f.feature_gates = std::map<std::string, bool>{{"DRAConsumableCapacity", true},
                                                {"DRAPartitionableDevices", true},
                                                {"DRAExtendedResource", true}};
  f.nodes = {NodeObject("gpu-a").Gpus(2).Label("tessera.dev/gpu-node", "true").Json(),
             NodeObject("cpu-1").Json()};
  f.tessera_namespace =
      json{{"metadata",
            {{"name", "tessera-system"},
             {"labels", {{"pod-security.kubernetes.io/enforce", "privileged"}}}}}};
  f.tessera_pods = {Pod("s-1", "scheduler", "tessera:0.2.0"),
                    Pod("a-1", "agent", "tessera:0.2.0", "gpu-a")};
  return f;
}

const Finding* Find(const DoctorReport& r, const std::string& check, Severity s) {
  for (const Finding& f : r.findings) {
    if (f.check == check && f.severity == s) return &f;
  }
  return nullptr;
}

TEST(ClusterChecks, ACleanClassicCluster) {
  DoctorReport r = CheckCluster(Clean(), {});
  EXPECT_EQ(r.errors(), 0) << RenderDoctorText(r);
  EXPECT_EQ(r.warnings(), 0) << RenderDoctorText(r);
  EXPECT_EQ(Find(r, "dra-api", Severity::kOk), nullptr);  // classic: DRA not checked
  EXPECT_THAT(Find(r, "version-skew", Severity::kOk)->what, HasSubstr("tessera:0.2.0"));
  EXPECT_THAT(Find(r, "inventory", Severity::kOk)->what, HasSubstr("1 GPU nodes"));
}

TEST(ClusterChecks, EachPlantedFaultIsFoundWithItsFix) {
  ClusterFacts f = Clean();
  // Another device plugin on a tessera node, a GPU node without inventory where no agent runs,
  // a node whose inventory is garbage.
  json a = f.nodes[0];
  a["status"]["allocatable"]["nvidia.com/gpu"] = "2";
  f.nodes[0] = a;
  f.nodes.push_back(NodeObject("gpu-b").Label("nvidia.com/gpu.present", "true").Json());
  f.nodes.push_back(NodeObject("gpu-c").RawInventory("{oops").Json());
  f.tessera_namespace =
      json{{"metadata", {{"labels", {{"pod-security.kubernetes.io/enforce", "baseline"}}}}}};
  f.tessera_pods = {Pod("s-1", "scheduler", "tessera:0.2.0", "", "Pending"),
                    Pod("a-1", "agent", "tessera:0.1.0", "gpu-a")};
  DoctorReport r = CheckCluster(f, {});
  const std::string text = RenderDoctorText(r);
  const Finding* plugin = Find(r, "other-device-plugin", Severity::kError);
  ASSERT_NE(plugin, nullptr) << text;
  EXPECT_EQ(plugin->object, "node/gpu-a");
  EXPECT_THAT(plugin->fix,
              HasSubstr("kubectl label node gpu-a nvidia.com/gpu.deploy.device-plugin=false"));
  const Finding* psa = Find(r, "pod-security", Severity::kError);
  ASSERT_NE(psa, nullptr) << text;
  EXPECT_THAT(psa->fix, HasSubstr("pod-security.kubernetes.io/enforce=privileged --overwrite"));
  const Finding* scheduler = Find(r, "components", Severity::kError);
  ASSERT_NE(scheduler, nullptr) << text;
  EXPECT_THAT(scheduler->what, HasSubstr("none of the 1 scheduler pods is running"));
  EXPECT_THAT(Find(r, "version-skew", Severity::kWarning)->what,
              HasSubstr("tessera:0.1.0, tessera:0.2.0"));
  int inventory_errors = 0;
  for (const Finding& x : r.findings) {
    if (x.check != "inventory" || x.severity != Severity::kError) continue;
    ++inventory_errors;
    if (x.object == "node/gpu-b") {
      EXPECT_THAT(x.fix, HasSubstr("tessera.dev/gpu-node=true"));
    }
    if (x.object == "node/gpu-c") {
      EXPECT_THAT(x.what, HasSubstr("cannot be read"));
    }
  }
  EXPECT_EQ(inventory_errors, 2) << text;

  // No label at all: a warning (the cluster's default level decides); no namespace: an error.
  f.tessera_namespace = json{{"metadata", {{"name", "tessera-system"}}}};
  EXPECT_NE(Find(CheckCluster(f, {}), "pod-security", Severity::kWarning), nullptr);
  f.tessera_namespace.reset();
  EXPECT_NE(Find(CheckCluster(f, {}), "namespace", Severity::kError), nullptr);
}

TEST(ClusterChecks, DraModeNeedsTheApiGatesAndClasses) {
  ClusterFacts f = Clean();
  f.device_classes = {"gpu.tessera.dev", "gpu-share.tessera.dev", "mig.tessera.dev"};
  f.slice_nodes = {"gpu-a"};
  f.nodes[0] = NodeObject("gpu-a").Label("tessera.dev/gpu-node", "true").Json();  // no annotation
  DoctorReport clean = CheckCluster(f, {});  // auto: DRA, from the classes
  EXPECT_EQ(clean.errors(), 0) << RenderDoctorText(clean);
  EXPECT_NE(Find(clean, "dra-api", Severity::kOk), nullptr);

  f.version = "v1.33.4";
  f.dra_v1_served = false;
  DoctorReport old = CheckCluster(f, {});
  EXPECT_NE(Find(old, "kubernetes-version", Severity::kError), nullptr);
  EXPECT_NE(Find(old, "dra-api", Severity::kError), nullptr);

  f = Clean();
  f.device_classes = {"gpu.tessera.dev"};
  (*f.feature_gates)["DRAConsumableCapacity"] = false;
  f.slice_nodes = {};
  DoctorReport gates = CheckCluster(f, {.mode = "dra"});
  const Finding* gate = Find(gates, "feature-gates", Severity::kWarning);
  ASSERT_NE(gate, nullptr) << RenderDoctorText(gates);
  EXPECT_THAT(gate->fix, HasSubstr("--feature-gates=DRAConsumableCapacity=true"));
  EXPECT_THAT(Find(gates, "device-classes", Severity::kError)->what,
              HasSubstr("gpu-share.tessera.dev, mig.tessera.dev"));
  // In DRA mode a node publishes through ResourceSlices: none here.
  EXPECT_NE(Find(gates, "inventory", Severity::kError), nullptr);
  f.feature_gates.reset();
  f.feature_gates_error = "GET /metrics: HTTP 403";
  EXPECT_THAT(Find(CheckCluster(f, {.mode = "dra"}), "feature-gates", Severity::kWarning)->what,
              HasSubstr("HTTP 403"));
}

TEST(ClusterChecks, FeatureGatesFromMetrics) {
  auto gates = ParseFeatureGates(
      "# HELP kubernetes_feature_enabled ...\n"
      "kubernetes_feature_enabled{name=\"DRAConsumableCapacity\",stage=\"BETA\"} 1\n"
      "kubernetes_feature_enabled{name=\"DRAExtendedResource\",stage=\"ALPHA\"} 0\n"
      "other_metric{name=\"x\"} 1\n");
  EXPECT_EQ(gates, (std::map<std::string, bool>{{"DRAConsumableCapacity", true},
                                                {"DRAExtendedResource", false}}));
}

}  // namespace
}  // namespace tessera::k8s
