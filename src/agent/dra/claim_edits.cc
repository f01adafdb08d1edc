#include "agent/dra/claim_edits.h"

#include <filesystem>
#include <map>
#include <set>

#include "agent/dra/names.h"
#include "agent/pods/container_edits.h"
#include "common/strings.h"
#include "shim/contract.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
namespace contract = shim::contract;

// The driver's nodes every CUDA process opens besides its GPUs', when the host has them.
constexpr const char* kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};

// Our CDI device name for each device of the claim, in order.
std::vector<std::string> CdiNames(const PreparedClaim& claim) {
  std::map<std::string, int> seen;
  std::vector<std::string> names;
  for (const PreparedDevice& d : claim.devices) {
    const int n = seen[d.device]++;
    names.push_back(n == 0 ? StrCat(claim.uid, "-", d.device)
                           : StrCat(claim.uid, "-", d.device, "-", n));
  }
  return names;
}

CdiSpec EmptySpec() {
  CdiSpec spec;
  spec.vendor = std::string(kCdiVendor);
  spec.cls = std::string(kCdiClass);
  return spec;
}

const DiscoveredGpu* FindGpu(const NodeGpus& gpus, const std::string& uuid) {
  for (const DiscoveredGpu& g : gpus.gpus) {
    if (g.spec.uuid == uuid) return &g;
  }
  return nullptr;
}

absl::StatusOr<CdiDeviceNode> Node(const EditOptions& o, const std::string& name) {
  const std::string seen = StrCat(o.dev_dir, "/", name);
  absl::StatusOr<DeviceNumber> number = o.lookup(seen);
  if (!number.ok()) return number.status();
  std::string host = seen;  // as the host names it
  if (!o.host_root.empty() && host.rfind(o.host_root + "/", 0) == 0) {
    host = host.substr(o.host_root.size());
  }
  return CdiDeviceNode{StrCat("/dev/", name), host,          number->type,
                       number->major,         number->minor, "rw"};
}

// A host file that must exist, for an error that says which and why.
absl::Status NeedFile(const EditOptions& o, const std::string& path, const std::string& what) {
  std::error_code ec;
  if (fs::exists(o.host_root + path, ec)) return absl::OkStatus();
  return absl::FailedPreconditionError(StrCat(what, " ", path, " is missing on this node"));
}

}  // namespace

void AssignCdiIds(const EditOptions& options, PreparedClaim* claim) {
  const CdiSpec spec = EmptySpec();
  const std::vector<std::string> names = CdiNames(*claim);
  for (size_t i = 0; i < claim->devices.size(); ++i) {
    PreparedDevice& d = claim->devices[i];
    d.cdi_ids.clear();
    if (!options.nvidia_cdi_kind.empty()) {
      d.cdi_ids.push_back(StrCat(options.nvidia_cdi_kind, "=", d.mig ? d.mig_uuid : d.gpu_uuid));
    }
    d.cdi_ids.push_back(spec.QualifiedName(names[i]));
  }
}

