// tessera's DRA allocator on a real node of the test harness (kubelet v1.37.2, containerd 2 with
// CDI, 8 fake H100s on node gpu-a): `tessera agent --dra` publishes the ResourceSlices and
// prepares the claims, `tessera scheduler` with dra.enabled allocates them, and the containers
// report what CDI gave them in their termination message.
//
// And a pod written for NVIDIA's device plugin, unchanged, served by kube-scheduler through
// examples/k8s/dra/nvidia-gpu-deviceclass.yaml (docs/migration.md).
//
// DRAExtendedResource: a classic pod asking `tessera.dev/gpu` (no device plugin: the agent in DRA
// mode does not advertise the extended resource) is served by the DeviceClass gpu.tessera.dev,
// whose extendedResourceName is tessera.dev/gpu (deploy/dra-deviceclasses.yaml): the scheduler
// makes the pod's extended-resource claim, allocates it, records it in
// pod.status.extendedResourceClaimStatus, and the kubelet prepares it for the container.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "controlplane/pod_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scoped_process.h"

namespace tessera::e2e {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr char kNode[] = "gpu-a";
constexpr char kNs[] = "dra-node";
constexpr char kScheduler[] = "tessera-dra-node";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename Pred>
bool Eventually(Pred pred, std::chrono::seconds timeout = std::chrono::seconds(90)) {
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

size_t DeviceCount() {
  json slices = GetJson(ControlPlane::Shared(),
                        {"resourceslices", "--field-selector",
                         StrCat("spec.nodeName=", kNode, ",spec.driver=gpu.tessera.dev")});
  size_t n = 0;
  for (const json& s : slices["items"]) n += s["spec"].value("devices", json::array()).size();
  return n;
}

// The UUIDs of the fake GPUs, by index.
std::vector<std::string> FakeUuids() {
  std::vector<std::string> out;
  json desc = json::parse(ReadFile(GpuNode().fake_gpus));
  for (const json& g : desc["gpus"]) out.push_back(g["uuid"]);
  return out;
}

constexpr char kReport[] =
    "env | grep -E '^(NVIDIA_VISIBLE_DEVICES|TESSERA_)' | sort; ls /dev | grep nvidia | sort";

class DraNode : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ControlPlane& cp = ControlPlane::Shared();
    const Node& node = GpuNode();
    ASSERT_TRUE(cp.KubectlOk({"create", "namespace", kNs}).ok());
    auto applied =
        cp.KubectlOk({"apply", "-f", StrCat(TESSERA_SOURCE_DIR, "/deploy/dra-deviceclasses.yaml")});
    ASSERT_TRUE(applied.ok()) << applied.status();
    const std::string state = node.dir + "/tessera";
    auto pid =
        cp.NodeSpawn(node.name, "agent",
                     {TESSERA_BINARY, "agent", "--dra", "--gpus-file", node.fake_gpus, "--dev-dir",
                      node.dev_dir, "--no-nri", "--pods-dir", state + "/pods", "--claims-dir",
                      state + "/claims", "--shim-dir", TESSERA_SHIM_DIR, "--driver-lib-dir",
                      TESSERA_FAKE_DRIVER_DIR, "--dra-resync-interval", "2s"});
    ASSERT_TRUE(pid.ok()) << pid.status();
    dir_ = StrCat(::testing::TempDir(), "/tessera-dra-node-e2e-", getpid());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/config.yaml") << StrCat(
        "apiVersion: tessera.dev/v1alpha1\nkind: SchedulerConfiguration\nschedulerName: ",
        kScheduler, "\nleaderElection: {leaderElect: false}\n",
        "metrics: {bindAddress: 127.0.0.1, port: 0}\nretry: {minInterval: 200ms, period: 2s}\n",
        "dra: {enabled: true}\n");
    auto p = ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", cp.kubeconfig(),
                                   "--config", dir_ + "/config.yaml"},
                                  dir_ + "/scheduler.log");
    ASSERT_TRUE(p.ok()) << p.status();
    scheduler_ = std::move(*p);
  }
  static void TearDownTestSuite() {
    scheduler_.reset();
    if (::testing::UnitTest::GetInstance()->failed_test_count() == 0) {
      std::filesystem::remove_all(dir_);  // kept for reading when a test failed
    }
  }

  static std::string SchedulerLog() { return ReadFile(dir_ + "/scheduler.log"); }
  static std::string AgentLog() { return ReadFile(GpuNode().dir + "/agent.log"); }

  static inline std::string dir_;
  static inline std::unique_ptr<ScopedProcess> scheduler_;
};

