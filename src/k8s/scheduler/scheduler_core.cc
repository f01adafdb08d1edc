#include "k8s/scheduler/scheduler_core.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "records/assignment.h"
#include "records/gpu_indices.h"
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
      unix_clock_([this] { return clock_(); }),
      pods_(metrics),
      queue_(SchedulingQueue::Options{options_.retry_min_interval, options_.retry_period},
             clock_()),
      groups_(options_.levels),
      ledger_(LedgerOptions{options_.policy, options_.seed, options_.levels,
                            options_.spare_gpus_per_domain},
              metrics,
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
      preemption_(*this),
      defrag_(*this, preemption_, options_.defrag),
      scale_up_(*this, options_.scale_up, metrics),
      reservations_(*this, options_.reservations),
      runtime_(options_.max_runtime_grace.count(), /*retry_s=*/60),
      restarts_(options_.gang_restart_retry) {
  chain_.Add(&preemption_);
  chain_.Add(&defrag_);
  chain_.Add(&scale_up_);
  chain_.Add(&reservations_);
  preemption_.set_reservations(&reservations_);
  defrag_.set_reservations(&reservations_);
  queue_.set_order(&book_.set());
  pods_.set_listener([this](const std::string& key, const Pod* pod) { OnStage(key, pod); });
}

// --- queues ----------------------------------------------------------------------------------

void SchedulerCore::OnStage(const std::string& key, const Pod* pod) {
  if (pod != nullptr && PodTracker::Waits(pod->stage)) {
    book_.Waiting(key, pod->info->queue, &pod->info->request);
  } else {
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

// --- nodes -----------------------------------------------------------------------------------

void SchedulerCore::SetQueues(std::vector<core::QueueSpec> specs, bool known) {
  queues_known_ = known;
  book_.SetSpecs(std::move(specs), known);
  queue_.NoteChange();  // a queue made usable, or a limit raised, may let pods go on
}

void SchedulerCore::OnBudget(Change change, std::shared_ptr<const BudgetInfo> budget) {
  if (preemption_.preemption().OnBudget(change, std::move(budget))) queue_.NoteChange();
}

void SchedulerCore::OnNode(Change change, std::shared_ptr<const NodeInfo> node) {
  // Spares off, the map holds only nodes with an annotation to take away.
  if (change == Change::kDeleted ||
      (options_.spare_gpus_per_domain == 0 && node->spare_gpus.empty())) {
    spares_published_.erase(node->name);
  } else {
    spares_published_[node->name] = node->spare_gpus;
    spares_to_check_.insert(node->name);
  }
  if (ledger_.OnNode(change, std::move(node))) queue_.NoteChange();
  // The agent marks a GPU unhealthy and evicts its pods at about the same time: a member seen
  // leaving before its GPU was seen unhealthy is judged again now.
  for (const std::string& key : std::vector<std::string>(leaving_.begin(), leaving_.end())) {
    if (const Pod* s = pods_.Find(key)) RestartGangOf(*s->info);
  }
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
  reservations_.Ended(key);
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
  TellStarted(key, /*placed_now=*/false);
}

void SchedulerCore::TellStarted(const std::string& key, bool placed_now) {
  if (!reservations_.enabled()) return;
  const Pod* s = pods_.Find(key);
  const core::Placement* p = ledger_.Accounted(key) ? ledger_.engine().Find(key) : nullptr;
  if (s == nullptr || !s->info || p == nullptr) {
    reservations_.Ended(key);
    return;
  }
  reservations_.Started(key, *s->info, *p, placed_now);
}

void SchedulerCore::OnPodGroup(Change change, std::shared_ptr<const PodGroupInfo> group) {
  for (const std::string& key : groups_.OnGroup(change, std::move(group))) {
    if (std::shared_ptr<const PodInfo> raw = groups_.Raw(key)) OnPod(Change::kUpdated, raw);
  }
}

void SchedulerCore::SetPodGroupsKnown(bool known) {
  const bool listed = known && !groups_known_;
  groups_known_ = known;
  if (!listed) return;
  for (const std::string& key : groups_.Waiting()) {
    if (std::shared_ptr<const PodInfo> raw = groups_.Raw(key)) OnPod(Change::kUpdated, raw);
  }
}

void SchedulerCore::ReportGroup(const PodInfo& member, bool scheduled, const std::string& message) {
  const PodGroupInfo* group = groups_.GroupOf(member);
  if (group == nullptr || !groups_.ShouldWrite(*group, scheduled, message)) return;
  spdlog::info("PodGroup {}: {}: {}", group->key, scheduled ? "Scheduled" : "Unschedulable",
               message);
  reporter_->ReportPodGroup(*group, scheduled, message);
}

void SchedulerCore::OnPod(Change change, std::shared_ptr<const PodInfo> pod) {
  const std::string key = pod->key;
  if (pod->bound() && (change == Change::kDeleted || pod->terminal() || pod->deleting)) {
    RestartGangOf(*pod);
  }
  if (change == Change::kDeleted || pod->terminal()) {
    Forget(key);
    if (restarts_.Gone(key)) queue_.NoteChange();  // the gang's new members may go now
    return;
  }
  PodGroups::Resolved resolved = groups_.Resolve(std::move(pod));
  pod = std::move(resolved.pod);
  Pod& s = pods_.Upsert(key, clock_());
  std::shared_ptr<const PodInfo> prev = s.info;
  s.info = pod;
  chain_.OnPod(pod);
  if (pod->scheduler_name == options_.scheduler_name) {
    if (!pod->max_runtime_error.empty() &&
        (!prev || prev->max_runtime_error != pod->max_runtime_error)) {
      reporter_->ReportWarning(*pod, "InvalidMaxRuntime", pod->max_runtime_error);
    }
    if (reservations_.enabled()) runtime_.OnPod(pod);
  }

  if (pod->bound()) {
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
      // Nothing that matters changed, but its gang may be known only now (its PodGroup listed
      // after it): it runs in that gang, as below.
      if (pod->scheduler_name == options_.scheduler_name && pod->input_error.empty()) {
        gangs_.Join(key, s);
      }
      return;
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
      // An old member of a restart this scheduler began before a restart of its own.
      if (!pod->gang_restart_message.empty() && !s.gang.empty()) {
        restarts_.Resume(s.gang, key, Now());
      }
    }
    return;
  }

  if (s.stage == Stage::kBound) {
    // A binding is final: an unbound view of the pod this scheduler bound is an older object (a
    // watch event queued before the binding and seen after the bind's answer, or a PodGroup's
    // change replaying the pod as last seen). Its GPUs stay held; the watch brings the bound pod.
    // (Releasing them here re-placed 583 of 1,000 PodGroup gangs' members at 10,000 nodes and
    // left their GPUs free to others until the watch caught up.) Another pod of the same name
    // (its delete missed) is new.
    if (prev && prev->uid == pod->uid) return;
    Release(key);
    pods_.SetStage(s, Stage::kNew);
  }
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
  if (!resolved.ignored.empty()) {
    reporter_->ReportWarning(*pod, "GangAnnotationIgnored", resolved.ignored);
  }
  if (pod->pod_group_missing) {
    // As kube-scheduler: not an error; the pod goes on when its PodGroup appears (OnPodGroup).
    // Said only once the PodGroups have been listed (before, it is likely just not seen yet).
    Dequeue(key, s);
    gangs_.Leave(key, s);
    pods_.SetStage(s, Stage::kGangWaiting);
    if (!groups_known_) return;
    Report(s, "Unschedulable",
           StrCat("waiting for PodGroup ", pod->ns, "/", pod->pod_group,
                  " (scheduling.k8s.io/v1beta1, named by spec.schedulingGroup.podGroupName) to "
                  "exist"));
    return;
  }
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
                     s.stage == Stage::kBadInput || !prev || prev->pod_group_missing ||
                     !prev->SameAsk(*pod);
  if (fresh) {
    Dequeue(key, s);
    gangs_.Leave(key, s);
    Enqueue(key, s);
  }
}

void SchedulerCore::Forget(const std::string& key) {
  groups_.Forget(key);
  leaving_.erase(key);
  Pod* s = pods_.Find(key);
  if (s == nullptr) return;
  if (dra_) dra_->BindDone(key, /*ok=*/false);
  Release(key);
  Dequeue(key, *s);
  gangs_.Leave(key, *s);
  chain_.Forget(key);
  runtime_.Forget(key);
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
  TellStarted(key, /*placed_now=*/true);
  pods_.SetStage(s, Stage::kBinding);
  ++s.attempt;
  const Holding& held = *ledger_.Find(key);
  records::Assignment record = held.gpus;
  record.node = held.node;
  if (gang != nullptr) record.gang = *gang;
  binder_->Bind(*s.info, record, s.attempt);
}

std::unique_ptr<core::Policy> SchedulerCore::NewPolicy() const {
  core::PolicyOptions po;
  po.seed = options_.seed;
  return *core::CreatePolicy(options_.policy, po);  // checked in Create
}

void SchedulerCore::PlaceWithClaims(const std::string& key, Pod& s) {
  if (!dra_) {
    MarkUnschedulable(key, s,
                      "the pod has spec.resourceClaims, and this scheduler runs without DRA mode "
                      "(dra.enabled in its configuration)");
    return;
  }
  const DecisionTimer timer(metrics_);
  DraAllocator::Decision d = dra_->Decide(*s.info);
  timer.Observe();
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
  TellStarted(key, /*placed_now=*/true);
  pods_.SetStage(s, Stage::kBinding);
  ++s.attempt;
  claim_binder_->Bind(*s.info, ledger_.Find(key)->node, d.writes, s.attempt,
                      /*release_on_failure=*/!s.gang.empty());
}

void SchedulerCore::PlaceOne(const std::string& key, Pod& s) {
  const PodInfo* one[] = {s.info.get()};
  if (std::string refused = book_.Refusal(one); !refused.empty()) {
    MarkUnschedulable(key, s, refused);
    return;
  }
  if (!s.info->claims.empty() || (dra_ && dra_->ServesExtended(*s.info))) {
    PlaceWithClaims(key, s);
    return;
  }
  if (chain_.PlaceKept(key, *s.info)) return;
  const DecisionTimer timer(metrics_);
  core::PlacementResult r = reservations_.Decide(*s.info);  // the ledger's, when they are off
  const std::string kept = chain_.AdmitPod(ledger_, key, *s.info, &r);
  timer.Observe();
  if (!kept.empty()) {
    // Kept from room promised to others and finding none elsewhere: it does not fit now, as
    // kube-scheduler counts nominated pods as used room; preemption and defragmentation plan
    // for it with those promises taken as done.
    NoFitNow(NoFit{key, {key}, {s.info.get()}, {}, kept}, {kept});
  } else if (r.placed()) {
    StartBind(key, s, r.placement);
    reservations_.NotePlaced(key, *s.info, r.placement);
    ReportGroup(*s.info, true, StrCat("pod ", key, " scheduled to node ", ledger_.Find(key)->node));
  } else if (r.outcome == core::Outcome::kNoFitNow) {
    NoFitNow(NoFit{key, {key}, {s.info.get()}, {}, r.reason}, {r.reason});
  } else {
    MarkUnschedulable(key, s, r.reason);
  }
}

void SchedulerCore::NoFitNow(const NoFit& unfit, const std::vector<std::string>& reasons) {
  const NoFitChain::Outcome answer = chain_.Answer(unfit);
  if (answer.answered) return;
  for (size_t i = 0; i < unfit.keys.size(); ++i) {
    MarkUnschedulable(unfit.keys[i], pods_.Get(unfit.keys[i]),
                      answer.notes.empty() ? reasons[i] : StrCat(unfit.reason, answer.notes));
  }
}

int SchedulerCore::TryGang(const std::string& gang_key) {
  GangAssembler::Round round = gangs_.Assemble(gang_key, pods_);
  for (const std::string& m : round.wrong_size) {
    Pod& ms = pods_.Get(m);
    Dequeue(m, ms);
    gangs_.Leave(m, ms);
    pods_.SetStage(ms, Stage::kBadInput);
    if (metrics_ != nullptr) metrics_->failed_invalid_pod++;
    Report(ms, "Unschedulable", GangAssembler::Mismatch(gang_key, round, *ms.info->request.gang));
  }
  for (const std::string& m : round.pending) queue_.Remove(m);
  for (const std::string& m : round.extra) queue_.Remove(m);
  if (const int leaving = restarts_.Leaving(gang_key); leaving > 0) {
    // Restarting whole: the new members go together once every old one is gone.
    const std::string why = StrCat("gang ", gang_key, " restarts whole (", kGangRestartAnnotation,
                                   ": all): waiting for ", leaving, " old member(s) to go");
    for (const std::vector<std::string>* list : {&round.pending, &round.extra}) {
      for (const std::string& m : *list) MarkUnschedulable(m, pods_.Get(m), why);
    }
    return 0;
  }
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
  PlaceGang(gang_key, round);
  gangs_.Assembled(gang_key);
  return static_cast<int>(round.pending.size());
}

void SchedulerCore::PlaceGang(const std::string& gang_key, const GangAssembler::Round& round) {
  auto wait_all = [&](const std::string& why) {
    ReportGroup(*pods_.Get(round.pending[0]).info, false, why);
    for (const std::string& m : round.pending) MarkUnschedulable(m, pods_.Get(m), why);
  };
  std::vector<const PodInfo*> members;
  for (const std::string& m : round.pending) members.push_back(pods_.Get(m).info.get());
  if (std::string refused = book_.Refusal(members); !refused.empty()) return wait_all(refused);
  // Members whose GPUs come from claims: their own, or (DRA mode) an extended-resource claim for
  // `tessera.dev/gpu: N` that a DeviceClass serves; the gang goes through the claim path.
  const bool claims = std::any_of(members.begin(), members.end(), [&](const PodInfo* m) {
    return !m->claims.empty() || (dra_ && dra_->ServesExtended(*m));
  });
  if (claims && round.min < round.size) {
    return wait_all(StrCat("an elastic gang (", records::kGangMinAnnotation,
                           ", or a PodGroup's gang, which grows past minCount) is not supported "
                           "yet for gangs whose GPUs come from "
                           "ResourceClaims (spec.resourceClaims, or tessera.dev/gpu served by "
                           "a DeviceClass); remove it to place the gang all or nothing"));
  }
  if (claims && !dra_) {
    return wait_all(
        "the gang's pods have spec.resourceClaims, and this scheduler runs without DRA mode "
        "(dra.enabled in its configuration)");
  }
  if (claims) {
    const DecisionTimer timer(metrics_);
    std::vector<DraAllocator::Decision> ds = dra_->DecideGang(members, gang_key);
    timer.Observe();
    if (ds.empty() || !ds[0].result.placed())
      return wait_all(ds.empty() ? "no members" : ds[0].result.reason);
    spdlog::info("gang {}: placed {} members with claims", gang_key, round.pending.size());
    ReportGroup(*members[0], true,
                StrCat(round.pending.size(), " pods of gang ", gang_key, " scheduled together"));
    for (size_t i = 0; i < round.pending.size(); ++i) {
      StartClaimBind(round.pending[i], pods_.Get(round.pending[i]), ds[i]);
    }
    return;
  }
  const DecisionTimer timer(metrics_);
  std::vector<core::PlacementResult> results =
      reservations_.DecideGang(members, round.running, gang_key);  // the ledger's when off
  timer.Observe();
  if (std::string kept = chain_.AdmitGang(ledger_, round.pending, members, results);
      !kept.empty()) {
    return wait_all(kept);
  }
  int placed = 0;
  for (const core::PlacementResult& r : results) placed += r.placed() ? 1 : 0;
  if (placed == 0 && !results.empty() && results[0].outcome == core::Outcome::kNoFitNow) {
    // Nothing of the gang fits now: the chain's answer, or they wait.
    std::vector<std::string> reasons;
    for (const core::PlacementResult& r : results) reasons.push_back(r.reason);
    ReportGroup(*members[0], false, results[0].reason);
    return NoFitNow(NoFit{gang_key, round.pending, members, round.running, results[0].reason},
                    reasons);
  }
  records::GangRecord record{members[0]->request.gang->name, round.size, round.min,
                             round.placed + placed};
  std::vector<const PodInfo*> told;  // the members placed now
  for (size_t i = 0; i < round.pending.size(); ++i) {
    if (!results[i].placed()) continue;
    StartBind(round.pending[i], pods_.Get(round.pending[i]), results[i].placement, &record);
    told.push_back(members[i]);
  }
  if (placed > 0) {
    spdlog::info("gang {}: placed {} members", gang_key, placed);
    ReportGroup(*members[0], true,
                StrCat(record.running, " pods of gang ", gang_key, " scheduled together"));
  }
  if (placed > 0 && round.min < round.size) {
    // An elastic gang: its oldest member (running, else the oldest placed now; members are placed
    // oldest first) hears how many run, so that one pod always tells the latest count. One Event
    // per round, not one per member: a PodGroup gang is elastic, and 1,000 groups of 8 placed at
    // once would otherwise write 9,000 Events beside their binds.
    const std::string message =
        StrCat("gang ", gang_key, ": ", record.running,
               round.size < records::kMaxGangSize ? StrCat(" of ", round.size) : std::string(),
               " members running (min ", round.min, ")");
    const PodInfo* oldest = GangAssembler::OldestRunning(round, pods_);
    if (oldest == nullptr) oldest = told.front();
    reporter_->ReportNormal(*oldest, "GangMembers", message);
    spdlog::info("{}", message);
  }
  if (placed == 0 && !results.empty()) ReportGroup(*members[0], false, results[0].reason);
  for (size_t i = 0; i < round.pending.size(); ++i) {
    if (!results[i].placed()) {
      MarkUnschedulable(round.pending[i], pods_.Get(round.pending[i]), results[i].reason);
    }
  }
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
               g.size >= records::kMaxGangSize  // a PodGroup's gang: no fixed size
                   ? StrCat("gang ", g.gang, ": ", g.present, " members exist; it starts with ",
                            g.min, "; waiting for more")
                   : g.min < g.size
                         ? StrCat("gang ", g.gang, ": ", g.present, " of its ", g.size,
                                  " members exist; it starts with ", g.min, "; waiting for more")
                         : StrCat("gang ", g.gang, ": ", g.present, " of its ", g.size,
                                  " members exist; waiting for the rest"));
      }
    }
  }
}

