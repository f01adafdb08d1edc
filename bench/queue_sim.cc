// The simulator's queues on the Alibaba trace (issue 18): the timeline protocol with queues from
// the qos column (sim/queue_timeline.h: LS, Guaranteed, Burstable -> latency; BE -> batch; each
// deserves half of the GPUs), with reclaim and priority preemption and without, side by side at
// the same arrivals. Prints markdown: fairness (Jain's index of allocation / fair share while both
// queues want GPUs), per-queue pending-time percentiles and allocation against deserved share,
// and evictions per hour, and each queue's allocation against its fair share over time.
//
//   bench/run_queue_sim.sh   (build/release/bench/queue_sim [--nodes N] [trace] [speedups...])
//
// --nodes N replays on N of the trace's nodes, spread evenly over its node list (every
// (total/N)-th, so that the GPU models keep their mix): the trace's own 1,213 nodes are so many
// that its queues rarely want GPUs at the same time.
//
//   build/release/bench/queue_sim --teams [--nodes 40] [--days 3] [--seed 42]
//
// Fair share that remembers (issue 31): two teams of one priority, each deserving half of the
// GPUs, on the replay's own clock (no compression). `steady` submits jobs all day, at a rate
// that keeps 45% of the GPUs busy; `burst` submits, every day at 08:00, jobs worth four hours of
// the whole cluster, and nothing else. Jobs are drawn (seeded) from the trace's GPU pods that ran
// 10 minutes to 8 hours, with their shapes and run times. Run with the usage half-life 0 (order
// by what the teams hold now), 1 hour and 1 day, without and with reclaim: the steady team's
// waiting in the 12 hours from each burst, Jain's index over sliding 6-hour windows, and per hour
// of the second day what each team holds and how long its pods waited.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/random.h"
#include "sim/queue_timeline.h"
#include "sim/trace/alibaba.h"

