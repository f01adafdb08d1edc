#include "core/engine.h"

#include <algorithm>
#include <climits>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/topology/mig_select.h"

namespace tessera::core {

Engine::Engine(const Cluster& cluster, std::unique_ptr<Policy> policy,
               std::vector<TopologyLevel> levels)
    : cluster_(cluster),
      policy_(std::move(policy)),
      state_(cluster_),
      domains_(cluster_, std::move(levels)) {
  IndexDomains();
  policy_->Attach(state_);
}

Engine::Engine(const Engine& base, std::unique_ptr<Policy> policy)
    : cluster_(base.cluster_),
      policy_(std::move(policy)),
      state_(base.state_, cluster_),
      domains_(base.domains_, cluster_),
      domain_free_(base.domain_free_),
      by_free_(base.by_free_),
      node_domains_(base.node_domains_),
      ledger_(base.ledger_),
      spares_per_domain_(base.spares_per_domain_),
      spare_mask_(base.spare_mask_),
      spare_count_(base.spare_count_) {
  policy_->AttachCopy(state_, *base.policy_);
}

void Engine::Commit(const Placement& p) {
  state_.Apply(p);
  policy_->OnNodeChanged(state_, p.node);
  UpdateDomains(p.node);
}

void Engine::Undo(const Placement& p) {
  state_.Revert(p);
  policy_->OnNodeChanged(state_, p.node);
  UpdateDomains(p.node);
}

void Engine::IndexDomains() {
  const size_t levels = domains_.levels().size();
  domain_free_.assign(levels, {});
  by_free_.assign(levels, {});
  node_domains_.assign(cluster_.node_count(), {});
  for (size_t l = 0; l < levels; ++l) {
    const TopologyDomains::Domains& domains = domains_.domains(static_cast<int>(l));
    domain_free_[l].assign(domains.size(), DomainFree{});
    for (size_t d = 0; d < domains.size(); ++d) {
      for (const Candidate& c : domains[d].candidates) {
        node_domains_[c.node.value()].push_back(
            NodeDomain{static_cast<int>(l), static_cast<int>(d),
                       c.gpu_mask & cluster_.node(c.node).all_gpus_mask(), DomainFree{}});
      }
      by_free_[l].emplace(0, static_cast<int>(d));
    }
  }
  for (int n = 0; n < cluster_.node_count(); ++n) UpdateDomains(NodeId(n));
}

void Engine::UpdateDomains(NodeId node) {
  for (NodeDomain& nd : node_domains_[node.value()]) {
    DomainFree now;
    now.whole = __builtin_popcountll(state_.whole_free_mask(node) & nd.mask);
    std::span<const GpuState> gpus = state_.gpus(node);
    for (uint64_t a = nd.mask; a; a &= a - 1) {
      const GpuState& g = gpus[__builtin_ctzll(a)];
      if (!g.exclusive) now.compute += g.free_compute_milli;
    }
    if (now.compute == nd.free.compute && now.whole == nd.free.whole) continue;
    DomainFree& total = domain_free_[nd.level][nd.domain];
    by_free_[nd.level].erase({total.compute, nd.domain});
    total.compute += now.compute - nd.free.compute;
    total.whole += now.whole - nd.free.whole;
    by_free_[nd.level].emplace(total.compute, nd.domain);
    nd.free = now;
  }
}

bool Engine::AppendNodes(int first) {
  std::vector<std::vector<std::pair<int, int>>> joined(cluster_.node_count() - first);
  for (int n = first; n < cluster_.node_count(); ++n) {
    if (!domains_.Append(NodeId(n), &joined[n - first])) return false;  // the caller rebuilds
  }
  // As IndexDomains would count them: new domains start empty; each new node's GPUs in its
  // domains, in level then domain order, then counted by UpdateDomains.
  node_domains_.resize(cluster_.node_count());
  for (size_t l = 0; l < domain_free_.size(); ++l) {
    const TopologyDomains::Domains& domains = domains_.domains(static_cast<int>(l));
    while (domain_free_[l].size() < domains.size()) {
      by_free_[l].emplace(0, static_cast<int>(domain_free_[l].size()));
      domain_free_[l].push_back(DomainFree{});
    }
  }
  for (int n = first; n < cluster_.node_count(); ++n) {
    for (const auto& [l, d] : joined[n - first]) {
      const Candidate& c = domains_.domains(l)[d].candidates.back();
      node_domains_[n].push_back(
          NodeDomain{l, d, c.gpu_mask & cluster_.node(c.node).all_gpus_mask(), DomainFree{}});
    }
    UpdateDomains(NodeId(n));
  }
  return true;
}

Engine::DomainFree Engine::FreeInSet(int level, int domain, const NodeSet& nodes, int* gpus) const {
  DomainFree free;
  *gpus = 0;
  for (const Candidate& c : domains_.domains(level)[domain].candidates) {
    if (!nodes.Contains(c.node)) continue;
    for (const NodeDomain& nd : node_domains_[c.node.value()]) {
      if (nd.level != level || nd.domain != domain) continue;
      free.compute += nd.free.compute;
      free.whole += nd.free.whole;
      *gpus += __builtin_popcountll(nd.mask);
      break;
    }
  }
  return free;
}

void Engine::TouchNode(NodeId node) {
  state_.Touch(node);
  policy_->OnNodeChanged(state_, node);
}

void Engine::ReleaseAllOn(NodeId node, std::vector<std::string>* released) {
  for (auto it = ledger_.begin(); it != ledger_.end();) {
    if (it->second->node != node) {
      ++it;
      continue;
    }
    state_.Release(*it->second);
    if (released) released->push_back(it->first);
    ledger_.erase(it++);
  }
}

absl::Status Engine::ChangeNodes(NodeChanges changes, std::vector<NodeId>* added,
                                 std::vector<std::string>* released) {
  // Validate first, so that a bad spec changes nothing.
  for (NodeId id : changes.remove) {
    if (!id.valid() || id.value() >= cluster_.node_count() || !cluster_.live(id)) {
      return absl::NotFoundError(StrCat("no live node #", id.value(), " to remove"));
    }
  }
  {
    // Each new spec alone, as Cluster::Create validates.
    for (const auto& [id, spec] : changes.update) {
      if (!id.valid() || id.value() >= cluster_.node_count() || !cluster_.live(id) ||
          cluster_.node(id).name != spec.name) {
        return absl::NotFoundError(StrCat("no live node ", spec.name, " to update"));
      }
      TESSERA_RETURN_IF_ERROR(Cluster::Create({spec}).status());
    }
    for (const NodeSpec& spec : changes.add) {
      TESSERA_RETURN_IF_ERROR(Cluster::Create({spec}).status());
      if (cluster_.FindNode(spec.name).valid()) {
        return absl::AlreadyExistsError(StrCat("node ", spec.name, " exists"));
      }
    }
  }
  // Spares are given back and chosen again over the changed nodes; nodes only added, joined in
  // place, settle the domains they joined alone (the others hold what they held: their spares
  // stay as they were, as a settle from scratch would choose them again).
  const bool spares = spares_per_domain_ > 0;
  const bool only_added = !changes.add.empty() && changes.remove.empty() &&
                          changes.update.empty() && changes.cordon.empty();
  if (spares && !only_added) DropAllSpares();
  bool structural = !changes.remove.empty() || !changes.add.empty();
  std::vector<NodeId> touched;
  for (NodeId id : changes.remove) {
    ReleaseAllOn(id, released);
    cluster_.RemoveNode(id);
    state_.InitNode(id);  // nothing left: no capacity
  }
  auto level_labels_differ = [&](const NodeSpec& a, const NodeSpec& b) {
    for (const TopologyLevel& l : domains_.levels()) {
      auto x = a.labels.find(l.label), y = b.labels.find(l.label);
      const bool hx = x != a.labels.end(), hy = y != b.labels.end();
      if (hx != hy || (hx && x->second != y->second)) return true;
    }
    return false;
  };
  for (auto& [id, spec] : changes.update) {
    const NodeSpec& old = cluster_.node(id);
    const bool capacity = !spec.SameHardware(old);
    const bool levels = level_labels_differ(spec, old);
    if (capacity) ReleaseAllOn(id, released);
    TESSERA_CHECK(cluster_.UpdateNode(id, std::move(spec)).ok());  // validated above
    if (capacity) {
      state_.InitNode(id);
      structural = true;
    } else if (levels) {
      structural = true;
    } else {
      touched.push_back(id);  // labels that no policy or level reads: the node as it was
    }
  }
  const int first_added = cluster_.node_count();
  for (NodeSpec& spec : changes.add) {
    absl::StatusOr<NodeId> id = cluster_.AddNode(std::move(spec));
    TESSERA_CHECK(id.ok());  // validated above
    state_.InitNode(*id);
    if (added) added->push_back(*id);
  }
  for (const auto& [id, cordoned] : changes.cordon) {
    state_.SetCordoned(id, cordoned);
    touched.push_back(id);
  }
  // Nodes added and nothing else changed: joined to the domains and indexes in place, as a
  // rebuild would have them (TopologyDomains::Append says where it cannot), and the policy told
  // of the additions alone.
  if (only_added && AppendNodes(first_added)) {
    // Adding nodes turns no "fits some empty node" into "never": those answers stay.
    absl::erase_if(never_fits_, [](const auto& e) { return e.second.has_value(); });
    policy_->OnNodesAdded(state_, NodeId(first_added));
    if (spares) {
      for (int n = first_added; n < cluster_.node_count(); ++n) SettleSparesOn(NodeId(n));
    }
    return absl::OkStatus();
  }
  if (spares && only_added) DropAllSpares();  // appending refused: rebuilt below, spares anew
  if (structural) {
    never_fits_.clear();
    domains_ = TopologyDomains(cluster_, domains_.levels());
    IndexDomains();
    policy_->OnClusterChanged(state_);
  } else {
    for (NodeId id : touched) TouchNode(id);
  }
  if (spares) SettleAllSpares();
  return absl::OkStatus();
}

const std::optional<std::string>& Engine::NeverFits(const Query& query) {
  RequestShape shape = RequestShape::Of(query);
  shape.node_set = 0;  // it asks about the whole cluster
  auto it = never_fits_.find(shape);
  if (it == never_fits_.end())
    it = never_fits_.emplace(shape, core::NeverFitsReason(state_, query)).first;
  return it->second;
}

std::optional<std::string> Engine::NeverFitsReason(const PodRequest& request) {
  const EffectiveRequest effective(*policy_, request);
  return NeverFits(Query(state_, effective.get()));
}

std::vector<Placement> Engine::HeldOf(std::span<const std::string> names) const {
  std::vector<Placement> out;
  absl::flat_hash_set<std::string_view> seen;
  for (const std::string& name : names) {
    if (!seen.insert(name).second) continue;  // named twice
    if (const Placement* p = Find(name)) out.push_back(*p);
  }
  return out;
}

template <typename F>
auto Engine::Without(std::span<const std::string> pods, F what_if) {
  const std::vector<Placement> out = HeldOf(pods);
  for (const Placement& p : out) Undo(p);
  // The spares as they would be with those pods gone (a GPU they free may become one).
  const bool spares = spares_per_domain_ > 0;
  if (spares) {
    for (const Placement& p : out) SettleSparesOn(p.node);
  }
  auto result = what_if();
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    if (spares) (void)DropSparesUnder(*it);
    Commit(*it);
  }
  if (spares) {
    for (const Placement& p : out) SettleSparesOn(p.node);
  }
  return result;
}

