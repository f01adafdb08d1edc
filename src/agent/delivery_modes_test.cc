// Classic delivery (the NRI plugin's container adjustment) and DRA delivery (the kubelet plugin's
// CDI spec) write one decision, edits/container_edits.h: the same grant must give a container the
// same devices, environment and mounts in both modes. Each grant below goes through both
// renderers, and what a container would see is compared: the environment after every edit is
// applied, the device nodes by path with their numbers, the mounts by container path with their
// source and access, and the CDI devices the runtime injects besides.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/dra/claim_edits.h"
#include "agent/dra/names.h"
#include "agent/edits/container_edits.h"
#include "agent/edits/edits_testing.h"
#include "agent/nri/delivery.h"
#include "agent/pods/grant.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using testing::GpuUuid;
using testing::kPodUid;
using testing::TestGpu;
using testing::TestGrant;
using testing::TestNode;

// What a container sees.
struct ContainerView {
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> devices;  // path -> "c 195:5"
  std::map<std::string, std::string> mounts;   // container path -> "<host path> ro|rw"
  std::set<std::string> cdi_devices;           // injected by the runtime from other CDI specs
  bool operator==(const ContainerView&) const = default;
};

void PrintTo(const ContainerView& v, std::ostream* os) {
  for (const auto& [k, x] : v.env) *os << "\n  env " << k << "=" << x;
  for (const auto& [k, x] : v.devices) *os << "\n  device " << k << " " << x;
  for (const auto& [k, x] : v.mounts) *os << "\n  mount " << k << " <- " << x;
  for (const std::string& c : v.cdi_devices) *os << "\n  cdi " << c;
}

std::string Access(const std::vector<std::string>& options) {
  for (const std::string& o : options) {
    if (o == "ro" || o == "rw") return o;
  }
  return "?";
}

// Classic: the NRI adjustment, as the runtime applies it to a container.
ContainerView SeenThroughNri(const ContainerEdits& edits) {
  const nri::ContainerAdjustment a = AdjustmentFor(edits);
  ContainerView v;
  for (const auto& [k, x] : a.env) v.env[k] = x;
  for (const nri::LinuxDevice& d : a.devices) {
    v.devices[d.path] = StrCat(d.type, " ", d.major, ":", d.minor);
  }
  for (const nri::Mount& m : a.mounts) {
    v.mounts[m.destination] = StrCat(m.source, " ", Access(m.options));
  }
  v.cdi_devices.insert(a.cdi_devices.begin(), a.cdi_devices.end());
  return v;
}

// DRA: a claim of the grant's GPUs (one device each), its CDI ids and spec, as the runtime
// applies them to a container that uses the claim: the spec's edits, then each device's.
ContainerView SeenThroughCdi(const ContainerEdits& edits, size_t gpus) {
  dra::PreparedClaim claim;
  claim.uid = kPodUid;
  for (size_t i = 0; i < gpus; ++i) claim.devices.push_back({.device = StrCat("gpu-", i)});
  dra::AssignCdiIds(edits, &claim);
  const dra::CdiSpec spec = dra::CdiSpecFor(edits, dra::CdiDeviceNames(claim));
  ContainerView v;
  auto apply = [&v](const dra::CdiEdits& e) {
    for (const std::string& kv : e.env) {
      const size_t eq = kv.find('=');
      v.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const dra::CdiDeviceNode& d : e.device_nodes) {
      v.devices[d.path] = StrCat(std::string(1, d.type), " ", d.major, ":", d.minor);
    }
    for (const dra::CdiMount& m : e.mounts) {
      v.mounts[m.container_path] = StrCat(m.host_path, " ", Access(m.options));
    }
  };
  apply(spec.edits);
  std::map<std::string, const dra::CdiDevice*> by_name;
  for (const dra::CdiDevice& d : spec.devices) by_name[spec.QualifiedName(d.name)] = &d;
  for (const dra::PreparedDevice& d : claim.devices) {
    for (const std::string& id : d.cdi_ids) {
      auto ours = by_name.find(id);
      if (ours == by_name.end()) {
        v.cdi_devices.insert(id);  // another vendor's (NVIDIA's) spec
      } else {
        apply(ours->second->edits);
      }
    }
  }
  return v;
}

