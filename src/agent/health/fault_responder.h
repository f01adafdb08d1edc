// What the agent does about GPU faults (the health tracker's changes, gpu_health.h, and the
// application XIDs): tells the pods and the Node, and applies the fault policy to the pods of a
// failed GPU.
//
//   application XID  an Event (Warning GPUApplicationError) on the pod that caused it
//                    (attribution.h); the GPU stays in service
//   GPU failed       every pod on it gets a Warning GPUUnhealthy saying what happened and what the
//   (effect kFail)   policy does; with policy `evict` each is evicted through the Eviction API
//                    (its PodDisruptionBudgets and grace period honoured; a budget that allows no
//                    disruption now is retried every retry_interval, and the pod is told once with
//                    GPUEvictionBlocked); `cordon-gpu` keeps new pods off and leaves the running
//                    ones; `none` only tells
//   NVLink down      the pods that hold both GPUs of the lost link are treated as on a failed GPU
//                    (GPUNvLinkDown, then the policy)
//   GPU draining     its pods get GPUDraining: no new pods come, theirs keeps running; never
//   (effect kDrain)  evicted, whatever the policy
//   back in service  a Normal GPUHealthy Event on the Node
// The Node gets an Event for every change (GPUUnhealthy, GPUDraining, GPUHealthy, GPUNvLinkDown,
// GPUNvLinkUp), so `kubectl describe node` tells the story.
//
// Whom it concerns: the pods on this node whose assignment (tessera.dev/assignment) holds the GPU,
// from the API server, joined with the node's own record (`local_pods`: the pod manager's grants
// with the shim's ledger, and in DRA mode the pods of the claims the driver prepared). A pod is
// told once per fault and evicted until it is gone; the node's pods are listed again at most once
// per retry_interval while a GPU is failed. Faults come and go while the API server is away: what
// could not be posted is tried again at the next scan.
//
// Not thread-safe: called from the agent's loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/health/attribution.h"
#include "agent/health/gpu_health.h"
#include "k8s/client/http.h"

namespace tessera::agent {

// What happens to the running pods of a failed GPU (the default, evict, is justified in
// src/agent/README.md "GPU faults").
enum class FaultPolicy { kEvict, kCordonGpu, kNone };
std::string_view FaultPolicyName(FaultPolicy p);  // "evict", "cordon-gpu", "none"
[[nodiscard]] absl::StatusOr<FaultPolicy> ParseFaultPolicy(std::string_view text);

struct FaultResponderOptions {
  std::string node_name;
  FaultPolicy policy = FaultPolicy::kEvict;
  std::chrono::milliseconds retry_interval{5'000};
  // The node's own record of the pods on its GPUs (may be empty).
  std::function<std::vector<GpuPod>()> local_pods;
};

class FaultResponder {
 public:
  using Clock = std::chrono::steady_clock;

  FaultResponder(k8s::ApiClient& client, FaultResponderOptions options);

  // An application XID: tells the pod(s) that caused it (`published`: the GPUs, for records that
  // name a GPU by index).
  void OnApplicationXid(const HealthEvent& event, const NodeGpus& published);
  // The tracker's new changes (Node Events, the faults to act on), then the policy on every
  // failed GPU and down link the tracker holds now.
  void Step(const GpuHealthTracker& tracker, const std::vector<HealthChange>& changes,
            Clock::time_point now);

  // Counters, for logs, metrics and tests.
  int64_t events_posted() const { return events_posted_; }
  int64_t evictions() const { return evictions_; }
  int64_t evictions_blocked() const { return evictions_blocked_; }

 private:
  // A fault being acted on: a failed or draining GPU, or a down NVLink between two GPUs.
  struct Episode {
    FaultEffect effect = FaultEffect::kNone;  // kFail, kDrain, kLinks
    std::vector<std::string> uuids;           // the GPU, or both GPUs of the link
    std::string reason;
    std::set<std::string> told;     // pod UIDs told about it
    std::set<std::string> blocked;  // pod UIDs told their eviction is blocked
  };
  // A pod on this node as the API server shows it, with the GPUs it holds.
  struct NodePod {
    std::string ns, name, uid;
    bool leaving = false;  // terminating or finished: nothing to do
    std::set<std::string> gpus;
  };

  void NodeEvent(const HealthChange& change);
  absl::StatusOr<std::vector<NodePod>> ListPods(const NodeGpus& published);
  void ActOn(Episode& episode, const std::string& key, const NodePod& pod, Clock::time_point now);
  bool Post(const std::string& ns, const std::string& name, const std::string& uid,
            const std::string& reason, const std::string& message, const std::string& type);

  k8s::ApiClient& client_;
  FaultResponderOptions options_;
  std::map<std::string, Episode> episodes_;              // "gpu/<uuid>", "link/<uuid>/<uuid>"
  std::map<std::string, Clock::time_point> evicted_at_;  // pod UID -> last eviction attempt
  Clock::time_point next_scan_{};
  int64_t events_posted_ = 0, evictions_ = 0, evictions_blocked_ = 0;
};

}  // namespace tessera::agent