PlacementResult Engine::Choose(const PodRequest& request, const Where& where, bool explain) {
  PlacementResult result;
  const EffectiveRequest effective(*policy_, request);
  Query query(state_, effective.get(), where.candidates, where.nodes);
  std::vector<NodeId> declined;
  std::optional<NodeChoice> choice = policy_->Choose(state_, query, explain ? &declined : nullptr);
  if (!choice) {
    if (const std::optional<std::string>& never = NeverFits(query)) {
      result.outcome = Outcome::kNeverFits;
      result.reason = *never;
    } else if (explain) {
      result.reason = ExplainNoFit(state_, query, declined);
    }
    return result;
  }
  result.outcome = Outcome::kPlaced;
  result.placement = std::move(choice->placement);
  return result;
}

std::vector<PlacementResult> Engine::Decide(const Ask& ask) {
  if (!ask.without.empty()) {
    TESSERA_CHECK_MSG(ask.mode == Mode::kTestOnly, "a what-if (Ask::without) is test-only");
    Ask inner = ask;
    inner.without = {};
    return Without(ask.without, [&] { return Decide(inner); });
  }
  if (spare_count_ == 0) return DecideKind(ask);
  if (MayTakeSpares(ask)) {
    DropAllSpares();
    std::vector<PlacementResult> results = DecideKind(ask);
    SettleAllSpares();
    return results;
  }
  std::vector<PlacementResult> results = DecideKind(ask);
  if (!ask.explain || ask.mode == Mode::kApply ||
      std::all_of(results.begin(), results.end(), [](const PlacementResult& r) {
        return r.placed() || r.outcome == Outcome::kNeverFits;
      })) {
    return results;
  }
  auto note = [&](const std::string& text) {
    for (PlacementResult& r : results) {
      if (!r.placed()) StrAppend(&r.reason, r.reason.empty() ? "" : "; ", text);
    }
  };
  // Would the spares have made the difference? Then the reason says so. The answer gives every
  // spare back and holds them again (two passes over the NVLink domains): with many spares (a
  // large cluster, many pods waiting) the reason only says that spares are not counted.
  constexpr int kProbeSpares = 64;
  if (spare_count_ > kProbeSpares) {
    note(StrCat(spare_count_, " GPUs kept spare for gang replacements (spareGpusPerDomain ",
                spares_per_domain_, ") are not counted as free"));
    return results;
  }
  Ask probe = ask;
  probe.mode = Mode::kTestOnly;
  probe.explain = false;
  DropAllSpares();
  const std::vector<PlacementResult> would = DecideKind(probe);
  SettleAllSpares();
  auto placed = [](const std::vector<PlacementResult>& rs) {
    return std::count_if(rs.begin(), rs.end(), [](const PlacementResult& r) { return r.placed(); });
  };
  if (placed(would) > placed(results)) {
    note(StrCat("it would fit on GPUs kept spare for gang replacements (spareGpusPerDomain ",
                spares_per_domain_, "), which only a gang's lost members may take"));
  }
  return results;
}

