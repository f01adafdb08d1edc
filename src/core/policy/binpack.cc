// binpack: fill what is already used before touching anything free.
//
//  - whole GPUs: the node left with the fewest fully free GPUs (best fit), then the
//    best-connected set on it;
//  - a share: the fullest GPU that still has room (least free memory, then compute), whether or
//    not it is shared yet;
//  - CPU only: the node with the least free CPU that fits.
// Ties go to the lower node id, then the lower GPU index. Indexed: a placement looks at the first
// few entries of FreeCapacityIndex instead of every node.
// Example: GPUs with 20Gi, 60Gi and 80Gi free, a 16Gi share: the 20Gi GPU.
#include <climits>

#include "core/policy/factories.h"
#include "core/policy/mig_node.h"
#include "core/policy/whole_set.h"

namespace tessera::core {
namespace {

class BinpackPolicy final : public Policy {
 public:
  std::string_view name() const override { return "binpack"; }

  void Attach(const ClusterState& state) override {
    index_.Build(state);
    ceilings_ = BottleneckCeilings(state.cluster());
  }
  void OnNodeChanged(const ClusterState& state, NodeId node) override {
    index_.Update(state, node);
  }

  std::optional<NodeChoice> ScoreNode(const ClusterState& state, const Query& query, NodeId node,
                                      const NodeFit& fit) override {
    const PodRequest& r = *query.request;
    NodeChoice c;
    switch (r.gpu.kind) {
      case GpuAsk::Kind::kNone:
        c.score = -double(state.free_cpu_milli(node));
        c.placement = MakePlacement(state, r, node, 0);
        return c;
      case GpuAsk::Kind::kWhole: {
        std::optional<WholeSet> set = PickWholeSet(state, query, node, fit.gpus);
        if (!set) return std::nullopt;
        c.score = BestFitWholeScore(state.whole_free_count(node) - r.gpu.count, set->bottleneck) +
                  PreferenceBonus(*set);
        c.placement = MakePlacement(state, r, node, set->mask);
        return c;
      }
      case GpuAsk::Kind::kMig:
        return ScoreMigNode(state, query, node, fit, MigPreference::kFullest);
      case GpuAsk::Kind::kShare:
      case GpuAsk::Kind::kFraction: {
        int best = -1;
        double best_key = 0;
        for (uint64_t a = fit.gpus; a; a &= a - 1) {
          int g = __builtin_ctzll(a);
          const GpuState& s = state.gpu(node, g);
          double key = GpuFreeKey(s.free_memory_mib, s.free_compute_milli);
          if (best < 0 || key < best_key) {
            best = g;
            best_key = key;
          }
        }
        c.score = -best_key;
        c.placement = MakePlacement(state, r, node, 1ULL << best);
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
        return ChooseWholeBestFit(*this, state, query, index_, ceilings_, declined);
      case GpuAsk::Kind::kNone: {
        auto it = index_.cpus().lower_bound({r.cpu_milli, INT32_MIN});
        for (; it != index_.cpus().end(); ++it) {
          NodeId node(it->node);
          NodeFit fit = CheckNode(state, query, node);
          if (fit.ok()) return ScoreNode(state, query, node, fit);
        }
        return std::nullopt;
      }
      case GpuAsk::Kind::kMig:
        return ScanCandidates(state, query, declined);
      case GpuAsk::Kind::kShare:
      case GpuAsk::Kind::kFraction: {
        const int32_t compute = ShareComputeOn(r.gpu);
        const int64_t min_memory = r.gpu.kind == GpuAsk::Kind::kShare ? r.gpu.memory_mib : 0;
        // The first feasible entry in key order is the scan's choice.
        std::optional<FreeCapacityIndex::GpuKey> key =
            index_.FirstFit(false, min_memory, compute, [&](const FreeCapacityIndex::GpuKey& k) {
              NodeFit fit = CheckNode(state, query, NodeId(k.node));
              return fit.ok() && (fit.gpus & (1ULL << k.gpu));
            });
        if (key) {
          NodeChoice c;
          c.score = -GpuFreeKey(key->free_memory_mib, key->free_compute_milli);
          c.placement = MakePlacement(state, r, NodeId(key->node), 1ULL << key->gpu);
          return c;
        }
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

 private:
  FreeCapacityIndex index_;
  std::vector<int32_t> ceilings_;
};

}  // namespace

std::unique_ptr<Policy> NewBinpackPolicy(const PolicyOptions&) {
  return std::make_unique<BinpackPolicy>();
}

}  // namespace tessera::core
