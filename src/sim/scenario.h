// Runs a workload file on a cluster under one policy, pod by pod in file order, exactly as the
// scheduler would (the same Engine), and measures the outcome.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine.h"
#include "core/model/cluster.h"
#include "core/policy/policy.h"
#include "sim/cluster_file.h"
#include "sim/workload_file.h"

namespace tessera::sim {

struct PodOutcome {
  std::string job;
  core::PodRequest request;  // as asked (before a whole-GPU policy rounds shares up)
  core::PlacementResult result;
};

struct GangOutcome {
  std::string gang;
  std::string job;
  int members = 0;
  bool placed = false;  // all members (an elastic gang: at least its min)
  int running = 0;      // members placed
  int min = 0;          // the fewest it runs with (members when not elastic)
  // Every GPU of the gang in one NVLink domain (see core/topology/domains.h).
  bool one_nvlink_domain = false;
  // Every GPU of the gang in one domain of its topology level (nvlink-domain when it names none).
  std::string level;
  bool one_domain = false;
  std::string where;  // "nvswitch-server x8" or "nvswitch-server x7, pcie-server x1"
};

struct ScenarioResult {
  std::string policy;
  std::vector<PodOutcome> pods;
  std::vector<GangOutcome> gangs;
  int placed = 0;
  int pending = 0;
  int gpus_in_use = 0;
  int total_gpus = 0;
  int64_t gpu_memory_allocated_mib = 0;  // granted: a whole GPU counts all its memory
  int64_t gpu_memory_requested_mib = 0;  // what the placed pods asked for
  int64_t gpu_memory_total_mib = 0;
  int multi_gpu_pods = 0;         // placed pods with 2 or more GPUs
  int multi_gpu_nvlink_pods = 0;  // ... whose GPUs are all pairwise NVLink-connected
  int gangs_placed = 0;
  int gangs_one_domain = 0;            // placed gangs inside one domain of their level
  int mig_pods = 0;                    // placed pods holding a MIG instance
  std::vector<std::string> mig_plans;  // re-partitioning plans, "pod: node n GPU g: destroy ..."
  double seconds = 0;                  // wall time of the placement loop
};

// Checks the workload against the cluster before running: a share larger than any GPU, a gang
// topology level the cluster does not define. Errors name the job and its line.
[[nodiscard]] absl::Status ValidateWorkload(const core::Cluster& cluster,
                                            const std::vector<core::TopologyLevel>& levels,
                                            const Workload& workload, std::string_view source);

ScenarioResult RunScenario(const core::Cluster& cluster,
                           const std::vector<core::TopologyLevel>& levels, const Workload& workload,
                           std::unique_ptr<core::Policy> policy);

// As RunScenario, on a cluster that is not empty: `start`'s nodes are cordoned and its running
// pods restored (in order, as a restarted scheduler restores bound pods) before the workload is
// placed. The result's GPU and memory figures include the running pods; its pods are the
// workload's. Fails, naming the pod, when a running pod does not fit what the ones before it left.
[[nodiscard]] absl::StatusOr<ScenarioResult> RunScenarioFrom(
    const core::Cluster& cluster, const std::vector<core::TopologyLevel>& levels,
    const StartState& start, const Workload& workload, std::unique_ptr<core::Policy> policy);

}  // namespace tessera::sim
