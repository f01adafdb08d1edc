#include "k8s/scheduler/runtime_limits.h"

namespace tessera::k8s {

void RuntimeLimits::OnPod(const std::shared_ptr<const PodInfo>& pod) {
  const bool tracked = pod->bound() && !pod->terminal() && !pod->deleting &&
                       pod->started_unix >= 0 && pod->max_runtime_s.has_value();
  auto it = pods_.find(pod->key);
  if (!tracked) {
    if (it != pods_.end()) Forget(pod->key);
    return;
  }
  const int64_t due = DueAt(*pod);
  if (it != pods_.end()) {
    it->second.pod = pod;
    // A later due time from the pod's own change (its run time or start changed); a pod already
    // asked to leave keeps its retry time.
    if (it->second.due == due || it->second.due > due) return;
    by_due_.erase({it->second.due, pod->key});
    it->second.due = due;
    by_due_.insert({due, pod->key});
    return;
  }
  pods_.emplace(pod->key, Tracked{pod, due});
  by_due_.insert({due, pod->key});
}

void RuntimeLimits::Forget(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  by_due_.erase({it->second.due, key});
  pods_.erase(it);
}

std::vector<std::shared_ptr<const PodInfo>> RuntimeLimits::Due(int64_t now) {
  std::vector<std::shared_ptr<const PodInfo>> out;
  while (!by_due_.empty() && by_due_.begin()->first <= now) {
    const std::string key = by_due_.begin()->second;
    by_due_.erase(by_due_.begin());
    Tracked& t = pods_.at(key);
    out.push_back(t.pod);
    t.due = now + retry_s_;
    by_due_.insert({t.due, key});
  }
  return out;
}

std::optional<int64_t> RuntimeLimits::Next() const {
  if (by_due_.empty()) return std::nullopt;
  return by_due_.begin()->first;
}

}  // namespace tessera::k8s
