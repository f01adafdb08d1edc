#include "k8s/scheduler/metrics.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include "common/strings.h"

namespace tessera::k8s {

using prometheus::Exposition;
using prometheus::MetricType;

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

void SchedulerMetrics::SetQueues(std::vector<QueueGauges> queues,
                                 std::chrono::steady_clock::time_point now,
                                 std::vector<NamespaceGauges> namespaces) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queues_at_ && now > *queues_at_) {
    const double seconds = std::chrono::duration<double>(now - *queues_at_).count();
    auto add = [seconds](std::array<double, core::kQueueResourceCount>& g,
                         const core::QueueResources& allocated) {
      for (int r = 0; r < core::kQueueResourceCount; ++r) {
        g[r] += static_cast<double>(allocated[r]) * seconds;
      }
    };
    for (const QueueGauges& q : queues_) add(granted_[q.queue], q.allocated);
    for (const NamespaceGauges& n : namespaces_) add(granted_by_namespace_[n.name], n.allocated);
  }
  if (!queues_at_ || now > *queues_at_) queues_at_ = now;
  queues_ = std::move(queues);
  namespaces_ = std::move(namespaces);
}

std::vector<QueueGauges> SchedulerMetrics::queues() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queues_;
}

void SchedulerMetrics::SetExtra(std::function<void(Exposition&)> extra) {
  std::lock_guard<std::mutex> lock(mu_);
  extra_ = std::move(extra);
}

void SchedulerMetrics::SetBuild(prometheus::BuildInfo build) {
  std::lock_guard<std::mutex> lock(mu_);
  build_ = std::move(build);
}

std::string SchedulerMetrics::Render() const {
  Exposition out;
  Write(out);
  return std::move(out).Text();
}

