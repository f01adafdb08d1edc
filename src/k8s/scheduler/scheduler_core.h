// The scheduler's decisions: one thread's state machine between what the API server says (nodes
// and pods, from the informers) and what the engine decides. No I/O and no threads of its own:
// it asks SchedulerActions to bind and to report, and is told the outcome of binds later, so
// that tests can drive it step by step with a fake.
//
// What it keeps: the engine over the cluster of known nodes (rebuilt when a node's GPUs, labels,
// CPU or memory change), and per pod a state:
//
//   queued ──Place──► binding ──bind ok / watch shows it bound──► bound ──deleted/finished──► gone
//     ▲  └─no fit──► unschedulable ──(node added/changed, pod released; or every retry_period)─┘
//     └─ gang member waits (gang_waiting) until all gang-size members exist, then the gang is
//        placed all-or-nothing (Engine::PlaceGang) and bound together.
//
// Invariants:
//  - the engine holds exactly the pods that are bound (as the API server says, from their
//    tessera.dev/assignment, or CPU/memory only for pods without one) plus those this scheduler
//    placed and is binding; so a restarted scheduler, whose first list restores every bound
//    pod, never grants a GPU twice;
//  - a placement is given up only when the API server says the pod is gone, bound elsewhere, or
//    the bind failed for good; a bind answered 409 keeps its GPUs until the watch says what
//    happened (the bind may have landed);
//  - a pod is retried after a failure only when something changed that could make it fit (a node
//    added or changed, a pod released) or after retry_period, and at most once per
//    retry_min_interval: never in a busy loop;
//  - a pod whose input is invalid gets one report naming the field, and waits for its next update.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "core/engine.h"
#include "core/model/cluster.h"
#include "k8s/client/backoff.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/objects.h"
#include "k8s/scheduler/queue.h"

