// The tenant boundary, node agent's side (issue 27): on a real harness node (kubelet +
// containerd, 2 fake L40S GPUs), with `tessera agent` (the memory backstop on, seeing the fake
// driver through NVML as a real agent sees NVIDIA's) and `tessera scheduler`, a hostile pod tries
// one attack per test, and the attack fails while a neighbour pod on the node keeps running and a
// new pod still gets exactly its share. The attacks, what stops each, and what only a real GPU can
// settle: bench/results/security.md. The world (probe image, fake machine, agent, scheduler) is
// test/agent/agent_world.h's.
//
// A hostile pod reports through a marker file in the fake machine's folder (a hostPath the probe
// pods mount at /run/fake-gpu), so that it can keep running while the test looks at the node.
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent_world.h"
#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "probe_pod.h"

namespace tessera::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kNode[] = "gpu-s";  // 2 x L40S
constexpr int64_t kMiB = 1 << 20;
constexpr uint64_t kLedgerBytes = 4096 + 1024 * 64;  // the agent's ledger: 1024 slots

ControlPlane& Cp() { return ControlPlane::Shared(); }

AgentWorld& TheWorld() {
  static AgentWorld* w = new AgentWorld({.nodes = {kNode},
                                         .scheduler_name = "tessera-security",
                                         .dir_prefix = "tessera-security-e2e",
                                         .agent_nvml = true,
                                         .extra_agent_args = {"--memory-backstop-grace=3s"}});
  return *w;
}

class NodeSecurity : public AgentWorldTest {
 protected:
  AgentWorld& World() override { return TheWorld(); }

  // A pod that runs `script` and keeps running; it writes what it wants the test to know to
  // /run/fake-gpu/marker-<name> (the host's <machines dir>/marker-<name>).
  void CreateHostile(const std::string& name, const std::string& limit, const std::string& script) {
    Create(WorldScriptPod(TheWorld(), ns_, name, kNode, {{"tessera.dev/gpu-memory", limit}},
                          StrCat("M=/run/fake-gpu/marker-", ns_, "-", name, "\n",
                                 "export CUDA_VISIBLE_DEVICES=\"$NVIDIA_VISIBLE_DEVICES\"\n",
                                 "L=/run/tessera/ledger/$NVIDIA_VISIBLE_DEVICES.ledger\n", script,
                                 "\nsleep 3600\n")));
  }
  std::string Marker(const std::string& name) {
    return StrCat(TheWorld().MachinesDir(), "/marker-", ns_, "-", name);
  }
  std::string WaitForMarker(const std::string& name) {
    EXPECT_TRUE(WaitUntil([&] { return fs::exists(Marker(name)); }, seconds(180)))
        << Pod(name)["status"].dump();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return ReadFile(Marker(name));
  }

