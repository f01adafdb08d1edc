// Preemption and reclaim in the live scheduler: when a pod does not fit, which running pods to
// evict so that it does (core/preemption/planner.h decides, with the engine's what-ifs and the
// queues' rules), and keeping the room made for it.
//
// For a pod that does not fit now (the first answer of the scheduler's "does not fit" chain,
// preemption_answer.h, which carries out what is decided here):
//  1. The planner is asked, given every bound pod the scheduler accounts (their queues from
//     tessera.dev/queue, priorities from spec.priority; pods with a deletionTimestamp, or evicted
//     by us in the last kEvictingFor, count as leaving; pods whose eviction a disruption budget
//     refused lately are no candidates) and the Queues (queues.tessera.dev; without any, every
//     queue is implicit: same-queue priority preemption only), and the PodDisruptionBudgets
//     (disruption_budgets.h): a pod is under the budget the Eviction API would check, which
//     allows status.disruptionsAllowed evictions less those of our evictions its status does
//     not show yet; the planner counts every victim of the plan against it and goes around
//     pods it protects. No plan is made before the budgets are listed (SetBudgetsKnown).
//  2. With a plan: the pod is nominated (status.nominatedNodeName = the node), the victims are
//     evicted through the Eviction API (the API server honours graceful termination, and
//     refuses an eviction a budget no longer allows: the last guard, for a budget that changed
//     since the plan; the refused pod is then no candidate for kEvictingFor) and get a Warning
//     Event "Preempted" naming the pod they make room for; the pod is told (PodScheduled=False)
//     that it waits for them. When they are gone the pod is retried (their release is a change) and
//     lands on the room.
//  3. Without one: nobody is evicted; the pod's message says why preemption would not help.
//
// Many pods at once. Plans are made one after another in a scheduling cycle (every waiting pod of
// a queue and priority is tried in the same cycle), each seeing the earlier ones as decided, as
// kube-scheduler counts nominated pods as used room: the pods leaving on a node (terminating or
// evicted by us) whose room the pods nominated there earlier need (of higher priority, or equal
// and nominated first) are claimed by them (Claimed: the fewest that let those nominations fit)
// and are neither candidates nor room for the next plan, which evicts its own victims at once;
// the nominated pods of the pod's queue count with it for the reclaim rule, and the victims'
// queues count their pods already leaving as gone, so the plans together never take a queue
// below its deserved share. Example: queue tb owed 4 GPUs, queue ta holding all 8 of one node:
// 4 waiting tb pods get 4 victims and 4 nominations in one cycle, not one per graceful
// termination. A plan must leave the earlier nominations on its nodes their room (free room they
// count on too); when it would not, the pod waits ("claimed by"; planning again once that pod
// has landed).
//
// The nomination keeps the room: a pod, or a gang, of lower or equal priority whose placement
// would leave the pods nominated on its node no room is not placed there (Guard); the pods
// nominated to one node must fit there together, a gang's members with its topology; of two
// nominations of equal priority the one made first keeps it. A gang's members are nominated
// each to its node and keep their room as one. A nomination whose pod finds no plan any more is
// withdrawn (status.nominatedNodeName cleared) unless room is still being made for it (pods
// leaving there beyond what the earlier nominations claim: RoomBeingMade), so that room is not
// held for nothing; a refused eviction (a budget) has every waiting pod tried again in the next
// cycle, so the pod whose plan it broke plans anew or gives up its nomination and the pods behind
// it plan again in the same cycle. Nominations come back from the API server after a restart
// (status.nominatedNodeName), and victims already terminating are awaited rather than evicted
// again, so a restart mid-preemption neither evicts twice nor loses the nomination. A nomination
// ends when its pod is bound, deleted, or planned elsewhere.
//
// Not thread-safe except PreemptionWriter implementations' result inbox (written on the client
// thread, drained on the scheduler thread).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/engine.h"
#include "core/preemption/planner.h"
#include "core/queues/queue_set.h"
#include "k8s/client/http.h"
#include "k8s/eviction/evictor.h"
#include "k8s/scheduler/disruption_budgets.h"
#include "k8s/scheduler/objects.h"
#include "k8s/scheduler/plan_inputs.h"
#include "nlohmann/json.hpp"
#include "records/queue.h"

