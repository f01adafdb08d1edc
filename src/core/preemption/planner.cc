#include "core/preemption/planner.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/strings.h"

namespace tessera::core {

struct PreemptionPlanner::Context {
  const PreemptionRequest& request;
  std::span<const RunningPod> running;
  std::vector<Unit> units;
  std::vector<std::vector<int>> units_on;        // per node: units with a pod there
  std::vector<std::vector<int>> terminating_on;  // per node: terminating pods there
  std::vector<QueueResources> usage;             // per running pod (valid for placed ones)

  // The names of the pods of `units` and of the terminating pods `terminating`.
  std::vector<std::string> Names(std::span<const int> unit_list,
                                 std::span<const int> terminating) const {
    std::vector<std::string> out;
    for (int t : terminating) out.push_back(running[t].name);
    for (int u : unit_list) {
      for (int p : units[u].pods) out.push_back(running[p].name);
    }
    return out;
  }
};

namespace {

std::vector<Candidate> Everything(std::span<const NodeId> nodes) {
  std::vector<Candidate> out;
  for (NodeId n : nodes) out.push_back(Candidate{n, ~0ULL});
  return out;
}

bool AllPlaced(const std::vector<PlacementResult>& results) {
  if (results.empty()) return false;
  for (const PlacementResult& r : results) {
    if (!r.placed()) return false;
  }
  return true;
}

}  // namespace

template <typename Fits>
void PreemptionPlanner::Reprieve(Context& ctx, std::vector<int> candidates, Fits fits,
                                 std::vector<int>* victims) {
  auto key = [&](int u) {
    const Unit& x = ctx.units[u];
    return std::make_tuple(!x.budgeted, -x.priority, x.usage,
                           std::string_view(ctx.running[x.pods[0]].name));
  };
  std::sort(candidates.begin(), candidates.end(), [&](int a, int b) { return key(a) < key(b); });
  std::vector<int> gone = candidates;
  for (int u : candidates) {
    std::vector<int> without;
    without.reserve(gone.size());
    for (int g : gone) {
      if (g != u) without.push_back(g);
    }
    if (fits(std::span<const int>(without))) gone = std::move(without);
  }
  victims->insert(victims->end(), gone.begin(), gone.end());
}

bool PreemptionPlanner::Allowed(const Context& ctx, std::span<const int> victims,
                                std::string* why) {
  absl::flat_hash_map<std::string, int64_t> by_budget;
  absl::flat_hash_map<std::string, QueueResources> freed;
  for (int u : victims) {
    for (int p : ctx.units[u].pods) {
      const RunningPod& pod = ctx.running[p];
      if (!pod.budget.empty()) ++by_budget[pod.budget];
      if (pod.queue != ctx.request.queue) freed[pod.queue] += ctx.usage[p];
    }
  }
  for (const auto& [budget, count] : by_budget) {
    auto it = ctx.request.budgets.find(budget);
    const int64_t allowed = it == ctx.request.budgets.end() ? 0 : it->second;
    if (count > allowed) {
      *why = StrCat("the disruption budget ", budget, " allows ", allowed, " eviction",
                    allowed == 1 ? "" : "s", " now and the pod would need ", count);
      return false;
    }
  }
  std::vector<std::pair<std::string, QueueResources>> taken(freed.begin(), freed.end());
  if (!taken.empty() && !queues_.KeepsDeserved(ctx.request.queue, taken)) {
    *why = "reclaiming the room would take a queue below its deserved share";
    return false;
  }
  return true;
}

PreemptionPlan PreemptionPlanner::Plan(const PreemptionRequest& request,
                                       std::span<const RunningPod> running) {
  PreemptionPlan plan;
  if (request.members.empty()) {
    plan.reason = "nothing to place";
    return plan;
  }
  const bool gang = request.members.size() > 1 || request.members[0].gang.has_value();
  for (const PodRequest& m : request.members) {
    if (std::optional<std::string> never = engine_.NeverFitsReason(m)) {
      plan.reason = StrCat("evicting would not help: ", *never);
      return plan;
    }
  }

  Context ctx{request, running, {}, {}, {}, {}};
  const int node_count = engine_.state().node_count();
  ctx.units_on.assign(node_count, {});
  ctx.terminating_on.assign(node_count, {});
  ctx.usage.assign(running.size(), QueueResources{});

  // Who may be a victim, per queue (the reclaim rule depends on the queue, not the pod).
  absl::flat_hash_map<std::string, bool> may_reclaim;
  std::string reclaim_why;
  auto eligible = [&](const RunningPod& pod) {
    if (pod.queue == request.queue) return pod.priority < request.priority;
    auto [it, fresh] = may_reclaim.try_emplace(pod.queue, false);
    if (fresh) {
      std::string why;
      it->second = queues_.MayReclaim(request.queue, request.demand, pod.queue, &why);
      if (!it->second && reclaim_why.empty()) reclaim_why = why;
    }
    return it->second;
  };
  // Units: gangs by name, other pods alone. A gang with an ineligible member is no unit.
  absl::flat_hash_map<std::string, int> gang_unit;
  absl::flat_hash_set<int> spoiled;
  for (int i = 0; i < static_cast<int>(running.size()); ++i) {
    const RunningPod& pod = running[i];
    const Placement* p = engine_.Find(pod.name);
    if (p == nullptr) continue;
    ctx.usage[i] = UsageOf(engine_.cluster(), *p);
    if (pod.terminating) {
      ctx.terminating_on[p->node.value()].push_back(i);
      continue;
    }
    int u;
    if (pod.gang.empty()) {
      u = static_cast<int>(ctx.units.size());
      ctx.units.emplace_back();
    } else {
      auto [it, fresh] = gang_unit.try_emplace(pod.gang, static_cast<int>(ctx.units.size()));
      if (fresh) ctx.units.emplace_back();
      u = it->second;
    }
    Unit& unit = ctx.units[u];
    if (!eligible(pod)) spoiled.insert(u);
    unit.priority = unit.pods.empty() ? pod.priority : std::max(unit.priority, pod.priority);
    unit.pods.push_back(i);
    unit.usage += ctx.usage[i][kQueueGpu];
    unit.budgeted = unit.budgeted || !pod.budget.empty();
    unit.reclaim = unit.reclaim || pod.queue != request.queue;
    if (std::find(unit.nodes.begin(), unit.nodes.end(), p->node) == unit.nodes.end()) {
      unit.nodes.push_back(p->node);
    }
  }
  // A reclaim victim that alone would take its queue below its deserved share never qualifies.
  std::string why_not;
  for (int u = 0; u < static_cast<int>(ctx.units.size()); ++u) {
    if (spoiled.contains(u)) continue;
    if (ctx.units[u].reclaim) {
      const int one[] = {u};
      if (!Allowed(ctx, one, &why_not)) {
        spoiled.insert(u);
        continue;
      }
    }
    for (NodeId n : ctx.units[u].nodes) ctx.units_on[n.value()].push_back(u);
  }

  auto no_plan = [&](std::string reason) {
    plan.reason = std::move(reason);
    if (!reclaim_why.empty()) StrAppend(&plan.reason, " (no reclaim: ", reclaim_why, ")");
    return plan;
  };

  if (!gang) {
    const PodRequest& pod = request.members[0];
    struct Best {
      std::tuple<size_t, int32_t, int, int> cost;
      NodeId node;
      std::vector<int> victims;
    };
    std::optional<Best> best;
    bool fits_somewhere = false;
    for (int n = 0; n < node_count; ++n) {
      const std::vector<int>& candidates = ctx.units_on[n];
      const std::vector<int>& terminating = ctx.terminating_on[n];
      if (candidates.empty() && terminating.empty()) continue;
      const std::vector<Candidate> allowed = Everything(std::vector<NodeId>{NodeId(n)});
      auto fits = [&](std::span<const int> gone) {
        return engine_.PlaceWithout(pod, ctx.Names(gone, terminating), &allowed, request.nodes)
            .placed();
      };
      if (!fits(candidates)) continue;
      fits_somewhere = true;
      std::vector<int> victims;
      Reprieve(ctx, candidates, fits, &victims);
      if (!Allowed(ctx, victims, &why_not)) continue;
      size_t pods = 0;
      int32_t top = INT32_MIN;
      int reclaims = 0;
      for (int u : victims) {
        pods += ctx.units[u].pods.size();
        top = std::max(top, ctx.units[u].priority);
        reclaims += ctx.units[u].reclaim ? 1 : 0;
      }
      auto cost = std::make_tuple(pods, top, reclaims, n);
      if (!best || cost < best->cost) best = Best{cost, NodeId(n), std::move(victims)};
    }
    if (!best) {
      if (fits_somewhere) return no_plan(StrCat("no eviction would be allowed: ", why_not));
      return no_plan(
          "evicting would not help: no node would have room even without every pod "
          "it may evict");
    }
    const std::vector<Candidate> allowed = Everything(std::vector<NodeId>{best->node});
    PlacementResult where =
        engine_.PlaceWithout(pod, ctx.Names(best->victims, ctx.terminating_on[best->node.value()]),
                             &allowed, request.nodes);
    TESSERA_CHECK(where.placed());
    for (int t : ctx.terminating_on[best->node.value()]) plan.awaited.push_back(running[t].name);
    for (int u : best->victims) {
      for (int p : ctx.units[u].pods) plan.victims.push_back(running[p].name);
    }
    plan.nodes.push_back(where.placement.node);
    plan.placements.push_back(std::move(where));
  } else {
    // Every candidate and every terminating pod away: does the gang fit at all?
    std::vector<int> all_units;
    std::vector<int> all_terminating;
    for (int u = 0; u < static_cast<int>(ctx.units.size()); ++u) {
      if (!spoiled.contains(u)) all_units.push_back(u);
    }
    for (const std::vector<int>& t : ctx.terminating_on) {
      all_terminating.insert(all_terminating.end(), t.begin(), t.end());
    }
    std::vector<PlacementResult> first =
        engine_.PlaceGangWithout(request.members, ctx.Names(all_units, all_terminating));
    if (!AllPlaced(first)) {
      return no_plan(StrCat("evicting would not help: even without every pod it may evict, ",
                            first.empty() ? "nothing" : first[0].reason));
    }
    // Narrow to the nodes it landed on.
    std::vector<NodeId> nodes;
    for (const PlacementResult& r : first) {
      if (std::find(nodes.begin(), nodes.end(), r.placement.node) == nodes.end()) {
        nodes.push_back(r.placement.node);
      }
    }
    std::sort(nodes.begin(), nodes.end());
    const std::vector<Candidate> allowed = Everything(nodes);
    std::vector<int> candidates, terminating;
    absl::flat_hash_set<int> seen;
    for (NodeId n : nodes) {
      for (int u : ctx.units_on[n.value()]) {
        if (seen.insert(u).second) candidates.push_back(u);
      }
      const std::vector<int>& t = ctx.terminating_on[n.value()];
      terminating.insert(terminating.end(), t.begin(), t.end());
    }
    auto fits = [&](std::span<const int> gone) {
      return AllPlaced(
          engine_.PlaceGangWithout(request.members, ctx.Names(gone, terminating), &allowed));
    };
    if (!fits(candidates)) {
      return no_plan("evicting would not help: the gang does not fit where it could land");
    }
    std::vector<int> victims;
    Reprieve(ctx, candidates, fits, &victims);
    if (!Allowed(ctx, victims, &why_not)) {
      return no_plan(StrCat("no eviction would be allowed: ", why_not));
    }
    plan.placements =
        engine_.PlaceGangWithout(request.members, ctx.Names(victims, terminating), &allowed);
    TESSERA_CHECK(AllPlaced(plan.placements));
    for (int t : terminating) plan.awaited.push_back(running[t].name);
    for (int u : victims) {
      for (int p : ctx.units[u].pods) plan.victims.push_back(running[p].name);
    }
    for (const PlacementResult& r : plan.placements) {
      if (std::find(plan.nodes.begin(), plan.nodes.end(), r.placement.node) == plan.nodes.end()) {
        plan.nodes.push_back(r.placement.node);
      }
    }
  }
  std::sort(plan.victims.begin(), plan.victims.end());
  std::sort(plan.awaited.begin(), plan.awaited.end());
  plan.found = true;
  return plan;
}

}  // namespace tessera::core
