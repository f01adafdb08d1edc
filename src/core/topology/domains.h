// Cluster topology for gangs: levels (NVLink domain, rack, block, zone, ...) read from node
// labels, and the domains of each level a gang may be kept inside.
//
// An NVLink domain is a set of GPUs joined by NVLink: all nodes labelled with the same
// `tessera.dev/nvlink-domain` value (an NVL72 rack), or, on an unlabelled node, each group of
// GPUs connected by NVLink links (an NVSwitch server is one group). PCIe-only GPUs belong to none.
// Other levels are plain node labels; nodes without the label belong to no domain of that level.
//
// Order (what ties between domains go by): per level, the labelled domains by label value, then
// (nvlink-domain only) the unlabelled islands in node order; each domain's nodes in node order.
// Append keeps that order for a node added at the end, so that it equals a rebuild.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/fit.h"
#include "core/model/cluster.h"
#include "core/model/shared_chunks.h"

namespace tessera::core {

inline constexpr std::string_view kNvlinkDomainLevel = "nvlink-domain";
inline constexpr std::string_view kNvlinkDomainLabel = "tessera.dev/nvlink-domain";
inline constexpr std::string_view kRackLabel = "tessera.dev/rack";
inline constexpr std::string_view kBlockLabel = "tessera.dev/block";
inline constexpr std::string_view kZoneLabel = "topology.kubernetes.io/zone";

struct TopologyLevel {
  std::string name;   // "rack"
  std::string label;  // "tessera.dev/rack"
};

// Narrowest first. Defaults: nvlink-domain, rack, block, zone.
std::vector<TopologyLevel> DefaultTopologyLevels();

struct Domain {
  std::string name;                   // label value, or "<node>/nvlink<k>" for an unlabelled island
  std::vector<Candidate> candidates;  // its nodes, and on each the GPUs inside the domain
  int gpu_count = 0;
};

// Copies are cheap (an engine's what-if copy of 10,000 NVLink islands): the domains of each level
// and the nodes' islands are kept in shared chunks (model/shared_chunks.h), copied only where a
// copy changes them (a node appended: the last chunk, or the labelled domain it joins).
class TopologyDomains {
 public:
  using Domains = SharedChunks<Domain>;

  TopologyDomains(const Cluster& cluster, std::vector<TopologyLevel> levels);
  // A copy of `other` for `cluster`, an equal copy of other's cluster (an engine's copy).
  TopologyDomains(const TopologyDomains& other, const Cluster& cluster) : TopologyDomains(other) {
    cluster_ = &cluster;
  }

  const std::vector<TopologyLevel>& levels() const { return levels_; }
  // The node `id`, just added at the end of `cluster` (the one given at construction, which must
  // outlive this), joined to the domains in place, as a rebuild would place it, and true; false,
  // changing nothing, where a rebuild would order the domains differently (the node's label
  // value is new and sorts before another domain of its level): the caller rebuilds. `joined`
  // gets (level, domain) for each domain the node is now in, in level then domain order.
  bool Append(NodeId id, std::vector<std::pair<int, int>>* joined);

  // Index of a level by name, or -1.
  int LevelIndex(std::string_view name) const;
  const Domains& domains(int level) const { return domains_[level]; }

  // The NVLink domain of one GPU, or nullopt for a GPU joined to no other by NVLink.
  std::optional<std::string> NvlinkDomainOf(NodeId node, int gpu) const;
  // The domain of `level` a GPU is in (NvlinkDomainOf for nvlink-domain, else the node's label
  // value), or nullopt when it is in none.
  std::optional<std::string> DomainOf(int level, NodeId node, int gpu) const;

 private:
  const Cluster* cluster_;
  std::vector<TopologyLevel> levels_;
  std::vector<Domains> domains_;  // per level
  std::vector<int> labelled_;     // per level: its labelled domains, which come first
  // Per node, per GPU: NVLink island id (-1 when alone).
  SharedChunks<std::vector<int>> islands_;
};

}  // namespace tessera::core
