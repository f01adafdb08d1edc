// Shared by the policies that pack whole-GPU asks best-fit: the GPU set on one node, its score,
// and the indexed search over nodes bucketed by free GPUs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/policy/free_index.h"
#include "core/policy/policy.h"

namespace tessera::core {

// Bottleneck bandwidths are capped here so that a single GPU (no pair) and scores stay finite.
inline constexpr int32_t kBottleneckCap = 1'000'000;

struct WholeSet {
  uint64_t mask = 0;
  int32_t bottleneck = 0;       // GB/s, capped at kBottleneckCap
  bool preference_met = false;  // a preferred topology level is met by this set
};

// Whether the ask prefers (not requires) an interconnect level: nvlink, pcie-switch or numa.
inline bool HasTopologyPreference(const GpuAsk& ask) {
  return ask.kind == GpuAsk::Kind::kWhole && ask.count > 1 && !ask.topology_required &&
         ask.topology != GpuTopology::kAny && ask.topology != GpuTopology::kNode;
}

// The best-connected `count` GPUs among `free_gpus` (gpu_select.h), honouring the ask's topology:
// required refuses sets below the level; preferred takes the best set meeting the level when the
// node has one (preference_met), else the best set of all.
std::optional<WholeSet> PickWholeSet(const ClusterState& state, const Query& query, NodeId node,
                                     uint64_t free_gpus);

// Added to a node's score when a preferred level is met, above every best-fit and bandwidth
// term (and above a policy's own tiers, at most kPolicyTierLimit): a pod preferring NVLink goes
// to a node where it gets NVLink before any other.
inline constexpr double kPreferenceTier = 4e9;
inline constexpr double kPolicyTierLimit = 2e9;
inline double PreferenceBonus(const WholeSet& set) {
  return set.preference_met ? kPreferenceTier : 0;
}

// Best fit first (fewest fully free GPUs left on the node), then the best-connected set.
inline double BestFitWholeScore(int whole_free_after, int32_t bottleneck) {
  return -double(whole_free_after) * 1e7 + double(bottleneck);
}

// The highest bottleneck any set of `count` GPUs of the cluster can have, for count = 0..max
// GPUs per node (compute once, at Attach).
std::vector<int32_t> BottleneckCeilings(const Cluster& cluster);

// Indexed equivalent of scanning every node with BestFitWholeScore (+ PreferenceBonus): walks the
// buckets of nodes with count, count+1, ... free GPUs, and within the first bucket with a
// feasible node takes the best-connected (lowest id on ties), stopping early once the ceiling is
// reached. A preferred level is a first pass with the level required (the bonus tier), then a
// plain pass.
// A policy's own tiers over nodes (best first): the nodes `in` a tier get `bonus` added to their
// score by the policy's ScoreNode (0 <= bonus < kPolicyTierLimit). Empty: one tier, every node.
struct NodeTier {
  std::function<bool(NodeId)> in;
  double bonus = 0;
};

std::optional<NodeChoice> ChooseWholeBestFit(Policy& policy, const ClusterState& state,
                                             const Query& query, const FreeCapacityIndex& index,
                                             const std::vector<int32_t>& ceilings,
                                             std::vector<NodeId>* declined,
                                             const std::vector<NodeTier>& tiers = {});

// The share key policies order GPUs by: free memory, then free compute (compute < 2048).
inline double GpuFreeKey(int64_t free_memory_mib, int32_t free_compute_milli) {
  return double(free_memory_mib) * 2048.0 + double(free_compute_milli);
}

}  // namespace tessera::core
