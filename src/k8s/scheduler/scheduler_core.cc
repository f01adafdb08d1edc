#include "k8s/scheduler/scheduler_core.h"

#include <time.h>

#include <algorithm>
#include <tuple>

#include "common/status.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/plan/defrag.h"
#include "core/preemption/planner.h"
#include "records/assignment.h"
#include "records/names.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

absl::StatusOr<std::unique_ptr<SchedulerCore>> SchedulerCore::Create(SchedulerCoreOptions options,
                                                                     Binder* binder,
                                                                     Reporter* reporter,
                                                                     SchedulerMetrics* metrics,
                                                                     Clock clock) {
  core::PolicyOptions po;
  po.seed = options.seed;
  TESSERA_RETURN_IF_ERROR(core::CreatePolicy(options.policy, po).status());
  if (options.max_pods_per_cycle < 1) options.max_pods_per_cycle = 1;
  return std::unique_ptr<SchedulerCore>(
      new SchedulerCore(std::move(options), binder, reporter, metrics, std::move(clock)));
}

SchedulerCore::SchedulerCore(SchedulerCoreOptions options, Binder* binder, Reporter* reporter,
                             SchedulerMetrics* metrics, Clock clock)
    : options_(std::move(options)),
      binder_(binder),
      reporter_(reporter),
      metrics_(metrics),
      clock_(clock ? std::move(clock) : [] { return std::chrono::steady_clock::now(); }),
      pods_(metrics),
      queue_(SchedulingQueue::Options{options_.retry_min_interval, options_.retry_period},
             clock_()),
      ledger_(LedgerOptions{options_.policy, options_.seed, options_.levels}, metrics,
              [this](const std::string& key, const std::string& node, const std::string& why) {
                const Pod* s = pods_.Find(key);
                std::string& last = warned_[key];
                if (s == nullptr || last == why) return;
                last = why;
                reporter_->ReportWarning(
                    *s->info, "GpuAssignmentUnreadable",
                    StrCat(why, "; node ", node,
                           " takes no GPU pods until this pod is gone or its record is readable"));
              }),
      scale_up_(options_.scale_up, metrics),
      defrag_(options_.defrag) {
  queue_.set_order(&book_.set());
  pods_.set_listener([this](const std::string& key, const Pod* pod) { OnStage(key, pod); });
}

// --- queues ----------------------------------------------------------------------------------

void SchedulerCore::OnStage(const std::string& key, const Pod* pod) {
  if (pod == nullptr) {
    book_.Waiting(key, "", nullptr);
    return;
  }
  switch (pod->stage) {
    case Stage::kQueued:
    case Stage::kUnschedulable:
    case Stage::kGangWaiting:
    case Stage::kBackoff:
      book_.Waiting(key, pod->info->queue, &pod->info->request);
      return;
    default:
      book_.Waiting(key, "", nullptr);
  }
}

void SchedulerCore::CountHeld(const std::string& key) {
  const Pod* s = pods_.Find(key);
  const Holding* h = ledger_.Find(key);
  if (s == nullptr || !s->info || h == nullptr || h->gpus.gpus.empty()) {
    book_.Held(key, "", {});
    return;
  }
  core::QueueResources usage;
  if (ledger_.Accounted(key)) {
    if (const core::Placement* p = ledger_.engine().Find(key)) {
      usage = core::UsageOf(ledger_.engine().cluster(), *p);
    }
  }
  book_.Held(key, s->info->queue, usage);
}

SchedulingQueue::Arrival SchedulerCore::ArrivalOf(const Pod& s) {
  return ArrivalOfCreation(s.info ? std::string_view(s.info->created) : std::string_view(),
                           static_cast<int64_t>(s.seen_seq));
}

std::string SchedulerCore::QueueRefusal(const std::vector<const PodInfo*>& members) {
  if (members.empty()) return "";
  const std::string& queue = members[0]->queue;
  std::string why;
  if (!book_.set().Usable(queue, &why)) return why;
  for (const PodInfo* m : members) {
    if (!book_.set().Admits(queue, m->ns, &why)) return why;
  }
  core::QueueResources demand;
  for (const PodInfo* m : members) demand += book_.DemandOf(m->request);
  return book_.set().OverLimit(queue, demand);
}

// --- nodes -----------------------------------------------------------------------------------

void SchedulerCore::SetQueues(std::vector<core::QueueSpec> specs, bool known) {
  book_.SetSpecs(std::move(specs), known);
  queue_.NoteChange();  // a queue made usable, or a limit raised, may let pods go on
}

void SchedulerCore::OnBudget(Change change, std::shared_ptr<const BudgetInfo> budget) {
  if (preemption_.OnBudget(change, std::move(budget))) queue_.NoteChange();
}

void SchedulerCore::OnNode(Change change, std::shared_ptr<const NodeInfo> node) {
  if (ledger_.OnNode(change, std::move(node))) queue_.NoteChange();
}

// --- DRA objects -----------------------------------------------------------------------------

void SchedulerCore::EnableDra(ClaimBinder* binder) {
  claim_binder_ = binder;
  dra_ = std::make_unique<DraAllocator>(options_.dra_driver, ledger_);
}

void SchedulerCore::OnSlice(Change change, std::shared_ptr<const dra::SliceInfo> slice) {
  if (dra_ && dra_->OnSlice(change, std::move(slice))) queue_.NoteChange();
}

void SchedulerCore::OnDeviceClass(Change change, std::shared_ptr<const dra::ClassInfo> c) {
  if (dra_ && dra_->OnClass(change, std::move(c))) queue_.NoteChange();
}

