// A new user's path (docs/install.md), on real harness nodes (kubelet + containerd, fake GPUs;
// test/controlplane/README.md), with the chart deploy/helm/tessera and nothing else:
//   - the tessera image built the documented way (deploy/image.sh, from the binaries of this
//     build) and imported into both nodes' containerd, as the probe image;
//   - `helm install` with the harness's values, checked by values.schema.json (image.pullPolicy
//     Never; apiServer.host/port, as there is no kube-proxy; the agent's fake GPUs and fake driver
//     through agent.devDir and agent.extraArgs; a run folder per node, as the two nodes share one
//     host), into the namespace made and labelled for PodSecurity first (docs/install.md: Helm
//     keeps its release record there, so the chart does not make it), --wait, from a copy of the
//     chart whose Queue CRD is older (no status columns): the scheduler (2 replicas, leader
//     election) and the agent (a DaemonSet on both nodes, ready through its /healthz probes) run as
//     pods, with nothing but their ServiceAccounts' tokens (the admission policies are on);
//   - `tessera doctor` finds nothing to fix (a marked place: doctor is another engineer's);
//   - the reality check's pods (20 shares of 4Gi and a gang of 8 whole GPUs in one NVLink domain)
//     are placed by the in-cluster scheduler, run, and report what their agents delivered;
//   - the examples under examples/k8s/ applied as written (the image aside) run with what they
//     ask, and the Queue's status says what its pods hold;
//   - every /metrics served passes `promtool check metrics`, and a real Prometheus scraping the
//     release as the chart's monitors do answers every query of the Grafana dashboard with data
//     and evaluates every alert of the chart without error;
//   - `helm upgrade` to the current chart upgrades the CRD (`kubectl get queues` shows the
//     allocation) without disturbing running pods;
//   - `helm uninstall` runs the pre-delete hook and leaves nothing on the nodes: no annotation,
//     label or extended resource the agent wrote, no host file in its run folders.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/strings.h"
#include "common/testing/promtool.h"
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
#include "scoped_process.h"
#include "yaml_json.h"

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
constexpr char kExamples[] = "examples";  // the namespace the examples are applied in
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

