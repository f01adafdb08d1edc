// Shared machinery of the FGD paper's baseline policies (random, dotprod, gpu-clustering,
// gpu-packing, bestfit, fgd), re-implemented from the paper's public simulator
// (hkust-adsl/kubernetes-scheduler-simulator: a kube-scheduler with one score plugin at weight
// 1000 and percentageOfNodesToScore 100):
//
//  - Each policy gives every feasible node an integer score, as its kube-scheduler plugin does
//    (Evaluate), together with the GPUs it would take there (the plugin's GPU selection).
//  - The highest score wins. Ties go to the node first in a random order of the nodes drawn once,
//    at Attach, from PolicyOptions::seed: the simulator's kube-scheduler fork picks the
//    lexicographically smallest name among the best, and the simulator names nodes
//    "<random 4-digit rank>-<name>" (a random permutation per seed). This tie-breaking is what
//    makes the baselines pack; a uniformly random tie-break would spread and lose several points.
//    (random alone picks uniformly among all feasible nodes per pod, as its plugin does.)
//  - Scores depend only on the node's own state, so evaluations are kept per request shape in a
//    ShapeIndex (shape_index.h): a placement re-evaluates one node per shape, not the cluster.
//    PolicyOptions::use_index = false evaluates every node afresh (tests compare the two).
//
// These policies model a scheduler without gangs: members are placed one by one. The simulator
// has no MIG: a MIG ask takes the first MIG instance that fits, on the first node (first fit).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/random.h"
#include "core/policy/policy.h"
#include "core/policy/shape_index.h"

namespace tessera::core {

class PaperPolicy : public Policy {
 public:
  // `random_choice`: choose uniformly among the feasible nodes (the random baseline) instead of
  // the best score.
  explicit PaperPolicy(uint64_t seed, bool random_choice = false)
      : rng_(seed), random_choice_(random_choice) {}

  bool places_gangs_together() const override { return false; }
  void Attach(const ClusterState& state) override;
  void OnNodeChanged(const ClusterState& state, NodeId node) override;
  std::optional<NodeChoice> ScoreNode(const ClusterState& state, const Query& query, NodeId node,
                                      const NodeFit& fit) override;
  std::optional<NodeChoice> Choose(const ClusterState& state, const Query& query,
                                   std::vector<NodeId>* declined) override;

 protected:
  struct Eval {
    int64_t score = 0;
    uint64_t gpus = 0;
  };
  // The plugin's score for a feasible node and the GPUs it would take; nullopt to decline.
  virtual std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                                       const NodeFit& fit) = 0;
  // The GPUs the chosen node gives the pod; by default those Evaluate picked. (random draws its
  // GPU here, when the node is chosen, as the simulator's Reserve does.)
  virtual uint64_t FinalGpus(const ClusterState& state, const Query& query, NodeId node,
                             uint64_t evaluated) {
    (void)state;
    (void)query;
    (void)node;
    return evaluated;
  }
  // For policies that need more than the shared Attach / OnNodeChanged.
  virtual void AttachPolicy(const ClusterState& state) { (void)state; }
  virtual void NodeChangedPolicy(const ClusterState& state, NodeId node) {
    (void)state;
    (void)node;
  }
  // Forgets every cached evaluation (for a policy whose scores changed meaning).
  void ResetCaches() { index_.Invalidate(); }
  Random& rng() { return rng_; }
  // The tie-break order (rank per node, lower wins).
  const std::vector<int32_t>& rank() const { return index_.rank(); }

  // The simulator's default GPU selection ("best"): a share takes the feasible GPU with the least
  // milli-GPU left (lowest index on ties); whole GPUs take the lowest-index free GPUs (or, when the
  // ask requires a topology, the set gpu_select.h picks). nullopt when no set qualifies.
  static std::optional<uint64_t> BestGpus(const ClusterState& state, const Query& query,
                                          NodeId node, const NodeFit& fit);

 private:
  NodeEval Compute(const ClusterState& state, const Query& query, NodeId node, uint64_t allowed);
  NodeChoice Finish(const ClusterState& state, const Query& query, NodeId node, const NodeEval& e);

  Random rng_;
  bool random_choice_;
  ShapeIndex index_;
};

}  // namespace tessera::core
