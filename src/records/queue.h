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

}  // namespace tessera::records
