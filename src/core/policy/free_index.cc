#include "core/policy/free_index.h"

#include <algorithm>
#include <climits>

namespace tessera::core {

void FreeCapacityIndex::Build(const ClusterState& state) {
  whole_buckets_.assign(state.cluster().max_gpus_per_node() + 1, {});
  for (auto& b : gpus_) b.clear();
  for (auto& b : shared_gpus_) b.clear();
  cpus_.clear();
  shadow_.assign(state.node_count(), Shadow{});
  for (int i = 0; i < state.node_count(); ++i) Update(state, NodeId(i));
}

void FreeCapacityIndex::Update(const ClusterState& state, NodeId node) {
  Shadow& s = shadow_[node.value()];
  const int32_t id = node.value();
  const int whole_free = state.whole_free_count(node);
  if (whole_free != s.whole_free) {
    if (s.whole_free >= 0) whole_buckets_[s.whole_free].erase(id);
    whole_buckets_[whole_free].insert(id);
  }
  const int64_t free_cpu = state.free_cpu_milli(node);
  if (s.whole_free < 0 || free_cpu != s.free_cpu) {
    if (s.whole_free >= 0) cpus_.erase(CpuKey{s.free_cpu, id});
    cpus_.insert(CpuKey{free_cpu, id});
  }
  s.whole_free = whole_free;
  s.free_cpu = free_cpu;
  std::span<const GpuState> gpus = state.gpus(node);
  s.gpus.resize(gpus.size());
  for (size_t g = 0; g < gpus.size(); ++g) {
    Shadow::Gpu& old = s.gpus[g];
    const GpuState& now = gpus[g];
    GpuKey key{now.free_memory_mib, now.free_compute_milli, id, static_cast<int32_t>(g)};
    const bool indexed = !now.exclusive;
    const bool shared = indexed && now.grants > 0;
    if (old.indexed == indexed && old.shared == shared && old.key == key) continue;
    if (old.indexed) gpus_[Bucket(old.key.free_compute_milli)].erase(old.key);
    if (old.shared) shared_gpus_[Bucket(old.key.free_compute_milli)].erase(old.key);
    if (indexed) gpus_[Bucket(key.free_compute_milli)].insert(key);
    if (shared) shared_gpus_[Bucket(key.free_compute_milli)].insert(key);
    old = Shadow::Gpu{key, indexed, shared};
  }
}

std::optional<FreeCapacityIndex::GpuKey> FreeCapacityIndex::FirstFit(
    bool shared_only, int64_t min_memory, int32_t min_compute,
    const std::function<bool(const GpuKey&)>& feasible) const {
  const auto& buckets = shared_only ? shared_gpus_ : gpus_;
  std::optional<GpuKey> best;
  const GpuKey start{min_memory, INT32_MIN, INT32_MIN, INT32_MIN};
  for (int b = Bucket(std::max(min_compute, 0)); b < kComputeBuckets; ++b) {
    for (auto it = buckets[b].lower_bound(start); it != buckets[b].end(); ++it) {
      if (best && !(*it < *best)) break;  // nothing in this bucket beats what we have
      if (it->free_compute_milli < min_compute || !feasible(*it)) continue;
      best = *it;
      break;
    }
  }
  return best;
}

std::optional<FreeCapacityIndex::GpuKey> FreeCapacityIndex::LastFit(
    int32_t min_compute, const std::function<bool(const GpuKey&)>& feasible) const {
  std::optional<GpuKey> best;
  int best_bucket = -1;
  for (int b = Bucket(std::max(min_compute, 0)); b < kComputeBuckets; ++b) {
    for (auto it = gpus_[b].rbegin(); it != gpus_[b].rend(); ++it) {
      if (best && std::make_pair(it->free_memory_mib, it->free_compute_milli) <=
                      std::make_pair(best->free_memory_mib, best->free_compute_milli)) {
        break;
      }
      if (it->free_compute_milli < min_compute || !feasible(*it)) continue;
      best = *it;
      best_bucket = b;
      break;
    }
  }
  if (!best) return best;
  // Entries equal in (memory, compute) sit together in one bucket: take the lowest feasible.
  const auto& bucket = gpus_[best_bucket];
  for (auto it = bucket.lower_bound(
           {best->free_memory_mib, best->free_compute_milli, INT32_MIN, INT32_MIN});
       it != bucket.end(); ++it) {
    if (feasible(*it)) return *it;
  }
  return best;
}

}  // namespace tessera::core
