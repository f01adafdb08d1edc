// tessera: the default policy. Pack shares tightly, keep whole, well-connected GPUs free.
//
//  - A share goes first to a GPU that is already shared (best fit: the least free memory, then
//    compute, that still fits). Only when no shared GPU has room does it open a fresh GPU, and
//    then on the node that loses least: the fewest fully free GPUs (do not break up an empty
//    server), a PCIe-only node before an NVLink one (NVLink GPUs are worth more to multi-GPU
//    jobs), and on that node the GPU whose loss leaves the rest best connected.
//  - Whole GPUs: a node where a preferred interconnect level is met first; then nodes outside
//    rack-scale NVLink domains (nodes sharing a tessera.dev/nvlink-domain label, such as GB200
//    NVL72 trays), which are kept for the gangs that need them; then best fit (the node left
//    with the fewest fully free GPUs), then the best-connected set (gpu_select.h).
//  - CPU only: nodes without GPUs first, then nodes whose GPUs are all taken, then the fewest
//    free GPUs; best fit on CPU within that, so CPU-only work does not strand free GPUs.
// Example (the reality check): an 8-GPU NVSwitch server and a 2-GPU PCIe server, twenty 4Gi
// shares: the first opens a GPU on the PCIe server (2 free GPUs < 8, no NVLink); the other 19
// join it, filling its 80Gi exactly; the NVSwitch server stays whole for the training gang.
#include <climits>
#include <map>
#include <set>
#include <tuple>

#include "core/policy/factories.h"
#include "core/policy/mig_node.h"
#include "core/policy/whole_set.h"
#include "core/topology/domains.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {
namespace {

class TesseraPolicy final : public Policy {
 public:
  std::string_view name() const override { return "tessera"; }

  void Attach(const ClusterState& state) override {
    index_.Build(state);
    ceilings_ = BottleneckCeilings(state.cluster());
    const Cluster& cluster = state.cluster();
    nvlink_.assign(cluster.node_count(), 0);
    fresh_order_.clear();
    indexed_free_.assign(cluster.node_count(), -1);
    for (int i = 0; i < cluster.node_count(); ++i) {
      const NodeSpec& n = cluster.node(NodeId(i));
      for (int a = 0; a < n.gpu_count() && !nvlink_[i]; ++a) {
        for (int b = a + 1; b < n.gpu_count(); ++b) {
          if (n.links.at(a, b).kind == LinkKind::kNvLink) {
            nvlink_[i] = 1;
            break;
          }
        }
      }
      UpdateFresh(state, NodeId(i));
    }
    // Nodes of a rack-scale NVLink domain: one tessera.dev/nvlink-domain label value on two or
    // more nodes (GB200 NVL72 trays). Pods that do not ask for it go elsewhere first.
    std::map<std::string, int> domain_nodes;
    const std::string label(kNvlinkDomainLabel);
    for (const NodeSpec& n : cluster.nodes()) {
      if (auto it = n.labels.find(label); it != n.labels.end()) ++domain_nodes[it->second];
    }
    rack_domain_.assign(cluster.node_count(), 0);
    bool any_rack_domain = false;
    for (int i = 0; i < cluster.node_count(); ++i) {
      const NodeSpec& n = cluster.node(NodeId(i));
      if (auto it = n.labels.find(label); it != n.labels.end() && domain_nodes[it->second] > 1) {
        rack_domain_[i] = 1;
        any_rack_domain = true;
      }
    }
    whole_tiers_.clear();
    if (any_rack_domain) {
      whole_tiers_.push_back({[this](NodeId n) { return !rack_domain_[n.value()]; }, kKeepDomainTier});
      whole_tiers_.push_back({[this](NodeId n) { return rack_domain_[n.value()] != 0; }, 0});
    }
  }

  void OnNodeChanged(const ClusterState& state, NodeId node) override {
    index_.Update(state, node);
    UpdateFresh(state, node);
  }