namespace tessera::k8s {

// A Queue object (queues.tessera.dev) as the scheduler keeps it: its spec, or why it is unusable.
struct QueueInfo {
  core::QueueSpec spec;
  std::string error;
  // status.usage as the scheduler last wrote it (records/queue.h); nullopt when absent or
  // unreadable (usage_error says why).
  std::optional<records::QueueUsageStatus> usage;
  std::string usage_error;
};
std::shared_ptr<const QueueInfo> DecodeQueue(const nlohmann::json& object);

// What preemption writes on the API server.
class PreemptionWriter {
 public:
  struct Refusal {
    std::string key;  // the victim
    std::string message;
  };
  virtual ~PreemptionWriter() = default;
  // status.nominatedNodeName of `pod` ("" clears it).
  virtual void Nominate(const PodInfo& pod, const std::string& node) = 0;
  // Evicts `victim`; a refusal by a disruption budget comes back through TakeRefusals.
  virtual void Evict(const PodInfo& victim) = 0;
  // Evictions refused (disruption budgets) since the last call.
  virtual std::vector<Refusal> TakeRefusals() = 0;
};

// On the API server: a merge patch of pods/status and the Eviction API (ApiEvictor).
class ApiPreemptionWriter final : public PreemptionWriter {
 public:
  explicit ApiPreemptionWriter(AsyncClient& client) : client_(client), evictor_(client) {}
  void Nominate(const PodInfo& pod, const std::string& node) override;
  void Evict(const PodInfo& victim) override;
  std::vector<Refusal> TakeRefusals() override;

  static HttpRequest NominationRequest(const PodInfo& pod, const std::string& node);

 private:
  // Written on the client's thread, which may answer after this writer is gone: shared.
  struct Inbox {
    std::mutex mu;
    std::vector<Refusal> refusals;  // guarded by mu
  };
  AsyncClient& client_;
  ApiEvictor evictor_;
  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
};

class Preemption {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // A pod we evicted counts as leaving this long even before the watch shows it terminating;
  // a pod whose eviction was refused is no candidate for as long.
  static constexpr std::chrono::seconds kEvictingFor{30};

  // Bound pods, as the API server shows them (and our binds, once confirmed).
  void Track(std::shared_ptr<const PodInfo> pod);
  void Untrack(const std::string& key);
  // A pod not bound: its nomination as the API server shows it (after a restart).
  void Observe(std::shared_ptr<const PodInfo> pod);
  void Forget(const std::string& key);
  // PodDisruptionBudgets (policy/v1), from their informer. Returns true when the change may allow
  // an eviction that was not allowed before (a new plan may be possible).
  bool OnBudget(Change change, std::shared_ptr<const BudgetInfo> budget);
  // Whether the budgets are known (listed once). Known by default, for a scheduler that reads
  // none; the live scheduler sets false until its informer has listed.
  void SetBudgetsKnown(bool known) { budgets_known_ = known; }
  const DisruptionBudgets& budgets() const { return budgets_; }

  struct Decision {
    bool found = false;
    std::string node;  // the (first member's) node
    // Per member planned for, in member order: every member, or an elastic gang's first
    // core::PreemptionMembers (its other members get no nomination and wait for room).
    std::vector<std::string> nodes;
    std::vector<std::shared_ptr<const PodInfo>> evict;  // victims to evict now
    size_t awaited = 0;                                 // victims already leaving
    std::string reason;                                 // why not (when !found)
    // Not found because planning cannot be done yet (the budgets are not listed): a nomination
    // the pod has stays.
    bool undecided = false;
  };
  // Plans for `pod` (which did not fit) on `ledger` (its what-ifs), with `queues` (the scheduler's
  // QueueBook: what each queue holds, for reclaim); `nodes`: the nodes it may use (nullptr: any).
  // On a plan, the nomination is recorded and the victims marked as being evicted; the caller
  // writes both (PreemptionWriter).
  Decision Plan(ClusterLedger& ledger, core::QueueSet& queues, const PodInfo& pod,
                const core::NodeSet* nodes, TimePoint now);
  // The same for the pending members of a gang at once (all of one queue and priority: the first
  // member's; oldest first): whole gangs or none as victims, room for every member (in one
  // domain when the gang asks), each member nominated to its node. `running`: the keys of the
  // gang's members placed earlier; an elastic gang (or one some of whose members run) gets room
  // only for the members it lacks to reach its min, and none to grow beyond it
  // (core::PreemptionMembers).
  Decision PlanGang(ClusterLedger& ledger, core::QueueSet& queues,
                    const std::vector<const PodInfo*>& members, const core::NodeSet* nodes,
                    TimePoint now, const std::vector<std::string>& running = {});

  // Why `pod`, just placed at `placement` (committed in `ledger`'s engine), would take room
  // nominated for a pod of higher or equal priority ("" if it does not).
  std::string Guard(ClusterLedger& ledger, const PodInfo& pod, const core::Placement& placement);
  // The same for pods placed together (a gang's members, all committed; one priority): on each
  // node they use, the pods nominated there that outrank them (higher priority, or equal and
  // nominated first; never their own nominations) must still fit all at once, and the members
  // of each nominated gang together (with its topology), once the pods leaving there are gone.
  std::string Guard(ClusterLedger& ledger, std::span<const PodInfo* const> pods,
                    std::span<const core::Placement> placements);

  void NoteRefusals(const std::vector<PreemptionWriter::Refusal>& refusals, TimePoint now);
  // `pod` found no plan: its nomination, if it has one here or on the API server, ends. True when
  // there was one (the caller clears status.nominatedNodeName). Until the watch shows it
  // cleared, the old value read back does not bring it back.
  bool Withdraw(const PodInfo& pod);

