// What the planners (core/plan: defragmentation, scale-up) need from a live cluster, read from the
// scheduler's own view of it: the ledger (what the engine holds and where, the nodes that take no
// new pods) and the decoded pods. One owner for `tessera plan --from-cluster` (on a snapshot's
// ledger) and the scheduler (on its live ledger), so both plan on the same thing.
//
//   PlanView view = ViewForPlans(ledger, [&](const std::string& key) { return pods.Find(key); });
//   plan::DefragInput in{.cluster = view.cluster, .running = view.running, ...};
//   for (const WaitingGroup& g : GroupWaiting(pending)) ... g.requests()
//
// Invariants: `running` holds exactly what the engine holds (every accounted pod, then what is
// held on unhealthy GPUs), each at the placement the engine has for it; only pods the planners
// may move are movable: pods with a controller that recreates them after an eviction, not being
// deleted, and not rejected by the caller's filter.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/model/cluster.h"
#include "core/plan/defrag.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

struct PlanView {
  const core::Cluster* cluster = nullptr;  // the ledger engine's (valid while the ledger is)
  std::vector<plan::RunningPod> running;
  std::vector<core::NodeId> cordoned;  // live nodes that take no new pods
};

// `find` gives the decoded pod of a key the engine holds (nullptr: not a pod, e.g. an unhealthy
// GPU's key; held, never moved). `may_move` (optional) can refuse a movable pod (--pin).
PlanView ViewForPlans(const ClusterLedger& ledger,
                      const std::function<const PodInfo*(const std::string& key)>& find,
                      const std::function<bool(const PodInfo&)>& may_move = nullptr);

// What a plan must take as decided beyond what the ledger holds, so that it never counts on room
// promised to others: the pods that will be gone (`gone`: leaving, their room made for pods
// nominated earlier), the pods that will stand where room is promised to them (`arriving`: those
// nominated pods, moved pods' replacements at their held destinations; immovable), and the nodes
// where nothing more may be planned (`full`: the promises there do not fit even so).
struct Promised {
  std::vector<std::string> gone;
  std::vector<plan::RunningPod> arriving;
  std::vector<core::NodeId> full;
};
// `view` with `promised` taken as done: `gone` left out, `arriving` added (immovable), `full`
// counted as taking no new pods.
void ApplyPromised(PlanView& view, Promised promised);

// One pod that waits, or every waiting member of one gang (namespace and tessera.dev/gang).
struct WaitingGroup {
  std::vector<const PodInfo*> pods;
  std::string name;  // "ns/pod", or "ns/gang" for a gang
  bool gang() const { return pods.front()->request.gang.has_value(); }
  std::vector<core::PodRequest> requests() const;
};

// Groups the pods that wait (unbound, not deleting, not gated, readable) into pods and gangs, in
// the order a scheduler would take them: priority (highest first), then creation time, then key.
// A gang is listed once all its waiting members are (a gang with fewer members waiting than its
// size, some already bound or not created, is left out: `incomplete` gets its name); an elastic
// gang (tessera.dev/gang-min) once at least its min wait, the oldest first (the planners plan for
// the min it starts with). See DropRunningGangs for gangs some of whose members run.
std::vector<WaitingGroup> GroupWaiting(const std::vector<const PodInfo*>& pending,
                                       std::vector<std::string>* incomplete = nullptr);

// The gangs ("ns/gang") some of whose members run: of a view's `running`, or of what the ledger's
// engine holds (`find` as for ViewForPlans; no view built: the scale-up signal plans on the
// ledger's engine itself).
std::set<std::string> RunningGangs(const std::vector<plan::RunningPod>& running);
std::set<std::string> RunningGangs(
    const ClusterLedger& ledger, const std::function<const PodInfo*(const std::string& key)>& find);

// Leaves out of `groups` the gangs some of whose members run (RunningGangs): an elastic gang
// running grows into room that frees up, with no plan; a gang restarted is placed where its
// members run. `dropped` (optional) gets their names.
void DropRunningGangs(const std::set<std::string>& running_gangs, std::vector<WaitingGroup>* groups,
                      std::vector<std::string>* dropped = nullptr);

}  // namespace tessera::k8s
