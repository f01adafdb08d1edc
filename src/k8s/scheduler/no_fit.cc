#include "k8s/scheduler/no_fit.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::k8s {

NoFitChain::Outcome NoFitChain::Answer(const NoFit& unfit) {
  Outcome out;
  size_t asked = 0;
  for (NoFitAnswer* a : answers_) {
    ++asked;
    NoFitAnswer::Verdict v = a->Answer(unfit);
    if (v.answered) {
      out.answered = true;
      return out;
    }
    out.notes += v.note;
  }
  for (size_t i = 0; i < asked; ++i) answers_[i]->Unanswered(unfit);
  return out;
}

NoFitChain::Refusal NoFitChain::Refused(const NoFitAnswer::Placed& placed,
                                        std::span<const NoFitAnswer* const> steered) {
  Refusal plain, steering;
  for (NoFitAnswer* a : answers_) {
    NoFitAnswer::Admission ad = a->Admit(placed);
    if (ad.refused.empty()) continue;
    const bool may_steer = !placed.gang && ad.elsewhere &&
                           std::find(steered.begin(), steered.end(), a) == steered.end();
    if (may_steer && steering.why.empty()) {
      steering = Refusal{std::move(ad.refused), std::move(ad.elsewhere), a};
    } else if (!may_steer && plain.why.empty()) {
      plain = Refusal{std::move(ad.refused), std::nullopt, a};
    }
  }
  return steering.why.empty() ? plain : steering;
}

std::string NoFitChain::AdmitPod(ClusterLedger& ledger, const std::string& key, const PodInfo& pod,
                                 core::PlacementResult* r) {
  std::vector<const NoFitAnswer*> steered;
  std::optional<core::NodeSet> within;  // every set steered to so far
  while (r->placed()) {
    const PodInfo* pods[] = {&pod};
    Refusal refusal = Refused({pods, {&r->placement, 1}, /*gang=*/false}, steered);
    if (refusal.why.empty()) return "";
    ledger.HoldPlaced(key, r->placement);
    ledger.Drop(key);  // the decision is undone
    if (!refusal.elsewhere) {
      *r = core::PlacementResult{core::Outcome::kNoFitNow, refusal.why, {}};
      return refusal.why;
    }
    steered.push_back(refusal.by);
    if (!within) {
      within = std::move(refusal.elsewhere);
    } else {
      for (int n = 0; n < ledger.engine().cluster().node_count(); ++n) {
        if (!refusal.elsewhere->Contains(core::NodeId(n))) within->Set(core::NodeId(n), false);
      }
    }
    *r = ledger.DecideWith(pod, pod.request, nullptr, &*within);
    if (!r->placed()) return refusal.why;
  }
  return "";
}

std::string NoFitChain::AdmitGang(ClusterLedger& ledger, const std::vector<std::string>& keys,
                                  const std::vector<const PodInfo*>& members,
                                  std::span<const core::PlacementResult> results) {
  std::vector<const PodInfo*> placed;
  std::vector<core::Placement> where;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].placed()) continue;
    placed.push_back(members[i]);
    where.push_back(results[i].placement);
  }
  if (placed.empty()) return "";
  Refusal refusal = Refused({placed, where, /*gang=*/true}, {});
  if (refusal.why.empty()) return "";
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].placed()) ledger.Unplace(keys[i]);  // the decision is undone
  }
  return refusal.why;
}

bool NoFitChain::PlaceKept(const std::string& key, const PodInfo& pod) {
  for (NoFitAnswer* a : answers_) {
    if (a->PlaceKept(key, pod)) return true;
  }
  return false;
}

void NoFitChain::OnPod(const std::shared_ptr<const PodInfo>& pod) {
  for (NoFitAnswer* a : answers_) a->OnPod(pod);
}

void NoFitChain::Forget(const std::string& key) {
  for (NoFitAnswer* a : answers_) a->Forget(key);
}

bool NoFitChain::StartCycle(TimePoint now) {
  bool changed = false;
  for (NoFitAnswer* a : answers_) changed = a->StartCycle(now) || changed;
  return changed;
}

void NoFitChain::EndCycle(TimePoint now) {
  for (NoFitAnswer* a : answers_) a->EndCycle(now);
}

std::optional<NoFitChain::TimePoint> NoFitChain::NextWakeup() const {
  std::optional<TimePoint> next;
  for (const NoFitAnswer* a : answers_) {
    std::optional<TimePoint> t = a->NextWakeup();
    if (t && (!next || *t < *next)) next = t;
  }
  return next;
}

}  // namespace tessera::k8s
