// The Helm chart deploy/helm/tessera against the real API server (one control plane for this
// binary), with Helm built from its Go module by test/helm/build.sh:
//   - helm lint, for the default values and the two value files beside this test;
//   - deploy/*.yaml are exactly what the chart renders (deploy/helm/render.sh --check);
//   - `helm template | kubectl apply --dry-run=server` accepts every object of each value set,
//     and the scheduler accepts each rendered configuration (ParseSchedulerConfig);
//   - a real `helm install` creates the objects and `helm uninstall` removes them.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/config.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

ControlPlane& Cp() { return ControlPlane::Shared(); }

const std::string kChart = StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera");

// The helm binary test/helm/build.sh made for this tree, or "" (the test fails saying so).
std::string Helm() {
  static const std::string helm = [] {
    CommandResult r =
        RunCommand({StrCat(TESSERA_SOURCE_DIR, "/test/helm/build.sh"), "--print-bin-dir"});
    if (!r.ok()) return std::string();
    std::string dir = r.out;
    while (!dir.empty() && (dir.back() == '\n' || dir.back() == ' ')) dir.pop_back();
    return StrCat(dir, "/helm");
  }();
  return helm;
}

class HelmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(Helm().empty()) << "Helm is not built for this tree: run test/helm/build.sh";
    home_ = StrCat(::testing::TempDir(), "/tessera-helm-", getpid());
    std::filesystem::create_directories(home_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(home_);
  }
  // Helm with its caches and configuration in a folder of the test, against this control plane.
  CommandResult RunHelm(std::vector<std::string> args) {
    args.insert(args.begin(), Helm());
    CommandOptions o;
    o.env = {{"HELM_CACHE_HOME", home_ + "/cache"},
             {"HELM_CONFIG_HOME", home_ + "/config"},
             {"HELM_DATA_HOME", home_ + "/data"},
             {"KUBECONFIG", Cp().kubeconfig()}};
    return RunCommand(args, o);
  }
  std::string Template(const std::string& ns, const std::vector<std::string>& values) {
    std::vector<std::string> args = {"template", "tessera", kChart, "--namespace", ns};
    for (const std::string& v : values) {
      args.push_back("-f");
      args.push_back(StrCat(TESSERA_SOURCE_DIR, "/test/helm/", v));
    }
    CommandResult r = RunHelm(args);
    EXPECT_TRUE(r.ok()) << r.err;
    return r.out;
  }
  void CreateNamespace(const std::string& ns) {
    CommandResult r = Cp().Kubectl({"create", "namespace", ns});
    ASSERT_TRUE(r.ok() || r.err.find("AlreadyExists") != std::string::npos) << r.err;
  }
  // Every object of `manifests` through a server-side dry run: the kinds and names it accepted.
  std::set<std::string> DryRun(const std::string& manifests) {
    CommandResult r =
        Cp().Kubectl({"apply", "--dry-run=server", "-o", "name", "-f", "-"}, manifests);
    EXPECT_TRUE(r.ok()) << r.err << "\n" << manifests;
    std::set<std::string> names;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) names.insert(line);
    }
    return names;
  }
  // The config.yaml of the rendered scheduler ConfigMap, through the scheduler's own parser.
  absl::StatusOr<k8s::SchedulerConfig> RenderedConfig(const std::string& manifests,
                                                      const std::string& configmap) {
    CommandResult r =
        Cp().Kubectl({"apply", "--dry-run=client", "-o", "json", "-f", "-"}, manifests);
    if (!r.ok()) return absl::InternalError(r.err);
    json list = json::parse(r.out);
    for (const json& item : list.value("items", json::array({list}))) {
      if (item["kind"] == "ConfigMap" && item["metadata"]["name"] == configmap) {
        return k8s::ParseSchedulerConfig(item["data"]["config.yaml"].get<std::string>(), configmap);
      }
    }
    return absl::NotFoundError(StrCat("no ConfigMap ", configmap, " rendered"));
  }

  std::string home_;
};

