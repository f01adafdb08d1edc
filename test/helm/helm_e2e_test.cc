// The Helm chart deploy/helm/tessera against the real API server (one control plane for this
// binary), with Helm built from its Go module by test/helm/build.sh:
//   - helm lint, for the default values and the two value files beside this test;
//   - deploy/*.yaml are exactly what the chart renders (deploy/helm/render.sh --check);
//   - `helm template | kubectl apply --dry-run=server` accepts every object of each value set,
//     and the scheduler accepts each rendered configuration (ParseSchedulerConfig);
//   - a real `helm install` creates the objects and `helm uninstall` removes them;
//   - values.schema.json refuses a misspelt key or a wrong type, naming it;
//   - objects are named after the release: two releases (a canary) install side by side;
//   - `helm upgrade` upgrades the Queue CRD (a release installed with an older one);
//   - the alerts pass `promtool check rules` and fire on their series (`promtool test rules`),
//     the PodMonitor honours the agents' labels, the namespace is labelled for PodSecurity, the
//     agent has its probes and GPU-label affinity, the scheduler its PodDisruptionBudget, and the
//     chart's nvidia.com/gpu DeviceClass is examples/k8s/dra/nvidia-gpu-deviceclass.yaml.
// No node runs pods here: uninstalls skip the pre-delete hook (its Job needs a node; the whole
// hook runs in helm_install_e2e_test).
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/config.h"
#include "nlohmann/json.hpp"
#include "yaml_json.h"

namespace tessera::e2e {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

ControlPlane& Cp() { return ControlPlane::Shared(); }

const std::string kChart = StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera");

std::vector<json> Documents(const std::string& text) { return YamlDocuments(text); }

json FindObject(const std::vector<json>& docs, const std::string& kind, const std::string& name) {
  for (const json& d : docs) {
    if (d.value("kind", "") == kind && d["metadata"].value("name", "") == name) return d;
  }
  return nullptr;
}
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
  std::string Template(const std::string& ns, const std::vector<std::string>& values,
                       const std::vector<std::string>& more = {},
                       const std::string& release = "tessera") {
    std::vector<std::string> args = {"template", release, kChart, "--namespace", ns};
    for (const std::string& v : values) {
      args.push_back("-f");
      args.push_back(StrCat(TESSERA_SOURCE_DIR, "/test/helm/", v));
    }
    args.insert(args.end(), more.begin(), more.end());
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
           {}, {"values-dra.yaml"}, {"values-scheduler-only.yaml"}, {"values-monitoring.yaml"}}) {
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
        "validatingadmissionpolicy.admissionregistration.k8s.io/tessera-agent-node-scope",
        "poddisruptionbudget.policy/tessera-scheduler", "service/tessera-scheduler",
        "service/tessera-agent", "role.rbac.authorization.k8s.io/tessera-agent",
        "customresourcedefinition.apiextensions.k8s.io/queues.tessera.dev",
        // The pre-delete hook (helm template includes hooks).
        "job.batch/tessera-uninstall", "serviceaccount/tessera-uninstall"}) {
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
  EXPECT_TRUE(names.contains("deployment.apps/tessera-scheduler"));
  EXPECT_TRUE(names.contains("serviceaccount/gpu-scheduler"));
  EXPECT_TRUE(names.contains("configmap/tessera-grafana-dashboard"));
  EXPECT_FALSE(names.contains("daemonset.apps/tessera-agent"));
  // The admission policy names the renamed ServiceAccount in this namespace.
  EXPECT_THAT(manifests, HasSubstr("system:serviceaccount:gpu-sched:gpu-scheduler"));
  absl::StatusOr<k8s::SchedulerConfig> config =
      RenderedConfig(manifests, "tessera-scheduler-config");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->leader_elect);
}

