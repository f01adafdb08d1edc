// The pods waiting to be scheduled and the rules for when each is tried again, kept as
// kube-scheduler's scheduling queue keeps them: three parts, a pod in at most one of them. The
// one home of these rules: the live scheduler drives it (k8s::SchedulingQueue is this class,
// k8s/scheduler/scheduler_core.h) on its steady clock, and the simulator's timeline replay
// (sim/timeline.h, through sim/replay_queue.h) on the replay's clock, so that the replay tries
// waiting pods again when, and in the order, the scheduler would. It is pure (time passed in, no
// I/O). (The queue timeline, sim/queue_timeline.h, still serves its queues by its own loop.)
//
//   active         ready to be tried. Higher priority first; within one priority, the queue
//                  (tessera.dev/queue) furthest below its fair share by dominant-resource
//                  fairness over GPUs, GPU memory and GPU compute (core::QueueSet::Pick on the
//                  order's QueueSet, which its owner keeps counting what every queue holds as pods
//                  are placed, so each pop sees the placements before it); ties, and pods of one
//                  queue, by arrival (Arrival: for the scheduler creation time, then when it first
//                  saw the pod). A queue holding nothing goes before any that holds something, so
//                  no queue starves behind another's backlog. Worked example
//                  (k8s/scheduler/queue_test.cc): 8 GPUs; queues a and b deserve 4 each; a holds
//                  2, b holds 1. Active, priority 0: a1 a2 a3 (queue a), then b1 b2 b3 (queue b),
//                  whole GPUs; and ah (queue a, priority 10). Pops as each is placed: ah
//                  (priority; a now 3/4), b1 (b 1/4 < a 3/4), b2 (2/4), a1 (a 3/4 = b 3/4: a1
//                  arrived before b3), b3 (b 3/4 < a 4/4), a2, a3. Without an order (set_order not
//                  called) every queue is at 0: pods go by arrival.
//   backoff        not to be tried before a time (a failed bind: Backoff::Delay of its failures);
//                  moved to active when the time comes.
//   unschedulable  tried, did not fit: moved to active when something changed that could make
//                  it fit (NoteChange: a node added or changed, a pod released) and it has not
//                  been tried since, at most once per `min_interval`; and every `period` in any
//                  case. Never a busy loop: with no change, an unschedulable pod waits a period.
//
// Pods are named by a key: the scheduler's by namespace/name (SchedulingQueue), a replay's by its
// index in the trace (BasicSchedulingQueue<int32_t>); the rules do not depend on the key.
//
// Adding a pod to a part takes it out of the others. Push, Remove and Pop are O(log n) plus, for
// Pop, the queues with pods at the top priority. Time is passed in (Flush, NextWakeup). Not
// thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/queues/queue_set.h"

namespace tessera::core {

template <typename Key>
class BasicSchedulingQueue {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Options {
    std::chrono::milliseconds min_interval{1'000};
    std::chrono::milliseconds period{30'000};
  };

  using Arrival = core::Arrival;  // k8s::ArrivalOfCreation makes one for a pod

  BasicSchedulingQueue() : BasicSchedulingQueue(Options{}, TimePoint()) {}
  BasicSchedulingQueue(Options options, TimePoint now) : options_(options), last_flush_(now) {}

  // The queues' fair shares and what they hold, for the order between queues (nullptr: every
  // queue at 0, pods by arrival). Must outlive this queue.
  void set_order(QueueSet* order) { order_ = order; }

  // To active, in its place by arrival.
  void Push(const Key& key, int32_t priority, const std::string& queue, Arrival arrival);
  // To backoff until `until`.
  void Backoff(const Key& key, int32_t priority, const std::string& queue, Arrival arrival,
               TimePoint until);
  // To unschedulable, tried under the current change count.
  void Unschedulable(const Key& key, int32_t priority, const std::string& queue, Arrival arrival);
  // Out of every part; false if it was in none.
  bool Remove(const Key& key);

  // The next active pod.
  std::optional<Key> Pop();

  // Every pod waiting, in all three parts, in the order the queue would serve them were they all
  // active now: higher priority first; within one priority, queues by the order's dominant share
  // at this moment (lowest first; ties and no order: none), then arrival. Pop picks the queue
  // again after each placement; this is the one-look order (reservations: who waited longest).
  std::vector<Key> Waiting() const;

  // Something changed that could make an unschedulable pod fit.
  void NoteChange() { ++change_epoch_; }
  // Moves the backoff pods that are due, and the unschedulable ones when a change or the period
  // calls for it, to active. Returns true when the period elapsed (and unschedulable pods were
  // all moved for it).
  bool Flush(TimePoint now);
  // When the current period ends (Flush then moves every unschedulable pod, and says so).
  TimePoint next_period() const { return last_flush_ + options_.period; }
  // When Flush next has something to do (nullopt: nothing timed is waiting).
  std::optional<TimePoint> NextWakeup() const;

  bool Contains(const Key& key) const { return where_.contains(key); }
  size_t active_size() const { return active_count_; }
  size_t backoff_size() const { return backoff_.size(); }
  size_t unschedulable_size() const { return unschedulable_.size(); }
  size_t size() const { return where_.size(); }
  bool empty() const { return where_.empty(); }
  bool active_empty() const { return active_count_ == 0; }

 private:
  enum class Part : uint8_t { kActive, kBackoff, kUnschedulable };
  struct Entry {
    Part part = Part::kActive;
    int32_t priority = 0;
    std::string queue;
    Arrival arrival;
    TimePoint until;           // backoff
    uint64_t tried_epoch = 0;  // unschedulable: change count when it was tried
  };
  // One priority's active pods, per queue by arrival (never empty sets).
  using Level = std::map<std::string, absl::btree_set<std::pair<Arrival, Key>>>;

  Entry& Put(const Key& key, Part part, int32_t priority, const std::string& queue,
             Arrival arrival);
  void Take(const Key& key, Entry& e);
  // True if some unschedulable pod was tried before the latest change.
  bool ChangeUnseen();

  Options options_;
  QueueSet* order_ = nullptr;
  std::map<int32_t, Level, std::greater<>> levels_;
  absl::flat_hash_map<Key, Entry> where_;
  size_t active_count_ = 0;
  absl::btree_set<std::pair<TimePoint, Key>> backoff_;
  absl::flat_hash_set<Key> unschedulable_;
  uint64_t change_epoch_ = 0;   // bumped by every change that could free room
  uint64_t checked_epoch_ = 0;  // changes up to here were seen by every unschedulable pod
  TimePoint last_flush_;        // when unschedulable pods were last moved to active
};

extern template class BasicSchedulingQueue<std::string>;
extern template class BasicSchedulingQueue<int32_t>;

// The scheduler's: pods by namespace/name.
using SchedulingQueue = BasicSchedulingQueue<std::string>;

}  // namespace tessera::core
