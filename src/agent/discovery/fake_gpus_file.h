// The GPU description file: a node's GPUs written down, for machines without GPUs (the node
// harness's fake GPUs, tests). The agent's fake discovery backend reads it; this parser is the
// authority on the format. One JSON document:
//
//   {"version": 1,
//    "driver_version": "580.95.05",          optional, nvidia-smi's "Driver Version"
//    "cuda_version": "13.0",                 optional
//    "gpus": [                               at least one, in index order
//      {"index": 0,                          its position in the list
//       "minor": 0,                          optional: /dev/nvidia<minor>, 0..254 (default: index)
//       "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000000",   GPU-<8-4-4-4-12 hex>, unique
//       "model": "H100-80GB",                tessera's model name (core/model/profiles.h); a label
//                                            value, so [A-Za-z0-9._-]
//       "name": "NVIDIA H100 80GB HBM3",     optional: the product name nvidia-smi prints
//       "memory_mib": 81559,                 positive
//       "sm_count": 132,                     optional
//       "pci_bus_id": "00000000:18:00.0",    optional; 4- or 8-digit domain, kept as 8 digits
//       "numa_node": 0,                      optional, -1 = unknown
//       "cpu_affinity": "0-55",              optional, a CPU list
//       "mig": {"capable": true, "enabled": false, "instances": []},   optional, as the
//                                            inventory record (instances only when enabled);
//                                            an instance may name its device: {"profile":
//                                            "1g.10gb", "start": 0, "uuid": "MIG-<8-4-4-4-12>"}
//                                            (default: FakeMigUuid)
//       "healthy": true,                     optional: default false when `xid` has a critical XID
//       "xid": [79],                         optional: XID errors seen (agent/discovery/xid.h)
//       what NVML would report of the GPU now (xid.h HealthCondition), each optional:
//       "lost": false,                       NVML answers GPU_IS_LOST
//       "recovery_action": "none",           the driver's: none, reset, reboot, drain-p2p,
//                                            drain-and-reset
//       "row_remap": {"pending": false, "failure": false},
//       "retired_pages_pending": false}],
//    "links": [["X", "NV18"], ["NV18", "X"]],  n x n, symmetric, X on the diagonal, names as
//                                              `nvidia-smi topo -m` prints them; optional for one
//                                              GPU
//    "nvlink_down": [[0, 1]],                optional: pairs whose NVLinks are down; each is then
//                                            published as its pcie_links relation
//    "pcie_links": [["X", "SYS"], ...],      optional: the PCIe relations under the NVLinks (SYS
//                                            for every pair when absent)
//    "fabric": {"cluster_uuid": "...", "clique_id": 3}}   optional: a GB200-class NVLink fabric,
//                                              every GPU in this clique
//
// XID errors are events, not state: they are lines appended to "<file>.events" (FakeXidEventsPath),
// one JSON object each, {"gpu": 1, "xid": 31} or {"gpu": 2, "xid": 13, "mig": "1g.10gb@0"} (the
// MIG instance the error concerns, as NVML's event names its GPU and compute instance). The agent
// reads the lines appended since it started (as NVML delivers the events after registration).
// Whoever rewrites the description while an agent runs (a test injecting faults, the agent's own
// MIG changes) holds an exclusive flock on "<file>.lock" (FakeGpusLockPath) and replaces the file
// with a rename, so that no writer loses another's change.
//
// Strict, as files people write should be: an unknown field, a wrong type or an inconsistent
// value is an error naming the file, the line and the field.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "agent/discovery/discovery.h"

namespace tessera::agent {

[[nodiscard]] absl::StatusOr<NodeGpus> ParseFakeGpusFile(std::string_view text,
                                                         std::string_view source);

// "<path>.events": XID events for the description file `path` (above).
std::string FakeXidEventsPath(std::string_view path);
// "<path>.lock": the lock writers of the description file `path` hold.
std::string FakeGpusLockPath(std::string_view path);
// One line of the events file: an XID event on one of `gpus`. Errors name the line.
[[nodiscard]] absl::StatusOr<HealthEvent> ParseFakeXidEvent(std::string_view line,
                                                            const NodeGpus& gpus);

// Checks a GPU UUID ("GPU-" then 8-4-4-4-12 hex digits).
bool IsGpuUuid(std::string_view uuid);
// Checks a MIG device UUID ("MIG-" then 8-4-4-4-12 hex digits, as nvidia-smi -L prints).
bool IsMigUuid(std::string_view uuid);
// The device UUID the fake driver gives MIG instance `profile`@`start` of GPU `gpu_uuid`: stable
// (a hash of the three), in the form nvidia-smi -L prints.
std::string FakeMigUuid(std::string_view gpu_uuid, std::string_view profile, int start);
// Checks a CPU list such as "0-55,112-167".
bool IsCpuList(std::string_view list);
// "0000:18:00.0" or "00000000:18:00.0" (any case) -> "00000000:18:00.0"; empty when malformed.
std::string NormalizePciBusId(std::string_view bus_id);

}  // namespace tessera::agent
