// The "typical task" set of the FGD paper: the pod shapes that make up most of a workload, with
// their popularity. FGD measures a node's fragmentation against this set (fragmentation.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/request.h"

namespace tessera::core {

struct TypicalTask {
  int64_t cpu_milli = 0;  // as kube-scheduler counts it: a pod asking no CPU counts 100m
  int32_t gpu_milli = 0;  // per GPU, 1..1000; 0 for a CPU-only task
  int32_t gpu_count = 0;  // GPUs; 0 for a CPU-only task
  std::vector<std::string> gpu_models;  // allowed models; empty = any
  double weight = 0;  // popularity; the weights of a set sum to 1
  bool operator==(const TypicalTask&) const = default;
};

// kube-scheduler's non-zero CPU request: 100m for a pod that asks none.
inline int64_t NonZeroCpuMilli(int64_t cpu_milli) { return cpu_milli == 0 ? 100 : cpu_milli; }

// Milli-GPU per GPU that a request asks: 1000 for whole GPUs, the fraction for a trace-style
// fraction, the compute for a share with compute, and for a memory-only share its memory as a
// part of `reference_gpu_memory_mib` (rounded up). 0 for CPU-only requests.
int32_t MilliPerGpu(const GpuAsk& ask, int64_t reference_gpu_memory_mib);

// FGD's typical set (the paper's simulator, GetTypicalPods with isInvolvedCpuPods=true,
// podPopularityThreshold=95, podIncreaseStep=1): requests are grouped by (CPU, milli-GPU per GPU,
// GPU count, model list as written), the groups sorted by count (most first; equal counts by the
// larger shape first), and the most popular kept until they cover `coverage` of all requests;
// weights are renormalised over the kept groups.
// Example: 6 x {4 CPU, 1 GPU}, 3 x {2 CPU, 0.5 GPU}, 1 x {1 CPU}, coverage 0.9: the first two
// groups (90%), weights 2/3 and 1/3.
std::vector<TypicalTask> TypicalTasksOf(std::span<const PodRequest> requests, double coverage,
                                        int64_t reference_gpu_memory_mib);

}  // namespace tessera::core