void SchedulerCore::RefreshReservations() {
  if (!reservations_.RefreshDue()) return;
  std::vector<ReservationAnswer::Waiting> waiting;
  absl::flat_hash_map<std::string, size_t> gang_at;
  for (const std::string& key : queue_.Waiting()) {
    const Pod* s = pods_.Find(key);
    if (s == nullptr || !s->info || !s->info->input_error.empty() || !s->info->claims.empty()) {
      continue;
    }
    const PodInfo* info = s->info.get();
    const int64_t since =
        info->created_unix >= 0 ? info->created_unix : unix_clock_.Of(s->first_seen);
    if (!info->request.gang) {
      waiting.push_back({key, {info}, since});
      continue;
    }
    auto [at, fresh] = gang_at.try_emplace(GangAssembler::KeyOf(*info), waiting.size());
    if (fresh) waiting.push_back({at->first, {}, since});
    ReservationAnswer::Waiting& w = waiting[at->second];
    w.pods.push_back(info);
    w.since = std::min(w.since, since);
  }
  if (reservations_.Refresh(waiting)) queue_.NoteChange();
}

void SchedulerCore::EnforceRuntimes() {
  if (!reservations_.enabled() || runtime_.size() == 0) return;
  PreemptionWriter* writer = preemption_.writer();
  if (writer == nullptr) return;
  const int64_t now = unix_clock_.Now();
  for (const std::shared_ptr<const PodInfo>& pod : runtime_.Due(now)) {
    const std::string message =
        StrCat("evicted by ", options_.scheduler_name, ": it declared a maximum run time of ",
               *pod->max_runtime_s, "s (", kMaxRuntimeAnnotation,
               " or spec.activeDeadlineSeconds) and has run ", now - pod->started_unix,
               "s since status.startTime");
    spdlog::info("pod {}: {}", pod->key, message);
    writer->Evict(*pod);
    reporter_->ReportWarning(*pod, "MaxRuntimeExceeded", message);
    if (metrics_ != nullptr) metrics_->max_runtime_evictions++;
  }
}

