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
//                      "instances": [{"profile": "3g.40gb", "start": 4}]},        // configured
//              "health": {"healthy": false, "xids": [79],            // only when unhealthy
//                         "reason": "XID 79: GPU has fallen off the bus"}}, ...],
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
// The GPUs of a node the scheduler keeps as hot spares for gang replacements (its
// spareGpusPerDomain): their indexes, comma-separated ("6,7"); absent when none. Written by the
// scheduler, read by `tessera status`.
inline constexpr std::string_view kSpareGpusAnnotation = "tessera.dev/spare-gpus";
inline constexpr int kInventoryVersion = 1;

// A GPU's health as the node agent last saw it. An unhealthy GPU stays in the inventory (its
// index and links keep their meaning) and takes no new pods.
struct GpuHealth {
  bool healthy = true;
  std::vector<int32_t> xids;  // the XID errors (NVIDIA's numbering) that made it unhealthy
  std::string reason;         // for people: "XID 79: GPU has fallen off the bus"
  bool operator==(const GpuHealth&) const = default;
};

struct Inventory {
  std::vector<core::GpuSpec> gpus;
  core::LinkMatrix links;
  std::vector<core::NicSpec> nics;
  // Empty when every GPU is healthy; otherwise one entry per GPU, in index order.
  std::vector<GpuHealth> health;

  bool healthy(int index) const {
    return static_cast<size_t>(index) >= health.size() ||
           health[static_cast<size_t>(index)].healthy;
  }
};

std::string InventoryToJson(const Inventory& inventory, bool pretty = false);
[[nodiscard]] absl::StatusOr<Inventory> InventoryFromJson(std::string_view json);

}  // namespace tessera::records
