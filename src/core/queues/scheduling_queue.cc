#include "core/queues/scheduling_queue.h"

#include <cstdint>
#include <vector>

namespace tessera::core {

SchedulingQueue::Entry& SchedulingQueue::Put(const std::string& key, Part part, int32_t priority,
                                             const std::string& queue, Arrival arrival) {
  auto [it, inserted] = where_.try_emplace(key);
  if (!inserted) Take(key, it->second);
  Entry& e = it->second;
  e.part = part;
  e.priority = priority;
  e.queue = queue;
  e.arrival = arrival;
  return e;
}

void SchedulingQueue::Take(const std::string& key, Entry& e) {
  switch (e.part) {
    case Part::kActive: {
      --active_count_;
      auto level = levels_.find(e.priority);
      if (level == levels_.end()) break;
      auto q = level->second.find(e.queue);
      if (q == level->second.end()) break;
      q->second.erase({e.arrival, key});
      if (q->second.empty()) level->second.erase(q);
      if (level->second.empty()) levels_.erase(level);
      break;
    }
    case Part::kBackoff:
      backoff_.erase({e.until, key});
      break;
    case Part::kUnschedulable:
      unschedulable_.erase(key);
      break;
  }
}

void SchedulingQueue::Push(const std::string& key, int32_t priority, const std::string& queue,
                           Arrival arrival) {
  Entry& e = Put(key, Part::kActive, priority, queue, arrival);
  ++active_count_;
  levels_[priority][queue].emplace(e.arrival, key);
}

void SchedulingQueue::Backoff(const std::string& key, int32_t priority, const std::string& queue,
                              Arrival arrival, TimePoint until) {
  Entry& e = Put(key, Part::kBackoff, priority, queue, arrival);
  e.until = until;
  backoff_.emplace(until, key);
}

void SchedulingQueue::Unschedulable(const std::string& key, int32_t priority,
                                    const std::string& queue, Arrival arrival) {
  Entry& e = Put(key, Part::kUnschedulable, priority, queue, arrival);
  e.tried_epoch = change_epoch_;
  unschedulable_.insert(key);
}

bool SchedulingQueue::Remove(const std::string& key) {
  auto it = where_.find(key);
  if (it == where_.end()) return false;
  Take(key, it->second);
  where_.erase(it);
  return true;
}

std::optional<std::string> SchedulingQueue::Pop() {
  if (levels_.empty()) return std::nullopt;
  Level& level = levels_.begin()->second;
  // The queue to serve: furthest below its fair share (the order's), else the earliest head.
  auto chosen = level.begin();
  if (level.size() > 1) {
    std::vector<QueueSet::Candidate> candidates;
    std::vector<Level::iterator> at;
    candidates.reserve(level.size());
    at.reserve(level.size());
    for (auto q = level.begin(); q != level.end(); ++q) {
      candidates.push_back({q->first, q->second.begin()->first});
      at.push_back(q);
      if (q->second.begin()->first < chosen->second.begin()->first) chosen = q;
    }
    if (order_ != nullptr) chosen = at[order_->Pick(candidates)];
  }
  std::string key = chosen->second.begin()->second;
  Remove(key);
  return key;
}

bool SchedulingQueue::ChangeUnseen() {
  if (checked_epoch_ == change_epoch_) return false;
  for (const std::string& key : unschedulable_) {
    if (where_.at(key).tried_epoch < change_epoch_) return true;
  }
  checked_epoch_ = change_epoch_;  // every waiting pod was tried after the latest change
  return false;
}

bool SchedulingQueue::Flush(TimePoint now) {
  while (!backoff_.empty() && backoff_.begin()->first <= now) {
    std::string key = backoff_.begin()->second;
    const Entry& e = where_.at(key);
    Push(key, e.priority, e.queue, e.arrival);  // takes it out of backoff_
  }
  const bool due = now - last_flush_ >= options_.period;
  const bool requested = now - last_flush_ >= options_.min_interval && ChangeUnseen();
  if (!due && !requested) return false;
  last_flush_ = now;
  checked_epoch_ = change_epoch_;
  while (!unschedulable_.empty()) {
    std::string key = *unschedulable_.begin();
    const Entry& e = where_.at(key);
    Push(key, e.priority, e.queue, e.arrival);
  }
  return due;
}

std::optional<SchedulingQueue::TimePoint> SchedulingQueue::NextWakeup() const {
  std::optional<TimePoint> next;
  auto consider = [&](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  if (!backoff_.empty()) consider(backoff_.begin()->first);
  if (!unschedulable_.empty()) {
    consider(last_flush_ + options_.period);
    if (checked_epoch_ != change_epoch_) consider(last_flush_ + options_.min_interval);
  }
  return next;
}

}  // namespace tessera::core