TEST_F(HelmTest, InstallsAndUninstalls) {
  // The namespace exists without the PodSecurity label the agent needs: NOTES.txt says so and
  // gives the command (HelmInstall shows it silent once the namespace is labelled).
  CreateNamespace("tessera-install");
  CommandResult install = RunHelm({"install", "tessera", kChart, "--namespace", "tessera-install",
                                   "--create-namespace", "--set", "dra.enabled=true"});
  ASSERT_TRUE(install.ok()) << install.out << install.err;
  EXPECT_THAT(install.out, HasSubstr("STATUS: deployed"));
  EXPECT_THAT(install.out, HasSubstr("spec.schedulerName: tessera"));
  EXPECT_THAT(install.out, HasSubstr("Its namespace must allow privileged pods (PodSecurity), and "
                                     "tessera-install is not labelled so:\n  kubectl label "
                                     "namespace tessera-install "
                                     "pod-security.kubernetes.io/enforce=privileged"));
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
      RunHelm({"uninstall", "tessera", "--namespace", "tessera-install", "--wait", "--no-hooks"});
  ASSERT_TRUE(uninstall.ok()) << uninstall.out << uninstall.err;
  EXPECT_FALSE(Cp().KubectlOk({"get", "deviceclass", "gpu.tessera.dev"}).ok());
  EXPECT_FALSE(Cp().KubectlOk({"get", "clusterrole", "tessera-scheduler"}).ok());
  // The CRD stays (resource-policy keep), as the docs say; removed by hand.
  EXPECT_TRUE(Cp().KubectlOk({"get", "crd", "queues.tessera.dev"}).ok());
  EXPECT_TRUE(Cp().KubectlOk({"delete", "crd", "queues.tessera.dev", "--wait"}).ok());
}

// values.schema.json: a misspelt key, or a value of the wrong type, fails with its name.
TEST_F(HelmTest, SchemaRefusesTyposNamingThem) {
  for (const auto& [set, named] : std::vector<std::pair<std::string, std::string>>{
           {"scheduler.replicaz=2", "replicaz"},
           {"image.pullPolicy=Sometimes", "pullPolicy"},
           {"agent.metricsPort=nine", "metricsPort"},
           {"scheduler.leaderElection.leaseDuration=15", "leaseDuration"}}) {
    SCOPED_TRACE(set);
    CommandResult r = RunHelm({"template", "tessera", kChart, "--set", set});
    EXPECT_FALSE(r.ok());
    EXPECT_THAT(r.err, HasSubstr(named));
    CommandResult install =
        RunHelm({"install", "tessera", kChart, "--namespace", "schema", "--set", set, "--dry-run"});
    EXPECT_FALSE(install.ok()) << install.out;
    EXPECT_THAT(install.err, HasSubstr(named));
  }
}

// Names follow the release: the default release keeps tessera-scheduler, tessera-agent, ...;
// nameOverride and fullnameOverride change them and the labels; a canary's objects differ from
// the main release's in every name.
TEST_F(HelmTest, NamesFollowTheRelease) {
  auto names = [&](const std::string& release, const std::vector<std::string>& more) {
    std::set<std::string> out;
    for (const json& d : Documents(Template("tessera-system", {}, more, release))) {
      out.insert(StrCat(d.value("kind", ""), "/", d["metadata"].value("name", "")));
    }
    return out;
  };
  const std::set<std::string> main = names("tessera", {});
  EXPECT_TRUE(main.contains("Deployment/tessera-scheduler"));
  EXPECT_TRUE(main.contains("DaemonSet/tessera-agent"));
  const std::set<std::string> other = names("gpu", {});
  EXPECT_TRUE(other.contains("Deployment/gpu-tessera-scheduler")) << StrJoin(other, "\n");
  const std::set<std::string> full = names("x", {"--set", "fullnameOverride=acme"});
  EXPECT_TRUE(full.contains("Deployment/acme-scheduler"));
  EXPECT_TRUE(full.contains("ClusterRole/acme-agent"));
  EXPECT_TRUE(full.contains("ValidatingAdmissionPolicy/acme-assignment-guard"));
  const std::vector<json> named =
      Documents(Template("tessera-system", {}, {"--set", "nameOverride=gpu"}));
  EXPECT_EQ(
      FindObject(named, "Deployment", "tessera-gpu-scheduler")["spec"]["selector"]["matchLabels"],
      (json{{"app.kubernetes.io/name", "tessera-gpu-scheduler"}}));
  const std::set<std::string> canary =
      names("tessera-canary", {"--set", "agent.enabled=false", "--set", "crds.install=false",
                               "--set", "admissionPolicy.enabled=false"});
  std::vector<std::string> both;
  std::set_intersection(main.begin(), main.end(), canary.begin(), canary.end(),
                        std::back_inserter(both));
  EXPECT_THAT(both, ::testing::IsEmpty());
}