absl::StatusOr<CdiSpec> ClaimCdiSpec(const PreparedClaim& claim, const NodeGpus& gpus,
                                     const EditOptions& options) {
  CdiSpec spec = EmptySpec();
  const std::vector<std::string> names = CdiNames(claim);
  std::vector<std::string> uuids;
  std::map<std::string, std::pair<int64_t, int32_t>> shares;  // GPU UUID -> memory, compute
  const bool own_nodes = options.nvidia_cdi_kind.empty();
  for (size_t i = 0; i < claim.devices.size(); ++i) {
    const PreparedDevice& d = claim.devices[i];
    const DiscoveredGpu* g = FindGpu(gpus, d.gpu_uuid);
    if (g == nullptr) {
      return absl::NotFoundError(StrCat("device ", d.device, " is GPU ", d.gpu_uuid,
                                        ", which this node does not have (any more)"));
    }
    if (d.mig && d.mig_uuid.empty()) {
      return absl::FailedPreconditionError(
          StrCat("device ", d.device, " is MIG instance ", d.mig_profile, "@", d.mig_start,
                 " of GPU ", g->spec.index, " (", g->spec.uuid,
                 "), whose identity (MIG-...) this node's GPU backend does not report"));
    }
    // What NVIDIA_VISIBLE_DEVICES names: the GPU, or the MIG instance on it (whose device node
    // is its GPU's, as the NVIDIA container toolkit gives it).
    const std::string& visible = d.mig ? d.mig_uuid : d.gpu_uuid;
    CdiDevice device;
    device.name = names[i];
    if (own_nodes) {
      absl::StatusOr<CdiDeviceNode> node = Node(options, StrCat("nvidia", g->minor));
      if (!node.ok()) {
        return absl::FailedPreconditionError(StrCat("the device node of GPU ", g->spec.index, " (",
                                                    g->spec.uuid,
                                                    ") is missing: ", node.status().message()));
      }
      device.edits.device_nodes.push_back(*node);
    }
    spec.devices.push_back(std::move(device));
    if (std::find(uuids.begin(), uuids.end(), visible) == uuids.end()) uuids.push_back(visible);
    if (!d.exclusive && !d.mig) {
      auto& [memory, compute] = shares[d.gpu_uuid];
      memory += d.memory_mib;
      compute += d.compute_percent;
    }
  }
  if (claim.devices.empty()) return spec;

  CdiEdits& e = spec.edits;
  if (own_nodes) {
    for (const char* control : kControlNodes) {
      absl::StatusOr<CdiDeviceNode> node = Node(options, control);
      if (node.ok()) e.device_nodes.push_back(*node);  // nvidia-uvm is loaded on demand
    }
  }
  e.env.push_back(StrCat(kEnvVisibleDevices, "=", StrJoin(uuids, ",")));
  if (shares.empty()) return spec;

  e.env.push_back(StrCat(contract::kEnvSharing, "=shim"));
  if (shares.size() == 1) {
    const auto& [memory, compute] = shares.begin()->second;
    if (memory > 0) e.env.push_back(StrCat(contract::kEnvMemoryLimitMib, "=", memory));
    if (compute > 0) e.env.push_back(StrCat(contract::kEnvComputePercent, "=", compute));
  }
  if (!options.shares.shim) return spec;
  if (claim.share_dir.empty()) {
    return absl::InternalError(StrCat("claim ", claim.Describe(),
                                      " holds a share but no folder "
                                      "for the shim's segments"));
  }
  const ShareEnforcement& s = options.shares;
  const std::string shim_cuda = StrCat(s.shim_dir, "/", contract::kShimCudaLibrary);
  const std::string shim_nvml = StrCat(s.shim_dir, "/", contract::kShimNvmlLibrary);
  const std::string real_cuda = StrCat(s.driver_lib_dir, "/libcuda.so.1");
  const std::string real_nvml = StrCat(s.driver_lib_dir, "/libnvidia-ml.so.1");
  for (const auto& [path, what] :
       {std::pair{shim_cuda, "the CUDA shim"}, std::pair{shim_nvml, "the NVML shim"},
        std::pair{real_cuda, "the driver's CUDA library"},
        std::pair{real_nvml, "the driver's NVML library"}}) {
    absl::Status have = NeedFile(options, path, what);
    if (!have.ok()) {
      return absl::FailedPreconditionError(
          StrCat(have.message(),
                 ": the share cannot be enforced (install the shim with the "
                 "agent's DaemonSet, check --shim-dir and --driver-lib-dir, or "
                 "run the agent with --share-enforcement=none)"));
    }
  }
  const std::vector<std::string> ro = {"ro", "nosuid", "nodev", "bind"};
  const std::vector<std::string> rw = {"rw", "nosuid", "nodev", "bind"};
  // Each share's files on their own, never their folders (pods/container_edits.h SegmentFiles).
  for (const auto& [uuid, share] : shares) {
    for (const SegmentFile& f : SegmentFiles(claim.share_dir, uuid)) {
      e.mounts.push_back({f.host_path, f.container_path, f.read_only ? ro : rw});
    }
  }
  e.mounts.push_back(
      {real_cuda, StrCat(contract::kLibraryDir, "/", contract::kRealCudaLibrary), ro});
  e.mounts.push_back(
      {real_nvml, StrCat(contract::kLibraryDir, "/", contract::kRealNvmlLibrary), ro});
  e.mounts.push_back({shim_cuda, StrCat(s.container_lib_dir, "/libcuda.so.1"), ro});
  e.mounts.push_back({shim_nvml, StrCat(s.container_lib_dir, "/libnvidia-ml.so.1"), ro});
  return spec;
}

}  // namespace tessera::agent::dra
