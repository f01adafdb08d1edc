// gpu-packing: the FGD paper's "GpuPacking" baseline (the simulator's GpuPackingScore). Three
// tiers, best first, ties at random:
//   1. the pod fits on GPUs already in use: 100 - (free milli-GPU of the GPUs it would use,
//      in percent of a GPU, summed) / 10, at least 50;
//   2. the node is in use but the pod needs fully free GPUs: 50 - (free GPUs it takes), at least
//   33;
//   3. the node is untouched: max(33 - its GPU count, its GPU count) (smaller nodes first).
// CPU-only pods score 0 everywhere (uniformly random feasible node). GPUs on the node: the
// simulator's default selection.
// Example: a 0.25-GPU pod; node A has a GPU with 0.4 free -> 100 - 40/10 = 96; node B is
// untouched with 2 GPUs -> 31; A wins.
#include <algorithm>

#include "core/policy/factories.h"
#include "core/policy/fragmentation.h"
#include "core/policy/paper.h"
#include "core/policy/typical.h"

namespace tessera::core {
namespace {

class GpuPackingPolicy final : public PaperPolicy {
 public:
  using PaperPolicy::PaperPolicy;
  std::string_view name() const override { return "gpu-packing"; }

 protected:
  std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                               const NodeFit& fit) override {
    std::optional<uint64_t> gpus = BestGpus(state, query, node, fit);
    if (!gpus) return std::nullopt;
    const PodRequest& r = *query.request;
    if (r.gpu.kind == GpuAsk::Kind::kNone) return Eval{0, *gpus};
    const NodeSpec& spec = state.cluster().node(node);
    const int n = spec.gpu_count();
    int32_t left[kMaxGpusPerNode];
    int order[kMaxGpusPerNode];
    int fully_free = 0;
    for (int g = 0; g < n; ++g) {
      left[g] = GpuMilliLeft(state, node, g);
      order[g] = g;
      if (left[g] == 1000) ++fully_free;
    }
    if (fully_free == n) {
      return Eval{std::max<int64_t>(100 / 3 - fully_free, fully_free), *gpus};
    }
    std::stable_sort(order, order + n, [&](int a, int b) { return left[a] < left[b]; });
    const int32_t milli = MilliPerGpu(r.gpu, spec.gpus.empty() ? 0 : spec.gpus[0].memory_mib);
    int need = r.gpu.gpu_count();
    int free_used = 0;
    int64_t free_ratio = 0;
    for (int i = 0; i < n && need > 0; ++i) {
      const int32_t l = left[order[i]];
      if (milli <= l) {
        --need;
        if (l == 1000) ++free_used;
        free_ratio += int64_t{l} * 100 / 1000;
      }
    }
    if (need > 0) return Eval{0, *gpus};
    if (free_used > 0) return Eval{std::max<int64_t>(100 / 2 - free_used, 100 / 3), *gpus};
    return Eval{std::max<int64_t>(100 - free_ratio / 10, 100 / 2), *gpus};
  }
};

}  // namespace

std::unique_ptr<Policy> NewGpuPackingPolicy(const PolicyOptions& options) {
  return std::make_unique<GpuPackingPolicy>(options.seed);
}

}  // namespace tessera::core
