#include "cli/simulate_trace.h"

#include <chrono>
#include <iostream>

#include "common/status.h"
#include "common/strings.h"
#include "core/model/cluster.h"
#include "sim/trace/alibaba.h"
#include "sim/trace_report.h"
#include "sim/trace_runs.h"

namespace tessera::cli {

void AddTraceFlags(CLI::App* cmd, TraceOptions* o) {
  cmd->add_option("--nodes", o->nodes_file,
                  "Trace mode: node list CSV of the Alibaba GPU trace (sn,cpu_milli,memory_mib,"
                  "gpu,model), e.g. openb_node_list_gpu_node.csv. Needs --trace.")
      ->check(CLI::ExistingFile);
  cmd->add_option("--trace", o->trace_file,
                  "Trace mode: pod list CSV of the Alibaba GPU trace (name,cpu_milli,memory_mib,"
                  "num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                  "scheduled_time]). Needs --nodes.")
      ->check(CLI::ExistingFile);
  cmd->add_option("--protocol", o->protocol,
                  "Trace mode: 'fgd' replays the FGD paper's protocol (pods sampled with "
                  "replacement up to --tune-ratio x GPU capacity, shuffled by the seed, placed one "
                  "at a time, no departures, failures final; reports GPU allocation against "
                  "arrived demand). 'timeline' replays the trace's creation and deletion times "
                  "with a waiting queue (reports pending times and allocation over time).")
      ->check(CLI::IsMember({"fgd", "timeline"}))
      ->capture_default_str();
  cmd->add_option(
         "--seeds", o->seeds,
         "Trace mode: seeds, as a range (42-51), a list (42,43) or both; results are means "
         "over them")
      ->capture_default_str();
  cmd->add_option("--report", o->report_dir,
                  "Trace mode: also write CSV curves, per-seed results and charts (PNG, drawn by "
                  "gnuplot) into this directory");
  cmd->add_option("--threads", o->threads,
                  "Trace mode: runs (policy x seed), and the seeds' --ceiling proofs, in parallel")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--tune-ratio", o->tune_ratio,
                  "Trace mode, fgd protocol: total GPU demand as a multiple of GPU capacity")
      ->check(CLI::Range(0.01, 100.0))
      ->capture_default_str();
  cmd->add_option("--speedup", o->speedup,
                  "Trace mode, timeline protocol: divide the gaps between arrivals by this (run "
                  "times kept). The public trace is a sample of five months: at 1 it keeps about "
                  "0.2% of the GPUs busy; 10000 and more fill the cluster (bench/run_churn.sh "
                  "uses 50000 with --load)")
      ->check(CLI::Range(1e-6, 1e12))
      ->capture_default_str();
  cmd->add_option("--load", o->load,
                  "Trace mode, timeline protocol: tune the pod list so that the GPU demand it "
                  "offers (what would run were there room for all) peaks at this percentage of "
                  "the GPUs at the --speedup given: pods drawn by the seed are copied (with their "
                  "times) or left out. The public trace asks for at most 98% of the GPUs in all, "
                  "so levels above that need copies. 0 replays the trace's pods as they are")
      ->check(CLI::Range(0.0, 10000.0))
      ->capture_default_str();
  cmd->add_flag("--classify-waits", o->classify_waits,
                "Trace mode, timeline protocol: split each policy's GPU-hours of waiting by what "
                "the cluster offered the waiting pod (room after rearranging one node's pods, "
                "only on a node without its shares, or none); slower");
  cmd->add_option("--elastic-gangs", o->elastic_gangs,
                  "Trace mode, timeline protocol: run each pod asking 2 or more whole GPUs as an "
                  "elastic gang of one-GPU members on one node that starts once this percentage "
                  "of them fit together and grows as GPUs there free up, its work (GPUs x run "
                  "time) done at the pace of the members running (100: a rigid gang; 0: off)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--reservations", o->reservations,
                  "Trace mode, timeline protocol: hold room for at most this many waiting big "
                  "pods at once (core/reservations/reservations.h: the pods asking "
                  "--reserve-min-gpus whole GPUs that waited --reserve-after s, in the queue's "
                  "order, each where its GPUs are expected to free first); other pods take held "
                  "room only if they declare a run time ending before it is needed (backfill). "
                  "0: off")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--reserve-after", o->reserve_after,
                  "Trace mode, --reservations: seconds a big pod waits before room is held")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--reserve-min-gpus", o->reserve_min_gpus,
                  "Trace mode, --reservations: whole GPUs a pod asks to get a reservation")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--runtime-estimate", o->runtime_estimate,
                  "Trace mode, --reservations: seconds a pod that declares no run time is "
                  "expected to run (one that ran longer: this long from now)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--declare-percent", o->declare_percent,
                  "Trace mode, --reservations: the model of declared run times: this percentage "
                  "of the pods (drawn by the seed) declare their traced run time rounded up to "
                  "--declare-bucket s; only they can backfill")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_option("--declare-bucket", o->declare_bucket,
                  "Trace mode, --reservations: declared run times are multiples of this (s)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_flag("--ceiling", o->ceiling,
                "Trace mode, fgd protocol: also prove how much any policy could allocate on the "
                "same pod sequences (a ceiling: no scheduler that places every pod that fits can "
                "do better; about a second per seed on the full trace)");
}

bool TraceRequested(const TraceOptions& o) {
  return !o.trace_file.empty() || !o.nodes_file.empty();
}

