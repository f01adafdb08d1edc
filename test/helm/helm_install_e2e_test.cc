// The real install, as a new user's first hour goes, on real harness nodes (kubelet + containerd,
// fake GPUs; test/controlplane/README.md), with the chart deploy/helm/tessera and nothing else:
//   - the tessera image built without Docker or a registry (deploy/image.sh, from the binaries of
//     this build) and imported into both nodes' containerd, as the probe image;
//   - `helm install` with the harness's values (image.pullPolicy Never; apiServer.host/port, as
//     there is no kube-proxy; the agent's fake GPUs and fake driver through agent.devDir and
//     agent.extraArgs), --wait: the scheduler (2 replicas, leader election) and the agent (a
//     DaemonSet on both nodes) run as pods, with nothing but their ServiceAccounts' tokens (the
//     control plane runs --with-service-accounts; the admission policies are on);
//   - the agents publish their nodes' inventories; the reality check's pods (20 shares of 4Gi and
//     a gang of 8 whole GPUs in one NVLink domain) are placed by the in-cluster scheduler, run,
//     and report the GPUs and caps their agents delivered;
//   - the Grafana dashboard queries only metrics the installed scheduler and agent serve;
//   - `helm uninstall` removes the pods and objects.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "dashboard_check.h"
#include "fake_cuda/fake_machine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "probe_pod.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kNvswitch[] = "gpu-a";  // 8 x H100, NVSwitch
constexpr char kPcie[] = "gpu-b";      // 2 x L40S, PCIe
constexpr char kNamespace[] = "tessera-system";
constexpr char kScheduler[] = "tessera";  // the chart's default scheduler name
constexpr int64_t kMiB = 1 << 20;

ControlPlane& Cp() { return ControlPlane::Shared(); }

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The helm binary test/helm/build.sh made for this tree, or "".
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

// The pods of the release, by component (app.kubernetes.io/name).
std::vector<json> ReleasePods(const std::string& component) {
  CommandResult r = Cp().Kubectl({"get", "pods", "-n", kNamespace, "-l",
                                  StrCat("app.kubernetes.io/name=", component), "-o", "json"});
  if (!r.ok()) return {};
  return json::parse(r.out, nullptr, false).value("items", json::array());
}

