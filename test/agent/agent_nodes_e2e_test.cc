// The node agent on real harness nodes (test/controlplane: kubelet + containerd, fake GPUs):
// `tessera agent` runs in each node, discovers the fake GPUs and publishes them; `tessera
// scheduler` places the pods; the kubelet and containerd start them, and the agent, as the NRI
// plugin of the node's containerd, gives each container its GPUs and, for a share, the CUDA shim
// in front of the driver. Nothing is written by hand.
//
// The driver inside the containers is the fake one of test/fake_cuda (libcuda.so.1,
// libnvidia-ml.so.1), which the agent finds through --driver-lib-dir as it would find NVIDIA's;
// its "hardware" is a machine file per node (fake_machine.h) with the node's GPUs, mounted into the
// pods by a hostPath volume. Each container runs test/shim's shim_client in the image
// tessera.local/cuda-probe:1 (probe_image.sh) and writes what it got to its termination message:
// NVIDIA_VISIBLE_DEVICES, the share's environment, and the driver's answers (cuMemGetInfo,
// cuDeviceTotalMem, an allocation beyond the cap, whether the shim answered).
//
// The fake driver sees every GPU of its machine file, where the real one sees only the device
// nodes the container was given; the probe narrows it with CUDA_VISIBLE_DEVICES set to
// NVIDIA_VISIBLE_DEVICES, as the NVIDIA container toolkit's device selection would.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "fake_cuda/fake_machine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "probe_pod.h"
#include "records/assignment.h"
#include "scoped_process.h"

namespace tessera::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kNvswitch[] = "gpu-a";  // 8 x H100, NVSwitch
constexpr char kPcie[] = "gpu-b";      // 2 x L40S, PCIe
constexpr char kScheduler[] = "tessera-e2e";
constexpr int64_t kMiB = 1 << 20;

ControlPlane& Cp() { return ControlPlane::Shared(); }

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Everything this binary's tests share: the probe image in both nodes, a fake machine per node,
// an agent per node, one scheduler. Made by the first test that needs it.
class World {
 public:
  static World& Get() {
    static World* w = new World();
    return *w;
  }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  std::string AgentLog(const std::string& node) const {
    return Read(Cp().FindNode(node)->dir + "/agent.log");
  }
  // The agent's /metrics (the port it logged last).
  std::string AgentMetrics(const std::string& node) const {
    const std::string log = AgentLog(node);
    const std::string mark = "serving /metrics on http://127.0.0.1:";
    const size_t at = log.rfind(mark);
    if (at == std::string::npos) return "";
    httplib::Client client("127.0.0.1", std::stoi(log.substr(at + mark.size())));
    auto got = client.Get("/metrics");
    if (!got || got->status != 200) return "";
    // promtool passes on every /metrics the tests scrape.
    absl::Status lint = ::tessera::testing::PromtoolCheckMetricsOnce(got->body);
    EXPECT_TRUE(lint.ok()) << lint;
    return got->body;
  }
  std::string SchedulerLog() const { return scheduler_ ? scheduler_->Log() : ""; }
  std::string PodsDir(const std::string& node) const { return dir_ + "/pods-" + node; }
  std::string MachinesDir() const { return dir_ + "/machines"; }
  std::string MachineDir(const std::string& node) const { return MachinesDir() + "/" + node; }

