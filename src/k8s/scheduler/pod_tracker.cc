#include "k8s/scheduler/pod_tracker.h"

namespace tessera::k8s {

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kNew:
      return "new";
    case Stage::kIgnored:
      return "ignored";
    case Stage::kBadInput:
      return "bad-input";
    case Stage::kQueued:
      return "queued";
    case Stage::kUnschedulable:
      return "unschedulable";
    case Stage::kGangWaiting:
      return "gang-waiting";
    case Stage::kBackoff:
      return "backoff";
    case Stage::kBinding:
      return "binding";
    case Stage::kBindConflict:
      return "bind-conflict";
    case Stage::kBound:
      return "bound";
  }
  return "?";
}

PodTracker::Pod* PodTracker::Find(const std::string& key) {
  auto it = pods_.find(key);
  return it == pods_.end() ? nullptr : &it->second;
}

const PodTracker::Pod* PodTracker::Find(const std::string& key) const {
  auto it = pods_.find(key);
  return it == pods_.end() ? nullptr : &it->second;
}

PodTracker::Pod& PodTracker::Upsert(const std::string& key, TimePoint now) {
  auto [it, inserted] = pods_.try_emplace(key);
  if (inserted) {
    it->second.first_seen = now;
    it->second.seen_seq = next_seq_++;
    ++counts_[static_cast<int>(Stage::kNew)];
  }
  return it->second;
}

namespace {

bool Waiting(Stage stage) {
  switch (stage) {
    case Stage::kNew:
    case Stage::kIgnored:
    case Stage::kBound:
      return false;
    default:
      return true;
  }
}

}  // namespace

void PodTracker::Erase(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  --counts_[static_cast<int>(it->second.stage)];
  if (Waiting(it->second.stage)) waiting_.erase({it->second.first_seen, it->second.seen_seq});
  pods_.erase(it);
  Publish();
  if (listener_) listener_(key, nullptr);
}

void PodTracker::SetStage(Pod& pod, Stage stage) {
  if (pod.stage != stage) {
    --counts_[static_cast<int>(pod.stage)];
    ++counts_[static_cast<int>(stage)];
    if (Waiting(pod.stage) && !Waiting(stage)) waiting_.erase({pod.first_seen, pod.seen_seq});
    if (!Waiting(pod.stage) && Waiting(stage)) waiting_.insert({pod.first_seen, pod.seen_seq});
    pod.stage = stage;
    Publish();
  }
  if (listener_ && pod.info) listener_(pod.info->key, &pod);
}

void PodTracker::Publish() {
  if (metrics_ == nullptr) return;
  metrics_->pending_active = count(Stage::kQueued);
  metrics_->pending_backoff = count(Stage::kBackoff);
  metrics_->pending_unschedulable = count(Stage::kUnschedulable);
  metrics_->pending_gang_waiting = count(Stage::kGangWaiting);
  metrics_->binding_in_flight = count(Stage::kBinding);
  metrics_->oldest_waiting_since_ns =
      waiting_.empty() ? 0
                       : waiting_.begin()->first.time_since_epoch() / std::chrono::nanoseconds(1);
}

std::optional<PodTracker::TimePoint> PodTracker::oldest_waiting() const {
  if (waiting_.empty()) return std::nullopt;
  return waiting_.begin()->first;
}

}  // namespace tessera::k8s
