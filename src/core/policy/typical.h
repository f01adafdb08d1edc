// The "typical task" set of the FGD paper: the pod shapes that make up most of a workload, with
// their popularity. FGD measures a node's fragmentation against this set (fragmentation.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/model/request.h"

namespace tessera::core {

struct TypicalTask {
  int64_t cpu_milli = 0;  // as kube-scheduler counts it: a pod asking no CPU counts 100m
  int32_t gpu_milli = 0;  // per GPU, 1..1000; 0 for a CPU-only task
  int32_t gpu_count = 0;  // GPUs; 0 for a CPU-only task
  std::vector<std::string> gpu_models;  // allowed models; empty = any
  double weight = 0;                    // popularity; the weights of a set sum to 1
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
// weights are renormalised over the kept groups. MIG requests are left out.
// Example: 6 x {4 CPU, 1 GPU}, 3 x {2 CPU, 0.5 GPU}, 1 x {1 CPU}, coverage 0.9: the first two
// groups (90%), weights 2/3 and 1/3.
std::vector<TypicalTask> TypicalTasksOf(std::span<const PodRequest> requests, double coverage,
                                        int64_t reference_gpu_memory_mib);

// A request's shape as the typical set groups it: (CPU, milli-GPU per GPU, GPU count, models).
struct TaskKey {
  int64_t cpu_milli = 0;
  int32_t gpu_milli = 0;
  int32_t gpu_count = 0;
  std::string models;  // "A|B" as written; empty for any model and for CPU-only tasks
  static TaskKey Of(const PodRequest& request, int64_t reference_gpu_memory_mib);
  auto operator<=>(const TaskKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const TaskKey& k) {
    return H::combine(std::move(h), k.cpu_milli, k.gpu_milli, k.gpu_count, k.models);
  }
};

// The typical set from counts per key (TypicalTasksOf is this over the requests' keys).
std::vector<TypicalTask> TypicalTasksFromCounts(
    const std::vector<std::pair<TaskKey, int64_t>>& counts, double coverage);

// The live mix of a stream of requests: the typical set of a window of recent requests,
// re-derived as the stream grows (at 1, 2, 4, 8, ... requests, then every `window` / 2).
// Example: after 64 requests of which 48 ask one GPU and 16 half a GPU, the mix is
// {1 GPU: 0.75, 0.5 GPU: 0.25}.
class TaskMix {
 public:
  explicit TaskMix(double coverage = 0.95, size_t window = 1 << 16)
      : coverage_(coverage), window_(window) {}
  // Records a request; true when the mix was re-derived (and so may have changed).
  bool Observe(const PodRequest& request, int64_t reference_gpu_memory_mib);
  const std::vector<TypicalTask>& tasks() const { return tasks_; }
  size_t seen() const { return seen_; }

 private:
  double coverage_;
  size_t window_;
  size_t seen_ = 0;
  size_t next_ = 1;
  std::vector<TaskKey> recent_;  // ring buffer of the last `window_` keys
  absl::flat_hash_map<TaskKey, int64_t> counts_;
  std::vector<TypicalTask> tasks_;
};

}  // namespace tessera::core
