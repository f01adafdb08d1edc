// The allocation engine: one cluster's state under one policy. Places pods, releases them, places
// gangs all-or-nothing, and answers what-if questions with the same algorithm. Every decision to
// place is one question (Ask: a pod, a gang or an elastic gang; where it may go; what to treat as
// gone; the mode) with one entry, Engine::Decide, whoever asks: the scheduler, the simulator and
// the defragmentation, preemption and scale-up planners.
//
// Invariants: every placement in the ledger has been applied to the state exactly once; a failed
// gang leaves the state (and the policy's indexes) exactly as before. Not thread-safe: one thread
// owns an Engine (see STYLE.md "Concurrency").
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "core/cluster_state.h"
#include "core/model/cluster.h"
#include "core/model/request.h"
#include "core/policy/policy.h"
#include "core/policy/shape_index.h"
#include "core/topology/domains.h"

namespace tessera::core {

enum class Mode {
  kCommit,    // place and record under the pod's name
  kTestOnly,  // decide, record nothing (a filter; a what-if)
  kApply,     // one pod only: place, but keep no ledger entry and build no per-node explanation
              // for a pod that does not fit (replays that keep placements themselves, by trace
              // index: undo with Engine::Unapply)
};

// Where a request may go: the one shape of a node restriction. Both empty: anywhere.
struct Where {
  // Only these nodes and GPUs; the policy scans them (no index). For a few pods restricted
  // differently each (a defragmentation site, devices a pod's claims may use).
  const std::vector<Candidate>* candidates = nullptr;
  // Only nodes in the set (taints, nodeSelector, affinity); the policy's indexes stay in use:
  // the way to restrict many pods to the same nodes.
  const NodeSet* nodes = nullptr;
};

// The one question every caller asks the engine (scheduler, simulator, defragmentation and
// preemption planners, scale-up plans): place this, within this, were these gone, and record it
// or not. Engine::Decide answers it. Views only: what the spans and pointers name must outlive
// the call. Example: would gang `members` fit were pods a and b evicted, on nodes `set`?
//   engine.Decide(Ask::Gang(members).In({.nodes = &set}).Without(victims).TestOnly());
struct Ask {
  enum class Kind {
    kPod,          // one pod, not a gang member
    kGang,         // every member or none (Engine::Decide: "A gang")
    kElasticGang,  // an elastic gang's pending members, some members maybe running
  };
  Kind kind = Kind::kPod;
  std::span<const PodRequest> pods;      // kPod: exactly one
  std::span<const std::string> running;  // kElasticGang: the gang's members placed earlier
  Where where;
  // A what-if: the decision as it would be were these pods' placements gone (test-only).
  std::span<const std::string> without;
  Mode mode = Mode::kCommit;
  // False: what does not fit gets its outcome and a short reason, not the per-node explanation
  // of why no node took it (ExplainNoFit, a scan of every node): for planners that ask again
  // and keep only their last answer's reason. The decision is the same.
  bool explain = true;

