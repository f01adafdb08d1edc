#include "agent/pods/idle_watch.h"

namespace tessera::agent {

void IdleWatch::Observe(const std::string& pod_uid, const std::string& gpu_uuid, int64_t now_ns,
                        uint64_t elapsed_ns, uint64_t busy_ns) {
  if (options_.window.count() <= 0) return;
  Track& t = tracks_[{pod_uid, gpu_uuid}];
  t.samples.push_back({now_ns, elapsed_ns, busy_ns});
  t.elapsed_ns += elapsed_ns;
  t.busy_ns += busy_ns;
  // Keep the observations that end within the window, and the one before them, so that the kept
  // time covers the whole window once the pod has been watched that long.
  const int64_t window_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.window).count();
  while (t.samples.size() > 1 &&
         t.elapsed_ns - t.samples.front().elapsed_ns >= static_cast<uint64_t>(window_ns)) {
    t.elapsed_ns -= t.samples.front().elapsed_ns;
    t.busy_ns -= t.samples.front().busy_ns;
    t.samples.pop_front();
  }
}

std::optional<uint32_t> IdleWatch::BusyPermille(const std::string& pod_uid,
                                                const std::string& gpu_uuid) const {
  if (options_.window.count() <= 0) return std::nullopt;
  auto it = tracks_.find({pod_uid, gpu_uuid});
  if (it == tracks_.end()) return std::nullopt;
  const Track& t = it->second;
  const uint64_t window_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.window).count());
  if (t.elapsed_ns < window_ns) return std::nullopt;  // not watched for a whole window yet
  return static_cast<uint32_t>(t.busy_ns * 1000 / t.elapsed_ns);
}

bool IdleWatch::Idle(const std::string& pod_uid, const std::string& gpu_uuid,
                     uint32_t* busy_permille) const {
  std::optional<uint32_t> permille = BusyPermille(pod_uid, gpu_uuid);
  if (!permille) return false;
  if (busy_permille != nullptr) *busy_permille = *permille;
  return *permille < options_.threshold_permille;
}

void IdleWatch::Forget(const std::string& pod_uid) {
  for (auto it = tracks_.begin(); it != tracks_.end();) {
    it = it->first.first == pod_uid ? tracks_.erase(it) : std::next(it);
  }
}

}  // namespace tessera::agent