  // The neighbour: a share pod holding 1 MiB of its GPU, running before the attack.
  void StartNeighbour() {
    Create(WorldLongPod(TheWorld(), ns_, "neighbour", kNode, {{"tessera.dev/gpu-memory", "2Gi"}}));
    json n = WaitForPod(Cp(), ns_, "neighbour", PodRunning, seconds(180));
    ASSERT_TRUE(PodRunning(n)) << n["status"].dump();
  }
  // After the attack: the neighbour still runs, never restarted, and a new pod gets exactly its
  // share (its GPU, its cap, the shim refusing past it).
  void ExpectNeighboursUnharmed() {
    json n = Pod("neighbour");
    EXPECT_TRUE(PodRunning(n)) << n["status"].dump();
    EXPECT_EQ(n["status"]["containerStatuses"][0].value("restartCount", -1), 0);
    Create(WorldProbePod(TheWorld(), ns_, "after", kNode, {{"tessera.dev/gpu-memory", "3Gi"}}));
    json after = WaitForPod(Cp(), ns_, "after", PodFinished, seconds(180));
    ProbeReport r = ParseProbeReport(TerminationMessage(after));
    ASSERT_TRUE(r.ok) << r.raw;
    EXPECT_EQ(r.env["visible"], AssignmentOfPod(after).gpus.at(0).uuid) << r.raw;
    EXPECT_EQ(ProbeNumbers(r.answers[3]), std::vector<int64_t>{3072 * kMiB}) << r.raw;
    EXPECT_EQ(r.answers[4].rfind("err 2", 0), 0u) << "beyond the cap: out of memory\n" << r.raw;
  }
  // The agent still serves (its /metrics answers) and never crashed.
  void ExpectAgentAlive() {
    EXPECT_NE(TheWorld().AgentMetrics(kNode), "") << TheWorld().AgentLog(kNode);
  }
  // What `argv` prints in the node's mount namespace, where the agent mounts each pod's ledger
  // folder (a tmpfs): the test's own namespace sees the folder under it.
  std::string OnNode(const std::vector<std::string>& argv) {
    CommandResult r = Cp().NodeExec(kNode, argv);
    EXPECT_TRUE(r.ok()) << StrJoin(argv, " ") << ": " << r.out << r.err;
    return r.out;
  }
  // A number the node prints (-1: none).
  int64_t NodeNumber(const std::vector<std::string>& argv) {
    const std::string out = OnNode(argv);
    return out.find_first_of("0123456789") == std::string::npos ? -1 : std::stoll(out);
  }
  // The slot count in the header of a ledger, and a file's size, as the node sees them.
  int64_t NodeLedgerSlots(const std::string& ledger) {
    return NodeNumber({"od", "-An", "-tu4", "-j20", "-N4", ledger});
  }
  int64_t NodeFileSize(const std::string& path) { return NodeNumber({"stat", "-c", "%s", path}); }
  // "<name> <type>" per entry of a folder as the node sees it (find's %y: f a regular file, l a
  // symbolic link, d a folder).
  std::vector<std::string> NodeFolder(const std::string& dir) {
    std::vector<std::string> out;
    std::istringstream in(
        OnNode({"find", dir, "-mindepth", "1", "-maxdepth", "1", "-printf", "%f %y\n"}));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    std::sort(out.begin(), out.end());
    return out;
  }
  // The host side of a pod's ledger.
  std::string HostLedgerDir(const json& pod) {
    return StrCat(TheWorld().PodsDir(kNode), "/", pod["metadata"].value("uid", ""), "/ledger");
  }
  std::string HostLedger(const json& pod) {
    return StrCat(HostLedgerDir(pod), "/", AssignmentOfPod(pod).gpus.at(0).uuid, ".ledger");
  }
};

// The ledger is mapped read-write by the pod's containers. A hostile one rewrites the header the
// agent validated (slot count 2^32-1, every live bit set): before the fix the agent, root on the
// node, read and wrote past the file every 250 ms and died. Now it puts the header back, counts
// it, and tells the pod.
TEST_F(NodeSecurity, ALedgerHeaderRewrittenByAPodIsPutBackAndReported) {
  StartNeighbour();
  CreateHostile("hostile", "2Gi", R"(
{ printf 'init\nalloc a 1048576\n'; sleep 3600; } | shim_client >/dev/null 2>&1 &
sleep 2
printf '\377\377\377\377' | dd of=$L bs=1 seek=20 count=4 conv=notrunc 2>/dev/null
w=28; while [ $w -lt 36 ]; do
  printf '\377\377\377\377\377\377\377\377' | dd of=$L bs=8 seek=$w count=1 conv=notrunc 2>/dev/null
  w=$((w+1))
done
echo attacked >$M)");
  ASSERT_EQ(WaitForMarker("hostile"), "attacked\n");
  const json hostile = Pod("hostile");
  EXPECT_TRUE(WaitUntil(
      [&] { return EventsOf("hostile").find("LedgerTampered") != std::string::npos; }, seconds(30)))
      << EventsOf("hostile") << TheWorld().AgentLog(kNode);
  EXPECT_THAT(EventsOf("hostile"), HasSubstr("slot count 4294967295 (was 1024)"));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return MetricValue(TheWorld().AgentMetrics(kNode),
                           "tessera_agent_pod_ledger_tampered_total", "pod=\"hostile\"") >= 1;
      },
      seconds(10)))
      << TheWorld().AgentMetrics(kNode);
  // Put back on the host: the agent's slot count.
  EXPECT_EQ(NodeLedgerSlots(HostLedger(hostile)), 1024);
  ExpectAgentAlive();
  ExpectNeighboursUnharmed();
}