void SchedulerCore::OnClaim(Change change, std::shared_ptr<const dra::ClaimInfo> claim) {
  if (dra_ && dra_->OnClaim(change, std::move(claim))) queue_.NoteChange();
}

// --- pods ------------------------------------------------------------------------------------

void SchedulerCore::Release(const std::string& key) {
  if (ledger_.Drop(key)) queue_.NoteChange();
  book_.Held(key, "", {});
}

void SchedulerCore::AccountBound(const std::string& key, Pod& s) {
  pods_.SetStage(s, Stage::kBound);
  Holding h = Holding::OfBoundPod(*s.info);
  const PodInfo& pod = *s.info;
  if (h.unreadable.empty() && !pod.assignment && pod.input_error.empty() &&
      pod.request.gpu.kind != core::GpuAsk::Kind::kNone &&
      pod.scheduler_name == options_.scheduler_name) {
    spdlog::warn("pod {} asks for GPUs and is bound to {} without {}; its GPUs are not accounted",
                 key, pod.node_name, records::kAssignmentAnnotation);
  }
  ledger_.Hold(key, std::move(h), /*bound=*/true);
  CountHeld(key);
}

void SchedulerCore::OnPod(Change change, std::shared_ptr<const PodInfo> pod) {
  const std::string key = pod->key;
  if (change == Change::kDeleted || pod->terminal()) {
    Forget(key);
    return;
  }
  Pod& s = pods_.Upsert(key, clock_());
  std::shared_ptr<const PodInfo> prev = s.info;
  s.info = pod;

  if (pod->bound()) {
    preemption_.Track(pod);
    Dequeue(key, s);
    Holding truth = Holding::OfBoundPod(*pod);
    const Holding* held = ledger_.Find(key);
    if (s.stage == Stage::kBinding || s.stage == Stage::kBindConflict) {
      if (held && held->node == pod->node_name && (!pod->assignment || truth.gpus == held->gpus)) {
        Confirm(s);  // our bind, seen on the watch (perhaps before its answer)
        return;
      }
      spdlog::warn("pod {} was bound to {} by someone else while this scheduler was binding it",
                   key, pod->node_name);
      Release(key);
    } else if (s.stage == Stage::kBound && held && truth == *held) {
      return;  // nothing that matters changed
    } else {
      Release(key);
    }
    gangs_.Leave(key, s);
    AccountBound(key, s);
    // A gang member bound before this scheduler saw it (by its previous life, before a restart)
    // runs in its gang: the gang's other members join it there, and it counts toward the
    // gang's size and min (else a gang bound part-way when the scheduler stopped would wait
    // forever for members that run already).
    if (pod->scheduler_name == options_.scheduler_name && pod->input_error.empty()) {
      gangs_.Join(key, s);
    }
    return;
  }

  if (s.stage == Stage::kBound) {
    Release(key);  // cannot happen (bindings are final); keep the ledger right anyway
    pods_.SetStage(s, Stage::kNew);
  }
  preemption_.Observe(pod);
  if (pod->scheduler_name != options_.scheduler_name || pod->deleting || pod->gated) {
    if (s.stage == Stage::kBinding || s.stage == Stage::kBindConflict) {
      if (!pod->deleting && !pod->gated) return;  // schedulerName is immutable: not reached
      Release(key);
    }
    Dequeue(key, s);
    gangs_.Leave(key, s);
    pods_.SetStage(s, Stage::kIgnored);
    return;
  }
  if (s.stage == Stage::kBinding || s.stage == Stage::kBindConflict) return;
  if (!pod->input_error.empty()) {
    Dequeue(key, s);
    gangs_.Leave(key, s);
    if (s.stage != Stage::kBadInput || !prev || prev->input_error != pod->input_error) {
      if (metrics_ != nullptr) metrics_->failed_invalid_pod++;
      Report(s, "Unschedulable", StrCat("invalid pod: ", pod->input_error));
    }
    pods_.SetStage(s, Stage::kBadInput);
    return;
  }
  const bool fresh = s.stage == Stage::kNew || s.stage == Stage::kIgnored ||
                     s.stage == Stage::kBadInput || !prev || !prev->SameAsk(*pod);
  if (fresh) {
    Dequeue(key, s);
    gangs_.Leave(key, s);
    Enqueue(key, s);
  }
}

void SchedulerCore::Forget(const std::string& key) {
  Pod* s = pods_.Find(key);
  if (s == nullptr) return;
  if (dra_) dra_->BindDone(key, /*ok=*/false);
  Release(key);
  Dequeue(key, *s);
  gangs_.Leave(key, *s);
  preemption_.Forget(key);
  defrag_.Forget(key);
  warned_.erase(key);
  pods_.Erase(key);
  book_.Forget(key);
}

void SchedulerCore::Enqueue(const std::string& key, Pod& s) {
  pods_.SetStage(s, Stage::kQueued);
  queue_.Push(key, s.info->priority, s.info->queue, ArrivalOf(s));
  gangs_.Join(key, s);
}

void SchedulerCore::Dequeue(const std::string& key, Pod& s) {
  queue_.Remove(key);
  conflicts_.erase(key);
  (void)s;
}

void SchedulerCore::Confirm(Pod& s) {
  pods_.SetStage(s, Stage::kBound);
  s.bind_failures = 0;
  if (!s.counted) {
    s.counted = true;
    if (metrics_ != nullptr) {
      metrics_->pods_scheduled++;
      metrics_->scheduling_duration.Observe(
          std::chrono::duration<double>(clock_() - s.first_seen).count());
    }
  }
}

