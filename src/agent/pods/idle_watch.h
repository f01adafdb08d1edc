// IdleWatch: which pods hold a GPU they do not use (issue 34, "idle shares").
//
// Rule: a pod is idle on a GPU when, over the last `window`, the GPU ran kernels less than
// `threshold_permille` of the time the pod was observed running alone on it, and it was observed
// for at least the whole window (so a pod that just started, or one whose GPU was shared with
// other running pods, is never called idle on too little evidence). The figures are the usage
// meter's (usage_meter.h) for a pod running alone on the GPU: the GPU's own utilisation, which
// no pod can write. Never the meter's split of a shared GPU among several running pods: that
// split follows what the pods' shims report in ledgers the pods can write, so one pod could
// make a neighbour look idle (and be told to go) by its own reports.
//
// Pure: the caller brings the clock and the observations. Not thread-safe (the pod manager's
// lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace tessera::agent {

struct IdleOptions {
  uint32_t threshold_permille = 50;   // busy under 5% of the time ...
  std::chrono::seconds window{1800};  // ... for 30 minutes; 0: never idle
};

class IdleWatch {
 public:
  explicit IdleWatch(IdleOptions options) : options_(options) {}

  // The pod ran alone on the GPU for `elapsed_ns` until `now_ns`, of which the GPU was busy
  // `busy_ns`.
  void Observe(const std::string& pod_uid, const std::string& gpu_uuid, int64_t now_ns,
               uint64_t elapsed_ns, uint64_t busy_ns);
  // The pod's busy fraction on the GPU over the window, once it was observed for a whole one.
  std::optional<uint32_t> BusyPermille(const std::string& pod_uid,
                                       const std::string& gpu_uuid) const;
  // Whether the pod is idle on the GPU now (BusyPermille under the threshold).
  bool Idle(const std::string& pod_uid, const std::string& gpu_uuid,
            uint32_t* busy_permille = nullptr) const;
  void Forget(const std::string& pod_uid);

  const IdleOptions& options() const { return options_; }

 private:
  struct Sample {
    int64_t end_ns;
    uint64_t elapsed_ns, busy_ns;
  };
  struct Track {
    std::deque<Sample> samples;            // the last window's observations, oldest first
    uint64_t elapsed_ns = 0, busy_ns = 0;  // their sums
  };
  IdleOptions options_;
  std::map<std::pair<std::string, std::string>, Track> tracks_;  // (pod UID, GPU UUID)
};

}  // namespace tessera::agent
