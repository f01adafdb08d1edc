#include "sim/placer.h"

#include "core/fit.h"

namespace tessera::sim {

Placer::Placer(const core::Cluster& cluster, std::unique_ptr<core::Policy> policy)
    : policy_(std::move(policy)), state_(cluster) {
  policy_->Attach(state_);
}

std::string Placer::NeverFitsReason(const core::PodRequest& request) {
  core::Query query(state_, request);
  core::RequestShape shape = core::RequestShape::Of(query);
  auto it = never_.find(shape);
  if (it == never_.end()) {
    std::optional<std::string> why = core::NeverFitsReason(state_, query);
    it = never_.emplace(shape, why.value_or(std::string())).first;
  }
  return it->second;
}

core::Outcome Placer::Place(const core::PodRequest& request, core::Placement* placement) {
  const core::PodRequest& effective = policy_->Effective(request);
  core::Query query(state_, effective);
  std::optional<core::NodeChoice> choice = policy_->Choose(state_, query, nullptr);
  if (!choice) {
    return NeverFitsReason(effective).empty() ? core::Outcome::kNoFitNow
                                              : core::Outcome::kNeverFits;
  }
  state_.Apply(choice->placement);
  policy_->OnNodeChanged(state_, choice->placement.node);
  *placement = std::move(choice->placement);
  return core::Outcome::kPlaced;
}

void Placer::Release(const core::Placement& placement) {
  state_.Revert(placement);
  policy_->OnNodeChanged(state_, placement.node);
}

}  // namespace tessera::sim
