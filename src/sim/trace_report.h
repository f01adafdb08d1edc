// What a trace replay reports: a table for people, one JSON document for programs, and a report
// directory (CSV curves and charts drawn by gnuplot, run as a separate process).
//
// FGD protocol JSON (means over the seeds):
//   {"protocol": "fgd", "nodes": F, "trace": F, "seeds": [...], "capacity_gpus": N,
//    "results": [{"policy": P, "final_allocation_ratio": PCT_AT_130,
//                 "curve": [[ARRIVED_PCT, ALLOC_PCT], ...], "fragmentation_rate": PCT,
//                 "failed_pods": N, "seconds": WALL}, ...],
//    "ceiling": {"allocation_ratio": PCT, "min_unallocated_gpus": N,       (when computed)
//                "per_seed": [{"seed": S, "allocation_ratio": PCT, "min_unallocated_gpus": N,
//                              "reference": ASK}, ...]}}
// Timeline JSON:
//   {"protocol": "timeline", ..., "speedup": X,
//    "results": [{"policy": P, "pods": N, "started": N, "never_fit": N, "still_waiting": N,
//                 "pending_seconds": {"p50": S, "p90": S, "p99": S, "max": S, "mean": S},
//                 "mean_allocation_ratio": PCT, "peak_allocation_ratio": PCT,
//                 "offered_load": PCT, "curve": [[HOURS, ALLOC_PCT], ...], "seconds": WALL}]}
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "sim/trace_runs.h"

namespace tessera::sim {

struct TraceRunInfo {
  std::string nodes_file;
  std::string trace_file;
  std::vector<uint64_t> seeds;
  int capacity_gpus = 0;
  double speedup = 1;           // timeline only
  double load = 0;              // timeline only: the load level asked (0: the trace as it is)
  bool classify_waits = false;  // timeline only: the runs split their waiting (wait_split)
  int gang_min_percent = 0;     // timeline only: pods of 2+ whole GPUs ran as gangs (0: no)
  int max_reservations = 0;     // timeline only: reservations with backfill were on (0: no)
  // FGD protocol, when asked for: the ceiling of each of `seeds` (FgdCeilingSeeds), shown beside
  // the results.
  std::vector<ProtocolCeiling> ceilings;
};

nlohmann::json FgdJson(const TraceRunInfo& info, const std::vector<PolicyRuns>& results);
nlohmann::json TimelineJson(const TraceRunInfo& info,
                            const std::vector<TimelinePolicyRuns>& results);

std::string FgdTable(const TraceRunInfo& info, const std::vector<PolicyRuns>& results);
std::string TimelineTable(const TraceRunInfo& info, const std::vector<TimelinePolicyRuns>& results);

// Writes into `dir` (created if missing): for the FGD protocol allocation_curve.csv (arrived %,
// one column per policy), summary.csv, runs.csv (every seed), allocation.png (the curves, 0-130%)
// and allocation_zoom.png (the saturated end, with the ceiling as a line when there is one, and
// ceiling.csv); for the timeline summary.csv, runs.csv,
// allocation_over_time.csv, allocation_over_time.png and pending_time.png. Each chart comes with
// the gnuplot script that drew it. If gnuplot cannot run, the data files are still written and
// the error says so.
[[nodiscard]] absl::Status WriteFgdReport(const std::string& dir, const TraceRunInfo& info,
                                          const std::vector<PolicyRuns>& results);
[[nodiscard]] absl::Status WriteTimelineReport(const std::string& dir, const TraceRunInfo& info,
                                               const std::vector<TimelinePolicyRuns>& results);

// Runs `gnuplot script` in `dir` and waits for it.
[[nodiscard]] absl::Status RunGnuplot(const std::string& dir, const std::string& script);

}  // namespace tessera::sim
