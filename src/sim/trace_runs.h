// Runs a trace under several policies and seeds, in parallel threads (one Placer per run; core
// stays single-threaded), with a progress callback. Means over seeds per policy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "sim/fgd_replay.h"
#include "sim/protocol_bound.h"
#include "sim/timeline.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim {

// Parses "42-51", "42,45,50" or "42" (ranges and lists may mix: "1-3,7").
[[nodiscard]] absl::StatusOr<std::vector<uint64_t>> ParseSeeds(std::string_view text);

struct RunProgress {
  int done = 0;
  int total = 0;
  std::string policy;
  uint64_t seed = 0;
  double elapsed_seconds = 0;
};
using ProgressFn = std::function<void(const RunProgress&)>;

struct PolicyRuns {
  std::string policy;
  std::vector<FgdRunResult> runs;  // in seed order
  FgdRunResult mean;
};

struct TimelinePolicyRuns {
  std::string policy;
  std::vector<TimelineResult> runs;  // in seed order
  TimelineResult mean;
};

// Every (policy, seed) of the FGD protocol, `threads` at a time. Fails on the first error.
[[nodiscard]] absl::StatusOr<std::vector<PolicyRuns>> RunFgdSeeds(
    const core::Cluster& cluster, const PodTrace& trace, const std::vector<std::string>& policies,
    const std::vector<uint64_t>& seeds, double target_ratio, int threads,
    const ProgressFn& progress);

// The FGD protocol's ceiling (protocol_bound.h) for each seed's pod sequence, in seed order,
// `threads` seeds at a time. Fails on the first error.
[[nodiscard]] absl::StatusOr<std::vector<ProtocolCeiling>> FgdCeilingSeeds(
    const core::Cluster& cluster, const PodTrace& trace, const std::vector<uint64_t>& seeds,
    double target_ratio, int threads);

// Every (policy, seed) of the timeline protocol, `threads` at a time, with the speedup, load level
// and classify_waits of `base` (its policy, seed and typical tasks are set per run; the typical
// tasks are the trace's). Fails on the first error.
[[nodiscard]] absl::StatusOr<std::vector<TimelinePolicyRuns>> RunTimelineSeeds(
    const core::Cluster& cluster, const PodTrace& trace, const std::vector<std::string>& policies,
    const std::vector<uint64_t>& seeds, const TimelineOptions& base, int threads,
    const ProgressFn& progress);

}  // namespace tessera::sim
