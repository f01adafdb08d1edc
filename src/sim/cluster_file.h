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
//       cordoned: true            # optional: takes no new pods (keeps its running ones)
//     - name: gpu-b               # a node as a live cluster describes it (what
//       cpu: 2                    # `tessera simulate --from-cluster --save` writes):
//       memory: 24Gi
//       inventory: '{"version": 1, "gpus": [...], "links": [...]}'
//                                 # its tessera.dev/gpu-inventory record (records/inventory.h),
//                                 # instead of profile or gpus
//   running:                      # optional: pods already placed when the workload starts
//     - pod: ns/name
//       node: gpu-b
//       cpu: 500m                 # what it holds of the node (default 0)
//       memory: 1Gi
//       assignment: '{"version": 1, "node": "gpu-b", "gpus": [...]}'
//                                 # its tessera.dev/assignment record (records/assignment.h);
//                                 # absent for a pod without GPUs
//
// Running pods are checked against the nodes when the file is read (the node exists, the
// assignment names it and its GPUs) and restored into the engine before the workload is placed
// (ResolveStart), so a saved snapshot replays exactly as the live cluster stood.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "core/model/node.h"
#include "core/topology/domains.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::sim {

// A pod placed before the scenario starts.
struct RunningPod {
  std::string name;  // "ns/name": unique among running pods and the workload's pods
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  records::Assignment assignment;  // .node always; .gpus empty for a pod without GPUs
  bool operator==(const RunningPod&) const = default;
};

struct ClusterFile {
  std::vector<core::NodeSpec> nodes;
  std::vector<core::TopologyLevel> levels;  // DefaultTopologyLevels() unless the file names some
  std::vector<std::string> cordoned;        // node names, in file order
  std::vector<RunningPod> running;          // in file order
  // Per node name, the GPUs' health from an `inventory:` record that marks some unhealthy (kept
  // so that a saved snapshot says so; placing ignores it, as the scheduler does today).
  std::map<std::string, std::vector<records::GpuHealth>> health;
};

[[nodiscard]] absl::StatusOr<ClusterFile> ParseClusterYaml(std::string_view text,
                                                           std::string_view source);
[[nodiscard]] absl::StatusOr<ClusterFile> LoadClusterFile(const std::string& path);

// The file's text: nodes with GPUs as `inventory:` records (exact: UUIDs, links, NICs, MIG
// instances, health), the levels, cordoned nodes and running pods. ParseClusterYaml of it gives
// back an equal ClusterFile.
std::string ClusterFileToYaml(const ClusterFile& file);

// Appends `count` nodes of a built-in profile (core/model/profiles.h), named PROFILE-added-0..
// (-1.. past names already taken): `tessera simulate --add-nodes PROFILE:N`.
[[nodiscard]] absl::Status AddProfileNodes(ClusterFile* file, std::string_view profile, int count);

// What the engine starts from: the running pods as placements (by node id of `cluster`, which
// must be made from file.nodes) and the cordoned nodes. Errors name the pod and what does not
// match.
struct StartState {
  std::vector<std::pair<std::string, core::Placement>> running;
  std::vector<core::NodeId> cordoned;
};
[[nodiscard]] absl::StatusOr<StartState> ResolveStart(const core::Cluster& cluster,
                                                      const ClusterFile& file);

}  // namespace tessera::sim
