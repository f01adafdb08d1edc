// tessera as a DRA driver on a real node: `tessera agent --dra` on node gpu-a of the test harness
// (kubelet v1.37.2, containerd 2 with CDI, 8 fake H100s), allocated by the stock kube-scheduler
// from the ResourceSlices the agent publishes, prepared through the kubelet plugin's gRPC, and
// delivered into containers by CDI. The containers report what they got in their termination
// message.
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr char kNode[] = "gpu-a";
constexpr char kNs[] = "dra-e2e";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int CountInFile(const std::string& path, const std::string& text) {
  const std::string s = ReadFile(path);
  int n = 0;
  for (size_t pos = s.find(text); pos != std::string::npos; pos = s.find(text, pos + 1)) ++n;
  return n;
}

template <typename Pred>
bool Eventually(Pred pred, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return pred();
}

const Node& GpuNode() {
  const Node* n = ControlPlane::Shared().FindNode(kNode);
  EXPECT_NE(n, nullptr);
  return *n;
}

void Create(const json& object) {
  auto r = ControlPlane::Shared().KubectlOk({"create", "-f", "-"}, object.dump());
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << object.dump(2);
}

std::string AgentLog() { return GpuNode().dir + "/agent.log"; }

std::vector<std::string> CdiSpecs() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(GpuNode().cdi_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("k8s.gpu.tessera.dev-gpu_", 0) == 0) out.push_back(name);
  }
  return out;
}

json Slices() {
  return GetJson(ControlPlane::Shared(),
                 {"resourceslices", "--field-selector",
                  StrCat("spec.nodeName=", kNode, ",spec.driver=gpu.tessera.dev")});
}

size_t DeviceCount(const json& slices) {
  size_t n = 0;
  for (const json& s : slices["items"]) n += s["spec"].value("devices", json::array()).size();
  return n;
}

// A ResourceClaim of one device of `device_class`, with capacity requests when given.
json ClaimObject(const std::string& name, const std::string& device_class,
                 const json& capacity = nullptr, const std::string& selector = "") {
  json exactly = {{"deviceClassName", device_class}, {"count", 1}};
  if (!capacity.is_null()) exactly["capacity"] = {{"requests", capacity}};
  if (!selector.empty()) exactly["selectors"] = {{{"cel", {{"expression", selector}}}}};
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", name}, {"namespace", kNs}}},
          {"spec", {{"devices", {{"requests", {{{"name", "gpu"}, {"exactly", exactly}}}}}}}}};
}

// A pod (placed by kube-scheduler) that uses claim `claim` and runs `script`.
json ClaimPod(const std::string& name, const std::string& claim, const std::string& script) {
  json pod = TestPod(name, kNs, "", script);
  pod["spec"]["resourceClaims"] = {{{"name", "gpu"}, {"resourceClaimName", claim}}};
  pod["spec"]["containers"][0]["resources"] = {{"claims", {{{"name", "gpu"}}}}};
  return pod;
}

// What the containers report: their tessera environment and the GPU device nodes they see.
constexpr char kReport[] =
    "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|TESSERA_)' | sort; ls /dev | grep nvidia | sort";

json Claim(const std::string& name) {
  return GetJson(ControlPlane::Shared(), {"resourceclaim", name, "-n", kNs});
}

bool PodRunning(const json& pod) { return pod["status"].value("phase", "") == "Running"; }

bool PodGone(const std::string& name) {
  return !ControlPlane::Shared().Kubectl({"get", "pod", name, "-n", kNs}).ok();
}

void DeletePod(const std::string& name) {
  auto r = ControlPlane::Shared().KubectlOk(
      {"delete", "pod", name, "-n", kNs, "--grace-period=1", "--wait=false"});
  ASSERT_TRUE(r.ok()) << r.status();
}

std::string FakeGpuUuid(int index) {
  json desc = json::parse(ReadFile(GpuNode().fake_gpus));
  for (const json& g : desc["gpus"]) {
    if (g["index"] == index) return g["uuid"];
  }
  return "";
}

// One agent for the whole suite, started after the control plane (a global environment).
// The index of the fake GPU whose UUID a container reports in NVIDIA_VISIBLE_DEVICES; -1 if none.
int GpuIndexIn(const std::string& message) {
  for (int i = 0; i < 8; ++i) {
    if (message.find("NVIDIA_VISIBLE_DEVICES=" + FakeGpuUuid(i) + "\n") != std::string::npos)
      return i;
  }
  return -1;
}

class DraDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ControlPlane& cp = ControlPlane::Shared();
    const Node& node = GpuNode();
    ASSERT_TRUE(cp.KubectlOk({"create", "namespace", kNs}).ok());
    auto applied =
        cp.KubectlOk({"apply", "-f", StrCat(TESSERA_SOURCE_DIR, "/deploy/dra-deviceclasses.yaml")});
    ASSERT_TRUE(applied.ok()) << applied.status();
    const std::string state = node.dir + "/tessera";
    auto pid = cp.NodeSpawn(
        node.name, "agent",
        {TESSERA_BINARY, "agent", "--dra", "--gpus-file", node.fake_gpus, "--dev-dir", node.dev_dir,
         "--no-nri", "--pods-dir", state + "/pods", "--claims-dir", state + "/claims", "--shim-dir",
         TESSERA_SHIM_DIR, "--shim-install-dir", state + "/lib", "--driver-lib-dir",
         TESSERA_FAKE_DRIVER_DIR, "--dra-resync-interval", "2s", "--dra-mig-mode-switch",
         // Test 9 watches a failed GPU's pod keep running with its health
         // streamed, and the GPU come back: no eviction, a short quiet period.
         "--gpu-fault-policy", "cordon-gpu", "--gpu-quiet-period", "1s", "--log-level", "debug"});
    ASSERT_TRUE(pid.ok()) << pid.status();
  }
};

