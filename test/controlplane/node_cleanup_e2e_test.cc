// What test nodes leave on the host (issue 12): after a stop, no process, mount, bridge, veth,
// cgroup, registration or sysctl change; two harness instances with nodes that overlap keep the
// host-wide values until the last one stops; the watchdog stops nodes when their owner dies; and
// `cluster.sh host-gc` cleans up after an instance that was killed without any stop.
//
// Other engineers' tests may run nodes on this host at the same time, so the sysctl checks go
// through the host registry (/run/tessera-harness): the values must return to what it recorded
// when no instance is registered any more, and stay as the kubelets set them while one is.
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

extern char** environ;

namespace tessera::e2e {
namespace {

using ::nlohmann::json;
using ::testing::IsEmpty;

constexpr char kRegistry[] = "/run/tessera-harness";
const char* const kSysctls[] = {
    "vm.overcommit_memory", "vm.panic_on_oom",          "kernel.panic",
    "kernel.panic_on_oops", "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward"};
const char* const kMountPoints[] = {"/var/lib/kubelet", "/var/lib/cni", "/var/log/containers",
                                    "/run/containerd",  "/run/nri",     "/run/cdi",
                                    "/etc/cdi",         "/run/tessera"};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Sysctl(const std::string& name) {
  std::string path = "/proc/sys/" + name;
  for (char& c : path) c = c == '.' ? '/' : c;
  std::string v = ReadFile(path);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

std::map<std::string, std::string> Sysctls() {
  std::map<std::string, std::string> m;
  for (const char* name : kSysctls) m[name] = Sysctl(name);
  return m;
}

// The registry's record of the host's own values, if an instance is registered.
std::map<std::string, std::string> SavedSysctls() {
  std::map<std::string, std::string> m;
  std::istringstream in(ReadFile(std::string(kRegistry) + "/sysctl.saved"));
  std::string name, value;
  while (in >> name >> value) m[name] = value;
  return m;
}

// The host's iptables rules, IPv4 and IPv6, without comments and counters ("" without the
// tools). The kubelets must not add any (makeIPTablesUtilChains: false), nor the CNI bridge
// (ipMasq: false).
std::string IptablesRules() {
  std::string all;
  for (const char* tool : {"iptables-save", "ip6tables-save"}) {
    CommandResult r = RunCommand({tool});
    if (!r.ok()) continue;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      if (line[0] == ':') line = line.substr(0, line.rfind(' '));  // ":CHAIN POLICY [p:b]"
      all += line + "\n";
    }
  }
  return all;
}

std::set<std::string> RegisteredInstances() {
  std::set<std::string> ids;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(kRegistry) + "/instances", ec)) {
    ids.insert(e.path().filename());
  }
  return ids;
}

// The host's values as they are when no harness instance runs: what the registry recorded if
// one is registered, else the current ones.
std::map<std::string, std::string> HostBaseline() {
  return RegisteredInstances().empty() ? Sysctls() : SavedSysctls();
}

std::string InstanceOf(const Node& node) {  // cgroup_root is /tessera/<instance>/<name>
  std::string rest = node.cgroup_root.substr(std::string("/tessera/").size());
  return rest.substr(0, rest.find('/'));
}

// Everything of one instance that could be left on the host, as readable lines (empty: none).
std::vector<std::string> Leftovers(const std::string& dir, const std::string& instance,
                                   const std::vector<std::string>& bridges,
                                   const std::vector<std::string>& veths,
                                   const std::vector<std::string>& mount_namespaces) {
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& h : std::filesystem::directory_iterator("/sys/fs/cgroup", ec)) {
    std::string cg = h.path().string() + "/tessera/" + instance;
    if (std::filesystem::exists(cg)) left.push_back("cgroup " + cg);
  }
  for (const auto& b : bridges) {
    if (std::filesystem::exists("/sys/class/net/" + b)) left.push_back("bridge " + b);
  }
  for (const auto& v : veths) {
    if (std::filesystem::exists("/sys/class/net/" + v)) left.push_back("veth " + v);
  }
  if (std::filesystem::exists(std::string(kRegistry) + "/instances/" + instance)) {
    left.push_back("registry entry " + instance);
  }
  std::istringstream mounts(ReadFile("/proc/self/mountinfo"));
  for (std::string line; std::getline(mounts, line);) {
    if (line.find(dir + "/") != std::string::npos) left.push_back("mount " + line);
  }
  for (const auto& p : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = p.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!ProcessAlive(std::stoi(pid))) continue;
    std::string cgroups = ReadFile(p.path().string() + "/cgroup");
    std::string cmdline = ReadFile(p.path().string() + "/cmdline");
    std::string ns = std::filesystem::read_symlink(p.path() / "ns/mnt", ec).string();
    bool in_ns = false;
    for (const auto& m : mount_namespaces) in_ns |= ns == "mnt:[" + m + "]";
    if (cgroups.find("/tessera/" + instance + "/") != std::string::npos ||
        cmdline.find(dir + "/") != std::string::npos || in_ns) {
      for (char& c : cmdline) c = c == '\0' ? ' ' : c;
      left.push_back("process " + pid + ": " + cmdline);
    }
  }
  return left;
}

