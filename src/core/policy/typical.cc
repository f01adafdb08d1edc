#include "core/policy/typical.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "common/strings.h"

namespace tessera::core {

int32_t MilliPerGpu(const GpuAsk& ask, int64_t reference_gpu_memory_mib) {
  switch (ask.kind) {
    case GpuAsk::Kind::kNone:
    case GpuAsk::Kind::kMig:  // a MIG slice: not a share of a plain GPU
      return 0;
    case GpuAsk::Kind::kWhole:
      return 1000;
    case GpuAsk::Kind::kFraction:
      return ask.fraction_milli;
    case GpuAsk::Kind::kShare: {
      int64_t by_memory =
          reference_gpu_memory_mib > 0
              ? (ask.memory_mib * 1000 + reference_gpu_memory_mib - 1) / reference_gpu_memory_mib
              : 0;
      return static_cast<int32_t>(
          std::clamp<int64_t>(std::max<int64_t>(ask.compute_milli, by_memory), 1, 1000));
    }
  }
  return 0;
}

TaskKey TaskKey::Of(const PodRequest& r, int64_t reference_gpu_memory_mib) {
  TaskKey k;
  k.cpu_milli = NonZeroCpuMilli(r.cpu_milli);
  k.gpu_milli = MilliPerGpu(r.gpu, reference_gpu_memory_mib);
  k.gpu_count = r.gpu.gpu_count();
  if (k.gpu_count > 0) k.models = StrJoin(r.gpu_models, "|");
  return k;
}

std::vector<TypicalTask> TypicalTasksFromCounts(
    const std::vector<std::pair<TaskKey, int64_t>>& counts, double coverage) {
  std::vector<const std::pair<TaskKey, int64_t>*> order;
  int64_t all = 0;
  for (const auto& c : counts) {
    if (c.second <= 0) continue;
    order.push_back(&c);
    all += c.second;
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    if (a->second != b->second) return a->second > b->second;
    return a->first > b->first;
  });
  const double total = static_cast<double>(all);
  const double expected = coverage * total;
  double cumulative = 0;
  size_t kept = 0;
  while (kept < order.size() && cumulative < expected) {
    cumulative += static_cast<double>(order[kept]->second);
    ++kept;
  }
  std::vector<TypicalTask> tasks;
  for (size_t i = 0; i < kept; ++i) {
    const TaskKey& k = order[i]->first;
    TypicalTask t;
    t.cpu_milli = k.cpu_milli;
    t.gpu_milli = k.gpu_milli;
    t.gpu_count = k.gpu_count;
    for (size_t start = 0; start < k.models.size();) {
      size_t bar = k.models.find('|', start);
      if (bar == std::string::npos) bar = k.models.size();
      if (bar > start) t.gpu_models.push_back(k.models.substr(start, bar - start));
      start = bar + 1;
    }
    // FGD normalises each count by the total, then renormalises by the kept share.
    t.weight = (static_cast<double>(order[i]->second) / total) / (cumulative / total);
    tasks.push_back(std::move(t));
  }
  return tasks;
}

std::vector<TypicalTask> TypicalTasksOf(std::span<const PodRequest> requests, double coverage,
                                        int64_t reference_gpu_memory_mib) {
  absl::flat_hash_map<TaskKey, int64_t> counts;
  std::vector<std::pair<TaskKey, int64_t>> list;
  for (const PodRequest& r : requests) {
    if (r.gpu.kind == GpuAsk::Kind::kMig) continue;  // MIG slices use MIG GPUs only
    ++counts[TaskKey::Of(r, reference_gpu_memory_mib)];
  }
  list.assign(counts.begin(), counts.end());
  return TypicalTasksFromCounts(list, coverage);
}

bool TaskMix::Observe(const PodRequest& request, int64_t reference_gpu_memory_mib) {
  if (request.gpu.kind == GpuAsk::Kind::kMig) return false;  // MIG slices use MIG GPUs only
  TaskKey key = TaskKey::Of(request, reference_gpu_memory_mib);
  ++counts_[key];
  if (recent_.size() < window_) {
    recent_.push_back(std::move(key));
  } else {
    TaskKey& slot = recent_[seen_ % window_];
    if (--counts_[slot] == 0) counts_.erase(slot);
    slot = std::move(key);
  }
  ++seen_;
  if (seen_ < next_) return false;
  next_ = std::min(seen_ * 2, seen_ + window_ / 2);
  std::vector<std::pair<TaskKey, int64_t>> list(counts_.begin(), counts_.end());
  tasks_ = TypicalTasksFromCounts(list, coverage_);
  return true;
}

}  // namespace tessera::core
