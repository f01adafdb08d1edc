// The Queue custom resource (queues.tessera.dev/v1alpha1, deploy/queue-crd.yaml) as the queues'
// model sees it (core/queues/queue_set.h): a Queue object's spec read into a QueueSpec, with
// errors that name the field. The API server validates the schema; this reader also serves
// queues that people write in files (the simulator's workload), so it checks everything itself.
//
//   spec.parent       the parent queue's name ("" or absent: top level)
//   spec.weight       integer >= 0 (default 1)
//   spec.namespaces   the namespaces whose pods may use the queue (absent or empty: any);
//                     a pod of another namespace naming it is refused, with the reason
//   spec.deserved     {gpu, gpuMemory, gpuCompute}, each optional:
//   spec.limit          gpu: GPUs as a quantity ("2", "2.5", "500m") -> milli-GPU
//                       gpuMemory: bytes as a quantity ("80Gi") -> MiB (deserved rounds down,
//                         limit rounds down: nobody is owed or allowed more than was written)
//                       gpuCompute: percent of one GPU (250) -> milli-GPU (2500)
//
// The status the scheduler writes (QueueStatusJson; printer columns in deploy/queue-crd.yaml make
// `kubectl get queues` show it), in the spec's units so that a person compares them directly:
//
//   status:
//     allocated:  {gpu: "2.5", gpuMemory: 200Gi, gpuCompute: "250"}   what its pods hold
//     fairShare:  {gpu: "3", ...}      deserved, capped by demand and limit, plus its part of
//                                      what others leave (queue_set.h)
//     borrowed:   {gpu: "0", ...}      held beyond deserved
//     pending:    {gpu: "4", ...}      what its waiting pods ask
//     pendingPods: 4
//     message: ...                     only while the Queue is unusable: why
//
// To report something more, add it to QueueStatus and to QueueStatusJson: the scheduler's writer
// (k8s/scheduler/queue_status.h) writes whatever this returns.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/queues/queue_set.h"
#include "nlohmann/json.hpp"

namespace tessera::records {

inline constexpr std::string_view kQueueApiVersion = "tessera.dev/v1alpha1";
inline constexpr std::string_view kQueueKind = "Queue";
// The collection on the API server (cluster-scoped).
inline constexpr std::string_view kQueuesPath = "/apis/tessera.dev/v1alpha1/queues";

// A Queue object (metadata.name, spec).
[[nodiscard]] absl::StatusOr<core::QueueSpec> QueueFromObject(const nlohmann::json& object);
// A spec alone, for a queue named `name` (`path` prefixes error messages: "queues[2].spec").
[[nodiscard]] absl::StatusOr<core::QueueSpec> QueueSpecFromJson(const nlohmann::json& spec,
                                                                const std::string& name,
                                                                const std::string& path);

// What the scheduler reports of a queue.
struct QueueStatus {
  core::QueueResources allocated, fair_share, borrowed, pending;
  int64_t pending_pods = 0;
  std::string message;  // non-empty: the Queue is unusable, and why (the figures are not written)
  bool operator==(const QueueStatus&) const = default;
};

// The `status` object of a Queue (a merge patch's value: fields no longer reported are null).
nlohmann::json QueueStatusJson(const QueueStatus& status);
// "2.5" (GPUs), "200Gi" (GPU memory), "250" or "14.2" (percent of a GPU's compute): resource
// `r` of a QueueResources as the spec writes it.
std::string QueueQuantity(int r, int64_t amount);

}  // namespace tessera::records