  static Ask Pod(const PodRequest& request) { return Ask{Kind::kPod, {&request, 1}}; }
  static Ask Gang(std::span<const PodRequest> members) { return Ask{Kind::kGang, members}; }
  static Ask ElasticGang(std::span<const PodRequest> pending,
                         std::span<const std::string> running) {
    return Ask{Kind::kElasticGang, pending, running};
  }
  Ask& In(Where w) {
    where = w;
    return *this;
  }
  Ask& Without(std::span<const std::string> pods_gone) {
    without = pods_gone;
    return *this;
  }
  Ask& As(Mode m) {
    mode = m;
    return *this;
  }
  Ask& TestOnly() { return As(Mode::kTestOnly); }
  Ask& Quiet() {
    explain = false;
    return *this;
  }
};

// Node changes for Engine::ChangeNodes, applied in this order: removals, updates, additions.
struct NodeChanges {
  std::vector<NodeId> remove;
  std::vector<std::pair<NodeId, NodeSpec>> update;  // same name, new spec
  std::vector<NodeSpec> add;
  std::vector<std::pair<NodeId, bool>> cordon;  // true: takes no new pods
};

class Engine {
 public:
  // The engine keeps its own copy of `cluster` (node changes update it in place).
  Engine(const Cluster& cluster, std::unique_ptr<Policy> policy,
         std::vector<TopologyLevel> levels = DefaultTopologyLevels());
  // A copy of `base` (its nodes, what they hold, its ledger, its cordons) under `policy`, which
  // is attached to the copy's state: the engine `base` would be had it been built with `policy`
  // and the same placements restored (a policy attached to a state that holds placements is as
  // one told of each). For what-ifs that start alike several times (the scale-up planner's
  // templates): a copy costs less than restoring every placement again.
  Engine(const Engine& base, std::unique_ptr<Policy> policy);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Node changes, in place: what other nodes hold, the policy's learned state (the tessera
  // policy's request mix) and, for changes of labels that are no topology level, its indexes
  // survive. Nodes only added (the scale-up planner's what-if, a node joining) join the domains
  // and indexes in place (Policy::OnNodesAdded) instead of a rebuild, with the same result.
  // A node whose capacity or GPUs change, and a node removed, first gives up every pod placed on
  // it: their names come back in `released` (a scheduler restores them on the new spec). Added
  // nodes get the next ids (`added`, in order); removed ids are never reused. Fails, changing
  // nothing, if a spec is invalid or names no live node.
  absl::Status ChangeNodes(NodeChanges changes, std::vector<NodeId>* added = nullptr,
                           std::vector<std::string>* released = nullptr);
  // Something outside the engine changed which pods may use `node` (a NodeSet's membership, on
  // a taint or label change): its cached evaluations are redone.
  void TouchNode(NodeId node);

  // The engine's one entry for placing: every decision to place goes through here (the
  // shorthands below call it). Results are in the order of ask.pods.
  //
  // A pod (Ask::Pod) is keyed by its request.name, which must not already be placed (kApply:
  // not keyed). The policy chooses its node and GPUs among those ask.where leaves.
  //
  // A gang (Ask::Gang) places all members or none; on failure every result carries the same
  // outcome and reason, and the state is exactly as before. Topology (the members' GangAsk:
  // level and required): the gang lands inside one domain of its level (topology/domains.h).
  // Required: that level only, or not at all. Preferred: the narrowest configured level that
  // has a domain with room first (nvlink-domain before rack before block ...), then anywhere.
  // Among the domains of a level that can take the whole gang, the one left with the least free
  // compute afterwards (best fit: the next big gang still finds an empty domain); ties to the
  // first domain. Members are placed largest ask first, each by the policy within the domain.
  // Example: racks r1 (12 GPUs free) and r2 (8 free), a required rack gang of 8 whole GPUs:
  // both fit, r2 is left with 0 and r1 with 4, so r2. where.candidates restricts every member,
  // and every domain, to those nodes and GPUs. where.nodes excludes every node outside the set
  // and keeps the domain index in use: the domains are still walked by their free compute, each
  // one's room counted over its nodes in the set (no trial placement where the set leaves too
  // little); ties between domains left with the same room go to the domain with less free
  // compute overall, then the lower. MIG asks and candidate lists are tried domain by domain.
  //
  // An elastic gang (Ask::ElasticGang; the one owner of the elastic gang rules, GangAsk::min
  // below size, also used for any gang some of whose members already run, after a restart say).
  // ask.pods: members not placed, in the order they should go (oldest first); ask.running: the
  // names of the gang's members placed earlier (names the engine does not hold are ignored).
  // With r of them held, the gang needs need = max(1, min - r) more members together, all or
  // none, and takes at most size - r: the largest n (need <= n <= that) such that the first n
  // pending members fit together, found by halving (for members that ask alike, n fitting means
  // fewer fit). Where, for a gang that runs members (a member lost to a fault and recreated by
  // its controller, an elastic gang growing): first beside them, all `size - r` together in
  // the smallest place that holds every running member and takes them all (for each topology
  // level its domain holding them all, and the nodes they run on: ReplacementAreas), whatever
  // the gang's level; else the gang keeps their domain of its level (the one holding most of
  // them): required, only there; preferred, there first, then as a gang of n members would be
  // placed. A required gang's places beside them are cut to that domain. Example: a gang of 4
  // without a level runs 3 members on node a1 of NVLink domain d1 (one GPU left there), d2 is
  // empty: the 4th member goes to a1, whatever the policy would choose on its own. A gang starting
  // chooses its domain as a gang of n members does, so it starts with as many as one domain takes.
  // The first n results placed, the others kNoFitNow saying how many run; when fewer than `need`
  // fit, every result fails and the state is as before. Example: size 8, min 4, nothing running,
  // one NVLink domain with 5 GPUs free: 5 placed there, 3 wait; later 2 GPUs of that domain free
  // up: 2 more placed there.
  //
  // What-ifs (ask.without, for planners: preemption, defragmentation): the decision as it would
  // be were those pods gone, test-only (a what-if with another mode is a programming error).
  // Their placements are taken out exactly (Revert) and put back afterwards in reverse order,
  // so the engine, its policy's indexes and MIG instances included, is left as it was. Names
  // that hold nothing are ignored.
  //
  // kApply (one pod): decides exactly as kCommit and applies the placement, but keeps no ledger
  // entry and explains no misfit per node (the outcome alone: placed, not now, never).
  std::vector<PlacementResult> Decide(const Ask& ask);
  // Decide for one pod (Ask::Pod): its result.
  PlacementResult DecideOne(const Ask& ask);

