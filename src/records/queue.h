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
//
// And `status.usage`, the queue's decayed usage (fair share that remembers,
// core/queues/usage_history.h), so that a restarted scheduler, and `tessera status`, know what the
// queue held lately (k8s/scheduler/queue_usage_writer.h writes it, its own merge patch):
//
//   status.usage.gpuMilli, gpuMemoryMiB, gpuComputeMilli   integers >= 0, in queue units
//   status.usage.halfLifeSeconds                           the half-life it is kept with (> 0)
//   status.usage.time        RFC 3339 in UTC ("2026-12-01T20:32:05Z"): when it was taken
#pragma once

#include <cstdint>
#include <optional>
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

// A queue's decayed usage as the scheduler last wrote it.
struct QueueUsageStatus {
  std::string queue;
  core::QueueResources usage;
  int64_t half_life_seconds = 0;
  int64_t time_ms = 0;  // milliseconds since the Unix epoch (whole seconds as written)
  bool operator==(const QueueUsageStatus&) const = default;
};

// status.usage of a Queue object: nullopt when it has none; an error naming the field when it
// cannot be read (a reader then keeps no history for the queue: it starts afresh).
[[nodiscard]] absl::StatusOr<std::optional<QueueUsageStatus>> QueueUsageFromObject(
    const nlohmann::json& object);
// The body of a merge patch of the status subresource that writes `usage`.
nlohmann::json QueueUsagePatch(const QueueUsageStatus& usage);
// "2026-12-01T20:32:05Z" <-> milliseconds since the epoch (the writer drops the milliseconds).
std::string FormatUtcSeconds(int64_t time_ms);
[[nodiscard]] absl::StatusOr<int64_t> ParseUtcSeconds(std::string_view text);

}  // namespace tessera::records