void SchedulerCore::RestartGangOf(const PodInfo& leaving) {
  const Pod* s = pods_.Find(leaving.key);
  if (s == nullptr || s->gang.empty() || !s->info->gang_restart_all) return;
  if (s->stage != Stage::kBound && s->stage != Stage::kBinding &&
      s->stage != Stage::kBindConflict) {
    return;
  }
  if (restarts_.Leaving(s->gang) > 0) {  // one of its old members
    leaving_.erase(leaving.key);
    return;
  }
  const std::string fault = ledger_.FaultOf(leaving);
  if (fault.empty()) {  // not lost to a fault (yet: OnNode asks again while it is leaving)
    leaving_.insert(leaving.key);
    return;
  }
  leaving_.erase(leaving.key);
  const std::string gang = s->gang;
  const GangAssembler::Round round = gangs_.Assemble(gang, pods_);
  const std::vector<std::string> evict = restarts_.Start(gang, leaving.key, round.running, Now());
  const std::string message = StrCat("evicted by ", options_.scheduler_name, ": gang ", gang,
                                     " restarts whole (", kGangRestartAnnotation, ": all): member ",
                                     leaving.key, " was lost to a GPU fault (", fault, ")");
  spdlog::info("gang {}: member {} lost to a GPU fault ({}); evicting its {} other member(s)", gang,
               leaving.key, fault, evict.size());
  PreemptionWriter* writer = preemption_.writer();
  for (const std::string& key : evict) {
    const PodInfo& member = *pods_.Get(key).info;
    if (writer == nullptr) {
      spdlog::warn("gang {}: cannot evict {}: no eviction writer", gang, key);
      continue;
    }
    reporter_->ReportGangRestart(member, message);  // first: what a restarted scheduler reads
    writer->Evict(member);
    reporter_->ReportWarning(member, "GangRestart", message);
  }
  if (metrics_ != nullptr) metrics_->gang_restarts++;
}

