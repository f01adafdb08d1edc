// The timeline protocol's load (timeline.h): the replay's clock, the GPU demand a trace offers
// over time, the trace tuned so that this demand peaks at a chosen share of the cluster's GPUs,
// and the least waiting that any policy must do under it.
//
// Offered demand D(t): the milli-GPU asked by the pods that would be running at t if every pod
// started when it arrives: pod i from its arrival a_i to a_i + d_i (d_i: its traced run time;
// forever without a deletion time). Departures at t come before arrivals at t, as in the replay.
//
// Load level L: the peak of D is L% of the cluster's GPUs. Compression alone cannot get there on
// the public trace: its pods ask for 98% of the GPUs in all (`default`; `gpushare100` 64%), so
// even with every arrival at once D peaks below capacity. The level is reached as the FGD protocol
// tunes its pod list (fgd_replay.h): at the given compression, pods drawn uniformly with
// replacement (seeded) are added as clones, each with the times of the pod it copies, until the
// peak reaches L; a trace that already peaks above L loses pods drawn at random until it no
// longer does. Clones drawn uniformly scale the demand curve without changing its shape.
//
// The waiting bound. A pod that starts late still runs its whole run time, so at any t every pod
// with a_i <= t < a_i + d_i is either running or waiting, whatever the policy. The pods running
// hold at most the capacity C, so at least D(t) - C of GPU demand is waiting at t, and every
// policy's GPU-time of waiting is at least the integral of max(0, D(t) - C). It counts GPUs
// only (CPU, memory, models and the pieces GPUs are cut into can only add waiting), so it is a
// floor, not an estimate: waiting above it is what placement and queue order could still win.
// GPU models sharpen it: the pods that may use only the models of a set S run only on S's GPUs,
// so at least D_S(t) - C_S of their demand waits; the floor at t is the largest of these over
// every set S of the cluster's models (S = all of them gives the plain D(t) - C).
// Example: C = 2 GPUs; pods of 1 GPU arrive at 0, 0 and 1 and run 10 s each. D is 2 on [0, 1), 3
// on [1, 10), 1 on [10, 11): at least 9 GPU-seconds of waiting (the third pod waits 9 s). With
// one GPU of each of two models instead, and the three pods bound to the first model, D_S - C_S
// for that model is 1 on [0, 1) and 2 on [1, 10): at least 19 GPU-seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim {

// When each pod of a trace arrives on the replay's clock, and how long it runs.
class TimelineClock {
 public:
  // Errors: a trace without times, a pod without a creation time, a speedup that is not positive.
  [[nodiscard]] static absl::StatusOr<TimelineClock> Create(const PodTrace& trace, double speedup);

  // The first arrival, and the end of the arrival window (the last arrival, compressed).
  int64_t first() const { return first_; }
  int64_t window_end() const { return window_end_; }
  double speedup() const { return speedup_; }
  // The arrival, compressed: the gap since the first arrival divided by the speedup.
  int64_t Arrival(const TracePod& pod) const;
  // The traced run time (deletion_time minus scheduled_time, or minus creation_time when it was
  // never scheduled); nullopt without a deletion time: it runs to the end.
  static std::optional<int64_t> RunTime(const TracePod& pod);

 private:
  int64_t first_ = 0;
  int64_t window_end_ = 0;
  double speedup_ = 1;
};

// D(t) as steps: (time, milli-GPU from that time on), times increasing; D is 0 before the first.
using DemandSteps = std::vector<std::pair<int64_t, int64_t>>;

// The offered demand of `pods` (indices into trace.pods; an index may repeat), leaving out the
// pods for which `counts` (when given, one entry per trace pod) is false.
DemandSteps OfferedDemand(const PodTrace& trace, const TimelineClock& clock,
                          const std::vector<int32_t>& pods,
                          const std::vector<bool>* counts = nullptr);
int64_t PeakOf(const DemandSteps& demand);

// The integral of max(0, D(t) - capacity) over t < until, in milli-GPU x seconds.
double ExcessOver(const DemandSteps& demand, int64_t capacity_milli, int64_t until);

// The waiting bound over t < until, in milli-GPU x seconds, with GPU models: the integral of the
// largest D_S(t) - C_S over the sets S of the cluster's models (every subset when the cluster has
// at most 12 models, else the pods' own model lists and all models). `pods` and `counts` as in
// OfferedDemand.
double WaitingFloor(const PodTrace& trace, const TimelineClock& clock,
                    const std::vector<int32_t>& pods, const std::vector<bool>* counts,
                    const core::Cluster& cluster, int64_t until);

// The pods of a replay at a load level.
struct TimelineLoad {
  std::vector<int32_t> pods;  // indices into trace.pods: the trace's pods kept, then the clones
  int64_t clones = 0;         // pods added (copies of trace pods)
  int64_t removed = 0;        // trace pods left out
  int64_t peak_milli = 0;     // the peak of the offered demand
};

// Every pod of the trace once (no tuning).
TimelineLoad WholeTrace(const PodTrace& trace, const TimelineClock& clock,
                        const std::vector<bool>* counts = nullptr);

// The trace tuned so that its offered demand peaks at `level_percent` of `capacity_milli`: the
// fewest clones that bring the peak to the level, or the fewest removals that bring it down to
// it (the draws are a function of `seed`). `counts` as in OfferedDemand. Errors: a level that is
// not positive, or one that clones cannot reach (no pod asks for GPUs while running).
[[nodiscard]] absl::StatusOr<TimelineLoad> TuneTimelineLoad(
    const PodTrace& trace, const TimelineClock& clock, int64_t capacity_milli, double level_percent,
    uint64_t seed, const std::vector<bool>* counts = nullptr);

}  // namespace tessera::sim