  std::optional<NodeChoice> ScoreNode(const ClusterState& state, const Query& query, NodeId node,
                                      const NodeFit& fit) override {
    const PodRequest& r = *query.request;
    NodeChoice c;
    switch (r.gpu.kind) {
      case GpuAsk::Kind::kNone: {
        const NodeSpec& spec = state.cluster().node(node);
        int free = state.whole_free_count(node);
        int tier = spec.gpu_count() == 0 ? 2 : free == 0 ? 1 : 0;
        c.score = tier * 1e13 - free * 1e10 - double(state.free_cpu_milli(node));
        c.placement = MakePlacement(state, r, node, 0);
        return c;
      }
      case GpuAsk::Kind::kWhole: {
        std::optional<WholeSet> set = PickWholeSet(state, query, node, fit.gpus);
        if (!set) return std::nullopt;
        c.score = BestFitWholeScore(state.whole_free_count(node) - r.gpu.count, set->bottleneck) +
                  PreferenceBonus(*set) + DomainTierBonus(node);
        c.placement = MakePlacement(state, r, node, set->mask);
        return c;
      }
      case GpuAsk::Kind::kMig:
        return ScoreMigNode(state, query, node, fit, MigPreference::kLeastLoss);
      case GpuAsk::Kind::kShare:
      case GpuAsk::Kind::kFraction: {
        // Tier 1: the fullest already-shared GPU with room.
        int best = -1;
        double best_key = 0;
        for (uint64_t a = fit.gpus & ~state.whole_free_mask(node); a; a &= a - 1) {
          int g = __builtin_ctzll(a);
          const GpuState& s = state.gpu(node, g);
          double key = GpuFreeKey(s.free_memory_mib, s.free_compute_milli);
          if (best < 0 || key < best_key) {
            best = g;
            best_key = key;
          }
        }
        if (best >= 0) {
          c.score = kSharedTier - best_key;
          c.placement = MakePlacement(state, r, node, 1ULL << best);
          return c;
        }
        // Tier 0: a fresh GPU, the one whose loss hurts the node's free set least.
        const NodeSpec& spec = state.cluster().node(node);
        std::optional<uint64_t> one =
            SelectGpuSet(spec, fit.gpus & state.whole_free_mask(node), 1, GpuTopology::kAny,
                         false);
        if (!one) return std::nullopt;
        c.score = -FreshRank(state, node);
        c.placement = MakePlacement(state, r, node, *one);
        return c;
      }
    }
    return std::nullopt;
  }

  std::optional<NodeChoice> Choose(const ClusterState& state, const Query& query,
                                   std::vector<NodeId>* declined) override {
    if (!use_index_ || query.candidates) return ScanCandidates(state, query, declined);
    const PodRequest& r = *query.request;
    switch (r.gpu.kind) {
      case GpuAsk::Kind::kWhole:
        return ChooseWholeBestFit(*this, state, query, index_, ceilings_, declined, whole_tiers_);
      case GpuAsk::Kind::kNone:
        return ScanCandidates(state, query, declined);
      case GpuAsk::Kind::kMig:
        return ScanCandidates(state, query, declined);
      case GpuAsk::Kind::kShare:
      case GpuAsk::Kind::kFraction: {
        const int32_t compute = ShareComputeOn(r.gpu);
        const int64_t min_memory = r.gpu.kind == GpuAsk::Kind::kShare ? r.gpu.memory_mib : 0;
        std::optional<FreeCapacityIndex::GpuKey> key = index_.FirstFit(
            true, min_memory, compute, [&](const FreeCapacityIndex::GpuKey& k) {
              NodeFit fit = CheckNode(state, query, NodeId(k.node));
              return fit.ok() && (fit.gpus & (1ULL << k.gpu));
            });
        if (key) {
          NodeChoice c;
          c.score = kSharedTier - GpuFreeKey(key->free_memory_mib, key->free_compute_milli);
          c.placement = MakePlacement(state, r, NodeId(key->node), 1ULL << key->gpu);
          return c;
        }
        for (auto it = fresh_order_.lower_bound({2, INT32_MIN}); it != fresh_order_.end(); ++it) {
          NodeId node(it->second);
          NodeFit fit = CheckNode(state, query, node);
          if (!fit.ok() || !(fit.gpus & state.whole_free_mask(node))) continue;
          std::optional<NodeChoice> c = ScoreNode(state, query, node, fit);
          if (c) return c;
        }
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

 private:
  static constexpr double kSharedTier = 1e12;
  // Whole GPUs: nodes outside rack-scale NVLink domains first (below the preference tier).
  static constexpr double kKeepDomainTier = 1e9;
  double DomainTierBonus(NodeId node) const {
    return whole_tiers_.empty() || rack_domain_[node.value()] ? 0 : kKeepDomainTier;
  }

  // Lower is better: fewer fully free GPUs, then PCIe-only before NVLink.
  int FreshRank(const ClusterState& state, NodeId node) const {
    return state.whole_free_count(node) * 2 + nvlink_[node.value()];
  }

  void UpdateFresh(const ClusterState& state, NodeId node) {
    int& indexed = indexed_free_[node.value()];
    if (indexed >= 0) fresh_order_.erase({indexed, node.value()});
    indexed = FreshRank(state, node);
    fresh_order_.insert({indexed, node.value()});
  }

  FreeCapacityIndex index_;
  std::vector<int32_t> ceilings_;
  std::vector<uint8_t> nvlink_;
  std::vector<uint8_t> rack_domain_;
  std::vector<NodeTier> whole_tiers_;
  std::vector<int> indexed_free_;
  // (FreshRank, node): nodes in the order tier 0 opens fresh GPUs.
  std::set<std::pair<int, int32_t>> fresh_order_;
};

}  // namespace

std::unique_ptr<Policy> NewTesseraPolicy(const PolicyOptions&) {
  return std::make_unique<TesseraPolicy>();
}

}  // namespace tessera::core
