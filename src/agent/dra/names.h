// The names of tessera's DRA driver (DRA mode, resource.k8s.io/v1): what the agent publishes in
// ResourceSlices and what the DeviceClasses in deploy/dra-deviceclasses.yaml select. The contract
// with the allocator (src/k8s/scheduler) is src/agent/dra/README.md; names here do not change.
#pragma once

#include <string_view>

namespace tessera::agent::dra {

// The driver, and the domain of its unqualified attribute and capacity names.
inline constexpr std::string_view kDriverName = "gpu.tessera.dev";

// Device attributes (in the driver's domain unless qualified).
inline constexpr std::string_view kAttrType = "type";  // "gpu" | "mig"
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

// The taint an unhealthy GPU's devices carry (pool.h: NoSchedule, or NoExecute for a failed GPU
// under the fault policy evict): allocators leave them alone unless a claim tolerates it.
inline constexpr std::string_view kTaintUnhealthy = "gpu.tessera.dev/unhealthy";

// The DeviceClasses (deploy/dra-deviceclasses.yaml).
inline constexpr std::string_view kClassWhole = "gpu.tessera.dev";
inline constexpr std::string_view kClassShare = "gpu-share.tessera.dev";
inline constexpr std::string_view kClassMig = "mig.tessera.dev";

// CDI: the kind of the devices the kubelet plugin writes (vendor k8s.gpu.tessera.dev, class gpu),
// one transient spec file per prepared claim in the node's CDI directory.
inline constexpr std::string_view kCdiVendor = "k8s.gpu.tessera.dev";
inline constexpr std::string_view kCdiClass = "gpu";

// Where the kubelet plugin's sockets live under the kubelet's root directory.
inline constexpr std::string_view kPluginsSubdir = "plugins";
inline constexpr std::string_view kRegistrySubdir = "plugins_registry";

// The annotation that carries the hash of a ResourceSlice's spec as the agent wrote it, so that
// a slice is rewritten only when what it should say changed (the API server canonicalises
// quantities, so comparing specs field by field would see changes that are not).
inline constexpr std::string_view kSpecHashAnnotation = "gpu.tessera.dev/spec-hash";

}  // namespace tessera::agent::dra
