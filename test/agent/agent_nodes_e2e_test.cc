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

#include "agent_world.h"
#include "common/strings.h"
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

// Everything this binary's tests share (agent_world.h): an agent in both nodes, one scheduler.
AgentWorld& TheWorld() {
  static AgentWorld* w =
      new AgentWorld({.nodes = {kNvswitch, kPcie}, .scheduler_name = kScheduler});
  return *w;
}

json ProbePod(const std::string& ns, const std::string& name, const std::string& node,
              const std::map<std::string, std::string>& limits,
              const std::map<std::string, std::string>& annotations = {},
              const std::string& extra_script = "") {
  return WorldProbePod(TheWorld(), ns, name, node, limits, annotations, extra_script);
}

class AgentNodes : public AgentWorldTest {
 protected:
  AgentWorld& World() override { return TheWorld(); }
  static records::Assignment AssignmentOf(const json& pod) { return AssignmentOfPod(pod); }

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
          for (const auto& e : fs::directory_iterator(TheWorld().PodsDir(node), ec)) {
            (void)e;
            return false;
          }
          return true;
        },
        seconds(60)))
        << "pod files left in " << TheWorld().PodsDir(node);
  }
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

json LongPod(const std::string& ns, const std::string& name, const std::string& node,
             const std::map<std::string, std::string>& limits) {
  return WorldLongPod(TheWorld(), ns, name, node, limits);
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

std::pair<std::string, std::string> Waiting(const json& pod) { return WaitingState(pod); }
bool Running(const json& pod) { return PodRunning(pod); }

// Killing the agent (SIGKILL) does not disturb running pods; a restarted agent takes them back
// (their files are reaped when they end) and serves new pods.
TEST_F(AgentNodes, AgentSigkillLeavesPodsRunningAndARestartedAgentServes) {
  Create(LongPod(ns_, "long", kPcie, {{"tessera.dev/gpu-memory", "2Gi"}}));
  json long_pod = WaitForPod(Cp(), ns_, "long", Running, seconds(180));
  ASSERT_TRUE(Running(long_pod)) << long_pod["status"].dump();
  const std::string uid = long_pod["metadata"]["uid"];
  const std::string pod_dir = TheWorld().PodsDir(kPcie) + "/" + uid;
  ASSERT_TRUE(fs::exists(pod_dir + "/ledger"));

  // The agent's /metrics shows the pod and its grant.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return TheWorld().AgentMetrics(kPcie).find(
                   StrCat("namespace=\"", ns_, "\",pod=\"long\",sharing=\"shim\"} 2147483648")) !=
               std::string::npos;
      },
      seconds(10)))
      << TheWorld().AgentMetrics(kPcie);

  ASSERT_TRUE(Cp().NodeKill(kPcie, "agent", SIGKILL).ok());
  std::this_thread::sleep_for(seconds(3));
  long_pod = Pod("long");
  EXPECT_TRUE(Running(long_pod)) << long_pod["status"].dump();
  EXPECT_EQ(long_pod["status"]["containerStatuses"][0].value("restartCount", -1), 0);
  EXPECT_TRUE(fs::exists(pod_dir + "/ledger")) << "the pod's share outlives the agent";

  const size_t from = TheWorld().AgentLog(kPcie).size();
  ASSERT_TRUE(TheWorld().StartAgent(kPcie).ok());
  ASSERT_TRUE(WaitUntil([&] { return TheWorld().AgentReady(kPcie, from); }, seconds(60)));
  // The runtime's Synchronize follows its Configure: the pod is taken back a moment later, and
  // the restarted agent's /metrics shows its grant again. (The runtime may still list the
  // sandboxes of earlier tests' pods that ended, which are taken back and released in turn: the
  // count in the log is not this pod's alone.)
  EXPECT_TRUE(WaitUntil(
      [&] {
        return TheWorld().AgentMetrics(kPcie).find(
                   StrCat("namespace=\"", ns_, "\",pod=\"long\",sharing=\"shim\"} 2147483648")) !=
               std::string::npos;
      },
      seconds(30)))
      << TheWorld().AgentLog(kPcie).substr(from);
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
  const std::string original = ReadFile(file);
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
      << TheWorld().AgentLog(kPcie);
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

// --- attacks of a hostile tenant (issue 27; ctest label `security`: security_shim_attacks) ---
//
// Each pod reports as the probe does, then performs the attack with test/shim's shim_client and
// appends "attack step=answer" lines to its termination message.

// Lines "name=answer" the attack script appended (ParseProbeReport keeps them in env).
std::string Step(const ProbeReport& r, const std::string& name) {
  auto it = r.env.find(name);
  return it == r.env.end() ? "(missing)" : it->second;
}