// The pods in the examples' namespace (a copy: a range-for over GetJson(...)["items"] would
// iterate a member of a destroyed temporary).
json ExamplePods() {
  return GetJson(Cp(), {"pods", "-n", kExamples}).value("items", json::array());
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
  std::string RunDir() const { return dir_ + "/run"; }
  std::string OldChart() const { return dir_ + "/old-chart"; }
  std::string ValuesFile() const { return dir_ + "/values.yaml"; }
  const std::string& dir() const { return dir_; }

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
          // The fake driver's NVML over the node's machine: the agent sees the pods' GPU
          // processes and the GPUs' busy time as over NVIDIA's (the dashboard's usage row).
          {"driverLibDir", fs::path(TESSERA_FAKE_NVML).parent_path().string()},
          {"extraEnv",
           {{{"name", "TESSERA_FAKE_GPU_MACHINE"},
             {"value", StrCat("/host", MachinesDir(), "/$(NODE_NAME)/machine")}}}},
          {"extraArgs",
           {StrCat("--gpus-file=/host", nodes, "/gpus.json"),
            StrCat("--driver-lib-dir=", fs::path(TESSERA_FAKE_CUDA).parent_path().string()),
            "--rediscover-interval=5s"}}}}};
    // The agents' run folders are under the test's folder, one per node (the two nodes share
    // this host; uninstall must empty them).
    values["agent"]["runDir"] = RunDir();
    values["agent"]["runDirPerNode"] = true;
    std::ofstream(dir_ + "/values.yaml") << values.dump(2) << "\n";  // JSON is YAML
    // The release before this one: the chart with a Queue CRD that had no status columns, so that
    // the upgrade later changes the CRD.
    if (std::string err = WriteOldChart(); !err.empty()) return err;
    // The namespace as docs/install.md makes it: before the release, labelled for the privileged
    // agent (PodSecurity).
    for (const std::vector<std::string>& step :
         {std::vector<std::string>{"create", "namespace", kNamespace},
          {"label", "namespace", kNamespace, "pod-security.kubernetes.io/enforce=privileged"}}) {
      absl::StatusOr<std::string> done = Cp().KubectlOk(step);
      if (!done.ok()) return StrCat("kubectl ", StrJoin(step, " "), ": ", done.status().message());
    }
    const auto start = std::chrono::steady_clock::now();
    CommandResult install = RunHelm({"install", "tessera", OldChart(), "--namespace", kNamespace,
                                     "-f", dir_ + "/values.yaml", "--wait", "--timeout", "5m"});
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    install_output_ = install.out;
    if (!install.ok()) {
      return StrCat("helm install: ", install.out, install.err, "\n", Logs());
    }
    std::cout << "helm install --wait: " << took << " s\n";
    return "";
  }

  // A copy of the chart whose Queue CRD has no status printer columns.
  std::string WriteOldChart() {
    std::error_code ec;
    fs::copy(StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera"), OldChart(),
             fs::copy_options::recursive, ec);
    if (ec) return StrCat("copying the chart: ", ec.message());
    const fs::path crd = fs::path(OldChart()) / "files/queue-crd.yaml";
    std::ifstream in(StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera/files/queue-crd.yaml"));
    std::string text;
    for (std::string line; std::getline(in, line);) {
      if (line.find("jsonPath: .status.") == std::string::npos) text += line + "\n";
    }
    fs::remove(crd, ec);
    std::ofstream(crd) << text;
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
  // The release's namespace allows the privileged agent (PodSecurity).
  const json ns = GetJson(Cp(), {"namespace", kNamespace});
  EXPECT_EQ(ns["metadata"]["labels"].value("pod-security.kubernetes.io/enforce", ""), "privileged");
}

// `kubectl tessera doctor` on the installed cluster finds nothing to fix: no error (exit 0), the
// namespace labelled for the privileged agent, both components running from one image, every GPU
// node publishing its GPUs.
TEST_F(HelmInstall, DoctorFindsNothingToFix) {
  CommandOptions o;
  o.env = {{"KUBECONFIG", Cp().kubeconfig()}};
  CommandResult doctor = RunCommand(
      {StrCat(TESSERA_BUILD_DIR, "/tessera"), "doctor", "--namespace", kNamespace, "-o", "json"},
      o);
  ASSERT_TRUE(doctor.ok()) << doctor.out << doctor.err;
  const json report = json::parse(doctor.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << doctor.out;
  EXPECT_EQ(report.value("errors", -1), 0) << doctor.out;
  std::map<std::string, std::vector<std::string>> severities;  // check -> severity of each finding
  for (const json& f : report["findings"]) {
    severities[f.value("check", "")].push_back(f.value("severity", ""));
  }
  for (const char* check : {"pod-security", "components", "version-skew", "inventory"}) {
    SCOPED_TRACE(check);
    ASSERT_TRUE(severities.contains(check)) << doctor.out;
    for (const std::string& s : severities[check]) EXPECT_EQ(s, "ok") << doctor.out;
  }
  // The chart's notes do not ask for the label the namespace has.
  EXPECT_THAT(Install::Get().install_output(),
              ::testing::Not(HasSubstr("must allow privileged pods")));
}

// The issue's reality check, placed by the installed scheduler and delivered by the installed
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

// A Prometheus server (from Debian's prometheus package, as promtool: scripts/setup.sh) scraping
// the installed release as the chart's ServiceMonitor and PodMonitor do: job tessera-scheduler
// (every replica), job tessera-agent with honor_labels; the chart's alerts as its rules.
class PrometheusServer {
 public:
  static std::unique_ptr<PrometheusServer> Start(const std::string& dir,
                                                 const std::vector<std::string>& schedulers,
                                                 const std::vector<std::string>& agents,
                                                 const std::string& rules, std::string* error) {
    const std::string binary = TESSERA_PROMETHEUS;
    if (binary.empty()) {
      *error = "prometheus not found when the build was configured: run scripts/setup.sh";
      return nullptr;
    }
    fs::create_directories(dir + "/data");
    std::ofstream(dir + "/rules.yaml") << rules;
    json config = {
        {"global", {{"scrape_interval", "1s"}, {"evaluation_interval", "1s"}}},
        {"rule_files", {dir + "/rules.yaml"}},
        {"scrape_configs",
         {{{"job_name", "tessera-scheduler"}, {"static_configs", {{{"targets", schedulers}}}}},
          {{"job_name", "tessera-agent"},
           {"honor_labels", true},
           {"static_configs", {{{"targets", agents}}}}}}}};
    std::ofstream(dir + "/prometheus.yml") << config.dump(2);  // JSON is YAML
    auto server = std::unique_ptr<PrometheusServer>(new PrometheusServer());
    server->port_ = FreePort();
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p = ScopedProcess::Start(
        {binary, StrCat("--config.file=", dir, "/prometheus.yml"),
         StrCat("--storage.tsdb.path=", dir, "/data"),
         StrCat("--web.listen-address=127.0.0.1:", server->port_), "--log.level=warn"},
        dir + "/prometheus.log");
    if (!p.ok()) {
      *error = p.status().ToString();
      return nullptr;
    }
    server->process_ = std::move(*p);
    if (!WaitUntil(
            [&] { return ::tessera::e2e::Get("127.0.0.1", server->port_, "/-/ready") != ""; },
            seconds(60))) {
      *error = StrCat("prometheus did not get ready: ", server->process_->Log());
      return nullptr;
    }
    return server;
  }

  // The result vector of an instant query, or an error text.
  absl::StatusOr<json> Query(const std::string& expr) const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(30);
    auto got = client.Get("/api/v1/query", httplib::Params{{"query", expr}}, httplib::Headers{});
    if (!got) return absl::UnavailableError("no answer");
    json body = json::parse(got->body, nullptr, false);
    if (body.is_discarded() || body.value("status", "") != "success") {
      return absl::InvalidArgumentError(got->body);
    }
    return body["data"]["result"];
  }
  json Rules() const {
    return json::parse(::tessera::e2e::Get("127.0.0.1", port_, "/api/v1/rules"), nullptr, false);
  }
  std::string Log() const { return process_->Log(); }

 private:
  // A port the kernel picks, its socket closed again (httplib::Server::stop() closes only a
  // listening server's socket: a port taken with bind_to_any_port stayed bound, and Prometheus
  // failed with "address already in use").
  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    return port;
  }
  int port_ = 0;
  std::unique_ptr<ScopedProcess> process_;
};