// A classic pod asking two whole GPUs, served through gpu.tessera.dev's extendedResourceName.
TEST_F(DraNode, ClassicPodIsServedThroughTheDeviceClassesExtendedResourceName) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount() > 0; })) << AgentLog();
  json node = GetJson(cp, {"node", kNode});
  ASSERT_FALSE(node["status"]["allocatable"].contains("tessera.dev/gpu"));  // no device plugin
  json pod = TestPod("classic", kNs, "", StrCat("(", kReport, ") > /dev/termination-log"));
  pod["spec"]["schedulerName"] = kScheduler;
  pod["spec"]["containers"][0]["resources"] = {
      {"limits", {{"tessera.dev/gpu", "2"}, {"cpu", "100m"}, {"memory", "64Mi"}}}};
  Create(pod);
  pod = WaitForPod(cp, kNs, "classic", PodFinished, std::chrono::seconds(120));
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod.dump(2) << "\n--- scheduler\n"
                                                           << SchedulerLog() << "\n--- agent\n"
                                                           << AgentLog().substr(0, 20000);
  EXPECT_EQ(pod["spec"]["nodeName"], kNode);

  // The pod names its claim and which request serves its container.
  const json& ext = pod["status"]["extendedResourceClaimStatus"];
  const std::string claim_name = ext.value("resourceClaimName", "");
  ASSERT_FALSE(claim_name.empty()) << pod["status"].dump(2);
  EXPECT_EQ(claim_name.rfind("classic-extended-resources-", 0), 0u) << claim_name;
  // requests {cpu, memory, tessera.dev/gpu} sorted: the GPU is request 2 of container 0.
  EXPECT_EQ(ext["requestMappings"], json::parse(R"([{"containerName": "main",
      "resourceName": "tessera.dev/gpu", "requestName": "container-0-request-2"}])"));

  // The container got both GPUs of its claim through CDI.
  const std::string message = TerminationMessage(pod);
  std::vector<std::string> uuids = FakeUuids();
  int seen = 0;
  for (size_t i = 0; i < uuids.size(); ++i) {
    if (message.find(uuids[i]) != std::string::npos) {
      ++seen;
      EXPECT_THAT(message, HasSubstr(StrCat("nvidia", i, "\n"))) << message;
    }
  }
  EXPECT_EQ(seen, 2) << message;
  EXPECT_THAT(message, HasSubstr("NVIDIA_VISIBLE_DEVICES=GPU-"));

  // The claim: annotated, owned by the pod, allocated by tessera (two whole GPUs, bound to the
  // node), the pod reserved.
  CommandResult got = cp.Kubectl({"get", "resourceclaim", claim_name, "-n", kNs, "-o", "json"});
  if (got.ok()) {  // the pod is done: the claim may be on its way out already
    json claim = json::parse(got.out);
    EXPECT_EQ(claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"],
              "true");
    EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], pod["metadata"]["uid"]);
    EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["name"], "container-0-request-2");
  }
  EXPECT_THAT(AgentLog(), HasSubstr(StrCat("prepared claim ", kNs, "/", claim_name)));

  // Deleting the pod frees the claim (garbage collection through the owner reference).
  ASSERT_TRUE(cp.KubectlOk({"delete", "pod", "classic", "-n", kNs, "--grace-period=1"}).ok());
  EXPECT_TRUE(Eventually([&] {
    return !cp.Kubectl({"get", "resourceclaim", claim_name, "-n", kNs}).ok();
  })) << "claim "
      << claim_name << " stays after its pod is gone";
}

// After that, the GPUs are free again: a pod asking all eight is served.
TEST_F(DraNode, FreedGpusServeTheNextClassicPod) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount() > 0; }));
  json pod = TestPod("all-eight", kNs, "", StrCat("(", kReport, ") > /dev/termination-log"));
  pod["spec"]["schedulerName"] = kScheduler;
  pod["spec"]["containers"][0]["resources"] = {{"limits", {{"tessera.dev/gpu", "8"}}}};
  Create(pod);
  pod = WaitForPod(cp, kNs, "all-eight", PodFinished, std::chrono::seconds(120));
  ASSERT_EQ(pod["status"].value("phase", ""), "Succeeded") << pod.dump(2) << "\n--- scheduler\n"
                                                           << SchedulerLog();
  const std::string message = TerminationMessage(pod);
  for (const std::string& uuid : FakeUuids()) EXPECT_THAT(message, HasSubstr(uuid));
}