void SchedulerCore::OnBindResult(const std::string& key, uint64_t attempt,
                                 const absl::Status& status) {
  Pod* found = pods_.Find(key);
  if (found == nullptr) return;
  Pod& s = *found;
  if (dra_ && s.attempt == attempt) dra_->BindDone(key, status.ok());
  if (s.stage != Stage::kBinding || s.attempt != attempt) return;  // settled meanwhile
  if (status.ok()) {
    Confirm(s);
    return;
  }
  if (status.code() == absl::StatusCode::kAborted ||
      status.code() == absl::StatusCode::kAlreadyExists) {
    // 409: already bound (perhaps by an earlier attempt of ours), recreated, or being deleted.
    // Keep the placement until the watch says which.
    spdlog::info("bind {}: {}; waiting for the watch to show what happened", key,
                 FromAbsl(status.message()));
    pods_.SetStage(s, Stage::kBindConflict);
    s.retry_at = clock_() + options_.bind_conflict_timeout;
    conflicts_.insert(key);
    return;
  }
  if (status.code() == absl::StatusCode::kNotFound) {
    Release(key);
    pods_.SetStage(s, Stage::kIgnored);  // the DELETED event follows
    return;
  }
  spdlog::warn("bind {}: {}", key, FromAbsl(status.message()));
  if (metrics_ != nullptr) metrics_->failed_bind_error++;
  const Holding* held = ledger_.Find(key);
  std::string node = held ? held->node : "";
  Release(key);
  ++s.bind_failures;
  pods_.SetStage(s, Stage::kBackoff);
  queue_.Backoff(key, s.info->priority, s.info->queue, ArrivalOf(s),
                 clock_() + Backoff::Delay(options_.bind_backoff, s.bind_failures, 0.0));
  gangs_.Join(key, s);
  Report(s, "SchedulerError",
         StrCat("binding to node ", node, " failed: ", FromAbsl(status.message())));
}

void SchedulerCore::SetSynced(bool nodes, bool pods) {
  nodes_synced_ = nodes_synced_ || nodes;
  pods_synced_ = pods_synced_ || pods;
}

// --- deciding --------------------------------------------------------------------------------

void SchedulerCore::Report(Pod& s, std::string_view reason, const std::string& message) {
  auto now = clock_();
  if (message == s.reported) {
    if (now - s.reported_at < options_.report_repeat_interval) return;
    s.reported_at = now;
    reporter_->ReportFailure(*s.info, reason, message, /*repeat=*/true);
    return;
  }
  s.reported = message;
  s.reported_at = now;
  spdlog::info("pod {}: {}: {}", s.info->key, reason, message);
  // Already on the pod from an earlier life of the scheduler: do not write it again.
  if (message == s.info->unschedulable_message) return;
  reporter_->ReportFailure(*s.info, reason, message, /*repeat=*/false);
}

void SchedulerCore::MarkUnschedulable(const std::string& key, Pod& s, const std::string& reason) {
  pods_.SetStage(s, Stage::kUnschedulable);
  queue_.Unschedulable(key, s.info->priority, s.info->queue, ArrivalOf(s));
  if (metrics_ != nullptr) metrics_->failed_unschedulable++;
  Report(s, "Unschedulable", reason);
}

void SchedulerCore::StartBind(const std::string& key, Pod& s, const core::Placement& placement,
                              const records::GangRecord* gang) {
  ledger_.HoldPlaced(key, placement);
  CountHeld(key);
  preemption_.Placing(s.info);
  pods_.SetStage(s, Stage::kBinding);
  ++s.attempt;
  const Holding& held = *ledger_.Find(key);
  records::Assignment record = held.gpus;
  record.node = held.node;
  if (gang != nullptr) record.gang = *gang;
  binder_->Bind(*s.info, record, s.attempt);
}

namespace {
// CPU time this thread has used, in seconds (0 if the clock cannot be read).
double ThreadCpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

SchedulerCore::DecisionStart SchedulerCore::StartDecision() {
  return DecisionStart{std::chrono::steady_clock::now(), ThreadCpuSeconds()};
}

void SchedulerCore::Observe(const DecisionStart& start) {
  if (metrics_ == nullptr) return;
  metrics_->decision_duration.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start.wall).count());
  metrics_->decision_cpu.Observe(std::max(0.0, ThreadCpuSeconds() - start.cpu_s));
}

void SchedulerCore::PlaceWithClaims(const std::string& key, Pod& s) {
  if (!dra_) {
    MarkUnschedulable(key, s,
                      "the pod has spec.resourceClaims, and this scheduler runs without DRA mode "
                      "(dra.enabled in its configuration)");
    return;
  }
  const DecisionStart start = StartDecision();
  DraAllocator::Decision d = dra_->Decide(*s.info);
  Observe(start);
  if (d.result.placed()) {
    StartClaimBind(key, s, d);
    return;
  }
  MarkUnschedulable(key, s, d.result.reason);
}

void SchedulerCore::StartClaimBind(const std::string& key, Pod& s,
                                   const DraAllocator::Decision& d) {
  dra_->Hold(*s.info, d);
  CountHeld(key);
  pods_.SetStage(s, Stage::kBinding);
  ++s.attempt;
  claim_binder_->Bind(*s.info, ledger_.Find(key)->node, d.writes, s.attempt);
}