TEST_F(HelmTest, Lints) {
  for (const std::vector<std::string>& values : std::vector<std::vector<std::string>>{
           {}, {"values-dra.yaml"}, {"values-scheduler-only.yaml"}}) {
    std::vector<std::string> args = {"lint", "--strict", kChart};
    for (const std::string& v : values) {
      args.push_back("-f");
      args.push_back(StrCat(TESSERA_SOURCE_DIR, "/test/helm/", v));
    }
    CommandResult r = RunHelm(args);
    EXPECT_TRUE(r.ok()) << StrJoin(values, ",") << "\n" << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("0 chart(s) failed"));
  }
}

TEST_F(HelmTest, DeployIsWhatTheChartRenders) {
  CommandResult r = RunCommand(
      {StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/render.sh"), "--check", "--helm", Helm()});
  EXPECT_TRUE(r.ok()) << "deploy/ differs from the chart; run deploy/helm/render.sh\n"
                      << r.out << r.err;
}

TEST_F(HelmTest, DefaultValuesPassServerDryRun) {
  CreateNamespace("tessera-system");
  const std::string manifests = Template("tessera-system", {});
  std::set<std::string> names = DryRun(manifests);
  for (const char* want :
       {"deployment.apps/tessera-scheduler", "configmap/tessera-scheduler-config",
        "serviceaccount/tessera-scheduler",
        "clusterrole.rbac.authorization.k8s.io/tessera-scheduler",
        "role.rbac.authorization.k8s.io/tessera-scheduler-leader-election",
        "daemonset.apps/tessera-agent", "serviceaccount/tessera-agent",
        "clusterrolebinding.rbac.authorization.k8s.io/tessera-agent",
        "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-assignment-guard",
        "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-agent-node-scope"}) {
    EXPECT_TRUE(names.contains(want)) << want << " not in\n" << StrJoin(names, "\n");
  }
  EXPECT_EQ(manifests.find("kind: DeviceClass"), std::string::npos);
  EXPECT_EQ(manifests.find("kind: Namespace"), std::string::npos);
  EXPECT_EQ(manifests.find("--dra"), std::string::npos);  // classic mode
  EXPECT_EQ(manifests.find("resource.k8s.io"), std::string::npos);
  absl::StatusOr<k8s::SchedulerConfig> config =
      RenderedConfig(manifests, "tessera-scheduler-config");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->leader_elect);
  EXPECT_EQ(config->lease.lease_namespace, "tessera-system");
  EXPECT_EQ(config->metrics_port, 10269);
}

TEST_F(HelmTest, DraValuesPassServerDryRun) {
  CreateNamespace("gpu-dra");
  const std::string manifests = Template("gpu-dra", {"values-dra.yaml"});
  std::set<std::string> names = DryRun(manifests);
  EXPECT_TRUE(names.contains("deviceclass.resource.k8s.io/gpu.tessera.dev"));
  EXPECT_TRUE(names.contains("deviceclass.resource.k8s.io/mig.gpu.tessera.dev"));
  EXPECT_FALSE(names.contains(
      "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-assignment-guard"));
  EXPECT_FALSE(names.contains(
      "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-agent-resourceslice-scope"));
  EXPECT_THAT(manifests, HasSubstr("replicas: 3"));
  EXPECT_THAT(manifests, HasSubstr("image: registry.example/tessera:0.1.0-test"));
  // The DRA driver's RBAC, and the allocator's.
  EXPECT_TRUE(names.contains("clusterrole.rbac.authorization.k8s.io/tessera-agent-dra"));
  EXPECT_TRUE(names.contains("clusterrolebinding.rbac.authorization.k8s.io/tessera-agent-dra"));
  EXPECT_TRUE(names.contains("clusterrole.rbac.authorization.k8s.io/tessera-scheduler-dra"));
  EXPECT_TRUE(names.contains("clusterrolebinding.rbac.authorization.k8s.io/tessera-scheduler-dra"));
  // The agent's DaemonSet in DRA mode: its flags and the kubelet's and runtime's folders.
  json daemonset;
  {
    CommandResult r =
        Cp().Kubectl({"apply", "--dry-run=client", "-o", "json", "-f", "-"}, manifests);
    ASSERT_TRUE(r.ok()) << r.err;
    json list = json::parse(r.out);
    for (const json& item : list.value("items", json::array({list}))) {
      if (item["kind"] == "DaemonSet") daemonset = item;
    }
  }
  ASSERT_FALSE(daemonset.is_null());
  const json& pod = daemonset["spec"]["template"]["spec"];
  const json& args = pod["containers"][0]["args"];
  for (const char* want :
       {"--dra", "--kubelet-dir=/var/lib/k0s/kubelet", "--cdi-dir=/var/run/cdi",
        "--claims-dir=/run/tessera/claims", "--share-enforcement=shim", "--dra-mig-mode-switch"}) {
    EXPECT_NE(std::find(args.begin(), args.end(), json(want)), args.end()) << want << args.dump();
  }
  std::map<std::string, std::string> host_paths;  // mount path -> host path
  for (const json& m : pod["containers"][0]["volumeMounts"]) {
    for (const json& v : pod["volumes"]) {
      if (v["name"] == m["name"]) host_paths[m["mountPath"]] = v["hostPath"].value("path", "");
    }
  }
  EXPECT_EQ(host_paths["/var/lib/k0s/kubelet/plugins_registry"],
            "/var/lib/k0s/kubelet/plugins_registry");
  EXPECT_EQ(host_paths["/var/lib/k0s/kubelet/plugins/gpu.tessera.dev"],
            "/var/lib/k0s/kubelet/plugins/gpu.tessera.dev");
  EXPECT_EQ(host_paths["/var/run/cdi"], "/var/run/cdi");
  EXPECT_EQ(host_paths["/run/tessera"], "/run/tessera");  // the claims' shim folders
  absl::StatusOr<k8s::SchedulerConfig> config =
      RenderedConfig(manifests, "tessera-scheduler-config");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->core.dra);
  EXPECT_EQ(config->core.dra_driver, "gpu.tessera.dev");
  EXPECT_EQ(config->core.scheduler_name, "tessera-gpu");
  EXPECT_EQ(config->core.policy, "binpack");
  EXPECT_EQ(config->node_selector, "pool=gpu");
  EXPECT_EQ(config->lease.lease_namespace, "gpu-dra");
}

