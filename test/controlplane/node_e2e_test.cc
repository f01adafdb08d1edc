// End-to-end tests of the test nodes (issue 12): two real nodes (kubelet v1.37.2, containerd 2.4,
// runc, CNI bridge) beside the control plane and the stock scheduler; node-a has the 8-GPU H100
// description, node-b the 2-GPU L40S one (CMakeLists.txt). Pods run to completion and report
// through their termination message; a device plugin and a DRA kubelet plugin register through
// the real kubelet sockets and their devices reach containers.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {
namespace {

using ::nlohmann::json;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

constexpr char kThing[] = "example.tessera.dev/thing";

const Node& NodeA() { return ControlPlane::Shared().nodes().at(0); }
const Node& NodeB() { return ControlPlane::Shared().nodes().at(1); }

void CreateNamespace(const std::string& ns) {
  auto r = ControlPlane::Shared().KubectlOk({"create", "namespace", ns});
  ASSERT_TRUE(r.ok()) << r.status();
}

void Create(const json& object) {
  auto r = ControlPlane::Shared().KubectlOk({"create", "-f", "-"}, object.dump());
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << object.dump(2);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The node's allocatable amount of a resource ("" if it has none).
std::string Allocatable(const std::string& node, const std::string& resource) {
  json n = GetJson(ControlPlane::Shared(), {"node", node});
  return n["status"]["allocatable"].value(resource, "");
}

// Polls until the node's allocatable amount of resource is `want`.
bool WaitForAllocatable(const std::string& node, const std::string& resource,
                        const std::string& want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Allocatable(node, resource) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

// How many times `text` occurs in the file.
int CountInFile(const std::string& path, const std::string& text) {
  std::string s = ReadFile(path);
  int n = 0;
  for (size_t pos = s.find(text); pos != std::string::npos; pos = s.find(text, pos + 1)) ++n;
  return n;
}

// The message names one id twice: from the plugin's Allocate environment and from its CDI device.
bool SameThing(const std::string& message) {
  return std::regex_search(message, std::regex("ids=(thing-[01]) cdi=\\1\n"));
}

TEST(Nodes, AreReadyAndRunTheBuiltKubeletAndContainerd) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_EQ(cp.nodes().size(), 2u);
  EXPECT_EQ(NodeA().name, "node-a");
  EXPECT_EQ(NodeB().name, "node-b");
  for (const Node& node : cp.nodes()) {
    json n = GetJson(cp, {"node", node.name});
    bool ready = false;
    for (const auto& c : n["status"]["conditions"]) {
      if (c["type"] == "Ready") ready = c["status"] == "True";
    }
    EXPECT_TRUE(ready) << node.name << ": " << n["status"]["conditions"].dump();
    EXPECT_EQ(n["status"]["nodeInfo"]["kubeletVersion"], "v1.37.2");
    EXPECT_THAT(n["status"]["nodeInfo"]["containerRuntimeVersion"].get<std::string>(),
                StartsWith("containerd://2.4."));
    EXPECT_EQ(n["metadata"]["labels"]["kubernetes.io/hostname"], node.name);
    // The node's own sockets, reachable from the host under its folder.
    EXPECT_TRUE(std::filesystem::is_socket(node.containerd_socket)) << node.containerd_socket;
    EXPECT_TRUE(std::filesystem::is_socket(node.device_plugin_dir + "/kubelet.sock"));
    EXPECT_TRUE(std::filesystem::is_socket(node.pod_resources_socket));
    EXPECT_TRUE(std::filesystem::is_directory(node.plugins_registry_dir));
    EXPECT_THAT(node.subnet, MatchesRegex(R"(10\.213\.[0-9]+\.0/24)"));
    EXPECT_THAT(node.cgroup_root, MatchesRegex("/tessera/[0-9a-f]+/" + node.name));
  }
  json a = GetJson(cp, {"node", "node-a"});
  EXPECT_EQ(a["metadata"]["labels"]["tessera.dev/test-pool"], "h100");
  EXPECT_EQ(a["metadata"]["labels"]["tessera.dev/test-role"], "gpu");
  json b = GetJson(cp, {"node", "node-b"});
  EXPECT_EQ(b["metadata"]["labels"]["tessera.dev/test-pool"], "l40s");
  EXPECT_FALSE(b["metadata"]["labels"].contains("tessera.dev/test-role"));
  EXPECT_NE(NodeA().subnet, NodeB().subnet);
  EXPECT_NE(NodeA().bridge, NodeB().bridge);
}

TEST(Nodes, FakeGpusHaveDeviceNodesAndTheirDescription) {
  struct Want {
    const Node& node;
    const char* file;
    int gpus;
  };
  for (const Want& w :
       {Want{NodeA(), "h100-8x-nvswitch.json", 8}, Want{NodeB(), "l40s-2x-pcie.json", 2}}) {
    ASSERT_FALSE(w.node.fake_gpus.empty()) << w.node.name;
    EXPECT_EQ(ReadFile(w.node.fake_gpus),
              ReadFile(std::string(TESSERA_SOURCE_DIR) + "/test/controlplane/gpus/" + w.file));
    json desc = json::parse(ReadFile(w.node.fake_gpus));
    EXPECT_EQ(desc["gpus"].size(), static_cast<size_t>(w.gpus));
    std::vector<std::string> names = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};
    for (int i = 0; i < w.gpus; ++i) names.push_back("nvidia" + std::to_string(i));
    for (const std::string& name : names) {
      struct stat st;
      std::string path = w.node.dev_dir + "/" + name;
      ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
      EXPECT_TRUE(S_ISCHR(st.st_mode)) << path;
      EXPECT_EQ(major(st.st_rdev), 1u) << path;  // /dev/null's numbers
      EXPECT_EQ(minor(st.st_rdev), 3u) << path;
    }
    EXPECT_FALSE(std::filesystem::exists(w.node.dev_dir + "/nvidia" + std::to_string(w.gpus)));
  }
}

TEST(Nodes, ExecRunsInTheNodesNamespaceWithItsEnvironment) {
  ControlPlane& cp = ControlPlane::Shared();
  CommandOptions options;
  options.env = {{"TESSERA_TEST_EXTRA", "42"}};
  CommandResult r = cp.NodeExec(
      "node-b",
      {"sh", "-c",
       "echo name=$NODE_NAME extra=$TESSERA_TEST_EXTRA gpus=$TESSERA_FAKE_GPUS; "
       "ls /var/lib/kubelet/device-plugins; ctr images ls -q; "
       "test -S /var/run/nri/nri.sock && echo nri-socket; grep freezer /proc/self/cgroup"},
      options);
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("name=node-b extra=42 gpus=" + NodeB().fake_gpus + "\n"));
  EXPECT_THAT(r.out, HasSubstr("kubelet.sock"));  // the node's own device-plugin folder
  EXPECT_THAT(r.out, HasSubstr(std::string(ControlPlane::kTestImage) + "\n"));
  EXPECT_THAT(r.out, HasSubstr(std::string(ControlPlane::kPauseImage) + "\n"));
  EXPECT_THAT(r.out, HasSubstr("nri-socket"));
  EXPECT_THAT(r.out, HasSubstr("freezer:" + NodeB().cgroup_root + "/runtime"));
  // The exit status comes back.
  EXPECT_EQ(cp.NodeExec("node-b", {"sh", "-c", "exit 7"}).exit_code, 7);
  EXPECT_NE(cp.NodeExec("no-such-node", {"true"}).exit_code, 0);
}

