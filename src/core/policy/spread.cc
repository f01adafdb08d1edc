// spread: keep load even, the opposite of binpack.
//
//  - whole GPUs: the node with the most fully free GPUs, then the best-connected set on it;
//  - a share: the GPU with the most free memory (then compute);
//  - CPU only: the node with the most free CPU.
// Ties go to the lower node id, then the lower GPU index. Indexed like binpack, walking the
// indexes from the top.
// Example: GPUs with 20Gi, 60Gi and 80Gi free, a 16Gi share: the 80Gi GPU.
#include <climits>

#include "core/policy/factories.h"
#include "core/policy/mig_node.h"
#include "core/policy/whole_set.h"

namespace tessera::core {
namespace {

class SpreadPolicy final : public Policy {
 public:
  std::string_view name() const override { return "spread"; }

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
        c.score = double(state.free_cpu_milli(node));
        c.placement = MakePlacement(state, r, node, 0);
        return c;
      case GpuAsk::Kind::kWhole: {
        std::optional<WholeSet> set = PickWholeSet(state, query, node, fit.gpus);
        if (!set) return std::nullopt;
        c.score =
            double(state.whole_free_count(node)) * 1e7 + set->bottleneck + PreferenceBonus(*set);
        c.placement = MakePlacement(state, r, node, set->mask);
        return c;
      }
      case GpuAsk::Kind::kMig:
        return ScoreMigNode(state, query, node, fit, MigPreference::kEmptiest);
      case GpuAsk::Kind::kShare:
      case GpuAsk::Kind::kFraction: {
        int best = -1;
        double best_key = 0;
        for (uint64_t a = fit.gpus; a; a &= a - 1) {
          int g = __builtin_ctzll(a);
          const GpuState& s = state.gpu(node, g);
          double key = GpuFreeKey(s.free_memory_mib, s.free_compute_milli);
          if (best < 0 || key > best_key) {
            best = g;
            best_key = key;
          }
        }
        c.score = best_key;
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
      case GpuAsk::Kind::kWhole: {
        // Most free first; within a bucket, the best-connected set, lowest id on ties. A
        // preferred level: first only nodes that meet it (the scan's bonus tier).
        if (r.gpu.count <= 0 || r.gpu.count > index_.max_bucket()) return std::nullopt;
        auto walk = [&](const Query& q, std::vector<NodeId>* out) -> std::optional<NodeChoice> {
          for (int k = index_.max_bucket(); k >= r.gpu.count; --k) {
            std::optional<NodeChoice> best;
            for (int32_t id : index_.whole_bucket(k)) {
              NodeId node(id);
              NodeFit fit = CheckNode(state, q, node);
              if (!fit.ok()) continue;
              std::optional<NodeChoice> c = ScoreNode(state, q, node, fit);
              if (!c) {
                if (out) out->push_back(node);
                continue;
              }
              if (!best || c->score > best->score) best = std::move(c);
              if (best->score >= double(k) * 1e7 + ceilings_[r.gpu.count]) break;
            }
            if (best) return best;
          }
          return std::nullopt;
        };
        if (HasTopologyPreference(r.gpu)) {
          PodRequest strict = r;
          strict.gpu.topology_required = true;
          std::vector<NodeId> ignored;
          if (std::optional<NodeChoice> c =
                  walk(Query(state, strict, nullptr, query.nodes), &ignored))
            return c;
        }
        return walk(query, declined);
      }
      case GpuAsk::Kind::kNone: {
        // The largest free CPU that fits; among equals, the lowest node id.
        for (auto it = index_.cpus().rbegin(); it != index_.cpus().rend(); ++it) {
          if (it->free_cpu_milli < r.cpu_milli) break;
          NodeFit fit = CheckNode(state, query, NodeId(it->node));
          if (!fit.ok()) continue;
          for (auto lo = index_.cpus().lower_bound({it->free_cpu_milli, INT32_MIN});; ++lo) {
            NodeFit f = CheckNode(state, query, NodeId(lo->node));
            if (f.ok()) return ScoreNode(state, query, NodeId(lo->node), f);
          }
        }
        return std::nullopt;
      }
      case GpuAsk::Kind::kMig:
        return ScanCandidates(state, query, declined);
      case GpuAsk::Kind::kShare:
      case GpuAsk::Kind::kFraction: {
        const int32_t compute = ShareComputeOn(r.gpu);
        std::optional<FreeCapacityIndex::GpuKey> key =
            index_.LastFit(compute, [&](const FreeCapacityIndex::GpuKey& k) {
              NodeFit fit = CheckNode(state, query, NodeId(k.node));
              return fit.ok() && (fit.gpus & (1ULL << k.gpu));
            });
        if (key) {
          NodeChoice c;
          c.score = GpuFreeKey(key->free_memory_mib, key->free_compute_milli);
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

std::unique_ptr<Policy> NewSpreadPolicy(const PolicyOptions&) {
  return std::make_unique<SpreadPolicy>();
}

}  // namespace tessera::core
