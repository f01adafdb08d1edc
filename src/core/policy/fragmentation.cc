#include "core/policy/fragmentation.h"

#include <algorithm>

namespace tessera::core {

int32_t GpuMilliLeft(const ClusterState& state, NodeId node, int g) {
  const GpuState& s = state.gpu(node, g);
  if (s.exclusive || state.cluster().node(node).gpus[g].mig_enabled) return 0;
  const int64_t capacity = state.cluster().node(node).gpus[g].memory_mib;
  int64_t by_memory = capacity > 0 ? s.free_memory_mib * 1000 / capacity : 0;
  int32_t left = static_cast<int32_t>(std::min<int64_t>(s.free_compute_milli, by_memory));
  if (s.grants > 0) left = std::min(left, 999);
  return left;
}

FragmentationMeasure::FragmentationMeasure(const Cluster& cluster, std::vector<TypicalTask> tasks)
    : tasks_(std::move(tasks)) {
  access_.assign(static_cast<size_t>(cluster.node_count()) * tasks_.size(), 0);
  for (size_t m = 0; m < tasks_.size(); ++m) {
    ModelSet models = cluster.ResolveModels(tasks_[m].gpu_models);
    for (int n = 0; n < cluster.node_count(); ++n) {
      access_[static_cast<size_t>(n) * tasks_.size() + m] =
          cluster.ModelMask(NodeId(n), models) != 0;
    }
  }
}

FragmentationMeasure::Amounts FragmentationMeasure::NodeAmounts(
    NodeId node, int64_t cpu_left, std::span<const int32_t> gpu_left) const {
  Amounts a{};
  int64_t total = 0;
  for (int32_t l : gpu_left) total += l;
  const double t = static_cast<double>(total);
  const uint8_t* access = access_.data() + static_cast<size_t>(node.value()) * tasks_.size();
  for (size_t m = 0; m < tasks_.size(); ++m) {
    const TypicalTask& task = tasks_[m];
    const double w = task.weight;
    if (task.gpu_milli == 0) {
      a[cpu_left >= task.cpu_milli ? kXlSatisfied : kXrLackCpu] += w * t;
      continue;
    }
    if (!access[m]) {
      a[kNoAccess] += w * t;
      continue;
    }
    int fit = 0;
    int64_t small = 0;
    for (int32_t l : gpu_left) {
      if (l >= task.gpu_milli) {
        ++fit;
      } else {
        small += l;
      }
    }
    const bool cpu_ok = cpu_left >= task.cpu_milli;
    if (task.gpu_count > 0 && fit >= task.gpu_count) {
      if (cpu_ok) {
        a[kQ2LackGpu] += w * static_cast<double>(small);
        a[kQ3Satisfied] += w * static_cast<double>(total - small);
      } else {
        a[kQ4LackCpu] += w * t;
      }
    } else {
      a[cpu_ok ? kQ2LackGpu : kQ1LackBoth] += w * t;
    }
  }
  return a;
}

double FragmentationMeasure::Fragment(const Amounts& a) {
  double out = 0;
  for (int b = 0; b < kBuckets; ++b) {
    if (b != kQ3Satisfied) out += a[b];
  }
  return out;
}

double FragmentationMeasure::Idle(const Amounts& a) {
  double out = 0;
  for (double v : a) out += v;
  return out;
}

double FragmentationMeasure::NodeFragment(NodeId node, int64_t cpu_left,
                                          std::span<const int32_t> gpu_left) const {
  return Fragment(NodeAmounts(node, cpu_left, gpu_left));
}

FragmentationMeasure::Amounts FragmentationMeasure::NodeAmounts(const ClusterState& state,
                                                                NodeId node) const {
  int32_t left[kMaxGpusPerNode];
  const int n = state.cluster().node(node).gpu_count();
  for (int g = 0; g < n; ++g) left[g] = GpuMilliLeft(state, node, g);
  return NodeAmounts(node, state.free_cpu_milli(node), std::span<const int32_t>(left, n));
}

FragmentationMeasure::Amounts FragmentationMeasure::ClusterAmounts(
    const ClusterState& state) const {
  Amounts sum{};
  for (int i = 0; i < state.node_count(); ++i) {
    Amounts a = NodeAmounts(state, NodeId(i));
    for (int b = 0; b < kBuckets; ++b) sum[b] += a[b];
  }
  return sum;
}

}  // namespace tessera::core
