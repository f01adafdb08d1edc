// Defragmentation as the scheduler's second answer to "this pod does not fit now" (no_fit.h):
// when preemption has no plan for a pod (or a gang's pending members) that has waited long
// enough, a few pods are moved so that it fits (defrag_executor.h says when a plan is sought and
// how it is found), and the moved pods' destinations are held for their replacements
// (move_holds.h).
//
//  - Answer: a plan is carried out only when preemption could write it (its writer is set) and
//    no room is being made for these pods already (a plan under way, perhaps from before a
//    restart). Each pod planned for is nominated to its node and recorded in preemption's
//    registry (Preemption::NominateForMoves), so that preemption's guard keeps that room as it
//    keeps a preemptor's; the movers are evicted with a Warning Event "DefragmentationMove"
//    naming where they go; the waiting pods hear a Normal Event "Defragmentation" and wait with a
//    message naming the moves. No plan: it passes, with no note (the log says why). A plan is
//    made with what earlier plans promised taken as done (Promises: the pods nominated before
//    these, by preemption or defragmentation, stand in the room kept for them, the pods leaving
//    there are gone, moved pods' replacements stand at their held destinations), so several
//    pods waiting for room get their plans in one cycle, none counting on another's room.
//  - PlaceKept: a replacement of a moved pod goes to its held destination when it fits there,
//    else waits for it while the hold lasts.
//  - Admit: a single pod that would take a held destination it does not match is steered to
//    the nodes outside the holds that keep it out. Gangs are not checked against holds.
//  - OnPod: a moved pod's destination, written on it (condition tessera.dev/Moving, records/move.h)
//    before its eviction, is held again by a scheduler that starts while it is still there.
//  - StartCycle: holds whose eviction was refused (preemption's refusals) or whose time is up
//    end; their replacements, and other pods, may then go anywhere.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/scheduler/defrag_executor.h"
#include "k8s/scheduler/move_holds.h"
#include "k8s/scheduler/no_fit.h"
#include "k8s/scheduler/preemption_answer.h"
#include "k8s/scheduler/reservation_answer.h"

namespace tessera::k8s {

class DefragAnswer final : public NoFitAnswer {
 public:
  // `preemption` writes the nominations and evictions and keeps the nominated room.
  DefragAnswer(NoFitHost& host, PreemptionAnswer& preemption, DefragExecutorOptions options)
      : host_(host), preemption_(preemption), executor_(std::move(options)) {}

  const MoveHolds& holds() const { return holds_; }
  // Plans keep off room reservations hold (ReservationAnswer::HeldForPlans).
  void set_reservations(ReservationAnswer* reservations) { reservations_ = reservations; }

  std::string_view name() const override { return "defragmentation"; }
  Verdict Answer(const NoFit& unfit) override;
  Admission Admit(const Placed& placed) override;
  bool PlaceKept(const std::string& key, const PodInfo& pod) override;
  // A pod moved before a restart (condition tessera.dev/Moving, records/move.h): its hold again.
  void OnPod(const std::shared_ptr<const PodInfo>& pod) override;
  void Forget(const std::string& key) override { executor_.Forget(key); }
  bool StartCycle(TimePoint now) override;
  std::optional<TimePoint> NextWakeup() const override { return holds_.NextExpiry(); }

 private:
  // What a plan for `unfit` must take as done: the room kept for the pods nominated before it
  // (Preemption::Promises) and for the replacements of pods moved by earlier plans.
  Promised Promises(const NoFit& unfit, TimePoint now);
  // Carries out plan `d` for `unfit`; false when its movers are no longer all bound.
  bool CarryOut(const NoFit& unfit, const DefragExecutor::Decision& d, TimePoint since,
                TimePoint now);
  // A replacement of a moved pod (`held`: the holds it matches): placed at a held destination,
  // or waiting for one.
  void PlaceReplacement(const std::string& key, const PodInfo& pod,
                        const std::vector<const MoveHolds::Hold*>& held);

  NoFitHost& host_;
  PreemptionAnswer& preemption_;
  DefragExecutor executor_;
  MoveHolds holds_;  // destinations of moved pods, kept for their replacements
  ReservationAnswer* reservations_ = nullptr;
};

}  // namespace tessera::k8s
