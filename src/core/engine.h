// The allocation engine: one cluster's state under one policy. Places pods, releases them, places
// gangs all-or-nothing, and answers what-if questions with the same algorithm.
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
#include "absl/status/status.h"
#include "core/cluster_state.h"
#include "core/model/cluster.h"
#include "core/model/request.h"
#include "core/policy/policy.h"
#include "core/policy/shape_index.h"
#include "core/topology/domains.h"

namespace tessera::core {

enum class Mode {
  kCommit,    // place and record
  kTestOnly,  // decide, record nothing (a filter; a what-if)
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
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Node changes, in place: what other nodes hold, the policy's learned state (the tessera
  // policy's request mix) and, for changes of labels that are no topology level, its indexes
  // survive. A node whose capacity or GPUs change, and a node removed, first gives up every pod
  // placed on it: their names come back in `released` (a scheduler restores them on the new
  // spec). Added nodes get the next ids (`added`, in order); removed ids are never reused.
  // Fails, changing nothing, if a spec is invalid or names no live node.
  absl::Status ChangeNodes(NodeChanges changes, std::vector<NodeId>* added = nullptr,
                           std::vector<std::string>* released = nullptr);
  // Something outside the engine changed which pods may use `node` (a NodeSet's membership, on
  // a taint or label change): its cached evaluations are redone.
  void TouchNode(NodeId node);

  // Places one pod (not a gang member: use PlaceGang). The pod is keyed by request.name, which
  // must not already be placed. `allowed` (optional) restricts it to some nodes and GPUs, and
  // the policy scans them; nullptr = anywhere. `nodes` (optional) excludes every node outside
  // the set (taints, nodeSelector, affinity) and keeps the policy's index in use: the way to
  // restrict many pods to the same nodes.
  PlacementResult Place(const PodRequest& request, Mode mode = Mode::kCommit,
                        const std::vector<Candidate>* allowed = nullptr,
                        const NodeSet* nodes = nullptr);

  // For replays that keep their placements themselves (by trace index, say): decides exactly as
  // Place does and applies the placement, but keeps no ledger entry and builds no per-node
  // explanation for a pod that does not fit (the outcome alone: placed, not now, never). Undo
  // with Unapply.
  Outcome PlaceUnnamed(const PodRequest& request, Placement* placement);
  // Returns exactly what `placement` took (MIG instances it created are removed again): the
  // departure of a pod placed by PlaceUnnamed.
  void Unapply(const Placement& placement);
  // Applies a placement decided elsewhere (a defragmentation plan's destination) with no ledger
  // entry, as PlaceUnnamed would have; undo with Unapply. Fails, changing nothing, if it does not
  // fit what is free.
  absl::Status ApplyUnnamed(const Placement& placement);

  // Why a request can never fit in this cluster, or nullopt when some node could take it empty.
  // Depends only on the cluster: remembered per request shape.
  std::optional<std::string> NeverFitsReason(const PodRequest& request);

  // Places all members of one gang or none. Results are in member order; on failure every result
  // carries the same outcome and reason, and the state is exactly as before.
  //
  // Topology (the members' GangAsk: level and required): the gang lands inside one domain of its
  // level (topology/domains.h). Required: that level only, or not at all. Preferred: the
  // narrowest configured level that has a domain with room first (nvlink-domain before rack
  // before block ...), then anywhere. Among the domains of a level that can take the whole gang,
  // the one left with the least free compute afterwards (best fit: the next big gang still finds
  // an empty domain); ties to the first domain. Members are placed largest ask first, each by
  // the policy within the domain. Example: racks r1 (12 GPUs free) and r2 (8 free), a required
  // rack gang of 8 whole GPUs: both fit, r2 is left with 0 and r1 with 4, so r2.
  //
  // `allowed` (optional) restricts every member, and every domain, to those nodes and GPUs.
  // `nodes` (optional) excludes every node outside the set (the members' taints, nodeSelector,
  // affinity) and keeps the domain index in use: the domains are still walked by their free
  // compute, each one's room counted over its nodes in the set (no trial placement where the set
  // leaves too little). With `nodes`, ties between domains left with the same room go to the
  // domain with less free compute overall, then the lower. MIG asks and `allowed` lists are
  // tried domain by domain.
  std::vector<PlacementResult> PlaceGang(std::span<const PodRequest> members,
                                         Mode mode = Mode::kCommit,
                                         const std::vector<Candidate>* allowed = nullptr,
                                         const NodeSet* nodes = nullptr);