// 1. The slices, as kube-scheduler reads them.
TEST_F(DraDriver, PublishesThePoolAndRegistersWithTheKubelet) {
  json slices;
  ASSERT_TRUE(Eventually([&] {
    slices = Slices();
    return slices["items"].size() == 5;
  })) << slices.dump(1).substr(0, 2000)
      << ReadFile(AgentLog());
  EXPECT_EQ(DeviceCount(slices), 8u + 8u * 25u);  // 8 whole GPUs and their MIG placements
  std::set<int64_t> generations;
  for (const json& s : slices["items"]) {
    generations.insert(s["spec"]["pool"]["generation"].get<int64_t>());
    EXPECT_EQ(s["spec"]["pool"]["name"], kNode);
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 5);
    EXPECT_EQ(s["metadata"]["ownerReferences"][0]["kind"], "Node");
  }
  EXPECT_EQ(generations.size(), 1u);
  // The API server kept the consumable-capacity fields (a gate that is off drops them silently).
  json gpu0;
  for (const json& s : slices["items"]) {
    for (const json& d : s["spec"].value("devices", json::array())) {
      if (d["name"] == "gpu-0") gpu0 = d;
    }
  }
  ASSERT_FALSE(gpu0.is_null());
  EXPECT_EQ(gpu0["allowMultipleAllocations"], true);
  EXPECT_EQ(gpu0["capacity"]["memory"]["value"], "81559Mi");
  EXPECT_EQ(gpu0["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "1Mi");
  EXPECT_EQ(gpu0["attributes"]["uuid"]["string"], FakeGpuUuid(0));
  EXPECT_EQ(gpu0["attributes"]["nvlinkDomain"]["string"], kNode);
  EXPECT_FALSE(gpu0["consumesCounters"].empty());
  // Registered with the real kubelet through plugins_registry.
  EXPECT_TRUE(Eventually([] {
    return CountInFile(AgentLog(), "registered with the kubelet") >= 1;
  })) << ReadFile(AgentLog());
  EXPECT_TRUE(fs::exists(GpuNode().plugins_registry_dir + "/gpu.tessera.dev-reg.sock"));
  // The kubelet watches the devices' health (v1.DRAResourceHealth).
  EXPECT_TRUE(Eventually([] {
    return CountInFile(AgentLog(), "the kubelet watches device health") >= 1;
  })) << ReadFile(AgentLog());
  // DRA mode: no classic extended resources on the Node.
  json node = GetJson(ControlPlane::Shared(), {"node", kNode});
  EXPECT_FALSE(node["status"]["allocatable"].contains("tessera.dev/gpu"));
  EXPECT_TRUE(node["metadata"]["annotations"].contains("tessera.dev/gpu-inventory"));
}

// 2. kube-scheduler allocates a whole GPU; the plugin prepares it; the container gets it by CDI.
TEST_F(DraDriver, KubeSchedulerAllocatesAWholeGpuAndTheContainerGetsIt) {
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  Create(ClaimObject("whole", "gpu.tessera.dev"));
  Create(ClaimPod("whole", "whole", StrCat("(", kReport, ") > /dev/termination-log")));
  json pod = WaitForPod(ControlPlane::Shared(), kNs, "whole", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded")
      << pod["status"].dump(2) << ReadFile(AgentLog());
  EXPECT_EQ(pod["spec"]["nodeName"], kNode);
  // The claim is deallocated once the pod is done; what it was is in the container's report and
  // in the agent's log.
  const std::string message = TerminationMessage(pod);
  const int index = GpuIndexIn(message);
  ASSERT_GE(index, 0) << message;
  EXPECT_EQ(CountInFile(AgentLog(), StrCat(" I prepared claim ", kNs, "/whole (")), 1);
  EXPECT_THAT(ReadFile(AgentLog()), HasSubstr(StrCat("): gpu-", index, " (whole)")));
  EXPECT_THAT(message, HasSubstr(StrCat("nvidia", index, "\n")));
  EXPECT_THAT(message, HasSubstr("nvidiactl\n"));
  EXPECT_THAT(message, HasSubstr("nvidia-uvm\n"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("TESSERA_GPU_SHARING")));  // whole: no shim
  // The pod finished: the kubelet unprepares the claim and the spec goes.
  DeletePod("whole");
  EXPECT_TRUE(Eventually([] { return CdiSpecs().empty(); })) << ReadFile(AgentLog());
  EXPECT_GE(CountInFile(AgentLog(), StrCat("unprepared claim ", kNs, "/whole (")), 1);
}

// 3. Shares by consumable capacity, allocated by kube-scheduler: 20 claims of 4Gi.
TEST_F(DraDriver, KubeSchedulerPacksTwentyShareClaimsByConsumableCapacity) {
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  constexpr int kPods = 20;
  for (int i = 0; i < kPods; ++i) {
    const std::string name = StrCat("share-", i);
    Create(ClaimObject(name, "gpu-share.tessera.dev", {{"memory", "4Gi"}}));
    Create(ClaimPod(name, name,
                    StrCat("(", kReport, "; ls /run/tessera) > /dev/termination-log; sleep 60")));
  }
  // All at once: every claim allocated and prepared while the others run.
  std::map<std::string, int> per_device;
  ASSERT_TRUE(Eventually(
      [&] {
        for (int i = 0; i < kPods; ++i) {
          json pod = GetJson(ControlPlane::Shared(), {"pod", StrCat("share-", i), "-n", kNs});
          if (!PodRunning(pod)) return false;
        }
        return true;
      },
      std::chrono::seconds(150)))
      << ReadFile(AgentLog()).substr(0, 20000);
  EXPECT_EQ(CdiSpecs().size(), static_cast<size_t>(kPods));
  for (int i = 0; i < kPods; ++i) {
    json claim = Claim(StrCat("share-", i));
    const json& r = claim["status"]["allocation"]["devices"]["results"][0];
    EXPECT_EQ(r["consumedCapacity"]["memory"], "4Gi") << r.dump();
    EXPECT_FALSE(r.value("shareID", "").empty());
    ++per_device[r["device"].get<std::string>()];
  }
  // 81559 MiB per H100: 19 shares of 4Gi fit on a GPU, the 20th goes to a second one.
  EXPECT_EQ(per_device.size(), 2u) << json(per_device).dump();
  int most = 0;
  for (const auto& [d, n] : per_device) most = std::max(most, n);
  EXPECT_EQ(most, 19) << json(per_device).dump();
  for (int i = 0; i < kPods; ++i) {
    json pod = WaitForPod(ControlPlane::Shared(), kNs, StrCat("share-", i), PodFinished,
                          std::chrono::seconds(120));
    ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
    const std::string message = TerminationMessage(pod);
    EXPECT_THAT(message, HasSubstr("TESSERA_GPU_SHARING=shim\n"));
    EXPECT_THAT(message, HasSubstr("TESSERA_GPU_MEMORY_LIMIT_MIB=4096\n"));
    EXPECT_THAT(message, HasSubstr("ledger\nlimits\n"));  // the shim's segments are mounted
    DeletePod(StrCat("share-", i));
  }
  EXPECT_TRUE(Eventually([] { return CdiSpecs().empty(); }, std::chrono::seconds(120)))
      << ReadFile(AgentLog()).substr(0, 20000);
  EXPECT_TRUE(Eventually([] {
    std::error_code ec;
    return fs::is_empty(GpuNode().dir + "/tessera/claims", ec);
  }));
}

// 4. The agent restarts while a claim's pod runs: nothing leaks, nothing is prepared twice.
TEST_F(DraDriver, PluginRestartNeitherLeaksNorPreparesTwice) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  Create(ClaimObject("long", "gpu.tessera.dev"));
  Create(ClaimPod("long", "long", "sleep 3600"));
  ASSERT_TRUE(PodRunning(WaitForPod(cp, kNs, "long", PodRunning))) << ReadFile(AgentLog());
  ASSERT_EQ(CdiSpecs().size(), 1u);
  const std::string spec = CdiSpecs()[0];

  const int registered = CountInFile(AgentLog(), "registered with the kubelet as gpu.tessera.dev");
  ASSERT_TRUE(cp.NodeRestart(kNode, "agent").ok());
  EXPECT_TRUE(Eventually([] {
    return CountInFile(AgentLog(), "1 prepared claim(s) restored") >= 1;
  })) << ReadFile(AgentLog());
  EXPECT_EQ(CdiSpecs(), std::vector<std::string>{spec});
  // Registered again (a pod that reaches the kubelet before that waits out the kubelet's
  // back-off, ~90 s), and it serves: another claim is prepared beside the running one.
  ASSERT_TRUE(Eventually([&] {
    return CountInFile(AgentLog(), "registered with the kubelet as gpu.tessera.dev") > registered;
  })) << ReadFile(AgentLog());
  Create(ClaimObject("after-restart", "gpu.tessera.dev"));
  Create(
      ClaimPod("after-restart", "after-restart", StrCat("(", kReport, ") > /dev/termination-log")));
  json pod = WaitForPod(cp, kNs, "after-restart", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  const std::string long_device =
      Claim("long")["status"]["allocation"]["devices"]["results"][0].value("device", "");
  ASSERT_FALSE(long_device.empty());
  const int after_index = GpuIndexIn(TerminationMessage(pod));
  ASSERT_GE(after_index, 0) << TerminationMessage(pod);
  EXPECT_NE(StrCat("gpu-", after_index), long_device);
  EXPECT_EQ(CountInFile(AgentLog(), StrCat(" I prepared claim ", kNs, "/long (")), 1);  // once
  DeletePod("after-restart");

  // 5. The claim is deleted while its pod runs: the finalizer keeps it until the pod ends, the
  // pod is told, and the GPU stays prepared for it.
  ASSERT_TRUE(cp.KubectlOk({"delete", "resourceclaim", "long", "-n", kNs, "--wait=false"}).ok());
  EXPECT_TRUE(Eventually([&] {
    json events = GetJson(cp, {"events", "-n", kNs, "--field-selector",
                               "involvedObject.name=long,reason=ResourceClaimDeleted"});
    return !events["items"].empty();
  })) << ReadFile(AgentLog());
  json events = GetJson(cp, {"events", "-n", kNs, "--field-selector",
                             "involvedObject.name=long,reason=ResourceClaimDeleted"});
  if (!events["items"].empty()) {
    EXPECT_THAT(events["items"][0].value("message", ""),
                HasSubstr("ResourceClaim dra-e2e/long is being deleted while this pod runs"));
  }
  EXPECT_TRUE(PodRunning(GetJson(cp, {"pod", "long", "-n", kNs})));
  EXPECT_EQ(CdiSpecs(), std::vector<std::string>{spec});
  DeletePod("long");
  EXPECT_TRUE(Eventually([] { return CdiSpecs().empty(); }, std::chrono::seconds(90)))
      << ReadFile(AgentLog());
  EXPECT_TRUE(Eventually([] { return PodGone("long"); }));
  EXPECT_TRUE(Eventually([&] {
    return !cp.Kubectl({"get", "resourceclaim", "long", "-n", kNs}).ok();
  }));
}

// 6. The kubelet restarts: it deletes the node's slices and registers the plugin again; the agent
// publishes them again and claims are prepared as before.
TEST_F(DraDriver, KubeletRestartRepublishesAndServes) {
  ControlPlane& cp = ControlPlane::Shared();
  const int registrations = CountInFile(AgentLog(), "registered with the kubelet");
  ASSERT_TRUE(cp.NodeRestart(kNode, "kubelet").ok());
  ASSERT_TRUE(cp.WaitForNodeReady(kNode).ok());
  EXPECT_TRUE(Eventually([&] {
    return CountInFile(AgentLog(), "registered with the kubelet") > registrations;
  })) << ReadFile(AgentLog());
  EXPECT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; })) << ReadFile(AgentLog());
  Create(ClaimObject("after-kubelet", "gpu.tessera.dev"));
  Create(
      ClaimPod("after-kubelet", "after-kubelet", StrCat("(", kReport, ") > /dev/termination-log")));
  json pod = WaitForPod(cp, kNs, "after-kubelet", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod["status"].dump(2);
  EXPECT_THAT(TerminationMessage(pod), HasSubstr("NVIDIA_VISIBLE_DEVICES=GPU-"));
  DeletePod("after-kubelet");
}

