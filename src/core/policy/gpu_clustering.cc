// gpu-clustering: the FGD paper's "GpuClustering" baseline (the simulator's GpuClusteringScore):
// keep pods of one kind together. A GPU pod's kind is "share" (part of one GPU) or "k-gpu" (k whole
// GPUs). Scores, best first, ties at random, each plus 25 x (8 GPUs - free GPU on the node) / 8:
//   75 when the node hosts only pods of the same kind, 50 when it hosts that kind among others,
//   25 when it hosts no GPU pod, 0 when it hosts only other kinds.
// CPU-only pods score 0 everywhere. GPUs on the node: the simulator's default selection.
// The kinds hosted per node are kept from the changes the policy sees (OnNodeChanged): a change
// that makes k GPUs exclusive adds a k-gpu pod, one that adds a grant to a shared GPU adds a share.
// Example: a share pod; node A hosts shares only with 1.5 GPUs free -> 75 + 25 x 6.5/8 = 95;
// node B is untouched (8 GPUs free) -> 25; A wins.
#include <map>

#include "core/policy/factories.h"
#include "core/policy/fragmentation.h"
#include "core/policy/paper.h"

namespace tessera::core {
namespace {

class GpuClusteringPolicy final : public PaperPolicy {
 public:
  using PaperPolicy::PaperPolicy;
  std::string_view name() const override { return "gpu-clustering"; }

  void NodeChangedPolicy(const ClusterState& state, NodeId node) override {
    Shadow& s = shadow_[node.value()];
    std::span<const GpuState> gpus = state.gpus(node);
    int became_exclusive = 0, freed_exclusive = 0, shares_added = 0, shares_removed = 0;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const GpuState& now = gpus[g];
      const bool was_exclusive = s.exclusive[g];
      if (now.exclusive && !was_exclusive) ++became_exclusive;
      if (!now.exclusive && was_exclusive) ++freed_exclusive;
      if (!now.exclusive && !was_exclusive) {
        if (now.grants > s.grants[g]) shares_added += now.grants - s.grants[g];
        if (now.grants < s.grants[g]) shares_removed += s.grants[g] - now.grants;
      }
      s.exclusive[g] = now.exclusive;
      s.grants[g] = now.grants;
    }
    if (became_exclusive > 0) ++s.kinds[became_exclusive];
    if (freed_exclusive > 0 && --s.kinds[freed_exclusive] == 0) s.kinds.erase(freed_exclusive);
    if (shares_added > 0) s.kinds[kShareKind] += shares_added;
    if (shares_removed > 0 && (s.kinds[kShareKind] -= shares_removed) <= 0) {
      s.kinds.erase(kShareKind);
    }
  }

 protected:
  void AttachPolicy(const ClusterState& state) override {
    shadow_.assign(state.node_count(), Shadow{});
    for (int i = 0; i < state.node_count(); ++i) {
      Shadow& s = shadow_[i];
      std::span<const GpuState> gpus = state.gpus(NodeId(i));
      s.exclusive.assign(gpus.size(), false);
      s.grants.assign(gpus.size(), 0);
      NodeChangedPolicy(state, NodeId(i));
    }
  }

  std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                               const NodeFit& fit) override {
    std::optional<uint64_t> gpus = BestGpus(state, query, node, fit);
    if (!gpus) return std::nullopt;
    const GpuAsk& ask = query.request->gpu;
    if (ask.kind == GpuAsk::Kind::kNone) return Eval{0, *gpus};
    const int kind = ask.kind == GpuAsk::Kind::kWhole ? ask.count : kShareKind;
    const NodeSpec& spec = state.cluster().node(node);
    int64_t gpu_left = 0;
    for (int g = 0; g < spec.gpu_count(); ++g) gpu_left += GpuMilliLeft(state, node, g);
    const int64_t packing = 100 / 4 * (8000 - gpu_left) / 8000;
    const std::map<int, int>& kinds = shadow_[node.value()].kinds;
    auto it = kinds.find(kind);
    if (it != kinds.end() && it->second > 0) {
      return Eval{packing + (kinds.size() == 1 ? 100 * 3 / 4 : 100 * 2 / 4), *gpus};
    }
    return Eval{packing + (kinds.empty() ? 100 / 4 : 0), *gpus};
  }

 private:
  static constexpr int kShareKind = 0;  // k-gpu kinds are k >= 1
  struct Shadow {
    std::vector<bool> exclusive;
    std::vector<int32_t> grants;
    std::map<int, int> kinds;  // kind -> pods of that kind on the node
  };
  std::vector<Shadow> shadow_;
};

}  // namespace

std::unique_ptr<Policy> NewGpuClusteringPolicy(const PolicyOptions& options) {
  return std::make_unique<GpuClusteringPolicy>(options.seed);
}

}  // namespace tessera::core
