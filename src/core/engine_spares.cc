// Hot spares (Engine::KeepSpares): which GPUs of each NVLink domain are held back for the
// replacement of a gang's lost member, and who may take them. The rule is in engine.h.
#include <algorithm>
#include <utility>

#include "common/status.h"
#include "core/engine.h"

namespace tessera::core {

int Engine::NvlinkLevel() const { return domains_.LevelIndex(kNvlinkDomainLevel); }

Placement Engine::SparePlacement(NodeId node, int gpu) const {
  Placement p;
  p.node = node;
  GpuGrant g;
  g.gpu = gpu;
  g.memory_mib = cluster_.node(node).gpus[static_cast<size_t>(gpu)].memory_mib;
  g.compute_milli = 1000;
  g.exclusive = true;
  p.gpus.push_back(g);
  return p;
}

void Engine::HoldSpare(NodeId node, int gpu) {
  if (spare_mask_.size() < static_cast<size_t>(cluster_.node_count())) {
    spare_mask_.resize(static_cast<size_t>(cluster_.node_count()), 0);
  }
  uint64_t& mask = spare_mask_[static_cast<size_t>(node.value())];
  TESSERA_CHECK((mask & (1ULL << gpu)) == 0);
  Commit(SparePlacement(node, gpu));
  mask |= 1ULL << gpu;
  ++spare_count_;
  NoteSpareChange(node);
}

void Engine::DropSpare(NodeId node, int gpu) {
  uint64_t& mask = spare_mask_[static_cast<size_t>(node.value())];
  TESSERA_CHECK((mask & (1ULL << gpu)) != 0);
  Undo(SparePlacement(node, gpu));
  mask &= ~(1ULL << gpu);
  --spare_count_;
  NoteSpareChange(node);
}

std::vector<int> Engine::DropSparesUnder(const Placement& p) {
  std::vector<int> dropped;
  if (!p.node.valid() || p.node.value() >= cluster_.node_count()) return dropped;
  for (uint64_t m = p.gpu_mask() & spare_gpus(p.node); m; m &= m - 1) {
    dropped.push_back(__builtin_ctzll(m));
    DropSpare(p.node, dropped.back());
  }
  return dropped;
}

void Engine::NoteSpareChange(NodeId node) {
  const auto n = static_cast<size_t>(node.value());
  if (spare_change_noted_.size() <= n) spare_change_noted_.resize(spare_mask_.size(), 0);
  if (spare_change_noted_[n]) return;
  spare_change_noted_[n] = 1;
  spare_changed_.push_back(node);
}

std::vector<NodeId> Engine::TakeSpareChanges() {
  for (NodeId n : spare_changed_) spare_change_noted_[static_cast<size_t>(n.value())] = 0;
  return std::exchange(spare_changed_, {});
}

void Engine::DropAllSpares() {
  for (size_t n = 0; n < spare_mask_.size() && spare_count_ > 0; ++n) {
    for (uint64_t m = spare_mask_[n]; m; m &= m - 1) {
      DropSpare(NodeId(static_cast<int>(n)), __builtin_ctzll(m));
    }
  }
}

void Engine::SettleSpares(int d) {
  const int level = NvlinkLevel();
  if (level < 0) return;
  const Domain& domain = domains_.domains(level)[static_cast<size_t>(d)];
  // The last `spares_per_domain_` GPUs free but for spares, walking the domain backwards.
  std::vector<std::pair<NodeId, int>> want;
  for (auto c = domain.candidates.rbegin();
       c != domain.candidates.rend() && static_cast<int>(want.size()) < spares_per_domain_; ++c) {
    if (!state_.accepts_pods(c->node)) continue;
    const uint64_t free = (state_.whole_free_mask(c->node) | spare_gpus(c->node)) & c->gpu_mask &
                          cluster_.node(c->node).all_gpus_mask();
    for (uint64_t m = free; m && static_cast<int>(want.size()) < spares_per_domain_;) {
      const int g = 63 - __builtin_clzll(m);
      want.emplace_back(c->node, g);
      m &= ~(1ULL << g);
    }
  }
  for (const Candidate& c : domain.candidates) {
    for (uint64_t m = spare_gpus(c.node) & c.gpu_mask; m; m &= m - 1) {
      const int g = __builtin_ctzll(m);
      if (std::find(want.begin(), want.end(), std::make_pair(c.node, g)) == want.end()) {
        DropSpare(c.node, g);
      }
    }
  }
  for (const auto& [node, g] : want) {
    if ((spare_gpus(node) & (1ULL << g)) == 0) HoldSpare(node, g);
  }
}

void Engine::SettleAllSpares() {
  const int level = NvlinkLevel();
  if (level < 0) return;
  const int domains = static_cast<int>(domains_.domains(level).size());
  for (int d = 0; d < domains; ++d) SettleSpares(d);
}

void Engine::SettleSparesOn(NodeId node) {
  const int level = NvlinkLevel();
  if (level < 0 || node.value() >= static_cast<int>(node_domains_.size())) return;
  for (const NodeDomain& nd : node_domains_[static_cast<size_t>(node.value())]) {
    if (nd.level == level) SettleSpares(nd.domain);
  }
}

void Engine::KeepSpares(int per_domain) {
  DropAllSpares();
  spares_per_domain_ = std::max(per_domain, 0);
  if (spares_per_domain_ > 0) SettleAllSpares();
}

bool Engine::MayTakeSpares(const Ask& ask) const {
  if (ask.kind != Ask::Kind::kElasticGang || ask.pods.empty() || !ask.pods[0].gang) return false;
  const int r = static_cast<int>(HeldOf(ask.running).size());
  return r > 0 && r < ask.pods[0].gang->min_members();
}

}  // namespace tessera::core