// What a container printed, as the kubelet of its node wrote it (no API-server-to-kubelet traffic
// in the harness).
std::string ContainerLog(const json& pod, const std::string& container) {
  std::string out;
  std::error_code ec;
  const std::string dir =
      StrCat(GpuNode().dir, "/pod-logs/", pod["metadata"]["namespace"].get<std::string>(), "_",
             pod["metadata"]["name"].get<std::string>(), "_",
             pod["metadata"]["uid"].get<std::string>(), "/", container);
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    out += ReadFile(e.path().string());
  return out;
}

// docs/migration.md's zero-edit path: a pod written for NVIDIA's device plugin (nvidia.com/gpu: 1,
// no schedulerName, no claim) runs unchanged on a node whose GPUs are tessera's DRA driver's:
// examples/k8s/dra/nvidia-gpu-deviceclass.yaml, applied as written, makes kube-scheduler serve it
// a whole GPU of gpu.tessera.dev (DRAExtendedResource), and tessera's kubelet plugin delivers it.
// examples/k8s/dra/device-plugin-pod.yaml is applied as written but for its image (the harness
// has no registry).
TEST_F(DraNode, DevicePluginManifestRunsUnchanged) {
  ControlPlane& cp = ControlPlane::Shared();
  ASSERT_TRUE(Eventually([] { return DeviceCount() > 0; })) << AgentLog();
  const std::string examples = StrCat(TESSERA_SOURCE_DIR, "/examples/k8s/dra/");
  ASSERT_TRUE(cp.KubectlOk({"apply", "-f", examples + "nvidia-gpu-deviceclass.yaml"}).ok());
  std::string manifest = ReadFile(examples + "device-plugin-pod.yaml");
  ASSERT_EQ(manifest.find("schedulerName"), std::string::npos) << "unchanged: no schedulerName";
  const std::string image = "image: nvidia/cuda:12.6.3-base-ubuntu24.04";
  const size_t at = manifest.find(image);
  ASSERT_NE(at, std::string::npos);
  manifest.replace(at, image.size(),
                   StrCat("image: ", ControlPlane::kTestImage, "\n      imagePullPolicy: Never"));
  auto created = cp.KubectlOk({"apply", "-n", kNs, "-f", "-"}, manifest);
  ASSERT_TRUE(created.ok()) << created.status();
  json pod;
  ASSERT_TRUE(Eventually(
      [&] {
        pod = GetJson(cp, {"pod", "cuda-vectoradd", "-n", kNs});
        return pod["status"].value("phase", "") == "Running";
      },
      std::chrono::seconds(120)))
      << pod.dump(2) << "\n--- agent\n"
      << AgentLog().substr(0, 20000);
  EXPECT_EQ(pod["spec"].value("schedulerName", ""), "default-scheduler");
  EXPECT_EQ(pod["spec"]["nodeName"], kNode);
  const std::string claim_name =
      pod["status"]["extendedResourceClaimStatus"].value("resourceClaimName", "");
  ASSERT_FALSE(claim_name.empty()) << pod["status"].dump(2);
  json claim = GetJson(cp, {"resourceclaim", claim_name, "-n", kNs});
  const json& results = claim["status"]["allocation"]["devices"]["results"];
  ASSERT_EQ(results.size(), 1u) << claim.dump(2);
  EXPECT_EQ(results[0]["driver"], "gpu.tessera.dev");
  EXPECT_EQ(claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "nvidia-gpu.tessera.dev");
  EXPECT_THAT(AgentLog(), HasSubstr(StrCat("prepared claim ", kNs, "/", claim_name)));
  // The container got one GPU: its UUID and its device node.
  std::string log;
  EXPECT_TRUE(Eventually([&] {
    log = ContainerLog(pod, "cuda");
    return log.find("nvidia") != std::string::npos;
  })) << log;
  const std::vector<std::string> uuids = FakeUuids();
  int seen = 0;
  for (const std::string& u : uuids) seen += log.find(StrCat("GPU: ", u)) != std::string::npos;
  EXPECT_EQ(seen, 1) << log;
  ASSERT_TRUE(
      cp.KubectlOk({"delete", "pod", "cuda-vectoradd", "-n", kNs, "--grace-period=1"}).ok());
  EXPECT_TRUE(cp.KubectlOk({"delete", "-f", examples + "nvidia-gpu-deviceclass.yaml"}).ok());
}

}  // namespace
}  // namespace tessera::e2e
