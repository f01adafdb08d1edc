#include "core/plan/defrag.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "core/engine.h"
#include "core/fit.h"
#include "core/model/quantity.h"

namespace tessera::plan {
namespace {

using core::Ask;
using core::Candidate;
using core::Engine;
using core::GpuAsk;
using core::NodeId;
using core::Placement;
using core::PodRequest;

int WholeGpus(const PodRequest& r) { return r.gpu.kind == GpuAsk::Kind::kWhole ? r.gpu.count : 0; }

bool HoldsMig(const Placement& p) {
  for (const core::GpuGrant& g : p.gpus) {
    if (g.is_mig()) return true;
  }
  return false;
}

// Larger asks first: the order movers are placed in (they are the hardest to fit).
bool Larger(const PodRequest& a, const PodRequest& b) {
  return std::make_tuple(a.gpu.compute_milli_total(), a.gpu.memory_mib, a.cpu_milli, a.name) >
         std::make_tuple(b.gpu.compute_milli_total(), b.gpu.memory_mib, b.cpu_milli, b.name);
}

// Calls `visit` with every k-subset of [0, n) in lexicographic order, until it returns false.
template <typename F>
bool ForEachSubset(int n, int k, F&& visit) {
  if (k > n || k < 0) return true;
  std::vector<int> idx(k);
  std::iota(idx.begin(), idx.end(), 0);
  while (true) {
    if (!visit(idx)) return false;
    int i = k - 1;
    while (i >= 0 && idx[i] == n - k + i) --i;
    if (i < 0) return true;
    ++idx[i];
    for (int j = i + 1; j < k; ++j) idx[j] = idx[j - 1] + 1;
  }
}

// The planner's state: a scratch engine holding every running pod, and the search.
class Planner {
 public:
  Planner(const DefragInput& in, const DefragOptions& opts)
      : in_(in), opts_(opts), engine_(*in.cluster, in.make_policy(), in.levels) {}

  absl::StatusOr<DefragPlan> Run();

 private:
  // One placement decision to make in a check: a pod and where it may go (nullptr: anywhere).
  struct ToPlace {
    const PodRequest* request;
    const std::vector<Candidate>* site;
    // Asks exactly what the one before asks (gang members, replicas): its destination is not
    // before that one's, which skips every permutation of the same placements.
    bool same_as_previous = false;
  };

  absl::Status Load();
  std::vector<std::vector<Candidate>> Sites() const;
  bool OnSite(const Placement& p, const std::vector<Candidate>* site) const;

  // Places the target in `site` and then `movers` (indexes into in_.running), the engine's way
  // first, then by trying destinations. On success fills the placements (target in member order,
  // movers in `movers` order) and returns true. Leaves the engine as it found it.
  bool TryPlace(const std::vector<Candidate>* site, const std::vector<int>& movers,
                std::vector<Placement>* target, std::vector<Placement>* moved);
  bool Greedy(const std::vector<Candidate>* site, const std::vector<int>& movers,
              std::vector<Placement>* target, std::vector<Placement>* moved);
  bool Backtrack(std::vector<ToPlace>& order, size_t i, std::vector<Placement>* out);
  // The (node, GPUs) choices to try for a pod inside `site`.
  std::vector<Candidate> Options(const PodRequest& request, const std::vector<Candidate>* site);

  void Remove(const std::vector<int>& pods);
  void PutBack(const std::vector<int>& pods);
  void ReleaseNamed(const std::vector<std::string>& names);

