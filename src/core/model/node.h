// What a node is: its CPU and memory, labels, GPUs and the link matrix between them. Immutable
// once the cluster is built; what is free lives in ClusterState.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/model/mig.h"
#include "core/model/topology.h"

namespace tessera::core {

// At most this many GPUs per node: free-GPU sets are 64-bit masks.
inline constexpr int kMaxGpusPerNode = 64;

struct GpuSpec {
  int32_t index = 0;         // position on the node, 0..n-1, as nvidia-smi numbers it
  std::string uuid;          // "GPU-..." when known
  std::string model;         // e.g. "A100-80GB", "H100-80GB", "T4"
  int64_t memory_mib = 0;    // usable device memory
  int32_t sm_count = 0;      // streaming multiprocessors (0 when unknown)
  int32_t numa_node = -1;    // -1 when unknown
  std::string pci_bus_id;    // "00000000:07:00.0" when known
  std::string cpu_affinity;  // "0-55,112-167" as nvidia-smi topo -m prints it, when known
  // MIG mode: the GPU offers MIG slices only (no whole-GPU use, no shares); see model/mig.h.
  bool mig_enabled = false;
  // GPU instances already configured on it (by the agent or mig-parted), all idle at start.
  // Empty: nothing configured; instances are created as pods need them.
  std::vector<MigPlacement> mig_layout;
  bool operator==(const GpuSpec&) const = default;
};

// A network interface as `nvidia-smi topo -m` lists it (NIC0.. or mlx5_0 columns).
struct NicSpec {
  std::string name;             // "NIC0"
  std::string device;           // "mlx5_0" from the NIC legend, when known
  std::vector<Link> gpu_links;  // relation to each GPU, by GPU index
  bool operator==(const NicSpec&) const = default;
};

struct NodeSpec {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::map<std::string, std::string> labels;
  std::vector<GpuSpec> gpus;
  LinkMatrix links;  // size == gpus.size()
  std::vector<NicSpec> nics;

  int gpu_count() const { return static_cast<int>(gpus.size()); }
  // Everything but the name and labels: CPU, memory, GPUs, links and NICs.
  bool SameHardware(const NodeSpec& o) const {
    return cpu_milli == o.cpu_milli && memory_mib == o.memory_mib && gpus == o.gpus &&
           links == o.links && nics == o.nics;
  }
  // Mask with one bit per GPU of the node.
  uint64_t all_gpus_mask() const { return gpus.size() >= 64 ? ~0ULL : ((1ULL << gpus.size()) - 1); }
};

}  // namespace tessera::core
