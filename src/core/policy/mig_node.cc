#include "core/policy/mig_node.h"

namespace tessera::core {

std::optional<NodeChoice> ScoreMigNode(const ClusterState& state, const Query& query, NodeId node,
                                       const NodeFit& fit, MigPreference preference) {
  const PodRequest& r = *query.request;
  std::optional<MigChoice> c = ChooseMig(state, node, fit.gpus, r.gpu.mig_profile, preference);
  if (!c) return std::nullopt;
  NodeChoice choice;
  choice.score = c->score;
  choice.placement = MakeMigPlacement(state, r, node, c->gpu, c->placement, c->plan);
  return choice;
}

}  // namespace tessera::core
