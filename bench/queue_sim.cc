// The simulator's queues on the Alibaba trace (issue 18): the timeline protocol with queues from
// the qos column (sim/queue_timeline.h: LS, Guaranteed, Burstable -> latency; BE -> batch; each
// deserves half of the GPUs), with reclaim and priority preemption and without, side by side at
// the same arrivals. Prints markdown: fairness (Jain's index of allocation / fair share while both
// queues want GPUs), per-queue pending-time percentiles and allocation against deserved share,
// and evictions per hour.
//
//   bench/run_queue_sim.sh   (build/release/bench/queue_sim [trace] [speedups...])
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "sim/queue_timeline.h"
#include "sim/trace/alibaba.h"

namespace tessera::bench {
namespace {

const std::string kTraceDir = std::string(TESSERA_SHARED_DIR) + "/traces/alibaba-gpu-v2023/";

template <typename T>
T OrDie(absl::StatusOr<T> v) {
  if (!v.ok()) {
    std::cerr << "queue_sim: " << v.status().message() << "\n";
    std::exit(2);
  }
  return *std::move(v);
}

int Main(int argc, char** argv) {
  const std::string trace_name = argc > 1 ? argv[1] : "openb_pod_list_default.csv";
  std::vector<double> speedups;
  for (int i = 2; i < argc; ++i) speedups.push_back(std::atof(argv[i]));
  if (speedups.empty()) speedups = {30000, 100000};
  core::Cluster cluster = OrDie(core::Cluster::Create(
      OrDie(sim::ReadAlibabaNodes(kTraceDir + "openb_node_list_gpu_node.csv"))));
  sim::PodTrace trace = OrDie(sim::ReadAlibabaPods(kTraceDir + trace_name));
  std::printf("trace %s: %zu pods; cluster %d nodes, %d GPUs; policy tessera\n\n",
              trace_name.c_str(), trace.pods.size(), cluster.live_count(), cluster.total_gpus());
  std::printf(
      "| speedup | preemption | GPU allocation %% | Jain (contended h) | evictions (per h) | "
      "queue | pods | started | waiting at end | pending p50 / p90 / p99 s | allocated / "
      "fair share / deserved GPUs | evicted |\n");
  std::printf("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
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
    }
  }
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) { return tessera::bench::Main(argc, argv); }