  const DefragInput& in_;
  const DefragOptions& opts_;
  // What the plan makes room for: in_.target, or an elastic gang's first min members as a gang
  // of that size (it starts with them; the others join as room frees up, with no plan).
  std::vector<PodRequest> target_;
  int starts_with_ = 0;  // an elastic gang: its min; else 0
  Engine engine_;
  std::vector<int> movable_;  // indexes into in_.running
  // Reservations (DefragInput::held): per node, the GPUs held from the movers and those held
  // from the target, and where each may go (every live node less those GPUs). Empty: none held.
  std::vector<uint64_t> held_all_, held_target_;
  std::vector<Candidate> mover_where_, target_where_;
  const std::vector<Candidate>* MoverWhere() const {
    return held_all_.empty() ? nullptr : &mover_where_;
  }
  // `site`, or where the target may go when `site` is the whole cluster (nullptr).
  const std::vector<Candidate>* TargetWhere(const std::vector<Candidate>* site) const {
    return site != nullptr || held_all_.empty() ? site : &target_where_;
  }
  int64_t tries_left_ = 0;
  bool tries_exhausted_ = false;
  int64_t checks_ = 0;
};

absl::Status Planner::Load() {
  if (in_.target.empty()) return absl::InvalidArgumentError("no pod to plan for");
  const PodRequest& first = in_.target[0];
  for (const PodRequest& t : in_.target) {
    if (t.gpu.kind == GpuAsk::Kind::kMig) {
      return absl::InvalidArgumentError(
          StrCat("pod ", t.name,
                 " asks for a MIG instance: defragmentation plans move pods, not MIG instances "
                 "(a re-partitioning plan is what it needs)"));
    }
    if (t.gang != first.gang) {
      return absl::InvalidArgumentError(StrCat("pods ", first.name, " and ", t.name,
                                               " are not members of one gang: plan for one pod "
                                               "or one gang at a time"));
    }
  }
  if (in_.target.size() > 1 && !first.gang) {
    return absl::InvalidArgumentError("several pods to plan for, but they are not a gang");
  }
  if (first.gang && !first.gang->level.empty() &&
      engine_.domains().LevelIndex(first.gang->level) < 0) {
    return absl::InvalidArgumentError(StrCat(
        "gang ", first.gang->name, " asks for unknown topology level \"", first.gang->level, "\""));
  }
  target_ = in_.target;
  if (first.gang && first.gang->elastic()) {
    const int min = first.gang->min_members();
    if (static_cast<int>(target_.size()) < min) {
      return absl::InvalidArgumentError(StrCat("gang ", first.gang->name, ": ", target_.size(),
                                               " members to plan for, fewer than its min ", min,
                                               " (it starts with at least ", min, ")"));
    }
    target_.resize(min);  // the oldest first, as the scheduler starts them
    for (PodRequest& t : target_) {
      t.gang->size = min;
      t.gang->min = 0;
    }
    starts_with_ = min;
  }
  if (in_.spares_per_domain < 0) {
    return absl::InvalidArgumentError(
        StrCat("spares per domain must not be negative (got ", in_.spares_per_domain, ")"));
  }
  // As the scheduler's engine: spares first, then the pods (a pod restored moves them).
  if (in_.spares_per_domain > 0) engine_.KeepSpares(in_.spares_per_domain);
  for (size_t i = 0; i < in_.running.size(); ++i) {
    const RunningPod& r = in_.running[i];
    for (const PodRequest& t : in_.target) {
      if (t.name == r.request.name) {
        return absl::InvalidArgumentError(
            StrCat("pod ", t.name, " to plan for is already running"));
      }
    }
    absl::Status s = engine_.Restore(r.request.name, r.placement);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          StrCat("the running pods do not fit the cluster together: ", s.message()));
    }
    if (r.movable && !r.request.gang && !HoldsMig(r.placement) &&
        (r.request.priority <= first.priority || opts_.move_higher_priority)) {
      movable_.push_back(static_cast<int>(i));
    }
  }
  if (!in_.held.empty()) {
    const int nodes = in_.cluster->node_count();
    held_all_.assign(nodes, 0);
    held_target_.assign(nodes, 0);
    for (const DefragInput::Held& h : in_.held) {
      if (h.gpus.node.value() < 0 || h.gpus.node.value() >= nodes) {
        return absl::InvalidArgumentError(
            StrCat("held room names node ", h.gpus.node.value(), ", not a node of the cluster"));
      }
      held_all_[h.gpus.node.value()] |= h.gpus.gpu_mask;
      if (!h.target_may_take) held_target_[h.gpus.node.value()] |= h.gpus.gpu_mask;
    }
    for (int n = 0; n < nodes; ++n) {
      if (!in_.cluster->live(NodeId(n))) continue;
      mover_where_.push_back(Candidate{NodeId(n), ~held_all_[n]});
      target_where_.push_back(Candidate{NodeId(n), ~held_target_[n]});
    }
  }
  return Cordon(engine_, in_.cordoned);
}

