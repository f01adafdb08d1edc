// Choosing which GPUs of one node a multi-GPU pod gets.
//
// Objective, in order (lexicographic):
//  1. the set meets the required interconnect level (when required);
//  2. the set's bottleneck bandwidth (the slowest pair) is as high as possible;
//  3. what stays free stays well connected: the sum, over the remaining free GPUs, of each one's
//     best link to another remaining free GPU is as high as possible (do not split an NVLink
//     island or a PCIe-switch pair without need);
//  4. the set spans as few NUMA nodes as possible;
//  5. lowest GPU indices.
// Example: pcie-8gpu (pairs 0-1, 2-3, 4-5, 6-7 behind switches), GPUs 1, 2, 3 free, count 2:
// {2,3} (PIX, 64 GB/s) beats {1,2} and {1,3} (NODE, 32 GB/s).
#pragma once

#include <cstdint>
#include <optional>

#include "core/model/node.h"
#include "core/model/request.h"

namespace tessera::core {

// Whether every pair of `mask` meets `level`.
bool MeetsTopology(const NodeSpec& node, uint64_t mask, GpuTopology level);

// Slowest pairwise link of `mask`, GB/s (a single GPU: unbounded, reported as INT32_MAX).
int32_t BottleneckGBps(const NodeSpec& node, uint64_t mask);

// The best `count` GPUs among `free_mask`, or nullopt when fewer are free or (when `required`)
// no set meets `level`.
std::optional<uint64_t> SelectGpuSet(const NodeSpec& node, uint64_t free_mask, int count,
                                     GpuTopology level, bool required);

}  // namespace tessera::core
