#include "k8s/scheduler/preemption_answer.h"

#include <algorithm>

#include "common/strings.h"
#include "core/preemption/planner.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

void PreemptionAnswer::OnPod(const std::shared_ptr<const PodInfo>& pod) {
  if (pod->bound()) {
    preemption_.Track(pod);
  } else {
    preemption_.Observe(pod);
  }
}

bool PreemptionAnswer::StartCycle(TimePoint now) {
  refusals_.clear();
  if (writer_ == nullptr) return false;
  refusals_ = writer_->TakeRefusals();
  preemption_.NoteRefusals(refusals_, now);
  // A refused victim breaks the plan that counted on it: the nominated pods are tried again in
  // this cycle (one plans anew or gives up its nomination; those behind it plan again).
  return !refusals_.empty();
}

NoFitAnswer::Admission PreemptionAnswer::Admit(const Placed& placed) {
  return Admission{preemption_.Guard(host_.ledger(), placed.pods, placed.placements), {}};
}

NoFitAnswer::Verdict PreemptionAnswer::Answer(const NoFit& unfit) {
  undecided_.reset();
  if (writer_ == nullptr || unfit.members.empty()) return Verdict::Pass();
  for (const PodInfo* m : unfit.members) {
    if (!m->may_preempt) {
      return Verdict::Pass(StrCat("; it evicts nobody (preemptionPolicy Never",
                                  m->pod_group.empty() ? "" : " of the pod or its PodGroup", ")"));
    }
  }
  if (!unfit.gang()) return AnswerPod(unfit);
  // A gang's room: for the members it needs (an elastic gang at its min evicts nobody to grow).
  const int want = core::PreemptionMembers(*unfit.members[0]->request.gang,
                                           static_cast<int>(unfit.running.size()),
                                           static_cast<int>(unfit.members.size()));
  if (want <= 0) return Verdict::Pass();
  return AnswerGang(unfit);
}

void PreemptionAnswer::Unanswered(const NoFit& unfit) {
  if (!undecided_ || *undecided_) return;  // no plan was sought, or none could be made yet
  undecided_.reset();
  const TimePoint now = host_.Now();
  for (size_t i = 0; i < unfit.keys.size(); ++i) {
    // No plan, and nothing under way for it: its nomination is withdrawn.
    if (!preemption_.RoomBeingMade(host_.ledger(), unfit.keys[i], now) &&
        preemption_.Withdraw(*unfit.members[i])) {
      writer_->Nominate(*unfit.members[i], "");
    }
  }
}

std::optional<core::NodeSet> PreemptionAnswer::Unreserved(std::optional<core::NodeSet> allowed,
                                                          std::span<const PodInfo* const> members) {
  if (reservations_ == nullptr) return allowed;
  std::optional<core::NodeSet> unheld = reservations_->Unheld(members);
  if (!unheld) return allowed;
  if (!allowed) return unheld;
  for (int n = 0; n < host_.ledger().engine().cluster().node_count(); ++n) {
    if (!unheld->Contains(core::NodeId(n))) allowed->Set(core::NodeId(n), false);
  }
  return allowed;
}

NoFitAnswer::Verdict PreemptionAnswer::AnswerPod(const NoFit& unfit) {
  const std::string& key = unfit.keys[0];
  const PodInfo& pod = *unfit.members[0];
  std::shared_ptr<const ClusterLedger::Allowed> allowed = host_.ledger().AllowedFor(pod);
  std::optional<core::NodeSet> within = Unreserved(
      allowed ? std::optional<core::NodeSet>(allowed->nodes) : std::nullopt, unfit.members);
  const std::string* nominated = preemption_.NominatedNode(key);
  const std::string before = nominated ? *nominated : pod.nominated_node;
  const DecisionTimer timer(host_.metrics());
  Preemption::Decision d = preemption_.Plan(host_.ledger(), host_.queues(), pod,
                                            within ? &*within : nullptr, host_.Now());
  timer.Observe();
  if (!d.found) {
    undecided_ = d.undecided;
    return Verdict::Pass(StrCat("; preemption would not help: ", d.reason));
  }
  preemption_.Observe(host_.pods().Find(key)->info);  // the nomination knows its pod first
  if (before != d.node) writer_->Nominate(pod, d.node);
  if (SchedulerMetrics* m = host_.metrics()) m->CountPreemption(d.evict.size());
  for (const std::shared_ptr<const PodInfo>& v : d.evict) {
    spdlog::info("preemption: evicting pod {} from node {} for pod {}", v->key, d.node, key);
    writer_->Evict(*v);
    host_.reporter().ReportWarning(
        *v, "Preempted",
        StrCat("evicted by ", host_.scheduler_name(), " to make room on node ", d.node, " for pod ",
               key, " (priority ", pod.priority, ", queue ", pod.queue, ")"));
  }
  host_.MarkUnschedulable(
      key, StrCat("nominated to node ", d.node, ": waiting for ", d.evict.size() + d.awaited,
                  " pod(s) there to end (", d.evict.size(), " evicted now for this pod)"));
  return Verdict::Answered();
}

