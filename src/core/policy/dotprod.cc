// dotprod: the FGD paper's "DotProd" baseline (Tetris' alignment score as the simulator runs it:
// DotProductScore with dimExtMethod=merge, normMethod=max). The node's free vector (CPU left, GPU
// left summed over its GPUs) and the pod's request vector (CPU, milli-GPU in total) are each
// divided by the largest node shape (128 CPUs, 8 GPUs); the score is
// int(100 x (1 - dot / 2)), so the node whose free resources align least with the request wins
// (the simulator's sign), ties at random. GPUs on the node: the simulator's default selection.
// Example: a 4-CPU 1-GPU pod; node A free (8 CPU, 1 GPU), node B (96 CPU, 8 GPUs):
// A: dot = (8/128)(4/128) + (1/8)(1/8) = 0.0176 -> 99; B: 0.0234 + 0.125 -> 92. A wins.
#include "core/policy/factories.h"
#include "core/policy/fragmentation.h"
#include "core/policy/paper.h"
#include "core/policy/typical.h"

namespace tessera::core {
namespace {

constexpr double kMaxSpecCpu = 128000;
constexpr double kMaxSpecGpu = 8000;

class DotProdPolicy final : public PaperPolicy {
 public:
  using PaperPolicy::PaperPolicy;
  std::string_view name() const override { return "dotprod"; }

 protected:
  std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                               const NodeFit& fit) override {
    std::optional<uint64_t> gpus = BestGpus(state, query, node, fit);
    if (!gpus) return std::nullopt;
    const PodRequest& r = *query.request;
    const int64_t cpu = NonZeroCpuMilli(r.cpu_milli);
    const int64_t cpu_left = state.free_cpu_milli(node);
    if (cpu_left < cpu) return Eval{0, *gpus};  // no match group: the plugin's minimum score
    int64_t gpu_left = 0;
    const int n = state.cluster().node(node).gpu_count();
    for (int g = 0; g < n; ++g) gpu_left += GpuMilliLeft(state, node, g);
    const int64_t gpu_ask =
        int64_t{MilliPerGpu(r.gpu, ReferenceMemory(state, node))} * r.gpu.gpu_count();
    double dot = (double(cpu_left) / kMaxSpecCpu) * (double(cpu) / kMaxSpecCpu) +
                 (double(gpu_left) / kMaxSpecGpu) * (double(gpu_ask) / kMaxSpecGpu);
    double score = 1 - dot / 2;
    return Eval{static_cast<int64_t>(100.0 * score), *gpus};
  }

 private:
  static int64_t ReferenceMemory(const ClusterState& state, NodeId node) {
    const NodeSpec& spec = state.cluster().node(node);
    return spec.gpus.empty() ? 0 : spec.gpus[0].memory_mib;
  }
};

}  // namespace

std::unique_ptr<Policy> NewDotProdPolicy(const PolicyOptions& options) {
  return std::make_unique<DotProdPolicy>(options.seed);
}

}  // namespace tessera::core
