#include "k8s/scheduler/queue.h"

namespace tessera::k8s {

void SchedulingQueue::Push(const std::string& key, int32_t priority, const std::string& queue) {
  uint64_t seq = ++seq_;
  entries_[key] = seq;
  levels_[priority].queues[queue].emplace_back(seq, key);
}

bool SchedulingQueue::Remove(const std::string& key) { return entries_.erase(key) > 0; }

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
        auto e = entries_.find(key);
        if (e == entries_.end() || e->second != seq) continue;  // removed or pushed again
        entries_.erase(e);
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

}  // namespace tessera::k8s
