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
// The scheduler writes one thing back, `status.usage`: the queue's decayed usage (fair share that
// remembers, core/queues/usage_history.h), so that a restarted scheduler, and `tessera status`,
// know what the queue held lately (k8s/scheduler/queue_usage_writer.h writes it):
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
