// The timeline protocol (timeline.h) with queues, priorities and preemption: how fairly queues
// share the GPUs and how long their pods wait, with reclaim and priority preemption
// (core/preemption/planner.h) and without.
//
//  - Queues from the trace's qos column: LS, Guaranteed and Burstable pods go to queue
//    `latency`, BE pods to `batch`; priorities Guaranteed 200, LS 100, Burstable 50, BE 0.
//    `latency` deserves latency_deserved_percent of the GPUs and `batch` the rest, both weight 1
//    (queue_set.h: fair shares by deserved amounts, then weights, capped by demand).
//  - A pod arrives at its (compressed) creation time and waits in its queue: highest priority
//    first, then arrival. Whenever something changes, pending pods are served: of the queues
//    whose first pod has the highest priority, the one furthest below its fair share
//    (QueueSet::Pick, dominant-resource fairness) goes first. A queue whose first pod does not
//    fit (and cannot make room) is passed over until something leaves or arrives to it.
//  - With preemption, a pod that does not fit asks the planner: pods of lower priority in its
//    queue, or reclaim from a queue above its deserved share while its own is below. Victims
//    leave at once and wait again in their queue from that moment (their run starts over).
//  - Reported per queue: pending-time percentiles of the pods that started (from arrival or
//    eviction), pods still waiting, evictions; time-weighted allocation against deserved and fair
//    share; and over the queues Jain's fairness index of allocation / fair share (1 = each queue
//    holds exactly its fair share), time-weighted over the moments at least two queues want GPUs;
//    evictions per hour of the (compressed) arrival window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim {

// A queue of the replay, and the pods that go to it by the trace's qos column.
struct QueueTimelineQueue {
  std::string name;
  int deserved_percent = 0;      // of the GPUs
  std::vector<std::string> qos;  // e.g. {"BE"}; a pod's priority still comes from its qos
};

struct QueueTimelineOptions {
  std::string policy = "tessera";
  uint64_t seed = 42;
  double speedup = 1;   // arrival gaps divided by this
  bool preempt = true;  // reclaim and priority preemption
  int latency_deserved_percent = 50;
  // The queues; empty: `latency` (LS, Guaranteed, Burstable; latency_deserved_percent) and
  // `batch` (BE; the rest), as above. Every pod's qos must be in one queue's list.
  std::vector<QueueTimelineQueue> queues;
  // The arrival window is cut into this many equal periods, each reported with its queues'
  // time-weighted allocation and fair share (allocation against deserved share over time).
  int periods = 12;
  // Fair share that remembers: the queues' usage half-life in seconds of the replay's clock
  // (core/queues/usage_history.h); 0 orders by what the queues hold now.
  int64_t usage_half_life_s = 0;
  // Jain's index over sliding windows of this many seconds (stepped by a quarter window) of
  // the arrival window, each of every queue's time-weighted allocation against its fair share
  // in the window (queues that wanted GPUs in it); 0: not computed.
  int64_t jain_window_s = 0;
};

// One period of the arrival window: per queue (in QueueTimelineResult::queues' order), the
// time-weighted mean GPUs allocated and fair share over it, and the pending times of the pods
// that began to wait in it (arrived, or were evicted) and started.
struct QueueTimelinePeriod {
  double from_hours = 0, to_hours = 0;  // since the first arrival (compressed time)
  std::vector<double> allocated_gpus;
  std::vector<double> fair_share_gpus;
  std::vector<int64_t> started;        // of the pods that began to wait in the period
  std::vector<double> pending_mean_s;  // their mean pending time
  std::vector<double> pending_p90_s;
};

struct QueueTimelineStats {
  std::string queue;
  int64_t pods = 0;           // arrivals (first arrivals only)
  int64_t started = 0;        // starts, restarts after eviction included
  int64_t still_waiting = 0;  // at the end of the trace
  int64_t evicted = 0;        // times its pods were evicted
  double pending_p50 = 0, pending_p90 = 0, pending_p99 = 0, pending_mean = 0;  // seconds
  double deserved_gpus = 0;
  double mean_allocated_gpus = 0;  // time-weighted over the arrival window
  double mean_fair_share_gpus = 0;
};

struct QueueTimelineResult {
  std::string policy;
  bool preempt = false;
  double speedup = 1;
  double span_hours = 0;
  double capacity_gpus = 0;
  int64_t evictions = 0;
  double evictions_per_hour = 0;
  int64_t plans = 0;           // preemption plans asked for
  double plan_ms_total = 0;    // their CPU time, wall clock
  double jain = 0;             // time-weighted Jain's index of allocation / fair share
  double contended_hours = 0;  // time at least two queues wanted GPUs
  // Over the sliding windows (jain_window_s) where at least two queues wanted GPUs.
  int64_t jain_windows = 0;
  double jain_window_min = 0, jain_window_mean = 0;
  double mean_allocation = 0;  // % of GPUs, time-weighted
  std::vector<QueueTimelineStats> queues;
  std::vector<QueueTimelinePeriod> periods;
  double seconds = 0;  // wall time of the run
};

[[nodiscard]] absl::StatusOr<QueueTimelineResult> RunQueueTimeline(
    const core::Cluster& cluster, const PodTrace& trace, const QueueTimelineOptions& options);

}  // namespace tessera::sim