  // Shorthands for Decide, for callers that ask one plain thing.
  PlacementResult Place(const PodRequest& request, Mode mode = Mode::kCommit,
                        const std::vector<Candidate>* allowed = nullptr,
                        const NodeSet* nodes = nullptr) {
    return DecideOne(Ask::Pod(request).In({allowed, nodes}).As(mode));
  }
  std::vector<PlacementResult> PlaceGang(std::span<const PodRequest> members,
                                         Mode mode = Mode::kCommit,
                                         const std::vector<Candidate>* allowed = nullptr,
                                         const NodeSet* nodes = nullptr) {
    return Decide(Ask::Gang(members).In({allowed, nodes}).As(mode));
  }
  std::vector<PlacementResult> PlaceElasticGang(std::span<const PodRequest> pending,
                                                std::span<const std::string> running,
                                                Mode mode = Mode::kCommit,
                                                const std::vector<Candidate>* allowed = nullptr,
                                                const NodeSet* nodes = nullptr) {
    return Decide(Ask::ElasticGang(pending, running).In({allowed, nodes}).As(mode));
  }

  // Decisions made elsewhere, recorded (nothing is decided):
  //
  // Returns exactly what `placement` took (MIG instances it created are removed again): the
  // departure of a pod placed with Mode::kApply.
  void Unapply(const Placement& placement);
  // Applies a placement decided elsewhere (a defragmentation plan's destination) with no ledger
  // entry, as Mode::kApply would have; undo with Unapply. Fails, changing nothing, if it does
  // not fit what is free.
  absl::Status ApplyUnnamed(const Placement& placement);

  // Why a request can never fit in this cluster, or nullopt when some node could take it empty.
  // Depends only on the cluster: remembered per request shape.
  std::optional<std::string> NeverFitsReason(const PodRequest& request);

  // Frees what `pod` holds. NotFound if it holds nothing.
  absl::Status Release(std::string_view pod);

  // Records a placement decided earlier (a restarted scheduler reading pod assignments). Fails,
  // changing nothing, if it does not fit what is free or the pod is already placed.
  absl::Status Restore(std::string_view pod, const Placement& placement);

