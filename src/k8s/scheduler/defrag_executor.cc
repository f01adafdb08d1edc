#include "k8s/scheduler/defrag_executor.h"

#include "common/strings.h"
#include "k8s/scheduler/plan_inputs.h"

namespace tessera::k8s {

bool DefragExecutor::Eligible(const std::string& key, const std::vector<const PodInfo*>& members,
                              TimePoint since, TimePoint now) const {
  if (!options_.enabled || members.empty()) return false;
  if (members[0]->priority < options_.min_priority) return false;
  // A gang is planned for whole: with members running (or missing), the pending ones must go
  // where those run, which a plan for the pending ones alone would not know.
  if (members[0]->request.gang &&
      static_cast<int>(members.size()) != members[0]->request.gang->size) {
    return false;
  }
  for (const PodInfo* m : members) {
    if (!m->claims.empty() || m->request.gpu.kind == core::GpuAsk::Kind::kMig) return false;
  }
  if (now - since < options_.after) return false;
  auto it = searched_.find(key);
  return it == searched_.end() || now - it->second >= options_.after;
}

DefragExecutor::Decision DefragExecutor::Plan(
    const ClusterLedger& ledger, Promised promised,
    const std::function<const PodInfo*(const std::string&)>& find,
    const std::function<bool(const PodInfo&)>& may_move, const std::string& key,
    const std::vector<const PodInfo*>& members,
    const std::function<std::unique_ptr<core::Policy>()>& make_policy,
    const std::vector<core::TopologyLevel>& levels, TimePoint now,
    std::vector<plan::DefragInput::Held> held) {
  searched_[key] = now;
  if (searched_.size() > 100'000) searched_.clear();  // bounded; pacing only
  Decision d;
  PlanView view = ViewForPlans(ledger, find, may_move);
  ApplyPromised(view, std::move(promised));
  plan::DefragInput in;
  in.cluster = view.cluster;
  in.levels = levels;
  in.make_policy = make_policy;
  in.running = std::move(view.running);
  in.cordoned = std::move(view.cordoned);
  for (const PodInfo* m : members) in.target.push_back(m->request);
  in.held = std::move(held);
  in.spares_per_domain = ledger.engine().spares_per_domain();
  plan::DefragOptions o;
  o.max_moves = options_.max_moves;
  o.max_checks = options_.max_checks;
  absl::StatusOr<plan::DefragPlan> p = plan::PlanDefrag(in, o);
  if (!p.ok()) {
    d.reason = std::string(p.status().message());
    return d;
  }
  d.reason = p->reason;
  if (p->verdict != plan::DefragVerdict::kPlan || p->moves.empty()) return d;
  d.found = true;
  for (const core::Placement& t : p->target) d.nodes.push_back(view.cluster->node(t.node).name);
  d.moves = std::move(p->moves);
  return d;
}

}  // namespace tessera::k8s