  // The agent's command line on `node`.
  std::vector<std::string> AgentArgv(const std::string& node) const {
    const Node* n = Cp().FindNode(node);
    return {TESSERA_BINARY,
            "agent",
            "--node-name",
            node,
            "--gpus-file",
            n->fake_gpus,
            "--dev-dir",
            n->dev_dir,
            "--pods-dir",
            PodsDir(node),
            "--driver-lib-dir",
            fs::path(TESSERA_FAKE_CUDA).parent_path().string(),
            "--shim-dir",
            fs::path(TESSERA_SHIM_LIBRARY).parent_path().string(),
            "--shim-install-dir",
            dir_ + "/lib-" + node,
            "--mps-root",
            dir_ + "/mps-" + node,
            "--rediscover-interval",
            "1s",
            "--metrics-bind-address",
            "127.0.0.1",
            "--metrics-port",
            "0"};
  }
  absl::Status StartAgent(const std::string& node) {
    absl::StatusOr<pid_t> pid = Cp().NodeSpawn(node, "agent", AgentArgv(node), {});
    if (!pid.ok()) return pid.status();
    return absl::OkStatus();
  }
  // Whether the agent on `node` has registered with containerd's NRI since its log had `from`
  // bytes.
  bool AgentReady(const std::string& node, size_t from = 0) const {
    const std::string log = AgentLog(node);
    return log.size() > from && log.find("NRI: configured by", from) != std::string::npos;
  }

 private:
  World() {
    char tmpl[] = "/tmp/tessera-agent-e2e-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    error_ = Setup();
  }

  std::string Setup() {
    // The probe image, into both nodes.
    const std::string image = dir_ + "/cuda-probe.tar";
    CommandResult built =
        RunCommand({TESSERA_SOURCE_DIR "/test/agent/probe_image.sh", image, TESSERA_SHIM_CLIENT,
                    TESSERA_FAKE_CUDA, TESSERA_FAKE_NVML, TESSERA_SHIM_LIBRARY});
    if (!built.ok()) return StrCat("probe_image.sh: ", built.out, built.err);
    for (const char* node : {kNvswitch, kPcie}) {
      CommandResult imported =
          Cp().NodeExec(node, {"ctr", "-n", "k8s.io", "images", "import", image});
      if (!imported.ok()) return StrCat("import into ", node, ": ", imported.out, imported.err);
      // The fake driver's machine: the node's GPUs.
      json gpus = json::parse(Read(Cp().FindNode(node)->fake_gpus));
      std::vector<fake::DeviceSpec> devices;
      for (const json& g : gpus["gpus"]) {
        fake::DeviceSpec d;
        d.uuid = g["uuid"];
        d.name = g.value("name", "fake");
        d.total_bytes = g["memory_mib"].get<uint64_t>() << 20;
        d.sm_count = g.value("sm_count", 100);
        devices.push_back(d);
      }
      fs::create_directories(MachineDir(node));
      std::string err = fake::CreateMachine(MachineDir(node) + "/machine", devices);
      if (!err.empty()) return StrCat("fake machine of ", node, ": ", err);
      ::chmod((MachineDir(node) + "/machine").c_str(), 0666);
      absl::Status started = StartAgent(node);
      if (!started.ok()) return StrCat("agent on ", node, ": ", started.message());
    }
    for (const char* node : {kNvswitch, kPcie}) {
      if (!WaitUntil([&] { return AgentReady(node); }, seconds(60))) {
        return StrCat("the agent on ", node, " did not register with NRI:\n", AgentLog(node));
      }
    }
    // The scheduler, for every node.
    std::ofstream(dir_ + "/scheduler.yaml") << StrCat(R"(apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: )",
                                                      kScheduler, R"(
leaderElection:
  resourceNamespace: default
  resourceName: tessera-scheduler-e2e
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 500ms
metrics: {bindAddress: 127.0.0.1, port: 0}
retry: {minInterval: 200ms, period: 2s}
)");
    absl::StatusOr<std::unique_ptr<ScopedProcess>> s =
        ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", Cp().kubeconfig(),
                              "--config", dir_ + "/scheduler.yaml", "--identity", "e2e"},
                             dir_ + "/scheduler.log");
    if (!s.ok()) return StrCat("scheduler: ", s.status().message());
    scheduler_ = std::move(*s);
    // Both inventories published, and the nodes' capacity in place for the kubelet.
    for (const char* node : {kNvswitch, kPcie}) {
      bool published = WaitUntil(
          [&] {
            CommandResult r = Cp().Kubectl({"get", "node", node, "-o", "json"});
            if (!r.ok()) return false;
            json n = json::parse(r.out);
            return n["metadata"]["annotations"].contains("tessera.dev/gpu-inventory") &&
                   n["status"]["allocatable"].contains("tessera.dev/gpu-memory");
          },
          seconds(60));
      if (!published) return StrCat("node ", node, " not published:\n", AgentLog(node));
    }
    return "";
  }

  static CommandResult RunCommand(const std::vector<std::string>& argv) {
    CommandResult r;
    std::string cmd;
    for (const std::string& a : argv) cmd += "'" + a + "' ";
    cmd += "2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }

  std::string error_, dir_;
  std::unique_ptr<ScopedProcess> scheduler_;
};