// A Deployment's or DaemonSet's selector cannot change in place (the API server refuses it), so
// `helm upgrade` of a release made by an earlier chart, whose selectors were
// {app.kubernetes.io/name: tessera-scheduler} and {app.kubernetes.io/name: tessera-agent} alone,
// works only if the chart keeps them for the default release; other releases select only their
// own pods, so a canary's PodDisruptionBudget and Service never count the main release's (before:
// every release's selectors also carried app.kubernetes.io/instance, and the upgrade failed with
// "field is immutable").
TEST_F(HelmTest, SelectorsKeepUpgradesFromEarlierCharts) {
  const std::vector<json> docs = Documents(Template("tessera-system", {}, {}));
  EXPECT_EQ(FindObject(docs, "Deployment", "tessera-scheduler")["spec"]["selector"],
            (json{{"matchLabels", {{"app.kubernetes.io/name", "tessera-scheduler"}}}}));
  EXPECT_EQ(FindObject(docs, "DaemonSet", "tessera-agent")["spec"]["selector"],
            (json{{"matchLabels", {{"app.kubernetes.io/name", "tessera-agent"}}}}));
  const std::vector<json> canary = Documents(Template("tessera-system", {}, {}, "tessera-canary"));
  const json selector =
      FindObject(canary, "Deployment", "tessera-canary-scheduler")["spec"]["selector"];
  EXPECT_EQ(selector,
            (json{{"matchLabels", {{"app.kubernetes.io/name", "tessera-canary-scheduler"}}}}));
  EXPECT_EQ(
      FindObject(canary, "PodDisruptionBudget", "tessera-canary-scheduler")["spec"]["selector"],
      selector);
  // Every pod template carries its selector's labels and the release.
  const json labels = FindObject(
      canary, "Deployment", "tessera-canary-scheduler")["spec"]["template"]["metadata"]["labels"];
  EXPECT_EQ(labels.value("app.kubernetes.io/name", ""), "tessera-canary-scheduler");
  EXPECT_EQ(labels.value("app.kubernetes.io/instance", ""), "tessera-canary");
}

// Two releases at once in one namespace, as install.md's canary: both deployed, nothing shared.
TEST_F(HelmTest, TwoReleasesInstallSideBySide) {
  CommandResult main = RunHelm(
      {"install", "tessera", kChart, "--namespace", "two", "--create-namespace", "--set",
       "admissionPolicy.extraSchedulerUsers={system:serviceaccount:two:tessera-canary-scheduler}"});
  ASSERT_TRUE(main.ok()) << main.out << main.err;
  CommandResult canary = RunHelm(
      {"install", "tessera-canary", kChart, "--namespace", "two", "--set", "agent.enabled=false",
       "--set", "crds.install=false", "--set", "admissionPolicy.enabled=false", "--set",
       "scheduler.schedulerName=tessera-canary", "--set", "scheduler.replicas=1"});
  ASSERT_TRUE(canary.ok()) << canary.out << canary.err;
  EXPECT_THAT(canary.out, HasSubstr("spec.schedulerName: tessera-canary"));
  absl::StatusOr<std::string> deployments =
      Cp().KubectlOk({"get", "deployments", "-n", "two", "-o", "name"});
  ASSERT_TRUE(deployments.ok());
  EXPECT_THAT(*deployments, HasSubstr("deployment.apps/tessera-scheduler"));
  EXPECT_THAT(*deployments, HasSubstr("deployment.apps/tessera-canary-scheduler"));
  // The canary's scheduler may write assignments (the main release's policy names it).
  absl::StatusOr<std::string> guard =
      Cp().KubectlOk({"get", "validatingadmissionpolicy", "tessera-assignment-guard", "-o",
                      "jsonpath={.spec.variables[0].expression}"});
  ASSERT_TRUE(guard.ok());
  EXPECT_THAT(*guard, HasSubstr("system:serviceaccount:two:tessera-canary-scheduler"));
  for (const char* release : {"tessera-canary", "tessera"}) {
    CommandResult r = RunHelm({"uninstall", release, "--namespace", "two", "--wait", "--no-hooks"});
    EXPECT_TRUE(r.ok()) << r.out << r.err;
  }
  EXPECT_TRUE(Cp().KubectlOk({"delete", "crd", "queues.tessera.dev", "--wait"}).ok());
}

