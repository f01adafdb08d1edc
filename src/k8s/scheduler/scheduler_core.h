// The scheduler's decisions: one thread's state machine between what the API server says (nodes
// and pods, from the informers) and what the engine decides. No I/O and no threads of its own: it
// hands decisions to a Binder and failures to a Reporter, and is told the outcome of binds later,
// so that tests can drive it step by step with fakes.
//
// It routes events and owns the cycle (pop a pod or a ready gang, decide, bind or tell it why
// not), and wires together one owner per concern:
//   PodTracker      each pod's stage (pod_tracker.h has the state diagram), and the counts
//   SchedulingQueue active / back-off / unschedulable pods, and when each is tried again
//   GangAssembler   gang membership and when a gang is ready
//   GangRestarts    gangs restarted whole after a member was lost to a GPU fault
//   PodGroups       upstream PodGroups: a member pod's gang, said as the annotations say one
//   ClusterLedger   the engine over the nodes, what every pod holds, allowed nodes, what-ifs
//   QueueBook       what each queue holds and asks: the scheduling queue's order between
//                   queues (DRF), queue limits, reclaim, per-queue metrics
//   NoFitChain      the answers to "this pod does not fit now", in order (no_fit.h):
//                   preemption (preemption_answer.h), defragmentation (defrag_answer.h), the
//                   scale-up signal (scale_up_answer.h), reservations with backfill
//                   (reservation_answer.h); and the room they keep
//   RuntimeLimits   declared run times enforced (with reservations on)
//   DraAllocator    DRA mode: pods whose GPUs come from ResourceClaims
//   Binder          writing a decision (classic mode: the assignment annotation)
//
// Invariants (each kept by its owner, see their comments):
//  - the engine holds exactly the bound pods and those this scheduler is binding (ClusterLedger);
//  - a placement is given up only when the API server says the pod is gone, bound elsewhere, or
//    the bind failed for good; a bind answered 409 keeps its GPUs until the watch says what
//    happened (or bind_conflict_timeout passes);
//  - a pod is retried after a failure only when something changed that could make it fit or
//    after retry_period, at most once per retry_min_interval (SchedulingQueue): never a busy loop;
//  - a pod whose input is invalid gets one report naming the field, and waits for its next update.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/backoff.h"
#include "core/engine.h"
#include "k8s/scheduler/binder.h"
#include "k8s/scheduler/claim_binder.h"
#include "k8s/scheduler/defrag_answer.h"
#include "k8s/scheduler/dra_allocator.h"
#include "k8s/scheduler/gang_assembler.h"
#include "k8s/scheduler/gang_restarts.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/no_fit.h"
#include "k8s/scheduler/objects.h"
#include "k8s/scheduler/pod_groups.h"
#include "k8s/scheduler/pod_tracker.h"
#include "k8s/scheduler/preemption_answer.h"
#include "k8s/scheduler/queue.h"
#include "k8s/scheduler/queue_book.h"
#include "k8s/scheduler/reporter.h"
#include "k8s/scheduler/reservation_answer.h"
#include "k8s/scheduler/runtime_limits.h"
#include "k8s/scheduler/scale_up_answer.h"
#include "records/dra_names.h"

namespace tessera::k8s {

struct SchedulerCoreOptions {
  std::string scheduler_name = "tessera";
  std::string policy = std::string(core::kDefaultPolicy);
  uint64_t seed = 1;
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  // Hot spares: whole GPUs of each NVLink domain kept for gang replacements
  // (core::Engine::KeepSpares); published on the nodes for tessera status. 0: none.
  int spare_gpus_per_domain = 0;
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
  // DRA mode: pods with spec.resourceClaims get devices of this driver (EnableDra).
  bool dra = false;
  std::string dra_driver = std::string(records::dra::kDriverName);
  // The scale-up signal (scale_up_signal.h): off without templates.
  ScaleUpSignalOptions scale_up;
  // The defragmentation executor (defrag_executor.h): off unless enabled; needs preemption's
  // writer (EnablePreemption) for its evictions and nominations.
  DefragExecutorOptions defrag;
  // Reservations with backfill (reservation_answer.h): off unless max_reservations > 0. With
  // them on, declared run times are enforced (runtime_limits.h): a pod running this long past
  // its declared run time is evicted (through preemption's writer, EnablePreemption).
  core::ReservationOptions reservations;
  std::chrono::seconds max_runtime_grace{30};
  // A gang restarting whole (gang_restarts.h): an old member's eviction a disruption budget
  // refused is tried again this often.
  std::chrono::milliseconds gang_restart_retry{5'000};
};

class SchedulerCore : private NoFitHost {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  using Stage = k8s::Stage;

  // The policy must exist (core::CreatePolicy). `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<SchedulerCore>> Create(SchedulerCoreOptions options,
                                                               Binder* binder, Reporter* reporter,
                                                               SchedulerMetrics* metrics,
                                                               Clock clock = nullptr);