void SchedulerCore::PlaceOne(const std::string& key, Pod& s) {
  if (std::string refused = QueueRefusal({s.info.get()}); !refused.empty()) {
    MarkUnschedulable(key, s, refused);
    return;
  }
  if (!s.info->claims.empty() || (dra_ && dra_->ServesExtended(*s.info))) {
    PlaceWithClaims(key, s);
    return;
  }
  const auto now = clock_();
  if (!holds_.empty()) {
    std::vector<const MoveHolds::Hold*> held = holds_.Matching(*s.info, now);
    if (!held.empty()) {
      PlaceReplacement(key, s, held);
      return;
    }
  }
  const DecisionStart start = StartDecision();
  core::PlacementResult r = ledger_.Decide(*s.info);
  if (r.placed() && !holds_.empty()) {
    // A destination held for a moved pod's replacement stays free for it: elsewhere, or wait.
    if (std::string kept = holds_.Intrudes(ledger_.mutable_engine(), *s.info, r.placement, now);
        !kept.empty()) {
      ledger_.HoldPlaced(key, r.placement);
      ledger_.Drop(key);
      const core::NodeSet others = holds_.NodesOutside(ledger_.engine().cluster(), *s.info, now);
      r = ledger_.DecideWith(*s.info, s.info->request, nullptr, &others);
      if (!r.placed()) {
        Observe(start);
        MarkUnschedulable(key, s, kept);
        return;
      }
    }
  }
  Observe(start);
  if (r.placed()) {
    if (std::string kept = preemption_.Guard(ledger_.mutable_engine(), *s.info, r.placement);
        !kept.empty()) {
      ledger_.HoldPlaced(key, r.placement);
      ledger_.Drop(key);  // the decision is undone: room made for another pod
      MarkUnschedulable(key, s, kept);
      return;
    }
    StartBind(key, s, r.placement);
    return;
  }
  if (r.outcome == core::Outcome::kNoFitNow && TryPreempt(key, s, r.reason)) return;
  MarkUnschedulable(key, s, r.reason);
}

bool SchedulerCore::TryPreempt(const std::string& key, Pod& s, const std::string& reason) {
  if (preemption_writer_ == nullptr) return false;
  std::shared_ptr<const ClusterLedger::Allowed> allowed = ledger_.AllowedFor(*s.info);
  const std::string* nominated = preemption_.NominatedNode(key);
  const std::string before = nominated ? *nominated : s.info->nominated_node;
  const DecisionStart start = StartDecision();
  Preemption::Decision d = preemption_.Plan(ledger_.mutable_engine(), book_.set(), *s.info,
                                            allowed ? &allowed->nodes : nullptr, clock_());
  Observe(start);
  if (!d.found) {
    if (TryDefrag(key, {key}, {s.info.get()}, reason)) return true;
    if (!d.undecided && !preemption_.RoomBeingMade(ledger_.engine(), key, clock_()) &&
        preemption_.Withdraw(*s.info)) {
      preemption_writer_->Nominate(*s.info, "");  // no plan, and nothing under way for it
    }
    MarkUnschedulable(key, s, StrCat(reason, "; preemption would not help: ", d.reason));
    return true;
  }
  const PodInfo& pod = *s.info;
  preemption_.Observe(s.info);  // the nomination knows its pod before the watch shows it
  if (before != d.node) preemption_writer_->Nominate(pod, d.node);
  if (metrics_ != nullptr) metrics_->CountPreemption(d.evict.size());
  for (const std::shared_ptr<const PodInfo>& v : d.evict) {
    spdlog::info("preemption: evicting pod {} from node {} for pod {}", v->key, d.node, key);
    preemption_writer_->Evict(*v);
    reporter_->ReportWarning(
        *v, "Preempted",
        StrCat("evicted by ", options_.scheduler_name, " to make room on node ", d.node,
               " for pod ", key, " (priority ", pod.priority, ", queue ", pod.queue, ")"));
  }
  MarkUnschedulable(
      key, s,
      StrCat("nominated to node ", d.node, ": waiting for ", d.evict.size() + d.awaited,
             " pod(s) there to end (", d.evict.size(), " evicted now for this pod)"));
  return true;
}

