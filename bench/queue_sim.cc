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
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

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

constexpr char kUsage[] =
    "usage: queue_sim [--nodes N] [trace] [speedups...]\n"
    "  trace      a pod list of " TESSERA_DATA_DIR
    "/traces/alibaba-gpu-v2023 (default openb_pod_list_default.csv)\n"
    "  speedups   arrival gaps are divided by each (default 30000 100000)\n"
    "  --nodes N  replay on N of the trace's nodes, spread evenly over its node list (default: "
    "all)\n";

int Main(int argc, char** argv) {
  std::string trace_name = "openb_pod_list_default.csv";
  std::vector<double> speedups;
  int nodes_wanted = 0;
  bool have_trace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
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
  if (speedups.empty()) speedups = {30000, 100000};
  std::vector<core::NodeSpec> all =
      OrDie(sim::ReadAlibabaNodes(kTraceDir + "openb_node_list_gpu_node.csv"));
  if (nodes_wanted > static_cast<int>(all.size())) {
    std::fprintf(stderr, "queue_sim: --nodes %d: the trace has only %zu nodes\n", nodes_wanted,
                 all.size());
    return 2;
  }
  if (nodes_wanted > 0) {
    std::vector<core::NodeSpec> some;
    for (int k = 0; k < nodes_wanted; ++k) {
      some.push_back(all[static_cast<size_t>(k) * all.size() / static_cast<size_t>(nodes_wanted)]);
    }
    all = std::move(some);
  }
  core::Cluster cluster = OrDie(core::Cluster::Create(std::move(all)));
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