bool RunningAndReady(const json& pod) {
  if (pod["status"].value("phase", "") != "Running") return false;
  for (const json& c : pod["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// The log of a pod's container as the kubelet of its node wrote it (no API-server-to-kubelet
// traffic in the harness: README.md).
std::string PodLog(const json& pod, const std::string& container) {
  const Node* node = Cp().FindNode(pod["spec"].value("nodeName", ""));
  if (node == nullptr) return "";
  const std::string dir =
      StrCat(node->dir, "/pod-logs/", pod["metadata"]["namespace"].get<std::string>(), "_",
             pod["metadata"]["name"].get<std::string>(), "_",
             pod["metadata"]["uid"].get<std::string>(), "/", container);
  std::string out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out += Read(e.path().string());
  return out;
}

std::string Get(const std::string& host, int port, const std::string& path) {
  httplib::Client client(host, port);
  client.set_connection_timeout(5);
  auto got = client.Get(path);
  return got && got->status == 200 ? got->body : "";
}

// What the install made, once for the binary: the images in both nodes, a fake machine per node,
// the chart installed and its pods up.
class Install {
 public:
  static Install& Get() {
    if (instance_ == nullptr) instance_ = new Install();
    return *instance_;
  }
  static bool made() { return instance_ != nullptr; }
  const std::string& error() const { return error_; }
  const std::string& install_output() const { return install_output_; }
  // The folder with the images, values and fake machines; kept if a test failed.
  void RemoveDir() const {
    if (!dir_.empty() && !::testing::UnitTest::GetInstance()->Failed()) fs::remove_all(dir_);
  }
  std::string MachinesDir() const { return dir_ + "/machines"; }
  std::string HelmHome() const { return dir_ + "/helm"; }

  CommandResult RunHelm(std::vector<std::string> args) const {
    args.insert(args.begin(), Helm());
    CommandOptions o;
    o.env = {{"HELM_CACHE_HOME", HelmHome() + "/cache"},
             {"HELM_CONFIG_HOME", HelmHome() + "/config"},
             {"HELM_DATA_HOME", HelmHome() + "/data"},
             {"KUBECONFIG", Cp().kubeconfig()}};
    o.timeout = seconds(420);
    return RunCommand(args, o);
  }
  // The tails of the release's pods' logs, for failures.
  std::string Logs() const {
    std::string out;
    for (const char* component : {"tessera-scheduler", "tessera-agent"}) {
      for (const json& pod : ReleasePods(component)) {
        std::string log =
            PodLog(pod, component == std::string("tessera-agent") ? "agent" : "scheduler");
        if (log.size() > 4000) log = log.substr(log.size() - 4000);
        out += StrCat("--- ", pod["metadata"]["name"].get<std::string>(), " on ",
                      pod["spec"].value("nodeName", "?"), ":\n", log);
      }
    }
    return out;
  }

 private:
  Install() {
    char tmpl[] = "/tmp/tessera-helm-install-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    error_ = Setup();
  }

  std::string Setup() {
    if (Helm().empty()) return "Helm is not built for this tree: run test/helm/build.sh";
    if (Cp().pod_api_host().empty()) return "the control plane runs without service accounts";
    // The images: tessera's (deploy/image.sh, from this build) and the probe's.
    const std::string tessera_image = dir_ + "/tessera.tar";
    CommandResult built = RunCommand({StrCat(TESSERA_SOURCE_DIR, "/deploy/image.sh"), "--build-dir",
                                      TESSERA_BUILD_DIR, tessera_image});
    if (!built.ok()) return StrCat("deploy/image.sh: ", built.out, built.err);
    const std::string probe_image = dir_ + "/cuda-probe.tar";
    built = RunCommand({StrCat(TESSERA_SOURCE_DIR, "/test/agent/probe_image.sh"), probe_image,
                        TESSERA_SHIM_CLIENT, TESSERA_FAKE_CUDA, TESSERA_FAKE_NVML,
                        TESSERA_SHIM_LIBRARY});
    if (!built.ok()) return StrCat("probe_image.sh: ", built.out, built.err);
    for (const char* node : {kNvswitch, kPcie}) {
      const Node* n = Cp().FindNode(node);
      // The chart's values below name these paths with $(NODE_NAME).
      if (n->dev_dir != n->dir + "/dev" || n->fake_gpus != n->dir + "/gpus.json" ||
          n->dir != StrCat(Cp().dir(), "/nodes/", node)) {
        return StrCat("node ", node, ": unexpected harness layout ", n->dir, " ", n->dev_dir, " ",
                      n->fake_gpus);
      }
      for (const std::string& image : {tessera_image, probe_image}) {
        CommandResult imported =
            Cp().NodeExec(node, {"ctr", "-n", "k8s.io", "images", "import", image});
        if (!imported.ok()) return StrCat("import into ", node, ": ", imported.out, imported.err);
      }
      // The fake driver's machine: the node's GPUs.
      json gpus = json::parse(Read(n->fake_gpus));
      std::vector<fake::DeviceSpec> devices;
      for (const json& g : gpus["gpus"]) {
        fake::DeviceSpec d;
        d.uuid = g["uuid"];
        d.name = g.value("name", "fake");
        d.total_bytes = g["memory_mib"].get<uint64_t>() << 20;
        d.sm_count = g.value("sm_count", 100);
        devices.push_back(d);
      }
      const std::string machine_dir = StrCat(MachinesDir(), "/", node);
      fs::create_directories(machine_dir);
      std::string err = fake::CreateMachine(machine_dir + "/machine", devices);
      if (!err.empty()) return StrCat("fake machine of ", node, ": ", err);
      ::chmod((machine_dir + "/machine").c_str(), 0666);
    }
    // The harness's values: what differs from a cluster with GPUs and a registry.
    const std::string nodes = StrCat(Cp().dir(), "/nodes/$(NODE_NAME)");
    json values = {
        {"image", {{"pullPolicy", "Never"}}},
        {"apiServer", {{"host", Cp().pod_api_host()}, {"port", Cp().pod_api_port()}}},
        {"scheduler", {{"retry", {{"minInterval", "200ms"}, {"period", "2s"}}}}},
        {"agent",
         {{"devDir", nodes + "/dev"},
          {"extraArgs",
           {StrCat("--gpus-file=/host", nodes, "/gpus.json"),
            StrCat("--driver-lib-dir=", fs::path(TESSERA_FAKE_CUDA).parent_path().string()),
            "--rediscover-interval=5s"}}}}};
    std::ofstream(dir_ + "/values.yaml") << values.dump(2) << "\n";  // JSON is YAML
    const auto start = std::chrono::steady_clock::now();
    CommandResult install =
        RunHelm({"install", "tessera", StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera"),
                 "--namespace", kNamespace, "--create-namespace", "-f", dir_ + "/values.yaml",
                 "--wait", "--timeout", "5m"});
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    install_output_ = install.out;
    if (!install.ok()) {
      return StrCat("helm install: ", install.out, install.err, "\n", Logs());
    }
    std::cout << "helm install --wait: " << took << " s\n";
    return "";
  }

  static inline Install* instance_ = nullptr;
  std::string error_, dir_, install_output_;
};

// After the control plane has stopped (environments tear down in reverse order of registration;
// the control plane's is registered by main, after this one).
class RemoveInstallDir : public ::testing::Environment {
 public:
  void TearDown() override {
    if (Install::made()) Install::Get().RemoveDir();
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveInstallDir =
    ::testing::AddGlobalTestEnvironment(new RemoveInstallDir);

class HelmInstall : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(Install::Get().error(), ""); }
  void TearDown() override {
    if (HasFailure()) std::cerr << Install::Get().Logs();
  }
  // A namespace for pods, with its default ServiceAccount (the ServiceAccount admission plugin
  // refuses pods until the controller manager has made it).
  void MakeNamespace(const std::string& ns) {
    ASSERT_TRUE(Cp().KubectlOk({"create", "namespace", ns}).ok());
    ASSERT_TRUE(WaitUntil(
        [&] {
          return Cp().Kubectl({"get", "serviceaccount", "default", "-n", ns}).ok();
        },
        seconds(30)));
  }
  void DeleteNamespace(const std::string& ns) {
    (void)Cp().Kubectl(
        {"delete", "pods", "--all", "-n", ns, "--grace-period=1", "--wait=true", "--timeout=90s"});
    (void)Cp().Kubectl({"delete", "namespace", ns, "--wait=false"});
  }
  static records::Assignment AssignmentOf(const json& pod) {
    const json& ann = pod["metadata"].value("annotations", json::object());
    absl::StatusOr<records::Assignment> a =
        records::AssignmentFromJson(ann.value("tessera.dev/assignment", ""));
    EXPECT_TRUE(a.ok()) << pod["metadata"]["name"] << ": " << a.status();
    return a.ok() ? *a : records::Assignment();
  }
  std::map<std::string, json> WaitAllFinished(const std::string& ns, size_t count,
                                              seconds timeout) {
    return WaitAllPodsFinished(Cp(), ns, count, timeout);
  }
};

// helm install --wait returned with the scheduler's and the agent's pods running, each with its
// ServiceAccount's projected token, reaching the API server at apiServer.host; one scheduler
// leads; each agent published its node.
TEST_F(HelmInstall, SchedulerAndAgentRunAsPods) {
  EXPECT_THAT(Install::Get().install_output(), HasSubstr("STATUS: deployed"));
  const std::vector<json> schedulers = ReleasePods("tessera-scheduler");
  ASSERT_EQ(schedulers.size(), 2u);
  std::set<std::string> scheduler_names;
  for (const json& pod : schedulers) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    EXPECT_TRUE(RunningAndReady(pod)) << pod["status"].dump();
    EXPECT_EQ(pod["spec"].value("serviceAccountName", ""), "tessera-scheduler");
    scheduler_names.insert(pod["metadata"]["name"]);
  }
  const std::vector<json> agents = ReleasePods("tessera-agent");
  ASSERT_EQ(agents.size(), 2u);
  std::set<std::string> agent_nodes;
  for (const json& pod : agents) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    EXPECT_TRUE(RunningAndReady(pod)) << pod["status"].dump();
    EXPECT_EQ(pod["spec"].value("serviceAccountName", ""), "tessera-agent");
    agent_nodes.insert(pod["spec"].value("nodeName", ""));
    // The token the kubelet projected (ServiceAccount admission), and the API server it reached.
    bool projected_token = false;
    for (const json& v : pod["spec"]["volumes"]) {
      for (const json& s : v.value("projected", json::object()).value("sources", json::array())) {
        projected_token |= s.contains("serviceAccountToken");
      }
    }
    EXPECT_TRUE(projected_token) << pod["spec"]["volumes"].dump();
    EXPECT_THAT(PodLog(pod, "agent"),
                HasSubstr(StrCat("tessera agent for node ", pod["spec"].value("nodeName", ""),
                                 "; API server https://", Cp().pod_api_host(), ":",
                                 Cp().pod_api_port(), " (")));
  }
  EXPECT_EQ(agent_nodes, (std::set<std::string>{kNvswitch, kPcie}));

  // Leader election: the Lease names one of the two replicas.
  absl::StatusOr<std::string> holder =
      Cp().KubectlOk({"get", "lease", "tessera-scheduler", "-n", kNamespace, "-o",
                      "jsonpath={.spec.holderIdentity}"});
  ASSERT_TRUE(holder.ok()) << holder.status();
  bool held_by_replica = false;
  for (const std::string& name : scheduler_names) held_by_replica |= holder->starts_with(name);
  EXPECT_TRUE(held_by_replica) << *holder;

  // Each agent published its node: the inventory (through the admission policy that keeps an agent
  // to its own node, which needs the node name in its pod-bound token) and the resources.
  for (const auto& [node, gpus] : {std::pair<std::string, int>{kNvswitch, 8}, {kPcie, 2}}) {
    SCOPED_TRACE(node);
    json n;
    ASSERT_TRUE(WaitUntil(
        [&] {
          n = GetJson(Cp(), {"node", node});
          return n["metadata"]
              .value("annotations", json::object())
              .contains("tessera.dev/gpu-inventory");
        },
        seconds(60)));
    absl::StatusOr<records::Inventory> inventory = records::InventoryFromJson(
        n["metadata"]["annotations"]["tessera.dev/gpu-inventory"].get<std::string>());
    ASSERT_TRUE(inventory.ok()) << inventory.status();
    EXPECT_EQ(inventory->gpus.size(), static_cast<size_t>(gpus));
    EXPECT_EQ(n["status"]["allocatable"].value("tessera.dev/gpu", ""), std::to_string(gpus));
    EXPECT_EQ(n["metadata"]["labels"].value("tessera.dev/gpu-count", ""), std::to_string(gpus));
  }
}

// The reality check, placed by the installed scheduler and delivered by the installed
// agents: 20 pods of 4Gi and a gang of 8 one-GPU pods in one NVLink domain; every container
// reports exactly its assignment's GPU and cap.
TEST_F(HelmInstall, RealityCheckPodsReportTheirGpus) {
  const std::string ns = "reality-check";
  MakeNamespace(ns);
  std::vector<json> pods;
  for (int i = 0; i < 20; ++i) {
    pods.push_back(ProbePodOnAnyNode(ns, StrCat("inference-", i), kScheduler,
                                     Install::Get().MachinesDir(),
                                     {{"tessera.dev/gpu-memory", "4Gi"}}));
  }
  for (int i = 0; i < 8; ++i) {
    pods.push_back(ProbePodOnAnyNode(ns, StrCat("train-", i), kScheduler,
                                     Install::Get().MachinesDir(), {{"tessera.dev/gpu", "1"}},
                                     {{"tessera.dev/gang", "train"},
                                      {"tessera.dev/gang-size", "8"},
                                      {"tessera.dev/gang-topology", "nvlink-domain"}}));
  }
  const auto start = std::chrono::steady_clock::now();
  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", pods}};
  ASSERT_TRUE(Cp().KubectlOk({"create", "-f", "-"}, list.dump()).ok());
  std::map<std::string, json> done = WaitAllFinished(ns, 28, seconds(420));
  std::cout << "reality check through the installed chart: 28 pods created, run and reported in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s\n";
  ASSERT_EQ(done.size(), 28u);
  std::set<std::string> train_uuids;
  for (const auto& [name, pod] : done) {
    SCOPED_TRACE(name);
    EXPECT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump();
    const records::Assignment a = AssignmentOf(pod);
    ASSERT_EQ(a.gpus.size(), 1u);
    EXPECT_EQ(a.node, pod["spec"].value("nodeName", ""));
    ProbeReport r = ParseProbeReport(TerminationMessage(pod));
    ASSERT_TRUE(r.ok) << r.raw;
    EXPECT_EQ(r.env["visible"], a.gpus[0].uuid) << r.raw;
    EXPECT_EQ(r.answers[0], "ok") << r.raw;
    const std::vector<int64_t> info = ProbeNumbers(r.answers[2]);
    ASSERT_EQ(info.size(), 2u) << r.raw;
    if (name.rfind("inference-", 0) == 0) {
      // A share: the CUDA shim in front of the driver, the cap as the device's memory.
      EXPECT_EQ(r.env["sharing"], "shim");
      EXPECT_EQ(r.env["limit_mib"], "4096");
      EXPECT_EQ(info[1], 4096 * kMiB) << "cuMemGetInfo total is the cap\n" << r.raw;
      EXPECT_EQ(info[0], 4096 * kMiB - kMiB) << "free = cap - used\n" << r.raw;
      EXPECT_EQ(r.answers[4].rfind("err 2", 0), 0u) << "beyond the cap: out of memory\n" << r.raw;
      EXPECT_TRUE(r.answers[5].rfind("ok {\"", 0) == 0) << "the shim answers\n" << r.raw;
    } else {
      // A whole GPU of the gang: on the NVSwitch node, the device as it is, no shim.
      EXPECT_EQ(a.node, kNvswitch);
      EXPECT_EQ(r.env["sharing"], "none");
      EXPECT_EQ(info[1], 81559 * kMiB) << r.raw;
      EXPECT_EQ(r.answers[5], "ok {}") << "no shim\n" << r.raw;
      train_uuids.insert(a.gpus[0].uuid);
    }
  }
  EXPECT_EQ(train_uuids.size(), 8u) << "no GPU is given to two exclusive pods";
  DeleteNamespace(ns);
}

// Every metric and label the Grafana dashboard queries is served by the installed scheduler (the
// leader) or an installed agent serving a share, scraped at their pods' addresses.
TEST_F(HelmInstall, DashboardQueriesOnlyServedMetrics) {
  const std::string ns = "dashboard";
  MakeNamespace(ns);
  json pod = ProbePodOnAnyNode(ns, "share", kScheduler, Install::Get().MachinesDir(),
                               {{"tessera.dev/gpu-memory", "4Gi"}}, {}, "sleep 3600\n");
  ASSERT_TRUE(Cp().KubectlOk({"create", "-f", "-"}, pod.dump()).ok());
  json running;
  ASSERT_TRUE(WaitUntil(
      [&] {
        running = GetJson(Cp(), {"pod", "share", "-n", ns});
        return running["status"].value("phase", "") == "Running";
      },
      seconds(120)))
      << running["status"].dump();
  const std::string node = running["spec"]["nodeName"];

  std::string scheduler_metrics, agent_metrics;
  for (const json& s : ReleasePods("tessera-scheduler")) {
    const std::string body = Get(s["status"].value("podIP", ""), 10269, "/metrics");
    if (body.find("\ntessera_scheduler_is_leader 1") != std::string::npos) scheduler_metrics = body;
  }
  ASSERT_NE(scheduler_metrics, "") << "no scheduler replica leads";
  std::string agent_ip;
  for (const json& a : ReleasePods("tessera-agent")) {
    if (a["spec"].value("nodeName", "") == node) agent_ip = a["status"].value("podIP", "");
  }
  ASSERT_NE(agent_ip, "");
  ASSERT_TRUE(WaitUntil(
      [&] {
        agent_metrics = Get(agent_ip, 9402, "/metrics");
        return agent_metrics.find("pod=\"share\"") != std::string::npos;
      },
      seconds(30)))
      << agent_metrics;
  const DashboardCheck check =
      CheckDashboard(DashboardQueries(), scheduler_metrics + "\n" + agent_metrics, "tessera_");
  EXPECT_THAT(check.problems, ::testing::IsEmpty());
  size_t agent_names = 0;
  for (const std::string& m : check.metrics) agent_names += m.starts_with("tessera_agent_") ? 1 : 0;
  EXPECT_GE(agent_names, 10u) << "the agent's panels";
  EXPECT_GE(check.metrics.size() - agent_names, 15u) << "the scheduler's panels";
  DeleteNamespace(ns);
}

// Last: helm uninstall removes the release's pods and objects (the Queue CRD stays, as Helm keeps
// every chart's CRDs).
TEST_F(HelmInstall, UninstallRemovesEverything) {
  CommandResult uninstall =
      Install::Get().RunHelm({"uninstall", "tessera", "--namespace", kNamespace, "--wait"});
  ASSERT_TRUE(uninstall.ok()) << uninstall.out << uninstall.err;
  EXPECT_TRUE(WaitUntil(
      [] {
        CommandResult r = Cp().Kubectl({"get", "pods", "-n", kNamespace, "-o", "name"});
        return r.ok() && r.out.empty();
      },
      seconds(90)));
  EXPECT_FALSE(Cp().KubectlOk({"get", "clusterrole", "tessera-agent"}).ok());
  EXPECT_FALSE(
      Cp().KubectlOk({"get", "validatingadmissionpolicy", "tessera-agent-node-scope"}).ok());
  EXPECT_TRUE(Cp().KubectlOk({"get", "crd", "queues.tessera.dev"}).ok());
}

}  // namespace
}  // namespace tessera::e2e
