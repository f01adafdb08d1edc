// Drivers for the churn benchmark: the timeline protocol (sim/timeline.h) at load levels named by
// the peak of the offered GPU demand (sim/timeline_load.h), on every workload of the Alibaba
// trace that has timestamps (bench/run_churn.sh).
//
//   churn_bench table [--workloads default,cpu050,...] [--levels 100,110,120,130]
//                     [--speedup 50000] [--seeds 42-51] [--threads 2]
//                     [--policies random,...,tessera] [--classify 1] [--csv FILE]
//       Per workload and load level, each policy's waits, mean and percentiles of pending time
//       (all pods, pods asking whole GPUs, pods asking two or more), GPU-hours of waiting beside
//       the least any policy must wait, and the allocation at the peak; then tessera against FGD
//       on mean and p99 pending on every (workload, level). With --classify 1 the GPU-hours of
//       waiting of fgd and tessera are also split by what the cluster offered the waiting pods.
//       Markdown on stdout; --csv writes every run.
//   churn_bench speedups [--workloads default,...] [--speedups 50000,100000,200000]
//                        [--seeds 42-51] [--policies fgd,tessera] [--threads 2]
//       The trace's own pods (no load level) at the given compressions, per workload (default:
//       every workload with timestamps): the figures of issue 20's first table, then tessera
//       against FGD on mean and p99 pending. Markdown on stdout.
//   churn_bench elastic [--workload default] [--levels 100,110,120,130] [--seeds 42-51]
//                       [--min-percents 100,50,25] [--threads 2]
//       Elastic gangs on the trace (sim/timeline.h, gang_min_gpus 2): the pods asking two or
//       more whole GPUs as pods, then as gangs of one-GPU members on one node starting at each
//       min percent (100: a rigid gang, the pod itself), under tessera. Markdown on stdout.
//   churn_bench reservations [--workloads default,...|all] [--levels 100,110,120,130] [--seeds
//   42-51]
//                            [--policies tessera] [--reference fgd] [--threads 2] [--after 30]
//                            [--min-gpus 2] [--max 1] [--estimate 3600] [--grace 60]
//                            [--declare 50] [--bucket 60]
//       The timeline protocol with and without reservations with backfill (sim/timeline.h):
//       multi-GPU pods' waits, single-GPU p99, GPU-hours waited, allocation at peak, backfilled
//       pods; the reference policies without reservations. Markdown on stdout.
//   churn_bench waits [--workload default] [--speedup 50000] [--load 0] [--seed 42]
//                     [--policies fgd,tessera]
//       Where one run's waiting comes from: the pods that waited by size, and the free capacity
//       by piece size (and the free GPUs that the free CPU cannot feed) at the first refusals of
//       a whole-GPU pod. Markdown on stdout.
// Progress goes to stderr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/strings.h"
#include "core/policy/fragmentation.h"
#include "sim/fgd_replay.h"
#include "sim/timeline.h"
#include "sim/timeline_load.h"
#include "sim/trace_runs.h"

namespace tessera::bench {
namespace {

const std::string kData = TESSERA_DATA_DIR;
const std::string kTraceDir = kData + "/traces/alibaba-gpu-v2023/";
const std::vector<std::string> kPolicies = {"random",  "dotprod", "gpu-clustering", "gpu-packing",
                                            "bestfit", "fgd",     "tessera"};

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "churn_bench: " << what << "\n";
  std::exit(2);
}

template <typename T>
T OrDie(absl::StatusOr<T> v) {
  if (!v.ok()) Die(std::string(v.status().message()));
  return *std::move(v);
}

using FlagMap = std::map<std::string, std::string>;

FlagMap Flags(int argc, char** argv, int from) {
  FlagMap flags;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) Die(StrCat("bad argument ", a));
    flags[a.substr(2)] = argv[++i];
  }
  return flags;
}

std::string Flag(const FlagMap& flags, const std::string& name, const std::string& fallback) {
  return flags.count(name) ? flags.at(name) : fallback;
}

double NumberFlag(const FlagMap& flags, const std::string& name, double fallback) {
  if (!flags.count(name)) return fallback;
  try {
    return std::stod(flags.at(name));
  } catch (const std::exception&) {
    Die(StrCat("--", name, " ", flags.at(name), ": not a number"));
  }
}

std::vector<std::string> ListFlag(const FlagMap& flags, const std::string& name,
                                  std::vector<std::string> fallback) {
  if (!flags.count(name)) return fallback;
  return absl::StrSplit(flags.at(name), ',');
}

