#include "agent/pods/usage_meter.h"

#include <algorithm>

namespace tessera::agent {

UsageMeter::Charge UsageMeter::Observe(const std::string& gpu_uuid, int64_t now_ns,
                                       uint32_t utilization_permille,
                                       const std::vector<std::string>& running_pods) {
  auto last = last_ns_.find(gpu_uuid);
  if (last == last_ns_.end() || now_ns <= last->second) {
    last_ns_[gpu_uuid] = now_ns;
    gpus_.try_emplace(gpu_uuid);
    return {};
  }
  const uint64_t elapsed = static_cast<uint64_t>(now_ns - last->second);
  last->second = now_ns;
  const uint64_t busy = elapsed * std::min<uint32_t>(utilization_permille, 1000) / 1000;
  Gpu& g = gpus_[gpu_uuid];
  g.sampled_ns += elapsed;
  g.busy_ns += busy;
  if (running_pods.size() == 1) {
    pods_[{running_pods.front(), gpu_uuid}] += busy;
  } else {
    g.unattributed_ns += busy;
  }
  return {elapsed, busy};
}

void UsageMeter::Skip(const std::string& gpu_uuid) { last_ns_.erase(gpu_uuid); }

void UsageMeter::Forget(const std::string& pod_uid) {
  for (auto it = pods_.begin(); it != pods_.end();) {
    it = it->first.first == pod_uid ? pods_.erase(it) : std::next(it);
  }
}

const UsageMeter::Gpu* UsageMeter::gpu(const std::string& gpu_uuid) const {
  auto it = gpus_.find(gpu_uuid);
  return it == gpus_.end() ? nullptr : &it->second;
}

std::optional<uint64_t> UsageMeter::pod_busy_ns(const std::string& pod_uid,
                                                const std::string& gpu_uuid) const {
  auto it = pods_.find({pod_uid, gpu_uuid});
  if (it == pods_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tessera::agent