std::string DefaultTracePolicies() {
  return "random,dotprod,gpu-clustering,gpu-packing,bestfit,fgd,tessera";
}

absl::Status RunTrace(const TraceOptions& o, const std::vector<std::string>& policies, bool json) {
  if (o.nodes_file.empty() || o.trace_file.empty()) {
    return absl::InvalidArgumentError("--nodes and --trace go together (give both)");
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<uint64_t> seeds, sim::ParseSeeds(o.seeds));
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::NodeSpec> nodes, sim::ReadAlibabaNodes(o.nodes_file));
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(std::move(nodes));
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(StrCat(o.nodes_file, ": ", cluster.status().message()));
  }
  TESSERA_ASSIGN_OR_RETURN(sim::PodTrace trace, sim::ReadAlibabaPods(o.trace_file));
  if (cluster->total_gpus() == 0) {
    return absl::InvalidArgumentError(
        StrCat(o.nodes_file, ": no GPUs in the cluster; GPU allocation ratios need some"));
  }
  sim::TraceRunInfo info;
  info.nodes_file = o.nodes_file;
  info.trace_file = o.trace_file;
  info.seeds = seeds;
  info.capacity_gpus = cluster->total_gpus();
  info.speedup = o.speedup;
  info.load = o.load;
  info.classify_waits = o.classify_waits;
  info.gang_min_percent = o.elastic_gangs;
  info.max_reservations = o.protocol == "timeline" ? o.reservations : 0;

  // Progress on stderr, at most every two seconds, once a run has lasted two seconds.
  const auto start = std::chrono::steady_clock::now();
  double last_report = 0;
  auto progress = [&](const sim::RunProgress& p) {
    if (p.elapsed_seconds < 2 || (p.elapsed_seconds - last_report < 2 && p.done < p.total)) return;
    if (p.done == p.total && last_report == 0) return;  // finished before the first report
    last_report = p.elapsed_seconds;
    const double eta = p.elapsed_seconds / p.done * (p.total - p.done);
    std::cerr << fmt::format(
        "tessera simulate: {}/{} runs done ({} seed {}), {:.0f} s, about "
        "{:.0f} s left\n",
        p.done, p.total, p.policy, p.seed, p.elapsed_seconds, eta);
  };
  (void)start;

  if (o.protocol == "timeline") {
    if (o.ceiling) {
      return absl::InvalidArgumentError(
          "--ceiling: the ceiling is proven for the fgd protocol only (no departures); the "
          "timeline reports its own bound, on the GPU-hours of waiting");
    }
    if (!trace.has_times) {
      return absl::InvalidArgumentError(
          StrCat(o.trace_file,
                 ": the timeline protocol needs creation_time and deletion_time "
                 "columns (this file has only the first five; use --protocol fgd)"));
    }
    sim::TimelineOptions base;
    base.speedup = o.speedup;
    base.load = o.load;
    base.classify_waits = o.classify_waits;
    if (o.elastic_gangs > 0) {
      base.gang_min_gpus = 2;
      base.gang_min_percent = o.elastic_gangs;
    }
    if (o.reservations > 0) {
      base.reservations.max_reservations = o.reservations;
      base.reservations.after_s = o.reserve_after;
      base.reservations.min_gpus = o.reserve_min_gpus;
      base.reservations.unknown_runtime_s = o.runtime_estimate;
      base.declare_percent = o.declare_percent;
      base.declare_bucket_s = o.declare_bucket;
    }
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<sim::TimelinePolicyRuns> results,
        sim::RunTimelineSeeds(*cluster, trace, policies, seeds, base, o.threads, progress));
    if (json) {
      std::cout << sim::TimelineJson(info, results).dump(2) << "\n";
    } else {
      std::cout << sim::TimelineTable(info, results);
    }
    if (!o.report_dir.empty()) {
      absl::Status s = sim::WriteTimelineReport(o.report_dir, info, results);
      if (!s.ok()) return absl::InternalError(StrCat("--report: ", s.message()));
      if (!json) std::cout << "\nreport: " << o.report_dir << "\n";
    }
    return absl::OkStatus();
  }
  if (o.load != 0 || o.classify_waits || o.elastic_gangs != 0 || o.reservations != 0) {
    return absl::InvalidArgumentError(
        "--load, --classify-waits, --elastic-gangs and --reservations are for --protocol "
        "timeline (the fgd "
        "protocol tunes its pod list with --tune-ratio and has no departures to grow into)");
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<sim::PolicyRuns> results,
      sim::RunFgdSeeds(*cluster, trace, policies, seeds, o.tune_ratio, o.threads, progress));
  if (o.ceiling) {
    std::cerr << "tessera simulate: proving the ceiling for " << seeds.size() << " seed(s)\n";
    TESSERA_ASSIGN_OR_RETURN(info.ceilings,
                             sim::FgdCeilingSeeds(*cluster, trace, seeds, o.tune_ratio, o.threads));
  }
  if (json) {
    std::cout << sim::FgdJson(info, results).dump(2) << "\n";
  } else {
    std::cout << sim::FgdTable(info, results);
  }
  if (!o.report_dir.empty()) {
    absl::Status s = sim::WriteFgdReport(o.report_dir, info, results);
    if (!s.ok()) return absl::InternalError(StrCat("--report: ", s.message()));
    if (!json) std::cout << "\nreport: " << o.report_dir << "\n";
  }
  return absl::OkStatus();
}

}  // namespace tessera::cli
