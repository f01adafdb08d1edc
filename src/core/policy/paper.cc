#include "core/policy/paper.h"

#include <climits>

#include "core/policy/fragmentation.h"
#include "core/policy/mig_node.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {

void PaperPolicy::Attach(const ClusterState& state) {
  const int n = state.node_count();
  std::vector<int32_t> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  for (int i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng_.Uniform(static_cast<uint64_t>(i) + 1)]);
  }
  std::vector<int32_t> rank(n, 0);
  for (int i = 0; i < n; ++i) rank[order[i]] = i;
  index_.Attach(state, std::move(rank), /*uniform=*/random_choice_);
  AttachPolicy(state);
}

void PaperPolicy::OnNodeChanged(const ClusterState& state, NodeId node) {
  NodeChangedPolicy(state, node);
  index_.NodeChanged(node);
}

std::optional<uint64_t> PaperPolicy::BestGpus(const ClusterState& state, const Query& query,
                                              NodeId node, const NodeFit& fit) {
  const GpuAsk& ask = query.request->gpu;
  switch (ask.kind) {
    case GpuAsk::Kind::kNone:
      return 0;
    case GpuAsk::Kind::kMig:  // ScoreNode handles MIG asks
      return std::nullopt;
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

NodeEval PaperPolicy::Compute(const ClusterState& state, const Query& query, NodeId node,
                              uint64_t allowed) {
  NodeEval e;
  NodeFit fit = CheckNode(state, query, node, allowed);
  if (!fit.ok()) return e;
  std::optional<Eval> v = Evaluate(state, query, node, fit);
  if (!v) {
    e.status = NodeEval::kDeclined;
    return e;
  }
  e.status = NodeEval::kScored;
  e.score = v->score;
  e.gpus = v->gpus;
  return e;
}

std::optional<NodeChoice> PaperPolicy::ScoreNode(const ClusterState& state, const Query& query,
                                                 NodeId node, const NodeFit& fit) {
  if (query.request->gpu.kind == GpuAsk::Kind::kMig) {
    return ScoreMigNode(state, query, node, fit, MigPreference::kFirstFit);
  }
  std::optional<Eval> e = Evaluate(state, query, node, fit);
  if (!e) return std::nullopt;
  NodeChoice c;
  c.score = static_cast<double>(e->score);
  c.placement = MakePlacement(state, *query.request, node, e->gpus);
  return c;
}

NodeChoice PaperPolicy::Finish(const ClusterState& state, const Query& query, NodeId node,
                               const NodeEval& e) {
  NodeChoice choice;
  choice.score = static_cast<double>(e.score);
  choice.placement =
      MakePlacement(state, *query.request, node, FinalGpus(state, query, node, e.gpus));
  return choice;
}

std::optional<NodeChoice> PaperPolicy::Choose(const ClusterState& state, const Query& query,
                                              std::vector<NodeId>* declined) {
  if (query.request->gpu.kind == GpuAsk::Kind::kMig) {
    return ScanCandidates(state, query, declined);
  }
  auto compute = [&](NodeId node) { return Compute(state, query, node, ~0ULL); };
  auto draw = [&](int32_t count) { return rng_.Uniform(static_cast<uint64_t>(count)); };
  if (use_index_ && !query.candidates) {
    const RequestShape shape = RequestShape::Of(query);
    NodeId node;
    std::optional<NodeEval> e = random_choice_
                                    ? index_.UniformScored(state, shape, compute, draw, &node)
                                    : index_.Best(state, shape, compute, &node, declined);
    if (!e) return std::nullopt;
    return Finish(state, query, node, *e);
  }
  // Without the index (or restricted to candidates): evaluate every node afresh, in node order.
  std::vector<std::pair<NodeId, NodeEval>> scored;
  int64_t best_key = ShapeIndex::kNone;
  int best = -1;
  auto visit = [&](NodeId node, uint64_t allowed) {
    NodeEval e = Compute(state, query, node, allowed);
    if (e.status == NodeEval::kDeclined && declined) declined->push_back(node);
    if (e.status != NodeEval::kScored) return;
    scored.emplace_back(node, e);
    const int64_t key = index_.Key(e.score, node);
    if (key > best_key) {
      best_key = key;
      best = static_cast<int>(scored.size()) - 1;
    }
  };
  if (query.candidates) {
    for (const Candidate& c : *query.candidates) visit(c.node, c.gpu_mask);
  } else {
    for (int i = 0; i < state.node_count(); ++i) visit(NodeId(i), ~0ULL);
  }
  if (scored.empty()) return std::nullopt;
  if (random_choice_) {
    std::sort(scored.begin(), scored.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    best = scored.size() > 1 ? static_cast<int>(draw(static_cast<int32_t>(scored.size()))) : 0;
  }
  return Finish(state, query, scored[best].first, scored[best].second);
}

}  // namespace tessera::core
