// The GPU resources a queue is owed and may hold (queues.tessera.dev): GPUs, GPU memory and GPU
// compute, in integers. A share of a GPU counts as its fraction of that GPU, exactly as the
// engine granted it, so that quotas, fair shares and reclaim compare what pods really hold.
//
//   resource    unit        a whole GPU (80Gi)   a 20Gi share, no compute   a 25% compute share
//   gpu         milli-GPU   1000                 250 (20Gi of 80Gi)         250
//   gpuMemory   MiB         81920                20480                      0
//   gpuCompute  milli-GPU   1000                 0                          250
//
// A share's `gpu` is the larger of its compute and its memory as fractions of the device (memory
// rounded up to the next milli-GPU, so that shares never add up to less than they deny others).
// A MIG instance counts as a share with its profile's memory and compute.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/model/cluster.h"
#include "core/model/placement.h"
#include "core/model/request.h"

namespace tessera::core {

inline constexpr int kQueueResourceCount = 3;
enum QueueResourceIndex : int { kQueueGpu = 0, kQueueGpuMemory = 1, kQueueGpuCompute = 2 };
// "gpu", "gpuMemory", "gpuCompute": the field names of a Queue's deserved and limit.
std::string_view QueueResourceName(int r);

struct QueueResources {
  std::array<int64_t, kQueueResourceCount> v{};

  int64_t& operator[](int r) { return v[r]; }
  int64_t operator[](int r) const { return v[r]; }
  QueueResources& operator+=(const QueueResources& o) {
    for (int r = 0; r < kQueueResourceCount; ++r) v[r] += o.v[r];
    return *this;
  }
  QueueResources& operator-=(const QueueResources& o) {
    for (int r = 0; r < kQueueResourceCount; ++r) v[r] -= o.v[r];
    return *this;
  }
  friend QueueResources operator+(QueueResources a, const QueueResources& b) { return a += b; }
  friend QueueResources operator-(QueueResources a, const QueueResources& b) { return a -= b; }
  bool operator==(const QueueResources&) const = default;
  bool zero() const { return v[0] == 0 && v[1] == 0 && v[2] == 0; }

  static QueueResources Of(int64_t gpu_milli, int64_t memory_mib, int64_t compute_milli) {
    return QueueResources{{gpu_milli, memory_mib, compute_milli}};
  }
};

// One resource's amount for people: "2.5 GPUs", "40Gi", "250% compute" ("1 GPU" singular).
std::string FormatQueueAmount(int r, int64_t amount);
// All three, the non-zero ones: "1.25 GPUs, 100Gi, 125% compute"; "nothing" when zero.
std::string FormatQueueResources(const QueueResources& q);

// The fraction of a GPU of `gpu_memory_mib` a grant of `memory_mib` and `compute_milli` denies
// others, in milli-GPU (1..1000).
int64_t ShareGpuMilli(int64_t memory_mib, int32_t compute_milli, int64_t gpu_memory_mib);

// What a placement holds (see the table above).
QueueResources UsageOf(const Cluster& cluster, const Placement& placement);
// What a request will hold once placed, on GPUs of `gpu_memory_mib` (exact for whole GPUs,
// compute shares and fractions; memory shares count against that device size; MIG by its
// profile name, "3g.40gb": 3/7 of the compute and 40Gi).
QueueResources DemandOf(const PodRequest& request, int64_t gpu_memory_mib);

// Every GPU of the cluster (its live nodes): what queues divide between them.
QueueResources CapacityOf(const Cluster& cluster);

}  // namespace tessera::core