// The examples under examples/k8s/ (the top folder: classic mode), applied as a user applies
// them: nothing changed but the image (the harness has no registry; the probe image has the shell
// the examples' commands run). Each pod runs with what it asked for; the Queue's status says
// what its pods hold. The pods stay for the next tests (metrics, upgrade).
TEST_F(HelmInstall, ExamplesRunAsWritten) {
  MakeNamespace(kExamples);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(StrCat(TESSERA_SOURCE_DIR, "/examples/k8s"))) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 6u);
  for (const std::string& f : files) {
    std::string text = Read(f);
    const std::string image = "image: nvidia/cuda:12.6.3-base-ubuntu24.04";
    for (size_t at; (at = text.find(image)) != std::string::npos;) {
      text.replace(at, image.size(), StrCat("image: ", kProbeImage));
    }
    absl::StatusOr<std::string> applied =
        Cp().KubectlOk({"apply", "-n", kExamples, "-f", "-"}, text);
    ASSERT_TRUE(applied.ok()) << f << ": " << applied.status();
  }
  // Every pod bound and running (the Job's: succeeded), each with its assignment.
  std::map<std::string, json> pods;
  ASSERT_TRUE(WaitUntil(
      [&] {
        pods.clear();
        const json list = GetJson(Cp(), {"pods", "-n", kExamples});
        for (const json& p : list["items"]) {
          pods[p["metadata"]["name"]] = p;
        }
        int ready = 0;
        for (const auto& [name, p] : pods) {
          const std::string phase = p["status"].value("phase", "");
          ready += phase == "Succeeded" || (phase == "Running" && RunningAndReady(p)) ? 1 : 0;
        }
        return pods.size() == 9 && ready == 9;  // 4 pods, 2 Job workers, 3 replicas
      },
      seconds(300)))
      << [&] {
           std::string out;
           for (const auto& [name, p] : pods) {
             StrAppend(&out, name, ": ", p["status"].value("phase", ""), " ",
                       p["status"].value("conditions", json::array()).dump(), "\n");
           }
           return out;
         }();
  int job_workers = 0, replicas = 0;
  std::set<std::string> gang_nodes;
  for (const auto& [name, pod] : pods) {
    SCOPED_TRACE(name);
    const records::Assignment a = AssignmentOf(pod);
    EXPECT_EQ(a.node, pod["spec"].value("nodeName", ""));
    if (name == "share-4gi") {
      ASSERT_EQ(a.gpus.size(), 1u);
      EXPECT_FALSE(a.gpus[0].grant.exclusive);
      EXPECT_EQ(a.gpus[0].grant.memory_mib, 4096);
    } else if (name == "share-compute") {
      ASSERT_EQ(a.gpus.size(), 1u);
      EXPECT_EQ(a.gpus[0].grant.memory_mib, 8192);
      EXPECT_EQ(a.gpus[0].grant.compute_milli, 250);
    } else if (name == "whole-gpu") {
      ASSERT_EQ(a.gpus.size(), 1u);
      EXPECT_TRUE(a.gpus[0].grant.exclusive);
    } else if (name == "train-4gpu") {
      EXPECT_EQ(a.gpus.size(), 4u);
      EXPECT_EQ(a.node, kNvswitch) << "four NVLink-joined GPUs: the NVSwitch node";
    } else if (name.starts_with("allreduce-")) {
      ++job_workers;
      EXPECT_EQ(a.gpus.size(), 1u);
      gang_nodes.insert(a.node);
    } else if (name.starts_with("inference-")) {
      ++replicas;
      ASSERT_EQ(a.gpus.size(), 1u);
      EXPECT_EQ(a.gpus[0].grant.memory_mib, 4096);
      EXPECT_EQ(pod["metadata"]["annotations"].value("tessera.dev/queue", ""), "team-a");
    } else {
      ADD_FAILURE() << "a pod no example makes";
    }
  }
  EXPECT_EQ(job_workers, 2);
  EXPECT_EQ(gang_nodes, (std::set<std::string>{kNvswitch})) << "the gang in one NVLink domain";
  EXPECT_EQ(replicas, 3);
  // The Queue's status, written by the leader: its three replicas hold three 4Gi shares.
  json queue;
  EXPECT_TRUE(WaitUntil(
      [&] {
        queue = GetJson(Cp(), {"queue", "team-a"});
        const json& st = queue.value("status", json::object());
        return st.value("pendingPods", -1) == 0 &&
               st.value("allocated", json::object()).value("gpuMemory", "") == "12Gi";
      },
      seconds(60)))
      << queue.dump(2);
  EXPECT_NE(queue["status"]["allocated"].value("gpu", "0"), "0") << queue.dump(2);
}