// A pod plants symlinks to a host file where the agent writes (the ledger's temporary names, the
// ledger folder) and the agent restarts. Before the fix the ledger folder was mounted read-write
// into the container, so the symlinks landed on the host, where root followed them when it made
// a ledger again (truncate, chmod 0666). Now the container gets its ledger file alone: the names
// land in its own image, the host folder holds the ledger and nothing else, and the host file is
// untouched.
TEST_F(NodeSecurity, SymlinksPlantedByAPodAreNeverFollowedAcrossAnAgentRestart) {
  const std::string victim = TheWorld().dir() + "/victim";
  std::ofstream(victim) << "root:x:0:0::/root:/bin/sh\n";
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  StartNeighbour();
  CreateHostile("hostile", "2Gi",
                StrCat(R"(
D=/run/tessera/ledger; U=$NVIDIA_VISIBLE_DEVICES; V=)",
                       victim, R"(
n=1; while [ $n -le 200 ]; do
  ln -s $V $D/$U.ledger.tmp.$n 2>/dev/null; ln -s $V $D/.$U.ledger.tmp.$n 2>/dev/null
  n=$((n+1))
done
ln -s $V $D/planted 2>/dev/null
rm -f $L 2>/dev/null; ln -s $V $L 2>/dev/null
ln -s $V /run/tessera/limits/planted 2>/dev/null
echo planted >$M)"));
  ASSERT_EQ(WaitForMarker("hostile"), "planted\n");
  const json hostile = Pod("hostile");
  // The agent restarts and takes the pod back (it makes the pod's segment again).
  const size_t from = TheWorld().AgentLog(kNode).size();
  ASSERT_TRUE(Cp().NodeKill(kNode, "agent", SIGKILL).ok());
  ASSERT_TRUE(TheWorld().StartAgent(kNode).ok());
  ASSERT_TRUE(WaitUntil([&] { return TheWorld().AgentReady(kNode, from); }, seconds(60)));
  // Its sync with the runtime comes after it registers (seconds later under a sanitizer).
  EXPECT_TRUE(WaitUntil(
      [&] { return TheWorld().AgentLog(kNode).find("taken back", from) != std::string::npos; },
      seconds(30)))
      << TheWorld().AgentLog(kNode).substr(from);
  std::this_thread::sleep_for(seconds(2));
  // Nothing of the container's on the host: the ledger folder holds the ledger, a regular file.
  EXPECT_EQ(NodeFolder(HostLedgerDir(hostile)),
            std::vector<std::string>{AssignmentOfPod(hostile).gpus.at(0).uuid + ".ledger f"});
  EXPECT_EQ(ReadFile(victim), "root:x:0:0::/root:/bin/sh\n");
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(PodRunning(Pod("hostile")));
  ExpectNeighboursUnharmed();
}

// A pod grows its ledger (the one file it can write) until the disk is full. Before the fix the
// ledger folder was a plain folder of the host's /run: the pod filled it. Now the folder is a
// tmpfs of the ledger's size: the pod gets ENOSPC after a few KiB, the host's free space does not
// move, and the agent gives the ledger its length back.
TEST_F(NodeSecurity, ALedgerGrownUntilFullNeverFillsTheHost) {
  StartNeighbour();
  struct statvfs before {};
  ASSERT_EQ(::statvfs(TheWorld().PodsDir(kNode).c_str(), &before), 0);
  CreateHostile("hostile", "2Gi", R"(
n=0
while [ $n -lt 512 ] && head -c 1048576 /dev/zero >>$L 2>/dev/null; do n=$((n+1)); done
m=0
while [ $m -lt 64 ] && head -c 1048576 /dev/zero >/run/tessera/ledger/more-$m 2>/dev/null; do m=$((m+1)); done
echo "appended_mib=$n" >$M)");
  const std::string report = WaitForMarker("hostile");
  EXPECT_EQ(report, "appended_mib=0\n") << "the first MiB already fails with ENOSPC";
  struct statvfs after {};
  ASSERT_EQ(::statvfs(TheWorld().PodsDir(kNode).c_str(), &after), 0);
  const int64_t used = static_cast<int64_t>(before.f_bavail * before.f_frsize) -
                       static_cast<int64_t>(after.f_bavail * after.f_frsize);
  EXPECT_LT(used, 256 * kMiB) << "the host's filesystem took the pod's writes";
  const json hostile = Pod("hostile");
  EXPECT_TRUE(WaitUntil(
      [&] { return NodeFileSize(HostLedger(hostile)) == static_cast<int64_t>(kLedgerBytes); },
      seconds(10)))
      << NodeFileSize(HostLedger(hostile));
  ExpectAgentAlive();
  ExpectNeighboursUnharmed();
}