ContainerGrant::Gpu Whole(int index, int minor) { return TestGpu(index, minor, 81559, 1000, true); }
ContainerGrant::Gpu Share(int index, int minor, int64_t memory_mib, int32_t compute_milli) {
  return TestGpu(index, minor, memory_mib, compute_milli, false);
}
ContainerGrant::Gpu Mig(int index, int minor, int start) {
  ContainerGrant::Gpu g = Whole(index, minor);
  g.mig_profile = "1g.10gb";
  g.mig_start = start;
  g.mig_uuid = StrCat("MIG-0a1b2c3d-0000-4000-8000-00000000000", index, start);
  return g;
}

// The node as the edits' tests have it, seen under --host-root /host, with nvidia-uvm loaded (a
// control node both renderers must pass on).
EditsOptions Options() {
  EditsOptions o = TestNode();
  o.host_root = "/host";
  o.lookup = [node = o.lookup](const std::string& path) -> absl::StatusOr<DeviceNumber> {
    if (path == "/host/dev/nvidia-uvm") return DeviceNumber{'c', 511, 0};
    return node(path);
  };
  return o;
}

struct Case {
  std::string name;
  ContainerGrant grant;
  EditsOptions options = Options();
  std::optional<mps::ContainerEdits> mps;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"two whole GPUs", TestGrant({Whole(0, 0), Whole(3, 3)}, Sharing::kNone)});
  cases.push_back({"a shim share", TestGrant({Share(1, 5, 4096, 300)}, Sharing::kShim)});
  cases.push_back(
      {"a shim share of memory only", TestGrant({Share(2, 2, 10240, 0)}, Sharing::kShim)});
  cases.push_back(
      {"two shares of one GPU and a whole one",
       TestGrant({Share(1, 1, 4096, 250), Share(1, 1, 2048, 0), Whole(2, 2)}, Sharing::kShim)});
  cases.push_back(
      {"an unenforced share", TestGrant({Share(4, 4, 4096, 500)}, Sharing::kUnenforced)});
  cases.push_back({"MIG instances, two on one GPU",
                   TestGrant({Mig(1, 5, 0), Mig(1, 5, 1), Mig(6, 6, 4)}, Sharing::kNone)});
  Case cdi{"a shim share where NVIDIA's CDI spec brings the driver",
           TestGrant({Share(1, 5, 4096, 300)}, Sharing::kShim)};
  cdi.options.cdi_kind = "nvidia.com/gpu";
  cdi.options.driver_version = "580.95.05";
  cases.push_back(cdi);
  Case cdi_whole{"whole GPUs where NVIDIA's CDI spec brings them",
                 TestGrant({Whole(0, 0), Mig(1, 5, 2)}, Sharing::kNone)};
  cdi_whole.options.cdi_kind = "nvidia.com/gpu";
  cases.push_back(cdi_whole);
  Case mps{"an MPS share", TestGrant({Share(1, 5, 4096, 300)}, Sharing::kMps)};
  mps.mps = mps::ContainerEdits{
      {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"}, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"}},
      {{"/run/tessera/mps/" + GpuUuid(1) + "/pipe", "/tmp/nvidia-mps", false}}};
  cases.push_back(mps);
  return cases;
}

TEST(DeliveryModes, TheSameGrantGivesAContainerTheSameInBothModes) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<ContainerEdits> edits =
        ContainerEditsFor(c.grant, c.options, c.mps ? &*c.mps : nullptr);
    ASSERT_TRUE(edits.ok()) << edits.status();
    const ContainerView nri = SeenThroughNri(*edits);
    const ContainerView cdi = SeenThroughCdi(*edits, c.grant.gpus.size());
    EXPECT_EQ(nri, cdi);
    // Neither view is empty: each grant gives the container its GPUs.
    EXPECT_FALSE(nri.env.at(kEnvVisibleDevices).empty());
    EXPECT_TRUE(!nri.devices.empty() || !nri.cdi_devices.empty());
  }
}

