// The scheduler's queue of waiting pods (core/queues/scheduling_queue.h) on a replay's clock:
// what the timelines (timeline.h, queue_timeline.h) wait in, so that they try pods again when,
// and in the order, the live scheduler would. This adapter holds no rule of its own: the queue
// names a replay's pods by their index (BasicSchedulingQueue<int32_t>, the scheduler's rules under
// another key), the adapter keeps each pod's priority, queue and arrival from its Push for the
// moves that follow, and turns the replay's seconds into the queue's time points.
//
// The replay's settings of the queue's two times (the scheduler's retry_min_interval and
// retry_period, SchedulerCoreOptions):
//  - min_interval 0: a change (pods leaving) is seen at once, so the waiting pods are tried again
//    at the moment it happens, as a scheduler configured with retry_min_interval 0 would;
//  - no period: the scheduler's periodic retry is there for changes it cannot see; a replay sees
//    every change (nothing else frees room), so a periodic retry would find what the last one
//    found.
// Example: pod 3 tried at 10 s does not fit (Unschedulable(3)); nothing is tried again at 20 s
// (Flush(20) moves nothing) until pods leave at 25 s (NoteChange, Flush(25)): Pop gives 3.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/queues/queue_set.h"
#include "core/queues/scheduling_queue.h"

namespace tessera::sim {

class ReplayQueue {
 public:
  // For pods 0..pods-1; the replay's clock starts at `start` (seconds).
  ReplayQueue(size_t pods, int64_t start)
      : queue_(Queue::Options{std::chrono::milliseconds(0), kNoPeriod}, At(start)),
        entries_(pods) {}

  // The queues' fair shares and what they hold (SchedulingQueue::set_order).
  void set_order(core::QueueSet* order) { queue_.set_order(order); }

  // To active, with what orders it from now on.
  void Push(int32_t pod, int32_t priority, const std::string& queue, core::Arrival arrival) {
    entries_[pod] = Entry{priority, queue, arrival};
    queue_.Push(pod, priority, queue, arrival);
  }
  // Tried, did not fit: to unschedulable (under the priority, queue and arrival of its Push).
  void Unschedulable(int32_t pod) {
    const Entry& e = entries_[pod];
    queue_.Unschedulable(pod, e.priority, e.queue, e.arrival);
  }
  bool Remove(int32_t pod) { return queue_.Remove(pod); }
  std::optional<int32_t> Pop() { return queue_.Pop(); }

  // Room was freed (pods left): the unschedulable pods are tried again at the next Flush.
  void NoteChange() { queue_.NoteChange(); }
  void Flush(int64_t now) { queue_.Flush(At(now)); }

  bool Contains(int32_t pod) const { return queue_.Contains(pod); }
  size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }

 private:
  using Queue = core::BasicSchedulingQueue<int32_t>;
  // Longer than any replay (a trace's five months, compressed or not), short enough that a
  // replay's clock plus it stays far from the time point's limit.
  static constexpr std::chrono::milliseconds kNoPeriod =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24 * 365 * 100));
  struct Entry {
    int32_t priority = 0;
    std::string queue;
    core::Arrival arrival;
  };
  static Queue::TimePoint At(int64_t seconds) {
    return Queue::TimePoint(std::chrono::seconds(seconds));
  }

  Queue queue_;
  std::vector<Entry> entries_;
};

}  // namespace tessera::sim