// The probe pod (probe_pod.h) for this binary's scheduler, on `node`, or on the node the
// scheduler picks if `node` is empty: `limits` its tessera resources; `annotations` (gangs).
json ProbePod(const std::string& ns, const std::string& name, const std::string& node,
              const std::map<std::string, std::string>& limits,
              const std::map<std::string, std::string>& annotations = {},
              const std::string& extra_script = "") {
  json pod = ProbePodOnAnyNode(ns, name, kScheduler, World::Get().MachinesDir(), limits,
                               annotations, extra_script);
  // Pods pinned to a node by the label the harness gives it.
  if (!node.empty()) pod["spec"]["nodeSelector"] = {{"tessera-e2e/node", node}};
  return pod;
}

class AgentNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(World::Get().error(), "");
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ns_ = "e2e-";
    for (char c : test) {
      if (std::isupper(static_cast<unsigned char>(c)) && ns_.size() > 4) ns_ += '-';
      ns_ += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    ns_ = ns_.substr(0, 50);
    while (ns_.back() == '-') ns_.pop_back();
    ASSERT_TRUE(Cp().KubectlOk({"create", "namespace", ns_}).ok());
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "--- scheduler log (tail):\n"
                << Tail(World::Get().SchedulerLog()) << "--- agent " << kNvswitch << ":\n"
                << Tail(World::Get().AgentLog(kNvswitch)) << "--- agent " << kPcie << ":\n"
                << Tail(World::Get().AgentLog(kPcie));
    }
    // No namespace controller runs here: the pods go first, so no test inherits another's GPUs.
    (void)Cp().Kubectl(
        {"delete", "pods", "--all", "-n", ns_, "--grace-period=1", "--wait=true", "--timeout=90s"});
    (void)Cp().Kubectl({"delete", "namespace", ns_, "--wait=false"});
  }
  static std::string Tail(const std::string& s) {
    return s.size() > 6000 ? s.substr(s.size() - 6000) : s;
  }

  void Create(const json& pod) {
    auto r = Cp().KubectlOk({"create", "-f", "-"}, pod.dump());
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // Creates every pod with one kubectl call (at once, as far as the API server is concerned).
  void CreateAll(const std::vector<json>& pods) {
    json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", pods}};
    auto r = Cp().KubectlOk({"create", "-f", "-"}, list.dump());
    ASSERT_TRUE(r.ok()) << r.status();
  }
  json Pod(const std::string& name) { return GetJson(Cp(), {"pod", name, "-n", ns_}); }
  std::map<std::string, json> WaitAllFinished(size_t count, seconds timeout) {
    return WaitAllPodsFinished(Cp(), ns_, count, timeout);
  }
  static records::Assignment AssignmentOf(const json& pod) {
    const json& ann = pod["metadata"].value("annotations", json::object());
    absl::StatusOr<records::Assignment> a =
        records::AssignmentFromJson(ann.value("tessera.dev/assignment", ""));
    EXPECT_TRUE(a.ok()) << pod["metadata"]["name"] << ": " << a.status();
    return a.ok() ? *a : records::Assignment();
  }

  // Checks a share pod's report against its assignment: its GPU, its cap, the shim.
  void ExpectShare(const std::string& name, const json& pod, int64_t cap_mib) {
    SCOPED_TRACE(name);
    EXPECT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump();
    const records::Assignment a = AssignmentOf(pod);
    ASSERT_EQ(a.gpus.size(), 1u);
    EXPECT_EQ(a.node, pod["spec"].value("nodeName", ""));
    ProbeReport r = ParseProbeReport(TerminationMessage(pod));
    ASSERT_TRUE(r.ok) << r.raw;
    EXPECT_EQ(r.env["visible"], a.gpus[0].uuid) << r.raw;
    EXPECT_EQ(r.env["sharing"], "shim");
    EXPECT_EQ(r.env["limit_mib"], std::to_string(cap_mib));
    EXPECT_EQ(r.answers[0], "ok") << r.raw;
    const std::vector<int64_t> info = ProbeNumbers(r.answers[2]);
    ASSERT_EQ(info.size(), 2u) << r.raw;
    EXPECT_EQ(info[1], cap_mib * kMiB) << "cuMemGetInfo total is the cap\n" << r.raw;
    EXPECT_EQ(info[0], cap_mib * kMiB - kMiB) << "free = cap - used\n" << r.raw;
    EXPECT_EQ(ProbeNumbers(r.answers[3]), std::vector<int64_t>{cap_mib * kMiB}) << r.raw;
    EXPECT_EQ(r.answers[4].rfind("err 2", 0), 0u) << "beyond the cap: out of memory\n" << r.raw;
    EXPECT_TRUE(r.answers[5].rfind("ok {\"", 0) == 0) << "the shim answers\n" << r.raw;
  }
  // A whole-GPU pod: its GPU, the device as it is, no shim.
  void ExpectWhole(const std::string& name, const json& pod, int64_t gpu_mib) {
    SCOPED_TRACE(name);
    EXPECT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump();
    const records::Assignment a = AssignmentOf(pod);
    ASSERT_EQ(a.gpus.size(), 1u);
    ProbeReport r = ParseProbeReport(TerminationMessage(pod));
    ASSERT_TRUE(r.ok) << r.raw;
    EXPECT_EQ(r.env["visible"], a.gpus[0].uuid);
    EXPECT_EQ(r.env["sharing"], "none");
    const std::vector<int64_t> info = ProbeNumbers(r.answers[2]);
    ASSERT_EQ(info.size(), 2u) << r.raw;
    EXPECT_EQ(info[1], gpu_mib * kMiB) << r.raw;
    EXPECT_EQ(r.answers[5], "ok {}") << "no shim\n" << r.raw;
  }
  // The agent removed every pod's files once the pods are gone.
  void ExpectPodFilesReaped(const std::string& node) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          std::error_code ec;
          for (const auto& e : fs::directory_iterator(World::Get().PodsDir(node), ec)) {
            (void)e;
            return false;
          }
          return true;
        },
        seconds(60)))
        << "pod files left in " << World::Get().PodsDir(node);
  }

  std::string ns_;
};