// Sends one command to a shim_client started on fifos (fd 3 in, fd 4 out, or 5/6) and records
// its answer as `name`.
constexpr char kAttackHelpers[] = R"(
ask() { echo "$2" >&"$3"; read -r answer <&"$4"; echo "$1=$answer" >>/dev/termination-log; }
start_client() {  # start_client NAME "ENV=VALUE..." "ARGS...": on fifos /tmp/NAME.{in,out}
  mkfifo /tmp/$1.in /tmp/$1.out
  env $2 shim_client $3 </tmp/$1.in >/tmp/$1.out 2>/dev/null &
}
)";

// A compute-only share used to run with no memory cap: it is reserved, and capped at, the same
// fraction of its GPU's memory as of its compute.
TEST_F(AgentNodes, ShimAttacksAComputeOnlyShareCannotTakeTheWholeGpu) {
  Create(ProbePod(ns_, "grab", kNvswitch, {{"tessera.dev/gpu-compute", "30"}}));
  std::map<std::string, json> done = WaitAllFinished(1, seconds(180));
  ASSERT_EQ(done.size(), 1u);
  const records::Assignment a = AssignmentOf(done["grab"]);
  ASSERT_EQ(a.gpus.size(), 1u);
  EXPECT_EQ(a.gpus[0].grant.memory_mib, 81559 * 300 / 1000);
  ExpectShare("grab", done["grab"], 81559 * 300 / 1000);  // the cap holds; beyond it: OOM
}

// A driver (or an interposer) whose cuGetProcAddress hands out entry points the shim has never
// seen: the allocation through them is still counted, so the second half of the cap is refused.
TEST_F(AgentNodes, ShimAttacksUnknownProcAddressesAreStillCounted) {
  const std::string attack = StrCat(kAttackHelpers, R"(
start_client p TESSERA_FAKE_CUDA_INTERNAL_ENTRY_POINTS=1 --procaddr=12000
exec 3>/tmp/p.in 4</tmp/p.out
ask procaddr_init init 3 4
ask procaddr_hook "hookname cuMemAlloc" 3 4
ask procaddr_first "alloc a 629145600" 3 4
ask procaddr_second "alloc b 629145600" 3 4
echo exit >&3
)");
  Create(ProbePod(ns_, "procaddr", kNvswitch, {{"tessera.dev/gpu-memory", "1Gi"}}, {}, attack));
  std::map<std::string, json> done = WaitAllFinished(1, seconds(180));
  ASSERT_EQ(done.size(), 1u);
  ProbeReport r = ParseProbeReport(TerminationMessage(done["procaddr"]));
  EXPECT_EQ(Step(r, "procaddr_init"), "ok") << r.raw;
  EXPECT_EQ(Step(r, "procaddr_hook"), "ok cuMemAlloc_v2") << r.raw;
  EXPECT_EQ(Step(r, "procaddr_first"), "ok") << r.raw;
  EXPECT_EQ(Step(r, "procaddr_second"), "err 2") << r.raw;  // over the 1 GiB cap
}

// Export a cuMemCreate allocation as a file descriptor, import it in another process, release the
// original: the importer's hold keeps it counted, so the cap still holds.
TEST_F(AgentNodes, ShimAttacksAnExportedAllocationStaysCounted) {
  const std::string attack = StrCat(kAttackHelpers, R"(
start_client importer "" ""
start_client exporter "" ""
exec 3>/tmp/importer.in 4</tmp/importer.out 5>/tmp/exporter.in 6</tmp/exporter.out
ask vmm_importer_init init 3 4
ask vmm_listen "fdlisten /tmp/vmm.sock" 3 4
ask vmm_exporter_init init 5 6
ask vmm_create "vmm x 629145600 device" 5 6
ask vmm_send "vmmsend x /tmp/vmm.sock" 5 6
ask vmm_import "vmmimport x" 3 4
ask vmm_release "vmmfree x" 5 6
ask vmm_grab "alloc y 629145600" 5 6
ask vmm_importer_free "vmmfree x" 3 4
ask vmm_after "alloc y 629145600" 5 6
echo exit >&3
echo exit >&5
)");
  Create(ProbePod(ns_, "vmm", kNvswitch, {{"tessera.dev/gpu-memory", "1Gi"}}, {}, attack));
  std::map<std::string, json> done = WaitAllFinished(1, seconds(180));
  ASSERT_EQ(done.size(), 1u);
  ProbeReport r = ParseProbeReport(TerminationMessage(done["vmm"]));
  for (const char* step : {"vmm_importer_init", "vmm_listen", "vmm_exporter_init", "vmm_create",
                           "vmm_send", "vmm_import", "vmm_release"}) {
    EXPECT_EQ(Step(r, step), "ok") << step << "\n" << r.raw;
  }
  EXPECT_EQ(Step(r, "vmm_grab"), "err 2") << "the importer still holds 600 MiB\n" << r.raw;
  EXPECT_EQ(Step(r, "vmm_importer_free"), "ok") << r.raw;
  EXPECT_EQ(Step(r, "vmm_after"), "ok") << "given back by its last holder\n" << r.raw;
}

}  // namespace
}  // namespace tessera::e2e
