// random: the FGD paper's "Random" baseline. Every feasible node is equally likely (the
// simulator's RandomScore gives one uniformly drawn feasible node the top score); on the node, a
// share takes a uniformly drawn GPU among those with room (the paper runs it with
// gpuSelMethod=random) and whole GPUs the lowest free indices.
// Example: three feasible nodes: each is chosen with probability 1/3, reproducibly per seed.
#include "core/policy/factories.h"
#include "core/policy/paper.h"

namespace tessera::core {
namespace {

class RandomPolicy final : public PaperPolicy {
 public:
  using PaperPolicy::PaperPolicy;
  std::string_view name() const override { return "random"; }

 protected:
  std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                               const NodeFit& fit) override {
    std::optional<uint64_t> gpus = BestGpus(state, query, node, fit);
    if (!gpus) return std::nullopt;
    return Eval{0, *gpus};
  }

  uint64_t FinalGpus(const ClusterState& state, const Query& query, NodeId node,
                     uint64_t evaluated) override {
    const GpuAsk& ask = query.request->gpu;
    if (ask.kind != GpuAsk::Kind::kShare && ask.kind != GpuAsk::Kind::kFraction) return evaluated;
    const uint64_t room = CheckNode(state, query, node).gpus;
    const int count = __builtin_popcountll(room);
    if (count <= 1) return evaluated;
    uint64_t a = room;
    for (uint64_t k = rng().Uniform(static_cast<uint64_t>(count)); k > 0; --k) a &= a - 1;
    return a & -a;
  }
};

}  // namespace

std::unique_ptr<Policy> NewRandomPolicy(const PolicyOptions& options) {
  return std::make_unique<RandomPolicy>(options.seed, /*random_choice=*/true);
}

}  // namespace tessera::core
