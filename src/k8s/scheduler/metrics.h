// The scheduler's metrics, served on /metrics through the one Prometheus writer
// (common/prometheus.h). Counters and gauges are atomics the scheduler thread bumps; per-node GPU
// allocation and the per-queue figures are snapshots the scheduler thread publishes (the engine
// itself is never read from another thread). Render() may run on the HTTP server's thread at any
// time. Quantities are kept as the engine counts them (MiB, milli-GPU) and written in base units
// (bytes; GPU compute in GPUs, 1 = all SMs of one GPU). The list of every series, with its type
// and labels, is docs/metrics.md (docs_reference_test checks it against Render()).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/prometheus.h"
#include "core/queues/resources.h"

namespace tessera::k8s {

using prometheus::Histogram;

struct NodeGauges {
  std::string node;
  int64_t gpu_memory_allocated_mib = 0;
  int64_t gpu_memory_capacity_mib = 0;
  int64_t gpu_compute_allocated_milli = 0;
  int64_t gpu_compute_capacity_milli = 0;
  bool inventory_valid = true;
};

struct QueueGauges {
  std::string queue;
  std::string parent;
  bool usable = true;
  core::QueueResources deserved, fair_share, allocated, borrowed, pending;
  core::QueueResources usage;  // decayed usage (core/queues/usage_history.h); 0 without
  int64_t pending_pods = 0;
};

// What the pods of one namespace hold now: the same amounts the queues count (QueueBook), summed by
// the pods' namespace instead of their queue.
struct NamespaceGauges {
  std::string name;
  core::QueueResources allocated;
};

// The scale-up signal of one node template (scale_up_signal.h).
struct ScaleUpGauges {
  std::string template_name;
  int64_t nodes = 0;  // nodes of it to add
  int64_t pods = 0;   // waiting pods they would run
};

class SchedulerMetrics {
 public:
  SchedulerMetrics();

  std::atomic<int64_t> pods_scheduled{0};
  std::atomic<int64_t> failed_unschedulable{0};
  std::atomic<int64_t> failed_bind_error{0};
  std::atomic<int64_t> failed_invalid_pod{0};
  std::atomic<int64_t> restore_failures{0};
  std::atomic<int64_t> node_changes{0};
  std::atomic<int64_t> pending_active{0};
  std::atomic<int64_t> pending_unschedulable{0};
  std::atomic<int64_t> pending_gang_waiting{0};
  std::atomic<int64_t> pending_backoff{0};
  std::atomic<int64_t> binding_in_flight{0};
  std::atomic<int64_t> is_leader{0};
  std::atomic<int64_t> nodes_bad_inventory{0};
  std::atomic<int64_t> nodes_gpu_blocked{0};
  std::atomic<int64_t> pods_unaccounted_gpus{0};
  // Preemption (preemption.h): plans carried out (a pod nominated, its victims evicted), and the
  // victims evicted.
  std::atomic<int64_t> preemptions{0};
  std::atomic<int64_t> preemption_victims{0};
  // Defragmentation (defrag_executor.h): pods evicted to be placed again elsewhere.
  std::atomic<int64_t> defrag_moves{0};
  // DRA mode: ResourceClaims whose allocation the scheduler wrote (claim_binder.h).
  std::atomic<int64_t> dra_allocations{0};
  // Reservations with backfill (reservation_answer.h): reservations held now, pods placed on
  // reserved GPUs because their declared run time ends before the reservation's expected start,
  // and pods evicted for running past their declared run time (runtime_limits.h).
  std::atomic<int64_t> reservations_held{0};
  std::atomic<int64_t> reservations_made{0};
  std::atomic<int64_t> backfilled_pods{0};
  std::atomic<int64_t> max_runtime_evictions{0};
  // Gangs restarted whole after a member was lost to a GPU fault (gang_restarts.h).
  std::atomic<int64_t> gang_restarts{0};
  // The first sight (steady clock, nanoseconds since its epoch) of the pod that has waited longest
  // to be bound; 0 when none waits (pod_tracker.h).
  std::atomic<int64_t> oldest_waiting_since_ns{0};
  Histogram scheduling_duration;
  Histogram decision_duration;
  Histogram decision_cpu;

  // A preemption carried out with `victims` evicted now (none: it only awaits pods leaving, which
  // an earlier preemption counted).
  void CountPreemption(size_t victims) {
    if (victims == 0) return;
    preemptions++;
    preemption_victims += static_cast<int64_t>(victims);
  }

  void SetNodes(std::vector<NodeGauges> nodes);
  // The per-queue and per-namespace figures now. Each call also adds to every queue's and every
  // namespace's granted GPU time what it was allocated since the previous call, as the previous
  // call said (tessera_scheduler_{queue,namespace}_granted_* counters: the time integral of
  // `allocated`, exact as long as every change of an allocation is published, which the
  // scheduler does after each cycle).
  void SetQueues(std::vector<QueueGauges> queues,
                 std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now(),
                 std::vector<NamespaceGauges> namespaces = {});
  // The scale-up signal (rendered once set): per template, and the pods it was computed for.
  void SetScaleUp(std::vector<ScaleUpGauges> templates, int64_t waiting_pods);
  // More families to write (informer counters, API requests), by the caller.
  void SetExtra(std::function<void(prometheus::Exposition&)> extra);
  // tessera_build_info.
  void SetBuild(prometheus::BuildInfo build);

  std::string Render() const;
  // Writes every family into `out` (Render's text; docs_reference_test reads its families).
  void Write(prometheus::Exposition& out) const;
  // The per-queue figures last published (the Queue status writer reads them).
  std::vector<QueueGauges> queues() const;

 private:
  mutable std::mutex mu_;
  std::vector<NodeGauges> nodes_;
  std::vector<QueueGauges> queues_;
  std::vector<NamespaceGauges> namespaces_;
  std::optional<std::chrono::steady_clock::time_point> queues_at_;  // the last SetQueues
  // Per queue and per namespace, the integral of `allocated` over time: resource units
  // (milli-GPUs, MiB) x seconds.
  std::map<std::string, std::array<double, core::kQueueResourceCount>> granted_;
  std::map<std::string, std::array<double, core::kQueueResourceCount>> granted_by_namespace_;
  std::optional<std::pair<std::vector<ScaleUpGauges>, int64_t>> scale_up_;
  std::function<void(prometheus::Exposition&)> extra_;
  prometheus::BuildInfo build_{"unknown", "unknown"};
};

// One decision's wall time and the deciding thread's CPU time, from construction to Observe,
// recorded in decision_duration and decision_cpu (nothing without metrics). The scheduler and its
// "does not fit" answers (no_fit.h) time each decision with one.
class DecisionTimer {
 public:
  explicit DecisionTimer(SchedulerMetrics* metrics);
  void Observe() const;

 private:
  SchedulerMetrics* metrics_;
  std::chrono::steady_clock::time_point wall_;
  double cpu_s_ = 0;
};

}  // namespace tessera::k8s
