// bestfit: the FGD paper's "BestFit" baseline (the simulator's BestFitScore). For a feasible node,
// s = 0.5 (CPU left - CPU asked) / 128 CPUs + 0.5 (GPU left - GPU asked) / 8 GPUs, and the score is
// int(100 x (1 - s)): the node left with the least free CPU and GPU wins, ties at random. GPUs on
// the node: the simulator's default selection (tightest GPU for a share, lowest free indices for
// whole GPUs). (The plugin's min-max normalisation keeps the order and adds no ties, so it is
// left out.)
// Example: a 2-CPU 0.5-GPU pod; node A free (10 CPU, 0.8 GPU) -> s = 0.0313 + 0.0188 -> 95;
// node B free (64 CPU, 8 GPUs) -> s = 0.242 + 0.469 -> 28. A wins.
#include "core/policy/factories.h"
#include "core/policy/fragmentation.h"
#include "core/policy/paper.h"
#include "core/policy/typical.h"

namespace tessera::core {
namespace {

class BestFitPolicy final : public PaperPolicy {
 public:
  using PaperPolicy::PaperPolicy;
  std::string_view name() const override { return "bestfit"; }

 protected:
  std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                               const NodeFit& fit) override {
    std::optional<uint64_t> gpus = BestGpus(state, query, node, fit);
    if (!gpus) return std::nullopt;
    const PodRequest& r = *query.request;
    const NodeSpec& spec = state.cluster().node(node);
    int64_t gpu_left = 0;
    for (int g = 0; g < spec.gpu_count(); ++g) gpu_left += GpuMilliLeft(state, node, g);
    const int64_t memory = spec.gpus.empty() ? 0 : spec.gpus[0].memory_mib;
    const int64_t gpu_ask = int64_t{MilliPerGpu(r.gpu, memory)} * r.gpu.gpu_count();
    const int64_t cpu_left = state.free_cpu_milli(node);
    const int64_t cpu = NonZeroCpuMilli(r.cpu_milli);
    if (cpu_left < cpu || gpu_left < gpu_ask) return Eval{0, *gpus};
    double s = double(cpu_left - cpu) / 128000.0 * 0.5 + double(gpu_left - gpu_ask) / 8000.0 * 0.5;
    return Eval{static_cast<int64_t>((1.0 - s) * 100.0), *gpus};
  }
};

}  // namespace

std::unique_ptr<Policy> NewBestFitPolicy(const PolicyOptions& options) {
  return std::make_unique<BestFitPolicy>(options.seed);
}

}  // namespace tessera::core