TEST(Nodes, NriIsOnAndListensOnTheNodesSocket) {
  for (const Node& node : ControlPlane::Shared().nodes()) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(node.nri_socket.size(), sizeof(addr.sun_path)) << node.nri_socket;
    std::strncpy(addr.sun_path, node.nri_socket.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << node.nri_socket << ": " << std::strerror(errno);
    close(fd);
  }
}

TEST(Pods, BusyboxRunsToCompletionOnEachNode) {
  ControlPlane& cp = ControlPlane::Shared();
  const std::string ns = "pods-each";
  CreateNamespace(ns);
  for (const Node& node : cp.nodes()) {
    Create(
        TestPod("hello-" + node.name, ns, node.name,
                "{ echo hello from $(hostname); ip -o -4 addr show eth0; } >/dev/termination-log"));
  }
  for (const Node& node : cp.nodes()) {
    json pod = WaitForPod(cp, ns, "hello-" + node.name, PodFinished);
    ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
    EXPECT_EQ(pod["spec"]["nodeName"], node.name);
    std::string ip = pod["status"].value("podIP", "");
    // A bridged pod: an address in the node's own subnet, on eth0 inside the container.
    std::string prefix = node.subnet.substr(0, node.subnet.rfind(".0/24") + 1);
    EXPECT_THAT(ip, StartsWith(prefix)) << node.subnet;
    EXPECT_THAT(TerminationMessage(pod),
                AllOf(StartsWith("hello from hello-" + node.name + "\n"), HasSubstr(ip + "/24")));
  }
}

