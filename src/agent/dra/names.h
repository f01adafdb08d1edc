// The node-side names of tessera's DRA driver that no allocator reads: the CDI kind of the specs
// the kubelet plugin writes, where its sockets live, and the annotation on the slices it owns.
// The contract with allocators (the driver's name, device names, attributes, capacities, taint,
// DeviceClasses) is records/dra_names.h; src/agent/dra/README.md documents both.
#pragma once

#include <string_view>

#include "records/dra_names.h"

namespace tessera::agent::dra {

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
