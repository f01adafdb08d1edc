// Places and releases the pods of a trace replay with core::Engine's one decision
// (Engine::Decide in Mode::kApply: the policy's choice exactly as Mode::kCommit makes it), minus
// what a replay of ten thousand pods cannot afford and does not use: the engine's ledger keyed by
// pod name (the replay keeps placements by trace index) and the per-node explanation built for
// every pod that does not fit. Gang members are the exception: the engine's gang rules find the
// members running by name, so they are placed and released by name. Whether a pod can never fit
// is the engine's answer, remembered per request shape.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/engine.h"
#include "core/reservations/reservations.h"

namespace tessera::sim {

class Placer {
 public:
  // `cluster` must outlive the placer.
  Placer(const core::Cluster& cluster, std::unique_ptr<core::Policy> policy,
         std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels())
      : engine_(cluster, std::move(policy), std::move(levels)) {}

  // kPlaced (and *placement set), kNoFitNow or kNeverFits.
  core::Outcome Place(const core::PodRequest& request, core::Placement* placement) {
    core::PlacementResult r = engine_.DecideOne(core::Ask::Pod(request).As(core::Mode::kApply));
    if (r.placed()) *placement = std::move(r.placement);
    return r.outcome;
  }
  // As Place, under reservations (core/reservations/reservations.h: Reservations::Place, the
  // one rule for held room); `how` gets how the placement stood with them.
  core::Outcome PlaceReserved(const core::Reservations& reservations,
                              const core::PodRequest& request, int64_t now,
                              std::optional<int64_t> max_runtime_s, core::Placement* placement,
                              core::Admission* how) {
    core::PlacementResult r =
        reservations.Place(engine_, request, core::Mode::kApply, now, max_runtime_s, how);
    if (r.placed()) *placement = std::move(r.placement);
    return r.outcome;
  }
  // For the reservations' choices (Reservations::Update).
  const core::Engine& engine() const { return engine_; }
  // Takes a placement decided elsewhere (a defragmentation plan's); Release returns it.
  absl::Status Apply(const core::Placement& placement) { return engine_.ApplyUnnamed(placement); }
  // Returns what a placement made by Place took.
  void Release(const core::Placement& placement) { engine_.Unapply(placement); }

  // Gang members, which the engine keeps by name (its elastic-gang rule looks up the members
  // running): `pending` (named, oldest first) beside the members named in `running`, as
  // Engine::PlaceElasticGang decides it; ReleaseMember frees one.
  std::vector<core::PlacementResult> PlaceGangMembers(std::span<const core::PodRequest> pending,
                                                      std::span<const std::string> running) {
    return engine_.PlaceElasticGang(pending, running);
  }
  void ReleaseMember(const std::string& name) { TESSERA_CHECK(engine_.Release(name).ok()); }

  const core::ClusterState& state() const { return engine_.state(); }
  core::Policy& policy() { return engine_.policy(); }
  // Why a pod of this shape can never fit (empty when it can).
  std::string NeverFitsReason(const core::PodRequest& request) {
    return engine_.NeverFitsReason(request).value_or(std::string());
  }

 private:
  core::Engine engine_;
};

}  // namespace tessera::sim
