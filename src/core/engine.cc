#include "core/engine.h"

#include <algorithm>
#include <climits>

#include "common/strings.h"
#include "common/status.h"
#include "core/fit.h"

namespace tessera::core {

Engine::Engine(const Cluster& cluster, std::unique_ptr<Policy> policy,
               std::vector<TopologyLevel> levels)
    : cluster_(&cluster),
      policy_(std::move(policy)),
      state_(cluster),
      domains_(cluster, std::move(levels)) {
  policy_->Attach(state_);
}

void Engine::Commit(const Placement& p) {
  state_.Apply(p);
  policy_->OnNodeChanged(state_, p.node);
}

void Engine::Undo(const Placement& p) {
  state_.Revert(p);
  policy_->OnNodeChanged(state_, p.node);
}

PlacementResult Engine::Place(const PodRequest& request, Mode mode,
                              const std::vector<Candidate>* allowed) {
  PlacementResult result;
  if (ledger_.contains(request.name)) {
    result.reason = StrCat("pod ", request.name, " is already placed");
    return result;
  }
  const PodRequest& effective = policy_->Effective(request);
  Query query(state_, effective, allowed);
  std::vector<NodeId> declined;
  std::optional<NodeChoice> choice = policy_->Choose(state_, query, &declined);
  if (!choice) {
    if (std::optional<std::string> never = NeverFitsReason(state_, query)) {
      result.outcome = Outcome::kNeverFits;
      result.reason = std::move(*never);
    } else {
      result.reason = ExplainNoFit(state_, query, declined);
    }
    return result;
  }
  result.outcome = Outcome::kPlaced;
  result.placement = std::move(choice->placement);
  if (mode == Mode::kCommit) {
    Commit(result.placement);
    ledger_.emplace(request.name, result.placement);
  }
  return result;
}

absl::Status Engine::Release(std::string_view pod) {
  auto it = ledger_.find(ToAbsl(pod));
  if (it == ledger_.end()) {
    return absl::NotFoundError(StrCat("pod ", pod, " holds no allocation"));
  }
  Undo(it->second);
  ledger_.erase(it);
  return absl::OkStatus();
}

absl::Status Engine::Restore(std::string_view pod, const Placement& placement) {
  if (ledger_.contains(ToAbsl(pod))) {
    return absl::AlreadyExistsError(StrCat("pod ", pod, " is already placed"));
  }
  std::string why;
  if (!state_.CanApply(placement, &why)) {
    return absl::FailedPreconditionError(
        StrCat("cannot restore pod ", pod, ": ", why));
  }
  Commit(placement);
  ledger_.emplace(std::string(pod), placement);
  return absl::OkStatus();
}

const Placement* Engine::Find(std::string_view pod) const {
  auto it = ledger_.find(ToAbsl(pod));
  return it == ledger_.end() ? nullptr : &it->second;
}

bool Engine::PlaceAll(std::span<const PodRequest> members,
                      const std::vector<Candidate>* candidates, std::vector<Placement>* placed,
                      std::string* failure) {
  placed->clear();
  for (const PodRequest& m : members) {
    const PodRequest& effective = policy_->Effective(m);
    Query query(state_, effective, candidates);
    std::vector<NodeId> declined;
    std::optional<NodeChoice> choice = policy_->Choose(state_, query, &declined);
    if (!choice) {
      if (failure) {
        *failure = StrCat("member ", m.name, ": ", ExplainNoFit(state_, query, declined));
      }
      for (auto it = placed->rbegin(); it != placed->rend(); ++it) Undo(*it);
      placed->clear();
      return false;
    }
    Commit(choice->placement);
    placed->push_back(std::move(choice->placement));
  }
  return true;
}

int64_t Engine::FreeComputeIn(const std::vector<Candidate>& candidates) const {
  int64_t free = 0;
  for (const Candidate& c : candidates) {
    std::span<const GpuState> gpus = state_.gpus(c.node);
    for (uint64_t a = c.gpu_mask & cluster_->node(c.node).all_gpus_mask(); a; a &= a - 1) {
      const GpuState& g = gpus[__builtin_ctzll(a)];
      if (!g.exclusive) free += g.free_compute_milli;
    }
  }
  return free;
}

std::vector<PlacementResult> Engine::PlaceGangIndependently(
    std::span<const PodRequest> members, Mode mode, const std::vector<Candidate>* allowed) {
  std::vector<PlacementResult> results;
  for (const PodRequest& m : members) results.push_back(Place(m, Mode::kCommit, allowed));
  if (mode == Mode::kTestOnly) {
    for (size_t i = 0; i < members.size(); ++i) {
      if (results[i].placed()) TESSERA_CHECK(Release(members[i].name).ok());
    }
  }
  return results;
}

// `domain` restricted to `allowed` (nodes and GPUs in both); its GPU count in *gpus.
static std::vector<Candidate> Restrict(const Cluster& cluster, const Domain& domain,
                                       const std::vector<Candidate>& allowed, int* gpus) {
  std::vector<Candidate> out;
  *gpus = 0;
  for (const Candidate& d : domain.candidates) {
    for (const Candidate& a : allowed) {
      if (a.node != d.node) continue;
      uint64_t mask = d.gpu_mask & a.gpu_mask & cluster.node(d.node).all_gpus_mask();
      out.push_back(Candidate{d.node, mask});
      *gpus += __builtin_popcountll(mask);
      break;
    }
  }
  return out;
}

std::vector<PlacementResult> Engine::PlaceGang(std::span<const PodRequest> members, Mode mode,
                                               const std::vector<Candidate>* allowed) {
  std::vector<PlacementResult> results(members.size());
  if (members.empty()) return results;
  auto fail_all = [&](Outcome outcome, const std::string& reason) {
    for (PlacementResult& r : results) {
      r.outcome = outcome;
      r.reason = reason;
      r.placement = Placement{};
    }
    return results;
  };
  const GangAsk gang = members[0].gang.value_or(GangAsk{});
  for (const PodRequest& m : members) {
    if (ledger_.contains(m.name)) {
      return fail_all(Outcome::kNoFitNow, StrCat("pod ", m.name, " is already placed"));
    }
  }
  if (!policy_->places_gangs_together()) return PlaceGangIndependently(members, mode, allowed);
  if (gang.size > 0 && static_cast<size_t>(gang.size) != members.size()) {
    return fail_all(Outcome::kNoFitNow, StrCat("gang ", gang.name, " has ", members.size(),
                                                     " of its ", gang.size, " members"));
  }
  // The fewest GPUs the gang can fit on: whole GPUs add up, shares may all share one GPU.
  int demand_gpus = 0;
  bool any_share = false;
  for (const PodRequest& m : members) {
    const PodRequest& effective = policy_->Effective(m);
    if (effective.gpu.kind == GpuAsk::Kind::kWhole) {
      demand_gpus += effective.gpu.count;
    } else if (effective.gpu.kind != GpuAsk::Kind::kNone) {
      any_share = true;
    }
    Query query(state_, effective);
    if (std::optional<std::string> never = NeverFitsReason(state_, query)) {
      return fail_all(Outcome::kNeverFits, StrCat("member ", m.name, ": ", *never));
    }
  }

  if (any_share && demand_gpus == 0) demand_gpus = 1;

  std::vector<Placement> placed;
  auto finish = [&]() {
    for (size_t i = 0; i < members.size(); ++i) {
      results[i].outcome = Outcome::kPlaced;
      results[i].placement = placed[i];
    }
    if (mode == Mode::kCommit) {
      for (size_t i = 0; i < members.size(); ++i) ledger_.emplace(members[i].name, placed[i]);
    } else {
      for (auto it = placed.rbegin(); it != placed.rend(); ++it) Undo(*it);
    }
    return results;
  };

  // A topology domain as this gang may use it: all of it, or what `allowed` leaves of it.
  std::vector<Candidate> restricted;
  auto usable = [&](const Domain& d, int* gpus) -> const std::vector<Candidate>* {
    if (allowed == nullptr) {
      *gpus = d.gpu_count;
      return &d.candidates;
    }
    restricted = Restrict(*cluster_, d, *allowed, gpus);
    return &restricted;
  };
  std::string failure;
  if (gang.level.empty()) {
    if (PlaceAll(members, allowed, &placed, &failure)) return finish();
    return fail_all(Outcome::kNoFitNow, StrCat("gang ", gang.name, ": ", failure));
  }
  const int level = domains_.LevelIndex(gang.level);
  if (level < 0) {
    std::vector<std::string> names;
    for (const TopologyLevel& l : domains_.levels()) names.push_back(l.name);
    return fail_all(Outcome::kNeverFits,
                    StrCat("gang ", gang.name, " asks for unknown topology level \"",
                                 gang.level, "\" (configured: ", StrJoin(names, ", "), ")"));
  }
  std::vector<int> levels;
  if (gang.required) {
    levels.push_back(level);
  } else {
    for (int l = 0; l < static_cast<int>(domains_.levels().size()); ++l) levels.push_back(l);
  }
  for (int l : levels) {
    const std::vector<Domain>& domains = domains_.domains(l);
    int best = -1;
    int64_t best_left = INT64_MAX;
    for (size_t d = 0; d < domains.size(); ++d) {
      int gpus = 0;
      const std::vector<Candidate>* candidates = usable(domains[d], &gpus);
      if (gpus < demand_gpus) continue;
      if (!PlaceAll(members, candidates, &placed, nullptr)) continue;
      int64_t left = FreeComputeIn(*candidates);
      for (auto it = placed.rbegin(); it != placed.rend(); ++it) Undo(*it);
      if (left < best_left) {
        best = static_cast<int>(d);
        best_left = left;
      }
    }
    if (best >= 0) {
      int gpus = 0;
      TESSERA_CHECK(PlaceAll(members, usable(domains[best], &gpus), &placed, nullptr));
      return finish();
    }
  }
  if (!gang.required) {
    if (PlaceAll(members, allowed, &placed, &failure)) return finish();
    return fail_all(Outcome::kNoFitNow, StrCat("gang ", gang.name, ": ", failure));
  }
  // Required and nothing fits: never (no domain is big enough) or not now.
  int largest = 0;
  int64_t most_free = 0;
  for (const Domain& d : domains_.domains(level)) {
    int gpus = 0;
    const std::vector<Candidate>* candidates = usable(d, &gpus);
    largest = std::max(largest, gpus);
    int64_t free = 0;
    for (const Candidate& c : *candidates) {
      free += __builtin_popcountll(state_.whole_free_mask(c.node) & c.gpu_mask);
    }
    most_free = std::max(most_free, free);
  }
  if (largest < demand_gpus) {
    return fail_all(Outcome::kNeverFits,
                    StrCat("gang ", gang.name, " needs ", demand_gpus, " GPUs inside one ",
                                 gang.level, "; the largest has ", largest));
  }
  return fail_all(Outcome::kNoFitNow,
                  StrCat("gang ", gang.name, ": no ", gang.level, " has room for all ",
                               members.size(), " members now (needs ", demand_gpus,
                               " GPUs; at most ", most_free, " fully free in one)"));
}

}  // namespace tessera::core