namespace tessera::k8s {

struct SchedulerCoreOptions {
  std::string scheduler_name = "tessera";
  std::string policy = std::string(core::kDefaultPolicy);
  uint64_t seed = 1;
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  std::chrono::milliseconds retry_min_interval{1'000};
  std::chrono::milliseconds retry_period{30'000};
  // A failure reported again with the same message bumps the Event at most this often.
  std::chrono::milliseconds report_repeat_interval{300'000};
  // A failed bind is retried after Backoff::Delay(bind_backoff, failures so far).
  Backoff::Params bind_backoff{std::chrono::milliseconds(1'000), 2.0,
                               std::chrono::milliseconds(60'000), 0.0};
  // A bind answered 409 that the watch has not explained after this long is retried.
  std::chrono::milliseconds bind_conflict_timeout{30'000};
  int max_pods_per_cycle = 512;
};

class SchedulerActions {
 public:
  virtual ~SchedulerActions() = default;
  // Binds `pod` to `node`, writing `assignment` (the tessera.dev/assignment JSON) in the same
  // request; the outcome comes back through SchedulerCore::OnBindResult(pod.key, attempt, ...).
  virtual void Bind(const PodInfo& pod, const std::string& node, const std::string& assignment,
                    uint64_t attempt) = 0;
  // Tells the pod's owner why it is not scheduled: condition PodScheduled=False with `reason`
  // ("Unschedulable" or "SchedulerError") and a FailedScheduling Event with `message`. `repeat`:
  // the same message was reported before; only the Event's count needs bumping.
  virtual void ReportFailure(const PodInfo& pod, std::string_view reason,
                             const std::string& message, bool repeat) = 0;
  // A Warning Event on `pod` (bound or not) with `reason` and `message`; no condition.
  virtual void ReportWarning(const PodInfo& pod, std::string_view reason,
                             const std::string& message) = 0;
};

enum class Change { kAdded, kUpdated, kDeleted };

class SchedulerCore {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  enum class Stage {
    kNew,
    kIgnored,   // not ours, or not schedulable now (deleting, scheduling gates)
    kBadInput,  // input_error: reported, waits for an update
    kQueued,
    kUnschedulable,  // waits for a change or retry_period
    kGangWaiting,    // waits for the rest of its gang
    kBackoff,        // a bind failed; retried at retry_at
    kBinding,        // placed, bind in flight
    kBindConflict,   // bind got 409; placement kept until the watch explains
    kBound,
  };

  // The policy must exist (core::CreatePolicy). `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<SchedulerCore>> Create(SchedulerCoreOptions options,
                                                               SchedulerActions* actions,
                                                               SchedulerMetrics* metrics,
                                                               Clock clock = nullptr);

  void OnNode(Change change, std::shared_ptr<const NodeInfo> node);
  void OnPod(Change change, std::shared_ptr<const PodInfo> pod);
  void OnBindResult(const std::string& key, uint64_t attempt, const absl::Status& status);
  // Scheduling starts once both caches have listed once.
  void SetSynced(bool nodes, bool pods);
  bool synced() const { return nodes_synced_ && pods_synced_; }

  // Decides up to max_pods_per_cycle pods (a gang counts its members). Returns how many were
  // tried. Does nothing before synced().
  int ScheduleSome();
  // True while pods are queued and ready to try.
  bool HasReadyWork() const { return synced() && !queue_.empty(); }
  // When the next timed retry is due (nullopt: nothing timed).
  std::optional<std::chrono::steady_clock::time_point> NextWakeup() const;

  // Publishes per-node GPU gauges and pending counts to the metrics.
  void PublishMetrics();

  // For tests and logs.
  const core::Engine& engine() const { return *engine_; }
  std::optional<Stage> StageOf(const std::string& key) const;
  // The placement the engine holds for a pod, as an assignment (node and grants).
  std::optional<records::Assignment> HeldFor(const std::string& key) const;
  size_t queued() const { return queue_.size(); }

 private:
  struct Held {
    std::string node;
    // The GPUs, as the tessera.dev/assignment record names them (records/assignment.h converts
    // to and from engine placements); empty gpus for a pod without GPUs.
    records::Assignment gpus;
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
    // Non-empty: the pod's GPUs cannot be known (its assignment is unreadable or names another
    // node); they are not in `gpus`, and its node takes no GPU pods while it is there.
    std::string unreadable;
    bool operator==(const Held&) const = default;
  };
  struct PodState {
    std::shared_ptr<const PodInfo> info;
    Stage stage = Stage::kNew;
    std::optional<Held> held;  // what this pod holds (or should hold) in the engine
    bool accounted = false;    // held is applied to the engine
    uint64_t attempt = 0;
    bool counted = false;  // counted as scheduled
    std::chrono::steady_clock::time_point first_seen;
    std::chrono::steady_clock::time_point retry_at;
    int bind_failures = 0;
    uint64_t tried_epoch = 0;  // change_epoch_ when it was last found unschedulable
    std::string gang;          // gang key it is a member of ("" none)
    std::string reported;      // last message reported
    std::chrono::steady_clock::time_point reported_at;
    std::string blocks;  // the node whose GPUs it blocks ("" none): see BlockGpus
    std::string warned;  // the last warning reported about its assignment
  };
  struct Gang {
    int32_t size = 0;
    std::set<std::string> members;  // pod keys
    bool waiting_reported = false;
  };

  SchedulerCore(SchedulerCoreOptions options, SchedulerActions* actions, SchedulerMetrics* metrics,
                Clock clock);

  void Rebuild();
  void Forget(const std::string& key);
  void Release(PodState& s);
  bool Restore(const std::string& key, PodState& s);
  void AccountBound(const std::string& key, PodState& s);
  std::optional<Held> HeldFromPod(const PodInfo& pod) const;
  Held HeldFromPlacement(const core::Placement& p) const;
  // A bound pod whose GPUs cannot be accounted (`why`) keeps `node` from taking GPU pods until it
  // is gone or readable: its GPUs are never treated as free. An Event and the metrics say so.
  void BlockGpus(const std::string& key, PodState& s, const std::string& node,
                 const std::string& why);
  void UnblockGpus(const std::string& key, PodState& s);
  void Enqueue(const std::string& key, PodState& s);
  void Dequeue(const std::string& key, PodState& s);
  void JoinGang(const std::string& key, PodState& s);
  void LeaveGang(const std::string& key, PodState& s);
  void Confirm(PodState& s);
  void StartBind(const std::string& key, PodState& s, const core::Placement& placement);
  void PlaceOne(const std::string& key, PodState& s);
  // The nodes a pod may use (taints, node selector, affinity). An empty set comes with the
  // reason, for the pod's Unschedulable condition.
  struct AllowedSet {
    core::NodeSet nodes;
    std::string none;
  };
  // `pod`'s allowed set, shared by every pod with the same constraints and kept until the cluster
  // is rebuilt (the engine places all of them through its index); nullptr when `pod` may use
  // every node.
  std::shared_ptr<const AllowedSet> Allowed(const PodInfo& pod);
  int TryGang(const std::string& gang_key);
  void Report(PodState& s, std::string_view reason, const std::string& message);
  void MarkUnschedulable(const std::string& key, PodState& s, const std::string& reason);
  // Something changed that could make an unschedulable pod fit.
  void RequestRetry() { ++change_epoch_; }
  // True if some unschedulable pod was last tried before the latest change.
  bool ChangeUnseen();
  void FlushRetries(std::chrono::steady_clock::time_point now);

  SchedulerCoreOptions options_;
  SchedulerActions* actions_;
  SchedulerMetrics* metrics_;
  Clock clock_;

  std::map<std::string, std::shared_ptr<const NodeInfo>> nodes_;  // by name, sorted
  bool cluster_dirty_ = true;
  int tainted_nodes_ = 0;  // nodes in the engine's cluster with NoSchedule/NoExecute taints
  // Allowed sets by the pods' constraints and whether they ask GPUs; cleared when the cluster is
  // rebuilt or the GPU-blocked nodes change.
  absl::flat_hash_map<std::pair<NodeConstraints, bool>, std::shared_ptr<const AllowedSet>>
      allowed_sets_;
  // Nodes whose GPUs take no new pods, and the bound pods that block them (BlockGpus).
  std::map<std::string, std::set<std::string>> gpu_blocked_;
  std::unique_ptr<core::Cluster> cluster_;
  std::unique_ptr<core::Engine> engine_;

  absl::flat_hash_map<std::string, PodState> pods_;
  absl::flat_hash_map<std::string, Gang> gangs_;
  SchedulingQueue queue_;
  std::set<std::string> unschedulable_;
  std::set<std::string> delayed_;  // kBackoff and kBindConflict, checked at retry_at
  uint64_t change_epoch_ = 0;      // bumped by every change that could free room
  uint64_t checked_epoch_ = 0;     // changes up to here have been seen by every unschedulable pod
  std::chrono::steady_clock::time_point last_flush_;
  bool nodes_synced_ = false;
  bool pods_synced_ = false;
};

std::string_view StageName(SchedulerCore::Stage stage);

}  // namespace tessera::k8s
