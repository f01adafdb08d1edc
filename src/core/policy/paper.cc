#include "core/policy/paper.h"

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "core/policy/fragmentation.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {

RequestShape RequestShape::Of(const Query& query) {
  const PodRequest& r = *query.request;
  RequestShape s;
  s.cpu_milli = r.cpu_milli;
  s.memory_mib = r.memory_mib;
  s.kind = r.gpu.kind;
  s.count = r.gpu.count;
  s.share_memory_mib = r.gpu.memory_mib;
  s.share_compute_milli = r.gpu.compute_milli;
  s.fraction_milli = r.gpu.fraction_milli;
  s.topology = r.gpu.topology;
  s.topology_required = r.gpu.topology_required;
  s.models = query.models;
  return s;
}

void PaperPolicy::Attach(const ClusterState& state) {
  cache_.Reset(state.node_count());
  const int n = state.node_count();
  std::vector<int32_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  for (int i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng_.Uniform(static_cast<uint64_t>(i) + 1)]);
  }
  rank_.assign(n, 0);
  for (int i = 0; i < n; ++i) rank_[order[i]] = i;
  AttachPolicy(state);
}

std::optional<uint64_t> PaperPolicy::BestGpus(const ClusterState& state, const Query& query,
                                              NodeId node, const NodeFit& fit) {
  const GpuAsk& ask = query.request->gpu;
  switch (ask.kind) {
    case GpuAsk::Kind::kNone: return 0;
    case GpuAsk::Kind::kWhole: {
      if (ask.topology_required && ask.count > 1) {
        return SelectGpuSet(state.cluster().node(node), fit.gpus, ask.count, ask.topology, true);
      }
      uint64_t mask = 0;
      int need = ask.count;
      for (uint64_t a = fit.gpus; a && need > 0; a &= a - 1, --need) mask |= a & -a;
      if (need > 0) return std::nullopt;
      return mask;
    }
    case GpuAsk::Kind::kShare:
    case GpuAsk::Kind::kFraction: {
      int best = -1;
      int32_t best_left = INT32_MAX;
      for (uint64_t a = fit.gpus; a; a &= a - 1) {
        int g = __builtin_ctzll(a);
        int32_t left = GpuMilliLeft(state, node, g);
        if (left < best_left) {
          best = g;
          best_left = left;
        }
      }
      if (best < 0) return std::nullopt;
      return 1ULL << best;
    }
  }
  return std::nullopt;
}

PaperPolicy::Cached PaperPolicy::Compute(const ClusterState& state, const Query& query,
                                         NodeId node, uint64_t allowed) {
  Cached c;
  NodeFit fit = CheckNode(state, query, node, allowed);
  if (!fit.ok()) return c;
  std::optional<Eval> e = Evaluate(state, query, node, fit);
  if (!e) {
    c.status = 1;
    return c;
  }
  c.status = 2;
  c.eval = *e;
  return c;
}

std::optional<NodeChoice> PaperPolicy::ScoreNode(const ClusterState& state, const Query& query,
                                                 NodeId node, const NodeFit& fit) {
  std::optional<Eval> e = Evaluate(state, query, node, fit);
  if (!e) return std::nullopt;
  NodeChoice c;
  c.score = static_cast<double>(e->score);
  c.placement = MakePlacement(state, *query.request, node, e->gpus);
  return c;
}

std::optional<NodeChoice> PaperPolicy::Choose(const ClusterState& state, const Query& query,
                                              std::vector<NodeId>* declined) {
  ShapeNodeCache::Row* row = nullptr;
  if (use_index_ && !query.candidates) row = cache_.Get(RequestShape::Of(query));
  int32_t best_node = -1;
  uint64_t best_gpus = 0;
  int64_t best_score = 0;
  if (row && !random_ties_) {
    // The hot path: one pass over the shape's cached keys, recomputing the nodes that changed.
    const int n = state.node_count();
    uint64_t* stamp = row->stamp.data();
    int64_t* key = row->key.data();
    int64_t best_key = ShapeNodeCache::kNone;
    for (int i = 0; i < n; ++i) {
      const uint64_t now = state.version(NodeId(i)) + 1;
      if (stamp[i] != now) {
        Cached c = Compute(state, query, NodeId(i), ~0ULL);
        row->status[i] = c.status;
        row->gpus[i] = c.eval.gpus;
        key[i] = c.status == 2 ? KeyOf(c.eval.score, NodeId(i)) : ShapeNodeCache::kNone;
        stamp[i] = now;
      }
      if (key[i] > best_key) {
        best_key = key[i];
        best_node = i;
      }
    }
    if (declined) {
      for (int i = 0; i < n; ++i) {
        if (row->status[i] == 1) declined->push_back(NodeId(i));
      }
    }
    if (best_node < 0) return std::nullopt;
    best_gpus = row->gpus[best_node];
    best_score = best_key >> 32;
  } else {
    int64_t best_key = ShapeNodeCache::kNone;
    ties_.clear();
    std::vector<uint64_t> tie_gpus;
    auto consider = [&](NodeId node, const Cached& c) {
      if (c.status == 0) return;
      if (c.status == 1) {
        if (declined) declined->push_back(node);
        return;
      }
      if (random_ties_) {
        if (ties_.empty() || c.eval.score > best_score) {
          best_score = c.eval.score;
          ties_.clear();
          tie_gpus.clear();
        }
        if (c.eval.score == best_score) {
          ties_.push_back(node.value());
          tie_gpus.push_back(c.eval.gpus);
        }
        return;
      }
      const int64_t k = KeyOf(c.eval.score, node);
      if (k > best_key) {
        best_key = k;
        best_node = node.value();
        best_gpus = c.eval.gpus;
        best_score = c.eval.score;
      }
    };
    if (row) {  // random ties with the cache
      for (int i = 0; i < state.node_count(); ++i) {
        const uint64_t now = state.version(NodeId(i)) + 1;
        if (row->stamp[i] != now) {
          Cached c = Compute(state, query, NodeId(i), ~0ULL);
          row->status[i] = c.status;
          row->gpus[i] = c.eval.gpus;
          row->key[i] = c.eval.score;
          row->stamp[i] = now;
        }
        Cached c;
        c.status = row->status[i];
        c.eval = Eval{row->key[i], row->gpus[i]};
        consider(NodeId(i), c);
      }
    } else if (query.candidates) {
      for (const Candidate& cand : *query.candidates) {
        consider(cand.node, Compute(state, query, cand.node, cand.gpu_mask));
      }
    } else {
      // Without the cache: evaluate every node afresh (the reference the cache must equal).
      for (int i = 0; i < state.node_count(); ++i) {
        consider(NodeId(i), Compute(state, query, NodeId(i), ~0ULL));
      }
    }
    if (random_ties_) {
      if (ties_.empty()) return std::nullopt;
      size_t pick = ties_.size() > 1 ? rng_.Uniform(ties_.size()) : 0;
      best_node = ties_[pick];
      best_gpus = tie_gpus[pick];
    }
    if (best_node < 0) return std::nullopt;
  }
  NodeChoice choice;
  choice.score = static_cast<double>(best_score);
  best_gpus = FinalGpus(state, query, NodeId(best_node), best_gpus);
  choice.placement = MakePlacement(state, *query.request, NodeId(best_node), best_gpus);
  return choice;
}

}  // namespace tessera::core
