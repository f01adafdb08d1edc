// The scheduler's metrics in the Prometheus text exposition format (version 0.0.4), served on
// /metrics. Counters and gauges are atomics the scheduler thread bumps; per-node GPU allocation is
// a snapshot the scheduler thread publishes (the engine itself is never read from another
// thread). Render() may run on the HTTP server's thread at any time.
//
//   tessera_scheduler_pods_scheduled_total                    pods bound by this scheduler
//   tessera_scheduler_pods_failed_total{reason}               attempts that did not bind:
//                                                             unschedulable, bind_error,
//                                                             invalid_pod
//   tessera_scheduler_scheduling_duration_seconds             histogram: first seen -> bound
//   tessera_scheduler_gpu_memory_allocated_mib{node}          GPU memory granted on the node
//   tessera_scheduler_gpu_memory_capacity_mib{node}
//   tessera_scheduler_gpu_compute_allocated_milli{node}       compute granted (1000 = one GPU)
//   tessera_scheduler_gpu_compute_capacity_milli{node}
//   tessera_scheduler_node_inventory_valid{node}              0 when the inventory is unusable
//   tessera_scheduler_nodes_bad_inventory                     nodes whose inventory is unusable
//   tessera_scheduler_nodes_gpu_blocked                       nodes whose GPUs take no new pods:
//                                                             a bound pod's assignment there
//                                                             cannot be read or restored
//   tessera_scheduler_pods_unaccounted_gpus                   such bound pods
//   tessera_scheduler_decision_duration_seconds               histogram: one decision (a pod, or
//                                                             a whole gang), the engine's time
//   tessera_scheduler_decision_cpu_seconds                    histogram: the scheduler thread's
//                                                             CPU time in the same decisions
//   tessera_scheduler_pending_pods{state}                     active, backoff, unschedulable,
//                                                             gang_waiting, binding
//   tessera_scheduler_queue_{deserved,fair_share,allocated,borrowed,pending}{queue,resource}
//                                                             per queue (queue_book.h), resource
//                                                             gpu_milli (1000 = a GPU; a share
//                                                             counts its fraction),
//                                                             gpu_memory_mib, gpu_compute_milli
//   tessera_scheduler_queue_pending_pods{queue}               its pods waiting
//   tessera_scheduler_is_leader, _restore_failures_total, _node_changes_total, and what the
//   informers report (lists, relists after "too old", watch failures).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/queues/resources.h"

namespace tessera::k8s {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Appends name_bucket{le=...} (cumulative), name_sum and name_count.
  void Render(const std::string& name, std::string* out) const;
  int64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

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

// The scale-up signal of one node template (scale_up_signal.h).
struct ScaleUpGauges {
  std::string template_name;
  int64_t nodes = 0;  // nodes of it to add
  int64_t pods = 0;   // waiting pods they would run
};

// Escapes a label value ("\\", "\"", newline).
std::string EscapeLabel(const std::string& value);

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
  Histogram scheduling_duration;
  Histogram decision_duration;
  Histogram decision_cpu;

  void SetNodes(std::vector<NodeGauges> nodes);
  void SetQueues(std::vector<QueueGauges> queues);
  // The scale-up signal (rendered once set): per template, and the pods it was computed for.
  void SetScaleUp(std::vector<ScaleUpGauges> templates, int64_t waiting_pods);
  // Further lines to append (informer counters), produced by the caller.
  void SetExtra(std::function<std::string()> extra);

  std::string Render() const;

 private:
  mutable std::mutex mu_;
  std::vector<NodeGauges> nodes_;
  std::vector<QueueGauges> queues_;
  std::optional<std::pair<std::vector<ScaleUpGauges>, int64_t>> scale_up_;
  std::function<std::string()> extra_;
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
