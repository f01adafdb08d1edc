// The best node for a request, found without re-scoring the whole cluster for every pod.
//
// Policies whose score for a node depends only on that node's own state (and on the request's
// shape) register their evaluation here. For each request shape the index keeps every node's last
// evaluation, stamped with ClusterState::version(node), and the largest key of each block of 64
// nodes. The policy reports every changed node (OnNodeChanged -> NodeChanged); the next query for
// a shape re-evaluates only the nodes changed since that shape was last asked for (one block each
// to update) and reads the block maxima and one block. The answer is exactly the full scan's: the
// highest key, where a key folds the score with the node's rank (lower rank wins ties).
// Memory is bounded: beyond `max_entries` (shape x node) the least recently used shape is evicted.
//
// Example: 1,000 nodes, shapes A and B alternate; a placement changes one node, so each query
// re-evaluates one or two nodes and compares 16 block maxima instead of scoring 1,000 nodes.
#pragma once

#include <algorithm>
#include <bitset>
#include <climits>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "core/cluster_state.h"
#include "core/fit.h"

namespace tessera::core {

// The shape of a request: everything a node-local score or feasibility check can depend on.
// The GPU ask's identity is GpuAsk's own (request.h), so that no field of it can be missed here.
struct RequestShape {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  GpuAsk gpu;
  ModelSet models;        // the request's gpu_models, resolved in the cluster
  uint64_t node_set = 0;  // NodeSet::id(), 0 for none

  static RequestShape Of(const Query& query);
  bool operator==(const RequestShape& o) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const RequestShape& s) {
    return H::combine(std::move(h), s.cpu_milli, s.memory_mib, s.gpu,
                      std::hash<ModelSet>()(s.models), s.node_set);
  }
};

// One node's evaluation for one shape.
struct NodeEval {
  enum Status : uint8_t { kInfeasible, kDeclined, kScored };
  Status status = kInfeasible;
  int64_t score = 0;  // higher is better (kScored only)
  uint64_t gpus = 0;  // the GPUs the policy would take there
};

class ShapeIndex {
 public:
  static constexpr int kRankBits = 24;  // at most 2^24 nodes
  static constexpr int64_t kScoreLimit = int64_t{1} << 38;
  static constexpr int64_t kNone = INT64_MIN;

  // Forgets everything. `rank` orders ties (lower wins); it must be a permutation of 0..n-1.
  // `uniform`: also keep counts for UniformScored.
  void Attach(const ClusterState& state, std::vector<int32_t> rank, bool uniform = false,
              size_t max_entries = size_t{1} << 21);
  // Forgets every evaluation (the policy's scores changed meaning), keeping the rank.
  void Invalidate();
  const std::vector<int32_t>& rank() const { return rank_; }

  // Must be called for every change of a node (the policy's OnNodeChanged).
  void NodeChanged(NodeId node);

  // The key a score gets on `node`: higher score first, then lower rank.
  int64_t Key(int64_t score, NodeId node) const {
    const int64_t s = std::clamp(score, -kScoreLimit, kScoreLimit);
    return s * (int64_t{1} << kRankBits) + ((int64_t{1} << kRankBits) - 1 - rank_[node.value()]);
  }
  static int64_t ScoreOfKey(int64_t key) { return key >> kRankBits; }

  // The best node for `shape`, evaluating with `eval(NodeId) -> NodeEval` the nodes whose cached
  // evaluation is stale. nullopt when no node is scored. `declined` (optional) receives the nodes
  // the policy declined, only when nothing is chosen (it is for the "why not" message).
  template <typename Eval>
  std::optional<NodeEval> Best(const ClusterState& state, const RequestShape& shape, Eval&& eval,
                               NodeId* best, std::vector<NodeId>* declined);

  // A node drawn uniformly among the scored ones (every scored node, whatever its score), with
  // `draw(count) -> index in [0, count)`. Same caching as Best.
  template <typename Eval, typename Draw>
  std::optional<NodeEval> UniformScored(const ClusterState& state, const RequestShape& shape,
                                        Eval&& eval, Draw&& draw, NodeId* chosen);

  // Shapes currently cached (for tests and benchmarks).
  size_t cached_shapes() const { return ids_.size(); }