// Every /metrics of the release passes promtool, and a real Prometheus scraping them as the
// chart's monitors do answers each query of the Grafana dashboard with data (a query that only
// filters for problems, "== 0", may be empty) and evaluates each of the chart's alerts.
TEST_F(HelmInstall, MetricsPassPromtoolAndTheDashboardHasData) {
  std::vector<std::string> scheduler_targets, agent_targets;
  bool leader = false;
  for (const json& s : ReleasePods("tessera-scheduler")) {
    const std::string ip = s["status"].value("podIP", "");
    const std::string body = Get(ip, 10269, "/metrics");
    ASSERT_NE(body, "") << ip;
    absl::Status lint = ::tessera::testing::PromtoolCheckMetrics(body);
    EXPECT_TRUE(lint.ok()) << lint;
    leader |= body.find("\ntessera_scheduler_is_leader 1") != std::string::npos;
    EXPECT_THAT(body, HasSubstr("tessera_build_info{version=\""));
    scheduler_targets.push_back(StrCat(ip, ":10269"));
  }
  EXPECT_TRUE(leader) << "no scheduler replica leads";
  for (const json& a : ReleasePods("tessera-agent")) {
    const std::string ip = a["status"].value("podIP", "");
    const std::string body = Get(ip, 9402, "/metrics");
    ASSERT_NE(body, "") << ip;
    absl::Status lint = ::tessera::testing::PromtoolCheckMetrics(body);
    EXPECT_TRUE(lint.ok()) << lint;
    agent_targets.push_back(StrCat(ip, ":9402"));
  }
  // The chart's alerts, as its PrometheusRule carries them.
  CommandResult rendered = Install::Get().RunHelm(
      {"template", "tessera", StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera"), "--namespace",
       kNamespace, "--set", "metrics.prometheusRule.enabled=true", "--show-only",
       "templates/prometheusrule.yaml"});
  ASSERT_TRUE(rendered.ok()) << rendered.err;
  const std::vector<json> rule = YamlDocuments(rendered.out);
  ASSERT_EQ(rule.size(), 1u);
  std::string error;
  std::unique_ptr<PrometheusServer> prometheus = PrometheusServer::Start(
      Install::Get().dir() + "/prometheus", scheduler_targets, agent_targets,
      json{{"groups", rule[0]["spec"]["groups"]}}.dump(2), &error);
  ASSERT_NE(prometheus, nullptr) << error;

  std::vector<std::string> queries = DashboardQueries();
  ASSERT_GE(queries.size(), 30u);
  std::map<std::string, std::string> missing;  // query -> why
  const bool answered = WaitUntil(
      [&] {
        missing.clear();
        for (std::string q : queries) {
          for (const char* var : {"$job", "$agent_job"}) {
            for (size_t at; (at = q.find(var)) != std::string::npos;)
              q.replace(at, strlen(var), ".*");
          }
          absl::StatusOr<json> r = prometheus->Query(q);
          if (!r.ok()) {
            missing[q] = r.status().ToString();
          } else if (r->empty() && q.find("== 0") == std::string::npos) {
            missing[q] = "no data";
          }
        }
        return missing.empty();
      },
      seconds(90));
  EXPECT_TRUE(answered) << [&] {
    std::string out;
    for (const auto& [q, why] : missing) StrAppend(&out, q, "\n    ", why, "\n");
    return StrCat(out, prometheus->Log());
  }();
  // Every alert evaluates (health "ok"), none of the problems they watch is present.
  json rules;
  ASSERT_TRUE(WaitUntil(
      [&] {
        rules = prometheus->Rules();
        if (!rules.is_object() || !rules.contains("data")) return false;
        for (const json& g : rules["data"]["groups"]) {
          for (const json& r : g["rules"]) {
            if (r.value("health", "") != "ok") return false;
          }
        }
        return true;
      },
      seconds(60)))
      << rules.dump(2);
  size_t alerts = 0;
  for (const json& g : rules["data"]["groups"]) {
    for (const json& r : g["rules"]) {
      ++alerts;
      if (r["name"] != "TesseraGpuCapRefusals") {
        EXPECT_EQ(r.value("state", ""), "inactive") << r.dump(2);
      }
    }
  }
  EXPECT_EQ(alerts, 6u);
}

