// Indexes over free capacity, kept up to date by the policies that use them, so that a placement
// on 10,000 nodes looks at a handful of entries instead of every node.
//
//  - nodes bucketed by how many fully free GPUs they have;
//  - every GPU not held exclusively, ordered by (free memory, free compute, node, GPU), and the
//    subset of those already shared (at least one grant);
//  - nodes ordered by free CPU.
// Maintained incrementally: Update(node) re-reads one node from the state.
#pragma once

#include <cstdint>
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
  const std::set<GpuKey>& gpus() const { return gpus_; }
  const std::set<GpuKey>& shared_gpus() const { return shared_gpus_; }
  const std::set<CpuKey>& cpus() const { return cpus_; }

 private:
  struct Shadow {
    int whole_free = 0;
    int64_t free_cpu = 0;
    std::vector<GpuKey> gpus;    // the entries this node has in gpus_
    std::vector<GpuKey> shared;  // ... and in shared_gpus_
  };
  std::vector<std::set<int32_t>> whole_buckets_;
  std::set<GpuKey> gpus_;
  std::set<GpuKey> shared_gpus_;
  std::set<CpuKey> cpus_;
  std::vector<Shadow> shadow_;
};

}  // namespace tessera::core
