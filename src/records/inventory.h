// The node record `tessera.dev/gpu-inventory` (DESIGN.md "Kubernetes-facing contract"): a
// versioned JSON document with the node's GPUs and their pairwise links. Written by the agent (or
// `tessera topo parse`, or by hand), read by the scheduler. Validated on read: a bad record is an
// error naming the field, never a crash. Fields this version does not know are ignored (a newer
// agent may add some); another version, or a known field that is missing or malformed, is an
// error.
//
//   {"version": 1,
//    "gpus": [{"index": 0, "uuid": "GPU-...", "model": "A100-80GB", "memory_mib": 81920,
//              "sm_count": 108, "numa_node": 0, "pci_bus_id": "00000000:07:00.0",
//              "cpu_affinity": "0-63",
//              "mig": {"capable": true, "enabled": true,             // capable: a MIG table
//                      "instances": [{"profile": "3g.40gb", "start": 4}]}}, ...],  // configured
//    "links": [["X", "NV12", ...], ...],            // nvidia-smi names, row per GPU
//    "nics": [{"name": "NIC0", "device": "mlx5_0", "links": ["PXB", ...]}]}   // optional
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/node.h"

namespace tessera::records {

inline constexpr std::string_view kInventoryAnnotation = "tessera.dev/gpu-inventory";
inline constexpr int kInventoryVersion = 1;

struct Inventory {
  std::vector<core::GpuSpec> gpus;
  core::LinkMatrix links;
  std::vector<core::NicSpec> nics;
};

std::string InventoryToJson(const Inventory& inventory, bool pretty = false);
[[nodiscard]] absl::StatusOr<Inventory> InventoryFromJson(std::string_view json);

}  // namespace tessera::records
