// What each queue (queues.tessera.dev) holds and asks, as the live scheduler sees it: the one
// core::QueueSet that the scheduling queue orders by (dominant-resource fairness, QueueSet::Pick),
// that preemption plans with (reclaim) and that /metrics reports. The scheduler thread tells it,
// per pod, what the pod holds in the engine and what it asks while it waits; the book keeps what
// it counted for each pod so that a change replaces exactly that (no drift).
//
// Invariants (kept by SchedulerCore, which calls Held and Waiting at every change):
//  - allocated: per queue, the sum of UsageOf over the pods the engine holds (bound, binding,
//    bind-conflict), a share counted as its fraction of its GPU;
//  - pending: per queue, DemandOf over the pods waiting (queued, unschedulable, back-off, gang
//    members waiting), shares with a memory ask counted against the largest GPU of the cluster
//    when they were counted;
//  - capacity: every GPU of the engine's live nodes;
//  - by namespace: the same allocations summed by the pods' namespace (the key's part before '/'),
//    for the per-namespace granted GPU time.
//  - usage (fair share that remembers, core/queues/usage_history.h): with a half-life set, the
//    set's clock is moved to now (the injected clock, wall time by default) before every change
//    of what a queue holds and before every report, so each holding counts for the time it was
//    held; usage read back from Queue objects (RestoreUsage) joins the history kept here.
// Not thread-safe: the scheduler thread owns it; Publish hands a copy to the metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/model/cluster.h"
#include "core/model/request.h"
#include "core/queues/queue_set.h"
#include "core/queues/resources.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/objects.h"
#include "records/queue.h"

namespace tessera::k8s {

class QueueBook {
 public:
  // Milliseconds since the Unix epoch (records/queue.h writes the usage's time in it).
  using Clock = std::function<int64_t()>;
  QueueBook();
  void set_clock(Clock clock) { clock_ = std::move(clock); }

  // The usage half-life (queues.usageHalfLife); 0, the default, keeps no history.
  void SetHalfLife(int64_t half_life_ms) { set_.SetHalfLife(half_life_ms); }
  // A queue's usage as a Queue object's status has it (QueueSet::RestoreUsage's rule); false
  // when not taken.
  bool RestoreUsage(const records::QueueUsageStatus& usage);
  // Every queue's usage now, to write back (empty without a half-life).
  std::vector<records::QueueUsageStatus> UsageNow();

  // The Queue objects; `known`: their list has been read (until then, and while none exist,
  // every queue a pod names is implicit: nothing deserved, no limit).
  void SetSpecs(std::vector<core::QueueSpec> specs, bool known);
  // The cluster's GPUs (after node changes).
  void SetCluster(const core::Cluster& cluster);

  // What `key` (of `queue`), a pod holding GPUs, holds in the engine now (zero while it is not
  // accounted there, e.g. its node is not in the engine yet); "" queue: it holds no GPUs.
  void Held(const std::string& key, const std::string& queue, const core::QueueResources& usage);
  // `key` waits for `request` in `queue`; nullptr: it does not wait (any more).
  void Waiting(const std::string& key, const std::string& queue, const core::PodRequest* request);
  void Forget(const std::string& key);
  // Every pod counted as holding GPUs (to recount after node changes moved holdings).
  std::vector<std::string> HeldKeys() const;

  // What `request` will hold (DemandOf against the largest GPU).
  core::QueueResources DemandOf(const core::PodRequest& request) const;
  // Why `pods` (one pod, or the members of a gang placed together: of the first one's queue) may
  // not be placed now ("" they may): their queue is unusable, does not admit a pod's namespace,
  // or they would take it (or an ancestor) over its limit.
  std::string Refusal(std::span<const PodInfo* const> pods);

  core::QueueSet& set() { return set_; }
  // Per-queue rows for /metrics.
  std::vector<QueueGauges> Gauges();
  // What each namespace's pods hold (namespaces that hold something), by name.
  std::vector<NamespaceGauges> Namespaces() const;

 private:
  struct Counted {
    std::string queue;
    core::QueueResources amount;
  };
  // The usage's clock to now (with a half-life).
  void Tick();

  core::QueueSet set_;
  Clock clock_;
  int64_t largest_gpu_mib_ = 0;
  absl::flat_hash_map<std::string, Counted> held_;
  absl::flat_hash_map<std::string, core::QueueResources> by_namespace_;  // of held_
  absl::flat_hash_map<std::string, Counted> waiting_;
};

}  // namespace tessera::k8s