// 7. A classic pod (tessera.dev/gpu: 1) is served through the DeviceClass's extendedResourceName.
TEST_F(DraDriver, ClassicPodServedThroughTheExtendedResourceName) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  json pod = TestPod("classic", kNs, "", StrCat("(", kReport, ") > /dev/termination-log"));
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"tessera.dev/gpu", "1"}}}};
  Create(pod);
  pod = WaitForPod(cp, kNs, "classic", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded")
      << pod["status"].dump(2) << ReadFile(AgentLog()).substr(0, 10000);
  EXPECT_THAT(TerminationMessage(pod), HasSubstr("NVIDIA_VISIBLE_DEVICES=GPU-"));
  EXPECT_FALSE(pod["status"].value("extendedResourceClaimStatus", json::object()).empty())
      << pod["status"].dump(2);
  DeletePod("classic");
}

// 7b. One claim of two GPUs in one NVLink domain (matchAttribute): both reach the container.
TEST_F(DraDriver, AClaimOfTwoGpusInOneNvlinkDomainGetsBoth) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  json claim = ClaimObject("pair", "gpu.tessera.dev");
  claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2;
  claim["spec"]["devices"]["constraints"] = {
      {{"requests", {"gpu"}}, {"matchAttribute", "gpu.tessera.dev/nvlinkDomain"}}};
  Create(claim);
  Create(ClaimPod("pair", "pair", StrCat("(", kReport, ") > /dev/termination-log")));
  json pod = WaitForPod(cp, kNs, "pair", PodFinished);
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded")
      << pod["status"].dump(2) << ReadFile(AgentLog()).substr(0, 10000);
  const std::string message = TerminationMessage(pod);
  std::vector<int> seen;
  for (int i = 0; i < 8; ++i) {
    if (message.find(FakeGpuUuid(i)) != std::string::npos) {
      seen.push_back(i);
      EXPECT_THAT(message, HasSubstr(StrCat("nvidia", i, "\n")));
    }
  }
  EXPECT_EQ(seen.size(), 2u) << message;
  if (seen.size() == 2) {  // in the allocation's order
    const std::string a = FakeGpuUuid(seen[0]), b = FakeGpuUuid(seen[1]);
    EXPECT_TRUE(message.find("NVIDIA_VISIBLE_DEVICES=" + a + "," + b + "\n") != std::string::npos ||
                message.find("NVIDIA_VISIBLE_DEVICES=" + b + "," + a + "\n") != std::string::npos)
        << message;
  }
  DeletePod("pair");
}

