// The world of the agent's end-to-end tests on real harness nodes (test/controlplane: kubelet +
// containerd, fake GPUs): the probe image (probe_image.sh) imported into every node, a fake GPU
// machine per node (fake_machine.h, the fake driver's "hardware", mounted into the probe pods),
// `tessera agent` in every node, and one `tessera scheduler`. Made once per test binary by the
// first test that needs it; used by test/agent/agent_nodes_e2e_test.cc and the security suite
// (test/security/), whose options add agent flags (the memory backstop) and the agent's own view
// of the fake driver through NVML.
//
// AgentWorldTest is the fixture: a namespace per test (deleted with its pods after it, so no test
// inherits another's GPUs), and the logs of the scheduler and every agent when a test fails.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "fake_cuda/fake_machine.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "probe_pod.h"
#include "records/assignment.h"
#include "scoped_process.h"

namespace tessera::e2e {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The value of the first sample of `metric` in a /metrics text whose labels contain `labels`
// (-1: none).
inline double MetricValue(const std::string& text, const std::string& metric,
                          const std::string& labels) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(metric + "{", 0) != 0 || line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// The sum of every sample of `metric` in a /metrics text whose labels contain `labels` (0: none).
inline double MetricSum(const std::string& text, const std::string& metric,
                        const std::string& labels) {
  std::istringstream in(text);
  double sum = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(metric + "{", 0) != 0 || line.find(labels) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

struct AgentWorldOptions {
  std::vector<std::string> nodes;  // harness nodes with fake GPUs (the binary's NODE_ARGS)
  std::string scheduler_name;
  std::string dir_prefix = "tessera-agent-e2e";
  // The agent loads the fake libnvidia-ml.so.1 over its node's machine file, so it sees the GPU
  // processes of the pods as a real agent sees them through NVML (host PIDs; the memory backstop).
  bool agent_nvml = false;
  std::vector<std::string> extra_agent_args;  // more flags for every agent
};

class AgentWorld {
 public:
  explicit AgentWorld(AgentWorldOptions options) : options_(std::move(options)) {
    std::string tmpl_s = "/tmp/" + options_.dir_prefix + "-XXXXXX";
    std::vector<char> tmpl(tmpl_s.begin(), tmpl_s.end());
    tmpl.push_back('\0');
    if (::mkdtemp(tmpl.data()) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl.data();
    ::chmod(dir_.c_str(), 0755);
    error_ = Setup();
  }

  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  const AgentWorldOptions& options() const { return options_; }
  std::string AgentLog(const std::string& node) const {
    return ReadFile(ControlPlane::Shared().FindNode(node)->dir + "/agent.log");
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
    const Node* n = ControlPlane::Shared().FindNode(node);
    std::vector<std::string> argv = {
        TESSERA_BINARY,
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
        std::filesystem::path(TESSERA_FAKE_CUDA).parent_path().string(),
        "--shim-dir",
        std::filesystem::path(TESSERA_SHIM_LIBRARY).parent_path().string(),
        "--shim-install-dir",
        dir_ + "/lib-" + node,
        "--mps-root",
        dir_ + "/mps-" + node,
        "--rediscover-interval",
        "1s",
        "--gpu-quiet-period",
        "2s",
        "--metrics-bind-address",
        "127.0.0.1",
        "--metrics-port",
        "0"};
    // Without NVML the agent has no per-process view (a name that never loads).
    argv.push_back("--nvml-library");
    argv.push_back(options_.agent_nvml ? TESSERA_FAKE_NVML : "libtessera-no-nvml.so");
    for (const std::string& a : options_.extra_agent_args) argv.push_back(a);
    return argv;
  }
  absl::Status StartAgent(const std::string& node) {
    std::vector<std::pair<std::string, std::string>> env;
    if (options_.agent_nvml)
      env.push_back({"TESSERA_FAKE_GPU_MACHINE", MachineDir(node) + "/machine"});
    absl::StatusOr<pid_t> pid =
        ControlPlane::Shared().NodeSpawn(node, "agent", AgentArgv(node), env);
    if (!pid.ok()) return pid.status();
    return absl::OkStatus();
  }
  // Whether the agent on `node` has registered with containerd's NRI since its log had `from`
  // bytes.
  bool AgentReady(const std::string& node, size_t from = 0) const {
    const std::string log = AgentLog(node);
    return log.size() > from && log.find("NRI: configured by", from) != std::string::npos;
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

 private:
  std::string Setup() {
    ControlPlane& cp = ControlPlane::Shared();
    // The probe image, into every node.
    const std::string image = dir_ + "/cuda-probe.tar";
    CommandResult built =
        RunCommand({TESSERA_SOURCE_DIR "/test/agent/probe_image.sh", image, TESSERA_SHIM_CLIENT,
                    TESSERA_FAKE_CUDA, TESSERA_FAKE_NVML, TESSERA_SHIM_LIBRARY});
    if (!built.ok()) return StrCat("probe_image.sh: ", built.out, built.err);
    for (const std::string& node : options_.nodes) {
      CommandResult imported =
          cp.NodeExec(node, {"ctr", "-n", "k8s.io", "images", "import", image});
      if (!imported.ok()) return StrCat("import into ", node, ": ", imported.out, imported.err);
      // The fake driver's machine: the node's GPUs.
      nlohmann::json gpus = nlohmann::json::parse(ReadFile(cp.FindNode(node)->fake_gpus));
      std::vector<fake::DeviceSpec> devices;
      for (const nlohmann::json& g : gpus["gpus"]) {
        fake::DeviceSpec d;
        d.uuid = g["uuid"];
        d.name = g.value("name", "fake");
        d.total_bytes = g["memory_mib"].get<uint64_t>() << 20;
        d.sm_count = g.value("sm_count", 100);
        devices.push_back(d);
      }
      std::filesystem::create_directories(MachineDir(node));
      std::string err = fake::CreateMachine(MachineDir(node) + "/machine", devices);
      if (!err.empty()) return StrCat("fake machine of ", node, ": ", err);
      ::chmod((MachineDir(node) + "/machine").c_str(), 0666);
      absl::Status started = StartAgent(node);
      if (!started.ok()) return StrCat("agent on ", node, ": ", started.message());
    }
    for (const std::string& node : options_.nodes) {
      if (!WaitUntil([&] { return AgentReady(node); }, std::chrono::seconds(60))) {
        return StrCat("the agent on ", node, " did not register with NRI:\n", AgentLog(node));
      }
    }
    // The scheduler, for every node.
    std::ofstream(dir_ + "/scheduler.yaml") << StrCat(R"(apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: )",
                                                      options_.scheduler_name, R"(
leaderElection:
  resourceNamespace: default
  resourceName: )",
                                                      options_.scheduler_name, R"(
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 500ms
metrics: {bindAddress: 127.0.0.1, port: 0}
retry: {minInterval: 200ms, period: 2s}
)");
    absl::StatusOr<std::unique_ptr<ScopedProcess>> s =
        ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", cp.kubeconfig(),
                              "--config", dir_ + "/scheduler.yaml", "--identity", "e2e"},
                             dir_ + "/scheduler.log");
    if (!s.ok()) return StrCat("scheduler: ", s.status().message());
    scheduler_ = std::move(*s);
    // Every inventory published, and the nodes' capacity in place for the kubelet.
    for (const std::string& node : options_.nodes) {
      bool published = WaitUntil(
          [&] {
            CommandResult r = cp.Kubectl({"get", "node", node, "-o", "json"});
            if (!r.ok()) return false;
            nlohmann::json n = nlohmann::json::parse(r.out);
            return n["metadata"]["annotations"].contains("tessera.dev/gpu-inventory") &&
                   n["status"]["allocatable"].contains("tessera.dev/gpu-memory");
          },
          std::chrono::seconds(60));
      if (!published) return StrCat("node ", node, " not published:\n", AgentLog(node));
    }
    return "";
  }

  AgentWorldOptions options_;
  std::string error_, dir_;
  std::unique_ptr<ScopedProcess> scheduler_;
};

// The probe pod (probe_pod.h) for the world's scheduler, on `node` (a node the harness labelled
// tessera-e2e/node=<node>), or on the node the scheduler picks if `node` is empty: `limits` its
// tessera resources; `annotations` (gangs).
inline nlohmann::json WorldProbePod(const AgentWorld& world, const std::string& ns,
                                    const std::string& name, const std::string& node,
                                    const std::map<std::string, std::string>& limits,
                                    const std::map<std::string, std::string>& annotations = {},
                                    const std::string& extra_script = "") {
  nlohmann::json pod = ProbePodOnAnyNode(ns, name, world.options().scheduler_name,
                                         world.MachinesDir(), limits, annotations, extra_script);
  if (!node.empty()) pod["spec"]["nodeSelector"] = {{"tessera-e2e/node", node}};
  return pod;
}

// A probe pod whose container runs `script` (sh -c) instead of the probe's report.
inline nlohmann::json WorldScriptPod(const AgentWorld& world, const std::string& ns,
                                     const std::string& name, const std::string& node,
                                     const std::map<std::string, std::string>& limits,
                                     const std::string& script) {
  nlohmann::json pod = WorldProbePod(world, ns, name, node, limits);
  pod["spec"]["containers"][0]["command"][2] = script;
  return pod;
}

// A pod that reports (as the probe) and then keeps running, holding 1 MiB of its GPU.
inline nlohmann::json WorldLongPod(const AgentWorld& world, const std::string& ns,
                                   const std::string& name, const std::string& node,
                                   const std::map<std::string, std::string>& limits) {
  return WorldScriptPod(world, ns, name, node, limits,
                        R"(export CUDA_VISIBLE_DEVICES="$NVIDIA_VISIBLE_DEVICES"
echo "visible=$NVIDIA_VISIBLE_DEVICES" >/dev/termination-log
{ printf 'init\nalloc a 1048576\n'; sleep 3600; } | shim_client
)");
}

// The waiting container's (reason, message), as kubectl describe shows them (pod_testing.h
// WaitingReason: the reason alone).
inline std::pair<std::string, std::string> WaitingState(const nlohmann::json& pod) {
  const nlohmann::json& statuses =
      pod["status"].value("containerStatuses", nlohmann::json::array());
  if (statuses.empty()) return {"", ""};
  const nlohmann::json w = statuses[0]["state"].value("waiting", nlohmann::json::object());
  return {w.value("reason", ""), w.value("message", "")};
}

inline bool PodRunning(const nlohmann::json& pod) {
  return pod["status"].value("phase", "") == "Running";
}

inline records::Assignment AssignmentOfPod(const nlohmann::json& pod) {
  const nlohmann::json& ann = pod["metadata"].value("annotations", nlohmann::json::object());
  absl::StatusOr<records::Assignment> a =
      records::AssignmentFromJson(ann.value("tessera.dev/assignment", ""));
  EXPECT_TRUE(a.ok()) << pod["metadata"]["name"] << ": " << a.status();
  return a.ok() ? *a : records::Assignment();
}

// The fixture: `World()` is the binary's world (made on first use).
class AgentWorldTest : public ::testing::Test {
 protected:
  virtual AgentWorld& World() = 0;