std::vector<double> NumbersFlag(const FlagMap& flags, const std::string& name,
                                const std::vector<double>& fallback) {
  if (!flags.count(name)) return fallback;
  std::vector<double> out;
  for (const std::string& s : ListFlag(flags, name, {})) {
    try {
      out.push_back(std::stod(s));
    } catch (const std::exception&) {
      Die(StrCat("--", name, ": \"", s, "\" is not a number"));
    }
  }
  return out;
}

sim::PodTrace LoadPods(const std::string& workload) {
  return OrDie(sim::ReadAlibabaPods(kTraceDir + "openb_pod_list_" + workload + ".csv"));
}

core::Cluster LoadCluster() {
  return OrDie(core::Cluster::Create(
      OrDie(sim::ReadAlibabaNodes(kTraceDir + "openb_node_list_gpu_node.csv"))));
}

// The workloads whose pod list has creation and deletion times: default first, then by name.
std::vector<std::string> TimedWorkloads() {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(kTraceDir)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "openb_pod_list_", suffix = ".csv";
    if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + suffix.size()) continue;
    std::ifstream in(entry.path());
    std::string header;
    std::getline(in, header);
    if (header.find("creation_time") == std::string::npos) continue;
    out.push_back(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
  }
  std::sort(out.begin(), out.end());
  std::stable_partition(out.begin(), out.end(),
                        [](const std::string& w) { return w == "default"; });
  return out;
}

std::string Machine() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  char load[64] = "?";
  if (f) {
    if (std::fscanf(f, "%63[^\n]", load) != 1) load[0] = '?';
    std::fclose(f);
  }
  return StrCat("load average at the end: ", load);
}

// tessera's result at least as good as FGD's on a figure where lower is better, to the precision
// shown (`half`: half its last digit: 0.005 for a mean shown to 0.01 s, 0.05 for a p99 to 0.1 s).
bool NoWorse(double tessera, double fgd, double half) { return tessera <= fgd + half; }

// One (workload, level or speedup) where both FGD and tessera ran.
struct Versus {
  std::string workload;
  std::string at;  // "100%", "x50000"
  sim::TimelineResult fgd, tessera;
};

// tessera against FGD on the criterion, mean and p99 pending (issue 31): a table, and
// the count of cases won with the ones not won.
void PrintVersus(const std::vector<Versus>& versus, const std::string& what) {
  std::cout << "\n## tessera against FGD" << what
            << "\n\nMean and p99 pending (s) and waited pods, FGD / tessera; a case is won when "
               "tessera is at least as good on both the mean and the p99 (to the precision "
               "shown). GPU-h: GPU-hours of waiting, FGD / tessera / the least any policy must "
               "wait.\n\n"
               "| workload | at | mean | p99 | waited | whole p99 | multi p99 | GPU-h waiting | "
               "at peak | won |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  int won = 0;
  std::vector<std::string> lost;
  for (const Versus& v : versus) {
    const bool ok = NoWorse(v.tessera.pending_mean, v.fgd.pending_mean, 0.005) &&
                    NoWorse(v.tessera.pending_p99, v.fgd.pending_p99, 0.05);
    won += ok;
    if (!ok) lost.push_back(fmt::format("{} at {}", v.workload, v.at));
    std::cout << fmt::format(
        "| {} | {} | {:.2f} / {:.2f} | {:.1f} / {:.1f} | {} / {} | {:.1f} / {:.1f} | "
        "{:.1f} / {:.1f} | {:.2f} / {:.2f} / {:.2f} | {:.2f}% / {:.2f}% | {} |\n",
        v.workload, v.at, v.fgd.pending_mean, v.tessera.pending_mean, v.fgd.pending_p99,
        v.tessera.pending_p99, v.fgd.waited, v.tessera.waited, v.fgd.whole_gpu.p99,
        v.tessera.whole_gpu.p99, v.fgd.multi_gpu.p99, v.tessera.multi_gpu.p99, v.fgd.wait_gpu_hours,
        v.tessera.wait_gpu_hours, v.tessera.wait_gpu_hours_bound, v.fgd.peak_window_allocation,
        v.tessera.peak_window_allocation, ok ? "yes" : "**no**");
  }
  std::cout << "\ntessera is at least as good as FGD on mean and p99 pending in " << won << " of "
            << versus.size() << " cases";
  if (!lost.empty()) {
    std::cout << "; not in:";
    for (size_t i = 0; i < lost.size(); ++i) std::cout << (i ? ", " : " ") << lost[i];
  }
  std::cout << ".\n";
}

