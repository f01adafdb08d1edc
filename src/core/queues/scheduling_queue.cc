#include "core/queues/scheduling_queue.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

namespace tessera::core {

template <typename Key>
typename BasicSchedulingQueue<Key>::Entry& BasicSchedulingQueue<Key>::Put(const Key& key, Part part,
                                                                          int32_t priority,
                                                                          const std::string& queue,
                                                                          Arrival arrival) {
  auto [it, inserted] = where_.try_emplace(key);
  if (!inserted) Take(key, it->second);
  Entry& e = it->second;
  e.part = part;
  e.priority = priority;
  e.queue = queue;
  e.arrival = arrival;
  return e;
}

template <typename Key>
void BasicSchedulingQueue<Key>::Take(const Key& key, Entry& e) {
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

template <typename Key>
void BasicSchedulingQueue<Key>::Push(const Key& key, int32_t priority, const std::string& queue,
                                     Arrival arrival) {
  Entry& e = Put(key, Part::kActive, priority, queue, arrival);
  ++active_count_;
  levels_[priority][queue].emplace(e.arrival, key);
}

template <typename Key>
void BasicSchedulingQueue<Key>::Backoff(const Key& key, int32_t priority, const std::string& queue,
                                        Arrival arrival, TimePoint until) {
  Entry& e = Put(key, Part::kBackoff, priority, queue, arrival);
  e.until = until;
  backoff_.emplace(until, key);
}

template <typename Key>
void BasicSchedulingQueue<Key>::Unschedulable(const Key& key, int32_t priority,
                                              const std::string& queue, Arrival arrival) {
  Entry& e = Put(key, Part::kUnschedulable, priority, queue, arrival);
  e.tried_epoch = change_epoch_;
  unschedulable_.insert(key);
}

template <typename Key>
bool BasicSchedulingQueue<Key>::Remove(const Key& key) {
  auto it = where_.find(key);
  if (it == where_.end()) return false;
  Take(key, it->second);
  where_.erase(it);
  return true;
}

template <typename Key>
std::optional<Key> BasicSchedulingQueue<Key>::Pop() {
  if (levels_.empty()) return std::nullopt;
  Level& level = levels_.begin()->second;
  // The queue to serve: furthest below its fair share (the order's), else the earliest head.
  auto chosen = level.begin();
  if (level.size() > 1) {
    std::vector<QueueSet::Candidate> candidates;
    std::vector<typename Level::iterator> at;
    candidates.reserve(level.size());
    at.reserve(level.size());
    for (auto q = level.begin(); q != level.end(); ++q) {
      candidates.push_back({q->first, q->second.begin()->first});
      at.push_back(q);
      if (q->second.begin()->first < chosen->second.begin()->first) chosen = q;
    }
    if (order_ != nullptr) chosen = at[order_->Pick(candidates)];
  }
  // Out of every part, as Remove takes it, from the place already found.
  Key key = chosen->second.begin()->second;
  chosen->second.erase(chosen->second.begin());
  if (chosen->second.empty()) level.erase(chosen);
  if (level.empty()) levels_.erase(levels_.begin());
  --active_count_;
  where_.erase(key);
  return key;
}

template <typename Key>
std::vector<Key> BasicSchedulingQueue<Key>::Waiting() const {
  absl::flat_hash_map<std::string, double> share;
  std::vector<std::tuple<int32_t, double, Arrival, const Key*>> all;
  all.reserve(where_.size());
  for (const auto& [key, e] : where_) {
    double s = 0;
    if (order_ != nullptr) {
      auto [it, fresh] = share.try_emplace(e.queue, 0.0);
      if (fresh) it->second = order_->DominantShare(e.queue);
      s = it->second;
    }
    all.emplace_back(-e.priority, s, e.arrival, &key);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
    if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
    if (std::get<2>(a) != std::get<2>(b)) return std::get<2>(a) < std::get<2>(b);
    return *std::get<3>(a) < *std::get<3>(b);
  });
  std::vector<Key> out;
  out.reserve(all.size());
  for (const auto& t : all) out.push_back(*std::get<3>(t));
  return out;
}

template <typename Key>
bool BasicSchedulingQueue<Key>::ChangeUnseen() {
  if (checked_epoch_ == change_epoch_) return false;
  for (const Key& key : unschedulable_) {
    if (where_.at(key).tried_epoch < change_epoch_) return true;
  }
  checked_epoch_ = change_epoch_;  // every waiting pod was tried after the latest change
  return false;
}

template <typename Key>
bool BasicSchedulingQueue<Key>::Flush(TimePoint now) {
  while (!backoff_.empty() && backoff_.begin()->first <= now) {
    Key key = backoff_.begin()->second;
    const Entry& e = where_.at(key);
    Push(key, e.priority, e.queue, e.arrival);  // takes it out of backoff_
  }
  const bool due = now - last_flush_ >= options_.period;
  const bool requested = now - last_flush_ >= options_.min_interval && ChangeUnseen();
  if (!due && !requested) return false;
  last_flush_ = now;
  checked_epoch_ = change_epoch_;
  // Each to active, as Push puts it; in order, so that each goes in at the end of its queue's
  // pods when none of them is active (a change seen by a queue that was all tried).
  std::vector<std::pair<const Entry*, const Key*>> moved;
  moved.reserve(unschedulable_.size());
  for (const Key& key : unschedulable_) {
    Entry& e = where_.at(key);
    e.part = Part::kActive;
    moved.emplace_back(&e, &key);
  }
  std::sort(moved.begin(), moved.end(), [](const auto& a, const auto& b) {
    if (a.first->priority != b.first->priority) return a.first->priority > b.first->priority;
    if (a.first->queue != b.first->queue) return a.first->queue < b.first->queue;
    return std::tie(a.first->arrival, *a.second) < std::tie(b.first->arrival, *b.second);
  });
  for (const auto& [e, key] : moved) {
    auto& pods = levels_[e->priority][e->queue];
    pods.insert(pods.end(), {e->arrival, *key});
  }
  active_count_ += moved.size();
  unschedulable_.clear();
  return due;
}

template <typename Key>
std::optional<typename BasicSchedulingQueue<Key>::TimePoint> BasicSchedulingQueue<Key>::NextWakeup()
    const {
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

template class BasicSchedulingQueue<std::string>;
template class BasicSchedulingQueue<int32_t>;

}  // namespace tessera::core