NoFitAnswer::Verdict PreemptionAnswer::AnswerGang(const NoFit& unfit) {
  const std::vector<std::string>& keys = unfit.keys;
  const std::vector<const PodInfo*>& members = unfit.members;
  ClusterLedger& ledger = host_.ledger();
  // The nodes every member may use.
  std::optional<core::NodeSet> allowed;
  for (const PodInfo* m : members) {
    std::shared_ptr<const ClusterLedger::Allowed> a = ledger.AllowedFor(*m);
    if (!a) continue;
    if (!allowed) {
      allowed = a->nodes;
      continue;
    }
    for (int n = 0; n < ledger.engine().cluster().node_count(); ++n) {
      if (allowed->Contains(core::NodeId(n)) && !a->nodes.Contains(core::NodeId(n))) {
        allowed->Set(core::NodeId(n), false);
      }
    }
  }
  allowed = Unreserved(std::move(allowed), members);
  std::vector<std::string> before;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string* nominated = preemption_.NominatedNode(keys[i]);
    before.push_back(nominated ? *nominated : members[i]->nominated_node);
  }
  const DecisionTimer timer(host_.metrics());
  Preemption::Decision d = preemption_.PlanGang(
      ledger, host_.queues(), members, allowed ? &*allowed : nullptr, host_.Now(), unfit.running);
  timer.Observe();
  if (!d.found) {
    undecided_ = d.undecided;
    return Verdict::Pass(StrCat("; preemption would not help: ", d.reason));
  }
  const size_t planned = d.nodes.size();  // an elastic gang: its first members only
  for (size_t i = 0; i < planned; ++i) {
    preemption_.Observe(host_.pods().Find(keys[i])->info);  // the nomination knows its pod
    if (before[i] != d.nodes[i]) writer_->Nominate(*members[i], d.nodes[i]);
  }
  const PodInfo& first = *members[0];
  if (SchedulerMetrics* m = host_.metrics()) m->CountPreemption(d.evict.size());
  for (const std::shared_ptr<const PodInfo>& v : d.evict) {
    spdlog::info("preemption: evicting pod {} from node {} for gang {}", v->key, v->node_name,
                 unfit.what);
    writer_->Evict(*v);
    host_.reporter().ReportWarning(
        *v, "Preempted",
        StrCat("evicted by ", host_.scheduler_name(), " to make room on node ", v->node_name,
               " for gang ", unfit.what, " (", planned, " pods, priority ", first.priority,
               ", queue ", first.queue, ")"));
  }
  std::vector<std::string> distinct = d.nodes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const std::string waiting =
      StrCat(": waiting for ", d.evict.size() + d.awaited, " pod(s) there to end (", d.evict.size(),
             " evicted now for this gang)");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < planned) {
      host_.MarkUnschedulable(
          keys[i], StrCat("gang ", unfit.what, " nominated to node(s) ", StrJoin(distinct, ", "),
                          " (this pod to ", d.nodes[i], ")", waiting));
      continue;
    }
    host_.MarkUnschedulable(
        keys[i],
        StrCat("gang ", unfit.what, ": ", planned, " of its members nominated to node(s) ",
               StrJoin(distinct, ", "), ", the ", planned, " it needs to reach its min of ",
               first.request.gang->min_members(), waiting,
               "; this pod joins when room frees up (an elastic gang "
               "evicts nobody to grow)"));
  }
  return Verdict::Answered();
}

}  // namespace tessera::k8s
