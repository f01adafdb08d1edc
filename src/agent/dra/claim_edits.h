// What a container that uses a prepared claim gets, as a CDI spec (cdi.h). The decision is
// edits/container_edits.h's, the same one classic delivery makes for a pod's assignment: this file
// describes the claim as a ContainerGrant (ClaimGrant) and writes the edits in CDI's format
// (CdiSpecFor). So a claim's containers get what a classic pod with the same GPUs gets: their
// device nodes and the driver's control nodes, NVIDIA_VISIBLE_DEVICES, the driver's libraries,
// and for a share the CUDA shim with its limits and ledger folders (src/shim/contract.h) and the
// share's limits in the environment (TESSERA_GPU_SHARING, TESSERA_GPU_MEMORY_LIMIT_MIB,
// TESSERA_GPU_COMPUTE_PERCENT, TESSERA_GPU_COMPUTE_MODE=hard-cap: a claim has no compute mode).
// A claim has no record to mount and no MPS.
//
// Per allocated device (CDI device "<claim UID>-<device>", "-<n>" added for a device that serves
// the claim twice): its GPU's device node (a MIG instance: its GPU's). Everything else (the
// control nodes, the environment, the mounts) is the spec's own edits, applied once whichever of
// the claim's devices a container uses. On nodes whose driver is described by NVIDIA's CDI spec
// (EditsOptions::cdi_kind), the device nodes and driver libraries come from it instead: the
// claim's ids then include <kind>=<GPU UUID> (a MIG instance: its MIG-<uuid>) before ours.
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
#include "agent/edits/container_edits.h"

namespace tessera::agent::dra {

// The claim's devices as the grant its containers get; `enforce_shares` false
// (--share-enforcement=none): its shares are only accounted, no shim is mounted. Errors: a device
// on a GPU this node does not have (any more).
[[nodiscard]] absl::StatusOr<ContainerGrant> ClaimGrant(const PreparedClaim& claim,
                                                        const NodeGpus& gpus, bool enforce_shares);

// What the claim's containers get (edits/container_edits.h), with the node's facts as classic
// delivery has them (the driver version from `gpus`). Errors say what is missing on the node: a
// GPU the node does not have, a device node, the shim or the driver libraries.
[[nodiscard]] absl::StatusOr<ContainerEdits> ClaimContainerEdits(const PreparedClaim& claim,
                                                                 const NodeGpus& gpus,
                                                                 const EditsOptions& options,
                                                                 bool enforce_shares);

// Our CDI device name for each device of the claim, in order: "<claim UID>-<device>", with "-<n>"
// added for a device that serves the claim again.
std::vector<std::string> CdiDeviceNames(const PreparedClaim& claim);

// Fills each device's cdi_ids from the claim's edits: NVIDIA's ("<kind>=<UUID>", with a CDI
// kind) and ours ("k8s.gpu.tessera.dev/gpu=<claim UID>-<device>").
void AssignCdiIds(const ContainerEdits& edits, PreparedClaim* claim);

// The CDI renderer: the spec that carries `edits` for a grant's GPUs, the i-th named
// `device_names[i]` (its device node goes with it; the rest is the spec's own edits).
CdiSpec CdiSpecFor(const ContainerEdits& edits, const std::vector<std::string>& device_names);

}  // namespace tessera::agent::dra
