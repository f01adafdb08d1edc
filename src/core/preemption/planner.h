// Preemption and reclaim planning: which running pods to evict so that a pod (or a whole gang)
// that cannot be placed now fits, with the fewest evictions. Pure: it asks the engine's what-if
// (Engine::Decide with Ask::without) and the queues' rules (QueueSet::MayReclaim,
// KeepsDeserved) and changes neither. The live scheduler and the simulator both plan with it.
//
// Who may be a victim of a preemptor of priority P in queue Q:
//  - preemption: a pod of Q with priority below P;
//  - reclaim: a pod of another queue when Q may reclaim from it (Q stays within its deserved
//    share with the preemptor, the other queue is above its own), whatever its priority, and
//    only so far that no queue is taken below its deserved share.
// A victim that belongs to a running gang is evicted with every other member or not at all; a
// gang with a member that may not be a victim is no candidate. An elastic gang (gang_min) running
// more than its min members is the exception: each member above the min (the newest, by
// `created`) may also be evicted alone, so that it shrinks to no fewer than min members; its
// core of min members still goes only with the whole gang. Its members above the min are tried
// as victims before the whole gang (the whole gang is reprieved first).
//
// An elastic gang as the preemptor (GangAsk::min below its size) makes room only for the members
// it needs to run (PreemptionMembers): a gang not running yet for its first min members, together
// (in one domain when it asks), so the victims are the fewest that let it start; a gang running
// fewer than its min (members lost) for the ones it lacks, in its running members' domain
// (Engine::PlaceElasticGang decides where); a gang running at least its min evicts nobody to
// grow: its other members wait for room that frees up. The gang's own members are never its
// victims. Example: size 8, min 4, nothing running, one 8-GPU server full of low-priority
// single-GPU pods: 4 of them are evicted, not 8; the gang starts with 4 and the other members
// join as the remaining pods end. Pods already terminating
// (evicted earlier, by us or anyone) are counted as gone at no cost: a restarted scheduler finds
// the plan it had made and evicts nobody twice. Disruption budgets (PodDisruptionBudgets,
// PreemptionRequest::budgets: the evictions each allows now) cap how many of their pods one plan
// may evict, counting every victim of the plan: a pod whose budget allows none is no candidate
// (nor is its gang), and when the fewest victims on a node would take more of a budget's pods
// than it allows, only that many of them stay candidates and the search there runs again, so the
// plan goes around protected pods (other victims, another node, or no plan) instead of relying
// on the Eviction API to refuse one part-way. Pods leaving whose room earlier plans count on
// (RunningPod::claimed) are neither candidates nor room. The queue rule counts every pod leaving
// (terminating or claimed) as gone from its queue: plans made one after another in one pass
// never take a queue below its deserved share together.
//
// The search. One pod: for every node holding candidates (or terminating pods), every candidate
// there is taken away at once; if the pod then fits on the node, the candidates are given back
// one at a time, in the order below, as long as it still fits (a candidate it can do without is
// reprieved). The node whose remaining victims are fewest wins; ties to the lower highest victim
// priority, then fewer victims of other queues, then the lower node id. Reprieve order (kept
// first): pods under a disruption budget, higher priority, smaller GPU usage (so that one large
// pod is evicted rather than many small ones), then name. A gang: every candidate in the cluster
// is taken away; if the gang then fits, the search narrows to the nodes it landed on and the
// candidates there are reprieved the same way. A plan that would break a budget or take a queue
// below its deserved share is refused. Nobody is evicted for a pod that would still not fit.
//
// Example: node a holds four 20Gi shares of priority 0 on GPU 0 and a whole-GPU pod of priority
// 10 on GPU 1; node b holds one whole-GPU pod of priority 0 and a 10Gi share of priority 0. A
// whole-GPU pod of priority 5 of the same queue: on a the four shares must go (the priority-10
// pod may not), on b the whole pod alone (the share is reprieved): b, one victim.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/engine.h"
#include "core/queues/queue_set.h"
#include "core/queues/resources.h"

