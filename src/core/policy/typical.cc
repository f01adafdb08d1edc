#include "core/policy/typical.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "common/strings.h"

namespace tessera::core {

int32_t MilliPerGpu(const GpuAsk& ask, int64_t reference_gpu_memory_mib) {
  switch (ask.kind) {
    case GpuAsk::Kind::kNone: return 0;
    case GpuAsk::Kind::kWhole: return 1000;
    case GpuAsk::Kind::kFraction: return ask.fraction_milli;
    case GpuAsk::Kind::kShare: {
      int64_t by_memory = reference_gpu_memory_mib > 0
                              ? (ask.memory_mib * 1000 + reference_gpu_memory_mib - 1) /
                                    reference_gpu_memory_mib
                              : 0;
      return static_cast<int32_t>(
          std::clamp<int64_t>(std::max<int64_t>(ask.compute_milli, by_memory), 1, 1000));
    }
  }
  return 0;
}

std::vector<TypicalTask> TypicalTasksOf(std::span<const PodRequest> requests, double coverage,
                                        int64_t reference_gpu_memory_mib) {
  using Key = std::tuple<int64_t, int32_t, int32_t, std::string>;  // cpu, milli, count, models
  absl::flat_hash_map<Key, int64_t> counts;
  std::vector<Key> order;
  for (const PodRequest& r : requests) {
    Key k{NonZeroCpuMilli(r.cpu_milli), MilliPerGpu(r.gpu, reference_gpu_memory_mib),
          r.gpu.gpu_count(), StrJoin(r.gpu_models, "|")};
    if (std::get<2>(k) == 0) std::get<3>(k).clear();
    auto [it, fresh] = counts.emplace(k, 0);
    if (fresh) order.push_back(k);
    ++it->second;
  }
  std::sort(order.begin(), order.end(), [&](const Key& a, const Key& b) {
    int64_t ca = counts.at(a), cb = counts.at(b);
    if (ca != cb) return ca > cb;
    return a > b;
  });
  const double total = static_cast<double>(requests.size());
  const double expected = coverage * total;
  double cumulative = 0;
  size_t kept = 0;
  while (kept < order.size() && cumulative < expected) {
    cumulative += static_cast<double>(counts.at(order[kept]));
    ++kept;
  }
  std::vector<TypicalTask> tasks;
  for (size_t i = 0; i < kept; ++i) {
    const Key& k = order[i];
    TypicalTask t;
    t.cpu_milli = std::get<0>(k);
    t.gpu_milli = std::get<1>(k);
    t.gpu_count = std::get<2>(k);
    const std::string& models = std::get<3>(k);
    for (size_t start = 0; start < models.size();) {
      size_t bar = models.find('|', start);
      if (bar == std::string::npos) bar = models.size();
      if (bar > start) t.gpu_models.push_back(models.substr(start, bar - start));
      start = bar + 1;
    }
    // FGD normalises each count by the total, then renormalises by the kept share.
    t.weight = (static_cast<double>(counts.at(k)) / total) / (cumulative / total);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace tessera::core
