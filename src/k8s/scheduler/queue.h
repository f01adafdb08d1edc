// The pods waiting to be scheduled, kept as kube-scheduler's scheduling queue keeps them: three
// parts, a pod in at most one of them.
//
//   active         ready to be tried. Higher spec.priority first; within one priority the named
//                  queues (tessera.dev/queue) take turns, one pod each, in name order, so that a
//                  queue with thousands of pods cannot hold back another's; within a queue, first
//                  in, first out. Worked example: pushes a1 a2 a3 (queue a, priority 0), b1 (queue
//                  b, priority 0), h1 (queue a, priority 10) pop as h1, a1, b1, a2, a3.
//   backoff        not to be tried before a time (a failed bind: Backoff::Delay of its failures);
//                  moved to active when the time comes.
//   unschedulable  tried, did not fit: moved to active when something changed that could make
//                  it fit (NoteChange: a node added or changed, a pod released) and it has not
//                  been tried since, at most once per `min_interval`; and every `period` in any
//                  case. Never a busy loop: with no change, an unschedulable pod waits a period.
//
// Adding a pod to a part takes it out of the others. Remove is O(1) (active entries are dropped
// lazily when they reach the front). Time is passed in (Flush, NextWakeup). Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace tessera::k8s {

class SchedulingQueue {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Options {
    std::chrono::milliseconds min_interval{1'000};
    std::chrono::milliseconds period{30'000};
  };

  SchedulingQueue() : SchedulingQueue(Options{}, TimePoint()) {}
  SchedulingQueue(Options options, TimePoint now) : options_(options), last_flush_(now) {}

  // To active (at the back of its place).
  void Push(const std::string& key, int32_t priority, const std::string& queue);
  // To backoff until `until`.
  void Backoff(const std::string& key, int32_t priority, const std::string& queue, TimePoint until);
  // To unschedulable, tried under the current change count.
  void Unschedulable(const std::string& key, int32_t priority, const std::string& queue);
  // Out of every part; false if it was in none.
  bool Remove(const std::string& key);

  // The next active pod.
  std::optional<std::string> Pop();

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

  bool Contains(const std::string& key) const { return where_.contains(key); }
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
    uint64_t seq = 0;  // the live active entry
    int32_t priority = 0;
    std::string queue;
    TimePoint until;           // backoff
    uint64_t tried_epoch = 0;  // unschedulable: change count when it was tried
  };
  struct Level {
    std::map<std::string, std::deque<std::pair<uint64_t, std::string>>> queues;
    std::string last;  // the queue served last, for turns
    bool served_any = false;
  };

  Entry& Put(const std::string& key, Part part, int32_t priority, const std::string& queue);
  void Take(const std::string& key, Entry& e);
  // True if some unschedulable pod was tried before the latest change.
  bool ChangeUnseen();

  Options options_;
  std::map<int32_t, Level, std::greater<>> levels_;
  absl::flat_hash_map<std::string, Entry> where_;
  size_t active_count_ = 0;
  std::set<std::pair<TimePoint, std::string>> backoff_;
  std::set<std::string> unschedulable_;
  uint64_t seq_ = 0;
  uint64_t change_epoch_ = 0;   // bumped by every change that could free room
  uint64_t checked_epoch_ = 0;  // changes up to here were seen by every unschedulable pod
  TimePoint last_flush_;        // when unschedulable pods were last moved to active
};

}  // namespace tessera::k8s