std::vector<PlacementResult> Engine::DecideKind(const Ask& ask) {
  switch (ask.kind) {
    case Ask::Kind::kPod:
      TESSERA_CHECK(ask.pods.size() == 1);
      return {DecidePod(ask.pods[0], ask.mode, ask.where, ask.explain)};
    case Ask::Kind::kGang:
      TESSERA_CHECK(ask.mode != Mode::kApply);
      return DecideGang(ask.pods, ask.mode, ask.where, ask.explain);
    case Ask::Kind::kElasticGang:
      TESSERA_CHECK(ask.mode != Mode::kApply);
      return DecideElasticGang(ask.pods, ask.running, ask.mode, ask.where, ask.explain);
  }
  TESSERA_CHECK(false);
  return {};
}

PlacementResult Engine::DecideOne(const Ask& ask) {
  TESSERA_CHECK(ask.kind == Ask::Kind::kPod);
  return std::move(Decide(ask)[0]);
}

PlacementResult Engine::DecidePod(const PodRequest& request, Mode mode, const Where& where,
                                  bool explain) {
  if (mode == Mode::kApply) {
    PlacementResult result = Choose(request, where, /*explain=*/false);
    if (result.placed()) Commit(result.placement);
    return result;
  }
  if (ledger_.contains(request.name)) {
    PlacementResult result;
    result.reason = StrCat("pod ", request.name, " is already placed");
    return result;
  }
  PlacementResult result = Choose(request, where, explain);
  if (result.placed() && mode == Mode::kCommit) {
    Commit(result.placement);
    ledger_.emplace(request.name, std::make_shared<const Placement>(result.placement));
  }
  return result;
}