  // Hot spares (issue 30; engine_spares.cc): keep `per_domain` whole GPUs of every NVLink
  // domain (topology/domains.h: a labelled domain, or an unlabelled NVLink island; PCIe-only GPUs
  // are in none) free for the replacement of a gang's lost member; 0 turns them off.
  //
  // Which GPUs (a function of the nodes, in their order, and the pods placed: nothing to store):
  // in each domain, the last `per_domain` GPUs in the domain's order (its nodes in order, each
  // node's GPUs by index) that no pod holds, not in MIG mode, on nodes that take pods. Held as
  // a whole GPU of no pod (policies and indexes see it taken: decisions cost nothing more); moves
  // as pods come and go (a GPU freed later in that order becomes the spare, the one before is
  // free again). A domain with fewer GPUs free than `per_domain` keeps what it has.
  //
  // Who may take one: a gang some of whose members run but fewer than its minimum (a fixed gang:
  // fewer than its size), that is, a member lost and made again by its controller, asked as
  // Ask::ElasticGang with the survivors running. Everything else (pods, gangs that start, an
  // elastic gang growing past its minimum, what-ifs for them) decides as if the spares were
  // taken, and a pod or gang that would fit only on spares is told of them in its reason. A what-if
  // (Ask::without) sees the spares as they would be with those pods gone.
  // Example: a 4-GPU NVSwitch node, one spare, a gang of 3 on GPUs 0-2: GPU 3 is the spare and
  // a one-GPU pod waits; GPU 1 fails and its member is made again: it takes GPU 3.
  void KeepSpares(int per_domain);
  int spares_per_domain() const { return spares_per_domain_; }
  // The GPUs of `node` held as spares now (a mask), and how many in all.
  uint64_t spare_gpus(NodeId node) const {
    return node.value() < static_cast<int>(spare_mask_.size()) ? spare_mask_[node.value()] : 0;
  }
  int spare_count() const { return spare_count_; }
  // The nodes whose spares may have changed since the last call, each once (a spare given back
  // and held again counts): for whoever publishes them (the scheduler's node annotation), which
  // then looks at those nodes only.
  std::vector<NodeId> TakeSpareChanges();

  const Placement* Find(std::string_view pod) const;
  const ClusterState& state() const { return state_; }
  const Cluster& cluster() const { return cluster_; }
  const TopologyDomains& domains() const { return domains_; }
  Policy& policy() { return *policy_; }
  size_t placed_count() const { return ledger_.size(); }

 private:
  void Commit(const Placement& p);
  void Undo(const Placement& p);
  // The policy's choice for one pod's `request` (as it places it: EffectiveRequest), else why
  // not (kNeverFits with its reason; kNoFitNow with the per-node explanation when `explain`).
  PlacementResult Choose(const PodRequest& request, const Where& where, bool explain);
  // Decide, by kind of request (none handles ask.without).
  // `explain`: Ask::explain.
  PlacementResult DecidePod(const PodRequest& request, Mode mode, const Where& where,
                            bool explain = true);
  std::vector<PlacementResult> DecideGang(std::span<const PodRequest> members, Mode mode,
                                          const Where& where, bool explain = true);
  std::vector<PlacementResult> DecideElasticGang(std::span<const PodRequest> pending,
                                                 std::span<const std::string> running, Mode mode,
                                                 const Where& where, bool explain = true);
  // NeverFitsReason of an effective request's query, remembered per shape.
  const std::optional<std::string>& NeverFits(const Query& query);
  // Places every member inside `candidates` (nullptr = anywhere), largest asks first (the order
  // in `order`), and commits them all, or returns false having undone what it placed. `placed`
  // is in member order; `failure` gets the reason.
  bool PlaceAll(std::span<const PodRequest> members, const std::vector<size_t>& order,
                const std::vector<Candidate>* candidates, const NodeSet* nodes,
                std::vector<Placement>* placed, std::string* failure);
  // Free compute (milli-GPU) left inside a domain's candidates: what a best-fit choice minimises.
  int64_t FreeComputeIn(const std::vector<Candidate>& domain) const;
  // Fully free GPUs inside a domain: a domain with fewer than a gang's whole GPUs is skipped.
  int FreeWholeGpusIn(const std::vector<Candidate>& domain) const;
  // A gang under a policy that does not place gangs together: each member on its own.
  std::vector<PlacementResult> PlaceGangIndependently(std::span<const PodRequest> members,
                                                      Mode mode, const Where& where, bool explain);
  // Takes the placements of `pods` out (Revert), runs `what_if`, and puts them back.
  template <typename F>
  auto Without(std::span<const std::string> pods, F what_if);
  // The placements of the distinct pods of `names` that the ledger holds, in their order: copies
  // (a what-if may insert into the ledger and erase again, which moves its entries).
  std::vector<Placement> HeldOf(std::span<const std::string> names) const;
  // Frees every placement on `node`, appending their pods' names.
  void ReleaseAllOn(NodeId node, std::vector<std::string>* released);

