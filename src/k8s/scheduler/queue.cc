#include "k8s/scheduler/queue.h"

namespace tessera::k8s {

SchedulingQueue::Entry& SchedulingQueue::Put(const std::string& key, Part part, int32_t priority,
                                             const std::string& queue) {
  auto [it, inserted] = where_.try_emplace(key);
  if (!inserted) Take(key, it->second);
  Entry& e = it->second;
  e.part = part;
  e.priority = priority;
  e.queue = queue;
  return e;
}

void SchedulingQueue::Take(const std::string& key, Entry& e) {
  switch (e.part) {
    case Part::kActive:
      --active_count_;
      e.seq = 0;  // its entry in levels_ is dropped when it reaches the front
      break;
    case Part::kBackoff:
      backoff_.erase({e.until, key});
      break;
    case Part::kUnschedulable:
      unschedulable_.erase(key);
      break;
  }
}

void SchedulingQueue::Push(const std::string& key, int32_t priority, const std::string& queue) {
  Entry& e = Put(key, Part::kActive, priority, queue);
  e.seq = ++seq_;
  ++active_count_;
  levels_[priority].queues[queue].emplace_back(e.seq, key);
}

void SchedulingQueue::Backoff(const std::string& key, int32_t priority, const std::string& queue,
                              TimePoint until) {
  Entry& e = Put(key, Part::kBackoff, priority, queue);
  e.until = until;
  backoff_.emplace(until, key);
}

void SchedulingQueue::Unschedulable(const std::string& key, int32_t priority,
                                    const std::string& queue) {
  Entry& e = Put(key, Part::kUnschedulable, priority, queue);
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
  while (!levels_.empty()) {
    auto level_it = levels_.begin();
    Level& level = level_it->second;
    // Next queue after the one served last (wrapping round).
    auto q = level.served_any ? level.queues.upper_bound(level.last) : level.queues.begin();
    if (q == level.queues.end()) q = level.queues.begin();
    while (!level.queues.empty()) {
      auto& fifo = q->second;
      while (!fifo.empty()) {
        auto [seq, key] = std::move(fifo.front());
        fifo.pop_front();
        auto e = where_.find(key);
        // Removed, moved to another part, or pushed again (a later entry is the live one).
        if (e == where_.end() || e->second.part != Part::kActive || e->second.seq != seq) continue;
        where_.erase(e);
        --active_count_;
        level.last = q->first;
        level.served_any = true;
        if (fifo.empty()) level.queues.erase(q);
        if (level.queues.empty()) levels_.erase(level_it);
        return key;
      }
      q = level.queues.erase(q);
      if (q == level.queues.end()) q = level.queues.begin();
    }
    levels_.erase(level_it);
  }
  return std::nullopt;
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
    Push(key, e.priority, e.queue);  // takes it out of backoff_
  }
  const bool due = now - last_flush_ >= options_.period;
  const bool requested = now - last_flush_ >= options_.min_interval && ChangeUnseen();
  if (!due && !requested) return false;
  last_flush_ = now;
  checked_epoch_ = change_epoch_;
  while (!unschedulable_.empty()) {
    std::string key = *unschedulable_.begin();
    const Entry& e = where_.at(key);
    Push(key, e.priority, e.queue);
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

}  // namespace tessera::k8s