// The issue's reality check: 20 pods of 4Gi and a gang of 8 one-GPU pods in one NVLink domain,
// on an 8-GPU NVSwitch node and a 2-GPU PCIe node; every container reports exactly its
// assignment's GPU and cap.
TEST_F(AgentNodes, RealityCheck) {
  std::vector<json> pods;
  for (int i = 0; i < 20; ++i) {
    pods.push_back(ProbePod(ns_, StrCat("inference-", i), "", {{"tessera.dev/gpu-memory", "4Gi"}}));
  }
  for (int i = 0; i < 8; ++i) {
    json p = ProbePod(ns_, StrCat("train-", i), "", {{"tessera.dev/gpu", "1"}},
                      {{"tessera.dev/gang", "train"},
                       {"tessera.dev/gang-size", "8"},
                       {"tessera.dev/gang-topology", "nvlink-domain"}});
    pods.push_back(p);
  }
  const auto start = std::chrono::steady_clock::now();
  CreateAll(pods);
  std::map<std::string, json> done = WaitAllFinished(28, seconds(420));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "reality check: 28 pods created, run and reported in " << took << " s\n";
  ASSERT_EQ(done.size(), 28u);
  std::set<std::string> train_uuids;
  for (const auto& [name, pod] : done) {
    if (name.rfind("inference-", 0) == 0) {
      ExpectShare(name, pod, 4096);
    } else {
      const records::Assignment a = AssignmentOf(pod);
      EXPECT_EQ(a.node, kNvswitch) << name;
      ExpectWhole(name, pod, 81559);
      if (!a.gpus.empty()) train_uuids.insert(a.gpus[0].uuid);
    }
  }
  EXPECT_EQ(train_uuids.size(), 8u) << "no GPU is given to two exclusive pods";
  ASSERT_TRUE(Cp().KubectlOk({"delete", "pods", "--all", "-n", ns_, "--wait=true"}).ok());
  ExpectPodFilesReaped(kNvswitch);
  ExpectPodFilesReaped(kPcie);
}