std::vector<std::vector<Candidate>> Planner::Sites() const {
  std::vector<std::vector<Candidate>> sites;
  const PodRequest& first = in_.target[0];
  if (first.gang) {
    if (first.gang->required && !first.gang->level.empty()) {  // none: no plan (no domain)
      int level = engine_.domains().LevelIndex(first.gang->level);
      if (level >= 0) {
        for (const core::Domain& d : engine_.domains().domains(level)) {
          sites.push_back(d.candidates);
          if (held_target_.empty()) continue;
          for (Candidate& c : sites.back()) c.gpu_mask &= ~held_target_[c.node.value()];
        }
      }
    } else {
      sites.emplace_back();  // the whole cluster is one site (an empty list of candidates)
    }
    return sites;
  }
  const core::Cluster& cluster = *in_.cluster;
  for (int n = 0; n < cluster.node_count(); ++n) {
    NodeId id(n);
    if (!engine_.state().accepts_pods(id)) continue;
    sites.push_back({Candidate{id, held_target_.empty() ? ~0ULL : ~held_target_[n]}});
  }
  return sites;
}

bool Planner::OnSite(const Placement& p, const std::vector<Candidate>* site) const {
  if (site == nullptr) return true;
  for (const Candidate& c : *site) {
    if (c.node == p.node) return true;
  }
  return false;
}

void Planner::Remove(const std::vector<int>& pods) {
  for (int i : pods) TESSERA_CHECK(engine_.Release(in_.running[i].request.name).ok());
}

void Planner::PutBack(const std::vector<int>& pods) {
  for (int i : pods) {
    TESSERA_CHECK(engine_.Restore(in_.running[i].request.name, in_.running[i].placement).ok());
  }
}

void Planner::ReleaseNamed(const std::vector<std::string>& names) {
  for (const std::string& n : names) TESSERA_CHECK(engine_.Release(n).ok());
}

bool Planner::Greedy(const std::vector<Candidate>* site, const std::vector<int>& movers,
                     std::vector<Placement>* target, std::vector<Placement>* moved) {
  std::vector<std::string> placed;
  auto undo = [&] { ReleaseNamed(placed); };
  target->clear();
  site = TargetWhere(site);
  if (target_.size() == 1 && !target_[0].gang) {
    core::PlacementResult r = engine_.DecideOne(Ask::Pod(target_[0]).In({site}));
    if (!r.placed()) return false;
    placed.push_back(target_[0].name);
    target->push_back(r.placement);
  } else {
    // A policy that does not keep gangs together (whole-gpu) places members one by one and may
    // leave some placed: all of them, or none.
    std::vector<core::PlacementResult> rs = engine_.Decide(Ask::Gang(target_).In({site}));
    bool all = !rs.empty();
    for (size_t i = 0; i < rs.size(); ++i) {
      if (!rs[i].placed()) {
        all = false;
        continue;
      }
      placed.push_back(target_[i].name);
      target->push_back(rs[i].placement);
    }
    if (!all) {
      undo();
      return false;
    }
  }
  std::vector<int> order = movers;
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return Larger(in_.running[a].request, in_.running[b].request); });
  moved->assign(movers.size(), Placement{});
  for (int i : order) {
    core::PlacementResult r =
        engine_.DecideOne(Ask::Pod(in_.running[i].request).In({MoverWhere()}));
    if (!r.placed()) {
      undo();
      return false;
    }
    placed.push_back(in_.running[i].request.name);
    (*moved)[std::find(movers.begin(), movers.end(), i) - movers.begin()] = r.placement;
  }
  undo();
  return true;
}

std::vector<Candidate> Planner::Options(const PodRequest& request,
                                        const std::vector<Candidate>* site) {
  const core::Cluster& cluster = *in_.cluster;
  std::vector<Candidate> out;
  auto add_node = [&](NodeId node, uint64_t allowed) {
    if (!cluster.live(node)) return;
    const core::ClusterState& state = engine_.state();
    allowed &= cluster.node(node).all_gpus_mask();
    const core::EffectiveRequest effective(engine_.policy(), request);
    const GpuAsk& ask = effective.get().gpu;
    switch (ask.kind) {
      case GpuAsk::Kind::kNone:
        out.push_back(Candidate{node, allowed});
        return;
      case GpuAsk::Kind::kWhole: {
        uint64_t free = state.whole_free_mask(node) & allowed;
        int n = __builtin_popcountll(free);
        if (n < ask.count) return;
        std::vector<int> bits;
        for (uint64_t f = free; f; f &= f - 1) bits.push_back(__builtin_ctzll(f));
        ForEachSubset(n, ask.count, [&](const std::vector<int>& idx) {
          uint64_t m = 0;
          for (int i : idx) m |= 1ULL << bits[i];
          out.push_back(Candidate{node, m});
          return true;
        });
        return;
      }
      default:
        for (uint64_t a = allowed; a; a &= a - 1) {
          int g = __builtin_ctzll(a);
          if (state.gpu(node, g).exclusive) continue;
          out.push_back(Candidate{node, 1ULL << g});
        }
        return;
    }
  };
  if (site == nullptr) {
    for (int n = 0; n < cluster.node_count(); ++n) add_node(NodeId(n), ~0ULL);
  } else {
    for (const Candidate& c : *site) add_node(c.node, c.gpu_mask);
  }
  return out;
}

