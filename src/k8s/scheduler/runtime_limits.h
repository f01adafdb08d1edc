// Declared run times enforced (issue 31): a pod that declared a maximum run time
// (PodInfo::max_runtime_s: tessera.dev/max-runtime, or spec.activeDeadlineSeconds) and still runs
// `grace` after status.startTime plus that time is due for eviction. The scheduler does it (its
// leader, at the start of each cycle: SchedulerCore evicts what Due returns through the Eviction
// API, with a Warning Event MaxRuntimeExceeded, counted in
// tessera_scheduler_max_runtime_evictions_total), so that a pod that backfilled reserved room
// cannot keep it past the time it declared. The kubelet also ends a pod at its
// activeDeadlineSeconds (phase Failed, DeadlineExceeded); the annotation is enforced only here.
// On with reservations (reservations.max > 0), for this scheduler's pods only; a pod being deleted
// (an eviction under way) is no longer tracked.
//
// A pod is due once; asked again every `retry` while it is still there (an eviction a disruption
// budget refused, say). A pod without status.startTime has not started: nothing is due. Pure:
// times are Unix seconds passed in. Not thread-safe: the scheduler thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

class RuntimeLimits {
 public:
  RuntimeLimits(int64_t grace_s, int64_t retry_s) : grace_s_(grace_s), retry_s_(retry_s) {}

  // The pod as the API server shows it now: tracked while it is bound, started and declares a
  // run time; else no longer.
  void OnPod(const std::shared_ptr<const PodInfo>& pod);
  void Forget(const std::string& key);

  // The pods due at `now` (each then waits `retry` before it is due again).
  std::vector<std::shared_ptr<const PodInfo>> Due(int64_t now);
  // When the next pod falls due (nullopt: none tracked).
  std::optional<int64_t> Next() const;
  size_t size() const { return pods_.size(); }

  // When `pod` (started, declaring a run time) is due: start + run time + grace.
  int64_t DueAt(const PodInfo& pod) const {
    return pod.started_unix + *pod.max_runtime_s + grace_s_;
  }

 private:
  struct Tracked {
    std::shared_ptr<const PodInfo> pod;
    int64_t due = 0;
  };
  int64_t grace_s_;
  int64_t retry_s_;
  absl::flat_hash_map<std::string, Tracked> pods_;
  std::set<std::pair<int64_t, std::string>> by_due_;
};

}  // namespace tessera::k8s
