// Where the pods moved by a defragmentation plan go (defrag_executor.h). A plan names a
// destination (node and GPUs) for each pod it moves, but a move is an eviction: what comes back is
// a new pod, the replacement its controller creates. MoveHolds keeps each destination for that
// replacement for a bounded time, so that the plan's result is what happens:
//
//  - A replacement is matched as kube's controllers make one: a pod not bound, in the moved pod's
//    namespace, whose controller (the ownerReference with controller: true, "Kind/name") is the
//    moved pod's, asking exactly what the moved pod asked (its PodRequest but for the name: GPUs,
//    GPU memory and compute, CPU, memory, priority, GPU models). A ReplicaSet's or Job's
//    replacement has another name; a StatefulSet's the same name: both match.
//  - Such a pod goes to a matching hold's destination when it fits there (Take ends the hold). When
//    no matching destination is free yet (a pod of the plan is still leaving it), it waits for one
//    while the hold lasts; after that it is placed like any pod.
//  - Other pods of no higher priority than the moved pod are kept out of a destination while its
//    hold lasts (Intrudes): a placement that would leave no room there for the replacement, where
//    there was room before, is refused.
//  - A hold lasts `hold_for` from the eviction, and ends earlier when its replacement takes it or
//    the eviction is refused (a disruption budget: the pod stays, nothing comes back).
//
// A hold is also written on the moved pod (condition tessera.dev/Moving, records/move.h) before its
// eviction: a scheduler that starts while the moved pod is still there (terminating) holds its
// destination again (DefragAnswer::OnPod) until the time written. Once the moved pod is gone, a
// restarted scheduler has no record of the hold: its replacement is placed where the engine
// chooses (the waiting pod's nomination, which keeps its own room, comes back from the API server).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/engine.h"
#include "core/fit.h"
#include "core/model/request.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

class MoveHolds {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Hold {
    std::string moved;       // the moved pod's key
    std::string ns;          // its namespace
    std::string controller;  // its controller, "Kind/name"
    core::PodRequest request;
    std::string node;       // the destination's node
    uint64_t gpu_mask = 0;  // and GPUs (0: none, a pod without GPUs)
    std::string where;      // the destination, for people ("a GPU 3 (20Gi)")
    std::string for_what;   // what the plan made room for ("pod ns/big", "gang ns/train")
    TimePoint until;
  };

  // Holds the destination of `moved` (a bound pod with a controller; pods without one are never
  // moved) until `until`. A second hold for the same pod replaces the first.
  void Add(const PodInfo& moved, const std::string& node, uint64_t gpu_mask, std::string where,
           std::string for_what, TimePoint until);
  // The holds `pod` may take (it is a replacement of their moved pods), oldest first.
  std::vector<const Hold*> Matching(const PodInfo& pod, TimePoint now) const;
  // Ends the hold of the moved pod `moved` (taken by its replacement, or its eviction refused).
  void End(const std::string& moved);
  // Drops the holds past their time; true when any was dropped (their replacements may now go
  // anywhere, and other pods may use the room).
  bool Expire(TimePoint now);
  std::optional<TimePoint> NextExpiry() const;

  // Why `pod`, just placed at `placement` (committed in `ledger`'s engine under pod.key), takes a
  // held destination ("" when it does not): some hold of at least the pod's priority that `pod`
  // does not match had room at its destination without the pod, and has none with it.
  std::string Intrudes(ClusterLedger& ledger, const PodInfo& pod, const core::Placement& placement,
                       TimePoint now) const;
  // Every node except those of the holds `pod` must keep out of (as Intrudes decides who must).
  core::NodeSet NodesOutside(const core::Cluster& cluster, const PodInfo& pod, TimePoint now) const;

  bool empty() const { return holds_.empty(); }
  const std::vector<Hold>& holds() const { return holds_; }

 private:
  static bool Matches(const Hold& h, const PodInfo& pod);
  bool KeepsOut(const Hold& h, const PodInfo& pod, TimePoint now) const;

  std::vector<Hold> holds_;  // in the order they were added
};

}  // namespace tessera::k8s