bool Planner::Backtrack(std::vector<ToPlace>& order, size_t i, std::vector<Placement>* out) {
  if (i == order.size()) return true;
  const PodRequest& request = *order[i].request;
  for (const Candidate& option : Options(request, order[i].site)) {
    if (order[i].same_as_previous) {
      const Placement& prev = (*out)[i - 1];
      if (std::make_pair(option.node.value(), option.gpu_mask) <
          std::make_pair(prev.node.value(), prev.gpu_mask())) {
        continue;
      }
    }
    if (--tries_left_ < 0) {
      tries_exhausted_ = true;
      return false;
    }
    std::vector<Candidate> one{option};
    core::PlacementResult r = engine_.DecideOne(Ask::Pod(request).In({&one}));
    if (!r.placed()) continue;
    (*out)[i] = r.placement;
    bool done = Backtrack(order, i + 1, out);
    TESSERA_CHECK(engine_.Release(request.name).ok());
    if (done) return true;
    if (tries_exhausted_) return false;
  }
  return false;
}

bool Planner::TryPlace(const std::vector<Candidate>* site, const std::vector<int>& movers,
                       std::vector<Placement>* target, std::vector<Placement>* moved) {
  if (Greedy(site, movers, target, moved)) return true;
  // Every destination in turn: the target's members first (inside the site), then the movers,
  // largest first.
  std::vector<ToPlace> order;
  for (const PodRequest& t : target_) order.push_back({&t, TargetWhere(site)});
  std::vector<int> sorted = movers;
  std::sort(sorted.begin(), sorted.end(),
            [&](int a, int b) { return Larger(in_.running[a].request, in_.running[b].request); });
  for (int i : sorted) order.push_back({&in_.running[i].request, MoverWhere()});
  for (size_t i = 1; i < order.size(); ++i) {
    PodRequest a = *order[i].request;
    a.name = order[i - 1].request->name;
    order[i].same_as_previous = order[i].site == order[i - 1].site && a == *order[i - 1].request;
  }
  std::vector<Placement> out(order.size());
  tries_left_ = opts_.max_tries;
  if (!Backtrack(order, 0, &out)) return false;
  // A gang that requires a domain: every member inside the site (a domain) already; one that
  // does not stays anywhere.
  target->assign(out.begin(), out.begin() + target_.size());
  moved->assign(movers.size(), Placement{});
  for (size_t k = 0; k < sorted.size(); ++k) {
    size_t pos = std::find(movers.begin(), movers.end(), sorted[k]) - movers.begin();
    (*moved)[pos] = out[target_.size() + k];
  }
  return true;
}

// `size`: an elastic gang's size (target holds the min it starts with), else 0.
std::string DescribeTarget(const std::vector<PodRequest>& target, int size) {
  if (target.size() == 1 && !target[0].gang) {
    return StrCat("pod ", target[0].name, " (", core::DescribeAsk(target[0]), ")");
  }
  const std::string starts =
      size > 0 ? StrCat(": it starts with ", target.size(), " of its ", size, " members") : "";
  return StrCat("gang ", target[0].gang->name, " (", target.size(),
                target.size() == 1 ? " pod of " : " pods of ", core::DescribeAsk(target[0]), starts,
                ")");
}

