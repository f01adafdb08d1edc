#include "core/policy/free_index.h"

namespace tessera::core {

void FreeCapacityIndex::Build(const ClusterState& state) {
  whole_buckets_.assign(state.cluster().max_gpus_per_node() + 1, {});
  gpus_.clear();
  shared_gpus_.clear();
  cpus_.clear();
  shadow_.assign(state.node_count(), Shadow{});
  for (int i = 0; i < state.node_count(); ++i) {
    shadow_[i].whole_free = -1;
    Update(state, NodeId(i));
  }
}

void FreeCapacityIndex::Update(const ClusterState& state, NodeId node) {
  Shadow& s = shadow_[node.value()];
  const int id = node.value();
  if (s.whole_free >= 0) {
    whole_buckets_[s.whole_free].erase(id);
    cpus_.erase(CpuKey{s.free_cpu, id});
    for (const GpuKey& k : s.gpus) gpus_.erase(k);
    for (const GpuKey& k : s.shared) shared_gpus_.erase(k);
  }
  s.whole_free = state.whole_free_count(node);
  s.free_cpu = state.free_cpu_milli(node);
  whole_buckets_[s.whole_free].insert(id);
  cpus_.insert(CpuKey{s.free_cpu, id});
  s.gpus.clear();
  s.shared.clear();
  std::span<const GpuState> gpus = state.gpus(node);
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (gpus[g].exclusive) continue;
    GpuKey k{gpus[g].free_memory_mib, gpus[g].free_compute_milli, id, static_cast<int32_t>(g)};
    s.gpus.push_back(k);
    gpus_.insert(k);
    if (gpus[g].grants > 0) {
      s.shared.push_back(k);
      shared_gpus_.insert(k);
    }
  }
}

}  // namespace tessera::core
