// Replay of the FGD paper's evaluation protocol (the public simulator's workload tuning and
// "InitSchedule" run), on tessera's engine.
//
//  1. The trace's pods are sorted by name and shuffled with the seed.
//  2. Tuning to `target_ratio` (1.3) x the cluster's GPU capacity: below it, pods drawn uniformly
//     with replacement from the name-sorted trace are appended (as "<name>-tuned-<i>") until the
//     next draw would pass the target (the simulator compares the drawn pod's per-GPU milli-GPU,
//     not its total, and so may end a few GPUs above the target: kept as is); above it, randomly
//     drawn pods are removed until the total is at most the target.
//  3. Pods are placed one at a time in that order; nothing departs, a pod that does not fit fails
//     for good.
//  4. After every pod the GPU allocation ratio (allocated milli-GPU / capacity) is recorded against
//     the arrived GPU demand (milli-GPU of every pod tried so far / capacity). The curve is
//     discretised as the paper's scripts do (merge_alloc_discrete): for each whole percent X of
//     arrived demand, the mean of the (2-decimal) ratios of the steps whose arrived demand rounds
//     to X, else of those within X +- 1.
//  5. At the end, the fragmentation rate by FGD's definition: fragment / idle milli-GPU over the
//     cluster, measured against the typical task set.
// Random draws use tessera::Random (mt19937_64), not Go's generator: a seed gives the same run
// every time, but not the simulator's run for that seed; results agree in distribution.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster_state.h"
#include "core/model/cluster.h"
#include "core/policy/policy.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim {

// Indices into trace.pods, in the order the protocol places them (tuned clones repeat indices).
struct FgdSequence {
  std::vector<int32_t> pods;
  std::vector<int32_t> clone_number;  // per entry: -1 for an original pod, else its tuned index
  int64_t demand_milli = 0;           // GPU demand of the whole sequence
};
FgdSequence BuildFgdSequence(const PodTrace& trace, int64_t capacity_milli, double target_ratio,
                             uint64_t seed);

// The seed a replay (this protocol or the timeline) hands its policy for `seed`: a function of it,
// decorrelated from the sequence's own draws.
uint64_t ReplayPolicySeed(uint64_t seed);

// FGD's typical task set for a trace (core/policy/typical.h), the one its simulator derives from
// the pods as read (before tuning).
std::vector<core::TypicalTask> TraceTypicalTasks(const PodTrace& trace,
                                                 const core::Cluster& cluster);

struct FgdRunResult {
  std::string policy;
  uint64_t seed = 0;
  std::vector<std::pair<int, double>> curve;  // (arrived %, allocation %), discretised
  double final_allocation = 0;                // allocation % at the last point (130% arrived)
  double fragmentation_rate = 0;              // FGD's fragment / idle GPU, %, at the end
  double fragment_gpus = 0;                   // FGD's fragment, in GPUs, at the end
  int64_t pods = 0;
  int64_t failed_pods = 0;
  int64_t never_fits = 0;  // failed because no node could ever take them
  int64_t failed_gpu_milli = 0;
  int64_t arrived_milli = 0;
  int64_t allocated_milli = 0;
  int64_t capacity_milli = 0;
  double seconds = 0;  // wall time of the placement loop
};

struct FgdRunOptions {
  std::string policy;
  uint64_t seed = 42;
  double target_ratio = 1.3;
  std::vector<core::TypicalTask> typical_tasks;  // for the policy and the fragmentation metric
  // Optional, for diagnostics (fgd_bench holes): called after each pod with its outcome (the
  // placement is meaningful when placed), and once with the cluster's state at the end.
  std::function<void(const TracePod&, core::Outcome, const core::Placement&)> on_pod;
  std::function<void(const core::ClusterState&)> on_end;
};

[[nodiscard]] absl::StatusOr<FgdRunResult> RunFgdProtocol(const core::Cluster& cluster,
                                                          const PodTrace& trace,
                                                          const FgdRunOptions& options);

// Means over runs of one policy (curve point by point, figures by value).
FgdRunResult MeanOfRuns(const std::vector<FgdRunResult>& runs);

// Python's round(x, digits) for the figures the paper's scripts round (half to even).
double RoundLikePython(double x, int digits);

}  // namespace tessera::sim
