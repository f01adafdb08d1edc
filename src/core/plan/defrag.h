// Defragmentation plans: for a pod or gang that waits because what is free is scattered, the
// smallest set of pod moves (which pods, from where, to where) after which it fits.
//
// A plan is a set M of running, movable pods and a destination for each, such that after M
// leaves, the target is placed (inside one site, below) and every pod of M is placed again: the
// cluster then holds everything it held plus the target. Plans are ranked by the number of moves
// first, then by the whole GPUs the moved pods hold (moving a 4Gi share disturbs less than
// moving an 8-GPU job), then by the order of the search (deterministic). A plan names every
// destination: an executor evicts M and places each pod where the plan says.
//
// Every fit decision is the engine's (core::Engine: Place, PlaceGang, Restore): the planner
// only chooses which pods leave and which destinations to try. It runs on a scratch engine of
// its own, so the caller's engine and policy state are never touched.
//
// The search. The target lands in one site: a node for a single pod, a domain of the gang's
// level for a gang that requires one, the whole cluster for another gang. For k = 1, 2, ... up
// to the move budget, and for each site, it tries sets S of k' <= k movable pods of the site
// (the target must fit in the site once S is gone: checked once per S, so sets that cannot
// make room are pruned with everything built on them), completed by k - k' pods from outside
// the site (chains: a pod of S may need another pod to move out of its way; for each k, sets
// without chains are tried at every site first). A set is checked
// with the engine's own choices first (target, then movers largest first); if they fail, every
// destination is tried in turn (backtracking over the nodes and GPU sets that the engine
// accepts), up to a per-check limit. Sets costing no less than the best plan of this size are
// skipped. The first k with a plan gives the minimum; a search that stopped at its limits says
// so (`proven_minimal` false). Example: two 4-GPU servers; a holds three 20Gi shares (GPUs 0..2),
// b one (GPU 0); a 4-GPU pod waits. Site a needs 3 moves; site b needs 1: its share moves to
// a's free GPU 3 (or beside one of a's shares), and the pod takes b. The plan: 1 move.
//
// An elastic gang (GangAsk::min below its size) starts once its min members fit together
// (Engine::PlaceElasticGang): the plan makes room for its first min members only (the oldest, in
// one domain when it asks), and DefragPlan::starts_with says so; its other members join as room
// frees up, with no moves. Example: a gang of size 8 and min 4 of whole GPUs in one NVLink domain,
// on two 8-GPU servers each holding five single-GPU pods: one move (a pod from one server to the
// other) frees 4 GPUs of one server, where no set of moves makes room for all 8 (10 pods and 8
// members on 16 GPUs).
//
// Reservations: GPUs held for a waiting pod or gang (DefragInput::held) take no moved pod, and the
// target only where it may take them; the search is otherwise the same (its sites and
// destinations are cut to what is not held).
//
// Hot spares (DefragInput::spares_per_domain, the scheduler's spareGpusPerDomain): the scratch
// engine keeps them as the scheduler's does (Engine::KeepSpares), so no pod is moved onto a spare
// and the target takes one only where the engine would give it one (a gang replacing a lost
// member); a pod that fits only where spares are kept needs capacity, not moves.
//
// What is movable: pods the caller marks movable, of no higher priority than the target (unless
// DefragOptions::move_higher_priority). Gang members and pods holding a MIG instance
// are never moved (moving one member alone can break its gang's domain; a MIG instance moved is
// a re-partition, planned elsewhere). A MIG target is refused (InvalidArgument).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine.h"
#include "core/model/cluster.h"
#include "core/model/placement.h"
#include "core/model/request.h"
#include "core/policy/policy.h"
#include "core/topology/domains.h"

namespace tessera::plan {

// A pod that runs now, where it runs, and whether a plan may move it.
struct RunningPod {
  core::PodRequest request;
  core::Placement placement;
  bool movable = true;
};

struct DefragInput {
  const core::Cluster* cluster = nullptr;
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  // Makes the policy of the planner's scratch engine (the scheduler's policy, fresh).
  std::function<std::unique_ptr<core::Policy>()> make_policy;
  std::vector<RunningPod> running;
  // Nodes that take no new pods (cordoned; a live cluster's nodes whose GPUs are blocked): what
  // runs there stays and may be moved away, nothing is moved or placed there.
  std::vector<core::NodeId> cordoned;
  // One pod, or every member of one gang (all with the same GangAsk), the oldest first: an
  // elastic gang is planned for its first min members.
  std::vector<core::PodRequest> target;
  // Room held by reservations (core/reservations/reservations.h): no pod is moved onto these
  // GPUs, and the target lands on them only where `target_may_take` (its own reservation's: the
  // plan then makes room where its room is kept; or room it outranks or backfills). A plan may
  // move pods off held GPUs. Empty: nothing is held.
  struct Held {
    core::Candidate gpus;
    bool target_may_take = false;
  };
  std::vector<Held> held;
  // Hot spares per NVLink domain (Engine::KeepSpares), kept on the scratch engine before the
  // running pods are restored, as the scheduler keeps them; 0: none.
  int spares_per_domain = 0;
};

struct DefragOptions {
  int max_moves = 4;             // the move budget
  int64_t max_checks = 200'000;  // sets of pods checked before the search stops
  int64_t max_tries = 5'000;     // destinations tried per set beyond the engine's own choices
  // Pods of a higher priority than the target are not moved for it, unless this is set.
  bool move_higher_priority = false;
};

struct Move {
  std::string pod;
  core::Placement from;
  core::Placement to;
  int whole_gpus = 0;  // GPUs the pod holds whole (0 for a share)
};

enum class DefragVerdict {
  kFitsNow,        // nothing to move: the target fits as things are
  kPlan,           // `moves`, then the target fits
  kOverBudget,     // a plan needs more moves than the budget (every smaller set was checked)
  kSearchLimit,    // the search stopped at max_checks before finding a plan within the budget
  kNeedsCapacity,  // impossible without more capacity: even with every movable pod gone
};

struct DefragPlan {
  DefragVerdict verdict = DefragVerdict::kOverBudget;
  std::vector<Move> moves;
  // Where the target goes (member order) after the moves; empty unless kFitsNow or kPlan. An
  // elastic gang: its first starts_with members only.
  std::vector<core::Placement> target;
  int starts_with = 0;  // an elastic gang: the members it starts with (its min); 0 otherwise
  std::string reason;   // for people, always set
  bool proven_minimal = false;  // every smaller set was checked completely
  int whole_gpus_moved = 0;
  int64_t checks = 0;  // sets of pods checked
};

std::string_view VerdictName(DefragVerdict v);  // "fits-now", "plan", ...

// InvalidArgument when the input is inconsistent (running pods that do not fit the cluster
// together, a target named like a running pod, members of different gangs, a MIG target).
[[nodiscard]] absl::StatusOr<DefragPlan> PlanDefrag(const DefragInput& input,
                                                    const DefragOptions& options = {});

// Where a pod is, for people: "dgx-0 GPU 5 (20Gi)", "dgx-0 GPUs 0,1,2,3", "cpu-0 (no GPU)".
std::string DescribePlacement(const core::Cluster& cluster, const core::Placement& p);

// Makes the nodes of `cordoned` take no new pods in a planner's scratch engine (after the running
// pods are restored: what runs there stays). InvalidArgument for an id that is no live node.
[[nodiscard]] absl::Status Cordon(core::Engine& engine, const std::vector<core::NodeId>& cordoned);

}  // namespace tessera::plan