bool SchedulerCore::TryDefrag(const std::string& what, const std::vector<std::string>& keys,
                              const std::vector<const PodInfo*>& members,
                              const std::string& reason) {
  const auto now = clock_();
  if (preemption_writer_ == nullptr || !defrag_.enabled() || members.empty()) return false;
  // The gang has waited since its last member came; a pod since it came.
  auto since = std::chrono::steady_clock::time_point::min();
  for (const std::string& k : keys) since = std::max(since, pods_.Get(k).first_seen);
  if (!defrag_.Eligible(what, members, since, now)) return false;
  for (const std::string& k : keys) {
    if (preemption_.RoomBeingMade(ledger_.engine(), k, now)) return false;  // a plan under way
  }
  const bool gang = members[0]->request.gang.has_value();
  const DecisionStart start = StartDecision();
  DefragExecutor::Decision d = defrag_.Plan(
      ledger_,
      [this](const std::string& k) -> const PodInfo* {
        const Pod* p = pods_.Find(k);
        return p == nullptr ? nullptr : p->info.get();
      },
      [this, now](const PodInfo& p) { return !preemption_.Evicting(p.key, now); }, what, members,
      [this] {
        core::PolicyOptions po;
        po.seed = options_.seed;
        return *core::CreatePolicy(options_.policy, po);
      },
      options_.levels, now);
  Observe(start);
  if (!d.found) {
    spdlog::info("defragmentation: no plan for {} {}: {}", gang ? "gang" : "pod", what, d.reason);
    return false;
  }
  std::vector<std::string> movers;
  for (const plan::Move& m : d.moves) movers.push_back(m.pod);
  // The first member is nominated with the movers (all bound, or nothing is recorded), then the
  // others to their nodes.
  std::vector<std::shared_ptr<const PodInfo>> moving =
      preemption_.NominateForMoves(pods_.Get(keys[0]).info, d.nodes[0], movers, now);
  if (moving.size() != movers.size()) return false;
  for (size_t i = 1; i < keys.size() && i < d.nodes.size(); ++i) {
    preemption_.NominateForMoves(pods_.Get(keys[i]).info, d.nodes[i], {}, now);
  }
  const PodInfo& first = *members[0];
  const int64_t waited = std::chrono::duration_cast<std::chrono::seconds>(now - since).count();
  const core::Cluster& cluster = ledger_.engine().cluster();
  for (size_t i = 0; i < members.size() && i < d.nodes.size(); ++i) {
    preemption_writer_->Nominate(*members[i], d.nodes[i]);
  }
  std::vector<std::string> distinct = d.nodes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const std::string nodes = StrJoin(distinct, ", ");
  const std::string for_what = StrCat(gang ? "gang " : "pod ", what);
  const std::string asks =
      gang ? StrCat(members.size(), " pods, priority ", first.priority, ", ",
                    core::DescribeAsk(first.request), " each")
           : StrCat("priority ", first.priority, ", ", core::DescribeAsk(first.request));
  const int64_t hold_s =
      std::chrono::duration_cast<std::chrono::seconds>(defrag_.options().hold_for).count();
  std::vector<std::string> said;
  if (metrics_ != nullptr) metrics_->defrag_moves += static_cast<int64_t>(d.moves.size());
  for (size_t i = 0; i < d.moves.size(); ++i) {
    const plan::Move& m = d.moves[i];
    const std::string from = plan::DescribePlacement(cluster, m.from);
    const std::string to = plan::DescribePlacement(cluster, m.to);
    said.push_back(StrCat(m.pod, " from ", from, " to ", to));
    spdlog::info("defragmentation: evicting pod {} ({} -> {}) for {} on node(s) {}", m.pod, from,
                 to, for_what, nodes);
    preemption_writer_->Evict(*moving[i]);
    holds_.Add(*moving[i], cluster.node(m.to.node).name, m.to.gpu_mask(), to, for_what,
               now + defrag_.options().hold_for);
    reporter_->ReportWarning(
        *moving[i], "DefragmentationMove",
        StrCat("evicted by ", options_.scheduler_name, " to defragment: ", for_what, " (", asks,
               ") has waited ", waited, "s and fits on node", distinct.size() > 1 ? "s " : " ",
               nodes, " once this pod moves from ", from, " to ", to,
               " (its controller recreates it; the new pod is placed at ", to,
               " if it comes within ", hold_s, "s)"));
  }
  const std::string moved =
      StrCat("moving ", d.moves.size(), " pod(s) to make room on node",
             distinct.size() > 1 ? "s " : " ", nodes, ": ", StrJoin(said, "; "));
  for (const PodInfo* m : members) {
    reporter_->ReportNormal(*m, "Defragmentation",
                            gang ? StrCat("gang ", what, " waited ", waited, "s: ", moved)
                                 : StrCat("waited ", waited, "s: ", moved));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string node = i < d.nodes.size() ? d.nodes[i] : d.nodes[0];
    MarkUnschedulable(keys[i], pods_.Get(keys[i]),
                      gang ? StrCat("gang ", what, " nominated to node(s) ", nodes,
                                    " (this pod to ", node, "): waiting for ", d.moves.size(),
                                    " pod(s) moved away for defragmentation (", reason, ")")
                           : StrCat("nominated to node ", node, ": waiting for ", d.moves.size(),
                                    " pod(s) moved away for defragmentation (", reason, ")"));
  }
  return true;
}

void SchedulerCore::PlaceReplacement(const std::string& key, Pod& s,
                                     const std::vector<const MoveHolds::Hold*>& held) {
  const core::Cluster& cluster = ledger_.engine().cluster();
  const DecisionStart start = StartDecision();
  std::string why;
  for (const MoveHolds::Hold* h : held) {
    const core::NodeId id = cluster.FindNode(h->node);
    if (!id.valid()) continue;
    const std::vector<core::Candidate> at = {
        core::Candidate{id, h->gpu_mask ? h->gpu_mask : ~0ULL}};
    core::PlacementResult r = ledger_.DecideWith(*s.info, s.info->request, &at, nullptr);
    if (!r.placed()) {
      if (why.empty()) why = r.reason;
      continue;
    }
    Observe(start);
    const std::string moved = h->moved, where = h->where, for_what = h->for_what;
    holds_.End(moved);
    spdlog::info("defragmentation: pod {} replaces moved pod {}: placed at {}", key, moved, where);
    reporter_->ReportNormal(*s.info, "DefragmentationDestination",
                            StrCat("placed at ", where, ", where defragmentation for ", for_what,
                                   " moved pod ", moved, " (this pod replaces it)"));
    StartBind(key, s, r.placement);
    return;
  }
  Observe(start);
  const MoveHolds::Hold& h = *held[0];
  MarkUnschedulable(
      key, s,
      StrCat("replacement of pod ", h.moved, ", moved by defragmentation for ", h.for_what,
             ": waiting for its destination ", h.where, " (kept for it ",
             std::chrono::duration_cast<std::chrono::seconds>(h.until - clock_()).count(),
             "s more, then placed anywhere)", why.empty() ? "" : StrCat(": ", why)));
}