  // Preemption and reclaim (preemption_answer.h), and defragmentation's moves, which nominate and
  // evict through the same writer: off until a writer is given.
  void EnablePreemption(PreemptionWriter* writer) { preemption_.Enable(writer); }
  // The Queue objects (queues.tessera.dev); `known`: the list has been read. Nothing is decided
  // while a call said not known (default: known; the live scheduler says not known until its first
  // list): a Queue's namespaces and limits bind every pod that names it, and a pod decided before
  // they are read would pass them (an intruder's pod created before the scheduler started was
  // placed on a team's queue).
  void SetQueues(std::vector<core::QueueSpec> specs, bool known);
  // PodDisruptionBudgets (disruption_budgets.h), which preemption plans with. Without a call to
  // SetBudgetsKnown(false) there are none; after it, no preemption until SetBudgetsKnown(true).
  void OnBudget(Change change, std::shared_ptr<const BudgetInfo> budget);
  void SetBudgetsKnown(bool known) { preemption_.preemption().SetBudgetsKnown(known); }

  void OnNode(Change change, std::shared_ptr<const NodeInfo> node);
  void OnPod(Change change, std::shared_ptr<const PodInfo> pod);
  // An upstream PodGroup (pod_groups.h): its pods are resolved again (a missing group appearing
  // lets them go on).
  void OnPodGroup(Change change, std::shared_ptr<const PodGroupInfo> group);
  // Whether the PodGroups have been listed: until then a pod whose PodGroup is not seen waits
  // without a report (default: known; the live scheduler sets false until its first list).
  void SetPodGroupsKnown(bool known);
  void OnBindResult(const std::string& key, uint64_t attempt, const absl::Status& status);
  // DRA mode (dra_allocator.h): claims are written by `binder`. Call before the first event.
  void EnableDra(ClaimBinder* binder);
  bool dra_enabled() const { return dra_ != nullptr; }
  void OnSlice(Change change, std::shared_ptr<const dra::SliceInfo> slice);
  void OnDeviceClass(Change change, std::shared_ptr<const dra::ClassInfo> device_class);
  void OnClaim(Change change, std::shared_ptr<const dra::ClaimInfo> claim);
  // Slices, classes and claims have each listed once (DRA mode waits for them too).
  void SetDraSynced() { dra_synced_ = true; }
  // Scheduling starts once both caches have listed once (and the Queues, SetQueues).
  void SetSynced(bool nodes, bool pods);
  bool synced() const {
    return nodes_synced_ && pods_synced_ && queues_known_ && (!dra_ || dra_synced_);
  }

  // Decides up to max_pods_per_cycle pods (a gang counts its members). Returns how many were
  // tried. Does nothing before synced().
  int ScheduleSome();
  // True while pods are queued and ready to try.
  bool HasReadyWork() const { return synced() && !queue_.active_empty(); }
  // When the next timed retry is due (nullopt: nothing timed).
  std::optional<std::chrono::steady_clock::time_point> NextWakeup() const;

  // Publishes per-node GPU gauges to the metrics.
  void PublishMetrics();

  // For tests and logs.
  const core::Engine& engine() const { return ledger_.engine(); }
  std::optional<Stage> StageOf(const std::string& key) const;
  // The placement the engine holds for a pod, as an assignment (node and grants).
  std::optional<records::Assignment> HeldFor(const std::string& key) const;
  const Preemption& preemption() const { return preemption_.preemption(); }
  QueueBook& queue_book() { return book_; }
  const ScaleUpSignal& scale_up() const { return scale_up_.signal(); }
  const MoveHolds& move_holds() const { return defrag_.holds(); }
  // The reservations held now (reservation_answer.h).
  const std::vector<core::Reservation>& reservations() const {
    return reservations_.reservations().reservations();
  }
  size_t queued() const { return queue_.active_size(); }

 private:
  using Pod = PodTracker::Pod;

  SchedulerCore(SchedulerCoreOptions options, Binder* binder, Reporter* reporter,
                SchedulerMetrics* metrics, Clock clock);