// What a running pod's container printed: the node's pod log (the harness has no kubectl logs:
// the API server does not reach the kubelets), CRI's "<time> <stream> <tag> " taken off each line.
std::string PodLog(const std::string& pod) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(GpuNode().dir + "/pod-logs", ec)) {
    if (e.path().filename().string().rfind(StrCat(kNs, "_", pod, "_"), 0) != 0) continue;
    std::ifstream in(e.path() / "main" / "0.log");
    std::string out;
    for (std::string line; std::getline(in, line);) {
      size_t cut = 0;
      for (int field = 0; field < 3 && cut != std::string::npos; ++field) {
        cut = line.find(' ', cut);
        if (cut != std::string::npos) ++cut;
      }
      if (cut != std::string::npos) out += line.substr(cut) + "\n";
    }
    return out;
  }
  return "";
}

// The description file of the node, rewritten atomically (what an administrator's nvidia-smi or
// the driver does to the fake GPUs).
void RewriteFakeGpus(const std::string& text) {
  const std::string file = GpuNode().fake_gpus;
  const std::string tmp = file + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, file);
}

// Puts the node's description file back as it was when it goes, whatever the test did.
class FakeGpusRestorer {
 public:
  FakeGpusRestorer() : original_(ReadFile(GpuNode().fake_gpus)) {}
  ~FakeGpusRestorer() {
    if (ReadFile(GpuNode().fake_gpus) != original_) RewriteFakeGpus(original_);
  }
  const std::string& original() const { return original_; }

 private:
  std::string original_;
};

bool FakeMigEnabled(int index) {
  json desc = json::parse(ReadFile(GpuNode().fake_gpus));
  for (const json& g : desc["gpus"]) {
    if (g["index"] == index) return g["mig"].value("enabled", false);
  }
  return false;
}

// The MIG instances the node's description lists on GPU `index`.
json FakeMigInstances(int index) {
  json desc = json::parse(ReadFile(GpuNode().fake_gpus));
  for (const json& g : desc["gpus"]) {
    if (g["index"] == index) return g["mig"].value("instances", json::array());
  }
  return json::array();
}