void SchedulerCore::EvictRestartingAgain() {
  if (restarts_.empty()) return;
  PreemptionWriter* writer = preemption_.writer();
  if (writer == nullptr) return;
  for (const std::string& key : restarts_.DueAgain(Now(), [&](const std::string& k) {
         const Pod* p = pods_.Find(k);
         return p == nullptr || p->info->deleting || !p->info->bound();
       })) {
    spdlog::info("gang {}: evicting old member {} again", restarts_.GangOf(key), key);
    writer->Evict(*pods_.Get(key).info);
  }
}

int SchedulerCore::ScheduleSome() {
  if (!synced()) return 0;
  ledger_.Sync();
  if (ledger_.node_changes_applied() != seen_node_changes_) {
    seen_node_changes_ = ledger_.node_changes_applied();
    book_.SetCluster(ledger_.engine().cluster());
    // Said once for each cluster it changes for (an operator's mistake, not a pod's).
    if (std::string w = ledger_.SpareRuleWarning(); w != spare_warning_) {
      if (!w.empty()) spdlog::warn("{}", w);
      spare_warning_ = std::move(w);
    }
  }
  if (ledger_.holdings_moved() != seen_holdings_moved_) {
    seen_holdings_moved_ = ledger_.holdings_moved();
    for (const std::string& key : book_.HeldKeys()) CountHeld(key);
    if (reservations_.enabled()) {
      // What the pods hold may have moved, and pods bound before their node was known are
      // accounted only now (a restart): the reservations hear it all again.
      for (const std::string& key : reservations_.Running()) TellStarted(key, false);
      for (const std::string& key : ledger_.EngineKeys()) {
        if (pods_.Find(key) != nullptr) TellStarted(key, /*placed_now=*/false);
      }
    }
  }
  if (dra_) dra_->OnNodesChanged();
  if (chain_.StartCycle(clock_())) queue_.NoteChange();
  EnforceRuntimes();
  EvictRestartingAgain();
  RefreshReservations();
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
  chain_.EndCycle(clock_());
  PublishSpares();
  return tried;
}

