// FGD's fragmentation measure ("Beware of Fragmentation", USENIX ATC'23, and its simulator's
// NodeGpuShareFragAmount): how much of a node's free GPU capacity the typical tasks could not use.
//
// For each typical task m (weight p_m) the node's free milli-GPU T falls in one bucket:
//   - m is CPU-only: all of T is fragment (buckets XL/XR: FGD counts it whether or not the CPU
//   fits);
//   - m may not run on the node's GPU model: all of T (NA);
//   - m's GPUs fit (enough GPUs with >= m's milli-GPU free) and its CPU fits (Q3): the free
//     milli-GPU of the GPUs too small for m is fragment (counted under Q2), the rest is usable
//     (Q3);
//   - m's GPUs fit but its CPU does not (Q4), or its GPUs do not fit (Q1/Q2): all of T.
// F_n(M) = sum_m p_m F_n(m) is everything but Q3. The floating-point sums are done in the
// simulator's order so that equal states give bit-identical figures.
// Example: a node with GPUs free 1000, 300 and 0 milli and plenty of CPU, M = {0.5-GPU task 60%,
// CPU-only task 40%}: the 0.5 task fits, its fragment is 300 (the 300 GPU is too small); the
// CPU-only task counts all 1300. F = 0.6 x 300 + 0.4 x 1300 = 700.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/cluster_state.h"
#include "core/policy/typical.h"

namespace tessera::core {

// Milli-GPU free on GPU `g` as FGD counts it: 0 when held exclusively or in MIG mode (it takes MIG
// slices only, which no task of the set asks for); otherwise the smaller of
// the free compute and the free memory as a part of the GPU's memory; a GPU with any grant counts
// at most 999 (it cannot take a whole-GPU task).
int32_t GpuMilliLeft(const ClusterState& state, NodeId node, int g);

class FragmentationMeasure {
 public:
  enum Bucket {
    kQ1LackBoth,
    kQ2LackGpu,
    kQ3Satisfied,
    kQ4LackCpu,
    kXlSatisfied,
    kXrLackCpu,
    kNoAccess,
    kBuckets
  };
  using Amounts = std::array<double, kBuckets>;

  FragmentationMeasure() = default;
  FragmentationMeasure(const Cluster& cluster, std::vector<TypicalTask> tasks);

  const std::vector<TypicalTask>& tasks() const { return tasks_; }
  bool empty() const { return tasks_.empty(); }

  // Per-bucket amounts (milli-GPU) of node `node` in the given state: `cpu_left` milli-CPU free and
  // `gpu_left` milli-GPU free per GPU.
  Amounts NodeAmounts(NodeId node, int64_t cpu_left, std::span<const int32_t> gpu_left) const;
  // F_n(M): the fragment (every bucket but Q3).
  double NodeFragment(NodeId node, int64_t cpu_left, std::span<const int32_t> gpu_left) const;
  static double Fragment(const Amounts& a);
  static double Idle(const Amounts& a);

  // The same for a node as `state` has it.
  Amounts NodeAmounts(const ClusterState& state, NodeId node) const;
  // Summed over every node of `state`.
  Amounts ClusterAmounts(const ClusterState& state) const;

  // Whether task `m` may run on `node`'s GPUs (a model it allows).
  bool Accessible(NodeId node, size_t m) const {
    return access_[static_cast<size_t>(node.value()) * tasks_.size() + m];
  }

 private:
  std::vector<TypicalTask> tasks_;
  std::vector<uint8_t> access_;  // node-major, one per (node, task)
};

}  // namespace tessera::core