int Table(const FlagMap& flags) {
  const std::vector<std::string> workloads = ListFlag(flags, "workloads", TimedWorkloads());
  const std::vector<double> levels = NumbersFlag(flags, "levels", {100, 110, 120, 130});
  const double speedup = NumberFlag(flags, "speedup", 50000);
  const std::vector<uint64_t> seeds = OrDie(sim::ParseSeeds(Flag(flags, "seeds", "42-51")));
  const int threads = static_cast<int>(NumberFlag(flags, "threads", 2));
  const std::vector<std::string> policies = ListFlag(flags, "policies", kPolicies);
  const bool classify = Flag(flags, "classify", "0") == "1";
  const std::string csv_path = Flag(flags, "csv", "");
  const core::Cluster cluster = LoadCluster();
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    if (!csv) Die(StrCat("--csv ", csv_path, ": cannot write"));
    csv << "workload,level,policy,seed,pods,clones,removed,peak_demand_pct,waited,still_waiting,"
           "pending_mean_s,pending_p50_s,pending_p90_s,pending_p99_s,pending_max_s,whole_waited,"
           "whole_p99_s,"
           "multi_waited,multi_p99_s,wait_gpu_hours,wait_gpu_hours_bound,"
           "peak_window_allocation_pct,peak_allocation_pct,repack_gpu_hours,"
           "cross_node_gpu_hours,capacity_gpu_hours\n";
  }
  std::vector<Versus> versus;
  std::cout << "Timeline protocol at load levels: the pod list tuned so that the offered GPU "
               "demand peaks at the level (% of the 6212 GPUs) at speedup "
            << speedup << "; means over seeds " << seeds.front() << ".." << seeds.back()
            << ". Waited: pods that started after waiting; pending times in seconds (mean and "
               "percentiles per seed over the pods that started, then the mean over seeds); "
               "whole: pods asking whole GPUs, multi: two or more GPUs; "
               "GPU-h: GPUs asked x time waited; bound: the least any policy must wait; at peak: "
               "mean allocation while the demand is at least 90% of its peak.\n";
  for (const std::string& w : workloads) {
    const sim::PodTrace trace = LoadPods(w);
    std::cout << "\n## " << w << "\n\n"
              << "| level | policy | pods (copied) | waited | still waiting | mean | p50 | p90 | "
                 "p99 | whole waited | whole p99 | multi waited | multi p99 | GPU-h waiting | "
                 "bound | at peak | max allocation |\n"
                 "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
                 "---:|\n";
    for (double level : levels) {
      // fgd and tessera with the waiting split when asked for (it costs time), the others without.
      std::vector<std::string> split, plain;
      for (const std::string& p : policies) {
        (classify && (p == "fgd" || p == "tessera") ? split : plain).push_back(p);
      }
      sim::TimelineOptions base;
      base.speedup = speedup;
      base.load = level;
      std::vector<sim::TimelinePolicyRuns> runs;
      if (!plain.empty()) {
        runs = OrDie(sim::RunTimelineSeeds(cluster, trace, plain, seeds, base, threads, nullptr));
      }
      if (!split.empty()) {
        base.classify_waits = true;
        for (sim::TimelinePolicyRuns& r :
             OrDie(sim::RunTimelineSeeds(cluster, trace, split, seeds, base, threads, nullptr))) {
          runs.push_back(std::move(r));
        }
      }
      std::stable_sort(runs.begin(), runs.end(), [&](const auto& a, const auto& b) {
        return std::find(policies.begin(), policies.end(), a.policy) <
               std::find(policies.begin(), policies.end(), b.policy);
      });
      Versus v{w, fmt::format("{:.0f}%", level), {}, {}};
      for (const sim::TimelinePolicyRuns& p : runs) {
        const sim::TimelineResult& m = p.mean;
        const bool ours = p.policy == "tessera";
        std::cout << fmt::format(
            "| {:.0f}% | {} | {} ({}) | {} | {} | {}{:.2f}{} | {:.1f} | {:.1f} | {}{:.1f}{} | {} | "
            "{:.1f} | {} | {:.1f} | {:.2f} | {:.2f} | {:.2f}% | {:.2f}% |\n",
            level, ours ? "**tessera**" : p.policy, m.pods, m.clones - m.removed, m.waited,
            m.still_waiting, ours ? "**" : "", m.pending_mean, ours ? "**" : "", m.pending_p50,
            m.pending_p90, ours ? "**" : "", m.pending_p99, ours ? "**" : "", m.whole_gpu.waited,
            m.whole_gpu.p99, m.multi_gpu.waited, m.multi_gpu.p99, m.wait_gpu_hours,
            m.wait_gpu_hours_bound, m.peak_window_allocation, m.peak_allocation);
        if (p.policy == "fgd") v.fgd = m;
        if (ours) v.tessera = m;
        if (csv) {
          for (const sim::TimelineResult& r : p.runs) {
            csv << fmt::format(
                "{},{},{},{},{},{},{},{:.3f},{},{},{:.3f},{:.1f},{:.1f},{:.1f},{:.1f},{},{:.1f},{},"
                "{:.1f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}\n",
                w, level, p.policy, r.seed, r.pods, r.clones, r.removed, r.peak_demand, r.waited,
                r.still_waiting, r.pending_mean, r.pending_p50, r.pending_p90, r.pending_p99,
                r.pending_max, r.whole_gpu.waited, r.whole_gpu.p99, r.multi_gpu.waited,
                r.multi_gpu.p99, r.wait_gpu_hours, r.wait_gpu_hours_bound, r.peak_window_allocation,
                r.peak_allocation, r.wait_split.repack, r.wait_split.cross_node,
                r.wait_split.capacity);
          }
        }
      }
      versus.push_back(v);
      std::cerr << "churn_bench: " << w << " at " << level << "% done\n";
    }
  }
  const bool both = std::find(policies.begin(), policies.end(), "fgd") != policies.end() &&
                    std::find(policies.begin(), policies.end(), "tessera") != policies.end();
  if (!both) {
    std::cout << "\n" << Machine() << "\n";
    return 0;
  }
  PrintVersus(versus, " at load levels");
  if (classify) {
    std::cout << "\n## Where the waiting is (GPU-hours, split by what the cluster offered)\n\n"
                 "At each try of a waiting pod (after every departure): some node could take it "
                 "after rearranging its own pods among its GPUs (repack: a placement loss); only "
                 "a node without its shares could (cross-node); or no node could even then (no "
                 "room: whole-GPU and CPU-only pods fill them).\n\n"
                 "| workload | level | policy | GPU-h waiting | repack | cross-node | no room | "
                 "bound |\n|---|---:|---|---:|---:|---:|---:|---:|\n";
    for (const Versus& v : versus) {
      for (const auto* r : {&v.fgd, &v.tessera}) {
        std::cout << fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n",
                                 v.workload, v.at, r->policy, r->wait_gpu_hours,
                                 r->wait_split.repack, r->wait_split.cross_node,
                                 r->wait_split.capacity, r->wait_gpu_hours_bound);
      }
    }
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

