// Replay of a trace by its own clock: the realistic counterpart of the FGD protocol.
//
//  - A pod arrives at its creation_time. If the policy places it, it runs for its traced run time
//    (deletion_time minus scheduled_time, or minus creation_time when it was never scheduled) and
//    then leaves; a pod without a deletion time runs to the end.
//  - A pod that does not fit now waits in the live scheduler's queue, under its rules
//    (replay_queue.h, core/queues/scheduling_queue.h). Whenever pods leave, the waiting pods are
//    tried again in the queue's order (here every pod has one priority and one queue: arrival
//    order), each that fits starting at once (no head-of-line blocking, as kube-scheduler retries
//    unschedulable pods). A pod whose request shape did not fit since pods last left goes back
//    without a try (the room only shrank since: a try would say the same). A pod that can never
//    fit the cluster is rejected.
//  - Reported: pending time (start minus arrival) percentiles over the pods that started, the pods
//    still waiting when the trace ends, and the GPU allocation ratio over time (time-weighted mean
//    and a curve).
//  - Load: the public trace is a sample of the cluster's pods over five months, so by its own
//    clock it keeps about 0.2% of the GPUs busy and nothing ever waits. Arrival times can be
//    compressed (`speedup`: the gaps between arrivals divided by it, run times kept) to load the
//    cluster. (Most pods run minutes and a few run for months, so the cluster fills only at
//    speedups of 10^4 and more, when the five months of arrivals come within minutes.) A load
//    level (`load`) names the load by the peak of the offered demand (the GPUs the pods would hold
//    were there room for all) against the GPUs: at the given compression the pod list is tuned
//    (pods cloned or left out, timeline_load.h) until the demand peaks at that level.
//  - Also reported: the pending times of the pods that ask whole GPUs and of those that ask two
//    or more (fragmentation hits them first), the GPU-hours spent waiting (GPUs asked x time
//    waited, summed; pods still waiting at the end count until then) beside the least any policy
//    must wait (timeline_load.h), and the allocation at the peak (time-weighted, while the
//    offered demand is at least 90% of its peak).
//  - With `classify_waits`, each pod's waiting is split by what the cluster offered it when it was
//    last tried (tries follow every departure, when the cluster is at its emptiest since the try
//    before): some node could take it after rearranging the pods already on that node among its
//    GPUs (a placement loss: a better arrangement of the same pods had room); no node could do
//    that, but one could were its shares (pods on part of a GPU) gone (shares would have to move
//    to another node); or no node could take it even without its shares (whole-GPU and CPU-only
//    pods fill them: not a loss of how shares were placed).
//  - The allocation figures cover the arrival window (first to last arrival); afterwards the
//    cluster only drains.
//  - Elastic gangs (`gang_min_gpus`): each pod asking at least that many whole GPUs runs as a gang
//    of as many one-GPU members (its CPU and memory split among them), which must share one node
//    (as the pod did) and is placed by the engine's elastic-gang rule (Engine::PlaceElasticGang):
//    it starts once `gang_min_percent` of its members fit together, takes as many more as fit
//    then, and grows on its node as GPUs there free up (the members still waiting are tried with
//    the other waiting pods, after every departure). Its work is the pod's GPUs x its traced run
//    time, done at the pace of the members running: a gang that starts with half its members and
//    never grows runs twice as long; one that grows speeds up. At 100% it is a rigid gang (all
//    members at once, on one node), which is the pod itself. Reported per gang: the wait to start
//    (with the pods' pending times, as the pod's), the wait to full size, the GPU-hours its
//    members waited while it ran, and how much longer than traced it ran.
//    Example: an 8-GPU pod that runs 100 s arrives when its best node has 4 GPUs free, and 4 more
//    free up 20 s later: with gang_min_percent 50 it starts at once with 4 members and is full
//    20 s later; 4 x 20 = 80 member-seconds of its 800 are done by then, the other 720 at 8 a
//    second: it ends 110 s after it arrived (not waiting 20 s and ending at 120 s), and its members
//    waited 4 x 20 s = 80 GPU-seconds while it ran.
//  - Reservations with backfill (`reservations`, core/reservations/reservations.h, off unless
//    max_reservations > 0): at every event (an arrival, departures), before the waiting pods are
//    tried, the reservations are brought up to date with the queue (the first long-waiting big
//    pods get room held, in the queue's order); every pod is then placed under them
//    (Reservations::Place: held room only for its owner, a higher priority, or a backfill pod).
//    Declared run times, the model: a pod declares a maximum run time with probability
//    `declare_percent` % (drawn per pod from the seed), equal to its traced run time rounded up to
//    a multiple of `declare_bucket_s` (what a user who knows the job would write, with a margin);
//    a pod without a traced end never declares. Pods that declare none cannot backfill, and their
//    end is estimated (ReservationOptions::unknown_runtime_s). A declared pod ends at its traced
//    time, never later than declared: no pod in the replay overruns, so the eviction at the limit
//    that the scheduler must enforce is not modelled. Reported: reservations made and pods
//    backfilled. Not with elastic gangs or defragmentation.
// Example: one 1-GPU node; pod a arrives at 0 and runs 10 s, pod b arrives at 2: b waits until
// a leaves at 10 and then runs; b's pending time is 8 s, 8 GPU-seconds of waiting, and the bound
// is 8 GPU-seconds too (from 2 to 10 the offered demand is 2 GPUs on 1).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "core/policy/policy.h"
#include "core/reservations/reservations.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim {

struct TimelineOptions {
  std::string policy;
  uint64_t seed = 42;  // the policy's seed, and the draws that tune the load
  std::vector<core::TypicalTask> typical_tasks;  // for policies that use one (fgd)
  int curve_points = 200;                        // samples of the allocation curve
  double speedup = 1;                            // arrival gaps divided by this (> 1 compresses)
  // The peak of the offered demand, % of the GPUs, that the pod list is tuned to; 0: the trace's
  // pods as they are.
  double load = 0;
  bool classify_waits = false;  // split the waiting by what the cluster offered (slower)
  // Defragmentation (core/plan/defrag.h), off at 0 moves: after pods leave and the waiting pods
  // were tried, the first waiting pod (in the queue's order, the first of its request shape)
  // that asks at least `defrag_min_gpus` whole GPUs and has waited at least `defrag_after_s` (the
  // replay's clock) gets a plan of at most `defrag_max_moves` moves, searched with at most
  // `defrag_max_checks` sets; a plan found is carried out at once (the moved pods go where it
  // says and keep their departure times; the pod starts), and, the moved pods having left their
  // nodes, the waiting pods are tried again. One plan per departure; a pod whose search found
  // nothing is searched for again only `defrag_after_s` later.
  int defrag_max_moves = 0;
  int64_t defrag_after_s = 0;
  int defrag_min_gpus = 2;
  int64_t defrag_max_checks = 2000;
  // Elastic gangs (above); 0: off (every pod is a pod). Not with defragmentation.
  int gang_min_gpus = 0;
  int gang_min_percent = 100;  // of a gang's members, rounded up: the fewest it starts with
  // Reservations with backfill (above); off unless reservations.max_reservations > 0.
  core::ReservationOptions reservations;
  int declare_percent = 0;        // of the pods, declaring a maximum run time
  int64_t declare_bucket_s = 60;  // declared: the traced run time rounded up to a multiple of this
  // Optional, for diagnostics (churn_bench): called when a pod is tried and does not fit (on
  // arrival and on each retry), with the cluster's state then, and when a pod starts. `pod` is
  // its index in trace.pods (a clone gives the index of the pod it copies).
  std::function<void(int32_t pod, int64_t now, const core::ClusterState&)> on_refused;
  std::function<void(int32_t pod, int64_t arrival, int64_t now, const core::Placement&,
                     const core::ClusterState&)>
      on_start;
};

