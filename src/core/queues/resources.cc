#include "core/queues/resources.h"

#include <algorithm>
#include <charconv>

#include "common/strings.h"
#include "core/model/quantity.h"

namespace tessera::core {

std::string_view QueueResourceName(int r) {
  switch (r) {
    case kQueueGpu:
      return "gpu";
    case kQueueGpuMemory:
      return "gpuMemory";
    case kQueueGpuCompute:
      return "gpuCompute";
  }
  return "?";
}

namespace {
// 2500 -> "2.5", 1000 -> "1", 125 -> "0.125".
std::string Milli(int64_t milli) {
  std::string out = StrCat(milli / 1000);
  int64_t frac = milli % 1000;
  if (frac < 0) frac = -frac;
  if (frac != 0) {
    std::string f = fmt::format("{:03d}", frac);
    while (!f.empty() && f.back() == '0') f.pop_back();
    StrAppend(&out, ".", f);
  }
  if (milli < 0 && milli > -1000) out = StrCat("-", out);
  return out;
}
}  // namespace

std::string FormatQueueAmount(int r, int64_t amount) {
  switch (r) {
    case kQueueGpu:
      return StrCat(Milli(amount), amount == 1000 ? " GPU" : " GPUs");
    case kQueueGpuMemory:
      return amount < 0 ? StrCat("-", FormatMiB(-amount)) : FormatMiB(amount);
    case kQueueGpuCompute: {
      // Percent of one GPU, as tessera.dev/gpu-compute counts it: 250 milli = 25%.
      std::string pct = StrCat(amount / 10);
      if (amount % 10 != 0) StrAppend(&pct, ".", (amount < 0 ? -amount : amount) % 10);
      return StrCat(pct, "% compute");
    }
  }
  return StrCat(amount);
}

std::string FormatQueueResources(const QueueResources& q) {
  std::string out;
  for (int r = 0; r < kQueueResourceCount; ++r) {
    if (q[r] == 0) continue;
    if (!out.empty()) out += ", ";
    out += FormatQueueAmount(r, q[r]);
  }
  return out.empty() ? "nothing" : out;
}

int64_t ShareGpuMilli(int64_t memory_mib, int32_t compute_milli, int64_t gpu_memory_mib) {
  int64_t memory_milli = 0;
  if (gpu_memory_mib > 0 && memory_mib > 0) {
    memory_milli = (memory_mib * 1000 + gpu_memory_mib - 1) / gpu_memory_mib;
  }
  return std::clamp<int64_t>(std::max<int64_t>(memory_milli, compute_milli), 0, 1000);
}

QueueResources UsageOf(const Cluster& cluster, const Placement& placement) {
  QueueResources q;
  if (!placement.node.valid() || placement.node.value() >= cluster.node_count()) return q;
  const NodeSpec& node = cluster.node(placement.node);
  for (const GpuGrant& g : placement.gpus) {
    const int64_t device = g.gpu >= 0 && g.gpu < node.gpu_count() ? node.gpus[g.gpu].memory_mib : 0;
    if (g.exclusive) {
      q[kQueueGpu] += 1000;
      q[kQueueGpuMemory] += device;
      q[kQueueGpuCompute] += 1000;
      continue;
    }
    q[kQueueGpu] += ShareGpuMilli(g.memory_mib, g.compute_milli, device);
    q[kQueueGpuMemory] += g.memory_mib;
    q[kQueueGpuCompute] += g.compute_milli;
  }
  return q;
}

QueueResources DemandOf(const PodRequest& request, int64_t gpu_memory_mib) {
  const GpuAsk& a = request.gpu;
  QueueResources q;
  switch (a.kind) {
    case GpuAsk::Kind::kNone:
      break;
    case GpuAsk::Kind::kWhole:
      q = QueueResources::Of(1000LL * a.count, gpu_memory_mib * a.count, 1000LL * a.count);
      break;
    case GpuAsk::Kind::kShare:
      q = QueueResources::Of(ShareGpuMilli(a.memory_mib, a.compute_milli, gpu_memory_mib),
                             a.memory_mib, a.compute_milli);
      break;
    case GpuAsk::Kind::kFraction:
      q = QueueResources::Of(a.fraction_milli, gpu_memory_mib * a.fraction_milli / 1000,
                             a.fraction_milli);
      break;
    case GpuAsk::Kind::kMig: {
      // "3g.40gb": compute slices before the g, memory in GB before "gb".
      int slices = 0, gb = 0;
      const std::string& p = a.mig_profile;
      const size_t g = p.find('g');
      const size_t dot = p.find('.');
      if (g != std::string::npos) std::from_chars(p.data(), p.data() + g, slices);
      if (dot != std::string::npos) std::from_chars(p.data() + dot + 1, p.data() + p.size(), gb);
      const int32_t compute = slices >= 7 ? 1000 : slices * 1000 / 7;
      const int64_t memory = int64_t{gb} * 1024;
      q = QueueResources::Of(ShareGpuMilli(memory, compute, gpu_memory_mib), memory, compute);
      break;
    }
  }
  return q;
}

QueueResources CapacityOf(const Cluster& cluster) {
  QueueResources q;
  for (int i = 0; i < cluster.node_count(); ++i) {
    if (!cluster.live(NodeId(i))) continue;
    for (const GpuSpec& g : cluster.node(NodeId(i)).gpus) {
      q[kQueueGpu] += 1000;
      q[kQueueGpuMemory] += g.memory_mib;
      q[kQueueGpuCompute] += 1000;
    }
  }
  return q;
}

}  // namespace tessera::core
