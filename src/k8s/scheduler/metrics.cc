#include "k8s/scheduler/metrics.h"

#include <time.h>

#include <algorithm>

#include "common/strings.h"

namespace tessera::k8s {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    StrAppend(out, name, "_bucket{le=\"", fmt::format("{}", bounds_[i]), "\"} ", cumulative, "\n");
  }
  cumulative += counts_.back();
  StrAppend(out, name, "_bucket{le=\"+Inf\"} ", cumulative, "\n");
  StrAppend(out, name, "_sum ", fmt::format("{}", sum_), "\n");
  StrAppend(out, name, "_count ", count_, "\n");
}

std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

SchedulerMetrics::SchedulerMetrics()
    : scheduling_duration({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                           30, 60, 120, 300}),
      decision_duration({0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                         0.01, 0.025, 0.05, 0.1, 0.25, 1}),
      decision_cpu({0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                    0.025, 0.05, 0.1, 0.25, 1}) {}

void SchedulerMetrics::SetScaleUp(std::vector<ScaleUpGauges> templates, int64_t waiting_pods) {
  std::lock_guard<std::mutex> lock(mu_);
  scale_up_.emplace(std::move(templates), waiting_pods);
}

void SchedulerMetrics::SetNodes(std::vector<NodeGauges> nodes) {
  std::lock_guard<std::mutex> lock(mu_);
  nodes_ = std::move(nodes);
}

void SchedulerMetrics::SetQueues(std::vector<QueueGauges> queues) {
  std::lock_guard<std::mutex> lock(mu_);
  queues_ = std::move(queues);
}

void SchedulerMetrics::SetExtra(std::function<std::string()> extra) {
  std::lock_guard<std::mutex> lock(mu_);
  extra_ = std::move(extra);
}