  // Defragmentation (defrag_executor.h): `pod` is nominated to `node`, for which the bound pods
  // `movers` are evicted. Recorded as a preemption plan's nomination and victims are: Guard keeps
  // the room, the movers count as leaving. Returns the movers (to evict); none, and nothing
  // recorded, unless every one is a bound pod this tracks.
  std::vector<std::shared_ptr<const PodInfo>> NominateForMoves(
      std::shared_ptr<const PodInfo> pod, const std::string& node,
      const std::vector<std::string>& movers, TimePoint now);
  // Why `pods` (of one priority), going each to its node of `nodes` once `gone` have left, would
  // take room kept for the pods nominated before them ("" when not): on each node, those and
  // these must fit together once the pods leaving there and `gone` are gone. Preemption's and
  // defragmentation's plans ask it, so a plan never counts on room an earlier one made.
  std::string TakesKeptRoom(ClusterLedger& ledger, std::span<const PodInfo* const> pods,
                            std::span<const core::NodeId> nodes, std::vector<std::string> gone,
                            TimePoint now);
  // The room kept for the nominations that outrank `pods` (of one priority; see Outranking), as
  // a plan for `pods` must take it (plan_inputs.h): on each node where such pods are nominated,
  // the pods leaving there are gone and the nominated pods stand where the engine would place
  // them then; a node where they would not fit even so is full. Defragmentation plans on it, so
  // that several pods waiting for room get their plans in one cycle, each seeing the earlier
  // ones as decided, rather than waiting for the earlier ones to land.
  Promised Promises(ClusterLedger& ledger, std::span<const PodInfo* const> pods, TimePoint now);
  // Evicted by this scheduler within kEvictingFor (the watch may not show it terminating yet).
  bool Evicting(const std::string& key, TimePoint now) const;
  // `key` is nominated and some pod on that node is leaving (terminating, or evicted lately)
  // beyond what the pods nominated there before it need: the room for it is still being made.
  bool RoomBeingMade(ClusterLedger& ledger, const std::string& key, TimePoint now);

  // For tests and logs.
  const std::string* NominatedNode(const std::string& key) const;
  size_t nominations() const { return nominations_.size(); }

 private:
  struct Nomination {
    std::string node;
    std::shared_ptr<const PodInfo> pod;
    uint64_t seq = 0;  // order of nomination: of equal priorities the earlier keeps the room
  };
  Nomination& Nominate(const std::string& key);
  // The earliest nomination of `keys` (UINT64_MAX: none nominated).
  uint64_t SeqOf(std::span<const std::string> keys) const;
  // The nominations on `node` that outrank pods `own` of `priority` nominated at `own_seq`
  // (higher priority, or equal and nominated first; never their own; not those placed already,
  // waiting for their bind to show), in order of nomination.
  std::vector<const Nomination*> Outranking(const ClusterLedger& ledger, const std::string& node,
                                            std::span<const std::string> own, int32_t priority,
                                            uint64_t own_seq) const;
  // Terminating, or evicted by us within kEvictingFor.
  bool LeavingNow(const std::string& key, const PodInfo& info, TimePoint now) const;
  // The bound pods leaving from node `id`, sorted.
  std::vector<std::string> Leaving(const ClusterLedger& ledger, core::NodeId id,
                                   TimePoint now) const;
  // Whether `pods` fit on node `id` all at once, and each gang's members among them together
  // (with its topology), were `without` gone.
  static bool FitsOn(ClusterLedger& ledger, core::NodeId id, std::span<const PodInfo* const> pods,
                     std::vector<std::string> without);
  // The pods leaving, on every node, whose room the nominations that outrank `own` (see
  // Outranking) need: planning for `own` counts them neither as candidates nor as room.
  absl::flat_hash_set<std::string> Claimed(ClusterLedger& ledger, std::span<const std::string> own,
                                           int32_t priority, uint64_t own_seq, TimePoint now);
  // Of `leaving` (on node `id`), the fewest that `kept` need gone to fit there (all of them when
  // they do not fit even so): each given back, in order, while they still fit without it.
  static std::vector<std::string> ClaimedOn(ClusterLedger& ledger, core::NodeId id,
                                            std::span<const PodInfo* const> kept,
                                            const std::vector<std::string>& leaving);

  absl::flat_hash_map<std::string, std::shared_ptr<const PodInfo>> bound_;
  absl::flat_hash_map<std::string, Nomination> nominations_;
  absl::flat_hash_map<std::string, TimePoint> evicted_at_;   // by us
  absl::flat_hash_map<std::string, TimePoint> refused_at_;   // by a disruption budget
  absl::flat_hash_map<std::string, std::string> withdrawn_;  // key -> node, until seen cleared
  DisruptionBudgets budgets_;
  bool budgets_known_ = true;
  uint64_t next_seq_ = 1;
};

}  // namespace tessera::k8s