absl::StatusOr<DefragPlan> Planner::Run() {
  TESSERA_RETURN_IF_ERROR(Load());
  DefragPlan plan;
  const std::string what = DescribeTarget(target_, starts_with_ > 0 ? in_.target[0].gang->size : 0);
  plan.starts_with = starts_with_;
  std::vector<Placement> target, moved;

  // Fits now?
  if (Greedy(nullptr, {}, &target, &moved)) {
    plan.verdict = DefragVerdict::kFitsNow;
    plan.target = target;
    plan.proven_minimal = true;
    plan.reason = StrCat(what, " fits now: nothing to move");
    return plan;
  }

  // Fundamentally too big, or too big for what the unmovable pods leave?
  {
    const core::EffectiveRequest effective(engine_.policy(), target_[0]);
    core::Query query(engine_.state(), effective.get());
    std::optional<std::string> never = core::NeverFitsReason(engine_.state(), query);
    if (never) {
      plan.verdict = DefragVerdict::kNeedsCapacity;
      plan.proven_minimal = true;
      plan.reason = StrCat("impossible without more capacity: ", *never);
      return plan;
    }
    Remove(movable_);
    bool fits = Greedy(nullptr, {}, &target, &moved);
    bool complete = true;
    std::vector<std::vector<Candidate>> sites = Sites();
    for (size_t s = 0; s < sites.size() && !fits; ++s) {
      fits = TryPlace(sites[s].empty() ? nullptr : &sites[s], {}, &target, &moved);
      complete = complete && !tries_exhausted_;
      tries_exhausted_ = false;
    }
    PutBack(movable_);
    if (!fits && complete) {
      plan.verdict = DefragVerdict::kNeedsCapacity;
      plan.proven_minimal = true;
      plan.reason =
          StrCat("impossible without more capacity: ", what,
                 " does not fit even with every movable pod (", movable_.size(), ") moved away");
      return plan;
    }
  }

  std::vector<std::vector<Candidate>> sites = Sites();
  const bool whole_cluster = sites.size() == 1 && sites[0].empty();
  // Per site: its movable pods, and the others (for chains).
  std::vector<std::vector<int>> inside(sites.size()), outside(sites.size());
  for (size_t s = 0; s < sites.size(); ++s) {
    for (int i : movable_) {
      const Placement& p = in_.running[i].placement;
      (whole_cluster || OnSite(p, &sites[s]) ? inside : outside)[s].push_back(i);
    }
  }

  bool stopped = false;     // max_checks reached
  bool incomplete = false;  // some check gave up trying destinations
  for (int k = 1; k <= opts_.max_moves && !stopped; ++k) {
    struct Best {
      int cost;
      std::vector<int> movers;
      std::vector<Placement> target, moved;
    };
    std::optional<Best> best;
    // Sets of the site's own pods first, at every site; then sets with chains, which are many
    // more (every pod outside the site) and rarely needed: a search that stops at max_checks
    // has tried the likely plans.
    for (int pass = 0; pass < 2 && !stopped && !(best && best->cost == 0); ++pass)
      for (size_t s = 0; s < sites.size() && !stopped; ++s) {
        const std::vector<Candidate>* site = whole_cluster ? nullptr : &sites[s];
        const std::vector<int>& in = inside[s];
        const std::vector<int>& out = outside[s];
        for (int ks = std::min<int>(k, in.size()); ks >= 1 && !stopped; --ks) {
          const int kc = k - ks;
          if (kc > static_cast<int>(out.size()) || (pass == 0) != (kc == 0)) continue;
          ForEachSubset(in.size(), ks, [&](const std::vector<int>& si) {
            std::vector<int> set;
            int cost_s = 0;
            for (int i : si) {
              set.push_back(in[i]);
              cost_s += WholeGpus(in_.running[in[i]].request);
            }
            if (best && cost_s >= best->cost) return true;
            // The target must fit in the site once S is gone, whatever else moves.
            if (++checks_ > opts_.max_checks) {
              stopped = true;
              return false;
            }
            Remove(set);
            bool room = Greedy(site, {}, &target, &moved);
            if (!room) {
              room = TryPlace(site, {}, &target, &moved);
              if (!room && tries_exhausted_) incomplete = true;
              tries_exhausted_ = false;
            }
            PutBack(set);
            if (!room) return true;
            ForEachSubset(out.size(), kc, [&](const std::vector<int>& ci) {
              std::vector<int> movers = set;
              int cost = cost_s;
              for (int i : ci) {
                movers.push_back(out[i]);
                cost += WholeGpus(in_.running[out[i]].request);
              }
              if (best && cost >= best->cost) return true;
              if (kc > 0 && ++checks_ > opts_.max_checks) {
                stopped = true;
                return false;
              }
              Remove(movers);
              bool ok = TryPlace(site, movers, &target, &moved);
              if (!ok && tries_exhausted_) incomplete = true;
              tries_exhausted_ = false;
              PutBack(movers);
              if (ok) best = Best{cost, movers, target, moved};
              return !(best && best->cost == 0);
            });
            return !stopped && !(best && best->cost == 0);
          });
          if (best && best->cost == 0) break;
        }
        if (best && best->cost == 0) break;
      }
    if (best) {
      plan.verdict = DefragVerdict::kPlan;
      plan.target = best->target;
      plan.whole_gpus_moved = best->cost;
      for (size_t m = 0; m < best->movers.size(); ++m) {
        const RunningPod& r = in_.running[best->movers[m]];
        plan.moves.push_back(
            Move{r.request.name, r.placement, best->moved[m], WholeGpus(r.request)});
      }
      // Within k, the cheapest set: skipped sets were no cheaper; stopped = not proven.
      plan.proven_minimal = !stopped && !incomplete;
      plan.checks = checks_;
      plan.reason = StrCat(what, " fits after ", k, k == 1 ? " move" : " moves",
                           plan.proven_minimal ? " (no fewer moves can make room)"
                                               : " (the search stopped at its limits: fewer "
                                                 "moves were not all checked)");
      return plan;
    }
  }
  plan.checks = checks_;
  if (stopped) {
    plan.verdict = DefragVerdict::kSearchLimit;
    plan.reason = StrCat("no plan found for ", what, " within ", checks_ - 1,
                         " checked sets of pods (the search limit); raise it, or the move "
                         "budget is too small");
  } else {
    plan.verdict = DefragVerdict::kOverBudget;
    plan.proven_minimal = !incomplete;
    plan.reason = StrCat(
        "no plan of at most ", opts_.max_moves, opts_.max_moves == 1 ? " move" : " moves",
        " makes room for ", what,
        incomplete ? " (some sets were not checked completely)" : "; a larger budget may find one");
  }
  return plan;
}

}  // namespace