// 8. MIG: an administrator turns MIG mode on for GPU 6; a claim of the class mig.tessera.dev
// allocated there by kube-scheduler gets its instance created when the pod's claim is prepared
// (the container sees MIG-<uuid> and GPU 6's device node), kept across an agent restart without a
// second instance, and destroyed when the pod is deleted. A MIG claim on a GPU not in MIG mode
// has MIG mode turned on for it by the agent (--dra-mig-mode-switch), and off after.
TEST_F(DraDriver, AMigClaimGetsItsInstanceCreatedAndDestroyed) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  FakeGpusRestorer restorer;
  const std::string original = restorer.original();
  json desc = json::parse(original);
  for (json& g : desc["gpus"]) {
    if (g["index"] == 6)
      g["mig"] = {{"capable", true}, {"enabled", true}, {"instances", json::array()}};
  }
  RewriteFakeGpus(desc.dump(1));
  // gpu-6 itself is no longer published; its MIG placements are.
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 207; })) << ReadFile(AgentLog());

  Create(ClaimObject("mig", "mig.tessera.dev", nullptr,
                     "device.attributes[\"gpu.tessera.dev\"].parentIndex == 6"));
  Create(ClaimPod("mig", "mig", StrCat(kReport, "; sleep 3600")));
  json pod = WaitForPod(cp, kNs, "mig", PodRunning, std::chrono::seconds(120));
  ASSERT_TRUE(PodRunning(pod)) << pod["status"].dump(2) << ReadFile(AgentLog()).substr(0, 20000);
  const json result = Claim("mig")["status"]["allocation"]["devices"]["results"][0];
  const std::string device = result.value("device", "");
  ASSERT_EQ(device.rfind("gpu-6-mig-", 0), 0u) << result.dump();
  // The instance exists on the GPU, and it is the container's.
  json instances = FakeMigInstances(6);
  ASSERT_EQ(instances.size(), 1u) << instances.dump();
  const std::string mig_uuid = instances[0].value("uuid", "");
  EXPECT_EQ(device, StrCat("gpu-6-mig-",
                           std::regex_replace(instances[0]["profile"].get<std::string>(),
                                              std::regex("[.+]"), "-"),
                           "-", instances[0]["start"].get<int>()));
  // The report is whole once its last part, the device nodes, is there (read sooner, the log may
  // hold the environment alone).
  std::string logs;
  ASSERT_TRUE(Eventually([&] {
    logs = PodLog("mig");
    return logs.find("NVIDIA_VISIBLE_DEVICES=") != std::string::npos &&
           logs.find("nvidia6\n") != std::string::npos;
  })) << logs;
  EXPECT_THAT(logs, HasSubstr("NVIDIA_VISIBLE_DEVICES=" + mig_uuid + "\n"));
  EXPECT_THAT(logs, HasSubstr("nvidia6\n"));
  EXPECT_THAT(logs, ::testing::Not(HasSubstr("TESSERA_GPU_SHARING")));
  EXPECT_EQ(CountInFile(AgentLog(), StrCat("created MIG instance ")), 1) << ReadFile(AgentLog());

  // The agent restarts while the pod runs: the claim is restored, no second instance.
  const int restored = CountInFile(AgentLog(), "prepared claim(s) restored");
  ASSERT_TRUE(cp.NodeRestart(kNode, "agent").ok());
  EXPECT_TRUE(Eventually([&] {
    return CountInFile(AgentLog(), "prepared claim(s) restored") > restored;
  })) << ReadFile(AgentLog());
  EXPECT_TRUE(
      Eventually([] { return CountInFile(AgentLog(), "registered with the kubelet") >= 1; }));
  EXPECT_EQ(FakeMigInstances(6).size(), 1u);
  EXPECT_TRUE(PodRunning(GetJson(cp, {"pod", "mig", "-n", kNs})));

  // A MIG placement on GPU 5, which is not in MIG mode: the agent (--dra-mig-mode-switch) turns
  // MIG mode on for it, and off again once the pod is gone. (Without the switch such a claim is
  // refused with what to do, and such placements are not published: driver_test, pool_test.)
  Create(ClaimObject("mig-switch", "mig.tessera.dev", nullptr,
                     "device.attributes[\"gpu.tessera.dev\"].parentIndex == 5"));
  Create(ClaimPod("mig-switch", "mig-switch", StrCat(kReport, "; sleep 3600")));
  std::string switched;
  EXPECT_TRUE(Eventually(
      [&] {
        switched = PodLog("mig-switch");
        return switched.find("NVIDIA_VISIBLE_DEVICES=MIG-") != std::string::npos &&
               switched.find("nvidia5\n") != std::string::npos;
      },
      std::chrono::seconds(120)))
      << switched << ReadFile(AgentLog()).substr(0, 20000);
  EXPECT_TRUE(FakeMigEnabled(5));
  json five = FakeMigInstances(5);
  ASSERT_EQ(five.size(), 1u) << five.dump();
  EXPECT_THAT(switched,
              HasSubstr(StrCat("NVIDIA_VISIBLE_DEVICES=", five[0].value("uuid", ""), "\n")));
  EXPECT_THAT(switched, HasSubstr("nvidia5\n"));
  EXPECT_THAT(ReadFile(AgentLog()), HasSubstr("MIG mode turned on for GPU 5"));
  DeletePod("mig-switch");
  EXPECT_TRUE(Eventually([] { return FakeMigInstances(5).empty() && !FakeMigEnabled(5); },
                         std::chrono::seconds(90)))
      << ReadFile(AgentLog());
  EXPECT_THAT(ReadFile(AgentLog()), HasSubstr("MIG mode turned off for GPU 5"));

  // The pod is deleted: the kubelet unprepares the claim, the instance is destroyed.
  DeletePod("mig");
  EXPECT_TRUE(Eventually([] { return FakeMigInstances(6).empty(); }, std::chrono::seconds(90)))
      << ReadFile(AgentLog());
  EXPECT_TRUE(Eventually([] { return CdiSpecs().empty(); }));
  EXPECT_GE(CountInFile(AgentLog(), "destroyed MIG instance "), 1);
  EXPECT_TRUE(Eventually([] { return PodGone("mig") && PodGone("mig-switch"); }));
  RewriteFakeGpus(original);
  EXPECT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; })) << ReadFile(AgentLog());
}

// The YAML between the dra-examples markers of docs/dra.md, as a list of JSON objects.
std::vector<json> DocsExamples() {
  const std::string doc = ReadFile(StrCat(TESSERA_SOURCE_DIR, "/docs/dra.md"));
  const size_t begin = doc.find("<!-- dra-examples: begin");
  const size_t end = doc.find("<!-- dra-examples: end -->");
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  if (begin == std::string::npos || end == std::string::npos) return {};
  std::string block = doc.substr(begin, end - begin);
  const size_t open = block.find("```yaml\n");
  const size_t close = block.rfind("```");
  EXPECT_NE(open, std::string::npos);
  block = block.substr(open + 8, close - open - 8);
  CommandResult r = ControlPlane::Shared().Kubectl(
      {"create", "--dry-run=client", "-o", "json", "-f", "-"}, block);
  EXPECT_TRUE(r.ok()) << r.err << block;
  if (!r.ok()) return {};
  // One JSON object after the other, as kubectl prints several.
  std::vector<json> out;
  std::istringstream in(r.out);
  while ((in >> std::ws).peek() != EOF) {
    json object;
    in >> object;
    out.push_back(std::move(object));
  }
  return out;
}