  // The gang domain index: per level, each domain's free compute and fully free GPUs, kept up
  // to date on every change of a node's state, and the domains ordered by free compute. A gang
  // finds its best-fitting domain by walking them from the least free that could hold it
  // (PlaceGang), instead of trial-placing in every domain.
  struct DomainFree {
    int64_t compute = 0;  // free compute (milli-GPU) on GPUs not held whole
    int whole = 0;        // GPUs with no grant
  };
  struct NodeDomain {
    int level = 0;
    int domain = 0;
    uint64_t mask = 0;  // the node's GPUs inside the domain
    DomainFree free;    // their contribution, as last counted
  };
  void IndexDomains();  // after domains_ was (re)built
  // Nodes first.. (just added, state initialised) joined to domains_ and the domain index in
  // place; false where TopologyDomains::Append refuses (domains_ is then partly appended: the
  // caller rebuilds it).
  bool AppendNodes(int first);
  // The domain of `level` holding most of `placements` (ties: the lower), or -1 for none.
  int DomainHolding(int level, std::span<const Placement> placements) const;
  // Where a gang's next members go first, beside its running members (`held`): the places
  // holding every one of them, smallest first (by GPUs; ties: the narrower level, the members'
  // nodes last): for each topology level, its domain holding them all, where one does; and the
  // nodes they run on, every GPU of them. Each is cut to `allowed` and `within` (nullptr: no
  // cut); one left empty, or equal to a smaller one, is dropped.
  std::vector<std::vector<Candidate>> ReplacementAreas(std::span<const Placement> held,
                                                       const std::vector<Candidate>* allowed,
                                                       const std::vector<Candidate>* within) const;
  void UpdateDomains(NodeId node);  // after the node's state changed
  // Spares (engine_spares.cc). The NVLink level's index, or -1 where there is none.
  int NvlinkLevel() const;
  // Holds or gives back one spare GPU (a whole-GPU placement of no pod).
  Placement SparePlacement(NodeId node, int gpu) const;
  void HoldSpare(NodeId node, int gpu);
  void DropSpare(NodeId node, int gpu);
  // Gives back the spares on the GPUs of `p` (a placement about to take them); their indices.
  std::vector<int> DropSparesUnder(const Placement& p);
  void NoteSpareChange(NodeId node);  // for TakeSpareChanges
  // Every spare given back: decisions that may take them, node changes.
  void DropAllSpares();
  // The spares of domain `d` (of the NVLink level) made what the rule says; of every domain;
  // of the domains `node` is in.
  void SettleSpares(int d);
  void SettleAllSpares();
  void SettleSparesOn(NodeId node);
  // Whether `ask` may take spares (a gang below its minimum with members running).
  bool MayTakeSpares(const Ask& ask) const;
  // Decide by kind (what Decide does once what-ifs and spares are dealt with).
  std::vector<PlacementResult> DecideKind(const Ask& ask);
  // Domain `domain` of `level` as `nodes` leaves it: its room (free compute and fully free GPUs
  // over its nodes in the set, from the index) and in *gpus its GPU count there.
  DomainFree FreeInSet(int level, int domain, const NodeSet& nodes, int* gpus) const;

  Cluster cluster_;
  std::unique_ptr<Policy> policy_;
  ClusterState state_;
  TopologyDomains domains_;
  std::vector<std::vector<DomainFree>> domain_free_;  // per level, per domain
  // Per level: (free compute, domain). A red-black tree: an absl::btree_set copies in a tenth
  // of the time (a what-if copy) but made gang placement at 10,000 nodes 1.5x slower (its
  // inserts and erases on every commit; bench/results/scale_up.md).
  std::vector<std::set<std::pair<int64_t, int>>> by_free_;
  // Per node (inline: most nodes are in one or two domains; a copy allocates nothing per node).
  std::vector<absl::InlinedVector<NodeDomain, 2>> node_domains_;
  // What each named pod holds. Placements are immutable once held and shared between what-if
  // copies of the engine (a copy copies pointers); a change replaces or erases the entry.
  absl::flat_hash_map<std::string, std::shared_ptr<const Placement>> ledger_;
  absl::flat_hash_map<RequestShape, std::optional<std::string>> never_fits_;
  int spares_per_domain_ = 0;
  std::vector<uint64_t> spare_mask_;  // per node: its GPUs held as spares
  int spare_count_ = 0;
  std::vector<NodeId> spare_changed_;        // since TakeSpareChanges, each node once
  std::vector<uint8_t> spare_change_noted_;  // per node: listed in spare_changed_
};

}  // namespace tessera::core