  void Forget(const std::string& key);
  // Counts what `key` holds in the engine in its queue (QueueBook::Held).
  void CountHeld(const std::string& key);
  // A pod's stage changed (PodTracker's listener): counts it as waiting in its queue or not.
  void OnStage(const std::string& key, const Pod* pod);
  // Where a pod stands in its queue: creation time, then first seen.
  static SchedulingQueue::Arrival ArrivalOf(const Pod& s);
  // Gives up what the pod holds; a release of held resources may let pending pods fit.
  void Release(const std::string& key);
  void AccountBound(const std::string& key, Pod& s);
  void Enqueue(const std::string& key, Pod& s);
  void Dequeue(const std::string& key, Pod& s);
  void Confirm(Pod& s);
  // `gang`: the member's gang, for its assignment record (nullptr: not a gang member).
  void StartBind(const std::string& key, Pod& s, const core::Placement& placement,
                 const records::GangRecord* gang = nullptr);
  void PlaceOne(const std::string& key, Pod& s);
  void PlaceWithClaims(const std::string& key, Pod& s);
  void StartClaimBind(const std::string& key, Pod& s, const DraAllocator::Decision& decision);
  // Pods the engine found no room for now (kNoFitNow; `reasons`: the engine's, per pod): the
  // chain's answer, else they wait with the engine's reason and the answers' notes.
  void NoFitNow(const NoFit& unfit, const std::vector<std::string>& reasons);
  // A gang's turn: its bad members told, and when it is ready its pending members placed
  // (PlaceGang). Returns the members tried.
  int TryGang(const std::string& gang_key);
  // The pending members of a ready gang: placed together (the engine, or DRA claims), or told why
  // not; the chain's answer when none fits now.
  void PlaceGang(const std::string& gang_key, const GangAssembler::Round& round);
  void Report(Pod& s, std::string_view reason, const std::string& message);
  // Condition PodGroupInitiallyScheduled on `member`'s PodGroup, when it has one (pod_groups.h
  // says when it is written).
  void ReportGroup(const PodInfo& member, bool scheduled, const std::string& message);
  void MarkUnschedulable(const std::string& key, Pod& s, const std::string& reason);
  void FlushRetries(std::chrono::steady_clock::time_point now);
  // Reservations (reservation_answer.h): what `key` holds in the engine now, told to them.
  void TellStarted(const std::string& key, bool placed_now);
  // Reservations brought up to date with the waiting pods in the queue's order.
  void RefreshReservations();
  // Writes each node's hot spares where they changed (Reporter::ReportSpares).
  void PublishSpares();
  // Pods past their declared run time evicted (runtime_limits.h).
  void EnforceRuntimes();
  // A bound member of a gang with tessera.dev/gang-restart: all is leaving (`leaving`: its latest
  // object): when it was lost to a GPU fault, the gang's restart starts and its other members are
  // evicted (gang_restarts.h).
  void RestartGangOf(const PodInfo& leaving);
  // Old members of restarting gangs that are still running evicted again (a budget refused).
  void EvictRestartingAgain();

  // NoFitHost: what the answers may use.
  TimePoint Now() override { return clock_(); }
  const UnixClock& unix_clock() const override { return unix_clock_; }
  ClusterLedger& ledger() override { return ledger_; }
  core::QueueSet& queues() override { return book_.set(); }
  const PodTracker& pods() const override { return pods_; }
  Reporter& reporter() override { return *reporter_; }
  SchedulerMetrics* metrics() override { return metrics_; }
  const std::string& scheduler_name() const override { return options_.scheduler_name; }
  std::unique_ptr<core::Policy> NewPolicy() const override;
  const std::vector<core::TopologyLevel>& levels() const override { return options_.levels; }
  void MarkUnschedulable(const std::string& key, const std::string& message) override {
    MarkUnschedulable(key, pods_.Get(key), message);
  }
  void Bind(const std::string& key, const core::Placement& placement) override {
    StartBind(key, pods_.Get(key), placement);
  }

  SchedulerCoreOptions options_;
  Binder* binder_;
  Reporter* reporter_;
  SchedulerMetrics* metrics_;
  Clock clock_;
  UnixClock unix_clock_;  // on clock_

  QueueBook book_;
  PodTracker pods_;
  SchedulingQueue queue_;
  GangAssembler gangs_;
  PodGroups groups_;
  ClusterLedger ledger_;
  // The "does not fit" answers (no_fit.h), in chain_ in this order.
  PreemptionAnswer preemption_;
  DefragAnswer defrag_;
  ScaleUpAnswer scale_up_;
  ReservationAnswer reservations_;
  NoFitChain chain_;
  RuntimeLimits runtime_;
  GangRestarts restarts_;
  // Bound members of gangs with gang-restart all seen leaving, not (yet) lost to a fault.
  std::set<std::string> leaving_;
  std::set<std::string> conflicts_;  // kBindConflict pods, until their retry_at
  std::string spare_warning_;        // ClusterLedger::SpareRuleWarning, as last logged
  absl::flat_hash_map<std::string, std::string> warned_;  // last warning per pod
  // Per node: its tessera.dev/spare-gpus annotation as last seen or written (PublishSpares),
  // and the nodes to compare again with the engine's spares (seen since: a new node, a changed
  // annotation), beside those whose spares the engine changed.
  absl::flat_hash_map<std::string, std::string> spares_published_;
  absl::flat_hash_set<std::string> spares_to_check_;
  std::unique_ptr<DraAllocator> dra_;
  ClaimBinder* claim_binder_ = nullptr;
  bool dra_synced_ = false;
  bool groups_known_ = true;
  bool queues_known_ = true;
  bool nodes_synced_ = false;
  bool pods_synced_ = false;
  uint64_t seen_node_changes_ = 0;  // the ledger's counts last acted on
  uint64_t seen_holdings_moved_ = 0;
};

}  // namespace tessera::k8s
