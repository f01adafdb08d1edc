// End-to-end smoke test of the test control plane (issue 5): the shared control plane (started
// with the stock kube-scheduler by this binary's main) stores and serves Nodes with GPU capacity,
// Pods and Bindings; the stock scheduler places a pod asking for tessera.dev/gpu on the one node
// that advertises it; and a stop (or the death of the owning process) leaves no process behind.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {
namespace {

using ::nlohmann::json;
using ::testing::HasSubstr;

constexpr char kGpu[] = "tessera.dev/gpu";
constexpr char kInventory[] = "tessera.dev/gpu-inventory";

// A Node object (no status: that goes through the status subresource).
json NodeObject(const std::string& name, bool tainted) {
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", name}, {"labels", {{"tessera.dev/test", "smoke"}}}}},
               {"spec", json::object()}};
  if (tainted) {
    // Keeps the stock scheduler off nodes that only the manual-binding test uses.
    node["spec"]["taints"] = {{{"key", "tessera.dev/manual-only"}, {"effect", "NoSchedule"}}};
  }
  return node;
}

json NodeStatus(int gpus) {
  json resources = {{"cpu", "32"}, {"memory", "256Gi"}, {"pods", "110"}};
  if (gpus > 0) resources[kGpu] = std::to_string(gpus);
  auto now = "2026-01-01T00:00:00Z";
  return {{"status",
           {{"capacity", resources},
            {"allocatable", resources},
            {"conditions",
             {{{"type", "Ready"},
               {"status", "True"},
               {"reason", "KubeletReady"},
               {"message", "written by the test"},
               {"lastHeartbeatTime", now},
               {"lastTransitionTime", now}}}}}}};
}

// Creates a node with an inventory annotation and writes its status through /status.
void CreateNode(const ControlPlane& cp, const std::string& name, int gpus, bool tainted) {
  json node = NodeObject(name, tainted);
  if (gpus > 0) {
    json inventory = json::array();
    for (int i = 0; i < gpus; ++i) {
      inventory.push_back({{"index", i}, {"model", "A100-80GB"}, {"memoryMiB", 81920}});
    }
    node["metadata"]["annotations"] = {{kInventory, json{{"gpus", inventory}}.dump()}};
  }
  auto created = cp.KubectlOk({"create", "-f", "-"}, node.dump());
  ASSERT_TRUE(created.ok()) << created.status();
  auto patched = cp.KubectlOk({"patch", "node", name, "--subresource=status", "--type=merge", "-p",
                               NodeStatus(gpus).dump()});
  ASSERT_TRUE(patched.ok()) << patched.status();
}

json Get(const ControlPlane& cp, const std::vector<std::string>& what) {
  std::vector<std::string> args = {"get"};
  args.insert(args.end(), what.begin(), what.end());
  args.insert(args.end(), {"-o", "json"});
  auto out = cp.KubectlOk(args);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? json::parse(*out) : json();
}

json PodObject(const std::string& name, const std::string& ns, const std::string& scheduler,
               int gpus) {
  json container = {{"name", "main"}, {"image", "registry.invalid/none:0"}};
  if (gpus > 0) container["resources"] = {{"limits", {{kGpu, std::to_string(gpus)}}}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"schedulerName", scheduler}, {"containers", {container}}}}};
}

