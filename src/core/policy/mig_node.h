// The MIG part of every policy's ScoreNode: the best MIG instance on one node for a MIG ask,
// with the policy's GPU preference (topology/mig_select.h), as a NodeChoice.
#pragma once

#include <optional>

#include "core/policy/policy.h"
#include "core/topology/mig_select.h"

namespace tessera::core {

std::optional<NodeChoice> ScoreMigNode(const ClusterState& state, const Query& query, NodeId node,
                                       const NodeFit& fit, MigPreference preference);

}  // namespace tessera::core
