#include "core/policy/whole_set.h"

#include <algorithm>

#include "core/topology/gpu_select.h"

namespace tessera::core {

std::optional<WholeSet> PickWholeSet(const ClusterState& state, const Query& query, NodeId node,
                                     uint64_t free_gpus) {
  const GpuAsk& ask = query.request->gpu;
  const NodeSpec& spec = state.cluster().node(node);
  const GpuSetSelector& selector = state.cluster().gpu_selector(node);
  bool met = false;
  std::optional<uint64_t> mask;
  if (HasTopologyPreference(ask)) {
    mask = selector.Select(free_gpus, ask.count, ask.topology, true);
    met = mask.has_value();
  }
  if (!mask) mask = selector.Select(free_gpus, ask.count, ask.topology, ask.topology_required);
  if (!mask) return std::nullopt;
  return WholeSet{*mask, std::min(BottleneckGBps(spec, *mask), kBottleneckCap), met};
}

std::vector<int32_t> BottleneckCeilings(const Cluster& cluster) {
  std::vector<int32_t> ceilings(cluster.max_gpus_per_node() + 1, 0);
  for (size_t c = 0; c < ceilings.size() && c <= 1; ++c) ceilings[c] = kBottleneckCap;
  for (const NodeSpec& n : cluster.nodes()) {
    if (n.gpu_count() < 2) continue;
    NvLinkGeneration gen = NvLinkGenerationForModel(n.gpus[0].model);
    int32_t best_pair = 0;
    for (int i = 0; i < n.gpu_count(); ++i) {
      for (int j = i + 1; j < n.gpu_count(); ++j) {
        best_pair = std::max(best_pair, LinkBandwidthGBps(n.links.at(i, j), gen));
      }
    }
    for (int c = 2; c <= n.gpu_count(); ++c) {
      ceilings[c] = std::max(ceilings[c], std::min(best_pair, kBottleneckCap));
    }
  }
  return ceilings;
}

namespace {

// One bucket walk over the nodes of one tier.
std::optional<NodeChoice> Walk(Policy& policy, const ClusterState& state, const Query& query,
                               const FreeCapacityIndex& index, const std::vector<int32_t>& ceilings,
                               std::vector<NodeId>* declined, const NodeTier* tier) {
  const int count = query.request->gpu.count;
  if (count <= 0 || count >= static_cast<int>(ceilings.size())) return std::nullopt;
  const double ceiling_score_part = ceilings[count];
  const double bonus = tier ? tier->bonus : 0;
  for (int k = std::max(count, 0); k <= index.max_bucket(); ++k) {
    std::optional<NodeChoice> best;
    for (int32_t id : index.whole_bucket(k)) {
      NodeId node(id);
      if (tier && !tier->in(node)) continue;
      NodeFit fit = CheckNode(state, query, node);
      if (!fit.ok()) continue;
      std::optional<NodeChoice> c = policy.ScoreNode(state, query, node, fit);
      if (!c) {
        if (declined) declined->push_back(node);
        continue;
      }
      if (!best || c->score > best->score) best = std::move(c);
      if (best->score - bonus >= BestFitWholeScore(k - count, 0) + ceiling_score_part) break;
    }
    if (best) return best;
  }
  return std::nullopt;
}

}  // namespace

std::optional<NodeChoice> ChooseWholeBestFit(Policy& policy, const ClusterState& state,
                                             const Query& query, const FreeCapacityIndex& index,
                                             const std::vector<int32_t>& ceilings,
                                             std::vector<NodeId>* declined,
                                             const std::vector<NodeTier>& tiers) {
  // Passes in score order: the preference tier (a preferred level met) first, then each of the
  // policy's tiers, best first; within a pass, the bucket walk.
  auto passes = [&](const Query& q, std::vector<NodeId>* out) -> std::optional<NodeChoice> {
    if (tiers.empty()) return Walk(policy, state, q, index, ceilings, out, nullptr);
    for (const NodeTier& t : tiers) {
      if (std::optional<NodeChoice> c = Walk(policy, state, q, index, ceilings, out, &t)) return c;
    }
    return std::nullopt;
  };
  if (HasTopologyPreference(query.request->gpu)) {
    PodRequest strict = *query.request;
    strict.gpu.topology_required = true;
    std::vector<NodeId> ignored;
    if (std::optional<NodeChoice> c =
            passes(Query(state, strict, query.candidates, query.nodes), &ignored)) {
      return c;
    }
  }
  return passes(query, declined);
}

}  // namespace tessera::core
