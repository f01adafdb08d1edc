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

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;

  // Called once before the first Choose on `state`, and whenever a node of it changed (after
  // Apply or Revert). Policies that keep indexes or caches update them here.
  virtual void Attach(const ClusterState& state) { (void)state; }
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

  // Where on `node` the pod would go and how much this policy likes it; nullopt when the policy
  // will not place it there. `fit` is CheckNode's answer for this node (already ok()).
  virtual std::optional<NodeChoice> ScoreNode(const ClusterState& state, const Query& query,
                                              NodeId node, const NodeFit& fit) = 0;

  // The best node over the query's candidates (or every node). `declined` (optional) receives
  // feasible nodes the policy refused, for the "why not" message.
  virtual std::optional<NodeChoice> Choose(const ClusterState& state, const Query& query,
                                           std::vector<NodeId>* declined = nullptr);

  // Whole-GPU policies treat every GPU ask as whole GPUs; others return the request unchanged.
  // The reference stays valid until the next call.
  virtual const PodRequest& Effective(const PodRequest& request) { return request; }

  // False for a policy that models a scheduler without gangs: members are placed one by one,
  // each on its own, and a gang's topology is ignored.
  virtual bool places_gangs_together() const { return true; }

  // Tests turn indexes off to compare an indexed Choose with the plain scan.
  void set_use_index(bool on) { use_index_ = on; }

 protected:
  bool use_index_ = true;

  // The scan every Choose falls back to.
  std::optional<NodeChoice> ScanCandidates(const ClusterState& state, const Query& query,
                                           std::vector<NodeId>* declined);
};

// Options every policy may read; a policy ignores what it does not use.
struct PolicyOptions {
  // Seeds whatever a policy draws at random (the paper baselines break score ties at random).
  uint64_t seed = 1;
  // The workload's typical tasks (typical.h), for policies that measure fragmentation (fgd,
  // tessera). Empty: they learn the mix from the requests they see.
  std::vector<TypicalTask> typical_tasks;
};

// Names known to CreatePolicy, the default first.
std::vector<std::string> PolicyNames();
inline constexpr std::string_view kDefaultPolicy = "tessera";
[[nodiscard]] absl::StatusOr<std::unique_ptr<Policy>> CreatePolicy(std::string_view name,
                                                                   const PolicyOptions& options);

}  // namespace tessera::core
