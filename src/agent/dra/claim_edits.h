// What a container that uses a prepared claim gets, as a CDI spec (cdi.h): the DRA twin of the
// NRI delivery's adjustment (agent/nri/delivery.h), built from the claim's allocation instead of
// the pod's tessera.dev/assignment.
//
// Per allocated device (CDI device "<claim UID>-<device>", "-<n>" added for a device that serves
// the claim twice): the GPU's device node /dev/nvidia<minor> (major and minor read from the
// host's node); for a MIG instance its GPU's node, and the instance's MIG-<uuid> in
// NVIDIA_VISIBLE_DEVICES. For the claim (the spec's own edits, applied once when any of its devices
// is used): the driver's control nodes that exist (nvidiactl, nvidia-uvm, nvidia-uvm-tools),
// NVIDIA_VISIBLE_DEVICES = the claim's GPU UUIDs (MIG instances: theirs), and for a claim that
// holds a share: TESSERA_GPU_SHARING=shim, the share's limits for people
// (TESSERA_GPU_MEMORY_LIMIT_MIB, TESSERA_GPU_COMPUTE_PERCENT, when the claim has one shared GPU)
// and the shim per src/shim/contract.h: the claim's segment folders at /run/tessera/limits
// (read-only) and /run/tessera/ledger, the shim libraries over libcuda.so.1 and libnvidia-ml.so.1
// in the container's library folder, and the host's real driver libraries under
// /usr/local/lib/tessera. On nodes whose driver is described by NVIDIA's CDI spec
// (nvidia_cdi_kind), the device nodes and driver libraries come from it instead: the claim's ids
// then include <kind>=<GPU UUID>.
//
// Limits (inherent to CDI, where edits of several devices are applied one after the other):
// environment variables do not merge, so a container that uses two tessera claims sees the
// NVIDIA_VISIBLE_DEVICES of the one applied last (its device nodes are those of both); and one
// share claim per container (both would mount /run/tessera/limits).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/discovery/discovery.h"
#include "agent/dra/cdi.h"
#include "agent/dra/checkpoint.h"
#include "agent/nri/delivery.h"

namespace tessera::agent::dra {

// How shares are enforced in the containers.
struct ShareEnforcement {
  bool shim = true;                           // false: shares are only accounted (no shim mounted)
  std::string shim_dir = "/run/tessera/lib";  // host: libtessera-cuda.so, libtessera-nvml.so
  std::string driver_lib_dir = "/usr/lib/x86_64-linux-gnu";     // host: libcuda.so.1, ...nvml.so.1
  std::string container_lib_dir = "/usr/lib/x86_64-linux-gnu";  // where images load them from
};

struct EditOptions {
  // Where the agent sees the host's files ("/host" in the DaemonSet, "" on the host itself): the
  // files a spec names (shim, driver libraries) are checked there, and a device node found under
  // it is named by its host path in the spec.
  std::string host_root;
  std::string dev_dir = "/dev";  // the host's device nodes, as the agent sees them
  std::string nvidia_cdi_kind;   // "nvidia.com/gpu": use NVIDIA's CDI spec for nodes and libraries
  ShareEnforcement shares;
  DeviceLookup lookup = StatDevice;
};

// Fills each device's cdi_ids: ours ("k8s.gpu.tessera.dev/gpu=<claim UID>-<device>") and, with
// nvidia_cdi_kind, "<kind>=<GPU UUID>" (a MIG instance's MIG-<uuid>) before it. A MIG device's
// instance must exist (mig_uuid set) first.
void AssignCdiIds(const EditOptions& options, PreparedClaim* claim);

// The claim's CDI spec (devices named as AssignCdiIds named them). Errors say what is missing on
// the node: a GPU the node does not have, a device node, the shim or the driver libraries.
[[nodiscard]] absl::StatusOr<CdiSpec> ClaimCdiSpec(const PreparedClaim& claim, const NodeGpus& gpus,
                                                   const EditOptions& options);

}  // namespace tessera::agent::dra