namespace tessera::bench {
namespace {

const std::string kTraceDir = std::string(TESSERA_DATA_DIR) + "/traces/alibaba-gpu-v2023/";

template <typename T>
T OrDie(absl::StatusOr<T> v) {
  if (!v.ok()) {
    std::cerr << "queue_sim: " << v.status().message() << "\n";
    std::exit(2);
  }
  return *std::move(v);
}

// The nodes of the trace, or `wanted` of them spread evenly over its node list (0: all).
std::vector<core::NodeSpec> TraceNodes(int wanted) {
  std::vector<core::NodeSpec> all =
      OrDie(sim::ReadAlibabaNodes(kTraceDir + "openb_node_list_gpu_node.csv"));
  if (wanted > static_cast<int>(all.size())) {
    std::fprintf(stderr, "queue_sim: --nodes %d: the trace has only %zu nodes\n", wanted,
                 all.size());
    std::exit(2);
  }
  if (wanted == 0) return all;
  std::vector<core::NodeSpec> some;
  for (int k = 0; k < wanted; ++k) {
    some.push_back(all[static_cast<size_t>(k) * all.size() / static_cast<size_t>(wanted)]);
  }
  return some;
}

// The two teams' jobs (see the file comment), on the clock of the replay: seconds from 0.
sim::PodTrace TeamsTrace(const sim::PodTrace& source, double gpus, int days, uint64_t seed) {
  constexpr int64_t kHour = 3600, kDay = 24 * kHour;
  std::vector<const sim::TracePod*> jobs;
  double mean_gpu_seconds = 0;
  for (const sim::TracePod& p : source.pods) {
    if (p.num_gpu == 0 || !p.creation_time || !p.deletion_time) continue;
    const int64_t run = *p.deletion_time - p.scheduled_time.value_or(*p.creation_time);
    if (run < 10 * 60 || run > 8 * kHour) continue;
    jobs.push_back(&p);
    mean_gpu_seconds +=
        static_cast<double>(p.total_gpu_milli()) / 1000.0 * static_cast<double>(run);
  }
  mean_gpu_seconds /= static_cast<double>(jobs.size());
  Random rng(seed);
  sim::PodTrace out;
  out.source = "teams";
  out.has_times = true;
  auto add = [&](const std::string& team, int64_t at) {
    const sim::TracePod& p = *jobs[rng.Uniform(jobs.size())];
    sim::TracePod q = p;
    const int64_t run = *p.deletion_time - p.scheduled_time.value_or(*p.creation_time);
    q.name = team + "-" + std::to_string(out.pods.size());
    q.qos = team;
    q.creation_time = at;
    q.scheduled_time = at;
    q.deletion_time = at + run;
    q.gpu_models.clear();  // any model: the teams compete for all the GPUs
    out.pods.push_back(std::move(q));
    return static_cast<double>(p.total_gpu_milli()) / 1000.0 * static_cast<double>(run);
  };
  // steady: Poisson arrivals keeping 45% of the GPUs busy, from 0 to the last day's end.
  const double rate = 0.45 * gpus / mean_gpu_seconds;  // jobs per second
  for (double t = 0; t < static_cast<double>(days * kDay);) {
    add("steady", static_cast<int64_t>(t));
    t += -std::log(1.0 - rng.UniformDouble()) / rate;
  }
  add("steady", days * kDay);  // the arrival window ends with the last day
  // burst: at 08:00 each day, jobs worth four hours of every GPU, submitted over a minute.
  for (int d = 0; d < days; ++d) {
    double worth = 0;
    for (int k = 0; worth < 4.0 * kHour * gpus; ++k) {
      worth += add("burst", d * kDay + 8 * kHour + k % 60);
    }
  }
  return out;
}

int Teams(int nodes_wanted, int days, uint64_t seed) {
  core::Cluster cluster = OrDie(core::Cluster::Create(TraceNodes(nodes_wanted)));
  const sim::PodTrace source =
      OrDie(sim::ReadAlibabaPods(kTraceDir + "openb_pod_list_default.csv"));
  const sim::PodTrace trace =
      TeamsTrace(source, static_cast<double>(cluster.total_gpus()), days, seed);
  int64_t steady = 0;
  for (const sim::TracePod& p : trace.pods) steady += p.qos == "steady";
  std::printf(
      "cluster %d nodes, %d GPUs; %d days; %lld steady jobs, %lld burst jobs (seed %llu); "
      "policy tessera\n\n",
      cluster.live_count(), cluster.total_gpus(), days, static_cast<long long>(steady),
      static_cast<long long>(trace.pods.size() - steady), static_cast<unsigned long long>(seed));
  std::printf(
      "| half-life | reclaim | steady: pending after a burst, mean / worst hour's mean s (pods) | "
      "steady: all, "
      "mean / p99 s | burst: all, mean / p99 s | Jain, 6 h windows: min / mean | Jain while "
      "both want GPUs | allocation %% |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
  struct Run {
    std::string label;
    sim::QueueTimelineResult r;
  };
  std::vector<Run> runs;
  for (bool preempt : {false, true}) {
    for (int64_t h : {int64_t{0}, int64_t{3600}, int64_t{86400}}) {
      sim::QueueTimelineOptions o;
      o.preempt = preempt;
      o.queues = {{"steady", 50, {"steady"}}, {"burst", 50, {"burst"}}};
      o.usage_half_life_s = h;
      o.periods = days * 24;  // an hour each
      o.jain_window_s = 6 * 3600;
      sim::QueueTimelineResult r = OrDie(sim::RunQueueTimeline(cluster, trace, o));
      // The steady team's pods that began to wait in the 12 hours from each 08:00: their mean
      // pending time, and the worst hour's mean.
      double sum = 0, worst = 0;
      int64_t pods = 0;
      for (int d = 0; d < days; ++d) {
        for (int hour = 8; hour < 20; ++hour) {
          const sim::QueueTimelinePeriod& p = r.periods[d * 24 + hour];
          sum += p.pending_mean_s[0] * static_cast<double>(p.started[0]);
          pods += p.started[0];
          worst = std::max(worst, p.pending_mean_s[0]);
        }
      }
      const std::string label = h == 0 ? "0" : h == 3600 ? "1 h" : "1 day";
      std::printf(
          "| %s | %s | %.0f / %.0f (%lld) | %.0f / %.0f | %.0f / %.0f | %.3f / %.3f | %.3f | "
          "%.1f |\n",
          label.c_str(), preempt ? "on" : "off", pods > 0 ? sum / static_cast<double>(pods) : 0.0,
          worst, static_cast<long long>(pods), r.queues[0].pending_mean, r.queues[0].pending_p99,
          r.queues[1].pending_mean, r.queues[1].pending_p99, r.jain_window_min, r.jain_window_mean,
          r.jain, r.mean_allocation);
      std::fprintf(stderr, "teams: half-life %s, reclaim %d: %.1f s\n", label.c_str(), preempt,
                   r.seconds);
      if (!preempt) runs.push_back(Run{label, std::move(r)});
    }
  }
  // The second day hour by hour, without reclaim: GPUs each team holds, and the mean pending
  // time of the steady team's pods that began to wait in the hour.
  const int d = days >= 2 ? 1 : 0;
  std::printf(
      "\nDay %d hour by hour (reclaim off): GPUs held by steady / burst, and the steady "
      "team's mean pending s, per half-life\n\n| hour |",
      d + 1);
  for (const Run& run : runs) std::printf(" %s |", run.label.c_str());
  std::printf("\n|---|");
  for (size_t k = 0; k < runs.size(); ++k) std::printf("---:|");
  std::printf("\n");
  for (int hour = 0; hour < 24; ++hour) {
    std::printf("| %02d |", hour);
    for (const Run& run : runs) {
      const sim::QueueTimelinePeriod& p = run.r.periods[d * 24 + hour];
      std::printf(" %.0f / %.0f, %.0f s |", p.allocated_gpus[0], p.allocated_gpus[1],
                  p.pending_mean_s[0]);
    }
    std::printf("\n");
  }
  return 0;
}

constexpr char kUsage[] =
    "usage: queue_sim [--nodes N] [trace] [speedups...]\n"
    "  trace      a pod list of " TESSERA_DATA_DIR
    "/traces/alibaba-gpu-v2023 (default openb_pod_list_default.csv)\n"
    "  speedups   arrival gaps are divided by each (default 30000 100000)\n"
    "  --nodes N  replay on N of the trace's nodes, spread evenly over its node list (default: "
    "all)\n"
    "usage: queue_sim --teams [--nodes 40] [--days 3] [--seed 42]\n"
    "  a steady and a bursty team under usage half-lives 0, 1 h and 1 day (see the source)\n";

int Main(int argc, char** argv) {
  std::string trace_name = "openb_pod_list_default.csv";
  std::vector<double> speedups;
  int nodes_wanted = 0;
  bool have_trace = false;
  bool teams = false;
  int days = 3;
  uint64_t seed = 42;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--teams") {
      teams = true;
      continue;
    }
    if ((a == "--days" || a == "--seed") && i + 1 < argc) {
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || v < (a == "--days" ? 1 : 0)) {
        std::fprintf(stderr, "queue_sim: %s wants a whole number, not '%s'\n%s", a.c_str(), argv[i],
                     kUsage);
        return 2;
      }
      if (a == "--days") {
        days = static_cast<int>(v);
      } else {
        seed = static_cast<uint64_t>(v);
      }
      continue;
    }
    if (a == "--nodes" || a.rfind("--nodes=", 0) == 0) {
      std::string v = a == "--nodes" ? (i + 1 < argc ? argv[++i] : "") : a.substr(8);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1) {
        std::fprintf(stderr, "queue_sim: --nodes wants a positive node count, not '%s'\n%s",
                     v.c_str(), kUsage);
        return 2;
      }
      nodes_wanted = static_cast<int>(n);
      continue;
    }
    if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "queue_sim: unknown flag %s\n%s", a.c_str(), kUsage);
      return 2;
    }
    if (!have_trace) {
      trace_name = a;
      have_trace = true;
      continue;
    }
    char* end = nullptr;
    const double s = std::strtod(a.c_str(), &end);
    if (*end != '\0' || !(s > 0)) {
      std::fprintf(stderr, "queue_sim: a speedup must be a positive number, not '%s'\n%s",
                   a.c_str(), kUsage);
      return 2;
    }
    speedups.push_back(s);
  }
  if (teams) return Teams(nodes_wanted > 0 ? nodes_wanted : 40, days, seed);
  if (speedups.empty()) speedups = {30000, 100000};
  core::Cluster cluster = OrDie(core::Cluster::Create(TraceNodes(nodes_wanted)));
  sim::PodTrace trace = OrDie(sim::ReadAlibabaPods(kTraceDir + trace_name));
  std::printf("trace %s: %zu pods; cluster %d nodes, %d GPUs; policy tessera\n\n",
              trace_name.c_str(), trace.pods.size(), cluster.live_count(), cluster.total_gpus());
  std::printf(
      "| speedup | preemption | GPU allocation %% | Jain (contended h) | evictions (per h) | "
      "queue | pods | started | waiting at end | pending p50 / p90 / p99 s | allocated / "
      "fair share / deserved GPUs | evicted |\n");
  std::printf("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
  std::vector<sim::QueueTimelineResult> results;
  for (double speedup : speedups) {
    for (bool preempt : {false, true}) {
      sim::QueueTimelineOptions o;
      o.speedup = speedup;
      o.preempt = preempt;
      sim::QueueTimelineResult r = OrDie(sim::RunQueueTimeline(cluster, trace, o));
      for (size_t q = 0; q < r.queues.size(); ++q) {
        const sim::QueueTimelineStats& s = r.queues[q];
        if (q == 0) {
          std::printf("| %.0f | %s | %.1f | %.3f (%.2f) | %lld (%.1f) ", speedup,
                      preempt ? "on" : "off", r.mean_allocation, r.jain, r.contended_hours,
                      static_cast<long long>(r.evictions), r.evictions_per_hour);
        } else {
          std::printf("| | | | | ");
        }
        std::printf(
            "| %s | %lld | %lld | %lld | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f | %lld |\n",
            s.queue.c_str(), static_cast<long long>(s.pods), static_cast<long long>(s.started),
            static_cast<long long>(s.still_waiting), s.pending_p50, s.pending_p90, s.pending_p99,
            s.mean_allocated_gpus, s.mean_fair_share_gpus, s.deserved_gpus,
            static_cast<long long>(s.evicted));
      }
      std::fprintf(stderr, "speedup %.0f preempt %d: %.1f s, %lld plans, %.1f ms planning\n",
                   speedup, preempt, r.seconds, static_cast<long long>(r.plans), r.plan_ms_total);
      results.push_back(std::move(r));
    }
  }
  // Allocation against fair share over time, per run: one row per period of the window.
  for (const sim::QueueTimelineResult& r : results) {
    std::printf("\nspeedup %.0f, preemption %s: GPUs allocated / fair share per queue (deserved",
                r.speedup, r.preempt ? "on" : "off");
    for (const sim::QueueTimelineStats& s : r.queues) {
      std::printf(" %s %.1f", s.queue.c_str(), s.deserved_gpus);
    }
    std::printf(")\n\n| hours |");
    for (const sim::QueueTimelineStats& s : r.queues) std::printf(" %s |", s.queue.c_str());
    std::printf("\n|---|");
    for (size_t q = 0; q < r.queues.size(); ++q) std::printf("---:|");
    std::printf("\n");
    for (const sim::QueueTimelinePeriod& p : r.periods) {
      std::printf("| %.2f-%.2f |", p.from_hours, p.to_hours);
      for (size_t q = 0; q < p.allocated_gpus.size(); ++q) {
        std::printf(" %.1f / %.1f |", p.allocated_gpus[q], p.fair_share_gpus[q]);
      }
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) { return tessera::bench::Main(argc, argv); }