// Pending times of a group of pods, seconds.
struct PendingStats {
  int64_t started = 0;
  int64_t waited = 0;                                   // started after waiting
  int64_t still_waiting = 0;                            // never started before the trace ended
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;  // over the pods that started
};

// The pods run as gangs (gang_min_gpus).
struct GangStats {
  int64_t gangs = 0;                                    // pods run as gangs
  int64_t started = 0;                                  // reached their min
  int64_t full = 0;                                     // ran all their members at some point
  int64_t still_waiting = 0;                            // never started before the trace ended
  double start_p50 = 0, start_p99 = 0, start_mean = 0;  // arrival to start, s, over started
  double full_p50 = 0, full_p99 = 0, full_max = 0;      // arrival to full size, s, over full
  double member_wait_gpu_hours = 0;  // members waiting while their gang ran, GPUs x hours
  double stretch = 0;                // mean over the gangs that ended: run time / traced run time
};

// GPU-hours of waiting by what the cluster offered the waiting pod (classify_waits).
struct WaitSplit {
  double repack = 0;      // a node could take it after rearranging its own pods on its GPUs
  double cross_node = 0;  // only a node without its shares could take it
  double capacity = 0;    // no node could take it even without its shares
};

struct TimelineResult {
  std::string policy;
  uint64_t seed = 0;
  int64_t pods = 0;
  int64_t started = 0;
  int64_t never_fits = 0;
  int64_t still_waiting = 0;            // arrived, never started before the trace ended
  int64_t waited = 0;                   // started after waiting
  int64_t defrag_searches = 0;          // plans searched for (defrag_max_moves > 0)
  int64_t defrag_plans = 0;             // plans carried out
  int64_t defrag_moves = 0;             // pods moved by them
  int64_t defrag_whole_gpus_moved = 0;  // whole GPUs the moved pods held
  int64_t reservations_made = 0;        // reservations made (a re-choice counts again)
  int64_t backfilled = 0;               // pods that started on held room as backfill
  int64_t declared = 0;                 // pods declaring a maximum run time
  // Pending time of the pods that started, seconds.
  double pending_p50 = 0, pending_p90 = 0, pending_p99 = 0, pending_max = 0, pending_mean = 0;
  PendingStats whole_gpu;           // pods asking one or more whole GPUs
  PendingStats multi_gpu;           // pods asking two or more GPUs
  PendingStats single_gpu;          // pods asking one GPU or part of one
  double wait_gpu_hours = 0;        // GPUs asked x time waited, summed over the pods
  double wait_gpu_hours_bound = 0;  // no policy waits less (timeline_load.h)
  WaitSplit wait_split;             // with classify_waits
  GangStats gangs;                  // with gang_min_gpus
  double mean_allocation = 0;  // time-weighted GPU allocation ratio, %, over the arrival window
  double peak_allocation = 0;
  double peak_window_allocation = 0;  // mean allocation while the demand is >= 90% of its peak
  std::vector<std::pair<double, double>> curve;  // (hours since the first arrival, allocation %)
                                                 // over the arrival window
  int64_t capacity_milli = 0;
  double span_hours = 0;    // the arrival window, after compression
  double speedup = 1;       // the compression used
  double offered_load = 0;  // percent, after compression
  double load = 0;          // the load level asked (0: none)
  double peak_demand = 0;   // the peak of the offered demand, % of the GPUs
  int64_t clones = 0;       // pods added to reach the load level (copies of trace pods)
  int64_t removed = 0;      // trace pods left out to get down to it
  double seconds = 0;       // wall time
};

[[nodiscard]] absl::StatusOr<TimelineResult> RunTimeline(const core::Cluster& cluster,
                                                         const PodTrace& trace,
                                                         const TimelineOptions& options);

// Means over runs of one policy (curve point by point).
TimelineResult MeanOfTimelines(const std::vector<TimelineResult>& runs);

}  // namespace tessera::sim
