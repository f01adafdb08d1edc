// The scheduler's defragmentation executor (optional, off by default): when a pod, or the pending
// members of a gang, of at least `min_priority` has waited longer than `after` and a
// defragmentation plan within `max_moves` exists (core/plan/defrag.h, on the scheduler's own ledger
// read as `tessera plan defrag --from-cluster` reads a snapshot: plan_inputs.h), the scheduler
// carries it out.
//
// What "move" means here: the pods of the plan are evicted through the Eviction API (the API
// server honours their PodDisruptionBudgets and grace periods; PreemptionWriter, the one owner
// of evictions and nominations), the waiting pod (every member of the waiting gang) is nominated
// to the node the plan gives it (status.nominatedNodeName; Preemption keeps that room for it as it
// keeps a preemptor's), and the evicted pods' controllers (ReplicaSet, Job, StatefulSet, ...)
// create their replacements. The plan's destination of each moved pod is held for its
// replacement for `hold_for` (move_holds.h), so that the replacement goes where the plan said
// and the cluster ends as the plan proved it can. A gang is placed as any gang is, all or nothing
// and inside its domain, once the room is made. Only pods with a controller are moved (a bare
// pod evicted would not come back), never gang members or MIG holders, never pods of a higher
// priority.
//
// Restart safety: a pod (a gang) nominated with room still being made (its movers terminating) is
// not planned for again, and pods already terminating are never movers, so a restarted scheduler
// (which reads nominations back from status.nominatedNodeName and terminating pods from their
// deletionTimestamp) never evicts twice for one plan. A pod or gang is searched for at most once
// per `after` (a search that found nothing waits that long before the next).
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
#include "k8s/scheduler/plan_inputs.h"

namespace tessera::k8s {

struct DefragExecutorOptions {
  bool enabled = false;
  int32_t min_priority = 0;                  // pods of a lower priority never trigger a plan
  std::chrono::milliseconds after{300'000};  // how long a pod waits before a plan is sought
  int max_moves = 2;                         // the move budget of one plan
  int64_t max_checks = 20'000;               // sets of pods one search checks at most
  // How long a moved pod's destination is held for its replacement (move_holds.h).
  std::chrono::milliseconds hold_for{120'000};
};

class DefragExecutor {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit DefragExecutor(DefragExecutorOptions options) : options_(std::move(options)) {}

  bool enabled() const { return options_.enabled; }
  const DefragExecutorOptions& options() const { return options_; }
  // Whether `members` (one pod, or the members of one gang: all of them pending, none running),
  // searched for under `key` (the pod's key, or the gang's "ns/gang"), may get a search now:
  // priority (the first member's), no claims, no MIG, waited since `since` (for a gang: since its
  // last member was first seen) at least `after`, and no search for `key` within `after`.
  bool Eligible(const std::string& key, const std::vector<const PodInfo*>& members, TimePoint since,
                TimePoint now) const;

  struct Decision {
    bool found = false;
    std::vector<std::string> nodes;  // where each member goes (member order)
    std::vector<plan::Move> moves;
    std::string reason;  // the planner's words
  };
  // Searches a plan for `members` on `ledger` with `promised` taken as done (plan_inputs.h: the
  // room kept for earlier nominations and moved pods' replacements is never counted on; records
  // the search time of `key` for pacing). `may_move` refuses pods that are already leaving.
  Decision Plan(const ClusterLedger& ledger, Promised promised,
                const std::function<const PodInfo*(const std::string&)>& find,
                const std::function<bool(const PodInfo&)>& may_move, const std::string& key,
                const std::vector<const PodInfo*>& members,
                const std::function<std::unique_ptr<core::Policy>()>& make_policy,
                const std::vector<core::TopologyLevel>& levels, TimePoint now,
                std::vector<plan::DefragInput::Held> held = {});
  void Forget(const std::string& key) { searched_.erase(key); }

 private:
  DefragExecutorOptions options_;
  absl::flat_hash_map<std::string, TimePoint> searched_;  // last search per pod or gang
};

}  // namespace tessera::k8s