// `tessera status -o wide` reads what the installed agents measured per pod (their /metrics
// through the API server's pod proxy) and shows it beside each grant; `--usage always` puts it in
// the JSON too. The pods left running by the earlier cases have GPU busy time measured (the
// agents see the fake driver through NVML).
TEST_F(HelmInstall, StatusWideShowsWhatTheAgentsMeasured) {
  CommandOptions o;
  o.env = {{"KUBECONFIG", Cp().kubeconfig()}};
  json doc;
  std::string err;
  int with_busy = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        CommandResult r = RunCommand(
            {StrCat(TESSERA_BUILD_DIR, "/tessera"), "status", "-o", "json", "--usage", "always"},
            o);
        if (!r.ok()) return false;
        doc = json::parse(r.out, nullptr, false);
        err = r.err;
        with_busy = 0;
        if (!doc.is_object()) return false;
        for (const json& n : doc["nodes"]) {
          for (const json& g : n["gpus"]) {
            for (const json& p : g["pods"]) {
              if (p.contains("usage") && p["usage"].value("busy_seconds", -1.0) >= 0) ++with_busy;
            }
          }
        }
        return with_busy > 0;
      },
      seconds(60)))
      << err << doc.dump(2);
  EXPECT_THAT(err, ::testing::Not(HasSubstr("no usage"))) << err;
  CommandResult wide =
      RunCommand({StrCat(TESSERA_BUILD_DIR, "/tessera"), "status", "-o", "wide"}, o);
  ASSERT_TRUE(wide.ok()) << wide.out << wide.err;
  // "[busy 12s]", or "[used 3Gi, busy 12s]" where the driver or the shim counted the memory
  // (every whole-GPU pod since the agent samples the driver for them).
  EXPECT_THAT(wide.out, ::testing::ContainsRegex(R"( \[(used [^],]+, )?busy )")) << wide.out;
  CommandResult plain = RunCommand({StrCat(TESSERA_BUILD_DIR, "/tessera"), "status"}, o);
  ASSERT_TRUE(plain.ok()) << plain.out << plain.err;
  EXPECT_THAT(plain.out, ::testing::Not(::testing::ContainsRegex(R"(\[(used|busy) )")))
      << plain.out;
}