// `helm upgrade` upgrades the Queue CRD: a release installed by a chart whose CRD had no status
// columns gets them from the upgrade, and its Queues stay.
TEST_F(HelmTest, UpgradeUpgradesTheQueueCrd) {
  const std::string old_chart = home_ + "/old-chart";
  std::filesystem::copy(kChart, old_chart, std::filesystem::copy_options::recursive);
  std::filesystem::path crd = std::filesystem::path(old_chart) / "files/queue-crd.yaml";
  std::filesystem::remove(crd);  // a link into deploy/ in the source tree
  {
    std::ifstream in(std::filesystem::path(kChart) / "files/queue-crd.yaml");
    std::string line, text;
    while (std::getline(in, line)) {
      if (line.find(".status.") != std::string::npos) continue;  // the status printer columns
      text += line + "\n";
    }
    std::ofstream(crd) << text;
  }
  CommandResult install = RunHelm({"install", "tessera", old_chart, "--namespace", "upgrade",
                                   "--create-namespace", "--set", "agent.enabled=false"});
  ASSERT_TRUE(install.ok()) << install.out << install.err;
  auto columns = [] {
    absl::StatusOr<std::string> c =
        Cp().KubectlOk({"get", "crd", "queues.tessera.dev", "-o",
                        "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}"});
    return c.ok() ? *c : c.status().ToString();
  };
  EXPECT_THAT(columns(), ::testing::Not(HasSubstr("Allocated GPUs")));
  ASSERT_TRUE(Cp().KubectlOk({"apply", "-f", StrCat(TESSERA_SOURCE_DIR, "/examples/k8s/queue.yaml"),
                              "--dry-run=server"})
                  .ok());
  ASSERT_TRUE(Cp().KubectlOk({"create", "-f", "-"},
                             R"({"apiVersion":"tessera.dev/v1alpha1","kind":"Queue",
                                 "metadata":{"name":"kept"},"spec":{"deserved":{"gpu":"1"}}})")
                  .ok());
  // No --wait: no node runs pods here (the scheduler never becomes ready); helm applies the CRD
  // before it returns.
  CommandResult upgrade =
      RunHelm({"upgrade", "tessera", kChart, "--namespace", "upgrade", "--reuse-values"});
  ASSERT_TRUE(upgrade.ok()) << upgrade.out << upgrade.err;
  EXPECT_THAT(columns(), HasSubstr("Allocated GPUs"));
  EXPECT_THAT(columns(), HasSubstr("Pending pods"));
  EXPECT_TRUE(Cp().KubectlOk({"get", "queue", "kept"}).ok());
  CommandResult uninstall =
      RunHelm({"uninstall", "tessera", "--namespace", "upgrade", "--wait", "--no-hooks"});
  EXPECT_TRUE(uninstall.ok()) << uninstall.out << uninstall.err;
  EXPECT_TRUE(Cp().KubectlOk({"get", "queue", "kept"}).ok()) << "the CRD and its Queues are kept";
  EXPECT_TRUE(Cp().KubectlOk({"delete", "crd", "queues.tessera.dev", "--wait"}).ok());
}