// 20 share pods created at once on one node: each container's GPU and cap equal its own
// assignment, five times in a row.
TEST_F(AgentNodes, TwentySharesAtOnceFiveTimes) {
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(StrCat("round ", round));
    std::vector<json> pods;
    for (int i = 0; i < 20; ++i) {
      // Sizes differ, so that a swap between two pods would show.
      pods.push_back(ProbePod(ns_, StrCat("share-", round, "-", i), kNvswitch,
                              {{"tessera.dev/gpu-memory", StrCat(1 + i % 7, "Gi")}}));
    }
    const auto start = std::chrono::steady_clock::now();
    CreateAll(pods);
    std::map<std::string, json> done = WaitAllFinished(20, seconds(300));
    std::cout << "round " << round << ": 20 share pods created, run and reported in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s\n";
    ASSERT_EQ(done.size(), 20u);
    for (int i = 0; i < 20; ++i) {
      const std::string name = StrCat("share-", round, "-", i);
      ExpectShare(name, done[name], (1 + i % 7) * 1024);
    }
    ASSERT_TRUE(Cp().KubectlOk({"delete", "pods", "--all", "-n", ns_, "--wait=true"}).ok());
    ExpectPodFilesReaped(kNvswitch);
    if (HasFailure()) return;
  }
}

// A pod that reports (as ProbePod) and then keeps running, holding 1 MiB of its GPU.
json LongPod(const std::string& ns, const std::string& name, const std::string& node,
             const std::map<std::string, std::string>& limits) {
  json pod = ProbePod(ns, name, node, limits);
  pod["spec"]["containers"][0]["command"][2] =
      R"(export CUDA_VISIBLE_DEVICES="$NVIDIA_VISIBLE_DEVICES"
echo "visible=$NVIDIA_VISIBLE_DEVICES" >/dev/termination-log
{ printf 'init\nalloc a 1048576\n'; sleep 3600; } | shim_client
)";
  return pod;
}

// A pod bound by hand (spec.nodeName, no scheduler) with an assignment record of its own making:
// what admission refuses to anyone but the scheduler (deploy/), seen from the node.
json HandBound(const std::string& ns, const std::string& name, const std::string& node,
               const std::string& record) {
  json pod = ProbePod(ns, name, node, {});
  pod["spec"].erase("schedulerName");
  pod["spec"].erase("nodeSelector");
  pod["spec"]["nodeName"] = node;
  pod["spec"]["containers"][0].erase("resources");
  pod["metadata"]["annotations"]["tessera.dev/assignment"] = record;
  return pod;
}

// The waiting container's (reason, message), as kubectl describe shows them.
std::pair<std::string, std::string> Waiting(const json& pod) {
  const json& statuses = pod["status"].value("containerStatuses", json::array());
  if (statuses.empty()) return {"", ""};
  const json w = statuses[0]["state"].value("waiting", json::object());
  return {w.value("reason", ""), w.value("message", "")};
}

bool Running(const json& pod) { return pod["status"].value("phase", "") == "Running"; }

