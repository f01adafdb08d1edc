// The scheduler's ledger: the engine over the nodes the API server shows, and what every pod
// holds in it. It owns applying node changes to the engine and restoring what pods hold, the
// nodes each pod may use (taints, node selectors, node affinity), and the nodes whose GPUs take
// no new pods.
//
// Node changes are applied in place (Engine::ChangeNodes), batched until the next decision
// (Sync): one node at a time, 10,000 at once on start, and the engine's policy keeps what it
// learned. A node whose labels or taints change only has its membership of the allowed sets
// (kept per distinct pod constraints, from a label index) redone and is re-evaluated; a node
// whose capacity or GPUs change gives up its pods, which are restored on the new spec at once.
//
// Invariants:
//  - the engine holds exactly the pods held here that it could account: bound pods (as the API
//    server says, from their tessera.dev/assignment, or CPU and memory only for pods without
//    one), and the pods this scheduler placed and is binding. Whenever pods are restored
//    together, bound pods go first, then those being bound, so a restarted scheduler, whose
//    first list restores every bound pod, never grants a GPU twice;
//  - a bound pod whose GPUs cannot be accounted (its record unreadable, naming another node, or
//    in conflict with what others hold) blocks its node for GPU pods until it is gone or
//    readable: its GPUs are never treated as free (on_blocked is told, the metrics say so);
//  - cordoned nodes stay in the engine with their pods and take no new ones;
//  - a GPU the agent marked unhealthy takes no new pods: what is free on it is held in the
//    engine under a key of its own (UnhealthyKey), after the pods are restored and again
//    whenever a pod on its node leaves, so pods already there keep their GPU and nothing is
//    placed beside them;
//  - every cached allowed set says, for every node in the engine, exactly what NodeAllows says
//    (and excludes GPU-blocked nodes for GPU pods).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/engine.h"
#include "core/model/cluster.h"
#include "core/preemption/planner.h"
#include "core/queues/queue_set.h"
#include "core/reservations/reservations.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/node_index.h"
#include "k8s/scheduler/objects.h"
#include "records/assignment.h"

namespace tessera::k8s {

enum class Change { kAdded, kUpdated, kDeleted };

// The engine key under which the free part of an unhealthy GPU is held.
std::string UnhealthyKey(const std::string& node, int gpu);

// What a pod holds (or should hold) in the engine.
struct Holding {
  std::string node;
  // The GPUs, as the tessera.dev/assignment record names them (records converts to and from
  // engine placements); no GPUs for a pod that asks none.
  records::Assignment gpus;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  // Non-empty: why the pod's GPUs cannot be known (its record is unreadable or names another
  // node); they are not in `gpus`, and the node takes no GPU pods while the pod is there.
  std::string unreadable;
  bool operator==(const Holding&) const = default;

  // What a bound pod holds, from its spec.nodeName and tessera.dev/assignment.
  static Holding OfBoundPod(const PodInfo& pod);
};

struct LedgerOptions {
  std::string policy = std::string(core::kDefaultPolicy);
  uint64_t seed = 1;
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  int spare_gpus_per_domain = 0;  // core::Engine::KeepSpares
};

class ClusterLedger {
 public:
  // A bound pod's GPUs cannot be accounted: `why`, and the node it blocks.
  using OnBlocked =
      std::function<void(const std::string& key, const std::string& node, const std::string& why)>;

  // The policy must exist (core::CreatePolicy). `metrics` may be null.
  ClusterLedger(LedgerOptions options, SchedulerMetrics* metrics, OnBlocked on_blocked);

  // --- nodes ---
  // Returns true when the change could make a pending pod fit.
  bool OnNode(Change change, std::shared_ptr<const NodeInfo> node);
  // Brings the engine up to date with the nodes (before deciding).
  void Sync();
  // Counts of Syncs that changed the engine's nodes, and of those that also released or restored
  // pods' placements (what a pod holds in the engine may differ from before).
  uint64_t node_changes_applied() const { return node_changes_applied_; }
  uint64_t holdings_moved() const { return holdings_moved_; }

  // Why `pod` (bound) counts as lost to a GPU fault: a GPU of its assignment is unhealthy in its
  // node's inventory ("GPU 2 of node n1 is unhealthy"), or its node is gone; "" when neither
  // (gang_restarts.h).
  std::string FaultOf(const PodInfo& pod) const;

  // What the spare rule (LedgerOptions::spare_gpus_per_domain) costs on these nodes, for the
  // operator, or "" when nothing: servers whose NVLink domains are their own (unlabelled ones)
  // keep spares out of every pod's reach, so a pod asking more than what is left never fits on
  // them ("spareGpusPerDomain 1: 12 servers of 8 GPUs (dgx-0, ...) keep 1 spare each: a pod
  // asking more than 7 GPUs never fits on them ...").
  std::string SpareRuleWarning() const;

