// Indexes over free capacity, kept up to date by the policies that use them, so that a placement
// on 10,000 nodes looks at a handful of entries instead of every node.
//
//  - nodes bucketed by how many fully free GPUs they have;
//  - every GPU not held exclusively, ordered by (free memory, free compute, node, GPU), and the
//    subset of those already shared (at least one grant); each split into buckets by free compute
//    (0-99, 100-199, ..., 1000 milli) so that a query for memory AND compute looks at the first
//    entries of a few buckets instead of walking past GPUs that have memory but no compute;
//  - nodes ordered by free CPU.
// Maintained incrementally: Update(node) re-reads one node from the state.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/cluster_state.h"

namespace tessera::core {

class FreeCapacityIndex {
 public:
  struct GpuKey {
    int64_t free_memory_mib;
    int32_t free_compute_milli;
    int32_t node;
    int32_t gpu;
    auto operator<=>(const GpuKey&) const = default;
  };
  struct CpuKey {
    int64_t free_cpu_milli;
    int32_t node;
    auto operator<=>(const CpuKey&) const = default;
  };

  void Build(const ClusterState& state);
  void Update(const ClusterState& state, NodeId node);

  // Nodes with exactly `k` fully free GPUs, by node id.
  const std::set<int32_t>& whole_bucket(int k) const { return whole_buckets_[k]; }
  int max_bucket() const { return static_cast<int>(whole_buckets_.size()) - 1; }
  // The smallest key (free memory, free compute, node, GPU) with free memory >= min_memory and
  // free compute >= min_compute for which `feasible` holds: exactly the first feasible entry of
  // the whole ordered set. `shared_only` limits it to GPUs with at least one grant.
  std::optional<GpuKey> FirstFit(bool shared_only, int64_t min_memory, int32_t min_compute,
                                 const std::function<bool(const GpuKey&)>& feasible) const;
  // The largest (free memory, free compute) with a feasible entry, and among entries with that
  // value the lowest (node, GPU): what a spread scan picks.
  std::optional<GpuKey> LastFit(int32_t min_compute,
                                const std::function<bool(const GpuKey&)>& feasible) const;
  const std::set<CpuKey>& cpus() const { return cpus_; }

 private:
  // What the indexes hold for one node, so that an update touches only what changed.
  struct Shadow {
    int whole_free = -1;
    int64_t free_cpu = 0;
    struct Gpu {
      GpuKey key;
      bool indexed = false;  // in gpus_ (not exclusive)
      bool shared = false;   // in shared_gpus_
    };
    std::vector<Gpu> gpus;
  };
  std::vector<std::set<int32_t>> whole_buckets_;
  static constexpr int kComputeBuckets = 11;
  static int Bucket(int32_t free_compute) { return free_compute >= 1000 ? 10 : free_compute / 100; }
  std::array<std::set<GpuKey>, kComputeBuckets> gpus_;
  std::array<std::set<GpuKey>, kComputeBuckets> shared_gpus_;
  std::set<CpuKey> cpus_;
  std::vector<Shadow> shadow_;
};

}  // namespace tessera::core
