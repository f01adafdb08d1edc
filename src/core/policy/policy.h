// A placement policy: given what is free, where should this pod go?
//
// Policies differ only in preference: what is possible is decided by CheckNode (core/fit.h) for
// all of them, and what is committed is checked again by ClusterState. A policy scores each
// feasible node (ScoreNode: higher is better, with the GPUs it would take there); Choose picks the
// best over the candidates. Policies with an index over free capacity override Choose for the
// whole-cluster case and must return what the scan would (tests compare the two).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster_state.h"
#include "core/fit.h"
#include "core/policy/typical.h"

namespace tessera::core {

struct NodeChoice {
  double score = 0;  // higher is better; ties go to the lower node id
  Placement placement;
};

struct PolicyOptions;

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;

  // Called once before the first Choose on `state`, and whenever a node of it changed (after
  // Apply or Revert). Policies that keep indexes or caches update them here.
  virtual void Attach(const ClusterState& state) { (void)state; }
  // Attach to `state`, a copy of the state `base` is attached to (an engine's what-if copy,
  // Engine(const Engine&, policy)); `base` may be a policy of any kind. Must end exactly as
  // Attach(state) would; a policy of base's kind and options may copy what it derived from the
  // nodes alone instead of deriving it again.
  virtual void AttachCopy(const ClusterState& state, const Policy& base) {
    (void)base;
    Attach(state);
  }
  virtual void OnNodeChanged(const ClusterState& state, NodeId node) {
    (void)state;
    (void)node;
  }
  // Called after a placed pod left and what it held was returned (Engine::Release; a replay
  // releasing a pod that ran out), after OnNodeChanged for its node; not after a gang's rollback.
  // A policy that plans differently for a cluster where pods come and go than for one being
  // filled learns it here.
  virtual void OnReleased(const ClusterState& state, const Placement& placement) {
    (void)state;
    (void)placement;
  }

  // Nodes were added or removed, or a node's capacity, GPUs or topology labels changed (the
  // engine's AddNode / UpdateNode / RemoveNode): re-derive whatever depends on the set of nodes.
  // The default attaches again; a policy that learns from the requests it sees keeps what it
  // learned.
  virtual void OnClusterChanged(const ClusterState& state) { Attach(state); }
  // Nodes `first`.. were added at the end and nothing else changed (Engine::ChangeNodes with
  // additions only): the policy must end exactly as OnClusterChanged would leave it (the default
  // calls it); a policy may get there in place, without re-deriving what the old nodes keep.
  virtual void OnNodesAdded(const ClusterState& state, NodeId first) {
    (void)first;
    OnClusterChanged(state);
  }

  // Where on `node` the pod would go and how much this policy likes it; nullopt when the policy
  // will not place it there. `fit` is CheckNode's answer for this node (already ok()).
  virtual std::optional<NodeChoice> ScoreNode(const ClusterState& state, const Query& query,
                                              NodeId node, const NodeFit& fit) = 0;

  // The best node over the query's candidates (or every node). `declined` (optional) receives
  // feasible nodes the policy refused, for the "why not" message.
  virtual std::optional<NodeChoice> Choose(const ClusterState& state, const Query& query,
                                           std::vector<NodeId>* declined = nullptr);

  // True for a policy that models a scheduler without GPU sharing: every share or fraction
  // ask takes one whole GPU (EffectiveRequest makes the request it places).
  virtual bool whole_gpus_only() const { return false; }

  // True for a policy whose Choose is per node: among the offered nodes it scores, the best by
  // a score of each node alone, ties by a fixed node order, nothing drawn at random; and whether
  // it scores a node (it fits, the policy does not decline it) depends on that node alone and
  // never starts to as the node's free capacity shrinks (MIG asks apart). Then offering any
  // nodes that include every node it would score gives the answer of offering all: the
  // scale-up planner tries a pod that fitted nowhere only on the nodes added since.
  virtual bool choice_is_per_node() const { return false; }

  // False for a policy that models a scheduler without gangs: members are placed one by one,
  // each on its own, and a gang's topology is ignored.
  virtual bool places_gangs_together() const { return true; }

 protected:
  // Whether Choose may use the policy's index (PolicyOptions::use_index; set by CreatePolicy).
  bool use_index_ = true;

  // The scan every Choose falls back to.
  std::optional<NodeChoice> ScanCandidates(const ClusterState& state, const Query& query,
                                           std::vector<NodeId>* declined);

 private:
  friend absl::StatusOr<std::unique_ptr<Policy>> CreatePolicy(std::string_view name,
                                                              const PolicyOptions& options);
};

// A request as `policy` places it: the request itself, or, for a policy that takes whole GPUs
// only (Policy::whole_gpus_only), a copy whose share or fraction ask is one whole GPU. Owns that
// copy: what get() returns lives as long as this does. Example: under whole-gpu, a 4Gi share
// is placed as GpuAsk::Whole(1); under every other policy, as asked.
class EffectiveRequest {
 public:
  EffectiveRequest(const Policy& policy, const PodRequest& request);
  const PodRequest& get() const { return whole_ ? *whole_ : request_; }

 private:
  const PodRequest& request_;
  std::optional<PodRequest> whole_;
};

// Options every policy may read; a policy ignores what it does not use.
struct PolicyOptions {
  // Seeds whatever a policy draws at random (the paper baselines break score ties at random).
  uint64_t seed = 1;
  // The workload's typical tasks (typical.h), for policies that measure fragmentation (fgd,
  // tessera). Empty: they learn the mix from the requests they see.
  std::vector<TypicalTask> typical_tasks;
  // False: every Choose scans the candidates, never an index (tests compare an indexed Choose
  // with the plain scan, which must agree).
  bool use_index = true;
};

// Names known to CreatePolicy, the default first.
std::vector<std::string> PolicyNames();
inline constexpr std::string_view kDefaultPolicy = "tessera";
[[nodiscard]] absl::StatusOr<std::unique_ptr<Policy>> CreatePolicy(std::string_view name,
                                                                   const PolicyOptions& options);

}  // namespace tessera::core
