// Delivering a pod's assignment into its containers through NRI (src/agent/README.md "Delivering
// the assignment"): the NRI handler that hands the pod sandbox the runtime passes on every
// CreateContainer to the pod manager (pods/pod_manager.h), which reads the pod's
// tessera.dev/assignment and returns the container's edits (edits/container_edits.h, the decision
// DRA mode's CDI specs write too: devices, environment, the record, the driver and the CUDA shim,
// MPS), and turns them into NRI's container adjustment (AdjustmentFor: the NRI renderer). Exact by
// construction: what a container gets is read from its own pod's record, which the API server wrote
// together with spec.nodeName (the Binding), so two pods created at once can never swap GPUs. Every
// container of the pod gets the pod's GPUs (NRI does not say which containers asked for them).
//
// A record that cannot be honoured fails the container's creation with a message that says why
// (the kubelet shows it as an Event and retries); the pod never gets another GPU. A pod without a
// record gets nothing, and a container of such a pod that asks the NVIDIA container runtime for
// GPUs through NVIDIA_VISIBLE_DEVICES gets "void" instead (namespaces in `exempt_namespaces`,
// such as the GPU operator's monitoring, keep theirs). StopPodSandbox (every container of the pod
// stopped: a finished pod) and RemovePodSandbox release the pod in the pod manager (its files,
// segments and MPS share go, and its GPUs are free for the next pod the scheduler puts there);
// Synchronize hands it the pods that still have a container that is not stopped.
#pragma once

#include <atomic>
#include <set>
#include <string>

#include "agent/edits/container_edits.h"
#include "agent/nri/plugin.h"
#include "agent/pods/pod_manager.h"

namespace tessera::agent {

struct DeliveryOptions {
  std::set<std::string> exempt_namespaces = {"kube-system", "tessera-system", "gpu-operator",
                                             "nvidia-gpu-operator"};
};

// The NRI renderer: the adjustment that carries `edits`.
nri::ContainerAdjustment AdjustmentFor(const ContainerEdits& edits);

class Delivery : public nri::NriHandler {
 public:
  Delivery(DeliveryOptions options, PodManager& pods);

  absl::StatusOr<nri::ContainerAdjustment> CreateContainer(const nri::PodSandbox& pod,
                                                           const nri::Container& c) override;
  void Synchronize(const std::vector<nri::PodSandbox>& pods,
                   const std::vector<nri::Container>& containers) override;
  void StopPodSandbox(const nri::PodSandbox& pod) override;
  void RemovePodSandbox(const nri::PodSandbox& pod) override;

  int64_t delivered() const { return delivered_.load(); }
  int64_t refused() const { return refused_.load(); }

 private:
  DeliveryOptions options_;
  PodManager& pods_;
  std::atomic<int64_t> delivered_{0}, refused_{0};
};

}  // namespace tessera::agent