// `helm upgrade` from the release before (its Queue CRD without status columns) to this chart:
// the CRD is upgraded (kubectl get queues shows the allocation), the release's pods are ready
// again, and the examples' pods are untouched.
TEST_F(HelmInstall, UpgradeUpgradesTheCrdAndKeepsPodsRunning) {
  std::map<std::string, std::string> before;  // pod -> uid
  for (const json& p : ExamplePods()) {
    before[p["metadata"]["name"]] = p["metadata"]["uid"];
  }
  ASSERT_FALSE(before.empty()) << "ExamplesRunAsWritten leaves its pods";
  absl::StatusOr<std::string> table = Cp().KubectlOk({"get", "queues"});
  ASSERT_TRUE(table.ok());
  EXPECT_THAT(*table, ::testing::Not(HasSubstr("ALLOCATED GPUS"))) << "the older CRD";
  CommandResult upgrade = Install::Get().RunHelm(
      {"upgrade", "tessera", StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera"), "--namespace",
       kNamespace, "-f", Install::Get().ValuesFile(), "--wait", "--timeout", "5m"});
  ASSERT_TRUE(upgrade.ok()) << upgrade.out << upgrade.err;
  EXPECT_THAT(upgrade.out, HasSubstr("STATUS: deployed"));
  table = Cp().KubectlOk({"get", "queues"});
  ASSERT_TRUE(table.ok());
  EXPECT_THAT(*table, HasSubstr("ALLOCATED GPUS"));
  EXPECT_THAT(*table, HasSubstr("PENDING PODS"));
  std::cout << "kubectl get queues after the upgrade:\n" << *table;
  for (const char* component : {"tessera-scheduler", "tessera-agent"}) {
    for (const json& pod : ReleasePods(component)) {
      EXPECT_TRUE(RunningAndReady(pod)) << pod["metadata"]["name"];
    }
  }
  for (const json& p : ExamplePods()) {
    const std::string name = p["metadata"]["name"];
    EXPECT_EQ(before[name], p["metadata"]["uid"]) << name;
    if (name.starts_with("allreduce-")) continue;
    EXPECT_TRUE(RunningAndReady(p)) << name;
    for (const json& c : p["status"].value("containerStatuses", json::array())) {
      EXPECT_EQ(c.value("restartCount", -1), 0) << name;
    }
  }
  DeleteNamespace(kExamples);
}