int SchedulerCore::TryGang(const std::string& gang_key) {
  GangAssembler::Round round = gangs_.Assemble(gang_key, pods_);
  for (const std::string& m : round.wrong_size) {
    Pod& ms = pods_.Get(m);
    Dequeue(m, ms);
    gangs_.Leave(m, ms);
    pods_.SetStage(ms, Stage::kBadInput);
    if (metrics_ != nullptr) metrics_->failed_invalid_pod++;
    const core::GangAsk& ask = *ms.info->request.gang;
    Report(ms, "Unschedulable",
           ask.size != round.size
               ? StrCat("invalid pod: metadata.annotations[", records::kGangSizeAnnotation,
                        "]: ", ask.size, " differs from ", round.size,
                        ", the size other members of gang ", gang_key, " give")
               : StrCat("invalid pod: metadata.annotations[", records::kGangMinAnnotation,
                        "]: ", ask.min_members(), " differs from ", round.min,
                        ", the min other members of gang ", gang_key, " give"));
  }
  for (const std::string& m : round.pending) queue_.Remove(m);
  for (const std::string& m : round.extra) queue_.Remove(m);
  if (!round.ready && round.extra.empty()) {
    for (const std::string& m : round.pending) pods_.SetStage(pods_.Get(m), Stage::kGangWaiting);
    if (!round.pending.empty()) {
      spdlog::debug("gang {}: {} of {} members present", gang_key,
                    round.pending.size() + round.placed, round.size);
    }
    return 0;
  }
  for (const std::string& m : round.extra) {
    Pod& ms = pods_.Get(m);
    pods_.SetStage(ms, Stage::kGangWaiting);
    Report(ms, "Unschedulable",
           StrCat("gang ", gang_key, " already has its ", round.size, " members"));
  }
  if (!round.ready) return 0;
  std::vector<const PodInfo*> members;
  for (const std::string& m : round.pending) members.push_back(pods_.Get(m).info.get());
  if (std::string refused = QueueRefusal(members); !refused.empty()) {
    for (const std::string& m : round.pending) MarkUnschedulable(m, pods_.Get(m), refused);
    gangs_.Assembled(gang_key);
    return static_cast<int>(round.pending.size());
  }
  // Members whose GPUs come from claims: their own, or (DRA mode) an extended-resource claim for
  // `tessera.dev/gpu: N` that a DeviceClass serves; the gang goes through the claim path.
  const bool claims = std::any_of(members.begin(), members.end(), [&](const PodInfo* m) {
    return !m->claims.empty() || (dra_ && dra_->ServesExtended(*m));
  });
  if (claims && round.min < round.size) {
    for (const std::string& m : round.pending) {
      MarkUnschedulable(m, pods_.Get(m),
                        StrCat(records::kGangMinAnnotation,
                               " is not supported yet for gangs whose GPUs come from "
                               "ResourceClaims (spec.resourceClaims, or tessera.dev/gpu served by "
                               "a DeviceClass); remove it to place the gang all or nothing"));
    }
    gangs_.Assembled(gang_key);
    return static_cast<int>(round.pending.size());
  }
  if (claims && dra_) {
    const DecisionStart start = StartDecision();
    std::vector<DraAllocator::Decision> ds = dra_->DecideGang(members, gang_key);
    Observe(start);
    if (!ds.empty() && ds[0].result.placed()) {
      spdlog::info("gang {}: placed {} members with claims", gang_key, round.pending.size());
      for (size_t i = 0; i < round.pending.size(); ++i) {
        StartClaimBind(round.pending[i], pods_.Get(round.pending[i]), ds[i]);
      }
    } else {
      std::string reason = ds.empty() ? "no members" : ds[0].result.reason;
      for (const std::string& m : round.pending) MarkUnschedulable(m, pods_.Get(m), reason);
    }
    gangs_.Assembled(gang_key);
    return static_cast<int>(round.pending.size());
  }
  if (claims) {
    for (const std::string& m : round.pending) {
      MarkUnschedulable(m, pods_.Get(m),
                        "the gang's pods have spec.resourceClaims, and this scheduler runs "
                        "without DRA mode (dra.enabled in its configuration)");
    }
    gangs_.Assembled(gang_key);
    return static_cast<int>(round.pending.size());
  }
  const DecisionStart start = StartDecision();
  std::vector<core::PlacementResult> results =
      ledger_.DecideGangMembers(members, round.running, gang_key);
  Observe(start);
  if (std::string kept = KeepNominatedRoom(round.pending, members, results); !kept.empty()) {
    for (const std::string& m : round.pending) MarkUnschedulable(m, pods_.Get(m), kept);
    gangs_.Assembled(gang_key);
    return static_cast<int>(round.pending.size());
  }
  int placed = 0;
  for (const core::PlacementResult& r : results) placed += r.placed() ? 1 : 0;
  records::GangRecord record{members[0]->request.gang->name, round.size, round.min,
                             round.placed + placed};
  for (size_t i = 0; i < round.pending.size(); ++i) {
    if (!results[i].placed()) continue;
    StartBind(round.pending[i], pods_.Get(round.pending[i]), results[i].placement, &record);
  }
  if (placed > 0) {
    spdlog::info("gang {}: placed {} members", gang_key, placed);
    if (round.min < round.size) {
      // An elastic gang: the members placed now, and the oldest running one (so that one pod
      // always tells the latest count), hear how many run.
      const std::string message = StrCat("gang ", gang_key, ": ", record.running, " of ",
                                         round.size, " members running (min ", round.min, ")");
      std::vector<const PodInfo*> told;
      for (size_t i = 0; i < round.pending.size(); ++i) {
        if (results[i].placed()) told.push_back(pods_.Get(round.pending[i]).info.get());
      }
      const PodInfo* oldest = nullptr;
      for (const std::string& m : round.running) {
        const PodInfo* p = pods_.Get(m).info.get();
        if (!oldest || std::tie(p->created, p->name) < std::tie(oldest->created, oldest->name)) {
          oldest = p;
        }
      }
      if (oldest) told.push_back(oldest);
      for (const PodInfo* p : told) reporter_->ReportNormal(*p, "GangMembers", message);
      spdlog::info("{}", message);
    }
  } else if (!results.empty() && results[0].outcome == core::Outcome::kNoFitNow) {
    // Nothing of the gang fits now: preemption may make room for its pending members (an
    // elastic gang's only up to its min; at its min it grows into free room alone).
    const int want = core::PreemptionMembers(*members[0]->request.gang, round.placed,
                                             static_cast<int>(members.size()));
    if (want > 0 &&
        TryPreemptGang(gang_key, round.pending, members, results[0].reason, round.running)) {
      gangs_.Assembled(gang_key);
      return static_cast<int>(round.pending.size());
    }
  }
  for (size_t i = 0; i < round.pending.size(); ++i) {
    if (results[i].placed()) continue;
    MarkUnschedulable(round.pending[i], pods_.Get(round.pending[i]), results[i].reason);
  }
  gangs_.Assembled(gang_key);
  return static_cast<int>(round.pending.size());
}

