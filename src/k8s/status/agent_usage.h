// What the node agents measured for each pod on each GPU, read from their /metrics, for
// `tessera status -o wide` (issue 34: per-pod usage beside what was granted). The agent's series
// (src/agent/metrics/agent_metrics.cc, docs/metrics.md):
//   tessera_agent_pod_gpu_memory_used_bytes    what the pod's processes hold (the shim's ledger;
//                                              shares enforced by the shim only)
//   tessera_agent_pod_gpu_memory_driver_bytes  what they hold as the driver counts it (NVML; the
//                                              figure of a whole GPU's pod, which has no ledger)
//   tessera_agent_pod_gpu_busy_seconds_total   the GPU's busy time charged to the pod since the
//                                              agent started (usage_meter.h)
//   tessera_agent_pod_gpu_idle                 1 idle by the idle rule, 0 not (idle_watch.h)
// each with `namespace`, `pod` and `uuid` (the GPU's) labels. Pure: the caller fetches the text.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"

namespace tessera::k8s {

struct PodGpuUsage {
  // The shim's figure for a share, else the driver's (a whole GPU); -1: neither reported (no
  // NVML on that node, a MIG instance).
  int64_t memory_used_bytes = -1;
  double busy_seconds = -1;  // -1: not measured (no NVML on that node, a MIG instance)
  int32_t idle = -1;         // -1: not watched for a whole idle window yet
};

// By (pod "namespace/name", GPU UUID).
using AgentUsage = std::map<std::pair<std::string, std::string>, PodGpuUsage>;

// Adds the per-pod samples of one agent's /metrics text to `usage`. Samples of other families,
// comments and blank lines are skipped; a line of one of the three families that cannot be read
// is an error naming its line (what was read before it stays).
absl::Status AddAgentMetrics(std::string_view text, AgentUsage* usage);

}  // namespace tessera::k8s
