// whole-gpu: today's Kubernetes with the NVIDIA device plugin.
//
// Every GPU ask takes whole GPUs: a 4Gi share takes one whole GPU exclusively. Nodes are chosen
// like kube-scheduler's default LeastAllocated scoring (spread: the node with the most free CPU,
// memory and GPUs, as a share of its capacity, averaged), and GPUs on the node are the lowest
// free indices, blind to topology (the device plugin without topology hints); MIG instances go to
// the first GPU and start slice that fit, blind to fragmentation. There are no gangs:
// members of a gang are placed one by one, each on its own.
// Example (GPUs alone scored): nodes A (8 GPUs) and B (2 GPUs), eight 1-GPU pods go to
// A, A, A, A (A ends half free, ties with B: lower node first), B, A, A, A.
#include "core/policy/factories.h"
#include "core/policy/mig_node.h"

namespace tessera::core {
namespace {

class WholeGpuPolicy final : public Policy {
 public:
  std::string_view name() const override { return "whole-gpu"; }
  bool places_gangs_together() const override { return false; }

  bool whole_gpus_only() const override { return true; }

  std::optional<NodeChoice> ScoreNode(const ClusterState& state, const Query& query, NodeId node,
                                      const NodeFit& fit) override {
    const PodRequest& r = *query.request;
    std::optional<NodeChoice> mig;
    if (r.gpu.kind == GpuAsk::Kind::kMig) {
      // MIG slices as a device plugin with static partitions hands them out: the first GPU and
      // start that fit, blind to fragmentation.
      mig = ScoreMigNode(state, query, node, fit, MigPreference::kFirstFit);
      if (!mig) return std::nullopt;
    }
    uint64_t mask = 0;
    for (uint64_t a = fit.gpus; a && __builtin_popcountll(mask) < r.gpu.gpu_count(); a &= a - 1) {
      mask |= a & -a;
    }
    const NodeSpec& spec = state.cluster().node(node);
    double sum = 0;
    int dims = 0;
    if (spec.cpu_milli > 0) {
      sum += double(state.free_cpu_milli(node) - r.cpu_milli) / double(spec.cpu_milli);
      ++dims;
    }
    if (spec.memory_mib > 0) {
      sum += double(state.free_memory_mib(node) - r.memory_mib) / double(spec.memory_mib);
      ++dims;
    }
    if (spec.gpu_count() > 0) {
      sum += double(state.whole_free_count(node) - r.gpu.gpu_count()) / spec.gpu_count();
      ++dims;
    }
    NodeChoice c;
    c.score = dims ? sum / dims : 0;
    c.placement = mig ? std::move(mig->placement) : MakePlacement(state, r, node, mask);
    return c;
  }
};

}  // namespace

std::unique_ptr<Policy> NewWholeGpuPolicy(const PolicyOptions&) {
  return std::make_unique<WholeGpuPolicy>();
}

}  // namespace tessera::core
