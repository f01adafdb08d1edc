// The order in which pending pods are tried.
//
// Higher spec.priority first. Within one priority, the named queues (tessera.dev/queue) take
// turns, one pod each, in name order, so that a queue with thousands of pods cannot hold back
// another's; within a queue, first in, first out. Worked example: pushes a1 a2 a3 (queue a,
// priority 0), b1 (queue b, priority 0), h1 (queue a, priority 10) pop as h1, a1, b1, a2, a3.
//
// Push of a key already queued moves it to the back of its (possibly new) place. Remove is O(1)
// (entries are dropped lazily when they reach the front). Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace tessera::k8s {

class SchedulingQueue {
 public:
  void Push(const std::string& key, int32_t priority, const std::string& queue);
  std::optional<std::string> Pop();
  bool Remove(const std::string& key);
  bool Contains(const std::string& key) const { return entries_.contains(key); }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

 private:
  struct Level {
    std::map<std::string, std::deque<std::pair<uint64_t, std::string>>> queues;
    std::string last;  // the queue served last, for turns
    bool served_any = false;
  };
  std::map<int32_t, Level, std::greater<>> levels_;
  absl::flat_hash_map<std::string, uint64_t> entries_;  // key -> seq of its live entry
  uint64_t seq_ = 0;
};

}  // namespace tessera::k8s
