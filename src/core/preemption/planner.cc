#include "core/preemption/planner.h"

#include <algorithm>
#include <optional>
#include <set>
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
  // Per running pod: its placement (nullptr: the engine holds none; valid until the first
  // what-if, which may move the engine's ledger) and what it holds, computed when needed.
  std::vector<const Placement*> placement;
  std::vector<std::optional<QueueResources>> usage;
  const Cluster* cluster = nullptr;
  // Per queue other than the preemptor's: its pods leaving anyway (terminating or claimed).
  absl::flat_hash_map<std::string, std::vector<int>> leaving;
  int node_count = 0;

  // Who may be a victim, per queue (the reclaim rule depends on the queue, not the pod), and
  // the first reason a queue may not be reclaimed from.
  absl::flat_hash_map<std::string, bool> may_reclaim;
  std::string reclaim_why;
  // Budgets allowing no eviction now that held back some eligible pod.
  std::set<std::string> protecting;
  // Units that are no candidates (an ineligible pod, a budget at 0, a reclaim alone refused).
  absl::flat_hash_set<int> spoiled;
  // The last reason a plan found was refused (budgets, queues).
  std::string why_not;

  // What taking every candidate and terminating pod away could free at most (BoundRoom).
  struct Extra {
    int64_t memory = 0;
    int32_t compute = 0;
    int32_t grants = 0;
    int32_t top = INT32_MIN;  // the highest priority of the candidates holding it
  };
  std::vector<std::vector<Extra>> extra;  // per node and GPU (empty: nothing there)
  std::vector<int64_t> extra_cpu, extra_mem;

  // Evictions `budget` allows now (none when the request does not name it).
  int64_t BudgetLeft(const std::string& budget) const {
    auto it = request.budgets.find(budget);
    return it == request.budgets.end() ? 0 : std::max<int64_t>(0, it->second);
  }

  const QueueResources& Usage(int pod) {
    if (!usage[pod]) usage[pod] = UsageOf(*cluster, *placement[pod]);
    return *usage[pod];
  }

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

int PreemptionMembers(const GangAsk& gang, int running, int pending) {
  if (!gang.elastic() && running == 0) return pending;
  const int need = gang.min_members() - running;
  if (need <= 0) return 0;  // an elastic gang at its min grows only into free room
  return std::min(pending, need);
}