// 8b. The DRA examples of docs/dra.md, applied as they are written (the test's image and a report
// in place of my/image), all allocated by tessera's scheduler in DRA mode: a whole GPU, a 10Gi
// share, a MIG slice on a GPU an administrator put in MIG mode (the kubelet plugin creates the
// instance tessera placed), a gang of two in one NVLink domain; every container gets what its
// claim says.
TEST_F(DraDriver, DocsExamplesRun) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  // tessera's scheduler, allocating claims.
  const std::string config = GpuNode().dir + "/tessera/scheduler.yaml";
  std::ofstream(config) << R"(apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: tessera
leaderElection: {leaderElect: false}
metrics: {bindAddress: 127.0.0.1, port: 0}
retry: {minInterval: 200ms, period: 5s}
dra: {enabled: true}
)";
  auto scheduler = cp.NodeSpawn(kNode, "tessera-scheduler",
                                {TESSERA_BINARY, "scheduler", "--kubeconfig", cp.kubeconfig(),
                                 "--config", config, "--log-level", "debug"});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const std::string scheduler_log = GpuNode().dir + "/tessera-scheduler.log";
  // An administrator turns MIG mode on for GPU 6.
  FakeGpusRestorer restorer;
  const std::string original = restorer.original();
  json desc = json::parse(original);
  for (json& g : desc["gpus"]) {
    if (g["index"] == 6)
      g["mig"] = {{"capable", true}, {"enabled", true}, {"instances", json::array()}};
  }
  RewriteFakeGpus(desc.dump(1));
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 207; })) << ReadFile(AgentLog());

  std::vector<std::string> pods;
  struct Cleanup {  // also when an assertion ends the test early
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    for (const std::string& p : pods) {
      (void)cp.Kubectl({"delete", "pod", p, "-n", kNs, "--grace-period=1", "--wait=false"});
    }
    (void)cp.NodeKill(kNode, "tessera-scheduler");
    for (const char* t : {"one-gpu", "share-10gi", "mig-1g"}) {
      (void)cp.Kubectl({"delete", "resourceclaimtemplate", t, "-n", kNs});
    }
  }};
  for (json object : DocsExamples()) {
    object["metadata"]["namespace"] = kNs;
    if (object["kind"] == "Pod") {
      pods.push_back(object["metadata"]["name"]);
      json& spec = object["spec"];
      ASSERT_EQ(spec["containers"][0]["image"], "my/image");
      spec["containers"][0]["image"] = ControlPlane::kTestImage;
      spec["containers"][0]["imagePullPolicy"] = "Never";
      spec["containers"][0]["command"] = {"/bin/sh", "-c", StrCat(kReport, "; sleep 3600")};
      spec["restartPolicy"] = "Never";
      spec["terminationGracePeriodSeconds"] = 1;
      spec["automountServiceAccountToken"] = false;
    }
    Create(object);
  }
  ASSERT_EQ(pods, (std::vector<std::string>{"trainer", "notebook", "mig-worker", "worker-0",
                                            "worker-1"}));
  std::map<std::string, std::string> logs;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const std::string& p : pods) {
          if (!PodRunning(GetJson(cp, {"pod", p, "-n", kNs}))) return false;
          logs[p] = PodLog(p);
          if (logs[p].find("NVIDIA_VISIBLE_DEVICES=") == std::string::npos) return false;
        }
        return true;
      },
      std::chrono::seconds(180)))
      << ReadFile(scheduler_log).substr(0, 20000) << ReadFile(AgentLog()).substr(0, 20000);
  // A whole GPU: no shim.
  const int trainer = GpuIndexIn(logs["trainer"]);
  EXPECT_GE(trainer, 0) << logs["trainer"];
  EXPECT_THAT(logs["trainer"], ::testing::Not(HasSubstr("TESSERA_GPU_SHARING")));
  // The share: 10Gi, enforced by the shim.
  EXPECT_THAT(logs["notebook"], HasSubstr("TESSERA_GPU_SHARING=shim\n"));
  EXPECT_THAT(logs["notebook"], HasSubstr("TESSERA_GPU_MEMORY_LIMIT_MIB=10240\n"));
  // The MIG slice: one 1g.10gb instance, created where tessera's MIG policy put it: GPU 6, the
  // only one in MIG mode, at slice 6 (on an empty GPU the placement that loses no 4g or 2g room).
  int mig_gpu = -1;
  json instances;
  for (int i = 0; i < 8; ++i) {
    json on = FakeMigInstances(i);
    if (on.empty()) continue;
    EXPECT_EQ(mig_gpu, -1) << "instances on GPUs " << mig_gpu << " and " << i;
    mig_gpu = i;
    instances = on;
  }
  ASSERT_EQ(instances.size(), 1u) << instances.dump();
  EXPECT_EQ(mig_gpu, 6);
  EXPECT_EQ(instances[0]["profile"], "1g.10gb");
  EXPECT_EQ(instances[0]["start"], 6);
  EXPECT_THAT(logs["mig-worker"],
              HasSubstr(StrCat("NVIDIA_VISIBLE_DEVICES=", instances[0].value("uuid", ""), "\n")));
  EXPECT_THAT(logs["mig-worker"], HasSubstr(StrCat("nvidia", mig_gpu, "\n")));
  // The gang: two GPUs, neither the trainer's nor GPU 6, placed by tessera.
  const int w0 = GpuIndexIn(logs["worker-0"]), w1 = GpuIndexIn(logs["worker-1"]);
  EXPECT_GE(w0, 0);
  EXPECT_GE(w1, 0);
  EXPECT_NE(w0, w1);
  for (int w : {w0, w1}) {
    EXPECT_NE(w, trainer);
    EXPECT_NE(w, mig_gpu);
  }
  for (const char* p : {"trainer", "notebook", "mig-worker", "worker-0", "worker-1"}) {
    EXPECT_EQ(GetJson(cp, {"pod", p, "-n", kNs})["spec"]["schedulerName"], "tessera");
  }
  // The MIG instance is accounted as one, not as a GPU that blocks its node.
  EXPECT_THAT(ReadFile(scheduler_log), ::testing::Not(HasSubstr("it takes MIG grants only")));

  for (const std::string& p : pods) DeletePod(p);
  EXPECT_TRUE(Eventually([&] { return CdiSpecs().empty() && FakeMigInstances(mig_gpu).empty(); },
                         std::chrono::seconds(120)))
      << ReadFile(AgentLog());
  EXPECT_TRUE(Eventually([&] {
    for (const std::string& p : pods) {
      if (!PodGone(p)) return false;
    }
    return true;
  }));
  RewriteFakeGpus(original);
  EXPECT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; })) << ReadFile(AgentLog());
}