// A pod loads the real driver by the path it is mounted at (the shim is not in the way) and
// takes twice its share. The driver counts it (NVML), the backstop sums it by pod: a Warning
// Event, and after the grace (3 s here) its process is killed. Before the backstop nothing
// noticed.
TEST_F(NodeSecurity, ARealDriverLoadedByItsPathIsCaughtByTheBackstop) {
  StartNeighbour();
  CreateHostile("hostile", "2Gi", R"sh(
( printf 'init\nalloc big 4294967296\n'; sleep 3600 ) |
  shim_client --libcuda=/usr/local/lib/tessera/libtessera-real-cuda.so.1 >/tmp/answers 2>&1 &
sleep 2
echo "$(head -2 /tmp/answers | tr '\n' ' ')" >$M)sh");
  EXPECT_EQ(WaitForMarker("hostile"), "ok ok \n") << "the real driver gave it 4 GiB";
  EXPECT_TRUE(WaitUntil(
      [&] { return EventsOf("hostile").find("GPUMemoryOverShareKilled") != std::string::npos; },
      seconds(60)))
      << EventsOf("hostile") << TheWorld().AgentLog(kNode);
  EXPECT_THAT(EventsOf("hostile"), HasSubstr("GPUMemoryOverShare"));
  EXPECT_THAT(EventsOf("hostile"), HasSubstr("more than its share of 2048 MiB"));
  // Its memory is back: the driver no longer counts the pod over its share.
  EXPECT_TRUE(WaitUntil(
      [&] {
        const std::string m = TheWorld().AgentMetrics(kNode);
        return MetricValue(m, "tessera_agent_backstop_actions_total", "") >= 1 &&
               MetricValue(m, "tessera_agent_pod_gpu_memory_driver_bytes", "pod=\"hostile\"") <
                   2048 * kMiB;
      },
      seconds(10)))
      << TheWorld().AgentMetrics(kNode);
  ExpectAgentAlive();
  ExpectNeighboursUnharmed();
}

// The agent is down while a GPU pod's container is created. Before the fix the container started
// without its GPU (no device, no shim, no error). Now the scheduler's Binding asks containerd's NRI
// validator to require the agent's plugin: the container fails with a clear reason and is retried,
// and runs with its GPU once the agent is back.
TEST_F(NodeSecurity, AGpuPodCreatedWhileTheAgentIsDownWaitsForIt) {
  ASSERT_TRUE(Cp().NodeKill(kNode, "agent", SIGTERM).ok());
  struct Restart {
    ~Restart() {
      if (!TheWorld().AgentReady(kNode, from)) (void)TheWorld().StartAgent(kNode);
    }
    size_t from;
  } restart{TheWorld().AgentLog(kNode).size()};
  Create(WorldProbePod(TheWorld(), ns_, "early", kNode, {{"tessera.dev/gpu-memory", "1Gi"}}));
  json pod = WaitForPod(
      Cp(), ns_, "early", [](const json& p) { return !WaitingState(p).second.empty(); },
      seconds(120));
  EXPECT_EQ(WaitingState(pod).first, "CreateContainerError") << pod["status"].dump();
  EXPECT_THAT(WaitingState(pod).second, HasSubstr("required plugin \"tessera\" not present"));
  EXPECT_EQ(pod["metadata"]["annotations"].value("required-plugins.noderesource.dev/pod", ""),
            "[\"tessera\"]");
  std::this_thread::sleep_for(seconds(3));
  EXPECT_FALSE(PodRunning(Pod("early"))) << "never started without its GPU";

  const size_t from = TheWorld().AgentLog(kNode).size();
  ASSERT_TRUE(TheWorld().StartAgent(kNode).ok());
  ASSERT_TRUE(WaitUntil([&] { return TheWorld().AgentReady(kNode, from); }, seconds(60)));
  json done = WaitForPod(Cp(), ns_, "early", PodFinished, seconds(240));
  ProbeReport r = ParseProbeReport(TerminationMessage(done));
  ASSERT_TRUE(r.ok) << r.raw << done["status"].dump();
  EXPECT_EQ(r.env["visible"], AssignmentOfPod(done).gpus.at(0).uuid);
  EXPECT_EQ(r.env["sharing"], "shim");
  EXPECT_EQ(ProbeNumbers(r.answers[3]), std::vector<int64_t>{1024 * kMiB}) << r.raw;
}

}  // namespace
}  // namespace tessera::e2e
