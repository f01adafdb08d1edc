// Reservations with backfill in the live scheduler (issue 31). The rule is core::Reservations
// (core/reservations/reservations.h), one for the simulator and the scheduler: room held for the
// big pod or gang that has waited longest, which other pods may take only if they are its owner,
// outrank it, or declare a run time that ends before it is expected to start (backfill). Off
// unless the configuration's reservations.max is above 0. This file is the wiring:
//
//  - What runs: SchedulerCore tells Started whenever a pod's placement is held in the engine (its
//    bind, or a bound pod seen on the watch: how a restarted scheduler rebuilds what runs, with
//    the start from status.startTime, else now) and Ended when it is released. A pod's declared
//    run time is PodInfo::max_runtime_s (tessera.dev/max-runtime, spec.activeDeadlineSeconds).
//  - Each cycle (Refresh, before any pod is tried, at most once a second): the waiting pods in
//    the scheduling queue's order (SchedulingQueue::Waiting), a gang's waiting members together,
//    waiting since their creation; reservations are dropped, kept and made (Reservations::Update).
//    Every waiting pod of an owner gets a Normal Event `Reserved` when its room is reserved or
//    moves: where, and when it is expected to be free. Its condition tessera.dev/Reserved
//    (records/reservation.h; what `tessera status` lists) is written True when the room is
//    reserved, moves, or its expected start moves by kRewriteAfterS or more, and False when the
//    room is no longer held while the pod still waits. What a pod's condition says is taken from
//    the pod as seen (a restarted scheduler rewrites only what changed, and releases a
//    reservation an earlier one made that it did not make again), then from what this one wrote.
//  - Placement: a single pod is decided under the reservations (Decide: Reservations::Place
//    through ClusterLedger::DecideReserved): the policy's choice when it takes nothing held from
//    it, else the policy's choice among what it may take. A pod placed on held room by backfill
//    gets a Normal Event `Backfilled` and is counted.
//  - A gang's members are decided under the reservations too (DecideGang: Reservations::
//    PlaceGang): the gang runs off held room where it fits there, and waits where it fits only on
//    room held from it.
//  - Room kept (Admit, no_fit.h): any other placement (a pod steered by another answer) that
//    takes held room its pods may not take is refused; a single pod is steered to the nodes
//    where nothing is held from it, a gang waits (a safety net for gangs: DecideGang keeps them
//    off held room in the first place, save CPU and memory its members take together).
//  - Preemption plans only on the nodes where nothing is held from the preemptor (Unheld), so that
//    it never evicts pods to hand held room to a pod that may not take it. Defragmentation plans
//    move no pod onto held room, and land the pod planned for on held room only where it may
//    take it, its own reservation's included (HeldForPlans).
//  - Owners are named by key: a pod by "ns/name", a gang by "ns/gang" (requests are given to the
//    reservations with the gang's name so), so that names in different namespaces never meet.
// Time is Unix seconds: the host's steady clock on a wall-clock base taken at the first use.
// Not thread-safe: the scheduler thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/plan/defrag.h"
#include "core/reservations/reservations.h"
#include "k8s/scheduler/no_fit.h"
#include "records/reservation.h"

namespace tessera::k8s {

class ReservationAnswer final : public NoFitAnswer {
 public:
  ReservationAnswer(NoFitHost& host, core::ReservationOptions options)
      : host_(host), reservations_(options) {}

  bool enabled() const { return reservations_.enabled(); }
  const core::Reservations& reservations() const { return reservations_; }

  // `key` holds `placement` in the engine from now on: placed now (`start` nullopt: now), or
  // bound already (start from status.startTime, when the pod shows one).
  void Started(const std::string& key, const PodInfo& pod, const core::Placement& placement,
               bool placed_now);
  void Ended(const std::string& key);
  // The keys told Started and not Ended (to tell them again when the ledger moved what they hold).
  std::vector<std::string> Running() const { return {running_.begin(), running_.end()}; }

  // A pod or a gang's waiting members, as the queue orders them.
  struct Waiting {
    std::string owner;                 // the pod's key, or the gang's ("ns/gang")
    std::vector<const PodInfo*> pods;  // the pod, or the gang's waiting members
    int64_t since = 0;                 // Unix seconds
  };
  // Whether a Refresh is due (at most one a second).
  bool RefreshDue() const {
    return enabled() && (!refreshed_ || host_.Now() - *refreshed_ >= std::chrono::seconds(1));
  }
  // Brings the reservations up to date with `waiting` (in the queue's order). True when a
  // reservation was dropped (the room it held may let pods fit).
  bool Refresh(std::span<const Waiting> waiting);

  // The decision for a single pod under the reservations (committed when placed, under its key).
  core::PlacementResult Decide(const PodInfo& pod);
  // The decision for a gang's waiting members under the reservations (ClusterLedger::
  // DecideGangMembers with Reservations::PlaceGang; committed when placed): it keeps off room
  // held for another where it fits elsewhere.
  std::vector<core::PlacementResult> DecideGang(const std::vector<const PodInfo*>& members,
                                                const std::vector<std::string>& running,
                                                const std::string& gang_key);
  // Said once its placement stands (AdmitPod admitted it): counts and tells a backfilled pod.
  void NotePlaced(const std::string& key, const PodInfo& pod, const core::Placement& placement);

  // The nodes where no reservation holds anything `pods` may not take; nullopt when none holds
  // anything from them (every node).
  std::optional<core::NodeSet> Unheld(std::span<const PodInfo* const> pods);

  // The room reservations hold, for a defragmentation plan for `members` (one pod or a gang):
  // no pod is moved onto it; the members may land on what they may take (their own
  // reservation's, or room they outrank or backfill). Empty when none is held.
  std::vector<plan::DefragInput::Held> HeldForPlans(std::span<const PodInfo* const> members);

  // The request as the reservations see it: a gang member's gang named by its key.
  static core::PodRequest RequestOf(const PodInfo& pod);

  // A condition whose expected start is off by less than this is not rewritten.
  static constexpr int64_t kRewriteAfterS = 60;

  std::string_view name() const override { return "reservations"; }
  // Takes no pod: a pod whose room is reserved waits for it (said in the note).
  Verdict Answer(const NoFit& unfit) override;
  Admission Admit(const Placed& placed) override;

 private:
  std::string Describe(const core::Reservation& r);
  void Publish();
  // The record of `r` for its condition.
  records::ReservationRecord RecordOf(const core::Reservation& r, bool gang) const;
  // Writes the waiting pods' conditions tessera.dev/Reserved where they differ from what they
  // should say (`held`: each owner's reservation).
  void WriteConditions(std::span<const Waiting> waiting,
                       const absl::flat_hash_map<std::string_view, const core::Reservation*>& held);

  NoFitHost& host_;
  core::Reservations reservations_;
  std::optional<TimePoint> refreshed_;
  // What each owner was last told (so a kept reservation is not said again).
  absl::flat_hash_map<std::string, std::string> told_;
  // What each waiting pod's condition tessera.dev/Reserved says as this scheduler wrote it
  // (nullopt: Released), so that a write is not repeated before the watch shows it.
  absl::flat_hash_map<std::string, std::optional<records::ReservationRecord>> conditions_;
  // The last Admit's word on each single pod (NotePlaced reads it for the placement that stood).
  absl::flat_hash_map<std::string, core::Admission> admitted_;
  absl::flat_hash_set<std::string> running_;
};

}  // namespace tessera::k8s