// Facts gathered while an instance runs, for Leftovers after its stop.
struct Trace {
  std::string dir, instance;
  std::vector<std::string> bridges, veths, mount_namespaces;
};

Trace TraceOf(const ControlPlane& cp) {
  Trace t;
  t.dir = cp.dir();
  for (const Node& n : cp.nodes()) {
    t.instance = InstanceOf(n);
    t.bridges.push_back(n.bridge);
    std::error_code ec;
    for (const auto& port :
         std::filesystem::directory_iterator("/sys/class/net/" + n.bridge + "/brif", ec)) {
      t.veths.push_back(port.path().filename());
    }
    std::istringstream env(ReadFile(n.dir + "/node.env"));
    for (std::string line; std::getline(env, line);) {
      if (line.rfind("mnt_ns=", 0) == 0) t.mount_namespaces.push_back(line.substr(7));
    }
  }
  return t;
}

ControlPlaneOptions OneNode(const std::string& name, pid_t owner = 0) {
  ControlPlaneOptions options;
  options.nodes = {{.name = name}};
  options.owner_pid = owner;
  options.keep_dir = true;  // Leftovers looks for the folder's paths after the stop
  return options;
}

// Runs a bridged pod to completion on the node (makes the bridge, a veth, a network namespace,
// CNI state, a shim and container cgroups).
void RunBridgedPod(const ControlPlane& cp, const std::string& node, const std::string& ns) {
  ASSERT_TRUE(cp.KubectlOk({"create", "namespace", ns}).ok());
  ASSERT_TRUE(cp.KubectlOk({"create", "-f", "-"},
                           TestPod("p", ns, node, "echo ok >/dev/termination-log").dump())
                  .ok());
  // Stays running until the stop, so that the stop meets a live container and shim.
  ASSERT_TRUE(
      cp.KubectlOk({"create", "-f", "-"}, TestPod("sleeper", ns, node, "sleep 3600").dump()).ok());
  json pod = WaitForPod(cp, ns, "p", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  pod = WaitForPod(cp, ns, "sleeper",
                   [](const json& p) { return p["status"].value("phase", "") == "Running"; });
  ASSERT_EQ(pod["status"].value("phase", ""), "Running") << pod["status"].dump(2);
}

std::map<std::string, bool> MountPointsExist() {
  std::map<std::string, bool> m;
  for (const char* d : kMountPoints) m[d] = std::filesystem::exists(d);
  return m;
}

// Checks the host-wide values after our instances stopped: restored if none is registered,
// else still the registry's business.
void ExpectHostRestored(const std::map<std::string, std::string>& baseline,
                        const std::map<std::string, bool>& mount_points_before) {
  if (RegisteredInstances().empty()) {
    EXPECT_EQ(Sysctls(), baseline);
    EXPECT_FALSE(std::filesystem::exists(std::string(kRegistry) + "/sysctl.saved"));
    for (const auto& [d, existed] : mount_points_before) {
      if (!existed) {
        EXPECT_FALSE(std::filesystem::exists(d)) << d;
      }
    }
  } else {
    // Another engineer's nodes run: the registry still holds the host's values.
    EXPECT_EQ(SavedSysctls(), baseline);
  }
}

TEST(NodeCleanup, StopLeavesNothingOnTheHost) {
  const auto baseline = HostBaseline();
  const auto mount_points = MountPointsExist();
  const std::string iptables = IptablesRules();
  auto started = ControlPlane::Start(OneNode("solo"));
  ASSERT_TRUE(started.ok()) << started.status();
  ControlPlane& cp = **started;
  RunBridgedPod(cp, "solo", "cleanup");
  // A spawned process that ignores SIGTERM, and one that node-exec left behind in a new session.
  auto stubborn =
      cp.NodeSpawn("solo", "stubborn", {"sh", "-c", "trap '' TERM; while :; do sleep 1; done"});
  ASSERT_TRUE(stubborn.ok()) << stubborn.status();
  ASSERT_TRUE(
      cp.NodeExec("solo", {"sh", "-c", "setsid sleep 3600 </dev/null >/dev/null 2>&1 &"}).ok());
  Trace trace = TraceOf(cp);
  ASSERT_FALSE(trace.veths.empty());
  ASSERT_FALSE(
      Leftovers(trace.dir, trace.instance, trace.bridges, trace.veths, trace.mount_namespaces)
          .empty());
  // While it runs: the kubelet's sysctls, the bridge's ip_forward, the host's values recorded.
  EXPECT_EQ(Sysctl("vm.overcommit_memory"), "1");
  EXPECT_EQ(Sysctl("kernel.panic"), "10");
  EXPECT_EQ(Sysctl("net.ipv4.ip_forward"), "1");
  EXPECT_EQ(SavedSysctls(), baseline);
  EXPECT_TRUE(RegisteredInstances().count(trace.instance));
  // Nothing of the node is mounted in the host's namespace; no firewall rule was added.
  EXPECT_EQ(ReadFile("/proc/self/mountinfo").find(cp.dir() + "/"), std::string::npos);
  EXPECT_EQ(IptablesRules(), iptables);

  ASSERT_TRUE(cp.Stop().ok());
  EXPECT_THAT(
      Leftovers(trace.dir, trace.instance, trace.bridges, trace.veths, trace.mount_namespaces),
      IsEmpty());
  ExpectHostRestored(baseline, mount_points);
  EXPECT_EQ(IptablesRules(), iptables);
  std::filesystem::remove_all(cp.dir());
}

// A start that fails half-way (the kubelet refuses a label in the kubernetes.io namespace) says
// why and stops what it started.
TEST(NodeCleanup, AFailedStartLeavesNothing) {
  const auto baseline = HostBaseline();
  const auto mount_points = MountPointsExist();
  ControlPlaneOptions options = OneNode("refused");
  options.nodes[0].labels = {{"kubernetes.io/not-allowed", "1"}};
  char pattern[] = "/tmp/tessera-cp-failed-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  options.dir = pattern;
  auto started = ControlPlane::Start(options);
  ASSERT_FALSE(started.ok());
  EXPECT_THAT(started.status().message(), ::testing::HasSubstr("kubelet exited during start"));
  EXPECT_THAT(started.status().message(),
              ::testing::HasSubstr("unknown 'kubernetes.io' or 'k8s.io' labels"));
  // The node's facts stay in its folder; nothing of it runs or remains on the host.
  std::istringstream env(ReadFile(options.dir + "/nodes/refused/node.env"));
  Trace trace;
  trace.dir = options.dir;
  for (std::string line; std::getline(env, line);) {
    if (line.rfind("cgroup_root=/tessera/", 0) == 0) {
      trace.instance = line.substr(21, line.find('/', 21) - 21);
    }
    if (line.rfind("bridge=", 0) == 0) trace.bridges.push_back(line.substr(7));
    if (line.rfind("mnt_ns=", 0) == 0) trace.mount_namespaces.push_back(line.substr(7));
  }
  ASSERT_FALSE(trace.instance.empty());
  EXPECT_THAT(
      Leftovers(trace.dir, trace.instance, trace.bridges, trace.veths, trace.mount_namespaces),
      IsEmpty());
  ExpectHostRestored(baseline, mount_points);
  std::filesystem::remove_all(options.dir);
}

TEST(NodeCleanup, TwoInstancesShareTheHostValuesUntilTheLastStops) {
  const auto baseline = HostBaseline();
  const auto mount_points = MountPointsExist();
  auto first = ControlPlane::Start(OneNode("first"));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ControlPlane::Start(OneNode("second"));
  ASSERT_TRUE(second.ok()) << second.status();
  RunBridgedPod(**first, "first", "a");
  RunBridgedPod(**second, "second", "b");
  Trace t1 = TraceOf(**first), t2 = TraceOf(**second);
  EXPECT_NE(t1.instance, t2.instance);
  EXPECT_NE((*first)->nodes()[0].subnet, (*second)->nodes()[0].subnet);
  EXPECT_NE(t1.bridges, t2.bridges);

  ASSERT_TRUE((*first)->Stop().ok());
  EXPECT_THAT(Leftovers(t1.dir, t1.instance, t1.bridges, t1.veths, t1.mount_namespaces), IsEmpty());
  // The second instance's kubelet still runs: its values stay, and so does its node.
  EXPECT_EQ(Sysctl("vm.overcommit_memory"), "1");
  EXPECT_EQ(Sysctl("net.ipv4.ip_forward"), "1");
  EXPECT_EQ(SavedSysctls(), baseline);
  for (const auto& [d, existed] : mount_points) EXPECT_TRUE(std::filesystem::exists(d)) << d;
  ASSERT_TRUE((*second)->WaitForNodeReady("second").ok());
  ASSERT_TRUE(
      (*second)
          ->KubectlOk({"create", "-f", "-"},
                      TestPod("later", "b", "second", "echo ok >/dev/termination-log").dump())
          .ok());
  json pod = WaitForPod(**second, "b", "later", PodFinished);
  EXPECT_EQ(TerminationMessage(pod), "ok\n") << pod["status"].dump(2);

  ASSERT_TRUE((*second)->Stop().ok());
  EXPECT_THAT(Leftovers(t2.dir, t2.instance, t2.bridges, t2.veths, t2.mount_namespaces), IsEmpty());
  ExpectHostRestored(baseline, mount_points);
  std::filesystem::remove_all((*first)->dir());
  std::filesystem::remove_all((*second)->dir());
}

pid_t SpawnSleeper() {
  pid_t pid = 0;
  char sleep_arg[] = "sleep", secs[] = "600";
  char* argv[] = {sleep_arg, secs, nullptr};
  EXPECT_EQ(posix_spawnp(&pid, "sleep", nullptr, nullptr, argv, environ), 0);
  return pid;
}

// Waits until nothing of the instance is left on the host and no process names its folder: the
// watchdog itself (its argument is the folder, which Leftovers' "dir/" match does not see) still
// runs for a while after the last node is gone (it verifies and records the stop).
bool WaitUntilEmpty(const ControlPlane& cp, const Trace& t, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Leftovers(t.dir, t.instance, t.bridges, t.veths, t.mount_namespaces).empty() &&
        cp.RunningProcesses().empty()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return false;
}

TEST(NodeCleanup, TheWatchdogStopsTheNodesWhenTheOwnerDies) {
  const auto baseline = HostBaseline();
  const auto mount_points = MountPointsExist();
  pid_t owner = SpawnSleeper();
  auto started = ControlPlane::Start(OneNode("orphan", owner));
  ASSERT_TRUE(started.ok()) << started.status();
  ControlPlane& cp = **started;
  RunBridgedPod(cp, "orphan", "orphan");
  Trace trace = TraceOf(cp);

  kill(owner, SIGKILL);
  waitpid(owner, nullptr, 0);
  EXPECT_TRUE(WaitUntilEmpty(cp, trace, std::chrono::seconds(90)));
  EXPECT_THAT(
      Leftovers(trace.dir, trace.instance, trace.bridges, trace.veths, trace.mount_namespaces),
      IsEmpty());
  EXPECT_THAT(cp.RunningProcesses(), IsEmpty());
  ExpectHostRestored(baseline, mount_points);
  EXPECT_TRUE(cp.Stop().ok());  // nothing left to stop; still succeeds
  std::filesystem::remove_all(cp.dir());
}

// An instance whose test, watchdog and processes were all killed (kill -9, no stop ran): the
// next `cluster.sh host-gc` (or the next start of any instance) removes what it left.
TEST(NodeCleanup, HostGcCleansUpAfterAnInstanceKilledWithoutStop) {
  const auto baseline = HostBaseline();
  const auto mount_points = MountPointsExist();
  pid_t owner = SpawnSleeper();
  auto started = ControlPlane::Start(OneNode("killed", owner));
  ASSERT_TRUE(started.ok()) << started.status();
  ControlPlane& cp = **started;
  RunBridgedPod(cp, "killed", "killed");
  Trace trace = TraceOf(cp);

  // SIGKILL the watchdog first, then every process of the instance.
  for (const auto& [name, pid] : cp.recorded_pids()) {
    if (name == "watchdog") kill(pid, SIGKILL);
  }
  for (const auto& [name, pid] : cp.recorded_pids()) kill(pid, SIGKILL);
  kill(owner, SIGKILL);
  waitpid(owner, nullptr, 0);
  std::string procs = "/sys/fs/cgroup/freezer/tessera/" + trace.instance;
  CommandResult killed =
      RunCommand({"sh", "-c",
                  "echo FROZEN >" + procs + "/freezer.state; find " + procs +
                      " -name cgroup.procs -exec cat {} + | xargs -r kill -9; echo THAWED >" +
                      procs + "/freezer.state"});
  ASSERT_TRUE(killed.ok()) << killed.err;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // Left behind now: cgroups, the bridge, the registration (and the host's values).
  EXPECT_TRUE(RegisteredInstances().count(trace.instance));
  EXPECT_TRUE(std::filesystem::exists("/sys/fs/cgroup/pids/tessera/" + trace.instance));

  CommandResult gc = RunCommand({ClusterScript(), "host-gc"});
  ASSERT_TRUE(gc.ok()) << gc.err;
  EXPECT_THAT(gc.err, ::testing::HasSubstr("is gone without stopping"));
  EXPECT_TRUE(WaitUntilEmpty(cp, trace, std::chrono::seconds(10)));
  EXPECT_THAT(
      Leftovers(trace.dir, trace.instance, trace.bridges, trace.veths, trace.mount_namespaces),
      IsEmpty());
  ExpectHostRestored(baseline, mount_points);
  // The harness's own stop still succeeds (and finds nothing to do).
  EXPECT_TRUE(cp.Stop().ok());
  std::filesystem::remove_all(cp.dir());
}

}  // namespace
}  // namespace tessera::e2e
