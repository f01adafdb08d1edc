// `tessera simulate --nodes NODES.csv --trace PODS.csv ...`: trace replay (the Alibaba GPU trace)
// under the FGD paper's protocol or by the trace's own clock. The flags are registered on the
// simulate subcommand; simulate.cc hands over when --trace is given.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace tessera::cli {

struct TraceOptions {
  std::string nodes_file;
  std::string trace_file;
  std::string protocol = "fgd";
  std::string seeds = "42-51";
  std::string report_dir;
  int threads = 1;
  double tune_ratio = 1.3;
  double speedup = 1;
  double load = 0;
  bool classify_waits = false;
  int elastic_gangs = 0;  // timeline: the min percent of elastic gangs (0: pods stay pods)
  // timeline: reservations with backfill (sim/timeline.h); 0 reservations: off
  int reservations = 0;
  int64_t reserve_after = 30;
  int reserve_min_gpus = 2;
  int64_t runtime_estimate = 3600;
  int declare_percent = 50;
  int64_t declare_bucket = 60;
  bool ceiling = false;
};

// Registers --nodes, --trace, --protocol, --seeds, --report, --threads, --tune-ratio, --speedup,
// --load, --classify-waits, --ceiling.
void AddTraceFlags(CLI::App* simulate, TraceOptions* options);
// Whether the trace mode was asked for (--trace or --nodes given).
bool TraceRequested(const TraceOptions& options);
// The policies when --policy is not given in trace mode: the paper's six and tessera.
std::string DefaultTracePolicies();
// Runs it, printing a table (or JSON) on stdout and progress on stderr. Bad input is
// InvalidArgument (exit status 2); a failure to draw charts is reported after the results.
[[nodiscard]] absl::Status RunTrace(const TraceOptions& options,
                                    const std::vector<std::string>& policies, bool json);

}  // namespace tessera::cli