std::string SchedulerCore::KeepNominatedRoom(const std::vector<std::string>& keys,
                                             const std::vector<const PodInfo*>& members,
                                             const std::vector<core::PlacementResult>& results) {
  std::vector<const PodInfo*> placed;
  std::vector<core::Placement> where;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].placed()) continue;
    placed.push_back(members[i]);
    where.push_back(results[i].placement);
  }
  if (placed.empty()) return "";
  std::string kept = preemption_.Guard(ledger_.mutable_engine(), placed, where);
  if (kept.empty()) return "";
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].placed()) ledger_.Unplace(keys[i]);  // the decision is undone
  }
  return kept;
}

bool SchedulerCore::TryPreemptGang(const std::string& gang_key,
                                   const std::vector<std::string>& keys,
                                   const std::vector<const PodInfo*>& members,
                                   const std::string& reason,
                                   const std::vector<std::string>& running) {
  if (preemption_writer_ == nullptr || members.empty()) return false;
  // The nodes every member may use.
  std::optional<core::NodeSet> allowed;
  for (const PodInfo* m : members) {
    std::shared_ptr<const ClusterLedger::Allowed> a = ledger_.AllowedFor(*m);
    if (!a) continue;
    if (!allowed) {
      allowed = a->nodes;
      continue;
    }
    for (int n = 0; n < ledger_.engine().cluster().node_count(); ++n) {
      if (allowed->Contains(core::NodeId(n)) && !a->nodes.Contains(core::NodeId(n))) {
        allowed->Set(core::NodeId(n), false);
      }
    }
  }
  std::vector<std::string> before;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string* nominated = preemption_.NominatedNode(keys[i]);
    before.push_back(nominated ? *nominated : members[i]->nominated_node);
  }
  const DecisionStart start = StartDecision();
  Preemption::Decision d = preemption_.PlanGang(ledger_.mutable_engine(), book_.set(), members,
                                                allowed ? &*allowed : nullptr, clock_(), running);
  Observe(start);
  if (!d.found) {
    if (TryDefrag(gang_key, keys, members, reason)) return true;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!d.undecided && !preemption_.RoomBeingMade(ledger_.engine(), keys[i], clock_()) &&
          preemption_.Withdraw(*members[i])) {
        preemption_writer_->Nominate(*members[i], "");
      }
      MarkUnschedulable(keys[i], pods_.Get(keys[i]),
                        StrCat(reason, "; preemption would not help: ", d.reason));
    }
    return true;
  }
  const size_t planned = d.nodes.size();  // an elastic gang: its first members only
  for (size_t i = 0; i < planned; ++i) {
    preemption_.Observe(pods_.Get(keys[i]).info);  // the nomination knows its pod
    if (before[i] != d.nodes[i]) preemption_writer_->Nominate(*members[i], d.nodes[i]);
  }
  const PodInfo& first = *members[0];
  if (metrics_ != nullptr) metrics_->CountPreemption(d.evict.size());
  for (const std::shared_ptr<const PodInfo>& v : d.evict) {
    spdlog::info("preemption: evicting pod {} from node {} for gang {}", v->key, v->node_name,
                 gang_key);
    preemption_writer_->Evict(*v);
    reporter_->ReportWarning(
        *v, "Preempted",
        StrCat("evicted by ", options_.scheduler_name, " to make room on node ", v->node_name,
               " for gang ", gang_key, " (", planned, " pods, priority ", first.priority,
               ", queue ", first.queue, ")"));
  }
  std::vector<std::string> distinct = d.nodes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string waiting =
        StrCat(": waiting for ", d.evict.size() + d.awaited, " pod(s) there to end (",
               d.evict.size(), " evicted now for this gang)");
    if (i < planned) {
      MarkUnschedulable(keys[i], pods_.Get(keys[i]),
                        StrCat("gang ", gang_key, " nominated to node(s) ", StrJoin(distinct, ", "),
                               " (this pod to ", d.nodes[i], ")", waiting));
      continue;
    }
    MarkUnschedulable(
        keys[i], pods_.Get(keys[i]),
        StrCat("gang ", gang_key, ": ", planned, " of its members nominated to node(s) ",
               StrJoin(distinct, ", "), ", the ", planned, " it needs to reach its min of ",
               first.request.gang->min_members(), waiting,
               "; this pod joins when room frees up (an elastic gang "
               "evicts nobody to grow)"));
  }
  return true;
}