// Killing the agent (SIGKILL) does not disturb running pods; a restarted agent takes them back
// (their files are reaped when they end) and serves new pods.
TEST_F(AgentNodes, AgentSigkillLeavesPodsRunningAndARestartedAgentServes) {
  Create(LongPod(ns_, "long", kPcie, {{"tessera.dev/gpu-memory", "2Gi"}}));
  json long_pod = WaitForPod(Cp(), ns_, "long", Running, seconds(180));
  ASSERT_TRUE(Running(long_pod)) << long_pod["status"].dump();
  const std::string uid = long_pod["metadata"]["uid"];
  const std::string pod_dir = World::Get().PodsDir(kPcie) + "/" + uid;
  ASSERT_TRUE(fs::exists(pod_dir + "/ledger"));

  // The agent's /metrics shows the pod and its grant.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return World::Get().AgentMetrics(kPcie).find(
                   StrCat("namespace=\"", ns_, "\",pod=\"long\",sharing=\"shim\"} 2147483648")) !=
               std::string::npos;
      },
      seconds(10)))
      << World::Get().AgentMetrics(kPcie);

  ASSERT_TRUE(Cp().NodeKill(kPcie, "agent", SIGKILL).ok());
  std::this_thread::sleep_for(seconds(3));
  long_pod = Pod("long");
  EXPECT_TRUE(Running(long_pod)) << long_pod["status"].dump();
  EXPECT_EQ(long_pod["status"]["containerStatuses"][0].value("restartCount", -1), 0);
  EXPECT_TRUE(fs::exists(pod_dir + "/ledger")) << "the pod's share outlives the agent";

  const size_t from = World::Get().AgentLog(kPcie).size();
  ASSERT_TRUE(World::Get().StartAgent(kPcie).ok());
  ASSERT_TRUE(WaitUntil([&] { return World::Get().AgentReady(kPcie, from); }, seconds(60)));
  EXPECT_THAT(World::Get().AgentLog(kPcie).substr(from), HasSubstr("(1 taken back)"));
  Create(ProbePod(ns_, "after", kPcie, {{"tessera.dev/gpu-memory", "3Gi"}}));
  json after = WaitForPod(Cp(), ns_, "after", PodFinished, seconds(180));
  ExpectShare("after", after, 3072);

  ASSERT_TRUE(Cp().KubectlOk({"delete", "pod", "long", "-n", ns_, "--wait=true"}).ok());
  EXPECT_TRUE(WaitUntil([&] { return !fs::exists(pod_dir); }, seconds(60)))
      << "the restarted agent reaps the files of the pod it took back";
}

// A kubelet restart: the node keeps (or gets again) tessera's capacity, and new pods get their
// GPUs.
TEST_F(AgentNodes, KubeletRestart) {
  ASSERT_TRUE(Cp().NodeRestart(kPcie, "kubelet").ok());
  ASSERT_TRUE(Cp().WaitForNodeReady(kPcie).ok());
  EXPECT_TRUE(WaitUntil(
      [&] {
        json n = GetJson(Cp(), {"node", kPcie});
        return n["status"]["allocatable"].value("tessera.dev/gpu-memory", "") != "" &&
               n["status"]["allocatable"].value("tessera.dev/gpu-memory", "") != "0";
      },
      seconds(60)))
      << GetJson(Cp(), {"node", kPcie})["status"]["allocatable"].dump();
  Create(ProbePod(ns_, "after-kubelet", kPcie, {{"tessera.dev/gpu-memory", "4Gi"}}));
  json after = WaitForPod(Cp(), ns_, "after-kubelet", PodFinished, seconds(180));
  ExpectShare("after-kubelet", after, 4096);
}