namespace tessera::core {

// A running pod as the planner sees it. Its placement is the engine's (by name).
struct RunningPod {
  std::string name;
  std::string queue;
  int32_t priority = 0;
  std::string gang;    // "" none; members of one gang go together
  std::string budget;  // the disruption budget covering it ("" none)
  bool terminating = false;
  // Leaving (terminating), but the room it leaves is promised to pods nominated earlier (several
  // preemptors planned in one pass: each sees the earlier plans' nominations and victims as
  // decided): neither a candidate nor room for this plan. Its queue's share counts it gone.
  bool claimed = false;
  // Elastic gangs (GangAsk::min): the fewest members the gang runs with (0: all of them), and
  // the order of its members (metadata.creationTimestamp): the newest are above the min.
  int32_t gang_min = 0;
  std::string created;
};

struct PreemptionRequest {
  std::span<const PodRequest> members;  // one pod, or every member of a gang
  std::string queue;
  int32_t priority = 0;
  QueueResources demand;  // what the members will hold (for the reclaim rule)
  // The nodes it (every member of a gang) may use at all (nullptr: any), as for Engine::Place.
  const NodeSet* nodes = nullptr;
  // Evictions each budget allows now (a budget missing here allows none).
  absl::flat_hash_map<std::string, int64_t> budgets;
  // The names of the gang's members placed earlier (the engine's), when some run: an elastic
  // gang, or any gang some of whose members run, plans for the members it needs next only
  // (PreemptionMembers), where those run.
  std::span<const std::string> gang_running;
};

// How many of a gang's pending members preemption makes room for, given `running` of its members
// placed: an elastic gang (or one some of whose members run) the ones it lacks to reach its min
// (at least 1), none when it runs at least its min (it grows only into free room); any other gang
// all `pending` of them. The planner and the scheduler both ask this.
int PreemptionMembers(const GangAsk& gang, int running, int pending);

struct PreemptionPlan {
  bool found = false;
  std::vector<std::string> victims;  // to evict now (gang members together), sorted
  std::vector<std::string> awaited;  // terminating pods on the chosen nodes the plan counts on
  // Where the members would go, in member order: all of them, or an elastic gang's first
  // PreemptionMembers (the others get room only as it frees up).
  std::vector<PlacementResult> placements;
  std::vector<NodeId> nodes;  // the nodes to nominate (the placements' nodes)
  std::string reason;         // why no plan (when !found)
};

class PreemptionPlanner {
 public:
  // Both must outlive the planner; neither is changed by planning.
  PreemptionPlanner(Engine& engine, QueueSet& queues) : engine_(engine), queues_(queues) {}

  // A plan for `request`, given every running pod the engine holds (pods the engine does not
  // hold are ignored).
  PreemptionPlan Plan(const PreemptionRequest& request, std::span<const RunningPod> running);

 private:
  // Pods that go (and come back) together.
  struct Unit {
    std::vector<int> pods;  // indexes into the running pods
    std::vector<NodeId> nodes;
    int32_t priority = 0;  // the highest of its pods
    int64_t usage = 0;     // milli-GPU held
    bool budgeted = false;
    bool reclaim = false;  // of another queue
    // An elastic gang's member above its min (alone, also in the gang's unit), or the gang's
    // whole unit when it has such members: reprieved just before them (order_usage: the
    // smallest of theirs).
    int elastic = 0;  // 0 none, 1 the whole gang, 2 a member above the min
    int64_t order_usage = 0;
  };
  struct Context;
  // The units `candidates` minus those reprieved while `fits` stays true (all of them taken
  // away must fit). Appends the remaining victims to *victims.
  template <typename Fits>
  void Reprieve(Context& ctx, std::vector<int> candidates, Fits fits, std::vector<int>* victims);
  // Reprieve, kept within the disruption budgets: while the victims take more of some budget's
  // pods than it allows, only that many of its units stay candidates (those the reprieve gave up
  // last) and the search runs again. False when the candidates left no longer make room.
  template <typename Fits>
  bool ReprieveWithinBudgets(Context& ctx, std::vector<int> candidates, Fits fits,
                             std::vector<int>* victims);
  // Whether evicting `victims` (units) keeps every budget and every queue's deserved share.
  bool Allowed(Context& ctx, std::span<const int> victims, std::string* why);

  // The steps of Plan, in order.
  // Candidate units: every running pod the preemptor may evict (Eligible, BudgetAllows), gangs
  // as one unit, an elastic gang's members above its min also alone; a reclaim unit that alone
  // would take its queue below its deserved share is dropped. Fills ctx.units and units_on.
  void CollectUnits(Context& ctx, const absl::flat_hash_set<std::string_view>& own);
  bool Eligible(Context& ctx, const RunningPod& pod);
  bool BudgetAllows(Context& ctx, const RunningPod& pod);
  // Bounds: what taking every candidate and terminating pod away could free at most, per node
  // and GPU (ctx.room), and CouldFit, the necessary condition it gives before any what-if.
  void BoundRoom(Context& ctx);
  bool CouldFit(const Context& ctx, int n, const PodRequest& ask, bool now) const;
  // Node search for one pod: the nodes in order of their lower bounds, the best plan by
  // (victims, highest victim priority, reclaim victims, node). False (plan->reason set) when
  // there is none.
  bool PlanPod(Context& ctx, const PodRequest& pod, PreemptionPlan* plan);
  // Gang widening: the gang tried on more and more of the cheapest nodes with their candidates
  // gone, then narrowed to where it landed and reprieved there.
  bool PlanGang(Context& ctx, std::span<const PodRequest> members, bool partial,
                PreemptionPlan* plan);
  // Sets plan->reason to `reason` and what held the search back (budgets, the reclaim rule).
  static bool NoPlan(const Context& ctx, std::string reason, PreemptionPlan* plan);

  Engine& engine_;
  QueueSet& queues_;
};

}  // namespace tessera::core