  // --- what pods hold ---
  // Records what `key` holds and accounts it in the engine (now, or at the next Sync). `bound`:
  // the API server says so (restored before pods being bound). Returns false if it could not
  // be accounted now (the node is not in the engine, or a conflict: then the node is blocked).
  bool Hold(const std::string& key, Holding holding, bool bound);
  // Placed by this scheduler through Decide/DecideGang: already in the engine.
  void HoldPlaced(const std::string& key, const core::Placement& placement);
  // Frees what `key` holds. True if the engine held something for it (room was freed).
  bool Drop(const std::string& key);
  const Holding* Find(const std::string& key) const;
  // Held and accounted in the engine.
  bool Accounted(const std::string& key) const;
  // Every key the engine holds something under: the pods accounted, then the keys holding what
  // is free on unhealthy GPUs (UnhealthyKey); sorted within each part.
  std::vector<std::string> EngineKeys() const;

  // --- deciding ---
  struct Allowed {
    core::NodeSet nodes;
    std::string none;  // why no node is allowed (empty when some are)
  };
  // The nodes `pod` may use (taints, node selector, affinity, GPU-blocked nodes); nullptr when
  // it may use every node. Shared by pods with equal constraints.
  std::shared_ptr<const Allowed> AllowedFor(const PodInfo& pod);
  // The same for constraints, and whether the pod takes GPUs (GPU-blocked nodes excluded).
  std::shared_ptr<const Allowed> AllowedFor(const NodeConstraints& constraints, bool gpus);
  // The engine's decision for one pod (committed when placed; HoldPlaced records it).
  core::PlacementResult Decide(const PodInfo& pod);
  // The same under `reservations` (core::Reservations::Place at `now` with `request`, the pod's
  // own with its owner named as the reservations name it, and the pod's declared run time):
  // held room only for its owner, a higher priority or a backfill pod. `how` says which.
  core::PlacementResult DecideReserved(const PodInfo& pod, const core::PodRequest& request,
                                       const core::Reservations& reservations, int64_t now,
                                       core::Admission* how);
  // All members or none (committed when placed).
  std::vector<core::PlacementResult> DecideGang(const std::vector<const PodInfo*>& members,
                                                const std::string& gang_key);
  // A gang's next members (Engine::PlaceElasticGang: elastic gangs, and gangs some of whose
  // members already run): `members` pending, oldest first; `running` the keys of its members
  // placed earlier. The members placed are committed (HoldPlaced follows); the others fail.
  // With `reserved`, under the reservations (core::Reservations::PlaceGang at `now`, the members
  // as the reservations name them and their declared run times): a gang keeps off room held for
  // another where it fits elsewhere.
  struct Reserved {
    const core::Reservations& reservations;
    std::span<const core::PodRequest> owners;
    std::span<const std::optional<int64_t>> max_runtime_s;
    int64_t now = 0;
  };
  std::vector<core::PlacementResult> DecideGangMembers(const std::vector<const PodInfo*>& members,
                                                       const std::vector<std::string>& running,
                                                       const std::string& gang_key,
                                                       const Reserved* reserved = nullptr);
  // DRA mode: the engine's decision for `request` (the pod's, with the GPUs its claims ask),
  // restricted to `candidates` (nodes and GPUs), or `nodes`, besides the pod's own constraints
  // (committed when placed, under request.name; HoldPlaced or Unplace follows).
  core::PlacementResult DecideWith(const PodInfo& pod, const core::PodRequest& request,
                                   const std::vector<core::Candidate>* candidates,
                                   const core::NodeSet* nodes);
  // DecideGang with the members' requests given, within `candidates` (nullptr: anywhere).
  std::vector<core::PlacementResult> DecideGangWith(const std::vector<const PodInfo*>& members,
                                                    std::vector<core::PodRequest> requests,
                                                    const std::string& gang_key,
                                                    const std::vector<core::Candidate>* candidates);
  // Takes back a placement DecideWith or DecideGangWith committed and nobody holds.
  void Unplace(const std::string& key);
  // The assignment record of a placement (node name, GPU UUIDs, MIG names).
  Holding HoldingOf(const core::Placement& placement) const;

