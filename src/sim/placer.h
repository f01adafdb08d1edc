// Places and releases pods on a ClusterState with a policy, exactly as core::Engine::Place does
// (Effective request, Query, Policy::Choose, ClusterState::Apply, Policy::OnNodeChanged), minus
// what a replay of ten thousand pods cannot afford and does not use: the engine's ledger keyed by
// pod name (the replay keeps placements by trace index) and the per-node explanation the engine
// builds for every pod that does not fit. Whether a pod can never fit is decided by core's
// NeverFitsReason, remembered per request shape since it depends only on the cluster.
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/cluster_state.h"
#include "core/model/placement.h"
#include "core/policy/paper.h"
#include "core/policy/policy.h"

namespace tessera::sim {

class Placer {
 public:
  // `cluster` must outlive the placer.
  Placer(const core::Cluster& cluster, std::unique_ptr<core::Policy> policy);

  // kPlaced (and *placement set), kNoFitNow or kNeverFits.
  core::Outcome Place(const core::PodRequest& request, core::Placement* placement);
  // Returns what a placement made by Place took.
  void Release(const core::Placement& placement);

  const core::ClusterState& state() const { return state_; }
  core::Policy& policy() { return *policy_; }
  // Why a pod of this shape can never fit (empty when it can).
  std::string NeverFitsReason(const core::PodRequest& request);

 private:
  std::unique_ptr<core::Policy> policy_;
  core::ClusterState state_;
  absl::flat_hash_map<core::RequestShape, std::string> never_;
};

}  // namespace tessera::sim
