// Every pod the scheduler knows of and the stage it is in:
//
//   queued ──Place──► binding ──bind ok / watch shows it bound──► bound ──deleted/finished──► gone
//     ▲  └─no fit──► unschedulable ──(node added/changed, pod released; or every retry period)─┘
//     ├─ gang member waits (gang-waiting) until all gang-size members exist, then the gang is
//     │  placed all-or-nothing and bound together
//     └─ a failed bind waits (backoff); a bind answered 409 keeps its GPUs (bind-conflict) until
//        the watch says what happened
//
// The tracker is the one place a stage changes (SetStage), so the count of pods per stage, and
// the pending-pod gauges derived from it, are always right. It decides nothing.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

enum class Stage : uint8_t {
  kNew,
  kIgnored,        // not ours, or not schedulable now (deleting, scheduling gates)
  kBadInput,       // input_error: reported, waits for an update
  kQueued,         // in the scheduling queue's active part
  kUnschedulable,  // waits for a change or the retry period
  kGangWaiting,    // waits for the rest of its gang
  kBackoff,        // a bind failed; retried after a back-off
  kBinding,        // placed, bind in flight
  kBindConflict,   // bind got 409; placement kept until the watch explains
  kBound,
};
inline constexpr int kStageCount = 10;
std::string_view StageName(Stage stage);

class PodTracker {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Pod {
    std::shared_ptr<const PodInfo> info;
    Stage stage = Stage::kNew;
    uint64_t attempt = 0;  // binds started
    bool counted = false;  // counted as scheduled (once per pod)
    TimePoint first_seen;
    uint64_t seen_seq = 0;  // order of first sight (ties between equal creation times)
    TimePoint retry_at;     // bind-conflict: when to stop waiting for the watch
    int bind_failures = 0;
    std::string gang;      // the gang it is a member of ("" none)
    std::string reported;  // last failure reported
    TimePoint reported_at;
  };

  // `metrics` may be null.
  explicit PodTracker(SchedulerMetrics* metrics) : metrics_(metrics) {}
  // Told after every SetStage (even to the same stage: the pod may have changed) and Erase
  // (pod nullptr), so that figures kept per pod elsewhere follow the stages.
  using Listener = std::function<void(const std::string& key, const Pod* pod)>;
  void set_listener(Listener listener) { listener_ = std::move(listener); }

  Pod* Find(const std::string& key);
  const Pod* Find(const std::string& key) const;
  // The pod, which must be known.
  Pod& Get(const std::string& key) { return *Find(key); }
  // The pod, added (stage kNew, first seen `now`) if unknown.
  Pod& Upsert(const std::string& key, TimePoint now);
  void Erase(const std::string& key);

  void SetStage(Pod& pod, Stage stage);
  int64_t count(Stage stage) const { return counts_[static_cast<int>(stage)]; }
  // When the pod waiting longest to be bound (any stage but new, ignored and bound) was first
  // seen; nullopt when none waits. Published as the oldest pending pod's age.
  std::optional<TimePoint> oldest_waiting() const;
  // Whether a pod in `stage` waits to be placed (queued, unschedulable, gang-waiting, back-off):
  // what its queue counts as pending.
  static bool Waits(Stage stage) {
    return stage == Stage::kQueued || stage == Stage::kUnschedulable ||
           stage == Stage::kGangWaiting || stage == Stage::kBackoff;
  }
  // Calls `f(key, pod)` for every pod, in no particular order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [key, pod] : pods_) f(key, pod);
  }
  size_t size() const { return pods_.size(); }

 private:
  void Publish();

  SchedulerMetrics* metrics_;
  Listener listener_;
  absl::flat_hash_map<std::string, Pod> pods_;
  std::array<int64_t, kStageCount> counts_{};
  std::set<std::pair<TimePoint, uint64_t>> waiting_;  // first_seen, seen_seq of waiting pods
  uint64_t next_seq_ = 1;
};

}  // namespace tessera::k8s