template <typename Fits>
void PreemptionPlanner::Reprieve(Context& ctx, std::vector<int> candidates, Fits fits,
                                 std::vector<int>* victims) {
  auto key = [&](int u) {
    const Unit& x = ctx.units[u];
    return std::make_tuple(!x.budgeted, -x.priority, x.elastic ? x.order_usage : x.usage, x.elastic,
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

template <typename Fits>
bool PreemptionPlanner::ReprieveWithinBudgets(Context& ctx, std::vector<int> candidates, Fits fits,
                                              std::vector<int>* victims) {
  while (true) {
    std::vector<int> gone;
    Reprieve(ctx, candidates, fits, &gone);
    // The first budget (in reprieve order) that these victims take beyond what it allows.
    absl::flat_hash_map<std::string, int64_t> count;
    absl::flat_hash_set<int> counted;  // an elastic gang's member may be in two units
    std::string over;
    for (int u : gone) {
      for (int p : ctx.units[u].pods) {
        const std::string& b = ctx.running[p].budget;
        if (b.empty() || !counted.insert(p).second) continue;
        if (++count[b] > ctx.BudgetLeft(b) && over.empty()) over = b;
      }
    }
    if (over.empty()) {
      victims->insert(victims->end(), gone.begin(), gone.end());
      return true;
    }
    // Of that budget's units, only as many stay candidates as it allows: the victims the
    // reprieve gave up last (lowest priority, largest), then the search runs again.
    auto pods_of = [&](int u) {
      int64_t n = 0;
      for (int p : ctx.units[u].pods) n += ctx.running[p].budget == over ? 1 : 0;
      return n;
    };
    absl::flat_hash_set<int> keep;
    int64_t kept = 0;
    for (auto it = gone.rbegin(); it != gone.rend(); ++it) {
      const int64_t n = pods_of(*it);
      if (n > 0 && kept + n <= ctx.BudgetLeft(over)) {
        keep.insert(*it);
        kept += n;
      }
    }
    std::erase_if(candidates, [&](int u) { return pods_of(u) > 0 && !keep.contains(u); });
    if (!fits(std::span<const int>(candidates))) return false;
  }
}

bool PreemptionPlanner::Allowed(Context& ctx, std::span<const int> victims, std::string* why) {
  absl::flat_hash_map<std::string, int64_t> by_budget;
  absl::flat_hash_map<std::string, QueueResources> freed;
  absl::flat_hash_set<int> counted;  // an elastic gang's member may be in two units
  for (int u : victims) {
    for (int p : ctx.units[u].pods) {
      if (!counted.insert(p).second) continue;
      const RunningPod& pod = ctx.running[p];
      if (!pod.budget.empty()) ++by_budget[pod.budget];
      if (pod.queue != ctx.request.queue) freed[pod.queue] += ctx.Usage(p);
    }
  }
  for (const auto& [budget, count] : by_budget) {
    const int64_t allowed = ctx.BudgetLeft(budget);
    if (count > allowed) {
      *why = StrCat("the disruption budget ", budget, " allows ", allowed, " eviction",
                    allowed == 1 ? "" : "s", " now and the pod would need ", count);
      return false;
    }
  }
  // The queues reclaimed from lose their pods already leaving too (earlier plans' victims).
  for (auto& [queue, amount] : freed) {
    auto it = ctx.leaving.find(queue);
    if (it == ctx.leaving.end()) continue;
    for (int p : it->second) {
      if (!counted.contains(p)) amount += ctx.Usage(p);
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
  // An elastic gang, or one some of whose members run: the members it needs next only.
  std::span<const PodRequest> members = request.members;
  absl::flat_hash_set<std::string_view> own;  // the gang's members running: never its victims
  for (const std::string& name : request.gang_running) {
    if (engine_.Find(name) != nullptr) own.insert(name);
  }
  const bool partial = members[0].gang.has_value() && (members[0].gang->elastic() || !own.empty());
  if (partial) {
    const GangAsk& ask = *members[0].gang;
    const int running_count = static_cast<int>(own.size());
    const int need =
        PreemptionMembers(ask, running_count, static_cast<int>(request.members.size()));
    if (need == 0) {
      plan.reason = StrCat("gang ", ask.name, " runs ", running_count, " of its ", ask.size,
                           " members, at least its min ", ask.min_members(),
                           ": it grows into room that frees up and evicts nobody to grow");
      return plan;
    }
    members = members.first(static_cast<size_t>(need));
  }
  const bool gang = members.size() > 1 || members[0].gang.has_value();
  for (const PodRequest& m : members) {
    if (std::optional<std::string> never = engine_.NeverFitsReason(m)) {
      plan.reason = StrCat("evicting would not help: ", *never);
      return plan;
    }
  }

  Context ctx{.request = request, .running = running};
  ctx.cluster = &engine_.cluster();
  ctx.node_count = engine_.state().node_count();
  ctx.units_on.assign(ctx.node_count, {});
  ctx.terminating_on.assign(ctx.node_count, {});
  ctx.placement.assign(running.size(), nullptr);
  ctx.usage.assign(running.size(), std::nullopt);
  CollectUnits(ctx, own);
  BoundRoom(ctx);
  const bool found =
      gang ? PlanGang(ctx, members, partial, &plan) : PlanPod(ctx, members[0], &plan);
  if (!found) return plan;
  std::sort(plan.victims.begin(), plan.victims.end());
  plan.victims.erase(std::unique(plan.victims.begin(), plan.victims.end()), plan.victims.end());
  std::sort(plan.awaited.begin(), plan.awaited.end());
  plan.found = true;
  return plan;
}

bool PreemptionPlanner::Eligible(Context& ctx, const RunningPod& pod) {
  const PreemptionRequest& request = ctx.request;
  if (pod.queue == request.queue) return pod.priority < request.priority;
  auto [it, fresh] = ctx.may_reclaim.try_emplace(pod.queue, false);
  if (fresh) {
    std::string why;
    it->second = queues_.MayReclaim(request.queue, request.demand, pod.queue, &why);
    if (!it->second && ctx.reclaim_why.empty()) ctx.reclaim_why = why;
  }
  return it->second;
}

// A pod whose disruption budget allows no eviction now is no candidate (nor is its gang): the
// search goes around it rather than finding a plan the budget would refuse part-way. Asked of
// eligible pods only.
bool PreemptionPlanner::BudgetAllows(Context& ctx, const RunningPod& pod) {
  if (pod.budget.empty() || ctx.BudgetLeft(pod.budget) > 0) return true;
  ctx.protecting.insert(pod.budget);
  return false;
}

namespace {

// What a placement denies others, roughly, in milli-GPU: for the reprieve order only.
int64_t OrderUsage(const Placement& p) {
  int64_t usage = 0;
  for (const GpuGrant& g : p.gpus) {
    usage += g.exclusive ? 1000 : std::max<int64_t>(g.compute_milli, g.memory_mib / 80);
  }
  return usage;
}

}  // namespace

void PreemptionPlanner::CollectUnits(Context& ctx,
                                     const absl::flat_hash_set<std::string_view>& own) {
  const PreemptionRequest& request = ctx.request;
  std::span<const RunningPod> running = ctx.running;
  // Units: gangs by name, other pods alone. A gang with an ineligible member is no unit.
  absl::flat_hash_map<std::string, int> gang_unit;
  for (int i = 0; i < static_cast<int>(running.size()); ++i) {
    const RunningPod& pod = running[i];
    const Placement* p = engine_.Find(pod.name);
    if (p == nullptr || own.contains(pod.name)) continue;
    ctx.placement[i] = p;
    if (pod.terminating || pod.claimed) {
      if (pod.queue != request.queue) ctx.leaving[pod.queue].push_back(i);
    }
    if (pod.claimed) continue;  // room promised to an earlier plan's pod
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
    if (!Eligible(ctx, pod) || !BudgetAllows(ctx, pod)) ctx.spoiled.insert(u);
    unit.priority = unit.pods.empty() ? pod.priority : std::max(unit.priority, pod.priority);
    unit.pods.push_back(i);
    unit.usage += OrderUsage(*p);
    unit.budgeted = unit.budgeted || !pod.budget.empty();
    unit.reclaim = unit.reclaim || pod.queue != request.queue;
    if (std::find(unit.nodes.begin(), unit.nodes.end(), p->node) == unit.nodes.end()) {
      unit.nodes.push_back(p->node);
    }
  }
  // Elastic gangs running more than their min: each member above it is also a unit of its own.
  std::vector<int> gang_units;
  for (const auto& [name, gu] : gang_unit) gang_units.push_back(gu);
  std::sort(gang_units.begin(), gang_units.end());  // the same unit numbers every time
  for (int gu : gang_units) {
    std::vector<int> order = ctx.units[gu].pods;
    const int32_t min = running[order[0]].gang_min;
    if (min <= 0 || static_cast<int>(order.size()) <= min) continue;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return std::tie(running[a].created, running[a].name) <
             std::tie(running[b].created, running[b].name);
    });
    int64_t smallest = INT64_MAX;
    for (size_t k = static_cast<size_t>(min); k < order.size(); ++k) {
      const int i = order[k];
      const int u = static_cast<int>(ctx.units.size());
      ctx.units.emplace_back();
      Unit& unit = ctx.units[u];
      const RunningPod& pod = running[i];
      const Placement* p = ctx.placement[i];
      if (!Eligible(ctx, pod) || !BudgetAllows(ctx, pod)) ctx.spoiled.insert(u);
      unit.priority = pod.priority;
      unit.pods.push_back(i);
      unit.usage += OrderUsage(*p);
      unit.budgeted = !pod.budget.empty();
      unit.reclaim = pod.queue != request.queue;
      unit.nodes.push_back(p->node);
      unit.elastic = 2;
      unit.order_usage = unit.usage;
      smallest = std::min(smallest, unit.usage);
    }
    ctx.units[gu].elastic = 1;
    ctx.units[gu].order_usage = smallest;
  }
  // A reclaim victim that alone would take its queue below its deserved share never qualifies.
  absl::flat_hash_map<std::string, bool> alone_allowed;
  for (int u = 0; u < static_cast<int>(ctx.units.size()); ++u) {
    if (ctx.spoiled.contains(u)) continue;
    if (ctx.units[u].reclaim) {
      // Many units are alike (one pod of a queue holding one GPU): asked once per queue and
      // amount.
      const Unit& unit = ctx.units[u];
      std::string key;
      for (int p : unit.pods) {
        const QueueResources& q = ctx.Usage(p);
        StrAppend(&key, running[p].queue, ":", running[p].budget, ":", q[0], ",", q[1], ",", q[2],
                  ";");
      }
      auto [it, fresh] = alone_allowed.try_emplace(key, false);
      if (fresh) {
        const int one[] = {u};
        it->second = Allowed(ctx, one, &ctx.why_not);
      }
      if (!it->second) {
        ctx.spoiled.insert(u);
        continue;
      }
    }
    for (NodeId n : ctx.units[u].nodes) ctx.units_on[n.value()].push_back(u);
  }
}

// What taking every candidate and terminating pod away could free at most, per node and GPU: a
// necessary condition checked before any what-if (it never turns away a node that could take the
// pod), and the lower bounds that let the search skip nodes that cannot beat the best.
void PreemptionPlanner::BoundRoom(Context& ctx) {
  ctx.extra.assign(ctx.node_count, {});
  ctx.extra_cpu.assign(ctx.node_count, 0);
  ctx.extra_mem.assign(ctx.node_count, 0);
  auto add_extra = [&](int pod, int32_t priority) {
    const Placement& p = *ctx.placement[pod];
    const int n = p.node.value();
    if (ctx.extra[n].empty()) ctx.extra[n].resize(engine_.cluster().node(p.node).gpu_count());
    ctx.extra_cpu[n] += p.cpu_milli;
    ctx.extra_mem[n] += p.memory_mib;
    for (const GpuGrant& g : p.gpus) {
      Context::Extra& e = ctx.extra[n][g.gpu];
      e.memory += g.memory_mib;
      e.compute += g.compute_milli;
      ++e.grants;
      e.top = std::max(e.top, priority);
    }
  };
  for (int n = 0; n < ctx.node_count; ++n) {
    for (int t : ctx.terminating_on[n]) add_extra(t, INT32_MIN);
    absl::flat_hash_set<int> added;  // an elastic gang's member may be in two units
    for (int u : ctx.units_on[n]) {
      for (int p : ctx.units[u].pods) {
        if (ctx.placement[p]->node.value() == n && added.insert(p).second) {
          add_extra(p, ctx.units[u].priority);
        }
      }
    }
  }
}

// Whether `ask` could fit node n with the candidates there gone (or, `now`, as it is).
bool PreemptionPlanner::CouldFit(const Context& ctx, int n, const PodRequest& ask, bool now) const {
  const NodeId id(n);
  const ClusterState& st = engine_.state();
  if (!st.accepts_pods(id)) return false;
  const bool any = !now && !ctx.extra[n].empty();
  if (st.free_cpu_milli(id) + (any ? ctx.extra_cpu[n] : 0) < ask.cpu_milli) return false;
  if (st.free_memory_mib(id) + (any ? ctx.extra_mem[n] : 0) < ask.memory_mib) return false;
  const GpuAsk& a = ask.gpu;
  if (a.kind == GpuAsk::Kind::kNone || a.kind == GpuAsk::Kind::kMig) return true;
  std::span<const GpuState> gpus = st.gpus(id);
  int whole = 0;
  for (int g = 0; g < static_cast<int>(gpus.size()); ++g) {
    const Context::Extra e = any ? ctx.extra[n][g] : Context::Extra{};
    if (gpus[g].grants == e.grants) {
      ++whole;
      continue;
    }
    if (a.kind == GpuAsk::Kind::kWhole || gpus[g].exclusive) continue;
    const int64_t memory = a.kind == GpuAsk::Kind::kShare ? a.memory_mib : 0;
    const int32_t compute = a.kind == GpuAsk::Kind::kShare ? a.compute_milli : a.fraction_milli;
    if (gpus[g].free_memory_mib + e.memory >= memory &&
        gpus[g].free_compute_milli + e.compute >= compute) {
      return true;
    }
  }
  return whole >= std::max(1, a.kind == GpuAsk::Kind::kWhole ? a.count : 1);
}

bool PreemptionPlanner::NoPlan(const Context& ctx, std::string reason, PreemptionPlan* plan) {
  plan->reason = std::move(reason);
  if (!ctx.protecting.empty()) {
    StrAppend(&plan->reason, " (not evicted: the pods of disruption budget",
              ctx.protecting.size() == 1 ? " " : "s ", StrJoin(ctx.protecting, ", "), ", which ",
              ctx.protecting.size() == 1 ? "allows" : "allow", " no eviction now)");
  }
  if (!ctx.reclaim_why.empty()) StrAppend(&plan->reason, " (no reclaim: ", ctx.reclaim_why, ")");
  return false;
}

bool PreemptionPlanner::PlanPod(Context& ctx, const PodRequest& pod, PreemptionPlan* plan) {
  const PreemptionRequest& request = ctx.request;
  struct Best {
    std::tuple<size_t, int32_t, int, int> cost;
    NodeId node;
    std::vector<int> victims;
  };
  std::optional<Best> best;
  bool fits_somewhere = false;
  const EffectiveRequest as_placed(engine_.policy(), pod);
  const PodRequest& effective = as_placed.get();
  // Nodes that could take the pod, most promising first: (fewest victims at least, lowest
  // victim priority at least).
  std::vector<std::tuple<size_t, int32_t, int, int>> order;
  for (int n = 0; n < ctx.node_count; ++n) {
    if (ctx.units_on[n].empty() && ctx.terminating_on[n].empty()) continue;
    if (request.nodes != nullptr && !request.nodes->Contains(NodeId(n))) continue;
    if (!CouldFit(ctx, n, effective, false)) continue;
    const bool free_now = !ctx.terminating_on[n].empty() || CouldFit(ctx, n, effective, true);
    if (free_now) {
      order.emplace_back(0, INT32_MIN, 0, n);
      continue;
    }
    // At least one victim, of at least the lowest priority there; whole GPUs: the GPUs to free
    // each lose every holder, so at least the need-th lowest of their highest holders'
    // priorities, and at least as many victims as it takes units to cover them.
    int32_t low = INT32_MAX;
    bool all_reclaim = true;
    for (int u : ctx.units_on[n]) {
      low = std::min(low, ctx.units[u].priority);
      all_reclaim = all_reclaim && ctx.units[u].reclaim;
    }
    size_t least = 1;
    if (effective.gpu.kind == GpuAsk::Kind::kWhole) {
      std::span<const GpuState> gpus = engine_.state().gpus(NodeId(n));
      const int need = effective.gpu.count - engine_.state().whole_free_count(NodeId(n));
      std::vector<int32_t> tops;
      for (int g = 0; g < static_cast<int>(gpus.size()); ++g) {
        if (gpus[g].grants > 0 && gpus[g].grants == ctx.extra[n][g].grants) {
          tops.push_back(ctx.extra[n][g].top);
        }
      }
      if (need > 0 && static_cast<int>(tops.size()) >= need) {
        std::nth_element(tops.begin(), tops.begin() + (need - 1), tops.end());
        low = std::max(low, tops[need - 1]);
        std::vector<int> spans;  // GPUs of the node each unit holds
        for (int u : ctx.units_on[n]) {
          int k = 0;
          for (int p : ctx.units[u].pods) {
            const Placement& pl = *ctx.placement[p];
            if (pl.node.value() == n) k += static_cast<int>(pl.gpus.size());
          }
          spans.push_back(k);
        }
        std::sort(spans.rbegin(), spans.rend());
        int covered = 0;
        least = 0;
        for (int k : spans) {
          if (covered >= need) break;
          covered += k;
          ++least;
        }
      }
    }
    order.emplace_back(least, low, all_reclaim ? static_cast<int>(least) : 0, n);
  }
  std::sort(order.begin(), order.end());
  for (const auto& bound : order) {
    const int n = std::get<3>(bound);
    if (best && bound > best->cost) continue;
    const std::vector<int>& candidates = ctx.units_on[n];
    const std::vector<int>& terminating = ctx.terminating_on[n];
    const std::vector<Candidate> allowed = Everything(std::vector<NodeId>{NodeId(n)});
    auto fits = [&](std::span<const int> gone) {
      return engine_
          .DecideOne(Ask::Pod(pod)
                         .In({&allowed, request.nodes})
                         .Without(ctx.Names(gone, terminating))
                         .TestOnly())
          .placed();
    };
    if (!fits(candidates)) continue;
    fits_somewhere = true;
    std::vector<int> victims;
    if (!ReprieveWithinBudgets(ctx, candidates, fits, &victims)) {
      ctx.why_not = "the disruption budgets there allow too few evictions now";
      continue;
    }
    if (!Allowed(ctx, victims, &ctx.why_not)) continue;
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
    if (fits_somewhere) {
      return NoPlan(ctx, StrCat("no eviction would be allowed: ", ctx.why_not), plan);
    }
    return NoPlan(ctx,
                  "evicting would not help: no node would have room even without every pod it "
                  "may evict",
                  plan);
  }
  const std::vector<Candidate> allowed = Everything(std::vector<NodeId>{best->node});
  const std::vector<std::string> gone =
      ctx.Names(best->victims, ctx.terminating_on[best->node.value()]);
  PlacementResult where =
      engine_.DecideOne(Ask::Pod(pod).In({&allowed, request.nodes}).Without(gone).TestOnly());
  TESSERA_CHECK(where.placed());
  for (int t : ctx.terminating_on[best->node.value()]) {
    plan->awaited.push_back(ctx.running[t].name);
  }
  for (int u : best->victims) {
    for (int p : ctx.units[u].pods) plan->victims.push_back(ctx.running[p].name);
  }
  plan->nodes.push_back(where.placement.node);
  plan->placements.push_back(std::move(where));
  return true;
}

bool PreemptionPlanner::PlanGang(Context& ctx, std::span<const PodRequest> members, bool partial,
                                 PreemptionPlan* plan) {
  const PreemptionRequest& request = ctx.request;
  // Widening: the nodes that could take some member with their candidates gone, cheapest first
  // (fewest candidate pods per GPU they could free, then the lowest victim priority); the gang is
  // tried on the first few with every candidate there away, then on twice as many, up to all of
  // them. Whole clusters are not emptied for a gang that needs four nodes. Before all of them, at
  // no cost: nodes with room for a member now and no candidates, the fewest (most room first)
  // that together hold the gang's GPUs, so that a gang may land on free nodes and emptied ones
  // together.
  // The gang's what-if: all members together, or an elastic gang's next ones by its rules.
  auto place_without = [&](std::span<const std::string> without,
                           const std::vector<Candidate>* allowed) {
    Ask ask = partial ? Ask::ElasticGang(members, request.gang_running) : Ask::Gang(members);
    return engine_.Decide(ask.In({allowed, nullptr}).Without(without).TestOnly());
  };
  int64_t whole_demand = 0;
  for (const PodRequest& m : members) {
    const EffectiveRequest e(engine_.policy(), m);
    const GpuAsk& a = e.get().gpu;
    whole_demand += a.kind == GpuAsk::Kind::kWhole ? a.count : 1;
  }
  std::vector<std::tuple<double, int32_t, int>> ranked;
  std::vector<int> freeable(ctx.node_count, 0);
  // The members' distinct asks (members mostly ask alike), each asked of every such node.
  std::vector<PodRequest> asks;
  for (const PodRequest& m : members) {
    const EffectiveRequest as_placed(engine_.policy(), m);
    const PodRequest& e = as_placed.get();
    if (std::none_of(asks.begin(), asks.end(), [&](const PodRequest& a) {
          return a.gpu == e.gpu && a.cpu_milli == e.cpu_milli && a.memory_mib == e.memory_mib;
        })) {
      asks.push_back(e);
    }
  }
  std::vector<std::pair<int, int>> roomy;  // (-GPUs with no grant, node)
  for (int n = 0; n < ctx.node_count; ++n) {
    if (!ctx.units_on[n].empty() || !ctx.terminating_on[n].empty()) continue;
    if (request.nodes != nullptr && !request.nodes->Contains(NodeId(n))) continue;
    bool any = false;
    for (const PodRequest& a : asks) any = any || CouldFit(ctx, n, a, true);
    if (!any) continue;
    int unused = 0;
    for (const GpuState& g : engine_.state().gpus(NodeId(n))) unused += g.grants == 0 ? 1 : 0;
    roomy.emplace_back(-std::max(unused, 1), n);
  }
  std::sort(roomy.begin(), roomy.end());
  int64_t room = 0;
  for (const auto& [minus, n] : roomy) {
    if (room >= whole_demand) break;
    freeable[n] = -minus;
    room += freeable[n];
    ranked.emplace_back(0.0, INT32_MIN, n);
  }
  for (int n = 0; n < ctx.node_count; ++n) {
    if (ctx.units_on[n].empty() && ctx.terminating_on[n].empty()) continue;
    if (request.nodes != nullptr && !request.nodes->Contains(NodeId(n))) continue;
    bool any = false;
    for (const PodRequest& m : members) {
      any = any || CouldFit(ctx, n, EffectiveRequest(engine_.policy(), m).get(), false);
    }
    if (!any) continue;
    std::span<const GpuState> gpus = engine_.state().gpus(NodeId(n));
    for (int g = 0; g < static_cast<int>(gpus.size()); ++g) {
      if (gpus[g].grants == ctx.extra[n][g].grants) ++freeable[n];
    }
    size_t pods = 0;
    int32_t low = INT32_MAX;
    for (int u : ctx.units_on[n]) {
      pods += ctx.units[u].pods.size();
      low = std::min(low, ctx.units[u].priority);
    }
    ranked.emplace_back(static_cast<double>(pods) / std::max(1, freeable[n]), low, n);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<PlacementResult> first;
  size_t take = 0;
  int64_t covered = 0;
  while (take < ranked.size()) {
    // Grow until the nodes taken could free twice the gang's GPUs (then twice as many nodes).
    const size_t before = take;
    while (take < ranked.size() && (covered < 2 * whole_demand || take < 2 * before)) {
      covered += freeable[std::get<2>(ranked[take])];
      ++take;
    }
    std::vector<NodeId> nodes;
    std::vector<int> units, terminating;
    absl::flat_hash_set<int> seen;
    for (size_t i = 0; i < take; ++i) {
      const int n = std::get<2>(ranked[i]);
      nodes.push_back(NodeId(n));
      for (int u : ctx.units_on[n]) {
        if (seen.insert(u).second) units.push_back(u);
      }
      terminating.insert(terminating.end(), ctx.terminating_on[n].begin(),
                         ctx.terminating_on[n].end());
    }
    std::sort(nodes.begin(), nodes.end());
    const std::vector<Candidate> allowed = Everything(nodes);
    first = place_without(ctx.Names(units, terminating), &allowed);
    if (AllPlaced(first)) break;
  }
  if (!AllPlaced(first)) {
    return NoPlan(ctx,
                  StrCat("evicting would not help: even without every pod it may evict, ",
                         first.empty() ? "no node would have room" : first[0].reason),
                  plan);
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
    return AllPlaced(place_without(ctx.Names(gone, terminating), &allowed));
  };
  if (!fits(candidates)) {
    return NoPlan(ctx, "evicting would not help: the gang does not fit where it could land", plan);
  }
  std::vector<int> victims;
  if (!ReprieveWithinBudgets(ctx, candidates, fits, &victims)) {
    return NoPlan(ctx,
                  "no eviction would be allowed: the disruption budgets where the gang could "
                  "land allow too few evictions now",
                  plan);
  }
  if (!Allowed(ctx, victims, &ctx.why_not)) {
    return NoPlan(ctx, StrCat("no eviction would be allowed: ", ctx.why_not), plan);
  }
  plan->placements = place_without(ctx.Names(victims, terminating), &allowed);
  TESSERA_CHECK(AllPlaced(plan->placements));
  for (int t : terminating) plan->awaited.push_back(ctx.running[t].name);
  for (int u : victims) {
    for (int p : ctx.units[u].pods) plan->victims.push_back(ctx.running[p].name);
  }
  for (const PlacementResult& r : plan->placements) {
    if (std::find(plan->nodes.begin(), plan->nodes.end(), r.placement.node) == plan->nodes.end()) {
      plan->nodes.push_back(r.placement.node);
    }
  }
  return true;
}

}  // namespace tessera::core
