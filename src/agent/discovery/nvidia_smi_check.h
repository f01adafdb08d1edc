// Checking the agent's discovery against nvidia-smi on a machine with NVIDIA GPUs
// (scripts/gpu_check.sh): what `tessera agent --print-inventory` found, compared with what
// `nvidia-smi -q` and `nvidia-smi topo -m` print, field by field.
//
// `nvidia-smi -q` is read as it prints (also `nvidia-smi -a`): the header (Driver Version, CUDA
// Version, Attached GPUs), then one block per GPU opened by "GPU <bus id>", with "Key : value"
// lines indented four spaces per level under section headers ("FB Memory Usage", "MIG Mode",
// "Fabric", ...). Lines starting with '#' before the "NVSMI LOG" header are comments. Only the
// fields compared are kept.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/topology/topo_text.h"
#include "records/inventory.h"

namespace tessera::agent {

struct SmiGpu {
  int line = 0;        // of its "GPU <bus id>" header
  std::string bus_id;  // from the header, as nvidia-smi prints it ("00000000:18:00.0")
  std::string product_name;
  std::string uuid;
  std::string minor;           // "7", or "N/A"
  int64_t fb_total_mib = -1;   // FB Memory Usage / Total; -1 when N/A
  std::string mig_current;     // MIG Mode / Current: "Enabled", "Disabled", "N/A"
  std::string fabric_state;    // Fabric / State: "Completed", "N/A", ...
  std::string fabric_clique;   // Fabric / CliqueId
  std::string fabric_cluster;  // Fabric / ClusterUUID
};

struct SmiLog {
  std::string driver_version;
  std::string cuda_version;
  int attached = -1;
  std::vector<SmiGpu> gpus;
};

// Errors name the line: "nvidia-smi -q, line 12: a GPU block without \"GPU UUID\"".
[[nodiscard]] absl::StatusOr<SmiLog> ParseNvidiaSmiQ(std::string_view text);

struct CheckItem {
  std::string what;        // "GPU 3 memory (MiB)"
  std::string nvidia_smi;  // what nvidia-smi says
  std::string tessera;     // what the agent found
  bool ok = false;
};

struct CheckReport {
  std::vector<CheckItem> items;
  int mismatches() const;
  // A Markdown table (what, nvidia-smi, tessera, ok) and a summary line.
  std::string ToMarkdown() const;
};

// Compares GPU count, per GPU (matched by UUID, in nvidia-smi's order) UUID, index, PCI bus id,
// memory, model, MIG mode, NUMA node and CPU affinity, and every pair's link.
CheckReport CompareWithNvidiaSmi(const records::Inventory& inventory, const SmiLog& smi,
                                 const core::ParsedTopology& topo);

}  // namespace tessera::agent