 private:
  struct Row {
    std::vector<uint64_t> stamp;  // node version + 1; 0 = never evaluated
    std::vector<NodeEval> eval;
    std::vector<int64_t> key;          // per node: Key(score), or kNone when not scored
    std::vector<int64_t> block_max;    // per block of kBlock nodes: the largest key
    std::vector<int32_t> block_count;  // per block: scored nodes (when uniform_)
    uint64_t log_pos = 0;              // global change-log position this row has seen
    uint64_t last_use = 0;
    RequestShape shape;
  };

  int64_t KeyOf(const NodeEval& e, int node) const {
    return e.status == NodeEval::kScored ? Key(e.score, NodeId(node)) : kNone;
  }
  void SetLeaf(Row& row, int node);
  void Build(Row& row);  // every block figure from the nodes
  static constexpr int kBlock = 64;
  template <typename Eval>
  void Refresh(const ClusterState& state, Row& row, int node, Eval& eval);
  template <typename Eval>
  Row& Update(const ClusterState& state, const RequestShape& shape, Eval& eval);
  Row* Lookup(const RequestShape& shape, bool* fresh);

  int n_ = 0;
  int blocks_ = 0;
  bool uniform_ = false;  // leaves, a power of two >= n_
  std::vector<int32_t> rank_;
  size_t max_rows_ = 0;
  absl::flat_hash_map<RequestShape, size_t> ids_;
  std::deque<Row> rows_;
  uint64_t clock_ = 0;
  // Change log: node ids changed, numbered from log_base_.
  std::vector<int32_t> log_;
  uint64_t log_base_ = 0;
};

template <typename Eval>
void ShapeIndex::Refresh(const ClusterState& state, Row& row, int node, Eval& eval) {
  const uint64_t now = state.version(NodeId(node)) + 1;
  if (row.stamp[node] == now) return;
  row.stamp[node] = now;
  row.eval[node] = eval(NodeId(node));
  SetLeaf(row, node);
}

template <typename Eval>
ShapeIndex::Row& ShapeIndex::Update(const ClusterState& state, const RequestShape& shape,
                                    Eval& eval) {
  TESSERA_CHECK(state.node_count() == n_);
  bool fresh = false;
  Row& row = *Lookup(shape, &fresh);
  const uint64_t log_end = log_base_ + log_.size();
  if (fresh) {
    for (int i = 0; i < n_; ++i) {
      row.stamp[i] = state.version(NodeId(i)) + 1;
      row.eval[i] = eval(NodeId(i));
    }
    Build(row);
  } else if (row.log_pos < log_base_) {
    for (int i = 0; i < n_; ++i) Refresh(state, row, i, eval);
  } else {
    for (uint64_t p = row.log_pos; p < log_end; ++p) {
      Refresh(state, row, log_[p - log_base_], eval);
    }
  }
  row.log_pos = log_end;
  row.last_use = ++clock_;
  return row;
}

template <typename Eval, typename Draw>
std::optional<NodeEval> ShapeIndex::UniformScored(const ClusterState& state,
                                                  const RequestShape& shape, Eval&& eval,
                                                  Draw&& draw, NodeId* chosen) {
  Row& row = Update(state, shape, eval);
  int32_t count = 0;
  for (int32_t c : row.block_count) count += c;
  if (count == 0) return std::nullopt;
  int32_t k = count > 1 ? static_cast<int32_t>(draw(count)) : 0;
  size_t b = 0;
  while (k >= row.block_count[b]) k -= row.block_count[b++];
  for (int i = static_cast<int>(b) * kBlock;; ++i) {
    if (row.eval[i].status == NodeEval::kScored && k-- == 0) {
      *chosen = NodeId(i);
      return row.eval[i];
    }
  }
}

template <typename Eval>
std::optional<NodeEval> ShapeIndex::Best(const ClusterState& state, const RequestShape& shape,
                                         Eval&& eval, NodeId* best, std::vector<NodeId>* declined) {
  Row& row = Update(state, shape, eval);
  size_t top_block = 0;
  for (size_t b = 1; b < row.block_max.size(); ++b) {
    if (row.block_max[b] > row.block_max[top_block]) top_block = b;
  }
  const int64_t top = row.block_max.empty() ? kNone : row.block_max[top_block];
  if (top == kNone) {
    if (declined) {
      for (int i = 0; i < n_; ++i) {
        if (row.eval[i].status == NodeEval::kDeclined) declined->push_back(NodeId(i));
      }
    }
    return std::nullopt;
  }
  int i = static_cast<int>(top_block) * kBlock;
  while (row.key[i] != top) ++i;
  *best = NodeId(i);
  return row.eval[i];
}

}  // namespace tessera::core