int Speedups(const FlagMap& flags) {
  std::vector<std::string> workloads = ListFlag(flags, "workloads", TimedWorkloads());
  if (flags.count("workload")) workloads = {flags.at("workload")};
  const std::vector<double> speedups = NumbersFlag(flags, "speedups", {50000, 100000, 200000});
  const std::vector<uint64_t> seeds = OrDie(sim::ParseSeeds(Flag(flags, "seeds", "42-51")));
  const int threads = static_cast<int>(NumberFlag(flags, "threads", 2));
  const std::vector<std::string> policies = ListFlag(flags, "policies", {"fgd", "tessera"});
  const core::Cluster cluster = LoadCluster();
  std::vector<Versus> versus;
  std::cout
      << "| workload | speedup | demand peak | policy | waited | mean pending s | p99 pending "
         "s | whole p99 | GPU-h waiting | peak allocation |\n"
         "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& w : workloads) {
    const sim::PodTrace trace = LoadPods(w);
    for (double s : speedups) {
      sim::TimelineOptions base;
      base.speedup = s;
      Versus v{w, fmt::format("x{:.0f}", s), {}, {}};
      for (const sim::TimelinePolicyRuns& p :
           OrDie(sim::RunTimelineSeeds(cluster, trace, policies, seeds, base, threads, nullptr))) {
        const sim::TimelineResult& m = p.mean;
        std::cout << fmt::format(
            "| {} | {:.0f} | {:.1f}% | {} | {} | {:.2f} | {:.1f} | {:.1f} | {:.2f} | {:.2f}% |\n",
            w, s, m.peak_demand, p.policy, m.waited, m.pending_mean, m.pending_p99, m.whole_gpu.p99,
            m.wait_gpu_hours, m.peak_allocation);
        if (p.policy == "fgd") v.fgd = m;
        if (p.policy == "tessera") v.tessera = m;
      }
      versus.push_back(std::move(v));
      std::cerr << "churn_bench: " << w << " at speedup " << s << " done\n";
    }
  }
  const bool both = std::find(policies.begin(), policies.end(), "fgd") != policies.end() &&
                    std::find(policies.begin(), policies.end(), "tessera") != policies.end();
  if (both) PrintVersus(versus, " at the trace's own load");
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