std::string_view VerdictName(DefragVerdict v) {
  switch (v) {
    case DefragVerdict::kFitsNow:
      return "fits-now";
    case DefragVerdict::kPlan:
      return "plan";
    case DefragVerdict::kOverBudget:
      return "over-budget";
    case DefragVerdict::kSearchLimit:
      return "search-limit";
    case DefragVerdict::kNeedsCapacity:
      return "needs-capacity";
  }
  return "?";
}

std::string DescribePlacement(const core::Cluster& cluster, const core::Placement& p) {
  std::string out = cluster.node(p.node).name;
  if (p.gpus.empty()) return out + " (no GPU)";
  std::vector<int> idx;
  for (const core::GpuGrant& g : p.gpus) idx.push_back(g.gpu);
  StrAppend(&out, idx.size() == 1 ? " GPU " : " GPUs ", StrJoin(idx, ","));
  if (p.gpus.size() == 1 && !p.gpus[0].exclusive) {
    StrAppend(&out, " (", core::FormatMiB(p.gpus[0].memory_mib));
    if (p.gpus[0].compute_milli > 0) StrAppend(&out, ", ", p.gpus[0].compute_milli / 10, "%");
    out += ")";
  }
  return out;
}

absl::Status Cordon(core::Engine& engine, const std::vector<core::NodeId>& cordoned) {
  if (cordoned.empty()) return absl::OkStatus();
  core::NodeChanges changes;
  for (NodeId id : cordoned) {
    if (id.value() < 0 || id.value() >= engine.cluster().node_count() ||
        !engine.cluster().live(id)) {
      return absl::InvalidArgumentError(StrCat("cordoned node id ", id.value(), " is no node"));
    }
    changes.cordon.emplace_back(id, true);
  }
  return engine.ChangeNodes(std::move(changes));
}

absl::StatusOr<DefragPlan> PlanDefrag(const DefragInput& input, const DefragOptions& options) {
  if (input.cluster == nullptr || !input.make_policy) {
    return absl::InvalidArgumentError("PlanDefrag needs a cluster and a policy");
  }
  Planner planner(input, options);
  return planner.Run();
}

}  // namespace tessera::plan
