// The node agent's publishing loop (`tessera agent`): discover the GPUs, advertise them on the
// node (publish/advertisement.h), and keep the Node in line as things change:
//   - the GPUs change: a critical XID, a GPU lost, MIG instances reconfigured, the description
//     file rewritten (discovery's Wait() wakes the loop), or anything else seen by a periodic
//     rediscovery;
//   - the Node changes under it: someone edits or removes the annotation, labels or resources,
//     or a re-registered kubelet zeroes the extended resources (a watch on the one Node wakes the
//     loop).
// A reconcile patches only what differs, so a node whose GPUs stay the same is never rewritten.
// When a GPU turns unhealthy, every pod whose assignment holds it gets a Warning Event
// (reason GPUUnhealthy) saying which GPU and why.
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
#include "agent/publish/advertisement.h"
#include "agent/publish/publisher.h"
#include "k8s/client/http.h"

namespace tessera::agent {

struct NodeAgentOptions {
  std::string node_name;
  // Called with every successful discovery (the delivery into containers follows the GPUs).
  std::function<void(std::shared_ptr<const NodeGpus>)> on_gpus;
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
  int64_t pod_events() const { return pod_events_.load(); }

 private:
  // Posts a Warning Event to each pod on this node whose assignment holds a GPU in `newly_bad`.
  void TellPodsOnUnhealthyGpus(const NodeGpus& gpus, const std::vector<int>& newly_bad);

  GpuDiscovery& discovery_;
  k8s::ApiClient& client_;
  NodeAgentOptions options_;
  NodePublisher publisher_;
  std::atomic<int64_t> discoveries_{0}, reconciles_{0}, patch_requests_{0}, pod_events_{0};
};

}  // namespace tessera::agent