// 9. A GPU turns unhealthy (XID 79 in the node's description): its devices get the NoSchedule
// taint (the agent runs with the fault policy cordon-gpu) in a new generation of the pool, and
// lose it again when the GPU recovers.
TEST_F(DraDriver, AnUnhealthyGpuIsTaintedInANewPoolGeneration) {
  const std::string file = GpuNode().fake_gpus;
  const std::string original = ReadFile(file);
  auto rewrite = [&](const std::string& text) {
    const std::string tmp = file + ".tmp";
    std::ofstream(tmp) << text;
    fs::rename(tmp, file);
  };
  auto generation = [] {
    json slices = Slices();
    return slices["items"].empty()
               ? int64_t{-1}
               : slices["items"][0]["spec"]["pool"]["generation"].get<int64_t>();
  };
  auto gpu7_taints = [] {
    const json slices = Slices();  // kept: a range-for over Slices()["items"] would dangle
    for (const json& s : slices["items"]) {
      for (const json& d : s["spec"].value("devices", json::array())) {
        if (d["name"] == "gpu-7") return d.value("taints", json::array());
      }
    }
    return json::array();
  };
  ASSERT_TRUE(Eventually([] { return DeviceCount(Slices()) == 208; }));
  // A pod runs on GPU 7 when it fails: the kubelet shows the health the plugin streams in the
  // pod's status.
  ControlPlane& cp = ControlPlane::Shared();
  Create(ClaimObject("on-seven", "gpu.tessera.dev", nullptr,
                     "device.attributes[\"gpu.tessera.dev\"].index == 7"));
  Create(ClaimPod("on-seven", "on-seven", "sleep 3600"));
  ASSERT_TRUE(PodRunning(WaitForPod(cp, kNs, "on-seven", PodRunning))) << ReadFile(AgentLog());
  const int64_t before = generation();
  json desc = json::parse(original);
  for (json& g : desc["gpus"]) {
    if (g["index"] == 7) {
      g["healthy"] = false;
      g["xid"] = {79};
    }
  }
  rewrite(desc.dump());
  EXPECT_TRUE(Eventually([&] { return !gpu7_taints().empty(); })) << ReadFile(AgentLog());
  json taints = gpu7_taints();
  if (!taints.empty()) {
    EXPECT_EQ(taints[0]["key"], "gpu.tessera.dev/unhealthy");
    EXPECT_EQ(taints[0]["effect"], "NoSchedule");
    EXPECT_EQ(taints[0].value("value", ""), "xid-79");
  }
  EXPECT_GT(generation(), before);
  std::set<int64_t> generations;
  const json slices = Slices();
  for (const json& s : slices["items"]) {
    generations.insert(s["spec"]["pool"]["generation"].get<int64_t>());
  }
  EXPECT_EQ(generations.size(), 1u);  // every slice of the pool in the new generation
  json health;
  EXPECT_TRUE(Eventually([&] {
    json pod = GetJson(cp, {"pod", "on-seven", "-n", kNs});
    health = pod["status"]["containerStatuses"][0].value("allocatedResourcesStatus", json::array());
    return health.dump().find("Unhealthy") != std::string::npos;
  })) << health.dump(2);
  EXPECT_THAT(health.dump(), HasSubstr("gpu-7"));
  DeletePod("on-seven");
  const int64_t sick = generation();
  rewrite(original);
  EXPECT_TRUE(Eventually([&] { return gpu7_taints().empty() && generation() > sick; }))
      << ReadFile(AgentLog());
}

}  // namespace
}  // namespace tessera::e2e