TEST(Pods, HostNetworkAndBridgedPodsBothRun) {
  ControlPlane& cp = ControlPlane::Shared();
  const std::string ns = "pods-net";
  CreateNamespace(ns);
  json host = TestPod("hostnet", ns, "node-a", "ip -o -4 addr >/dev/termination-log");
  host["spec"]["hostNetwork"] = true;
  Create(host);
  Create(TestPod("bridged", ns, "node-a", "ip -o -4 addr >/dev/termination-log"));
  json h = WaitForPod(cp, ns, "hostnet", PodFinished);
  json b = WaitForPod(cp, ns, "bridged", PodFinished);
  ASSERT_EQ(h["status"].value("phase", ""), "Succeeded") << h["status"].dump(2);
  ASSERT_EQ(b["status"].value("phase", ""), "Succeeded") << b["status"].dump(2);
  // The host-network pod sees the host's interfaces and has the node's address.
  EXPECT_EQ(h["status"]["podIP"], h["status"]["hostIP"]);
  EXPECT_THAT(TerminationMessage(h), HasSubstr(h["status"]["hostIP"].get<std::string>() + "/"));
  // The bridged one only its own eth0 (and lo).
  EXPECT_NE(b["status"]["podIP"], b["status"]["hostIP"]);
  EXPECT_THAT(TerminationMessage(b), HasSubstr(b["status"]["podIP"].get<std::string>() + "/24"));
  EXPECT_THAT(TerminationMessage(b),
              ::testing::Not(HasSubstr(h["status"]["hostIP"].get<std::string>())));
  // The node's bridge exists now, with the node's gateway address.
  CommandResult link = RunCommand({"ip", "-o", "-4", "addr", "show", "dev", NodeA().bridge});
  ASSERT_TRUE(link.ok()) << link.err;
  EXPECT_THAT(link.out,
              HasSubstr(NodeA().subnet.substr(0, NodeA().subnet.rfind(".0/24")) + ".1/24"));
}

TEST(Pods, AMissingImageFailsWithErrImageNeverPull) {
  ControlPlane& cp = ControlPlane::Shared();
  const std::string ns = "pods-missing";
  CreateNamespace(ns);
  json pod = TestPod("missing", ns, "node-b", "true");
  pod["spec"]["containers"][0]["image"] = "tessera.local/not-imported:1";
  Create(pod);
  // ContainerCreating first, then the kubelet's verdict.
  pod = WaitForPod(cp, ns, "missing", [](const json& p) {
    std::string reason = WaitingReason(p);
    return (!reason.empty() && reason != "ContainerCreating") || PodFinished(p);
  });
  EXPECT_EQ(WaitingReason(pod), "ErrImageNeverPull") << pod["status"].dump(2);
}