// The alerts: promtool checks them, and `promtool test rules` makes each fire on its series
// (alerts_test.yaml) and not before.
TEST_F(HelmTest, AlertsPassPromtoolAndFireOnTheirSeries) {
  const std::vector<json> docs =
      Documents(Template("tessera-system", {},
                         {"--set", "metrics.prometheusRule.enabled=true", "--show-only",
                          "templates/prometheusrule.yaml"}));
  ASSERT_EQ(docs.size(), 1u);
  json groups = docs[0]["spec"]["groups"];
  ASSERT_FALSE(groups.empty());
  const std::string dir = home_ + "/rules";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/full.yaml") << json{{"groups", groups}}.dump(2);  // JSON is YAML
  for (json& g : groups) {
    for (json& rule : g["rules"]) rule.erase("annotations");
  }
  std::ofstream(dir + "/rules.yaml") << json{{"groups", groups}}.dump(2);
  std::filesystem::copy_file(StrCat(TESSERA_SOURCE_DIR, "/test/helm/alerts_test.yaml"),
                             dir + "/alerts_test.yaml");
  const std::string promtool = TESSERA_PROMTOOL;
  ASSERT_FALSE(promtool.empty()) << "promtool not found: run scripts/setup.sh";
  CommandResult check = RunCommand({promtool, "check", "rules", dir + "/full.yaml"});
  EXPECT_TRUE(check.ok()) << check.out << check.err;
  EXPECT_THAT(check.out, HasSubstr("SUCCESS: 6 rules found"));
  // rule_files are found beside the test file.
  CommandResult test = RunCommand({promtool, "test", "rules", dir + "/alerts_test.yaml"});
  EXPECT_TRUE(test.ok()) << test.out << test.err;
}