namespace {

constexpr int64_t kMiB = 1 << 20;
double Gpus(int64_t milli) { return static_cast<double>(milli) / 1000; }

void WriteCounters(const SchedulerMetrics& m, Exposition& out) {
  out.Scalar({"tessera_scheduler_pods_scheduled_total", MetricType::kCounter,
              "Pods this scheduler bound to a node."},
             m.pods_scheduled.load());
  auto failed = out.Family({"tessera_scheduler_pods_failed_total",
                            MetricType::kCounter,
                            "Scheduling attempts that did not bind the pod, by reason.",
                            {"reason"}});
  failed.Add({"unschedulable"}, m.failed_unschedulable.load());
  failed.Add({"bind_error"}, m.failed_bind_error.load());
  failed.Add({"invalid_pod"}, m.failed_invalid_pod.load());
  out.Scalar({"tessera_scheduler_preemptions_total", MetricType::kCounter,
              "Preemptions carried out: a pod nominated to a node and the victims that make room "
              "for it evicted."},
             m.preemptions.load());
  out.Scalar({"tessera_scheduler_preemption_victims_total", MetricType::kCounter,
              "Pods evicted to make room for a preempting pod."},
             m.preemption_victims.load());
  out.Scalar({"tessera_scheduler_defrag_moves_total", MetricType::kCounter,
              "Pods a defragmentation plan evicted to place them again elsewhere."},
             m.defrag_moves.load());
  out.Scalar({"tessera_scheduler_reservations", MetricType::kGauge,
              "Reservations held now: room kept for a big pod or gang that has waited longest."},
             m.reservations_held.load());
  out.Scalar({"tessera_scheduler_reservations_made_total", MetricType::kCounter,
              "Reservations made (one chosen again after its estimate proved wrong counts again)."},
             m.reservations_made.load());
  out.Scalar({"tessera_scheduler_backfilled_pods_total", MetricType::kCounter,
              "Pods placed on reserved GPUs because their declared run time ends before the "
              "reservation's expected start (backfill)."},
             m.backfilled_pods.load());
  out.Scalar({"tessera_scheduler_max_runtime_evictions_total", MetricType::kCounter,
              "Pods evicted for running past their declared run time (tessera.dev/max-runtime or "
              "activeDeadlineSeconds)."},
             m.max_runtime_evictions.load());
  out.Scalar({"tessera_scheduler_gang_restarts_total", MetricType::kCounter,
              "Gangs with tessera.dev/gang-restart: all (or a PodGroup's disruptionMode all) "
              "evicted whole because a member was lost to a GPU fault."},
             m.gang_restarts.load());
  out.Scalar({"tessera_scheduler_dra_allocations_total", MetricType::kCounter,
              "ResourceClaims whose allocation the scheduler wrote (DRA mode)."},
             m.dra_allocations.load());
  out.Scalar({"tessera_scheduler_restore_failures_total", MetricType::kCounter,
              "Bound pods whose assignment could not be restored into the ledger."},
             m.restore_failures.load());
  out.Scalar({"tessera_scheduler_node_changes_total", MetricType::kCounter,
              "Node additions, updates and removals applied to the engine (in place)."},
             m.node_changes.load());
}

void WriteHistograms(const SchedulerMetrics& m, Exposition& out) {
  out.Family({"tessera_scheduler_scheduling_duration_seconds", MetricType::kHistogram,
              "Time from when the scheduler first saw a pod to its binding."})
      .Add({}, m.scheduling_duration);
  out.Family({"tessera_scheduler_decision_duration_seconds", MetricType::kHistogram,
              "Time the scheduler thread spent deciding one pod or one whole gang (filters, the "
              "engine's choice and commit), without queueing or binding."})
      .Add({}, m.decision_duration);
  out.Family({"tessera_scheduler_decision_cpu_seconds", MetricType::kHistogram,
              "CPU time the scheduler thread used in the same decisions: their duration less the "
              "time the thread waited for a core (a busy machine) or was paused."})
      .Add({}, m.decision_cpu);
}

void WritePending(const SchedulerMetrics& m, Exposition& out) {
  auto pending = out.Family(
      {"tessera_scheduler_pending_pods", MetricType::kGauge, "Pods waiting, by state.", {"state"}});
  pending.Add({"active"}, m.pending_active.load());
  pending.Add({"backoff"}, m.pending_backoff.load());
  pending.Add({"unschedulable"}, m.pending_unschedulable.load());
  pending.Add({"gang_waiting"}, m.pending_gang_waiting.load());
  pending.Add({"binding"}, m.binding_in_flight.load());
  const int64_t since = m.oldest_waiting_since_ns.load();
  double age = 0;
  if (since != 0) {
    const int64_t now =
        std::chrono::steady_clock::now().time_since_epoch() / std::chrono::nanoseconds(1);
    age = std::max<int64_t>(0, now - since) / 1e9;
  }
  out.Scalar({"tessera_scheduler_oldest_pending_pod_age_seconds", MetricType::kGauge,
              "How long the pod waiting longest to be bound has waited since this scheduler "
              "first saw it (0 when none waits)."},
             age);
}

void WriteHealth(const SchedulerMetrics& m, Exposition& out) {
  out.Scalar({"tessera_scheduler_is_leader", MetricType::kGauge,
              "1 while this replica holds the leader lease."},
             m.is_leader.load());
  out.Scalar({"tessera_scheduler_nodes_bad_inventory", MetricType::kGauge,
              "Nodes whose tessera.dev/gpu-inventory is unusable (their GPUs are not used)."},
             m.nodes_bad_inventory.load());
  out.Scalar({"tessera_scheduler_nodes_gpu_blocked", MetricType::kGauge,
              "Nodes whose GPUs take no new pods because a bound pod's tessera.dev/assignment "
              "there cannot be read or restored (its GPUs are never treated as free)."},
             m.nodes_gpu_blocked.load());
  out.Scalar({"tessera_scheduler_pods_unaccounted_gpus", MetricType::kGauge,
              "Bound pods whose tessera.dev/assignment cannot be read or restored."},
             m.pods_unaccounted_gpus.load());
}

void WriteNodes(const std::vector<NodeGauges>& nodes, Exposition& out) {
  struct Family {
    const char* name;
    const char* help;
    int64_t NodeGauges::*field;
    bool memory;
  };
  const Family families[] = {
      {"tessera_scheduler_gpu_memory_allocated_bytes", "GPU memory granted on the node.",
       &NodeGauges::gpu_memory_allocated_mib, true},
      {"tessera_scheduler_gpu_memory_capacity_bytes", "GPU memory of the node.",
       &NodeGauges::gpu_memory_capacity_mib, true},
      {"tessera_scheduler_gpu_compute_allocated_gpus",
       "GPU compute granted on the node, in GPUs (1 = all SMs of one GPU; a 25% share is 0.25).",
       &NodeGauges::gpu_compute_allocated_milli, false},
      {"tessera_scheduler_gpu_compute_capacity_gpus",
       "GPU compute of the node, in GPUs (its number of GPUs).",
       &NodeGauges::gpu_compute_capacity_milli, false},
  };
  for (const Family& f : families) {
    auto family = out.Family({f.name, MetricType::kGauge, f.help, {"node"}});
    for (const NodeGauges& n : nodes) {
      if (f.memory) {
        family.Add({n.node}, n.*(f.field) * kMiB);
      } else {
        family.Add({n.node}, Gpus(n.*(f.field)));
      }
    }
  }
  auto valid = out.Family({"tessera_scheduler_node_inventory_valid",
                           MetricType::kGauge,
                           "0 when the node's tessera.dev/gpu-inventory annotation is unusable.",
                           {"node"}});
  for (const NodeGauges& n : nodes) valid.Add({n.node}, n.inventory_valid ? 1 : 0);
}

// Per queue (queue_book.h): six figures, each for the three resources a Queue counts, one metric
// per resource.
void WriteQueues(const std::vector<QueueGauges>& queues, Exposition& out) {
  struct Figure {
    const char* name;
    const char* help;
    core::QueueResources QueueGauges::*field;
  };
  const Figure figures[] = {
      {"deserved", "What the queue deserves (its Queue's deserved)", &QueueGauges::deserved},
      {"fair_share",
       "The queue's fair share now: deserved, capped by its demand and limit, plus its weighted "
       "part of what others leave",
       &QueueGauges::fair_share},
      {"allocated", "What the queue's pods hold (bound and being bound)", &QueueGauges::allocated},
      {"borrowed", "What the queue holds beyond what it deserves", &QueueGauges::borrowed},
      {"pending", "What the queue's waiting pods ask", &QueueGauges::pending},
      {"usage",
       "What the queue held lately: its allocation averaged with weights that halve every "
       "queues.usageHalfLife (0 without one); the order between queues counts it with what the "
       "queue holds",
       &QueueGauges::usage},
  };
  struct Resource {
    const char* suffix;
    const char* unit;
    int index;
  };
  const Resource resources[] = {
      {"gpus", ": GPUs, a share counting its fraction of its GPU.", core::kQueueGpu},
      {"gpu_memory_bytes", ": GPU memory.", core::kQueueGpuMemory},
      {"gpu_compute_gpus", ": GPU compute, in GPUs (1 = all SMs of one GPU).",
       core::kQueueGpuCompute},
  };
  for (const Figure& f : figures) {
    for (const Resource& r : resources) {
      auto family = out.Family({StrCat("tessera_scheduler_queue_", f.name, "_", r.suffix),
                                MetricType::kGauge,
                                StrCat(f.help, r.unit),
                                {"queue"}});
      for (const QueueGauges& q : queues) {
        const int64_t v = (q.*(f.field))[r.index];
        if (r.index == core::kQueueGpuMemory) {
          family.Add({q.queue}, v * kMiB);
        } else {
          family.Add({q.queue}, Gpus(v));
        }
      }
    }
  }
  auto pods = out.Family({"tessera_scheduler_queue_pending_pods",
                          MetricType::kGauge,
                          "Pods of the queue waiting to be scheduled.",
                          {"queue"}});
  for (const QueueGauges& q : queues) pods.Add({q.queue}, q.pending_pods);
}

// Per queue or per namespace (`whose`), the GPU time granted: the integral of what its pods were
// allocated, by exact fraction.
void WriteGranted(const std::map<std::string, std::array<double, core::kQueueResourceCount>>& g,
                  const std::string& whose, Exposition& out) {
  struct Resource {
    const char* name;      // after tessera_scheduler_<whose>_
    const char* quantity;  // what is granted
    const char* unit;      // of the allocation, x seconds
    int index;
    double scale;  // resource unit -> the metric's
  };
  const Resource resources[] = {
      {"granted_gpu_seconds_total", "GPU time",
       "GPUs allocated (a share counting its fraction of its GPU)", core::kQueueGpu, 1.0 / 1000},
      {"granted_gpu_memory_byte_seconds_total", "GPU memory time", "GPU memory allocated (bytes)",
       core::kQueueGpuMemory, static_cast<double>(kMiB)},
      {"granted_gpu_compute_seconds_total", "GPU compute time",
       "GPU compute allocated, in GPUs (1 = all SMs of one GPU)", core::kQueueGpuCompute,
       1.0 / 1000},
  };
  for (const Resource& r : resources) {
    auto family = out.Family({StrCat("tessera_scheduler_", whose, "_", r.name),
                              MetricType::kCounter,
                              StrCat(r.quantity, " granted to the ", whose, "'s pods: ", r.unit,
                                     " x seconds, the time integral of their allocation"),
                              {whose}});
    for (const auto& [key, v] : g) family.Add({key}, v[r.index] * r.scale);
  }
}

void WriteScaleUp(const std::vector<ScaleUpGauges>& templates, int64_t waiting, Exposition& out) {
  auto nodes = out.Family({"tessera_scheduler_scale_up_nodes",
                           MetricType::kGauge,
                           "Scale-up signal: nodes of this template that would let the most "
                           "waiting pods run (0: none helps, or nothing waits).",
                           {"template"}});
  for (const ScaleUpGauges& t : templates) nodes.Add({t.template_name}, t.nodes);
  auto pods = out.Family({"tessera_scheduler_scale_up_pods",
                          MetricType::kGauge,
                          "Scale-up signal: waiting pods that those nodes of this template would "
                          "run.",
                          {"template"}});
  for (const ScaleUpGauges& t : templates) pods.Add({t.template_name}, t.pods);
  out.Scalar({"tessera_scheduler_scale_up_waiting_pods", MetricType::kGauge,
              "Waiting pods the scale-up signal was last computed for."},
             waiting);
}

}  // namespace

void SchedulerMetrics::Write(Exposition& out) const {
  WriteCounters(*this, out);
  WriteHistograms(*this, out);
  WritePending(*this, out);
  WriteHealth(*this, out);
  std::lock_guard<std::mutex> lock(mu_);
  prometheus::WriteBuildInfo(out, build_);
  WriteNodes(nodes_, out);
  WriteQueues(queues_, out);
  WriteGranted(granted_, "queue", out);
  WriteGranted(granted_by_namespace_, "namespace", out);
  if (scale_up_) WriteScaleUp(scale_up_->first, scale_up_->second, out);
  if (extra_) extra_(out);
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