void SchedulerCore::FlushRetries(std::chrono::steady_clock::time_point now) {
  // Binds answered 409 that the watch never explained: give the placement up and try again.
  for (auto it = conflicts_.begin(); it != conflicts_.end();) {
    Pod& s = pods_.Get(*it);
    if (s.retry_at > now) {
      ++it;
      continue;
    }
    std::string key = *it;
    it = conflicts_.erase(it);
    spdlog::warn("pod {}: bind conflict unexplained after {} ms; trying again", key,
                 options_.bind_conflict_timeout.count());
    Release(key);
    Enqueue(key, s);
  }
  // Back-off pods that are due and unschedulable pods that a change (or the period) calls for.
  const bool period = queue_.Flush(now);
  if (period) {
    // Gangs still short of members after a whole period: say so once.
    for (const GangAssembler::Shortage& g : gangs_.TakeShortages(pods_)) {
      for (const std::string& m : g.waiting) {
        Report(pods_.Get(m), "Unschedulable",
               g.min < g.size
                   ? StrCat("gang ", g.gang, ": ", g.present, " of its ", g.size,
                            " members exist; it starts with ", g.min, "; waiting for more")
                   : StrCat("gang ", g.gang, ": ", g.present, " of its ", g.size,
                            " members exist; waiting for the rest"));
      }
    }
  }
}

int SchedulerCore::ScheduleSome() {
  if (!synced()) return 0;
  ledger_.Sync();
  if (ledger_.node_changes_applied() != seen_node_changes_) {
    seen_node_changes_ = ledger_.node_changes_applied();
    book_.SetCluster(ledger_.engine().cluster());
  }
  if (ledger_.holdings_moved() != seen_holdings_moved_) {
    seen_holdings_moved_ = ledger_.holdings_moved();
    for (const std::string& key : book_.HeldKeys()) CountHeld(key);
  }
  if (dra_) dra_->OnNodesChanged();
  if (preemption_writer_ != nullptr) {
    std::vector<PreemptionWriter::Refusal> refused = preemption_writer_->TakeRefusals();
    for (const PreemptionWriter::Refusal& r : refused) holds_.End(r.key);  // it stays: no move
    preemption_.NoteRefusals(refused, clock_());
  }
  if (holds_.Expire(clock_())) queue_.NoteChange();  // replacements waiting for them go anywhere
  FlushRetries(clock_());
  int tried = 0;
  while (tried < options_.max_pods_per_cycle) {
    std::optional<std::string> key = queue_.Pop();
    if (!key) break;
    Pod* s = pods_.Find(*key);
    if (s == nullptr) continue;
    if (s->stage != Stage::kQueued) pods_.SetStage(*s, Stage::kQueued);  // from back-off, say
    if (s->info->request.gang) {
      tried += std::max(1, TryGang(s->gang));
    } else {
      PlaceOne(*key, *s);
      ++tried;
    }
  }
  if (scale_up_.enabled()) UpdateScaleUp(clock_());
  return tried;
}

void SchedulerCore::UpdateScaleUp(std::chrono::steady_clock::time_point now) {
  if (!scale_up_.Due(now, pods_.count(Stage::kUnschedulable) > 0)) return;
  std::vector<const PodInfo*> waiting;
  pods_.ForEach([&](const std::string&, const Pod& p) {
    if (p.stage == Stage::kUnschedulable) waiting.push_back(p.info.get());
  });
  const auto started = std::chrono::steady_clock::now();
  std::vector<ScaleUpSignal::Notice> notices = scale_up_.Update(
      ledger_,
      [this](const std::string& key) -> const PodInfo* {
        const Pod* p = pods_.Find(key);
        return p == nullptr ? nullptr : p->info.get();
      },
      waiting,
      [this] {
        core::PolicyOptions po;
        po.seed = options_.seed;
        return *core::CreatePolicy(options_.policy, po);
      },
      options_.levels, now);
  for (const ScaleUpSignal::Notice& n : notices) {
    reporter_->ReportScaleUp(*n.pod, n.message, n.helps);
  }
  spdlog::debug("scale-up signal for {} waiting pods in {:.3f}s: {}", waiting.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                scale_up_.last().reason);
}

std::optional<std::chrono::steady_clock::time_point> SchedulerCore::NextWakeup() const {
  std::optional<std::chrono::steady_clock::time_point> next = queue_.NextWakeup();
  auto consider = [&](std::chrono::steady_clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (const std::string& key : conflicts_) consider(pods_.Find(key)->retry_at);
  if (std::optional<std::chrono::steady_clock::time_point> t = holds_.NextExpiry()) consider(*t);
  if (!gangs_.empty()) consider(queue_.next_period());  // the report of gangs short of members
  return next;
}

void SchedulerCore::PublishMetrics() {
  ledger_.PublishMetrics();
  if (metrics_ != nullptr) metrics_->SetQueues(book_.Gauges());
}

std::optional<Stage> SchedulerCore::StageOf(const std::string& key) const {
  const Pod* s = pods_.Find(key);
  if (s == nullptr) return std::nullopt;
  return s->stage;
}

std::optional<records::Assignment> SchedulerCore::HeldFor(const std::string& key) const {
  const Holding* h = ledger_.Find(key);
  if (h == nullptr || !ledger_.Accounted(key)) return std::nullopt;
  records::Assignment a = h->gpus;
  a.node = h->node;
  return a;
}

}  // namespace tessera::k8s
