// The scheduler's defragmentation executor (optional, off by default): when a pod of at least
// `min_priority` has waited longer than `after` and a defragmentation plan within `max_moves`
// exists (core/plan/defrag.h, on the scheduler's own ledger read as `tessera plan defrag
// --from-cluster` reads a snapshot: plan_inputs.h), the scheduler carries it out.
//
// What "move" means here: the pods of the plan are evicted through the Eviction API (the API
// server honours their PodDisruptionBudgets and grace periods; PreemptionWriter, the one owner
// of evictions and nominations), the waiting pod is nominated to the node the plan gives it
// (status.nominatedNodeName; Preemption keeps that room for it as it keeps a preemptor's), and
// the evicted pods' controllers (ReplicaSet, Job, StatefulSet, ...) create their replacements,
// which this scheduler places like any pod, where the engine chooses: the plan proved there is
// room for each after the waiting pod lands, but the replacement is a new pod and is not pinned
// to the plan's destination. Only pods with a controller are moved (a bare pod evicted would not
// come back), never gang members or MIG holders, never pods of a higher priority.
//
// Restart safety: a pod nominated with room still being made (its movers terminating) is not
// planned for again, and pods already terminating are never movers, so a restarted scheduler
// (which reads nominations back from status.nominatedNodeName and terminating pods from their
// deletionTimestamp) never evicts twice for one plan. A pod is searched for at most once per
// `after` (a search that found nothing waits that long before the next).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/plan/defrag.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

struct DefragExecutorOptions {
  bool enabled = false;
  int32_t min_priority = 0;                  // pods of a lower priority never trigger a plan
  std::chrono::milliseconds after{300'000};  // how long a pod waits before a plan is sought
  int max_moves = 2;                         // the move budget of one plan
  int64_t max_checks = 20'000;               // sets of pods one search checks at most
};

class DefragExecutor {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit DefragExecutor(DefragExecutorOptions options) : options_(std::move(options)) {}

  bool enabled() const { return options_.enabled; }
  // Whether `pod`, first seen at `first_seen`, may get a search now (priority, wait, pacing).
  bool Eligible(const PodInfo& pod, TimePoint first_seen, TimePoint now) const;

  struct Decision {
    bool found = false;
    std::string node;  // where the waiting pod goes
    std::vector<plan::Move> moves;
    std::string reason;  // the planner's words
  };
  // Searches a plan for `pod` on `ledger` (records the search time for pacing).
  // `may_move` refuses pods that are already leaving.
  Decision Plan(const ClusterLedger& ledger,
                const std::function<const PodInfo*(const std::string&)>& find,
                const std::function<bool(const PodInfo&)>& may_move, const PodInfo& pod,
                const std::function<std::unique_ptr<core::Policy>()>& make_policy,
                const std::vector<core::TopologyLevel>& levels, TimePoint now);
  void Forget(const std::string& key) { searched_.erase(key); }

 private:
  DefragExecutorOptions options_;
  absl::flat_hash_map<std::string, TimePoint> searched_;  // last search per pod
};

}  // namespace tessera::k8s