// An unhealthy GPU: the agent marks it in the inventory and the scheduler places nothing new on
// it; healthy again, it is used.
TEST_F(AgentNodes, AnUnhealthyGpuIsKeptFree) {
  const std::string file = Cp().FindNode(kPcie)->fake_gpus;
  const std::string original = Read(file);
  struct Restore {
    std::string file, text;
    ~Restore() { std::ofstream(file) << text; }  // whatever fails
  } restore{file, original};
  json gpus = json::parse(original);
  gpus["gpus"][1]["xid"] = {79};
  std::ofstream(file) << gpus.dump(1);
  const std::string uuid1 = gpus["gpus"][1]["uuid"];
  ASSERT_TRUE(WaitUntil(
      [&] {
        json n = GetJson(Cp(), {"node", kPcie});
        return n["metadata"]["annotations"]
                   .value("tessera.dev/gpu-inventory", "")
                   .find("\"healthy\":false") != std::string::npos;
      },
      seconds(30)))
      << World::Get().AgentLog(kPcie);
  Create(LongPod(ns_, "first", kPcie, {{"tessera.dev/gpu", "1"}}));
  Create(LongPod(ns_, "second", kPcie, {{"tessera.dev/gpu", "1"}}));
  json first = WaitForPod(Cp(), ns_, "first", Running, seconds(180));
  ASSERT_TRUE(Running(first)) << first["status"].dump();
  EXPECT_NE(AssignmentOf(first).gpus.at(0).uuid, uuid1);
  std::this_thread::sleep_for(seconds(5));
  json second = Pod("second");
  EXPECT_EQ(second["spec"].value("nodeName", ""), "") << "nothing new on the unhealthy GPU";
  EXPECT_THAT(second["status"].dump(), HasSubstr("Unschedulable"));

  std::ofstream(file) << original;  // healthy again
  second = WaitForPod(Cp(), ns_, "second", Running, seconds(180));
  EXPECT_TRUE(Running(second)) << second["status"].dump();
  EXPECT_EQ(AssignmentOf(second).gpus.at(0).uuid, uuid1);
}

// A record naming a GPU the node does not have: the container never starts, and says why.
TEST_F(AgentNodes, ABadAssignmentFailsTheContainerAndSaysWhy) {
  records::Assignment a;
  a.node = kPcie;
  records::AssignedGpu g;
  g.grant.gpu = 1;
  g.grant.memory_mib = 1024;
  g.uuid = "GPU-00000000-0000-4000-8000-00000000dead";
  a.gpus.push_back(g);
  Create(HandBound(ns_, "bad", kPcie, records::AssignmentToJson(a)));
  json pod = WaitForPod(
      Cp(), ns_, "bad", [](const json& p) { return !Waiting(p).second.empty(); }, seconds(120));
  EXPECT_EQ(Waiting(pod).first, "CreateContainerError") << pod["status"].dump();
  EXPECT_THAT(Waiting(pod).second,
              HasSubstr("tessera: pod " + ns_ +
                        "/bad is assigned GPU "
                        "GPU-00000000-0000-4000-8000-00000000dead, which node gpu-b does not "
                        "have"));
  EXPECT_FALSE(Running(pod));
  auto events = Cp().KubectlOk(
      {"get", "events", "-n", ns_, "--field-selector", "involvedObject.name=bad", "-o", "json"});
  ASSERT_TRUE(events.ok());
  EXPECT_THAT(*events, HasSubstr("which node gpu-b does not have"));
}

// A pod that writes itself a record for a GPU another pod holds (admission refuses this; here the
// node is the last line): its container never starts.
TEST_F(AgentNodes, ASelfGrantedGpuHeldByAnotherPodIsRefused) {
  Create(LongPod(ns_, "owner", kPcie, {{"tessera.dev/gpu", "1"}}));
  json owner = WaitForPod(Cp(), ns_, "owner", Running, seconds(180));
  ASSERT_TRUE(Running(owner)) << owner["status"].dump();
  const std::string record = owner["metadata"]["annotations"].value("tessera.dev/assignment", "");
  ASSERT_FALSE(record.empty());
  Create(HandBound(ns_, "intruder", kPcie, record));
  json pod = WaitForPod(
      Cp(), ns_, "intruder", [](const json& p) { return !Waiting(p).second.empty(); },
      seconds(120));
  EXPECT_EQ(Waiting(pod).first, "CreateContainerError") << pod["status"].dump();
  EXPECT_THAT(Waiting(pod).second, HasSubstr("but pod " + ns_ +
                                             "/owner holds all of it on this node; the agent "
                                             "never gives a GPU twice"));
}

}  // namespace
}  // namespace tessera::e2e
