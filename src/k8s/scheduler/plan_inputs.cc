#include "k8s/scheduler/plan_inputs.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "common/strings.h"

namespace tessera::k8s {

PlanView ViewForPlans(const ClusterLedger& ledger,
                      const std::function<const PodInfo*(const std::string& key)>& find,
                      const std::function<bool(const PodInfo&)>& may_move) {
  PlanView view;
  const core::Engine& engine = ledger.engine();
  view.cluster = &engine.cluster();
  for (const std::string& key : ledger.EngineKeys()) {
    const core::Placement* placement = engine.Find(key);
    if (placement == nullptr) continue;
    plan::RunningPod r;
    r.placement = *placement;
    const PodInfo* pod = find ? find(key) : nullptr;
    if (pod != nullptr && pod->input_error.empty()) {
      r.request = pod->request;
      r.movable = !pod->controller.empty() && !pod->deleting && !pod->disrupted_with_group &&
                  (!may_move || may_move(*pod));
    } else {
      // Not a pod the planners understand: it stays where it is. Its ask is what it holds.
      r.request.cpu_milli = placement->cpu_milli;
      r.request.memory_mib = placement->memory_mib;
      r.movable = false;
    }
    r.request.name = key;
    view.running.push_back(std::move(r));
  }
  for (int n = 0; n < view.cluster->node_count(); ++n) {
    core::NodeId id(n);
    if (view.cluster->live(id) && !engine.state().accepts_pods(id)) view.cordoned.push_back(id);
  }
  return view;
}

void ApplyPromised(PlanView& view, Promised promised) {
  if (!promised.gone.empty()) {
    absl::flat_hash_set<std::string> gone(promised.gone.begin(), promised.gone.end());
    std::erase_if(view.running,
                  [&gone](const plan::RunningPod& r) { return gone.contains(r.request.name); });
  }
  for (plan::RunningPod& r : promised.arriving) {
    r.movable = false;
    view.running.push_back(std::move(r));
  }
  for (const core::NodeId id : promised.full) {
    if (std::find(view.cordoned.begin(), view.cordoned.end(), id) == view.cordoned.end()) {
      view.cordoned.push_back(id);
    }
  }
}

std::vector<core::PodRequest> WaitingGroup::requests() const {
  std::vector<core::PodRequest> out;
  out.reserve(pods.size());
  for (const PodInfo* p : pods) out.push_back(p->request);
  return out;
}

std::vector<WaitingGroup> GroupWaiting(const std::vector<const PodInfo*>& pending,
                                       std::vector<std::string>* incomplete) {
  std::vector<const PodInfo*> pods;
  for (const PodInfo* p : pending) {
    if (!p->bound() && !p->deleting && !p->gated && p->input_error.empty()) pods.push_back(p);
  }
  std::stable_sort(pods.begin(), pods.end(), [](const PodInfo* a, const PodInfo* b) {
    return std::make_tuple(-static_cast<int64_t>(a->priority), a->created, a->key) <
           std::make_tuple(-static_cast<int64_t>(b->priority), b->created, b->key);
  });
  std::vector<WaitingGroup> out;
  std::map<std::string, size_t> gangs;  // "ns/gang" -> index in out
  for (const PodInfo* p : pods) {
    if (!p->request.gang) {
      out.push_back(WaitingGroup{{p}, p->key});
      continue;
    }
    const std::string name = StrCat(p->ns, "/", p->request.gang->name);
    auto [it, added] = gangs.emplace(name, out.size());
    if (added) {
      out.push_back(WaitingGroup{{p}, name});
    } else {
      out[it->second].pods.push_back(p);
    }
  }
  std::vector<WaitingGroup> complete;
  for (WaitingGroup& g : out) {
    if (g.gang() && static_cast<int>(g.pods.size()) < g.pods.front()->request.gang->min_members()) {
      if (incomplete != nullptr) incomplete->push_back(g.name);
      continue;
    }
    complete.push_back(std::move(g));
  }
  return complete;
}

std::set<std::string> RunningGangs(const std::vector<plan::RunningPod>& running) {
  std::set<std::string> gangs;
  for (const plan::RunningPod& r : running) {
    if (!r.request.gang) continue;
    const std::string& key = r.request.name;  // "ns/pod"
    gangs.insert(StrCat(key.substr(0, key.find('/')), "/", r.request.gang->name));
  }
  return gangs;
}

std::set<std::string> RunningGangs(
    const ClusterLedger& ledger,
    const std::function<const PodInfo*(const std::string& key)>& find) {
  std::set<std::string> gangs;
  const core::Engine& engine = ledger.engine();
  for (const std::string& key : ledger.EngineKeys()) {
    if (engine.Find(key) == nullptr) continue;
    const PodInfo* pod = find(key);
    if (pod == nullptr || !pod->input_error.empty() || !pod->request.gang) continue;
    gangs.insert(StrCat(pod->ns, "/", pod->request.gang->name));
  }
  return gangs;
}

void DropRunningGangs(const std::set<std::string>& gangs, std::vector<WaitingGroup>* groups,
                      std::vector<std::string>* dropped) {
  if (gangs.empty()) return;
  std::erase_if(*groups, [&](const WaitingGroup& g) {
    if (!g.gang() || !gangs.contains(g.name)) return false;
    if (dropped != nullptr) dropped->push_back(g.name);
    return true;
  });
}

}  // namespace tessera::k8s