  void SetUp() override {
    ASSERT_EQ(World().error(), "");
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ns_ = "e2e-";
    for (char c : test) {
      if (std::isupper(static_cast<unsigned char>(c)) && ns_.size() > 4) ns_ += '-';
      ns_ += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    ns_ = ns_.substr(0, 50);
    while (ns_.back() == '-') ns_.pop_back();
    ASSERT_TRUE(ControlPlane::Shared().KubectlOk({"create", "namespace", ns_}).ok());
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "--- scheduler log (tail):\n" << Tail(World().SchedulerLog());
      for (const std::string& node : World().options().nodes) {
        std::cerr << "--- agent " << node << ":\n" << Tail(World().AgentLog(node));
      }
    }
    // No namespace controller runs here: the pods go first, so no test inherits another's GPUs.
    (void)ControlPlane::Shared().Kubectl(
        {"delete", "pods", "--all", "-n", ns_, "--grace-period=1", "--wait=true", "--timeout=90s"});
    (void)ControlPlane::Shared().Kubectl({"delete", "namespace", ns_, "--wait=false"});
  }
  static std::string Tail(const std::string& s) {
    return s.size() > 6000 ? s.substr(s.size() - 6000) : s;
  }

  void Create(const nlohmann::json& pod) {
    auto r = ControlPlane::Shared().KubectlOk({"create", "-f", "-"}, pod.dump());
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // Creates every pod with one kubectl call (at once, as far as the API server is concerned).
  void CreateAll(const std::vector<nlohmann::json>& pods) {
    nlohmann::json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", pods}};
    auto r = ControlPlane::Shared().KubectlOk({"create", "-f", "-"}, list.dump());
    ASSERT_TRUE(r.ok()) << r.status();
  }
  nlohmann::json Pod(const std::string& name) {
    return GetJson(ControlPlane::Shared(), {"pod", name, "-n", ns_});
  }
  std::map<std::string, nlohmann::json> WaitAllFinished(size_t count,
                                                        std::chrono::seconds timeout) {
    return WaitAllPodsFinished(ControlPlane::Shared(), ns_, count, timeout);
  }
  // The Events of one object of the test's namespace, as JSON text.
  std::string EventsOf(const std::string& name) {
    auto r = ControlPlane::Shared().KubectlOk({"get", "events", "-n", ns_, "--field-selector",
                                               "involvedObject.name=" + name, "-o", "json"});
    return r.ok() ? *r : "";
  }

  std::string ns_;
};

}  // namespace tessera::e2e