TEST(DevicePlugin, ResourceOnItsNodeOnlyAndAllocateReachesTheContainer) {
  ControlPlane& cp = ControlPlane::Shared();
  const Node& a = NodeA();
  // CDI devices for the plugin's ids: an environment variable and one of the node's fake GPUs.
  json spec = {{"cdiVersion", "0.6.0"}, {"kind", kThing}, {"devices", json::array()}};
  for (int i = 0; i < 2; ++i) {
    spec["devices"].push_back({{"name", "thing-" + std::to_string(i)},
                               {"containerEdits",
                                {{"env", {"THING_CDI=thing-" + std::to_string(i)}},
                                 {"deviceNodes",
                                  {{{"path", "/dev/nvidia" + std::to_string(i)},
                                    {"hostPath", a.dev_dir + "/nvidia" + std::to_string(i)}}}}}}});
  }
  { std::ofstream(a.cdi_dir + "/example.tessera.dev-thing.json") << spec.dump(2); }

  auto pid = cp.NodeSpawn(
      a.name, "device-plugin",
      {cp.bin_dir() + "/tessera-test-device-plugin", "-resource=" + std::string(kThing),
       "-devices=thing-0,thing-1", "-cdi-kind=" + std::string(kThing)});
  ASSERT_TRUE(pid.ok()) << pid.status();
  ASSERT_TRUE(WaitForAllocatable("node-a", kThing, "2")) << Allocatable("node-a", kThing);
  EXPECT_EQ(Allocatable("node-b", kThing), "");

  const std::string ns = "device-plugin";
  CreateNamespace(ns);
  const std::string script =
      "{ echo ids=$TESSERA_TEST_THING_IDS cdi=$THING_CDI; ls -l /dev/nvidia*; } "
      ">/dev/termination-log";
  auto run = [&](const std::string& name) {
    json p = TestPod(name, ns, "node-a", script);
    p["spec"]["containers"][0]["resources"] = {{"limits", {{kThing, "1"}}}};
    Create(p);
    return WaitForPod(cp, ns, name, PodFinished);
  };
  json pod = run("thing-user");
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  std::string message = TerminationMessage(pod);
  // The plugin's Allocate environment and, through its CDI device, the fake GPU node.
  EXPECT_TRUE(SameThing(message)) << message;
  EXPECT_THAT(message, ContainsRegex("crw-rw-rw- +1 root +root +1, +3 .* /dev/nvidia[01]\n"));

  // A kubelet restart wipes the device-plugin folder; the plugin registers again.
  const std::string log = a.dir + "/device-plugin.log";
  EXPECT_EQ(CountInFile(log, "registered " + std::string(kThing)), 1);
  ASSERT_TRUE(cp.NodeRestart(a.name, "kubelet").ok());
  ASSERT_TRUE(cp.WaitForNodeReady(a.name).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (CountInFile(log, "registered " + std::string(kThing)) < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_EQ(CountInFile(log, "registered " + std::string(kThing)), 2) << ReadFile(log);
  ASSERT_TRUE(WaitForAllocatable("node-a", kThing, "2"));
  pod = run("thing-user-after-restart");
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  EXPECT_TRUE(SameThing(TerminationMessage(pod))) << TerminationMessage(pod);

  ASSERT_TRUE(cp.NodeKill(a.name, "device-plugin").ok());
  EXPECT_FALSE(ProcessAlive(*pid));
}

TEST(Dra, AClaimsCdiDeviceReachesTheContainer) {
  ControlPlane& cp = ControlPlane::Shared();
  const Node& b = NodeB();
  const std::string driver = "dra.example.tessera.dev";
  auto pid =
      cp.NodeSpawn(b.name, "dra-plugin", {cp.bin_dir() + "/tessera-test-dra-plugin", "-devices=2"});
  ASSERT_TRUE(pid.ok()) << pid.status();

  // The plugin publishes its node's devices and writes its CDI spec into the node's folder.
  json slices;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    slices = GetJson(cp, {"resourceslices", "--field-selector", "spec.nodeName=node-b"});
    if (!slices["items"].empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_EQ(slices["items"].size(), 1u) << ReadFile(b.dir + "/dra-plugin.log");
  EXPECT_EQ(slices["items"][0]["spec"]["driver"], driver);
  EXPECT_EQ(slices["items"][0]["spec"]["devices"].size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(b.cdi_dir + "/dra.example.tessera.dev_thing.json"));
  EXPECT_TRUE(std::filesystem::exists(b.plugins_registry_dir + "/" + driver + "-reg.sock"));

  const std::string ns = "dra";
  CreateNamespace(ns);
  Create({{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", "example-thing"}}},
          {"spec",
           {{"selectors", {{{"cel", {{"expression", "device.driver == \"" + driver + "\""}}}}}}}}});
  Create({{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", "thing"}, {"namespace", ns}}},
          {"spec",
           {{"devices",
             {{"requests",
               {{{"name", "req"},
                 {"exactly", {{"deviceClassName", "example-thing"}, {"count", 1}}}}}}}}}}});
  // No nodeName: the stock scheduler allocates the claim, which only node-b can satisfy.
  json pod =
      TestPod("claims-thing", ns, "", "env | grep TESSERA_TEST_DRA | sort >/dev/termination-log");
  pod["spec"]["resourceClaims"] = {{{"name", "thing"}, {"resourceClaimName", "thing"}}};
  pod["spec"]["containers"][0]["resources"] = {{"claims", {{{"name", "thing"}}}}};
  Create(pod);
  pod = WaitForPod(cp, ns, "claims-thing", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  EXPECT_EQ(pod["spec"]["nodeName"], "node-b");
  json claim = GetJson(cp, {"resourceclaim", "thing", "-n", ns});
  const json& results = claim["status"]["allocation"]["devices"]["results"];
  ASSERT_EQ(results.size(), 1u) << claim.dump(2);
  std::string device = results[0]["device"];
  std::string index = device.substr(device.find('-') + 1);
  EXPECT_EQ(TerminationMessage(pod), "TESSERA_TEST_DRA_DEV_" + index + "=" + device + "\n");
  EXPECT_GE(CountInFile(b.dir + "/dra-plugin.log", "prepare claim dra/thing: 1 devices"), 1);

  ASSERT_TRUE(cp.NodeKill(b.name, "dra-plugin").ok());
  EXPECT_FALSE(ProcessAlive(*pid));
  // It removed its CDI spec on SIGTERM.
  EXPECT_FALSE(std::filesystem::exists(b.cdi_dir + "/dra.example.tessera.dev_thing.json"));
}

// The path a node agent can deliver a pod's GPUs by: an NRI plugin on the node's socket sees the
// pod sandbox's annotations at CreateContainer and adjusts the container; it reconnects when
// containerd restarts.
TEST(Nri, APluginSeesThePodsAnnotationAndAdjustsTheContainer) {
  ControlPlane& cp = ControlPlane::Shared();
  const Node& a = NodeA();
  auto pid = cp.NodeSpawn(a.name, "nri-plugin", {cp.bin_dir() + "/tessera-test-nri-plugin"});
  ASSERT_TRUE(pid.ok()) << pid.status();
  // containerd logs: plugin "50-tessera-test" connected and synchronized.
  const std::string synchronized = "50-tessera-test\\\" connected and synchronized";
  auto wait_for_log = [](const std::string& path, const std::string& text, int count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (CountInFile(path, text) < count && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return CountInFile(path, text) >= count;
  };
  ASSERT_TRUE(wait_for_log(a.dir + "/containerd.log", synchronized, 1))
      << ReadFile(a.dir + "/nri-plugin.log");

  const std::string ns = "nri";
  CreateNamespace(ns);
  const std::string assignment = R"({"gpus":[{"index":2,"uuid":"GPU-x"}]})";
  auto run = [&](const std::string& name, bool annotated) {
    json p = TestPod(name, ns, a.name,
                     "echo \"got=$TESSERA_TEST_NRI_ASSIGNMENT\" >/dev/termination-log");
    if (annotated) p["metadata"]["annotations"] = {{"tessera.dev/assignment", assignment}};
    Create(p);
    return WaitForPod(cp, ns, name, PodFinished);
  };
  json pod = run("annotated", true);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  EXPECT_EQ(TerminationMessage(pod), "got=" + assignment + "\n");
  pod = run("plain", false);
  EXPECT_EQ(TerminationMessage(pod), "got=\n");
  EXPECT_EQ(CountInFile(a.dir + "/nri-plugin.log", "CreateContainer nri/annotated/main"), 1);

  // containerd restarts; the plugin connects again and keeps adjusting.
  ASSERT_TRUE(cp.NodeRestart(a.name, "containerd").ok());
  // (containerd's log is appended to across restarts.)
  ASSERT_TRUE(wait_for_log(a.dir + "/containerd.log", synchronized, 2))
      << ReadFile(a.dir + "/nri-plugin.log");
  pod = run("annotated-after-restart", true);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  EXPECT_EQ(TerminationMessage(pod), "got=" + assignment + "\n");
  ASSERT_TRUE(cp.NodeKill(a.name, "nri-plugin").ok());
}

TEST(Nodes, ContainerdRestartKeepsTheNodeWorking) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(cp.NodeRestart("node-b", "containerd").ok());
  const std::string ns = "containerd-restart";
  CreateNamespace(ns);
  Create(TestPod("after", ns, "node-b", "echo ok >/dev/termination-log"));
  json pod = WaitForPod(cp, ns, "after", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  EXPECT_EQ(TerminationMessage(pod), "ok\n");
}

}  // namespace
}  // namespace tessera::e2e