// The timeline protocol with and without defragmentation plans (core/plan/defrag.h): the
// multi-GPU pods' pending times, the allocation, and the moves the plans cost.
int Defrag(const FlagMap& flags) {
  const std::string workload = Flag(flags, "workload", "default");
  const std::vector<double> levels = NumbersFlag(flags, "levels", {100, 120});
  const std::vector<uint64_t> seeds = OrDie(sim::ParseSeeds(Flag(flags, "seeds", "42-44")));
  const int threads = static_cast<int>(NumberFlag(flags, "threads", 2));
  const std::vector<std::string> policies = ListFlag(flags, "policies", {"tessera"});
  const int moves = static_cast<int>(NumberFlag(flags, "moves", 4));
  const int64_t after = static_cast<int64_t>(NumberFlag(flags, "after", 30));
  const int64_t checks = static_cast<int64_t>(NumberFlag(flags, "checks", 2000));
  const core::Cluster cluster = LoadCluster();
  const sim::PodTrace trace = LoadPods(workload);
  std::cout << "| level | policy | defrag | multi-GPU pods waited | multi p50 s | multi p90 s | "
               "multi p99 s | multi max s | whole p99 s | all p99 s | GPU-h waiting | at peak | "
               "mean allocation | searches | plans | pods moved | whole GPUs moved |\n"
               "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
               "---:|\n";
  for (double level : levels) {
    for (bool on : {false, true}) {
      sim::TimelineOptions base;
      base.speedup = NumberFlag(flags, "speedup", 50000);
      base.load = level;
      if (on) {
        base.defrag_max_moves = moves;
        base.defrag_after_s = after;
        base.defrag_max_checks = checks;
      }
      for (const sim::TimelinePolicyRuns& p :
           OrDie(sim::RunTimelineSeeds(cluster, trace, policies, seeds, base, threads, nullptr))) {
        const sim::TimelineResult& m = p.mean;
        std::cout << fmt::format(
            "| {:.0f}% | {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | "
            "{:.2f} | {:.2f}% | {:.2f}% | {} | {} | {} | {} |\n",
            level, p.policy, on ? fmt::format("after {} s, <= {} moves", after, moves) : "off",
            m.multi_gpu.waited, m.multi_gpu.p50, m.multi_gpu.p90, m.multi_gpu.p99, m.multi_gpu.max,
            m.whole_gpu.p99, m.pending_p99, m.wait_gpu_hours, m.peak_window_allocation,
            m.mean_allocation, m.defrag_searches, m.defrag_plans, m.defrag_moves,
            m.defrag_whole_gpus_moved);
      }
      std::cerr << "churn_bench defrag: level " << level << (on ? " with" : " without")
                << " defragmentation done\n";
    }
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

// The timeline protocol with and without reservations with backfill
// (core/reservations/reservations.h): multi-GPU pods' pending times, single-GPU pods' p99, the
// GPU-hours waited, the allocation at the peak, and the pods that backfilled. `--reference`
// policies (fgd) run without reservations beside.
int Reserve(const FlagMap& flags) {
  std::vector<std::string> workloads = ListFlag(flags, "workloads", {"default"});
  if (workloads == std::vector<std::string>{"all"}) workloads = TimedWorkloads();
  const std::vector<double> levels = NumbersFlag(flags, "levels", {100, 110, 120, 130});
  const std::vector<uint64_t> seeds = OrDie(sim::ParseSeeds(Flag(flags, "seeds", "42-51")));
  const int threads = static_cast<int>(NumberFlag(flags, "threads", 2));
  const std::vector<std::string> policies = ListFlag(flags, "policies", {"tessera"});
  const std::vector<std::string> reference = ListFlag(flags, "reference", {});
  core::ReservationOptions on;
  on.max_reservations = static_cast<int>(NumberFlag(flags, "max", 1));
  on.min_gpus = static_cast<int32_t>(NumberFlag(flags, "min-gpus", 2));
  on.after_s = static_cast<int64_t>(NumberFlag(flags, "after", 30));
  on.unknown_runtime_s = static_cast<int64_t>(NumberFlag(flags, "estimate", 3600));
  on.grace_s = static_cast<int64_t>(NumberFlag(flags, "grace", 60));
  const int declare = static_cast<int>(NumberFlag(flags, "declare", 50));
  const int64_t bucket = static_cast<int64_t>(NumberFlag(flags, "bucket", 60));
  const std::string label = fmt::format("after {} s, >= {} GPUs, N {}, {}% declare", on.after_s,
                                        on.min_gpus, on.max_reservations, declare);
  const core::Cluster cluster = LoadCluster();
  std::cout << "| workload | level | policy | reservations | multi waited | multi p50 s | "
               "multi p99 s | multi max s | single p99 s | all p99 s | GPU-h waiting | bound | "
               "at peak | reservations made | backfilled |\n"
               "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& workload : workloads) {
    const sim::PodTrace trace = LoadPods(workload);
    for (double level : levels) {
      struct Run {
        std::vector<std::string> policies;
        bool reserving;
      };
      std::vector<Run> runs = {{policies, false}, {policies, true}};
      if (!reference.empty()) runs.insert(runs.begin(), Run{reference, false});
      for (const Run& run : runs) {
        sim::TimelineOptions base;
        base.speedup = NumberFlag(flags, "speedup", 50000);
        base.load = level;
        base.declare_percent = declare;
        base.declare_bucket_s = bucket;
        if (run.reserving) base.reservations = on;
        for (const sim::TimelinePolicyRuns& p : OrDie(sim::RunTimelineSeeds(
                 cluster, trace, run.policies, seeds, base, threads, nullptr))) {
          const sim::TimelineResult& m = p.mean;
          std::cout << fmt::format(
              "| {} | {:.0f}% | {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | "
              "{:.2f} | {:.2f} | {:.2f}% | {} | {} |\n",
              workload, level, p.policy, run.reserving ? label : "off", m.multi_gpu.waited,
              m.multi_gpu.p50, m.multi_gpu.p99, m.multi_gpu.max, m.single_gpu.p99, m.pending_p99,
              m.wait_gpu_hours, m.wait_gpu_hours_bound, m.peak_window_allocation,
              m.reservations_made, m.backfilled);
        }
        std::cerr << "churn_bench reservations: " << workload << " at " << level
                  << (run.reserving ? " with" : " without") << " reservations done\n";
      }
    }
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

int Elastic(const FlagMap& flags) {
  const std::string workload = Flag(flags, "workload", "default");
  const std::vector<double> levels = NumbersFlag(flags, "levels", {100, 110, 120, 130});
  const std::vector<double> percents = NumbersFlag(flags, "min-percents", {100, 50, 25});
  const std::vector<uint64_t> seeds = OrDie(sim::ParseSeeds(Flag(flags, "seeds", "42-51")));
  const int threads = static_cast<int>(NumberFlag(flags, "threads", 2));
  const core::Cluster cluster = LoadCluster();
  const sim::PodTrace trace = LoadPods(workload);
  std::cout << "| level | multi-GPU pods run as | gangs | wait to start p50 / p99 / mean s | "
               "wait to full size p50 / p99 / max s | never full | members waiting while "
               "running, GPU-h | run time / traced | all pods p99 s | GPU-h waiting | bound | "
               "at peak |\n"
               "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (double level : levels) {
    std::vector<std::pair<std::string, sim::TimelineOptions>> runs;
    sim::TimelineOptions base;
    base.speedup = NumberFlag(flags, "speedup", 50000);
    base.load = level;
    runs.emplace_back("pods", base);
    for (double pct : percents) {
      sim::TimelineOptions o = base;
      o.gang_min_gpus = 2;
      o.gang_min_percent = static_cast<int>(pct);
      runs.emplace_back(
          pct >= 100 ? std::string("rigid gangs") : fmt::format("elastic gangs, min {:.0f}%", pct),
          o);
    }
    for (const auto& [label, options] : runs) {
      const sim::TimelineResult m = OrDie(sim::RunTimelineSeeds(cluster, trace, {"tessera"}, seeds,
                                                                options, threads, nullptr))[0]
                                        .mean;
      const sim::GangStats& g = m.gangs;
      if (options.gang_min_gpus == 0) {
        std::cout << fmt::format(
            "| {:.0f}% | {} | - | {:.1f} / {:.1f} / {:.1f} | - | - | - | - | {:.1f} | {:.2f} | "
            "{:.2f} | {:.2f}% |\n",
            level, label, m.multi_gpu.p50, m.multi_gpu.p99, m.multi_gpu.mean, m.pending_p99,
            m.wait_gpu_hours, m.wait_gpu_hours_bound, m.peak_window_allocation);
      } else {
        std::cout << fmt::format(
            "| {:.0f}% | {} | {} | {:.1f} / {:.1f} / {:.1f} | {:.1f} / {:.1f} / {:.1f} | {} | "
            "{:.2f} | {:.2f} | {:.1f} | {:.2f} | {:.2f} | {:.2f}% |\n",
            level, label, g.gangs, g.start_p50, g.start_p99, g.start_mean, g.full_p50, g.full_p99,
            g.full_max, g.started - g.full, g.member_wait_gpu_hours, g.stretch, m.pending_p99,
            m.wait_gpu_hours, m.wait_gpu_hours_bound, m.peak_window_allocation);
      }
    }
    std::cerr << "churn_bench elastic: level " << level << " done\n";
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

// "1 whole GPU", "810 milli-GPU", "CPU only", with the model constraint: "1 whole GPU (T4)".
std::string SizeName(const sim::TracePod& p) {
  std::string out = p.num_gpu == 0 ? "CPU only"
                    : p.gpu_milli >= 1000
                        ? StrCat(p.num_gpu, " whole GPU", p.num_gpu > 1 ? "s" : "")
                        : StrCat(p.gpu_milli, " milli-GPU");
  if (!p.gpu_models.empty()) out += StrCat(" (", p.gpu_spec(), ")");
  return out;
}

int Waits(const FlagMap& flags) {
  const std::string workload = Flag(flags, "workload", "default");
  const core::Cluster cluster = LoadCluster();
  const sim::PodTrace trace = LoadPods(workload);
  for (const std::string& policy : ListFlag(flags, "policies", {"fgd", "tessera"})) {
    sim::TimelineOptions o;
    o.policy = policy;
    o.seed = static_cast<uint64_t>(NumberFlag(flags, "seed", 42));
    o.speedup = NumberFlag(flags, "speedup", 50000);
    o.load = NumberFlag(flags, "load", 0);
    o.typical_tasks = sim::TraceTypicalTasks(trace, cluster);
    struct Waited {
      int pods = 0;
      double seconds = 0;
      double max = 0;
    };
    std::map<std::string, Waited> by_size;
    std::string first_refusals, holders;
    int whole_refusals = 0;
    std::map<std::string, int> constrained_refusals;
    struct Running {
      int32_t pod;
      int64_t end;
      core::Placement placement;
    };
    std::vector<Running> running;
    std::vector<std::pair<int64_t, int32_t>> waits;  // (wait, pod) of every pod that started
    std::map<std::string, int> opened;  // after waiting: shares that opened a free GPU, whole pods
    o.on_start = [&](int32_t i, int64_t arrival, int64_t now, const core::Placement& pl,
                     const core::ClusterState& st) {
      waits.emplace_back(now - arrival, i);
      if (now > arrival && !pl.gpus.empty()) {
        const sim::TracePod& p = trace.pods[i];
        if (p.gpu_milli >= 1000) {
          opened["whole pods"] += p.num_gpu;
        } else if (st.gpu(pl.node, pl.gpus.front().gpu).grants == 1) {
          opened[StrCat("shares of ", p.gpu_milli)] += 1;
        }
      }
      const std::optional<int64_t> run = sim::TimelineClock::RunTime(trace.pods[i]);
      running.push_back(Running{i, run ? now + *run : INT64_MAX, pl});
      if (now <= arrival) return;
      Waited& w = by_size[SizeName(trace.pods[i])];
      ++w.pods;
      w.seconds += static_cast<double>(now - arrival);
      w.max = std::max(w.max, static_cast<double>(now - arrival));
    };
    o.on_refused = [&](int32_t i, int64_t now, const core::ClusterState& st) {
      const sim::TracePod& p = trace.pods[i];
      if (!p.gpu_models.empty() && p.num_gpu == 1 && p.gpu_milli >= 1000 &&
          ++constrained_refusals[p.gpu_spec()] <= 2) {
        // Who holds the GPUs this pod may use: milli-GPU by the holder's ask and constraint.
        const core::ModelSet allowed = cluster.ResolveModels(p.gpu_models);
        std::map<std::string, double> by;
        double free = 0;
        for (int n = 0; n < st.node_count(); ++n) {
          const uint64_t mask = cluster.ModelMask(core::NodeId(n), allowed);
          for (uint64_t a = mask; a; a &= a - 1)
            free += core::GpuMilliLeft(st, core::NodeId(n), __builtin_ctzll(a)) / 1000.0;
        }
        running.erase(std::remove_if(running.begin(), running.end(),
                                     [&](const Running& r) { return r.end <= now; }),
                      running.end());
        for (const Running& r : running) {
          const uint64_t mask = cluster.ModelMask(r.placement.node, allowed);
          for (const core::GpuGrant& g : r.placement.gpus) {
            if (!(mask & (1ULL << g.gpu))) continue;
            const sim::TracePod& h = trace.pods[r.pod];
            const std::string who =
                StrCat(h.gpu_milli >= 1000 ? "whole" : "share", ", ",
                       h.gpu_models.empty()           ? std::string("any model")
                       : h.gpu_models == p.gpu_models ? std::string("same constraint")
                                                      : StrCat("models ", h.gpu_spec()));
            by[who] += g.exclusive ? 1.0 : h.gpu_milli / 1000.0;
          }
        }
        holders += fmt::format("\nAt {} s a 1-GPU pod for {} waits; its models' GPUs: free {:.1f};",
                               now, p.gpu_spec(), free);
        for (const auto& [who, v] : by) holders += fmt::format(" {}: {:.1f};", who, v);
        holders += "\n";
      }
      if (p.num_gpu != 1 || p.gpu_milli < 1000 || ++whole_refusals > 3) return;
      std::map<int, double> pieces;  // by 100-milli bucket, GPUs' worth
      int free = 0, starved = 0;
      double total = 0;
      for (int n = 0; n < st.node_count(); ++n) {
        const core::NodeId id(n);
        int whole = 0;
        for (int g = 0; g < cluster.node(id).gpu_count(); ++g) {
          const int32_t left = core::GpuMilliLeft(st, id, g);
          total += left / 1000.0;
          if (left >= 1000) {
            ++whole;
          } else if (left > 0) {
            pieces[left / 100 * 100] += left / 1000.0;
          }
        }
        free += whole;
        if (st.free_cpu_milli(id) < p.cpu_milli) starved += whole;
      }
      first_refusals += fmt::format("| {} | {} | {:.2f}% | {:.1f} | {} | {} |", now, p.cpu_milli,
                                    100.0 * static_cast<double>(st.allocated_compute_milli()) /
                                        (1000.0 * cluster.total_gpus()),
                                    total, free, starved);
      for (int b = 0; b < 1000; b += 100) first_refusals += fmt::format(" {:.1f} |", pieces[b]);
      first_refusals += "\n";
    };
    const sim::TimelineResult r = OrDie(sim::RunTimeline(cluster, trace, o));
    std::cout << fmt::format(
        "## {} on {}, speedup {}, load {}, seed {}: {} pods waited, p99 pending {:.1f} s, peak "
        "allocation {:.2f}%\n\n| pod asks | waited | mean wait s | max wait s |\n"
        "|---|---:|---:|---:|\n",
        policy, workload, o.speedup, o.load > 0 ? fmt::format("{:.0f}%", o.load) : "none", o.seed,
        r.waited, r.pending_p99, r.peak_allocation);
    for (const auto& [size, w] : by_size) {
      std::cout << fmt::format("| {} | {} | {:.1f} | {:.0f} |\n", size, w.pods, w.seconds / w.pods,
                               w.max);
    }
    // The pods at or above the 99th percentile of pending time, by size.
    std::sort(waits.rbegin(), waits.rend());
    std::map<std::string, int> tail;
    const size_t top = std::max<size_t>(1, waits.size() / 100);
    for (size_t k = 0; k < top && k < waits.size(); ++k)
      ++tail[SizeName(trace.pods[waits[k].second])];
    std::cout << "\nFree GPUs taken by pods that had waited:";
    for (const auto& [who, c] : opened) std::cout << " " << who << ": " << c << ";";
    std::cout << "\nThe " << top << " longest waits (the 1% tail) by pod size:";
    for (const auto& [size, c] : tail) std::cout << " " << size << ": " << c << ";";
    std::cout << "\n";
    std::cout << "\nThe cluster at the first three refusals of a one-GPU pod (free capacity in "
                 "GPUs' worth; pieces: free milli-GPU on partly used GPUs, by size):\n\n"
                 "| time s | pod's CPU (milli) | allocation | free GPUs' worth | free whole GPUs | "
                 "of them on nodes without the pod's CPU | pieces 0-99 | 100-199 | 200-299 | "
                 "300-399 | 400-499 | 500-599 | 600-699 | 700-799 | 800-899 | 900-999 |\n"
                 "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
                 "\n"
              << first_refusals << holders << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  const char* usage =
      "usage: churn_bench table|speedups|waits|defrag|elastic|reservations [--flag value ...]";
  if (argc < 2) tessera::bench::Die(usage);
  const std::string mode = argv[1];
  auto flags = tessera::bench::Flags(argc, argv, 2);
  if (mode == "table") return tessera::bench::Table(flags);
  if (mode == "speedups") return tessera::bench::Speedups(flags);
  if (mode == "waits") return tessera::bench::Waits(flags);
  if (mode == "defrag") return tessera::bench::Defrag(flags);
  if (mode == "elastic") return tessera::bench::Elastic(flags);
  if (mode == "reservations") return tessera::bench::Reserve(flags);
  tessera::bench::Die(usage);
}
