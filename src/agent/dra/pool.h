// The node's resource pool in DRA mode: the devices the agent publishes in ResourceSlices (driver
// gpu.tessera.dev, one pool per node named after the node), computed from what discovery found.
// Pure: no I/O (the PCIe roots are read from sysfs by the caller, pcie.h).
//
// Devices (src/agent/dra/README.md has the full contract):
//   gpu-<index>   one per GPU that is not in MIG mode: attributes (type "gpu", uuid, index, model,
//                 productName, numaNode, pciBusID, resource.kubernetes.io/pcieRoot and pciBusID,
//                 nvlinkDomain, migCapable, migEnabled, driverVersion) and capacities memory
//                 (bytes) and compute (percent). allowMultipleAllocations: claims take a share by
//                 consumable capacity (memory in 1Mi steps, compute in steps of 1 from 0 to 100,
//                 default 0 = best-effort time sharing); a request without capacity requests
//                 consumes the default, which for memory is all of it: the whole GPU.
//   gpu-<index>-mig-<profile>-<start>   one per MIG placement of a MIG-capable GPU in MIG mode, or
//                 of any MIG-capable GPU when the agent may switch MIG mode (profile with
//                 '.' and '+' as '-': 1g.10gb+me at 0 is gpu-0-mig-1g-10gb-me-0), exclusive,
//                 drawing on the GPU's counter set (one counter per memory slice and one for the
//                 media engines); the whole GPU consumes every counter, so a GPU serves either
//                 shares or MIG instances, never both at once.
// An unhealthy GPU's devices carry the taint gpu.tessera.dev/unhealthy (NoSchedule, or NoExecute
// for a failed GPU when the fault policy evicts: PoolOptions::no_execute_on_failure).
//
// Slices stay within the API's limits: counter sets in slices of their own (at most 8 sets per
// slice), devices at most 128 per slice, 64 when the pool uses counters or taints.
//
// Worked example: an 8 x H100 node (MIG-capable, MIG mode off) whose agent may switch MIG mode
// publishes 8 whole GPUs and 8 x 25 MIG placements = 208 devices in 4 device slices, plus one
// slice with 8 counter sets: 5 slices, resourceSliceCount 5; without the switch, 8 devices in one
// slice.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agent/discovery/discovery.h"
#include "core/model/mig.h"
#include "nlohmann/json.hpp"

namespace tessera::agent::dra {

// One published device and what it stands for on the node.
struct PoolDevice {
  std::string name;    // "gpu-0", "gpu-0-mig-1g-10gb-0"
  int gpu_index = -1;  // the GPU (its index in NodeGpus::gpus)
  std::string gpu_uuid;
  bool mig = false;
  core::MigPlacement placement;  // MIG: profile (index in the GPU's MigModel) and start slice
  std::string mig_profile;       // MIG: "1g.10gb"
  int64_t memory_mib = 0;        // the device's memory capacity
  int32_t compute_percent = 0;   // the device's compute capacity
  bool shareable = false;        // allowMultipleAllocations
  bool healthy = true;
  std::string health_reason;  // when unhealthy
};

struct PoolOptions {
  std::string node_name;
  // Publish MIG placements of MIG-capable GPUs as partitionable devices: of GPUs in MIG mode,
  // and of those not in it only when the agent may turn MIG mode on for a claim
  // (mig_mode_switch): an allocation the driver cannot prepare is never offered.
  bool mig_devices = true;
  bool mig_mode_switch = false;
  // PCI bus id (as discovery reports it) -> PCIe root complex ("pci0000:16"), for the standard
  // attribute resource.kubernetes.io/pcieRoot; GPUs without an entry do not get it.
  std::map<std::string, std::string> pcie_roots;
  // The taint of a failed GPU's devices (effect kFail): NoExecute when the fault policy evicts
  // (kube-controller-manager's device taint eviction then ends the claims' pods that do not
  // tolerate it), else NoSchedule. A draining GPU's devices are always NoSchedule.
  bool no_execute_on_failure = false;
};

struct Pool {
  std::string name;  // the pool: the node's name
  std::vector<PoolDevice> devices;
  // ResourceSliceSpec objects, counters first; pool.resourceSliceCount is set, pool.generation
  // is 0 (the publisher sets it).
  std::vector<nlohmann::json> slices;

  const PoolDevice* Find(std::string_view device) const;
};

Pool BuildPool(const NodeGpus& gpus, const PoolOptions& options);

// Helpers, exposed for tests and the kubelet plugin.
// "gpu-3", and the MIG device name for a placement.
std::string GpuDeviceName(int index);
std::string MigDeviceName(int index, std::string_view profile, int start);
// A MiB amount as the API server writes it back (canonical binary suffix): 81920 -> "80Gi",
// 81559 -> "81559Mi", 1048576 -> "1Ti".
std::string MibQuantity(int64_t mib);
// The driver version as a semantic version: "580.95.05" -> "580.95.5", "535.104" -> "535.104.0";
// empty when it is not dotted numbers.
std::string DriverSemver(std::string_view version);
// Per GPU, its NVLink domain: the node's fabric clique (NodeGpus::NvLinkDomain) when there is
// one; else the node's name for GPUs joined by NVLink into one island, "<node>.<lowest index>"
// for each island when a node has several; empty for a GPU with no NVLink peer. At most 64
// characters (a longer node name is shortened with a hash).
std::vector<std::string> NvlinkDomains(const NodeGpus& gpus, std::string_view node_name);
// PCI bus id in the standard attribute's form ("0000:1b:00.0", lower case, 4-digit domain), or
// empty.
std::string StandardPciBusId(std::string_view bus_id);

}  // namespace tessera::agent::dra
