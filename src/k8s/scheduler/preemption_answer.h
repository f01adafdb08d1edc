// Preemption and reclaim as the scheduler's first answer to "this pod does not fit now"
// (no_fit.h): the whole rule of when the live scheduler evicts, in one place.
//
//  - Planning: Preemption (preemption.h) plans with core/preemption/planner.h on the ledger's
//    what-ifs, from the bound pods, Queues and PodDisruptionBudgets it tracks. A gang gets room
//    for the members it needs (core::PreemptionMembers: all of them, or an elastic gang's up to
//    its min; none for a gang at its min, which only grows into free room), on nodes every
//    member may use.
//  - A plan: each pod planned for is nominated (status.nominatedNodeName; written only when it
//    changes), the victims are evicted (Eviction API) with a Warning Event "Preempted" naming
//    what they make room for, and the pods wait with a message naming their node(s) and how many
//    pods there are still to end.
//  - A pod (or any member of a gang) whose preemptionPolicy is Never (its own, or its PodGroup's)
//    evicts nobody: it passes on with the note "; it evicts nobody (preemptionPolicy Never)".
//  - No plan: the pod passes on to the next answer with the note "; preemption would not help:
//    <why>". If no answer takes it, a nomination it had is withdrawn (cleared on the API server)
//    unless the room is still being made (victims there still terminating) or the plan could not
//    be made yet (budgets not listed).
//  - Reservations (reservation_answer.h): a plan uses only the nodes where no reservation holds
//    room from the pods planned for.
//  - Room kept: a placement (a pod, or a gang's members) that would take room nominated for
//    pods that outrank it is refused (Preemption::Guard); the pods wait with the reason.
//  - Refused evictions (a budget that changed since the plan) come back at the start of each
//    cycle: those pods are no candidates for Preemption::kEvictingFor (refusals() tells the
//    answers that build on this one: defragmentation ends the holds of moves that did not
//    happen).
//
// Off until Enable gives it a writer: then it passes every pod on without a note.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/scheduler/no_fit.h"
#include "k8s/scheduler/preemption.h"
#include "k8s/scheduler/reservation_answer.h"

namespace tessera::k8s {

class PreemptionAnswer final : public NoFitAnswer {
 public:
  explicit PreemptionAnswer(NoFitHost& host) : host_(host) {}

  void Enable(PreemptionWriter* writer) { writer_ = writer; }
  // Reservations (reservation_answer.h): plans stay off the nodes where room is held from the
  // pods planned for (so no eviction hands held room to a pod that may not take it).
  void set_reservations(ReservationAnswer* reservations) { reservations_ = reservations; }
  // Null while preemption is off. Answers that nominate or evict (defragmentation) write here.
  PreemptionWriter* writer() const { return writer_; }
  // The nominations, evictions and budgets: one registry for every answer that makes room.
  Preemption& preemption() { return preemption_; }
  const Preemption& preemption() const { return preemption_; }
  // The evictions refused since the previous cycle (taken at this cycle's start).
  const std::vector<PreemptionWriter::Refusal>& refusals() const { return refusals_; }

  std::string_view name() const override { return "preemption"; }
  Verdict Answer(const NoFit& unfit) override;
  void Unanswered(const NoFit& unfit) override;
  Admission Admit(const Placed& placed) override;
  void OnPod(const std::shared_ptr<const PodInfo>& pod) override;
  void Forget(const std::string& key) override { preemption_.Forget(key); }
  bool StartCycle(TimePoint now) override;

 private:
  // A plan for one pod, or for a gang's pending members (all, or an elastic gang's first ones):
  // nominated, victims evicted, the pods told; else a pass with the planner's reason.
  Verdict AnswerPod(const NoFit& unfit);
  Verdict AnswerGang(const NoFit& unfit);
  // `allowed` (nullopt: every node) less the nodes where reservations hold room from `members`.
  std::optional<core::NodeSet> Unreserved(std::optional<core::NodeSet> allowed,
                                          std::span<const PodInfo* const> members);

  NoFitHost& host_;
  PreemptionWriter* writer_ = nullptr;
  ReservationAnswer* reservations_ = nullptr;
  Preemption preemption_;
  std::vector<PreemptionWriter::Refusal> refusals_;
  // Set by an Answer that planned and found nothing, for the Unanswered that may follow:
  // whether the plan was only put off (budgets not listed), which keeps a nomination.
  std::optional<bool> undecided_;
};

}  // namespace tessera::k8s