void SchedulerCore::PublishSpares() {
  const core::Engine& engine = ledger_.engine();
  const core::Cluster& cluster = engine.cluster();
  // The nodes that may differ from what was published: seen since, or their spares changed.
  for (const core::NodeId id : ledger_.TakeSpareChanges()) {
    if (cluster.live(id)) spares_to_check_.insert(cluster.node(id).name);
  }
  for (const std::string& name : spares_to_check_) {
    auto it = spares_published_.find(name);
    if (it == spares_published_.end()) continue;  // gone, or spares off and none shown
    const core::NodeId id = cluster.FindNode(name);
    std::string now =
        records::GpuIndicesText(records::GpuIndicesOfMask(id.valid() ? engine.spare_gpus(id) : 0));
    if (now != it->second) reporter_->ReportSpares(name, now);
    if (now.empty() && engine.spares_per_domain() == 0) {
      spares_published_.erase(it);
    } else {
      it->second = std::move(now);
    }
  }
  spares_to_check_.clear();
}

std::optional<std::chrono::steady_clock::time_point> SchedulerCore::NextWakeup() const {
  std::optional<std::chrono::steady_clock::time_point> next = queue_.NextWakeup();
  auto consider = [&](std::chrono::steady_clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (const std::string& key : conflicts_) consider(pods_.Find(key)->retry_at);
  if (std::optional<std::chrono::steady_clock::time_point> t = chain_.NextWakeup()) consider(*t);
  if (std::optional<int64_t> due = runtime_.Next()) {
    consider(unix_clock_.TimeOf(*due));
  }
  if (!gangs_.empty()) consider(queue_.next_period());  // the report of gangs short of members
  return next;
}

void SchedulerCore::PublishMetrics() {
  ledger_.PublishMetrics();
  if (metrics_ != nullptr) metrics_->SetQueues(book_.Gauges(), clock_(), book_.Namespaces());
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