// Polls until pred(pod) or the timeout; returns the last pod read.
template <typename Pred>
json WaitForPod(const ControlPlane& cp, const std::string& ns, const std::string& name, Pred pred,
                std::chrono::seconds timeout = std::chrono::seconds(60)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  json pod;
  while (true) {
    pod = Get(cp, {"pod", name, "-n", ns});
    if (pred(pod) || std::chrono::steady_clock::now() > deadline) return pod;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

TEST(ControlPlaneSmoke, KubectlAndKubeconfigReachTheTests) {
  ControlPlane& cp = ControlPlane::Shared();
  EXPECT_THAT(cp.server(), ::testing::StartsWith("https://127.0.0.1:"));
  EXPECT_TRUE(std::filesystem::exists(cp.kubeconfig()));
  EXPECT_LT(cp.start_seconds(), 120);
  // The environment put the built kubectl first on PATH and set KUBECONFIG.
  CommandResult which = RunCommand({"sh", "-c", "command -v kubectl"});
  EXPECT_EQ(which.out, cp.kubectl_path() + "\n");
  CommandResult version = RunCommand({"kubectl", "version", "-o", "json"});
  ASSERT_TRUE(version.ok()) << version.err;
  json v = json::parse(version.out);
  EXPECT_THAT(v["serverVersion"]["gitVersion"].get<std::string>(), HasSubstr("v1.37"));
  // The DRA API is served.
  auto resources = cp.KubectlOk({"api-resources", "--api-group=resource.k8s.io", "-o", "name"});
  ASSERT_TRUE(resources.ok()) << resources.status();
  EXPECT_THAT(*resources, HasSubstr("resourceslices.resource.k8s.io"));
  EXPECT_THAT(*resources, HasSubstr("resourceclaims.resource.k8s.io"));
  auto versions = cp.KubectlOk({"api-versions"});
  ASSERT_TRUE(versions.ok());
  EXPECT_THAT(*versions, HasSubstr("resource.k8s.io/v1\n"));
}

TEST(ControlPlaneSmoke, NodesPodsAndBindingRoundTrip) {
  ControlPlane& cp = ControlPlane::Shared();
  const std::string ns = "smoke-bind";
  ASSERT_TRUE(cp.KubectlOk({"create", "namespace", ns}).ok());
  CreateNode(cp, "bind-gpu-0", 8, /*tainted=*/true);
  CreateNode(cp, "bind-gpu-1", 4, /*tainted=*/true);

  json node = Get(cp, {"node", "bind-gpu-0"});
  EXPECT_EQ(node["status"]["capacity"][kGpu], "8");
  EXPECT_EQ(node["status"]["allocatable"][kGpu], "8");
  json inventory = json::parse(node["metadata"]["annotations"][kInventory].get<std::string>());
  EXPECT_EQ(inventory["gpus"].size(), 8u);
  EXPECT_EQ(inventory["gpus"][3]["model"], "A100-80GB");
  json nodes = Get(cp, {"nodes", "-l", "tessera.dev/test=smoke"});
  EXPECT_GE(nodes["items"].size(), 2u);

  // A pod for a scheduler that does not exist here stays unbound...
  auto created = cp.KubectlOk({"create", "-f", "-"}, PodObject("p1", ns, "tessera", 2).dump());
  ASSERT_TRUE(created.ok()) << created.status();
  json pod = Get(cp, {"pod", "p1", "-n", ns});
  EXPECT_EQ(pod["spec"]["schedulerName"], "tessera");
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"]["requests"][kGpu], "2");  // defaulted

  // ...until a Binding binds it, as a scheduler's binder does.
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", "p1"}, {"namespace", ns}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", "bind-gpu-1"}}}};
  auto bound =
      cp.KubectlOk({"create", "--raw", "/api/v1/namespaces/" + ns + "/pods/p1/binding", "-f", "-"},
                   binding.dump());
  ASSERT_TRUE(bound.ok()) << bound.status();
  pod = Get(cp, {"pod", "p1", "-n", ns});
  EXPECT_EQ(pod["spec"]["nodeName"], "bind-gpu-1");

  // A second binding of the same pod is refused.
  CommandResult again =
      cp.Kubectl({"create", "--raw", "/api/v1/namespaces/" + ns + "/pods/p1/binding", "-f", "-"},
                 binding.dump());
  EXPECT_NE(again.exit_code, 0);
}

