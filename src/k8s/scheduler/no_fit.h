// "This pod does not fit now": the answers the scheduler tries, in order, before a pod (or the
// pending members of a gang) waits as unschedulable. As kube-scheduler's PostFilter plugins: the
// answers are asked one after the other until one takes the pods; each lives in its own file,
// owns its state (what it planned, the room it keeps) and hears the scheduler's events through
// this interface. SchedulerCore routes the events and owns the cycle; it decides nothing here.
//
// The chain, in the order SchedulerCore asks it (its constructor builds it):
//   1. preemption      (preemption_answer.h) evicts pods the rules let it evict (lower priority
//                      in the pod's queue; other queues' pods over their deserved share) and
//                      nominates the pod to the room made;
//   2. defragmentation (defrag_answer.h) moves a few pods of any priority not above the pod's
//                      (evicted; their replacements go to destinations held for them), once the
//                      pod has waited `defrag.after`;
//   3. scale-up signal (scale_up_answer.h) says which node template would let the waiting pods
//                      run; it takes no pod itself and speaks for all waiting pods at once, once
//                      per interval (EndCycle).
//   4. reservations    (reservation_answer.h, off unless configured) takes no pod: its part is
//                      the room it keeps (Admit) for the big pods that waited longest; a pod
//                      whose room is reserved hears where in its note.
// Why this order: the least disruptive answer that the cluster's own rules allow comes first.
// Preemption takes only what the pod outranks and needs nothing else; defragmentation disturbs
// pods the pod does not outrank (they come back elsewhere), so it is tried only when preemption
// has no plan; new nodes cost minutes and money, so the signal speaks when nothing in the
// cluster helps. An answer that needs what an earlier one decided (defragmentation records its
// nominations in preemption's registry so that one guard keeps all nominated room) takes that
// answer by reference when the chain is built.
//
// What an answer does with the pods it takes (Answer returns Answered): whatever it decided
// (nominations, evictions, Events), and then it marks every pending pod unschedulable
// (NoFitHost::MarkUnschedulable) with its own message: they wait for what it started. An answer
// that passes may leave a note ("; preemption would not help: ..."). When no answer takes the
// pods, each answer that was asked hears Unanswered (preemption withdraws a nomination it no
// longer stands by), and the pods wait with the engine's reason followed by every note.
//
// Room kept. Room an answer made for a pod stays that pod's until it lands (a nomination; a moved
// pod's held destination). Every placement the engine commits (not DRA claims' placements) is
// shown to every answer (Admit) before it binds, in chain order; an answer refuses a placement
// that takes room it keeps, and for a single pod it may steer it instead: name the nodes where it
// keeps nothing from the pod, which is then decided again there (inside every set steered to so
// far) and shown to every answer again; each answer steers a pod once. A steering refusal goes
// before a plain one (a pod that can go around kept room does, rather than waiting), and of plain
// refusals the first in chain order is the one the pod is told. A refused placement is taken back.
// A single pod refused (and steered nowhere it fits) does not fit now: the chain is asked for it,
// with the refusal as its reason, as kube-scheduler counts nominated pods as used room before its
// PostFilter plugins (preemption plans with the earlier nominations' room claimed;
// defragmentation with everything promised taken as done).
//
// Adding an answer:
//   - a class deriving NoFitAnswer in its own file (foo_answer.h/.cc), owning its state, built by
//     SchedulerCore's constructor with the NoFitHost (and any earlier answer it builds on);
//   - Answer: take the pods (mark each unschedulable with what they wait for) or pass, with a
//     note when the pod's message should say why this answer could not help;
//   - if it keeps room: Admit (refuse, or steer a single pod around it), PlaceKept if particular
//     pods have room kept for them, StartCycle to let room expire, NextWakeup for when it does;
//   - OnPod / Forget for the pods it tracks;
//   - its place in SchedulerCore's chain (Add order), with the reason in the list above;
//   - tests in its own foo_answer_test.cc through SchedulerCore with the recording fakes.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/cluster.h"
#include "core/model/placement.h"
#include "core/policy/policy.h"
#include "core/queues/queue_set.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/objects.h"
#include "k8s/scheduler/pod_tracker.h"
#include "k8s/scheduler/reporter.h"
#include "k8s/scheduler/unix_clock.h"

namespace tessera::k8s {

// A pod, or the pending members of one gang, that the engine found no room for now
// (core::Outcome::kNoFitNow).
struct NoFit {
  std::string what;                     // the pod's key, or the gang's "ns/name"
  std::vector<std::string> keys;        // the pods waiting, in member order (oldest first)
  std::vector<const PodInfo*> members;  // the same pods
  std::vector<std::string> running;     // a gang's members placed earlier (their keys)
  std::string reason;                   // the engine's reason
  bool gang() const { return members[0]->request.gang.has_value(); }
};

// What the scheduler lends its answers (SchedulerCore implements it). Valid for the answers'
// lifetime; called on the scheduler thread only.
class NoFitHost {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~NoFitHost() = default;