// The Prometheus Operator's objects: the scheduler's ServiceMonitor selects its Service, the
// agents' PodMonitor keeps the GPU pods' own namespace and pod labels (honorLabels).
TEST_F(HelmTest, MonitorsScrapeTheMetricsPorts) {
  const std::vector<json> docs =
      Documents(Template("tessera-system", {}, {"--set", "metrics.serviceMonitor.enabled=true"}));
  const json sm = FindObject(docs, "ServiceMonitor", "tessera-scheduler");
  const json pm = FindObject(docs, "PodMonitor", "tessera-agent");
  const json svc = FindObject(docs, "Service", "tessera-scheduler");
  ASSERT_FALSE(sm.is_null());
  ASSERT_FALSE(pm.is_null());
  ASSERT_FALSE(svc.is_null());
  for (const auto& [k, v] : sm["spec"]["selector"]["matchLabels"].items()) {
    EXPECT_EQ(svc["metadata"]["labels"].value(k, ""), v) << k;
  }
  EXPECT_EQ(sm["spec"]["endpoints"][0]["port"], "metrics");
  EXPECT_EQ(pm["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
  EXPECT_EQ(pm["spec"]["podMetricsEndpoints"][0]["honorLabels"], "true");
  EXPECT_EQ(FindObject(docs, "Service", "tessera-agent")["spec"]["clusterIP"], "None");
}

// What the node side needs from the chart: the namespace allows privileged pods, the agent has
// its probes, runs on tessera's, the GPU operator's and NFD's GPU labels, cleans up on uninstall
// and has its priority class; the scheduler has its PodDisruptionBudget and priority class.
TEST_F(HelmTest, NodeSideSettings) {
  const std::vector<json> docs =
      Documents(Template("tessera-system", {}, {"--set", "namespace.create=true"}));
  const json ns = FindObject(docs, "Namespace", "tessera-system");
  EXPECT_EQ(ns["metadata"]["labels"].value("pod-security.kubernetes.io/enforce", ""), "privileged");
  const json ds = FindObject(docs, "DaemonSet", "tessera-agent");
  const json& agent = ds["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(agent["livenessProbe"]["httpGet"]["path"], "/healthz");
  EXPECT_EQ(agent["readinessProbe"]["httpGet"]["port"], "metrics");
  std::set<std::string> keys;
  for (const json& term :
       ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
         ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]) {
    keys.insert(term["matchExpressions"][0]["key"]);
  }
  EXPECT_EQ(keys, (std::set<std::string>{"tessera.dev/gpu-node", "nvidia.com/gpu.present",
                                         "feature.node.kubernetes.io/pci-10de.present"}));
  EXPECT_NE(std::find(agent["args"].begin(), agent["args"].end(),
                      json("--cleanup-on-delete=tessera-system/tessera-agent")),
            agent["args"].end());
  const json pdb = FindObject(docs, "PodDisruptionBudget", "tessera-scheduler");
  EXPECT_EQ(pdb["spec"]["maxUnavailable"], "1");
  EXPECT_EQ(FindObject(docs, "Deployment", "tessera-scheduler")["spec"]["template"]["spec"].value(
                "priorityClassName", ""),
            "system-cluster-critical");
  EXPECT_EQ(ds["spec"]["template"]["spec"].value("priorityClassName", ""), "system-node-critical");
  const std::vector<json> no_agent = Documents(Template(
      "tessera-system", {}, {"--set", "namespace.create=true", "--set", "agent.enabled=false"}));
  EXPECT_FALSE(FindObject(no_agent, "Namespace", "tessera-system")["metadata"]["labels"].contains(
      "pod-security.kubernetes.io/enforce"));
}

// Hot spares: off by default (no key in the scheduler's configuration, no patch on nodes); with
// scheduler.spareGpusPerDomain the configuration carries it and the scheduler may patch nodes
// (its tessera.dev/spare-gpus annotation).
TEST_F(HelmTest, SparesTurnOnTheNodePatch) {
  auto node_verbs = [](const std::vector<json>& docs) {
    std::set<std::string> verbs;
    const json role = FindObject(docs, "ClusterRole", "tessera-scheduler");
    for (const json& rule : role["rules"]) {
      if (rule["resources"].size() == 1 && rule["resources"][0] == "nodes") {
        for (const json& v : rule["verbs"]) verbs.insert(v.get<std::string>());
      }
    }
    return verbs;
  };
  auto config = [](const std::vector<json>& docs) {
    return FindObject(docs, "ConfigMap", "tessera-scheduler-config")["data"]["config.yaml"]
        .get<std::string>();
  };
  const std::vector<json> plain = Documents(Template("tessera-system", {}, {}));
  EXPECT_EQ(node_verbs(plain), (std::set<std::string>{"get", "list", "watch"}));
  EXPECT_THAT(config(plain), ::testing::Not(HasSubstr("spareGpusPerDomain")));
  const std::vector<json> spares =
      Documents(Template("tessera-system", {}, {"--set", "scheduler.spareGpusPerDomain=2"}));
  EXPECT_EQ(node_verbs(spares), (std::set<std::string>{"get", "list", "watch", "patch"}));
  EXPECT_THAT(config(spares), HasSubstr("spareGpusPerDomain: 2\n"));
}

// The chart's nvidia.com/gpu DeviceClass is exactly the example users apply without Helm.
TEST_F(HelmTest, NvidiaGpuClassIsTheExample) {
  const std::vector<json> docs = Documents(
      Template("tessera-system", {},
               {"--set", "dra.enabled=true", "--set", "dra.nvidiaGpuClass.enabled=true"}));
  json chart = FindObject(docs, "DeviceClass", "nvidia-gpu.tessera.dev");
  ASSERT_FALSE(chart.is_null());
  std::ifstream in(StrCat(TESSERA_SOURCE_DIR, "/examples/k8s/dra/nvidia-gpu-deviceclass.yaml"));
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<json> example = Documents(text.str());
  ASSERT_EQ(example.size(), 1u);
  chart["metadata"].erase("labels");
  EXPECT_EQ(chart, example[0]) << chart.dump(2) << "\n" << example[0].dump(2);
}

}  // namespace
}  // namespace tessera::e2e