namespace {

void Header(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void Scalar(std::string* out, std::string_view name, std::string_view type, std::string_view help,
            int64_t value) {
  Header(out, name, type, help);
  StrAppend(out, name, " ", value, "\n");
}

}  // namespace

std::string SchedulerMetrics::Render() const {
  std::string out;
  Scalar(&out, "tessera_scheduler_pods_scheduled_total", "counter",
         "Pods this scheduler bound to a node.", pods_scheduled.load());
  Header(&out, "tessera_scheduler_pods_failed_total", "counter",
         "Scheduling attempts that did not bind the pod, by reason.");
  StrAppend(&out, "tessera_scheduler_pods_failed_total{reason=\"unschedulable\"} ",
            failed_unschedulable.load(), "\n");
  StrAppend(&out, "tessera_scheduler_pods_failed_total{reason=\"bind_error\"} ",
            failed_bind_error.load(), "\n");
  StrAppend(&out, "tessera_scheduler_pods_failed_total{reason=\"invalid_pod\"} ",
            failed_invalid_pod.load(), "\n");
  Header(&out, "tessera_scheduler_scheduling_duration_seconds", "histogram",
         "Time from when the scheduler first saw a pod to its binding.");
  scheduling_duration.Render("tessera_scheduler_scheduling_duration_seconds", &out);
  Header(&out, "tessera_scheduler_decision_duration_seconds", "histogram",
         "Time the scheduler thread spent deciding one pod or one whole gang (filters, the "
         "engine's choice and commit), without queueing or binding.");
  decision_duration.Render("tessera_scheduler_decision_duration_seconds", &out);
  Header(&out, "tessera_scheduler_decision_cpu_seconds", "histogram",
         "CPU time the scheduler thread used in the same decisions: their duration less the time "
         "the thread waited for a core (a busy machine) or was paused.");
  decision_cpu.Render("tessera_scheduler_decision_cpu_seconds", &out);
  Header(&out, "tessera_scheduler_pending_pods", "gauge", "Pods waiting, by state.");
  StrAppend(&out, "tessera_scheduler_pending_pods{state=\"active\"} ", pending_active.load(), "\n");
  StrAppend(&out, "tessera_scheduler_pending_pods{state=\"backoff\"} ", pending_backoff.load(),
            "\n");
  StrAppend(&out, "tessera_scheduler_pending_pods{state=\"unschedulable\"} ",
            pending_unschedulable.load(), "\n");
  StrAppend(&out, "tessera_scheduler_pending_pods{state=\"gang_waiting\"} ",
            pending_gang_waiting.load(), "\n");
  StrAppend(&out, "tessera_scheduler_pending_pods{state=\"binding\"} ", binding_in_flight.load(),
            "\n");
  Scalar(&out, "tessera_scheduler_is_leader", "gauge",
         "1 while this replica holds the leader lease.", is_leader.load());
  Scalar(&out, "tessera_scheduler_restore_failures_total", "counter",
         "Bound pods whose assignment could not be restored into the ledger.",
         restore_failures.load());
  Scalar(&out, "tessera_scheduler_node_changes_total", "counter",
         "Node additions, updates and removals applied to the engine (in place).",
         node_changes.load());
  Scalar(&out, "tessera_scheduler_nodes_bad_inventory", "gauge",
         "Nodes whose tessera.dev/gpu-inventory is unusable (their GPUs are not used).",
         nodes_bad_inventory.load());
  Scalar(&out, "tessera_scheduler_nodes_gpu_blocked", "gauge",
         "Nodes whose GPUs take no new pods because a bound pod's tessera.dev/assignment there "
         "cannot be read or restored (its GPUs are never treated as free).",
         nodes_gpu_blocked.load());
  Scalar(&out, "tessera_scheduler_pods_unaccounted_gpus", "gauge",
         "Bound pods whose tessera.dev/assignment cannot be read or restored.",
         pods_unaccounted_gpus.load());
  std::lock_guard<std::mutex> lock(mu_);
  struct Family {
    const char* name;
    const char* help;
    int64_t NodeGauges::*field;
  };
  const Family families[] = {
      {"tessera_scheduler_gpu_memory_allocated_mib", "GPU memory granted on the node (MiB).",
       &NodeGauges::gpu_memory_allocated_mib},
      {"tessera_scheduler_gpu_memory_capacity_mib", "GPU memory of the node (MiB).",
       &NodeGauges::gpu_memory_capacity_mib},
      {"tessera_scheduler_gpu_compute_allocated_milli",
       "GPU compute granted on the node (1000 = one whole GPU).",
       &NodeGauges::gpu_compute_allocated_milli},
      {"tessera_scheduler_gpu_compute_capacity_milli", "GPU compute of the node (1000 per GPU).",
       &NodeGauges::gpu_compute_capacity_milli},
  };
  for (const Family& f : families) {
    Header(&out, f.name, "gauge", f.help);
    for (const NodeGauges& n : nodes_) {
      StrAppend(&out, f.name, "{node=\"", EscapeLabel(n.node), "\"} ", n.*(f.field), "\n");
    }
  }
  Header(&out, "tessera_scheduler_node_inventory_valid", "gauge",
         "0 when the node's tessera.dev/gpu-inventory annotation is unusable.");
  for (const NodeGauges& n : nodes_) {
    StrAppend(&out, "tessera_scheduler_node_inventory_valid{node=\"", EscapeLabel(n.node), "\"} ",
              n.inventory_valid ? 1 : 0, "\n");
  }
  struct QueueFamily {
    const char* name;
    const char* help;
    core::QueueResources QueueGauges::*field;
  };
  const QueueFamily queue_families[] = {
      {"tessera_scheduler_queue_deserved", "What the queue deserves (its Queue's deserved).",
       &QueueGauges::deserved},
      {"tessera_scheduler_queue_fair_share",
       "The queue's fair share now: deserved, capped by its demand and limit, plus its weighted "
       "part of what others leave.",
       &QueueGauges::fair_share},
      {"tessera_scheduler_queue_allocated",
       "What the queue's pods hold (bound and being bound); a share counts its fraction of a GPU.",
       &QueueGauges::allocated},
      {"tessera_scheduler_queue_borrowed", "What the queue holds beyond what it deserves.",
       &QueueGauges::borrowed},
      {"tessera_scheduler_queue_pending", "What the queue's waiting pods ask.",
       &QueueGauges::pending},
      {"tessera_scheduler_queue_usage",
       "What the queue held lately: its allocation averaged with weights that halve every "
       "queues.usageHalfLife (0 without one); the order between queues counts it with what the "
       "queue holds.",
       &QueueGauges::usage},
  };
  const char* resources[] = {"gpu_milli", "gpu_memory_mib", "gpu_compute_milli"};
  for (const QueueFamily& f : queue_families) {
    Header(&out, f.name, "gauge",
           StrCat(f.help,
                  " resource: gpu_milli (1000 = one GPU), gpu_memory_mib, "
                  "gpu_compute_milli."));
    for (const QueueGauges& q : queues_) {
      for (int r = 0; r < core::kQueueResourceCount; ++r) {
        StrAppend(&out, f.name, "{queue=\"", EscapeLabel(q.queue), "\",resource=\"", resources[r],
                  "\"} ", (q.*(f.field))[r], "\n");
      }
    }
  }
  Header(&out, "tessera_scheduler_queue_pending_pods", "gauge",
         "Pods of the queue waiting to be scheduled.");
  for (const QueueGauges& q : queues_) {
    StrAppend(&out, "tessera_scheduler_queue_pending_pods{queue=\"", EscapeLabel(q.queue), "\"} ",
              q.pending_pods, "\n");
  }
  if (scale_up_) {
    Header(&out, "tessera_scheduler_scale_up_nodes", "gauge",
           "Scale-up signal: nodes of this template that would let the most waiting pods run "
           "(0: none helps, or nothing waits).");
    for (const ScaleUpGauges& t : scale_up_->first) {
      StrAppend(&out, "tessera_scheduler_scale_up_nodes{template=\"", EscapeLabel(t.template_name),
                "\"} ", t.nodes, "\n");
    }
    Header(&out, "tessera_scheduler_scale_up_pods", "gauge",
           "Scale-up signal: waiting pods that those nodes of this template would run.");
    for (const ScaleUpGauges& t : scale_up_->first) {
      StrAppend(&out, "tessera_scheduler_scale_up_pods{template=\"", EscapeLabel(t.template_name),
                "\"} ", t.pods, "\n");
    }
    Scalar(&out, "tessera_scheduler_scale_up_waiting_pods", "gauge",
           "Waiting pods the scale-up signal was last computed for.", scale_up_->second);
  }
  if (extra_) out += extra_();
  return out;
}

namespace {
// CPU time this thread has used, in seconds (0 if the clock cannot be read).
double ThreadCpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

DecisionTimer::DecisionTimer(SchedulerMetrics* metrics)
    : metrics_(metrics),
      wall_(std::chrono::steady_clock::now()),
      cpu_s_(metrics != nullptr ? ThreadCpuSeconds() : 0) {}

void DecisionTimer::Observe() const {
  if (metrics_ == nullptr) return;
  metrics_->decision_duration.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_).count());
  metrics_->decision_cpu.Observe(std::max(0.0, ThreadCpuSeconds() - cpu_s_));
}

}  // namespace tessera::k8s
