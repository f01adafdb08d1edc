// fgd: Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling
// GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23), as its public
// simulator runs it (FGDScore with its own GPU selection).
//
// A node's fragmentation F_n(M) is measured against the typical task set M (fragmentation.h). A
// pod goes where F grows least: for each feasible node (and, for a share, each GPU with room) the
// simulator scores int(100 x sigmoid((F_before - F_after) / 1000)); the node with the highest
// score wins, ties at random; on the node a share takes the GPU with the best score (lowest index
// on ties) and whole GPUs the lowest free indices. The integer rounding is kept: it decides which
// nodes tie.
// M comes from PolicyOptions::typical_tasks (the trace replay passes the trace's typical set).
// Without one, fgd learns M from the requests it is asked to place, re-deriving it whenever the
// number seen doubles (from 64 on), which clears its caches.
// Example: M = {1 whole GPU, 100%}; a 0.5-GPU pod; node A has GPUs free (1000, 600) milli, node B
// (1000, 1000). On A's 600 GPU, F goes 600 -> 100 (the whole-GPU task still fits; only the small
// GPU is fragment): sigmoid(0.5) -> 62. On A's free GPU, F goes 600 -> 1100 (no GPU is whole any
// more): 37. On B, F goes 0 -> 500: 37. A's 600-milli GPU wins.
#include <algorithm>
#include <cmath>

#include "core/policy/factories.h"
#include "core/policy/fragmentation.h"
#include "core/policy/paper.h"
#include "core/policy/typical.h"

namespace tessera::core {
namespace {

class FgdPolicy final : public PaperPolicy {
 public:
  FgdPolicy(const PolicyOptions& options)
      : PaperPolicy(options.seed), fixed_(options.typical_tasks) {}
  std::string_view name() const override { return "fgd"; }

  std::optional<NodeChoice> Choose(const ClusterState& state, const Query& query,
                                   std::vector<NodeId>* declined) override {
    if (fixed_.empty()) Learn(state, *query.request);
    return PaperPolicy::Choose(state, query, declined);
  }

 protected:
  void AttachPolicy(const ClusterState& state) override {
    seen_.clear();
    next_learn_ = 64;
    reference_memory_ = 0;
    for (const NodeSpec& node : state.cluster().nodes()) {
      for (const GpuSpec& g : node.gpus)
        reference_memory_ = std::max(reference_memory_, g.memory_mib);
    }
    measure_ = FragmentationMeasure(state.cluster(), fixed_);
    base_.assign(state.node_count(), Base{});
  }

  std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                               const NodeFit& fit) override {
    const PodRequest& r = *query.request;
    const NodeSpec& spec = state.cluster().node(node);
    const int n = spec.gpu_count();
    int32_t left[kMaxGpusPerNode];
    for (int g = 0; g < n; ++g) left[g] = GpuMilliLeft(state, node, g);
    const double before = BaseFragment(state, node, left);
    const int64_t cpu_after = state.free_cpu_milli(node) - NonZeroCpuMilli(r.cpu_milli);
    const std::span<const int32_t> view(left, n);
    if (r.gpu.kind == GpuAsk::Kind::kShare || r.gpu.kind == GpuAsk::Kind::kFraction) {
      const int32_t milli = MilliPerGpu(r.gpu, spec.gpus[0].memory_mib);
      Eval best;
      int best_gpu = -1;
      // Equal lefts give equal scores, and ties go to the lower index: evaluate each left once.
      int32_t values[kMaxGpusPerNode];
      int value_count = 0;
      for (uint64_t a = fit.gpus; a; a &= a - 1) {
        const int g = __builtin_ctzll(a);
        bool seen = false;
        for (int v = 0; v < value_count; ++v) seen |= values[v] == left[g];
        if (seen) continue;
        values[value_count++] = left[g];
        left[g] -= milli;
        const int64_t score = Score(before, measure_.NodeFragment(node, cpu_after, view));
        left[g] += milli;
        if (best_gpu < 0 || score > best.score) {
          best.score = score;
          best_gpu = g;
        }
      }
      if (best_gpu < 0) return std::nullopt;
      best.gpus = 1ULL << best_gpu;
      return best;
    }
    std::optional<uint64_t> gpus = BestGpus(state, query, node, fit);
    if (!gpus) return std::nullopt;
    for (uint64_t a = *gpus; a; a &= a - 1) left[__builtin_ctzll(a)] = 0;
    return Eval{Score(before, measure_.NodeFragment(node, cpu_after, view)), *gpus};
  }

 private:
  struct Base {
    uint64_t stamp = 0;
    double fragment = 0;
  };

  static int64_t Score(double before, double after) {
    const double x = (before - after) / 1000;
    return static_cast<int64_t>(1.0 / (1.0 + std::exp(-x)) * 100.0);
  }

  double BaseFragment(const ClusterState& state, NodeId node, const int32_t* left) {
    Base& b = base_[node.value()];
    const uint64_t stamp = state.version(node) + 1;
    if (b.stamp != stamp) {
      const int n = state.cluster().node(node).gpu_count();
      b.fragment = measure_.NodeFragment(node, state.free_cpu_milli(node),
                                         std::span<const int32_t>(left, n));
      b.stamp = stamp;
    }
    return b.fragment;
  }

  void Learn(const ClusterState& state, const PodRequest& request) {
    seen_.push_back(request);
    if (seen_.size() > kMaxSeen) {  // a long-running scheduler: learn from the recent past
      seen_.erase(seen_.begin(), seen_.begin() + kMaxSeen / 2);
      next_learn_ = seen_.size();
    }
    if (seen_.size() < next_learn_ && !measure_.empty()) return;
    if (seen_.size() >= next_learn_) next_learn_ *= 2;
    measure_ =
        FragmentationMeasure(state.cluster(), TypicalTasksOf(seen_, 0.95, reference_memory_));
    // The measure changed: every cached score is stale.
    ResetCaches();
    base_.assign(state.node_count(), Base{});
  }

  static constexpr size_t kMaxSeen = 1 << 16;

  std::vector<TypicalTask> fixed_;
  int64_t reference_memory_ = 0;
  FragmentationMeasure measure_;
  std::vector<Base> base_;
  std::vector<PodRequest> seen_;
  size_t next_learn_ = 64;
};

}  // namespace

std::unique_ptr<Policy> NewFgdPolicy(const PolicyOptions& options) {
  return std::make_unique<FgdPolicy>(options);
}

}  // namespace tessera::core