TEST(DeliveryModes, AShareSeenThroughEitherRenderer) {
  absl::StatusOr<ContainerEdits> edits =
      ContainerEditsFor(TestGrant({Share(1, 5, 4096, 300)}, Sharing::kShim), Options());
  ASSERT_TRUE(edits.ok()) << edits.status();
  ContainerView want;
  want.env = {{"NVIDIA_VISIBLE_DEVICES", GpuUuid(1)},
              {"TESSERA_GPU_SHARING", "shim"},
              {"TESSERA_GPU_MEMORY_LIMIT_MIB", "4096"},
              {"TESSERA_GPU_COMPUTE_PERCENT", "30"},
              {"TESSERA_GPU_COMPUTE_MODE", "hard-cap"}};
  want.devices = {
      {"/dev/nvidia5", "c 195:5"}, {"/dev/nvidiactl", "c 195:255"}, {"/dev/nvidia-uvm", "c 511:0"}};
  const std::string pod = StrCat("/run/tessera/pods/", kPodUid);
  want.mounts = {
      {"/run/tessera/assignment.json", pod + "/assignment.json ro"},
      // Each share's segment files on their own, never their folders.
      {"/run/tessera/limits/" + GpuUuid(1) + ".limits",
       pod + "/limits/" + GpuUuid(1) + ".limits ro"},
      {"/run/tessera/ledger/" + GpuUuid(1) + ".ledger",
       pod + "/ledger/" + GpuUuid(1) + ".ledger rw"},
      {"/usr/local/lib/tessera/libtessera-real-cuda.so.1", "/usr/lib64/libcuda.so.580.95.05 ro"},
      {"/usr/local/lib/tessera/libtessera-real-nvml.so.1",
       "/usr/lib64/libnvidia-ml.so.580.95.05 ro"},
      {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/run/tessera/lib/libtessera-cuda.so ro"},
      {"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/run/tessera/lib/libtessera-nvml.so ro"},
      {"/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
       "/usr/lib64/libnvidia-ptxjitcompiler.so.580.95.05 ro"}};
  EXPECT_EQ(SeenThroughNri(*edits), want);
  EXPECT_EQ(SeenThroughCdi(*edits, 1), want);
}

// The two modes describe the same GPUs as the same grant: a pod's assignment (classic) and a
// prepared claim (DRA) of a 4096 MiB, 25% share of GPU 1 and a whole GPU 2.
TEST(DeliveryModes, APodAndAClaimOfTheSameGpusAreTheSameGrant) {
  NodeGpus node;
  for (int i = 0; i < 4; ++i) {
    DiscoveredGpu g;
    g.spec.index = i;
    g.spec.uuid = GpuUuid(i);
    g.spec.model = "H100-80GB";
    g.spec.memory_mib = 81559;
    g.minor = i;
    node.gpus.push_back(g);
  }
  PodGrant pod;
  pod.pod = PodRef{"team", "p", kPodUid, {}};
  pod.sharing = Sharing::kShim;
  records::AssignedGpu share{core::GpuGrant{1, 4096, 250, false}, GpuUuid(1)};
  records::AssignedGpu whole{core::GpuGrant{2, 81559, 1000, true}, GpuUuid(2)};
  pod.gpus = {GrantedGpu{node.gpus[1], share, ""}, GrantedGpu{node.gpus[2], whole, ""}};
  const ContainerGrant classic = ContainerGrantOf(pod, "/run/tessera/pods");

  dra::PreparedClaim claim;
  claim.uid = kPodUid;
  claim.share_dir = "/run/tessera/claims/" + std::string(kPodUid);
  claim.devices = {{.device = "gpu-1",
                    .gpu_uuid = GpuUuid(1),
                    .gpu_index = 1,
                    .exclusive = false,
                    .memory_mib = 4096,
                    .compute_percent = 25},
                   {.device = "gpu-2",
                    .gpu_uuid = GpuUuid(2),
                    .gpu_index = 2,
                    .exclusive = true,
                    .memory_mib = 81559,
                    .compute_percent = 100}};
  absl::StatusOr<ContainerGrant> dra = dra::ClaimGrant(claim, node, /*enforce_shares=*/true);
  ASSERT_TRUE(dra.ok()) << dra.status();

  EXPECT_EQ(classic.gpus, dra->gpus);
  EXPECT_EQ(classic.sharing, dra->sharing);
  EXPECT_EQ(classic.work_conserving, dra->work_conserving);
  // Each mode's own files: the pod's record and folder, the claim's folder (no record).
  EXPECT_EQ(classic.record_file, StrCat("/run/tessera/pods/", kPodUid, "/assignment.json"));
  EXPECT_EQ(classic.segments_dir, StrCat("/run/tessera/pods/", kPodUid));
  EXPECT_EQ(dra->record_file, "");
  EXPECT_EQ(dra->segments_dir, claim.share_dir);
}

}  // namespace
}  // namespace tessera::agent
