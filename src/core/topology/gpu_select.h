// Choosing which GPUs of one node a multi-GPU pod gets.
//
// Objective, in order (lexicographic); the choice is the exact optimum, not a heuristic:
//  1. the set meets the required interconnect level (when required);
//  2. the set's bottleneck bandwidth (its slowest pair, LinkBandwidthGBps) is as high as possible;
//  3. what stays free stays well connected: the sum, over the remaining free GPUs, of each one's
//     best link to another remaining free GPU (0 for a GPU left alone) is as high as possible
//     (do not split an NVLink island or a PCIe-switch pair without need);
//  4. the set spans as few NUMA nodes as possible (an unknown NUMA node counts as one more);
//  5. the lowest GPU indices: of equal sets, the one whose sorted index list is smallest.
// Select with `required` false ignores the level; the policies' "preferred" (PickWholeSet in
// policy/whole_set.h) is: the best set meeting the level when the node has one, else the best of
// all, and nodes where the level is met come first.
// Example: pcie-8gpu (pairs 0-1, 2-3, 4-5, 6-7 behind switches), GPUs 1, 2, 3 free, count 2:
// {2,3} (PIX, 64 GB/s) beats {1,2} and {1,3} (NODE, 32 GB/s). Count 1 with GPUs 0, 2, 3 free:
// GPU 0, leaving the PIX pair 2-3 whole (remaining 64 + 64 beats 32 + 32).
//
// Algorithm (GpuSetSelector::Select): the best bottleneck t* is the highest bandwidth threshold
// at which the free GPUs still hold a clique of `count` GPUs whose every pair is at least t* (and
// meets the level). Then a depth-first search over those cliques in lexicographic order, with an
// upper bound on objective 3 (each remaining GPU's best link among the GPUs not yet taken, the
// GPUs that may still be taken contributing only their largest terms) and a lower bound on
// objective 4 (the NUMA nodes already spanned), prunes every branch that cannot beat the best set
// found so far (an equal one cannot either: it would come later in lexicographic order). Twins,
// GPUs with the same NUMA node and the same link to every other GPU (the eight GPUs of an
// NVSwitch server's socket, the two GPUs behind one PCIe switch), are interchangeable, so only
// sets that take the lowest free twins first are visited; the others score the same and come
// later.
// gpu_select_test.cc compares it with plain exhaustive search on every free pattern of every
// built-in profile and on random 16-GPU topologies; bench/gpu_select_bench.cc times it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/model/node.h"
#include "core/model/request.h"

namespace tessera::core {

// Whether every pair of `mask` meets `level`.
bool MeetsTopology(const NodeSpec& node, uint64_t mask, GpuTopology level);

// Slowest pairwise link of `mask`, GB/s (a single GPU: unbounded, reported as INT32_MAX).
int32_t BottleneckGBps(const NodeSpec& node, uint64_t mask);

// A node's topology prepared for selection: pair bandwidths, which pairs meet each level, NUMA
// nodes. Building one costs O(GPUs^2); Select can then be called any number of times.
class GpuSetSelector {
 public:
  explicit GpuSetSelector(const NodeSpec& node);

  // The best `count` GPUs among `free_mask`, or nullopt when fewer are free or (when `required`)
  // no set meets `level`.
  std::optional<uint64_t> Select(uint64_t free_mask, int count, GpuTopology level,
                                 bool required) const;

  int gpu_count() const { return n_; }
  int32_t bandwidth(int i, int j) const { return bw_[i * n_ + j]; }
  // GPUs j != i such that the pair (i, j) meets `level`.
  uint64_t meets(GpuTopology level, int i) const;
  // Bit per NUMA node of GPU i (unknown NUMA nodes share one bit).
  uint64_t numa_bit(int i) const { return numa_bit_[i]; }
  // GPUs whose NUMA bit is `bit`.
  uint64_t numa_members(uint64_t bit) const { return numa_members_[__builtin_ctzll(bit)]; }
  // Distinct pair bandwidths, highest first, and for GPU i, per level l, the GPUs it reaches at
  // level(l) or better.
  int level_count() const { return static_cast<int>(distinct_.size()); }
  int32_t level(int l) const { return distinct_[l]; }
  const uint64_t* reach(int i) const {
    return reach_.data() + static_cast<size_t>(i) * distinct_.size();
  }
  // Lower-indexed twins of GPU i: same NUMA node, same link to every other GPU.
  uint64_t lower_twins(int i) const { return lower_twins_[i]; }

 private:
  int n_ = 0;
  uint64_t all_ = 0;
  std::vector<int32_t> bw_;         // n x n, diagonal 0
  std::vector<int32_t> distinct_;   // distinct pair bandwidths, highest first
  std::vector<uint64_t> meets_[3];  // kNvLink, kPcieSwitch, kNuma
  std::vector<uint64_t> numa_bit_;
  std::vector<uint64_t> lower_twins_;
  std::vector<uint64_t> reach_;  // n x levels
  uint64_t numa_members_[64] = {};
};

// GpuSetSelector(node).Select(...), for one-off calls.
std::optional<uint64_t> SelectGpuSet(const NodeSpec& node, uint64_t free_mask, int count,
                                     GpuTopology level, bool required);

}  // namespace tessera::core