// Last: helm uninstall runs the pre-delete hook, which deletes the agents first; each removes what
// it made on its node and host as it stops; then everything of the release goes. Nothing of
// tessera's stays on the nodes (docs/operations.md, "Uninstall"): the Node objects carry none of
// the agent's annotations, labels or extended resources, and its run folders are gone. The Queue
// CRD stays (resource-policy keep), as do the tessera.dev/gpu-node labels the harness set.
TEST_F(HelmInstall, UninstallLeavesNothingOnTheNodes) {
  for (const char* node : {kNvswitch, kPcie}) {
    EXPECT_TRUE(fs::exists(StrCat(Install::Get().RunDir(), "/", node, "/pods"))) << node;
  }
  CommandResult uninstall = Install::Get().RunHelm(
      {"uninstall", "tessera", "--namespace", kNamespace, "--wait", "--timeout", "5m"});
  ASSERT_TRUE(uninstall.ok()) << uninstall.out << uninstall.err;
  // The namespace was made before the release, so it stays (docs/operations.md deletes it after).
  EXPECT_TRUE(Cp().KubectlOk({"get", "namespace", kNamespace}).ok());
  for (const char* node : {kNvswitch, kPcie}) {
    SCOPED_TRACE(node);
    const json n = GetJson(Cp(), {"node", node});
    const json annotations = n["metadata"].value("annotations", json::object());
    for (const auto& [k, v] : annotations.items()) {
      EXPECT_FALSE(k.starts_with("tessera.dev/")) << k << "=" << v;
    }
    const json labels = n["metadata"].value("labels", json::object());
    for (const auto& [k, v] : labels.items()) {
      if (k == "tessera.dev/gpu-node") continue;  // the harness's, as an administrator's
      EXPECT_FALSE(k.starts_with("tessera.dev/")) << k << "=" << v;
    }
    for (const char* list : {"capacity", "allocatable"}) {
      const json resources = n["status"].value(list, json::object());
      for (const auto& [k, v] : resources.items()) {
        EXPECT_FALSE(k.starts_with("tessera.dev/")) << list << " " << k;
      }
    }
    EXPECT_TRUE(n["metadata"]["labels"].contains("tessera.dev/gpu-node"));
    const std::string run = StrCat(Install::Get().RunDir(), "/", node);
    EXPECT_FALSE(fs::exists(run)) << run << " is left";
  }
  EXPECT_FALSE(Cp().KubectlOk({"get", "clusterrole", "tessera-agent"}).ok());
  EXPECT_FALSE(Cp().KubectlOk({"get", "clusterrole", "tessera-uninstall"}).ok())
      << "the hook's objects go once it succeeded";
  EXPECT_FALSE(
      Cp().KubectlOk({"get", "validatingadmissionpolicy", "tessera-agent-node-scope"}).ok());
  EXPECT_TRUE(Cp().KubectlOk({"get", "crd", "queues.tessera.dev"}).ok());
}

}  // namespace
}  // namespace tessera::e2e
