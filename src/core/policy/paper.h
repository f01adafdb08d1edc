// Shared machinery of the FGD paper's baseline policies (random, dotprod, gpu-clustering,
// gpu-packing, bestfit, fgd), re-implemented from the paper's public simulator
// (hkust-adsl/kubernetes-scheduler-simulator, a kube-scheduler with one score plugin at weight
// 1000, percentageOfNodesToScore 100):
//
//  - Each policy gives every feasible node an integer score, as its kube-scheduler plugin does
//    (Evaluate), together with the GPUs it would take there (the plugin's GPU selection).
//  - The highest score wins. Ties go to the node first in a random order of the nodes drawn once,
//    at Attach, from PolicyOptions::seed: the simulator's kube-scheduler fork picks the
//    lexicographically smallest name among the best, and the simulator names nodes
//    "<random 4-digit rank>-<name>" (a random permutation per seed). This tie-breaking is what
//    makes the baselines pack; a uniformly random tie-break would spread and lose several points.
//    (random alone breaks its all-zero ties uniformly at random per pod, as its plugin does.)
//  - Scores depend only on the node's own state, so they are cached per (request shape, node) and
//    reused until ClusterState::version(node) changes: a placement recomputes one node per shape,
//    not the whole cluster. set_use_index(false) turns the cache off (tests compare the two).
//
// These policies model a scheduler without gangs: members are placed one by one.
#pragma once

#include <bitset>
#include <climits>
#include <deque>
#include <cstdint>
#include <optional>
#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/random.h"
#include "core/policy/policy.h"

namespace tessera::core {

// The shape of a request: everything a node-local score or feasibility check can depend on.
struct RequestShape {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  GpuAsk::Kind kind = GpuAsk::Kind::kNone;
  int32_t count = 0;
  int64_t share_memory_mib = 0;
  int32_t share_compute_milli = 0;
  int32_t fraction_milli = 0;
  GpuTopology topology = GpuTopology::kAny;
  bool topology_required = false;
  ModelSet models;

  static RequestShape Of(const Query& query);
  bool operator==(const RequestShape& o) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const RequestShape& s) {
    return H::combine(std::move(h), s.cpu_milli, s.memory_mib, s.kind, s.count,
                      s.share_memory_mib, s.share_compute_milli, s.fraction_milli, s.topology,
                      s.topology_required, std::hash<ModelSet>()(s.models));
  }
};

// Per (request shape, node) memo of a node-local evaluation, valid while the node's version is
// unchanged. Bounded: shapes beyond the budget are simply not cached. Laid out as arrays per shape
// so that the scan over nodes stays tight.
class ShapeNodeCache {
 public:
  struct Row {
    std::vector<uint64_t> stamp;  // node version + 1; 0 = empty
    std::vector<int64_t> key;     // order key (higher is better); kNone when not scored
    std::vector<uint64_t> gpus;   // the GPUs the evaluation picked
    std::vector<uint8_t> status;  // 0 infeasible, 1 declined by the policy, 2 scored
  };
  static constexpr int64_t kNone = INT64_MIN;

  void Reset(int node_count, size_t max_entries = size_t{1} << 22) {
    node_count_ = node_count;
    max_shapes_ = node_count > 0 ? std::max<size_t>(1, max_entries / node_count) : 0;
    ids_.clear();
    rows_.clear();
  }
  // The row for `shape`, or nullptr when the cache is full.
  Row* Get(const RequestShape& shape) {
    auto it = ids_.find(shape);
    if (it != ids_.end()) return &rows_[it->second];
    if (rows_.size() >= max_shapes_) return nullptr;
    ids_.emplace(shape, rows_.size());
    Row& row = rows_.emplace_back();
    row.stamp.assign(node_count_, 0);
    row.key.assign(node_count_, kNone);
    row.gpus.assign(node_count_, 0);
    row.status.assign(node_count_, 0);
    return &row;
  }

 private:
  int node_count_ = 0;
  size_t max_shapes_ = 0;
  absl::flat_hash_map<RequestShape, size_t> ids_;
  std::deque<Row> rows_;
};

class PaperPolicy : public Policy {
 public:
  // `random_ties`: break ties uniformly at random per placement instead of by the node order.
  explicit PaperPolicy(uint64_t seed, bool random_ties = false)
      : rng_(seed), random_ties_(random_ties) {}

  bool places_gangs_together() const override { return false; }
  void Attach(const ClusterState& state) override;
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
  Random& rng() { return rng_; }
  // For policies that need more than the shared Attach.
  virtual void AttachPolicy(const ClusterState& state) { (void)state; }
  // Forgets every cached evaluation (for a policy whose scores changed meaning).
  void ResetCaches(const ClusterState& state) { cache_.Reset(state.node_count()); }

  // The simulator's default GPU selection ("best"): a share takes the feasible GPU with the least
  // milli-GPU left (lowest index on ties); whole GPUs take the lowest-index free GPUs (or, when the
  // ask requires a topology, the set gpu_select.h picks). nullopt when no set qualifies.
  static std::optional<uint64_t> BestGpus(const ClusterState& state, const Query& query,
                                          NodeId node, const NodeFit& fit);

 private:
  struct Cached {
    uint8_t status = 0;  // 0 infeasible, 1 declined by the policy, 2 scored
    Eval eval;
  };
  Cached Compute(const ClusterState& state, const Query& query, NodeId node, uint64_t allowed);
  // Score and node order folded into one key: higher score first, then lower rank.
  int64_t KeyOf(int64_t score, NodeId node) const {
    const int64_t s = std::clamp<int64_t>(score, INT32_MIN + 1, INT32_MAX);
    return s * (int64_t{1} << 32) + (int64_t{UINT32_MAX} - rank_[node.value()]);
  }

  Random rng_;
  bool random_ties_;
  std::vector<int32_t> rank_;  // tie-break order: lower rank wins
  ShapeNodeCache cache_;
  std::vector<int32_t> ties_;
};

}  // namespace tessera::core