void Engine::Unapply(const Placement& placement) {
  Undo(placement);
  if (spares_per_domain_ > 0) SettleSparesOn(placement.node);
}

absl::Status Engine::ApplyUnnamed(const Placement& placement) {
  std::string why;
  if (!state_.CanApply(placement, &why)) {
    return absl::FailedPreconditionError(StrCat("cannot apply the placement: ", why));
  }
  Commit(placement);
  return absl::OkStatus();
}

absl::Status Engine::Release(std::string_view pod) {
  auto it = ledger_.find(ToAbsl(pod));
  if (it == ledger_.end()) {
    return absl::NotFoundError(StrCat("pod ", pod, " holds no allocation"));
  }
  const Placement& held = *it->second;
  state_.Release(held);  // a MIG instance stays configured, idle
  policy_->OnNodeChanged(state_, held.node);
  UpdateDomains(held.node);
  policy_->OnReleased(state_, held);
  const NodeId node = held.node;
  ledger_.erase(it);
  if (spares_per_domain_ > 0) SettleSparesOn(node);
  return absl::OkStatus();
}

absl::Status Engine::Restore(std::string_view pod, const Placement& placement) {
  if (ledger_.contains(ToAbsl(pod))) {
    return absl::AlreadyExistsError(StrCat("pod ", pod, " is already placed"));
  }
  // A MIG instance recorded in an assignment exists on the node now: take the idle instance if
  // this state has it, else treat the slices as reconfigured for it (idle instances in the way
  // were destroyed when the pod was placed).
  Placement p = placement;
  if (p.gpus.size() == 1 && p.gpus[0].is_mig() && p.node.valid() &&
      p.node.value() < cluster_.node_count()) {
    const GpuGrant& g = p.gpus[0];
    const MigModel* model = g.gpu >= 0 && g.gpu < cluster_.node(p.node).gpu_count()
                                ? cluster_.mig_model(p.node, g.gpu)
                                : nullptr;
    if (model && g.mig.profile < static_cast<int>(model->profiles.size())) {
      p.mig_plan = MigPlanFor(*model, state_.mig(p.node, g.gpu), g.mig);
    }
  }
  // A pod placed earlier comes before a spare: the spares on its GPUs move.
  const std::vector<int> spares_dropped = DropSparesUnder(p);
  std::string why;
  if (!state_.CanApply(p, &why)) {
    for (int g : spares_dropped) HoldSpare(p.node, g);
    return absl::FailedPreconditionError(StrCat("cannot restore pod ", pod, ": ", why));
  }
  Commit(p);
  const NodeId node = p.node;
  ledger_.emplace(std::string(pod), std::make_shared<const Placement>(std::move(p)));
  if (!spares_dropped.empty()) SettleSparesOn(node);
  return absl::OkStatus();
}

const Placement* Engine::Find(std::string_view pod) const {
  auto it = ledger_.find(ToAbsl(pod));
  return it == ledger_.end() ? nullptr : it->second.get();
}

bool Engine::PlaceAll(std::span<const PodRequest> members, const std::vector<size_t>& order,
                      const std::vector<Candidate>* candidates, const NodeSet* nodes,
                      std::vector<Placement>* placed, std::string* failure) {
  placed->assign(members.size(), Placement{});
  std::vector<size_t> done;
  for (size_t i : order) {
    const PodRequest& m = members[i];
    const EffectiveRequest effective(*policy_, m);
    Query query(state_, effective.get(), candidates, nodes);
    std::vector<NodeId> declined;
    std::optional<NodeChoice> choice = policy_->Choose(state_, query, &declined);
    if (!choice) {
      if (failure) {
        *failure = StrCat("member ", m.name, ": ", ExplainNoFit(state_, query, declined));
      }
      for (auto it = done.rbegin(); it != done.rend(); ++it) Undo((*placed)[*it]);
      placed->clear();
      return false;
    }
    Commit(choice->placement);
    (*placed)[i] = std::move(choice->placement);
    done.push_back(i);
  }
  return true;
}

int Engine::FreeWholeGpusIn(const std::vector<Candidate>& domain) const {
  int free = 0;
  for (const Candidate& c : domain) {
    free += __builtin_popcountll(state_.whole_free_mask(c.node) & c.gpu_mask);
  }
  return free;
}

int64_t Engine::FreeComputeIn(const std::vector<Candidate>& domain) const {
  int64_t free = 0;
  for (const Candidate& c : domain) {
    std::span<const GpuState> gpus = state_.gpus(c.node);
    for (uint64_t a = c.gpu_mask & cluster_.node(c.node).all_gpus_mask(); a; a &= a - 1) {
      const GpuState& g = gpus[__builtin_ctzll(a)];
      if (!g.exclusive) free += g.free_compute_milli;
    }
  }
  return free;
}

