// The DRA contract (resource.k8s.io/v1): what tessera's DRA driver publishes and what an allocator
// of its devices reads. The driver's side is the node agent (src/agent/dra: ResourceSlices, the
// kubelet plugin); the allocators are tessera's scheduler (src/k8s/dra) and kube-scheduler through
// the DeviceClasses in deploy/dra-deviceclasses.yaml. One home for the names, so that both sides
// spell them the same way without linking each other; src/agent/dra/README.md documents them, and
// they do not change.
//
// Devices of a node's pool (one pool per node, named after it):
//   gpu-<index>                         a GPU not in MIG mode (index as in the node's inventory),
//                                       shareable by consumable capacity (kCapMemory, kCapCompute)
//   gpu-<index>-mig-<profile>-<start>   a MIG placement on GPU <index>: the profile with '.' and
//                                       '+' as '-' (1g.10gb+me at memory slice 3 of GPU 1 is
//                                       gpu-1-mig-1g-10gb-me-3); its attributes kAttrMigProfile
//                                       and kAttrMigStart say the placement exactly
// and the counter set gpu-<index> that a GPU's devices draw on. Attributes and capacities without
// a domain are in the driver's (kDriverName): "gpu.tessera.dev/index" and "index" are one.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera::records::dra {

// The driver, and the domain of its unqualified attribute and capacity names.
inline constexpr std::string_view kDriverName = "gpu.tessera.dev";

// Device attributes (in the driver's domain unless qualified).
inline constexpr std::string_view kAttrType = "type";  // kTypeGpu | kTypeMig
inline constexpr std::string_view kAttrUuid = "uuid";
inline constexpr std::string_view kAttrIndex = "index";
inline constexpr std::string_view kAttrModel = "model";
inline constexpr std::string_view kAttrProductName = "productName";
inline constexpr std::string_view kAttrNumaNode = "numaNode";
inline constexpr std::string_view kAttrPciBusId = "pciBusID";
inline constexpr std::string_view kAttrNvlinkDomain = "nvlinkDomain";
inline constexpr std::string_view kAttrMigCapable = "migCapable";
inline constexpr std::string_view kAttrMigEnabled = "migEnabled";
inline constexpr std::string_view kAttrDriverVersion = "driverVersion";
// MIG devices only.
inline constexpr std::string_view kAttrMigProfile = "profile";
inline constexpr std::string_view kAttrMigStart = "migStart";
inline constexpr std::string_view kAttrParentUuid = "parentUUID";
inline constexpr std::string_view kAttrParentIndex = "parentIndex";
// Kubernetes' standard attributes (k8s.io/dynamic-resource-allocation/deviceattribute).
inline constexpr std::string_view kStdAttrPcieRoot = "resource.kubernetes.io/pcieRoot";
inline constexpr std::string_view kStdAttrPciBusId = "resource.kubernetes.io/pciBusID";

inline constexpr std::string_view kTypeGpu = "gpu";
inline constexpr std::string_view kTypeMig = "mig";

// Capacities: bytes of GPU memory, percent of the GPU's compute.
inline constexpr std::string_view kCapMemory = "memory";
inline constexpr std::string_view kCapCompute = "compute";

// The taint an unhealthy GPU's devices carry (agent/dra/pool.h: NoSchedule, or NoExecute for a
// failed GPU under the fault policy evict): allocators leave them alone unless a claim tolerates
// it.
inline constexpr std::string_view kTaintUnhealthy = "gpu.tessera.dev/unhealthy";

// The DeviceClasses (deploy/dra-deviceclasses.yaml).
inline constexpr std::string_view kClassWhole = "gpu.tessera.dev";
inline constexpr std::string_view kClassShare = "gpu-share.tessera.dev";
inline constexpr std::string_view kClassMig = "mig.tessera.dev";

// "gpu-7".
std::string GpuDeviceName(int index);
// "gpu-1-mig-1g-10gb-me-3" for profile "1g.10gb+me" at slice 3 of GPU 1.
std::string MigDeviceName(int index, std::string_view profile, int start);
// The counter set of GPU `index` ("gpu-7"): its memory slices and media engines.
std::string CounterSetName(int index);

// What a device name says: the GPU it stands on, and whether it is that whole GPU (else a MIG
// placement carved from it).
struct DeviceNameParts {
  int gpu_index = -1;
  bool whole = false;
};
// nullopt for a name that is not one of the driver's (an index of more than three digits
// included).
std::optional<DeviceNameParts> ParseDeviceName(std::string_view name);

}  // namespace tessera::records::dra
