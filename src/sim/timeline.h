// Replay of a trace by its own clock: the realistic counterpart of the FGD protocol.
//
//  - A pod arrives at its creation_time. If the policy places it, it runs for its traced run time
//    (deletion_time minus scheduled_time, or minus creation_time when it was never scheduled) and
//    then leaves; a pod without a deletion time runs to the end.
//  - A pod that does not fit now waits in a queue. Whenever pods leave, the waiting pods are tried
//    again, each that fits starting at once (no head-of-line blocking, as kube-scheduler retries
//    unschedulable pods): pods of one request shape in arrival order, shapes in the order they
//    first had to wait. A shape that did not fit is not tried again (nor are later arrivals of
//    it) until something leaves. A pod that can never fit the cluster is rejected.
//  - Reported: pending time (start minus arrival) percentiles over the pods that started, the pods
//    still waiting when the trace ends, and the GPU allocation ratio over time (time-weighted mean
//    and a curve).
//  - Load: the public trace is a sample of the cluster's pods over five months, so by its own
//    clock it keeps about 0.2% of the GPUs busy and nothing ever waits. Arrival times can be
//    compressed (`speedup`: the gaps between arrivals divided by it, run times kept) to load the
//    cluster; the result reports the offered load: the GPU demand that would be running, were
//    there room for everything, averaged over the arrival window, as a share of the GPUs. (Most
//    pods run minutes and a few run for months, so the cluster fills only at speedups of 10^4 and
//    more, when the five months of arrivals come within minutes.)
//  - The allocation figures cover the arrival window (first to last arrival); afterwards the
//    cluster only drains.
// Example: one 1-GPU node; pod a arrives at 0 and runs 10 s, pod b arrives at 2: b waits until
// a leaves at 10 and then runs; b's pending time is 8 s.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "core/policy/policy.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim {

struct TimelineOptions {
  std::string policy;
  uint64_t seed = 42;
  std::vector<core::TypicalTask> typical_tasks;  // for policies that use one (fgd)
  int curve_points = 200;                        // samples of the allocation curve
  double speedup = 1;                            // arrival gaps divided by this (> 1 compresses)
};

struct TimelineResult {
  std::string policy;
  uint64_t seed = 0;
  int64_t pods = 0;
  int64_t started = 0;
  int64_t never_fits = 0;
  int64_t still_waiting = 0;  // arrived, never started before the trace ended
  int64_t waited = 0;         // started after waiting
  // Pending time of the pods that started, seconds.
  double pending_p50 = 0, pending_p90 = 0, pending_p99 = 0, pending_max = 0, pending_mean = 0;
  double mean_allocation = 0;  // time-weighted GPU allocation ratio, %, over the arrival window
  double peak_allocation = 0;
  std::vector<std::pair<double, double>> curve;  // (hours since the first arrival, allocation %)
                                                 // over the arrival window
  int64_t capacity_milli = 0;
  double span_hours = 0;    // the arrival window, after compression
  double speedup = 1;       // the compression used
  double offered_load = 0;  // percent, after compression
  double seconds = 0;       // wall time
};

[[nodiscard]] absl::StatusOr<TimelineResult> RunTimeline(const core::Cluster& cluster,
                                                         const PodTrace& trace,
                                                         const TimelineOptions& options);

// Means over runs of one policy (curve point by point).
TimelineResult MeanOfTimelines(const std::vector<TimelineResult>& runs);

}  // namespace tessera::sim
