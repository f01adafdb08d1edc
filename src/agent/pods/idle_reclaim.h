// IdleReclaim: the optional policy that evicts pods holding a GPU they do not use (issue 34,
// `agent.idleReclaim` in the chart, `tessera agent --idle-reclaim-below-priority`).
//
// Who finds a pod idle is the pod manager (idle_watch.h): the pod ran alone on its GPU and kept it
// busy under the threshold for the whole window, by the GPU's own utilisation. Nothing the pod
// writes (its ledger, its shim's counters) enters that finding, so a tenant cannot make a
// neighbour look idle and have it evicted. This policy only decides, from the pod's API object,
// whether such a pod may be evicted:
//   - the object is the pod the agent found idle (same UID: a pod deleted and created again under
//     the same name is another pod) and it is not already leaving;
//   - its priority (spec.priority, which admission fills from its PriorityClass; absent: 0) is
//     below the configured bound: the platform team says which pods are preemptible by their
//     PriorityClass, which a tenant cannot raise on its own (nothing the pod's annotations say
//     is looked at);
//   - it is not a pod that would come back at once in the same place: a mirror pod (the kubelet's
//     static pod) or a DaemonSet's pod.
// The agent then evicts it through the Eviction API (k8s/eviction/evictor.h): PodDisruptionBudgets
// and the pod's grace period hold, and a refused eviction is tried again when the pod is found
// idle again (the GPUIdle notice's interval). Pure: the caller fetches the object.
#pragma once

#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"

namespace tessera::agent {

struct IdleReclaimDecision {
  bool evict = false;
  int32_t priority = 0;  // the pod's, when it was read
  std::string why;       // why it is or is not evicted, for the Event and the log
};

// The decision for the pod `uid` found idle, from `pod` (a core/v1 Pod as the API server returns
// it, or null when it was not found) and the bound: pods with a priority below `below_priority`
// may be evicted.
IdleReclaimDecision DecideIdleReclaim(const nlohmann::json& pod, const std::string& uid,
                                      int32_t below_priority);

}  // namespace tessera::agent
