// The node agent's publishing loop (`tessera agent`): discover the GPUs, advertise them on the
// node (publish/advertisement.h), and keep the Node in line as things change:
//   - the GPUs change: an XID, a GPU lost, MIG instances reconfigured, the description file
//     rewritten (discovery's Wait() wakes the loop), or anything else seen by a periodic
//     rediscovery;
//   - the Node changes under it: someone edits or removes the annotation, labels or resources,
//     or a re-registered kubelet zeroes the extended resources (a watch on the one Node wakes the
//     loop).
// A reconcile patches only what differs, so a node whose GPUs stay the same is never rewritten.
//
// GPU faults (health/): what is published is the health tracker's view (health/gpu_health.h):
// discovery's conditions and the XIDs held until they have been quiet for the quiet period, and
// NVLinks that are down taken out of the link matrix. Once the inventory that says so is on the
// Node (so that the scheduler places nothing new there), the fault responder
// (health/fault_responder.h) tells the pods and the Node and applies the fault policy; an
// application XID is told to its pod at once. A GPU that recovers returns without a restart.
//
// One thread runs the loop (Run); the watch's thread only raises a flag. Failures after the first
// discovery (API server unreachable, a failed rediscovery) are logged and retried: the agent keeps
// serving what it last knew.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "agent/discovery/discovery.h"
#include "agent/health/fault_responder.h"
#include "agent/health/gpu_health.h"
#include "agent/publish/advertisement.h"
#include "agent/publish/publisher.h"
#include "k8s/client/http.h"

namespace tessera::agent {

struct NodeAgentOptions {
  std::string node_name;
  // Called with the GPUs as published (health as the tracker holds it) after every successful
  // discovery and every change of health (the delivery into containers follows the GPUs).
  std::function<void(std::shared_ptr<const NodeGpus>)> on_gpus;
  HealthTrackerOptions health;  // the quiet period
  // The fault policy and the node's own record of its pods (node_name is set from the above).
  FaultResponderOptions faults;
  std::chrono::milliseconds rediscover_interval{30'000};
  std::chrono::milliseconds retry_interval{5'000};  // after a failed publish
  // False in DRA mode: the Node does not advertise tessera.dev/gpu, -memory, -compute (the
  // DeviceClass's extendedResourceName serves classic pods through ResourceSlices instead).
  bool extended_resources = true;
};

class NodeAgent {
 public:
  NodeAgent(GpuDiscovery& discovery, k8s::ApiClient& client, NodeAgentOptions options);

  // Runs until `stop`. Errors only from the first discovery (nothing to publish: the caller
  // exits); everything later is logged and retried.
  [[nodiscard]] absl::Status Run(const std::atomic<bool>& stop);

  // Counters, for logs and tests.
  int64_t discoveries() const { return discoveries_.load(); }
  int64_t reconciles() const { return reconciles_.load(); }
  int64_t patch_requests() const { return patch_requests_.load(); }

 private:
  // Logs the tracker's changes; true when there were any.
  static bool LogChanges(const std::vector<HealthChange>& changes);

  GpuDiscovery& discovery_;
  k8s::ApiClient& client_;
  NodeAgentOptions options_;
  NodePublisher publisher_;
  GpuHealthTracker tracker_;
  FaultResponder responder_;
  std::atomic<int64_t> discoveries_{0}, reconciles_{0}, patch_requests_{0};
};

}  // namespace tessera::agent