  virtual TimePoint Now() = 0;
  // Now()'s clock in Unix seconds, for what is written down (records, conditions).
  virtual const UnixClock& unix_clock() const = 0;
  // The engine over the nodes and what every pod holds; what-ifs go through it.
  virtual ClusterLedger& ledger() = 0;
  // The queues (queues.tessera.dev) with what each holds and asks (QueueBook::set).
  virtual core::QueueSet& queues() = 0;
  virtual const PodTracker& pods() const = 0;
  virtual Reporter& reporter() = 0;
  virtual SchedulerMetrics* metrics() = 0;  // may be null
  virtual const std::string& scheduler_name() const = 0;
  // The scheduler's policy, made afresh (a plan replays the cluster on an engine of its own), and
  // its topology levels.
  virtual std::unique_ptr<core::Policy> NewPolicy() const = 0;
  virtual const std::vector<core::TopologyLevel>& levels() const = 0;
  // `key`, pending, waits: PodScheduled=False with `message`; tried again when something changes.
  virtual void MarkUnschedulable(const std::string& key, const std::string& message) = 0;
  // `key`, pending, was placed at `placement` (committed in the ledger's engine): it binds there.
  virtual void Bind(const std::string& key, const core::Placement& placement) = 0;
};

class NoFitAnswer {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Verdict {
    bool answered = false;
    std::string note;  // passing: appended to the pods' message if no answer takes them
    static Verdict Answered() { return Verdict{true, ""}; }
    static Verdict Pass(std::string note = "") { return Verdict{false, std::move(note)}; }
  };
  // A placement the engine just committed, before it binds: one pod, or the members of one gang
  // placed together (a gang's pods all share one priority).
  struct Placed {
    std::span<const PodInfo* const> pods;
    std::span<const core::Placement> placements;
    bool gang = false;
  };
  struct Admission {
    std::string refused;  // "" admitted; else why the room is kept from the pods
    // With a refusal of a single pod: the nodes where this answer keeps nothing from it (it is
    // decided again there); nullopt: it waits.
    std::optional<core::NodeSet> elsewhere;
  };

  virtual ~NoFitAnswer() = default;
  virtual std::string_view name() const = 0;

  // Takes `unfit` (its pods are marked unschedulable with this answer's message) or passes.
  virtual Verdict Answer(const NoFit& unfit) = 0;
  // No answer took `unfit`, which this answer passed on just now (Answer, then this, for the same
  // pods before any other): drop what it kept for them.
  virtual void Unanswered(const NoFit& unfit) { (void)unfit; }

  // Room kept (see the file comment). Default: none.
  virtual Admission Admit(const Placed& placed) {
    (void)placed;
    return {};
  }
  // Before the engine decides for a single pod (not one with claims): room kept for this very
  // pod (a moved pod's replacement and its held destination). True: this answer placed it
  // (NoFitHost::Bind) or made it wait; the engine is not asked.
  virtual bool PlaceKept(const std::string& key, const PodInfo& pod) {
    (void)key, (void)pod;
    return false;
  }

  // The pod as the API server shows it now, bound or not, before the scheduler acts on it.
  virtual void OnPod(const std::shared_ptr<const PodInfo>& pod) { (void)pod; }
  // The pod is gone (deleted, finished).
  virtual void Forget(const std::string& key) { (void)key; }
  // A scheduling cycle starts, before any pod is tried. True when something changed that may let
  // waiting pods fit (they are tried again).
  virtual bool StartCycle(TimePoint now) {
    (void)now;
    return false;
  }
  // The cycle's pods were tried: for answers that speak for all waiting pods at once.
  virtual void EndCycle(TimePoint now) { (void)now; }
  // When this answer next needs a cycle without any event (room it keeps expiring).
  virtual std::optional<TimePoint> NextWakeup() const { return std::nullopt; }
};

// The answers in order, and the rules for asking them all (the file comment).
class NoFitChain {
 public:
  using TimePoint = NoFitAnswer::TimePoint;

  // Appends `answer` (not owned; it outlives the chain) after those added before.
  void Add(NoFitAnswer* answer) { answers_.push_back(answer); }

  struct Outcome {
    bool answered = false;
    std::string notes;  // the notes of the answers that passed, in order
  };
  // Asks each answer in order until one takes `unfit`; when none does, tells each Unanswered.
  Outcome Answer(const NoFit& unfit);

  // The engine's placement *r of a single pod (committed under `key`) shown to every answer:
  // it stands, or it is taken back and, steered, decided again (`*r` the new decision) until
  // every answer admits it. Returns why the pod waits ("" when *r stands, or does not fit); then
  // *r holds no placement.
  std::string AdmitPod(ClusterLedger& ledger, const std::string& key, const PodInfo& pod,
                       core::PlacementResult* r);
  // The members of a gang the engine placed (results in member order, committed under `keys`):
  // "" when they keep their placements, else why, and every placed member is taken back.
  std::string AdmitGang(ClusterLedger& ledger, const std::vector<std::string>& keys,
                        const std::vector<const PodInfo*>& members,
                        std::span<const core::PlacementResult> results);

  bool PlaceKept(const std::string& key, const PodInfo& pod);
  void OnPod(const std::shared_ptr<const PodInfo>& pod);
  void Forget(const std::string& key);
  bool StartCycle(TimePoint now);
  void EndCycle(TimePoint now);
  std::optional<TimePoint> NextWakeup() const;

 private:
  struct Refusal {
    std::string why;  // "" admitted by every answer
    // A steering refusal (a single pod): the nodes to decide it again in, and who steered.
    std::optional<core::NodeSet> elsewhere;
    const NoFitAnswer* by = nullptr;
  };
  // Every answer's word on `placed`: admitted; else a steering refusal by an answer not in
  // `steered` (single pods only), else the first refusal in chain order.
  Refusal Refused(const NoFitAnswer::Placed& placed, std::span<const NoFitAnswer* const> steered);

  std::vector<NoFitAnswer*> answers_;
};

}  // namespace tessera::k8s