TEST_F(HelmTest, SchedulerOnlyValuesPassServerDryRun) {
  CreateNamespace("gpu-sched");
  const std::string manifests = Template("gpu-sched", {"values-scheduler-only.yaml"});
  std::set<std::string> names = DryRun(manifests);
  EXPECT_TRUE(names.contains("deployment.apps/gpu-scheduler"));
  EXPECT_TRUE(names.contains("configmap/tessera-grafana-dashboard"));
  EXPECT_FALSE(names.contains("daemonset.apps/tessera-agent"));
  // The admission policy names the renamed ServiceAccount in this namespace.
  EXPECT_THAT(manifests, HasSubstr("system:serviceaccount:gpu-sched:gpu-scheduler"));
  absl::StatusOr<k8s::SchedulerConfig> config = RenderedConfig(manifests, "gpu-scheduler-config");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->leader_elect);
}

TEST_F(HelmTest, InstallsAndUninstalls) {
  CommandResult install = RunHelm({"install", "tessera", kChart, "--namespace", "tessera-install",
                                   "--create-namespace", "--set", "dra.enabled=true"});
  ASSERT_TRUE(install.ok()) << install.out << install.err;
  EXPECT_THAT(install.out, HasSubstr("STATUS: deployed"));
  EXPECT_THAT(install.out, HasSubstr("spec.schedulerName: tessera"));
  absl::StatusOr<std::string> objects =
      Cp().KubectlOk({"get", "-n", "tessera-install",
                      "deployment,daemonset,configmap,serviceaccount", "-o", "name"});
  ASSERT_TRUE(objects.ok()) << objects.status();
  EXPECT_THAT(*objects, HasSubstr("deployment.apps/tessera-scheduler"));
  EXPECT_THAT(*objects, HasSubstr("daemonset.apps/tessera-agent"));
  EXPECT_TRUE(Cp().KubectlOk({"get", "deviceclass", "gpu.tessera.dev"}).ok());
  // Each agent writes only its own node's slices (test/k8s/agent_deploy_e2e_test.cc tries it).
  EXPECT_TRUE(
      Cp().KubectlOk({"get", "validatingadmissionpolicy", "tessera-agent-resourceslice-scope"})
          .ok());
  EXPECT_TRUE(Cp().KubectlOk({"get", "validatingadmissionpolicybinding",
                              "tessera-agent-resourceslice-scope"})
                  .ok());
  // DRA mode's RBAC grants the requests the scheduler's allocator and the agent's driver make.
  auto can = [](const std::string& sa, std::vector<std::string> what) {
    what.insert(what.begin(), "auth");
    what.insert(what.begin() + 1, "can-i");
    what.push_back(StrCat("--as=system:serviceaccount:tessera-install:", sa));
    return Cp().Kubectl(what).out.rfind("yes", 0) == 0;
  };
  for (const auto& verb_resource : std::vector<std::vector<std::string>>{
           {"list", "resourceslices.resource.k8s.io"},
           {"watch", "resourceslices.resource.k8s.io"},
           {"list", "deviceclasses.resource.k8s.io"},
           {"watch", "resourceclaims.resource.k8s.io"},
           {"patch", "resourceclaims.resource.k8s.io", "-n", "default"},
           {"create", "resourceclaims.resource.k8s.io", "-n", "default"},
           {"patch", "resourceclaims.resource.k8s.io", "--subresource=status", "-n", "default"}}) {
    EXPECT_TRUE(can("tessera-scheduler", verb_resource)) << StrJoin(verb_resource, " ");
  }
  EXPECT_FALSE(can("tessera-scheduler", {"delete", "resourceclaims.resource.k8s.io", "-n", "x"}));
  for (const auto& verb_resource : std::vector<std::vector<std::string>>{
           {"list", "resourceslices.resource.k8s.io"},
           {"create", "resourceslices.resource.k8s.io"},
           {"update", "resourceslices.resource.k8s.io"},
           {"delete", "resourceslices.resource.k8s.io"},
           {"get", "resourceclaims.resource.k8s.io", "-n", "default"}}) {
    EXPECT_TRUE(can("tessera-agent", verb_resource)) << StrJoin(verb_resource, " ");
  }
  EXPECT_FALSE(can("tessera-agent", {"patch", "resourceclaims.resource.k8s.io", "-n", "x"}));
  CommandResult list = RunHelm({"list", "-n", "tessera-install", "-o", "json"});
  ASSERT_TRUE(list.ok()) << list.err;
  EXPECT_EQ(json::parse(list.out).at(0).at("status"), "deployed");

  CommandResult uninstall =
      RunHelm({"uninstall", "tessera", "--namespace", "tessera-install", "--wait"});
  ASSERT_TRUE(uninstall.ok()) << uninstall.out << uninstall.err;
  EXPECT_FALSE(Cp().KubectlOk({"get", "deviceclass", "gpu.tessera.dev"}).ok());
  EXPECT_FALSE(Cp().KubectlOk({"get", "clusterrole", "tessera-scheduler"}).ok());
}

}  // namespace
}  // namespace tessera::e2e
