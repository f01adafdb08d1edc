#include "agent/dra/claim_edits.h"

#include <map>

#include "agent/dra/names.h"
#include "common/strings.h"

namespace tessera::agent::dra {
namespace {

CdiSpec EmptySpec() {
  CdiSpec spec;
  spec.vendor = std::string(kCdiVendor);
  spec.cls = std::string(kCdiClass);
  return spec;
}

CdiDeviceNode CdiNode(const DeviceNode& n) {
  return CdiDeviceNode{n.path, n.host_path, n.type, n.major, n.minor, "rw"};
}

}  // namespace

absl::StatusOr<ContainerGrant> ClaimGrant(const PreparedClaim& claim, const NodeGpus& gpus,
                                          bool enforce_shares) {
  ContainerGrant grant;
  grant.owner = "the claim";
  bool shares = false;
  for (const PreparedDevice& d : claim.devices) {
    const DiscoveredGpu* g = nullptr;
    for (const DiscoveredGpu& candidate : gpus.gpus) {
      if (candidate.spec.uuid == d.gpu_uuid) g = &candidate;
    }
    if (g == nullptr) {
      return absl::NotFoundError(StrCat("device ", d.device, " is GPU ", d.gpu_uuid,
                                        ", which this node does not have (any more)"));
    }
    ContainerGrant::Gpu gpu{.index = g->spec.index,
                            .uuid = g->spec.uuid,
                            .minor = g->minor,
                            .exclusive = d.exclusive || d.mig,
                            .memory_mib = d.memory_mib,
                            .compute_milli = d.compute_percent * 10};
    if (d.mig) {
      gpu.mig_profile = d.mig_profile;
      gpu.mig_start = d.mig_start;
      gpu.mig_uuid = d.mig_uuid;
    }
    shares = shares || gpu.share();
    grant.gpus.push_back(std::move(gpu));
  }
  if (shares) grant.sharing = enforce_shares ? Sharing::kShim : Sharing::kUnenforced;
  grant.segments_dir = claim.share_dir;
  return grant;
}

absl::StatusOr<ContainerEdits> ClaimContainerEdits(const PreparedClaim& claim, const NodeGpus& gpus,
                                                   const EditsOptions& options,
                                                   bool enforce_shares) {
  absl::StatusOr<ContainerGrant> grant = ClaimGrant(claim, gpus, enforce_shares);
  if (!grant.ok()) return grant.status();
  EditsOptions edits = options;
  edits.driver_version = gpus.driver_version;
  return ContainerEditsFor(*grant, edits);
}

std::vector<std::string> CdiDeviceNames(const PreparedClaim& claim) {
  std::map<std::string, int> seen;
  std::vector<std::string> names;
  for (const PreparedDevice& d : claim.devices) {
    const int n = seen[d.device]++;
    names.push_back(n == 0 ? StrCat(claim.uid, "-", d.device)
                           : StrCat(claim.uid, "-", d.device, "-", n));
  }
  return names;
}

void AssignCdiIds(const ContainerEdits& edits, PreparedClaim* claim) {
  const CdiSpec spec = EmptySpec();
  const std::vector<std::string> names = CdiDeviceNames(*claim);
  for (size_t i = 0; i < claim->devices.size(); ++i) {
    PreparedDevice& d = claim->devices[i];
    d.cdi_ids.clear();
    if (i < edits.cdi_devices.size()) d.cdi_ids.push_back(edits.cdi_devices[i]);
    d.cdi_ids.push_back(spec.QualifiedName(names[i]));
  }
}

CdiSpec CdiSpecFor(const ContainerEdits& edits, const std::vector<std::string>& device_names) {
  CdiSpec spec = EmptySpec();
  std::vector<bool> gpu_node(edits.devices.size(), false);
  for (size_t i = 0; i < device_names.size(); ++i) {
    CdiDevice device;
    device.name = device_names[i];
    if (i < edits.gpu_nodes.size() && edits.gpu_nodes[i] >= 0) {
      const size_t node = static_cast<size_t>(edits.gpu_nodes[i]);
      device.edits.device_nodes.push_back(CdiNode(edits.devices[node]));
      gpu_node[node] = true;
    }
    spec.devices.push_back(std::move(device));
  }
  CdiEdits& e = spec.edits;
  for (size_t i = 0; i < edits.devices.size(); ++i) {
    if (!gpu_node[i]) e.device_nodes.push_back(CdiNode(edits.devices[i]));  // the control nodes
  }
  for (const auto& [k, v] : edits.env) e.env.push_back(StrCat(k, "=", v));
  for (const BindMount& m : edits.mounts) {
    e.mounts.push_back(
        {m.host_path, m.container_path, {m.read_only ? "ro" : "rw", "nosuid", "nodev", "bind"}});
  }
  return spec;
}

}  // namespace tessera::agent::dra