  // The one owner of the elastic gang rules (GangAsk::min below size), also used for any gang
  // some of whose members already run (after a restart, say). `pending`: members not placed, in
  // the order they should go (oldest first); `running`: the names of the gang's members placed
  // earlier (names the engine does not hold are ignored). With r of them held, the gang needs
  // need = max(1, min - r) more members together, all or none, and takes at most size - r:
  // the largest n (need <= n <= that) such that the first n pending members fit together, found
  // by halving (for members that ask alike, n fitting means fewer fit). Where: a gang that runs
  // members keeps their domain of its level (the one holding most of them): required, only
  // there; preferred, there first, then as PlaceGang would place n members. A gang starting
  // chooses its domain as PlaceGang does for n members, so it starts with as many as one domain
  // takes. Results are in pending order: the first n placed, the others kNoFitNow saying how
  // many run; when fewer than `need` fit, every result fails and the state is as before.
  // Example: size 8, min 4, nothing running, one NVLink domain with 5 GPUs free: 5 placed there,
  // 3 wait; later 2 GPUs of that domain free up: 2 more placed there (7 of 8 run).
  std::vector<PlacementResult> PlaceElasticGang(std::span<const PodRequest> pending,
                                                std::span<const std::string> running,
                                                Mode mode = Mode::kCommit,
                                                const std::vector<Candidate>* allowed = nullptr,
                                                const NodeSet* nodes = nullptr);

  // What-ifs for planners (preemption, defragmentation): the decision Place or PlaceGang would
  // make (test-only: nothing recorded) were the pods in `without` gone. Their placements are taken
  // out exactly (Revert) and put back afterwards in reverse order, so the engine, its policy's
  // indexes and MIG instances included, is left as it was. Names that hold nothing are ignored.
  PlacementResult PlaceWithout(const PodRequest& request, std::span<const std::string> without,
                               const std::vector<Candidate>* allowed = nullptr,
                               const NodeSet* nodes = nullptr);
  std::vector<PlacementResult> PlaceGangWithout(std::span<const PodRequest> members,
                                                std::span<const std::string> without,
                                                const std::vector<Candidate>* allowed = nullptr);
  // PlaceElasticGang's decision (test-only) were the pods in `without` gone.
  std::vector<PlacementResult> PlaceElasticGangWithout(
      std::span<const PodRequest> pending, std::span<const std::string> running,
      std::span<const std::string> without, const std::vector<Candidate>* allowed = nullptr);

  // Frees what `pod` holds. NotFound if it holds nothing.
  absl::Status Release(std::string_view pod);

  // Records a placement decided earlier (a restarted scheduler reading pod assignments). Fails,
  // changing nothing, if it does not fit what is free or the pod is already placed.
  absl::Status Restore(std::string_view pod, const Placement& placement);

  const Placement* Find(std::string_view pod) const;
  const ClusterState& state() const { return state_; }
  const Cluster& cluster() const { return cluster_; }
  const TopologyDomains& domains() const { return domains_; }
  Policy& policy() { return *policy_; }
  size_t placed_count() const { return ledger_.size(); }

 private:
  void Commit(const Placement& p);
  void Undo(const Placement& p);
  // The one decision of Place and PlaceUnnamed: the policy's choice for `request` (as it places
  // it: EffectiveRequest), else why not (kNeverFits with its reason; kNoFitNow with the per-node
  // explanation when `explain`).
  PlacementResult Decide(const PodRequest& request, const std::vector<Candidate>* allowed,
                         const NodeSet* nodes, bool explain);
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
  std::vector<PlacementResult> PlaceGangIndependently(std::span<const PodRequest> members,
                                                      Mode mode,
                                                      const std::vector<Candidate>* allowed,
                                                      const NodeSet* nodes);
  // Takes the placements of `pods` out (Revert), runs `what_if`, and puts them back.
  template <typename F>
  auto Without(std::span<const std::string> pods, F what_if);
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
  // The domain of `level` holding most of `placements` (ties: the lower), or -1 for none.
  int DomainHolding(int level, std::span<const Placement> placements) const;
  void UpdateDomains(NodeId node);  // after the node's state changed
  // Domain `domain` of `level` as `nodes` leaves it: its room (free compute and fully free GPUs
  // over its nodes in the set, from the index) and in *gpus its GPU count there.
  DomainFree FreeInSet(int level, int domain, const NodeSet& nodes, int* gpus) const;

  Cluster cluster_;
  std::unique_ptr<Policy> policy_;
  ClusterState state_;
  TopologyDomains domains_;
  std::vector<std::vector<DomainFree>> domain_free_;        // per level, per domain
  std::vector<std::set<std::pair<int64_t, int>>> by_free_;  // per level: (free compute, domain)
  std::vector<std::vector<NodeDomain>> node_domains_;       // per node
  absl::flat_hash_map<std::string, Placement> ledger_;
  absl::flat_hash_map<RequestShape, std::optional<std::string>> never_fits_;
};

}  // namespace tessera::core
