#include "core/topology/domains.h"

#include <algorithm>
#include <map>

#include "common/strings.h"

namespace tessera::core {

std::vector<TopologyLevel> DefaultTopologyLevels() {
  return {
      {std::string(kNvlinkDomainLevel), std::string(kNvlinkDomainLabel)},
      {"rack", std::string(kRackLabel)},
      {"block", std::string(kBlockLabel)},
      {"zone", std::string(kZoneLabel)},
  };
}

namespace {

// Connected components of the NVLink graph; islands of one GPU get -1.
std::vector<int> NvlinkIslands(const NodeSpec& n) {
  const int g = n.gpu_count();
  std::vector<int> comp(g, -1);
  int next = 0;
  for (int s = 0; s < g; ++s) {
    if (comp[s] >= 0) continue;
    std::vector<int> stack = {s};
    comp[s] = next;
    int size = 0;
    while (!stack.empty()) {
      int a = stack.back();
      stack.pop_back();
      ++size;
      for (int b = 0; b < g; ++b) {
        if (comp[b] < 0 && n.links.at(a, b).kind == LinkKind::kNvLink) {
          comp[b] = next;
          stack.push_back(b);
        }
      }
    }
    if (size == 1) {
      comp[s] = -1;
    } else {
      ++next;
    }
  }
  return comp;
}

// The NVLink islands of node `id` (islands: NvlinkIslands of its spec `n`) as domains of the
// nvlink-domain level, in island order: a node without the level's label.
std::vector<Domain> IslandDomains(const NodeSpec& n, NodeId id, const std::vector<int>& islands) {
  std::map<int, uint64_t> masks;
  for (int g = 0; g < n.gpu_count(); ++g) {
    if (islands[g] >= 0) masks[islands[g]] |= 1ULL << g;
  }
  std::vector<Domain> out;
  for (const auto& [island, mask] : masks) {
    Domain d;
    d.name = StrCat(n.name, "/nvlink", island);
    d.candidates.push_back({id, mask});
    d.gpu_count = __builtin_popcountll(mask);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

TopologyDomains::TopologyDomains(const Cluster& cluster, std::vector<TopologyLevel> levels)
    : cluster_(&cluster), levels_(std::move(levels)) {
  for (const NodeSpec& n : cluster.nodes()) islands_.Append(NvlinkIslands(n));
  domains_.resize(levels_.size());
  labelled_.assign(levels_.size(), 0);
  for (size_t l = 0; l < levels_.size(); ++l) {
    const TopologyLevel& level = levels_[l];
    std::map<std::string, Domain> by_value;
    std::vector<Domain> islands;
    for (int i = 0; i < cluster.node_count(); ++i) {
      const NodeSpec& n = cluster.node(NodeId(i));
      auto label = n.labels.find(level.label);
      if (label != n.labels.end()) {
        Domain& d = by_value[label->second];
        d.name = label->second;
        d.candidates.push_back({NodeId(i), n.all_gpus_mask()});
        d.gpu_count += n.gpu_count();
        continue;
      }
      if (level.name != kNvlinkDomainLevel) continue;
      for (Domain& d : IslandDomains(n, NodeId(i), islands_[static_cast<size_t>(i)]))
        islands.push_back(std::move(d));
    }
    for (auto& [value, d] : by_value) domains_[l].Append(std::move(d));
    labelled_[l] = static_cast<int>(domains_[l].size());
    for (Domain& d : islands) domains_[l].Append(std::move(d));
  }
}

bool TopologyDomains::Append(NodeId id, std::vector<std::pair<int, int>>* joined) {
  const int i = id.value();
  if (i != static_cast<int>(islands_.size()) || i + 1 != cluster_->node_count()) return false;
  const NodeSpec& n = cluster_->node(id);
  // First where the node goes at each level (its labelled domain, existing or new, else -1),
  // checking that a new labelled domain would come last, as a rebuild would place it.
  std::vector<int> at(levels_.size(), -1);
  for (size_t l = 0; l < levels_.size(); ++l) {
    auto label = n.labels.find(levels_[l].label);
    if (label == n.labels.end()) continue;
    const Domains& domains = domains_[l];
    // The first labelled domain not before the value (they are sorted by name).
    int lo = 0, hi = labelled_[l];
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (domains[static_cast<size_t>(mid)].name < label->second) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo != labelled_[l] && domains[static_cast<size_t>(lo)].name == label->second) {
      at[l] = lo;
    } else if (lo == labelled_[l] && static_cast<size_t>(lo) == domains.size()) {
      at[l] = static_cast<int>(domains.size());  // a new value, last: nothing after it
    } else {
      return false;
    }
  }
  islands_.Append(NvlinkIslands(n));
  for (size_t l = 0; l < levels_.size(); ++l) {
    Domains& domains = domains_[l];
    if (at[l] >= 0) {
      if (at[l] == static_cast<int>(domains.size())) {
        domains.Append().name = n.labels.find(levels_[l].label)->second;
        ++labelled_[l];
      }
      Domain& d = domains.Mutable(static_cast<size_t>(at[l]));
      d.candidates.push_back({id, n.all_gpus_mask()});
      d.gpu_count += n.gpu_count();
      joined->emplace_back(static_cast<int>(l), at[l]);
      continue;
    }
    if (levels_[l].name != kNvlinkDomainLevel) continue;
    for (Domain& d : IslandDomains(n, id, islands_[static_cast<size_t>(i)])) {
      domains.Append(std::move(d));
      joined->emplace_back(static_cast<int>(l), static_cast<int>(domains.size()) - 1);
    }
  }
  return true;
}

int TopologyDomains::LevelIndex(std::string_view name) const {
  for (size_t i = 0; i < levels_.size(); ++i) {
    if (levels_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::optional<std::string> TopologyDomains::NvlinkDomainOf(NodeId node, int gpu) const {
  const NodeSpec& n = cluster_->node(node);
  auto label = n.labels.find(std::string(kNvlinkDomainLabel));
  if (label != n.labels.end()) return label->second;
  int island = islands_[static_cast<size_t>(node.value())][gpu];
  if (island < 0) return std::nullopt;
  return StrCat(n.name, "/nvlink", island);
}

std::optional<std::string> TopologyDomains::DomainOf(int level, NodeId node, int gpu) const {
  const TopologyLevel& l = levels_[level];
  if (l.name == kNvlinkDomainLevel) return NvlinkDomainOf(node, gpu);
  const NodeSpec& n = cluster_->node(node);
  auto label = n.labels.find(l.label);
  if (label == n.labels.end()) return std::nullopt;
  return label->second;
}

}  // namespace tessera::core
