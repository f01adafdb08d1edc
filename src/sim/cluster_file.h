// The cluster file (YAML) of `tessera simulate --cluster`:
//
//   levels:                       # optional: gang topology levels, narrowest first
//     - {name: nvlink-domain, label: tessera.dev/nvlink-domain}
//     - {name: rack, label: tessera.dev/rack}
//   nodes:
//     - name: dgx                 # with count: dgx-0, dgx-1, ...
//       count: 2
//       profile: dgx-a100         # built-in profile, or:
//       gpus: {model: A100-80GB, count: 8, memory: 80Gi, interconnect: nvswitch|pcie, sm: 108}
//       cpu: 128                  # defaults to the profile's
//       memory: 1Ti
//       labels: {tessera.dev/rack: r1}
//       topology: |               # optional `nvidia-smi topo -m` text; overrides the links
//         ...                     # (and NUMA nodes, CPU affinity, NICs)
//       mig: true                 # optional: every GPU in MIG mode, nothing configured yet, or
//       mig: {gpus: [0, 1], layout: [3g.40gb@4, 2g.20gb, 1g.10gb]}
//                                 # GPUs (default all) and their configured, idle instances:
//                                 # PROFILE@START, or PROFILE at the lowest free start it may take
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/node.h"
#include "core/topology/domains.h"

namespace tessera::sim {

struct ClusterFile {
  std::vector<core::NodeSpec> nodes;
  std::vector<core::TopologyLevel> levels;  // DefaultTopologyLevels() unless the file names some
};

[[nodiscard]] absl::StatusOr<ClusterFile> ParseClusterYaml(std::string_view text,
                                                           std::string_view source);
[[nodiscard]] absl::StatusOr<ClusterFile> LoadClusterFile(const std::string& path);

}  // namespace tessera::sim