std::vector<PlacementResult> Engine::PlaceGangIndependently(std::span<const PodRequest> members,
                                                            Mode mode, const Where& where,
                                                            bool explain) {
  std::vector<PlacementResult> results;
  for (const PodRequest& m : members) {
    results.push_back(DecidePod(m, Mode::kCommit, where, explain));
  }
  if (mode == Mode::kTestOnly) {
    // A what-if leaves nothing behind: undone newest first with Revert, which also removes the
    // MIG instances the members created and brings back those they destroyed (Release would
    // leave them configured, as a pod that ended does).
    for (size_t i = members.size(); i-- > 0;) {
      if (!results[i].placed()) continue;
      auto it = ledger_.find(members[i].name);
      TESSERA_CHECK(it != ledger_.end());
      Undo(*it->second);
      ledger_.erase(it);
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

std::vector<PlacementResult> Engine::DecideGang(std::span<const PodRequest> members, Mode mode,
                                                const Where& where, bool explain) {
  const std::vector<Candidate>* allowed = where.candidates;
  const NodeSet* nodes = where.nodes;
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
  if (!policy_->places_gangs_together()) {
    return PlaceGangIndependently(members, mode, where, explain);
  }
  if (gang.size > 0 && static_cast<size_t>(gang.size) != members.size()) {
    return fail_all(Outcome::kNoFitNow, StrCat("gang ", gang.name, " has ", members.size(),
                                               " of its ", gang.size, " members"));
  }
  // The fewest GPUs the gang can fit on: whole GPUs add up, shares may all share one GPU.
  int demand_gpus = 0;
  bool any_share = false;
  for (const PodRequest& m : members) {
    const EffectiveRequest as_placed(*policy_, m);
    const PodRequest& effective = as_placed.get();
    if (effective.gpu.kind == GpuAsk::Kind::kWhole) {
      demand_gpus += effective.gpu.count;
    } else if (effective.gpu.kind != GpuAsk::Kind::kNone) {
      any_share = true;
    }
    Query query(state_, effective);
    if (const std::optional<std::string>& never = NeverFits(query)) {
      return fail_all(Outcome::kNeverFits, StrCat("member ", m.name, ": ", *never));
    }
  }

  if (any_share && demand_gpus == 0) demand_gpus = 1;
  // Largest asks first (first fit decreasing): a 4-GPU member placed after two 2-GPU members may
  // find its node split; placed first, the small ones fill around it.
  std::vector<size_t> order(members.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return members[a].gpu.gpu_count() > members[b].gpu.gpu_count();
  });

  std::vector<Placement> placed;
  auto finish = [&]() {
    for (size_t i = 0; i < members.size(); ++i) {
      results[i].outcome = Outcome::kPlaced;
      results[i].placement = placed[i];
    }
    if (mode == Mode::kCommit) {
      for (size_t i = 0; i < members.size(); ++i) {
        ledger_.emplace(members[i].name, std::make_shared<const Placement>(placed[i]));
      }
    } else {
      for (auto it = order.rbegin(); it != order.rend(); ++it) Undo(placed[*it]);
    }
    return results;
  };
  auto undo_all = [&]() {
    for (auto it = order.rbegin(); it != order.rend(); ++it) Undo(placed[*it]);
  };

  // A topology domain as this gang may use it: all of it, or what `allowed` and `nodes` leave
  // of it.
  std::vector<Candidate> restricted;
  auto usable = [&](const Domain& d, int* gpus) -> const std::vector<Candidate>& {
    if (allowed == nullptr && nodes == nullptr) {
      *gpus = d.gpu_count;
      return d.candidates;
    }
    restricted = allowed != nullptr ? Restrict(cluster_, d, *allowed, gpus) : d.candidates;
    if (nodes != nullptr) {
      std::erase_if(restricted, [&](const Candidate& c) { return !nodes->Contains(c.node); });
      *gpus = 0;
      for (const Candidate& c : restricted) {
        *gpus += __builtin_popcountll(c.gpu_mask & cluster_.node(c.node).all_gpus_mask());
      }
    }
    return restricted;
  };
  std::string failure = "no room now (not explained)";  // unless explain
  std::string* why = explain ? &failure : nullptr;
  if (gang.level.empty()) {
    if (PlaceAll(members, order, allowed, nodes, &placed, why)) return finish();
    return fail_all(Outcome::kNoFitNow, StrCat("gang ", gang.name, ": ", failure));
  }
  const int level = domains_.LevelIndex(gang.level);
  if (level < 0) {
    std::vector<std::string> names;
    for (const TopologyLevel& l : domains_.levels()) names.push_back(l.name);
    return fail_all(Outcome::kNeverFits,
                    StrCat("gang ", gang.name, " asks for unknown topology level \"", gang.level,
                           "\" (configured: ", StrJoin(names, ", "), ")"));
  }
  // Required: the asked level only. Preferred: every level, narrowest first, then anywhere.
  std::vector<int> levels;
  if (gang.required) {
    levels.push_back(level);
  } else {
    for (int l = 0; l < static_cast<int>(domains_.levels().size()); ++l) levels.push_back(l);
  }
  const int whole_demand = [&] {
    int n = 0;
    for (const PodRequest& m : members) {
      const EffectiveRequest e(*policy_, m);
      if (e.get().gpu.kind == GpuAsk::Kind::kWhole) n += e.get().gpu.count;
    }
    return n;
  }();
  // What placing the gang takes from a domain's free compute, wherever in it the members land
  // (whole GPUs 1000 each, shares and fractions their compute), so that the best-fitting domain
  // (least left) is the one with the least free compute that can hold the gang. MIG grants take
  // what their GPU model's profile says: for them, every domain is tried.
  int64_t compute_demand = 0;
  bool any_mig = false;
  for (const PodRequest& m : members) {
    const EffectiveRequest e(*policy_, m);
    const GpuAsk& a = e.get().gpu;
    any_mig = any_mig || a.kind == GpuAsk::Kind::kMig;
    compute_demand += a.compute_milli_total();
  }
  for (int l : levels) {
    const TopologyDomains::Domains& domains = domains_.domains(l);
    if (allowed == nullptr && nodes == nullptr && !any_mig) {
      // The index: from the least free compute that could hold the gang upwards; the first
      // domain it fits in is the best fit (ties: the lower domain, as the scan below). A
      // placement tried and undone re-inserts its domain's entry, so the walk goes on from the
      // key, not from an iterator.
      for (std::pair<int64_t, int> key{compute_demand, -1};;) {
        auto it = by_free_[l].upper_bound(key);
        if (it == by_free_[l].end()) break;
        key = *it;
        const int d = key.second;
        if (domains[d].gpu_count < demand_gpus) continue;
        if (domain_free_[l][d].whole < whole_demand) continue;
        if (PlaceAll(members, order, &domains[d].candidates, nullptr, &placed, nullptr)) {
          return finish();
        }
      }
      continue;
    }
    if (allowed == nullptr && !any_mig) {
      // The index with a node set: a domain's room in the set is at most its free compute, so
      // the domains that could hold the gang are still those from the least free compute that
      // could upwards. Each one's room in the set comes from the index (no placement tried where
      // it is too little); a placement is tried only where the room is less than the best so
      // far. The best: least room (left after the gang), then least free compute overall, then
      // the lower domain (the walk's order); a domain whose room is the gang's demand exactly is
      // the best possible and ends the walk.
      int best = -1;
      int64_t best_room = INT64_MAX;
      for (std::pair<int64_t, int> key{compute_demand, -1}; best_room > compute_demand;) {
        auto it = by_free_[l].upper_bound(key);
        if (it == by_free_[l].end()) break;
        key = *it;
        const int d = key.second;
        if (domains[d].gpu_count < demand_gpus) continue;
        int gpus = 0;
        const DomainFree room = FreeInSet(l, d, *nodes, &gpus);
        if (gpus < demand_gpus || room.whole < whole_demand || room.compute < compute_demand ||
            room.compute >= best_room) {
          continue;
        }
        if (!PlaceAll(members, order, &usable(domains[d], &gpus), nodes, &placed, nullptr)) {
          continue;
        }
        undo_all();
        best = d;
        best_room = room.compute;
      }
      if (best >= 0) {
        int gpus = 0;
        TESSERA_CHECK(
            PlaceAll(members, order, &usable(domains[best], &gpus), nodes, &placed, nullptr));
        return finish();
      }
      continue;
    }
    int best = -1;
    int64_t best_left = INT64_MAX;
    for (size_t d = 0; d < domains.size() && best_left > 0; ++d) {
      int gpus = 0;
      const std::vector<Candidate>& candidates = usable(domains[d], &gpus);
      if (gpus < demand_gpus) continue;
      if (FreeWholeGpusIn(candidates) < whole_demand) continue;
      if (!PlaceAll(members, order, &candidates, nodes, &placed, nullptr)) continue;
      int64_t left = FreeComputeIn(candidates);
      undo_all();
      if (left < best_left) {
        best = static_cast<int>(d);
        best_left = left;
      }
    }
    if (best >= 0) {
      int gpus = 0;
      TESSERA_CHECK(
          PlaceAll(members, order, &usable(domains[best], &gpus), nodes, &placed, nullptr));
      return finish();
    }
  }
  if (!gang.required) {
    if (PlaceAll(members, order, allowed, nodes, &placed, why)) return finish();
    return fail_all(Outcome::kNoFitNow, StrCat("gang ", gang.name, ": ", failure));
  }
  // Required and nothing fits: never (no domain is big enough) or not now.
  int largest = 0;
  int64_t most_free = 0;
  for (const Domain& d : domains_.domains(level)) {
    int gpus = 0;
    const std::vector<Candidate>& candidates = usable(d, &gpus);
    largest = std::max(largest, gpus);
    most_free = std::max<int64_t>(most_free, FreeWholeGpusIn(candidates));
  }
  if (largest < demand_gpus) {
    return fail_all(Outcome::kNeverFits,
                    StrCat("gang ", gang.name, " needs ", demand_gpus, " GPUs inside one ",
                           gang.level, "; the largest has ", largest));
  }
  return fail_all(Outcome::kNoFitNow,
                  StrCat("gang ", gang.name, ": no ", gang.level, " has room for all ",
                         members.size(), " members now (needs ", demand_gpus, " GPUs; at most ",
                         most_free, " fully free in one)"));
}

int Engine::DomainHolding(int level, std::span<const Placement> placements) const {
  absl::flat_hash_map<int, int> count;
  for (const Placement& p : placements) {
    if (!p.node.valid() || p.node.value() >= static_cast<int>(node_domains_.size())) continue;
    const uint64_t mask = p.gpu_mask();
    for (const NodeDomain& nd : node_domains_[p.node.value()]) {
      if (nd.level != level || (mask != 0 && (nd.mask & mask) == 0)) continue;
      ++count[nd.domain];
      break;
    }
  }
  int best = -1, best_n = 0;
  for (const auto& [d, n] : count) {
    if (n > best_n || (n == best_n && d < best)) {
      best = d;
      best_n = n;
    }
  }
  return best;
}

// `area` cut to the nodes and GPUs of `to` (a node in both, with the GPUs in both).
static std::vector<Candidate> Intersect(const Cluster& cluster, const std::vector<Candidate>& area,
                                        const std::vector<Candidate>& to) {
  std::vector<Candidate> out;
  for (const Candidate& c : area) {
    for (const Candidate& t : to) {
      if (t.node != c.node) continue;
      out.push_back(
          Candidate{c.node, c.gpu_mask & t.gpu_mask & cluster.node(c.node).all_gpus_mask()});
      break;
    }
  }
  return out;
}

std::vector<std::vector<Candidate>> Engine::ReplacementAreas(
    std::span<const Placement> held, const std::vector<Candidate>* allowed,
    const std::vector<Candidate>* within) const {
  struct Area {
    int gpus = 0;
    int order = 0;  // the level's index; the members' nodes after every level
    std::vector<Candidate> candidates;
  };
  std::vector<Area> areas;
  auto add = [&](std::vector<Candidate> candidates, int order) {
    if (allowed != nullptr) candidates = Intersect(cluster_, candidates, *allowed);
    if (within != nullptr) candidates = Intersect(cluster_, candidates, *within);
    if (candidates.empty()) return;
    Area a{0, order, std::move(candidates)};
    for (const Candidate& c : a.candidates) {
      a.gpus += __builtin_popcountll(c.gpu_mask & cluster_.node(c.node).all_gpus_mask());
    }
    areas.push_back(std::move(a));
  };
  const int levels = static_cast<int>(domains_.levels().size());
  for (int level = 0; level < levels; ++level) {
    // The domain of `level` holding every running member, if one does.
    int holding = -1;
    for (const Placement& p : held) {
      int d = -1;
      if (p.node.valid() && p.node.value() < static_cast<int>(node_domains_.size())) {
        const uint64_t mask = p.gpu_mask();
        for (const NodeDomain& nd : node_domains_[p.node.value()]) {
          if (nd.level == level && (mask & ~nd.mask) == 0) {
            d = nd.domain;
            break;
          }
        }
      }
      if (d < 0 || (holding >= 0 && d != holding)) {
        holding = -1;
        break;
      }
      holding = d;
    }
    if (holding >= 0) add(domains_.domains(level)[holding].candidates, level);
  }
  std::vector<Candidate> on_nodes;
  for (const Placement& p : held) {
    if (!p.node.valid() || p.node.value() >= cluster_.node_count()) continue;
    if (std::none_of(on_nodes.begin(), on_nodes.end(),
                     [&](const Candidate& c) { return c.node == p.node; })) {
      on_nodes.push_back(Candidate{p.node, cluster_.node(p.node).all_gpus_mask()});
    }
  }
  if (!on_nodes.empty()) add(std::move(on_nodes), levels);
  std::stable_sort(areas.begin(), areas.end(), [](const Area& a, const Area& b) {
    return std::tie(a.gpus, a.order) < std::tie(b.gpus, b.order);
  });
  std::vector<std::vector<Candidate>> out;
  for (Area& a : areas) {
    const bool repeats = std::any_of(out.begin(), out.end(), [&](const std::vector<Candidate>& o) {
      return o.size() == a.candidates.size() &&
             std::equal(o.begin(), o.end(), a.candidates.begin(),
                        [](const Candidate& x, const Candidate& y) {
                          return x.node == y.node && x.gpu_mask == y.gpu_mask;
                        });
    });
    if (!repeats) out.push_back(std::move(a.candidates));
  }
  return out;
}

std::vector<PlacementResult> Engine::DecideElasticGang(std::span<const PodRequest> pending,
                                                       std::span<const std::string> running,
                                                       Mode mode, const Where& where,
                                                       bool explain) {
  const std::vector<Candidate>* allowed = where.candidates;
  const NodeSet* nodes = where.nodes;
  std::vector<PlacementResult> results(pending.size());
  if (pending.empty()) return results;
  const GangAsk gang = pending[0].gang.value_or(GangAsk{});
  const std::vector<Placement> held = HeldOf(running);
  const int r = static_cast<int>(held.size());
  const int size = gang.size > 0 ? gang.size : r + static_cast<int>(pending.size());
  const int most = std::min(static_cast<int>(pending.size()), std::max(size - r, 0));
  const int need = std::max(1, gang.min_members() - r);
  auto fail_all = [&](Outcome outcome, const std::string& reason) {
    for (PlacementResult& x : results) {
      x.outcome = outcome;
      x.reason = reason;
      x.placement = Placement{};
    }
    return results;
  };
  if (most < need) {
    return fail_all(
        Outcome::kNoFitNow,
        r >= size ? StrCat("gang ", gang.name, " already runs its ", size, " members")
                  : StrCat("gang ", gang.name, " has ", r, " members running and ", pending.size(),
                           " waiting; it needs ", need, " more to start together"));
  }
  // Where: the running members' domain, when the gang has a level and members running.
  std::vector<Candidate> kept;
  bool keep = false;
  if (!gang.level.empty() && r > 0) {
    const int level = domains_.LevelIndex(gang.level);
    const int d = level < 0 ? -1 : DomainHolding(level, held);
    if (d >= 0) {
      keep = true;
      const Domain& domain = domains_.domains(level)[d];
      int gpus = 0;
      kept = allowed == nullptr ? domain.candidates : Restrict(cluster_, domain, *allowed, &gpus);
    }
  }
  // The first n pending members as a gang of their own: all or none, within `area` (nullptr:
  // the gang's own rules, within `allowed`).
  std::vector<PodRequest> members(pending.begin(), pending.begin() + most);
  auto attempt_in = [&](int n, const std::vector<Candidate>* area, Mode m) {
    std::vector<PodRequest> some(members.begin(), members.begin() + n);
    for (PodRequest& x : some) {
      GangAsk g = x.gang.value_or(GangAsk{});
      g.size = n;
      g.min = 0;
      if (area != nullptr) g.level.clear();  // the domain is given as candidates
      x.gang = g;
    }
    return DecideGang(some, m, Where{area != nullptr ? area : allowed, nodes}, explain);
  };
  auto attempt = [&](int n, bool in_kept, Mode m) {
    return attempt_in(n, in_kept ? &kept : nullptr, m);
  };
  auto fits = [](const std::vector<PlacementResult>& rs) { return !rs.empty() && rs[0].placed(); };
  // Beside the survivors: all `most` members in the smallest of the places holding every running
  // member that takes them all (ReplacementAreas), before the rules below.
  if (r > 0) {
    for (const std::vector<Candidate>& area :
         ReplacementAreas(held, allowed, keep && gang.required ? &kept : nullptr)) {
      std::vector<PlacementResult> beside = attempt_in(most, &area, mode);
      if (!fits(beside)) continue;
      for (int i = 0; i < most; ++i) results[i] = std::move(beside[i]);
      for (size_t i = most; i < pending.size(); ++i) {
        results[i].outcome = Outcome::kNoFitNow;
        results[i].reason = StrCat("gang ", gang.name, " already has its ", size, " members");
      }
      return results;
    }
  }
  // The largest n that fits placed (in `mode`) into *placed; false, with the failure of `need`
  // members in *placed, when not even they fit. All of them first (the common case, and the
  // only one for a gang that is not elastic), then halving.
  int lo = 0;
  std::string more;  // why one more does not fit
  std::vector<PlacementResult> placed;
  auto place = [&](bool in_kept) {
    placed = attempt(most, in_kept, mode);
    if (fits(placed)) {
      lo = most;
      return true;
    }
    if (most == need) return false;
    more = placed.empty() ? "" : placed[0].reason;
    placed = attempt(need, in_kept, Mode::kTestOnly);
    if (!fits(placed)) return false;
    lo = need;
    int hi = most - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      std::vector<PlacementResult> t = attempt(mid, in_kept, Mode::kTestOnly);
      if (fits(t)) {
        lo = mid;
      } else {
        hi = mid - 1;
        if (!t.empty()) more = t[0].reason;
      }
    }
    placed = attempt(lo, in_kept, mode);
    TESSERA_CHECK(fits(placed));
    return true;
  };
  bool ok = place(keep);
  if (!ok && keep && !gang.required) ok = place(false);
  if (!ok) {
    std::string reason = placed.empty() ? "no members" : placed[0].reason;
    if (keep && gang.required) {
      reason = StrCat("gang ", gang.name, ": ", r, " of ", size, " members run in one ", gang.level,
                      ", and it has no room for ", need, " more now (", reason, ")");
    } else if (r >= gang.min_members()) {  // an elastic gang that cannot grow now
      reason = StrCat("gang ", gang.name, ": ", r, " of ", size, " members running (min ",
                      gang.min_members(), "); no room for more now: ", reason);
    }
    return fail_all(placed.empty() ? Outcome::kNoFitNow : placed[0].outcome, reason);
  }
  for (int i = 0; i < lo; ++i) results[i] = std::move(placed[i]);
  for (size_t i = lo; i < pending.size(); ++i) {
    results[i].outcome = Outcome::kNoFitNow;
    results[i].reason =
        static_cast<int>(i) >= most
            ? StrCat("gang ", gang.name, " already has its ", size, " members")
            : StrCat("gang ", gang.name, ": ", r + lo, " of ", size, " members running (min ",
                     gang.min_members(), "); no room for more now",
                     more.empty() ? "" : StrCat(": ", more));
  }
  return results;
}

}  // namespace tessera::core