TEST(ControlPlaneSmoke, StockSchedulerPlacesAGpuPodOnTheGpuNode) {
  ControlPlane& cp = ControlPlane::Shared();
  const std::string ns = "smoke-sched";
  ASSERT_TRUE(cp.KubectlOk({"create", "namespace", ns}).ok());
  CreateNode(cp, "sched-cpu-only", 0, /*tainted=*/false);
  CreateNode(cp, "sched-gpu", 2, /*tainted=*/false);

  auto created = cp.KubectlOk({"create", "-f", "-"},
                              PodObject("wants-gpu", ns, "default-scheduler", 1).dump());
  ASSERT_TRUE(created.ok()) << created.status();
  json pod =
      WaitForPod(cp, ns, "wants-gpu", [](const json& p) { return p["spec"].contains("nodeName"); });
  ASSERT_TRUE(pod["spec"].contains("nodeName")) << pod["status"].dump();
  EXPECT_EQ(pod["spec"]["nodeName"], "sched-gpu");

  // The scheduler counts the resource: 3 more GPUs do not fit on a node with 1 left.
  created = cp.KubectlOk({"create", "-f", "-"},
                         PodObject("wants-3-gpus", ns, "default-scheduler", 3).dump());
  ASSERT_TRUE(created.ok()) << created.status();
  auto unschedulable = [](const json& p) {
    for (const auto& c : p["status"].value("conditions", json::array())) {
      if (c["type"] == "PodScheduled" && c["status"] == "False") return true;
    }
    return false;
  };
  pod = WaitForPod(cp, ns, "wants-3-gpus", unschedulable);
  ASSERT_TRUE(unschedulable(pod)) << pod["status"].dump();
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  std::string message;
  for (const auto& c : pod["status"]["conditions"]) {
    if (c["type"] == "PodScheduled") message = c.value("message", "");
  }
  EXPECT_THAT(message, HasSubstr("Insufficient tessera.dev/gpu"));
}

// A control plane of its own, with the controller-manager: the namespace controller (which
// only kube-controller-manager runs) finishes a namespace deletion, then a stop leaves nothing.
TEST(ControlPlaneLifecycle, ControllerManagerWorksAndStopLeavesNoProcess) {
  ControlPlaneOptions options;
  options.with_controller_manager = true;
  options.keep_dir = true;  // to check the recorded pids after stop
  auto started = ControlPlane::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ControlPlane& cp = **started;
  ASSERT_EQ(cp.recorded_pids().size(), 4u);  // etcd, apiserver, controller-manager, watchdog
  for (const auto& [name, pid] : cp.recorded_pids()) EXPECT_TRUE(ProcessAlive(pid)) << name;
  EXPECT_TRUE(RunCommand({ClusterScript(), "status", cp.dir()}).ok());

  ASSERT_TRUE(cp.KubectlOk({"create", "namespace", "doomed"}).ok());
  ASSERT_TRUE(cp.KubectlOk({"delete", "namespace", "doomed", "--wait=true", "--timeout=60s"}).ok());
  EXPECT_NE(cp.Kubectl({"get", "namespace", "doomed"}).exit_code, 0);

  ASSERT_TRUE(cp.Stop().ok());
  for (const auto& [name, pid] : cp.recorded_pids()) EXPECT_FALSE(ProcessAlive(pid)) << name;
  EXPECT_THAT(cp.RunningProcesses(), ::testing::IsEmpty());
  CommandResult pgrep = RunCommand({"pgrep", "-f", cp.dir() + "/"});
  EXPECT_EQ(pgrep.exit_code, 1) << "still running: " << pgrep.out;
  EXPECT_FALSE(RunCommand({ClusterScript(), "status", cp.dir()}).ok());
  std::filesystem::remove_all(cp.dir());
}

// If the process that started a control plane dies without stopping it (a crashed or killed
// test binary), the watchdog stops it.
TEST(ControlPlaneLifecycle, WatchdogStopsThePlaneWhenItsOwnerDies) {
  pid_t owner = 0;
  char sleep_arg[] = "sleep", secs[] = "600";
  char* argv[] = {sleep_arg, secs, nullptr};
  ASSERT_EQ(posix_spawnp(&owner, "sleep", nullptr, nullptr, argv, environ), 0);

  ControlPlaneOptions options;
  options.owner_pid = owner;
  auto started = ControlPlane::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ControlPlane& cp = **started;
  auto pids = cp.recorded_pids();
  ASSERT_EQ(pids.size(), 3u);  // etcd, apiserver, watchdog

  kill(owner, SIGKILL);
  waitpid(owner, nullptr, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!cp.RunningProcesses().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_THAT(cp.RunningProcesses(), ::testing::IsEmpty());
  for (const auto& [name, pid] : pids) EXPECT_FALSE(ProcessAlive(pid)) << name;
  EXPECT_TRUE(cp.Stop().ok());  // nothing left to stop; still succeeds
}

}  // namespace
}  // namespace tessera::e2e