  // --- what-ifs (preemption, defragmentation's held destinations) ---
  // Each leaves the engine exactly as it found it: nothing is recorded, and the pods treated as
  // gone are put back. The engine is the ledger's alone; planners ask here.
  //
  // The engine's decision for `request` were the pods `without` gone, within `candidates`
  // (nodes and GPUs; nullptr: every node) and `nodes` (nullptr: no node excluded).
  core::PlacementResult WhatIf(const core::PodRequest& request,
                               std::span<const std::string> without,
                               const std::vector<core::Candidate>* candidates,
                               const core::NodeSet* nodes = nullptr);
  // The same for the members of one gang, all or none (Engine::PlaceGang's rules).
  std::vector<core::PlacementResult> WhatIfGang(std::span<const core::PodRequest> members,
                                                std::span<const std::string> without,
                                                const std::vector<core::Candidate>* candidates);
  // Preemption's plan (core/preemption/planner.h) on this engine, with `queues` for reclaim.
  core::PreemptionPlan PlanPreemption(core::QueueSet& queues,
                                      const core::PreemptionRequest& request,
                                      std::span<const core::RunningPod> running);

  const core::Engine& engine() const { return *engine_; }
  // The nodes whose hot spares may have changed since the last call (Engine::TakeSpareChanges).
  std::vector<core::NodeId> TakeSpareChanges() { return engine_->TakeSpareChanges(); }
  // Per-node GPU gauges for /metrics.
  void PublishMetrics();

 private:
  struct Entry {
    Holding holding;
    bool bound = false;
    bool accounted = false;
    std::string blocks;  // the node it blocks ("" none)
  };

  // Holds what is free on the unhealthy GPUs of `node` (and releases what was held for GPUs
  // that are healthy again).
  void HoldUnhealthy(const std::string& node);
  // Applies the pending node changes to the engine.
  void ApplyNodeChanges();
  // Restores the entries of `keys` not accounted yet: bound pods first.
  void RestoreAll(const std::vector<std::string>& keys);
  // Redoes node `id`'s membership of every cached allowed set; true if some set changed.
  bool Reclassify(int id);
  bool Restore(const std::string& key, Entry& e);
  void Block(const std::string& key, Entry& e, const std::string& node, const std::string& why);
  void Unblock(const std::string& key, Entry& e);
  void PublishBlocked();
  // Where a gang's members may go, as the engine takes it: `set` when one allowed set covers
  // every member (they share their constraints: the engine's domain index stays in use), else
  // `list` (members with different constraints, or DRA candidates: their intersection), else
  // anywhere. `none` says why no node is allowed (then the gang fails without asking the engine).
  struct GangNodes {
    std::shared_ptr<const Allowed> set;
    std::optional<std::vector<core::Candidate>> list;
    std::string none;
    const core::NodeSet* nodes() const { return set ? &set->nodes : nullptr; }
    const std::vector<core::Candidate>* candidates() const { return list ? &*list : nullptr; }
  };
  GangNodes GangAllowed(const std::vector<const PodInfo*>& members,
                        const std::vector<core::PodRequest>& requests, const std::string& gang_key,
                        const std::vector<core::Candidate>* candidates);

  LedgerOptions options_;
  SchedulerMetrics* metrics_;
  OnBlocked on_blocked_;

  struct AllowedSet {
    NodeConstraints constraints;
    bool gpus = false;  // excludes GPU-blocked nodes
    std::shared_ptr<Allowed> set;
  };

  // What the engine has, by node name (its NodeInfo as applied) and id.
  std::map<std::string, std::shared_ptr<const NodeInfo>> nodes_;
  absl::flat_hash_map<std::string, core::NodeId> ids_;
  std::vector<std::string> names_;  // by id ("" once removed)
  // Changes not applied yet: the latest NodeInfo of each node (nullptr: deleted).
  std::map<std::string, std::shared_ptr<const NodeInfo>> pending_;
  std::unique_ptr<core::Engine> engine_;
  NodeIndex index_;
  int bad_inventory_ = 0;
  uint64_t node_changes_applied_ = 0;
  uint64_t holdings_moved_ = 0;

  absl::flat_hash_map<std::string, Entry> held_;
  // The pods held on each node (by name), to restore them when the node comes or changes.
  absl::flat_hash_map<std::string, std::set<std::string>> held_on_;
  // Allowed sets by the pods' constraints and whether they ask GPUs, kept up to date as nodes
  // change (Reclassify); cleared when the GPU-blocked nodes change.
  absl::flat_hash_map<std::pair<NodeConstraints, bool>, AllowedSet> allowed_;
  // The engine keys holding the free part of each node's unhealthy GPUs.
  std::map<std::string, std::set<std::string>> unhealthy_held_;
  // Nodes whose GPUs take no new pods, and the bound pods that block them.
  std::map<std::string, std::set<std::string>> gpu_blocked_;
};

}  // namespace tessera::k8s
