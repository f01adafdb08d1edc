#include "k8s/scheduler/preemption.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "common/strings.h"
#include "core/queues/resources.h"
#include "nlohmann/json.hpp"
#include "records/queue.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

std::shared_ptr<const QueueInfo> DecodeQueue(const nlohmann::json& object) {
  auto q = std::make_shared<QueueInfo>();
  absl::StatusOr<core::QueueSpec> spec = records::QueueFromObject(object);
  if (spec.ok()) {
    q->spec = *std::move(spec);
  } else {
    q->error = std::string(FromAbsl(spec.status().message()));
    if (object.is_object() && object.contains("metadata") && object["metadata"].is_object() &&
        object["metadata"].contains("name") && object["metadata"]["name"].is_string()) {
      q->spec.name = object["metadata"]["name"];
    }
  }
  return q;
}

// --- writing ---------------------------------------------------------------------------------

HttpRequest ApiPreemptionWriter::NominationRequest(const PodInfo& pod, const std::string& node) {
  nlohmann::json patch = {{"status", {{"nominatedNodeName", nullptr}}}};
  if (!node.empty()) patch["status"]["nominatedNodeName"] = node;
  return HttpRequest{"PATCH", StrCat("/api/v1/namespaces/", pod.ns, "/pods/", pod.name, "/status"),
                     patch.dump(), std::string(ContentTypeOf(PatchType::kMerge))};
}

void ApiPreemptionWriter::Nominate(const PodInfo& pod, const std::string& node) {
  HttpRequest req = NominationRequest(pod, node);
  client_.Submit(req, [req, key = pod.key](const HttpResponse& r) {
    if (!r.ok()) {
      spdlog::warn("nominating a node for pod {}: {}", key,
                   FromAbsl(StatusFromResponse(req, r).message()));
    }
  });
}

void ApiPreemptionWriter::Evict(const PodInfo& victim) {
  evictor_.Evict(
      {victim.ns, victim.name, victim.uid, std::nullopt},
      [inbox = inbox_, key = victim.key](const EvictionTarget&, const EvictionResult& r) {
        switch (r.outcome) {
          case EvictionOutcome::kEvicted:
            spdlog::info("evicted pod {} (preemption)", key);
            break;
          case EvictionOutcome::kGone:
            break;
          case EvictionOutcome::kBudget: {
            spdlog::info("eviction of pod {} refused: {}", key, r.message);
            std::lock_guard<std::mutex> lock(inbox->mu);
            inbox->refusals.push_back({key, r.message});
            break;
          }
          case EvictionOutcome::kFailed:
            spdlog::warn("evicting pod {}: {}", key, r.message);
            break;
        }
      });
}

std::vector<PreemptionWriter::Refusal> ApiPreemptionWriter::TakeRefusals() {
  std::lock_guard<std::mutex> lock(inbox_->mu);
  std::vector<Refusal> out;
  out.swap(inbox_->refusals);
  return out;
}

// --- deciding --------------------------------------------------------------------------------

void Preemption::Track(std::shared_ptr<const PodInfo> pod) {
  nominations_.erase(pod->key);
  const std::string key = pod->key;
  bound_[key] = std::move(pod);
}

void Preemption::Untrack(const std::string& key) { bound_.erase(key); }

void Preemption::Observe(std::shared_ptr<const PodInfo> pod) {
  if (auto w = withdrawn_.find(pod->key); w != withdrawn_.end()) {
    if (!pod->nominated_node.empty() && pod->nominated_node == w->second) return;  // not yet
    withdrawn_.erase(w);
  }
  if (pod->nominated_node.empty()) {
    auto it = nominations_.find(pod->key);
    if (it != nominations_.end()) it->second.pod = std::move(pod);
    return;
  }
  Nomination& n = Nominate(pod->key);
  if (n.node.empty()) n.node = pod->nominated_node;  // ours wins until it is written back
  n.pod = std::move(pod);
}

Preemption::Nomination& Preemption::Nominate(const std::string& key) {
  withdrawn_.erase(key);
  Nomination& n = nominations_[key];
  if (n.seq == 0) n.seq = next_seq_++;
  return n;
}

bool Preemption::Withdraw(const PodInfo& pod) {
  std::string node = pod.nominated_node;
  if (auto it = nominations_.find(pod.key); it != nominations_.end()) {
    if (!it->second.node.empty()) node = it->second.node;
    nominations_.erase(it);
  } else if (auto w = withdrawn_.find(pod.key); w != withdrawn_.end() && w->second == node) {
    return false;  // withdrawn already; the watch has not shown it yet
  }
  if (node.empty()) return false;
  withdrawn_[pod.key] = node;
  return true;
}

void Preemption::Forget(const std::string& key) {
  withdrawn_.erase(key);
  nominations_.erase(key);
  evicted_at_.erase(key);
  refused_at_.erase(key);
  bound_.erase(key);
}

bool Preemption::OnBudget(Change change, std::shared_ptr<const BudgetInfo> budget) {
  const int64_t before = budgets_.Allowed(budget->key);
  const std::string key = budget->key;
  budgets_.Apply(change, std::move(budget));
  return change == Change::kDeleted || budgets_.Allowed(key) > before;
}

const std::string* Preemption::NominatedNode(const std::string& key) const {
  auto it = nominations_.find(key);
  return it == nominations_.end() ? nullptr : &it->second.node;
}

void Preemption::NoteRefusals(const std::vector<PreemptionWriter::Refusal>& refusals,
                              TimePoint now) {
  for (const PreemptionWriter::Refusal& r : refusals) {
    refused_at_[r.key] = now;
    evicted_at_.erase(r.key);
  }
}

Preemption::Decision Preemption::Plan(ClusterLedger& ledger, core::QueueSet& queues,
                                      const PodInfo& pod, const core::NodeSet* nodes,
                                      TimePoint now) {
  return PlanGang(ledger, queues, {&pod}, nodes, now);
}

Preemption::Decision Preemption::PlanGang(ClusterLedger& ledger, core::QueueSet& queues,
                                          const std::vector<const PodInfo*>& members,
                                          const core::NodeSet* nodes, TimePoint now,
                                          const std::vector<std::string>& running_members) {
  Decision d;
  if (members.empty()) {
    d.reason = "no members";
    return d;
  }
  const PodInfo& pod = *members[0];
  if (!budgets_known_) {
    d.undecided = true;
    d.reason =
        "the PodDisruptionBudgets are not listed yet (the scheduler needs list and watch on "
        "poddisruptionbudgets.policy)";
    return d;
  }
  // Shares with a memory ask count against the largest GPU (the smallest fraction they could be).
  int64_t gpu_memory = 0;
  const core::Cluster& cluster = ledger.engine().cluster();
  for (int n = 0; n < cluster.node_count(); ++n) {
    if (!cluster.live(core::NodeId(n))) continue;
    for (const core::GpuSpec& g : cluster.node(core::NodeId(n)).gpus) {
      gpu_memory = std::max(gpu_memory, g.memory_mib);
    }
  }
  std::vector<core::PodRequest> requests;
  core::PreemptionRequest request;
  for (const PodInfo* m : members) {
    requests.push_back(m->request);
    request.demand += core::DemandOf(m->request, gpu_memory > 0 ? gpu_memory : 1);
  }
  request.members = requests;
  request.queue = pod.queue;
  request.priority = pod.priority;
  request.nodes = nodes;
  request.gang_running = running_members;

  std::vector<core::RunningPod> running;
  running.reserve(bound_.size());
  for (const auto& [key, info] : bound_) {
    if (auto r = refused_at_.find(key); r != refused_at_.end()) {
      if (now - r->second < kEvictingFor) continue;  // a budget said no lately
    }
    core::RunningPod rp;
    rp.name = key;
    rp.queue = info->queue;
    rp.priority = info->priority;
    if (info->request.gang) {
      rp.gang = StrCat(info->ns, "/", info->request.gang->name);
      rp.gang_min = info->request.gang->min;  // elastic: members above it may go alone
      rp.created = info->created;
    }
    auto e = evicted_at_.find(key);
    const bool ours = e != evicted_at_.end() && now - e->second < kEvictingFor;
    rp.terminating = info->deleting || ours;
    if (budgets_.size() > 0) {
      rp.budget = budgets_.Covering(*info);
      if (!rp.budget.empty()) {
        auto [b, fresh] = request.budgets.try_emplace(rp.budget, 0);
        if (fresh) b->second = budgets_.Allowed(rp.budget);
        // Evicted by us, and the budget's status does not count it yet: it will.
        if (ours && !budgets_.Counted(rp.budget, info->name)) --b->second;
      }
    }
    running.push_back(std::move(rp));
  }
  core::PreemptionPlan plan = ledger.PlanPreemption(queues, request, running);
  if (!plan.found) {
    d.reason = plan.reason;
    return d;
  }
  std::vector<std::string> member_nodes;  // the members planned for (an elastic gang: some)
  for (const core::PlacementResult& r : plan.placements) {
    member_nodes.push_back(cluster.node(r.placement.node).name);
  }
  if (plan.victims.empty()) {
    for (const auto& [key, n] : nominations_) {
      if (!n.pod || n.pod->priority < pod.priority) continue;
      if (std::any_of(members.begin(), members.end(),
                      [&](const PodInfo* m) { return m->key == key; })) {
        continue;
      }
      if (std::find(member_nodes.begin(), member_nodes.end(), n.node) == member_nodes.end()) {
        continue;
      }
      d.reason = StrCat("the room being made on node ", n.node, " is claimed by pod ", key,
                        " (priority ", n.pod->priority, "); planning again once it has landed");
      return d;
    }
  }
  d.found = true;
  d.node = member_nodes[0];
  d.nodes = member_nodes;
  d.awaited = plan.awaited.size();
  for (const std::string& v : plan.victims) {
    auto it = bound_.find(v);
    if (it == bound_.end()) continue;
    d.evict.push_back(it->second);
    evicted_at_[v] = now;
  }
  for (size_t i = 0; i < member_nodes.size(); ++i) {
    Nominate(members[i]->key).node = member_nodes[i];
  }
  return d;
}

std::vector<std::shared_ptr<const PodInfo>> Preemption::NominateForMoves(
    std::shared_ptr<const PodInfo> pod, const std::string& node,
    const std::vector<std::string>& movers, TimePoint now) {
  std::vector<std::shared_ptr<const PodInfo>> out;
  for (const std::string& m : movers) {
    auto it = bound_.find(m);
    if (it == bound_.end()) return {};  // not bound as far as we know: no part of the plan runs
    out.push_back(it->second);
  }
  for (const std::string& m : movers) evicted_at_[m] = now;
  Nomination& n = Nominate(pod->key);
  n.node = node;
  n.pod = std::move(pod);
  return out;
}

bool Preemption::Evicting(const std::string& key, TimePoint now) const {
  auto it = evicted_at_.find(key);
  return it != evicted_at_.end() && now - it->second < kEvictingFor;
}

bool Preemption::RoomBeingMade(const ClusterLedger& ledger, const std::string& key,
                               TimePoint now) const {
  auto n = nominations_.find(key);
  if (n == nominations_.end() || n->second.node.empty()) return false;
  const core::NodeId id = ledger.engine().cluster().FindNode(n->second.node);
  if (!id.valid()) return false;
  for (const auto& [k, info] : bound_) {
    if (!info->deleting && !Evicting(k, now)) continue;
    const core::Placement* p = ledger.engine().Find(k);
    if (p != nullptr && p->node == id) return true;
  }
  return false;
}

std::string Preemption::Guard(ClusterLedger& ledger, const PodInfo& pod,
                              const core::Placement& placement) {
  const PodInfo* pods[] = {&pod};
  const core::Placement placements[] = {placement};
  return Guard(ledger, pods, placements);
}

std::string Preemption::Guard(ClusterLedger& ledger, std::span<const PodInfo* const> pods,
                              std::span<const core::Placement> placements) {
  if (nominations_.empty() || pods.empty()) return "";
  const core::Engine& engine = ledger.engine();
  const core::Cluster& cluster = engine.cluster();
  // The placed pods go as one: of their priority (a gang's members share it) and nominated as
  // early as the earliest of them.
  const int32_t priority = pods[0]->priority;
  absl::flat_hash_set<std::string> own;
  uint64_t own_seq = UINT64_MAX;
  for (const PodInfo* p : pods) {
    own.insert(p->key);
    if (auto it = nominations_.find(p->key); it != nominations_.end()) {
      own_seq = std::min(own_seq, it->second.seq);
    }
  }
  std::vector<core::NodeId> nodes;
  for (const core::Placement& p : placements) {
    if (std::find(nodes.begin(), nodes.end(), p.node) == nodes.end()) nodes.push_back(p.node);
  }
  for (core::NodeId id : nodes) {
    const std::string& node = cluster.node(id).name;
    // The nominations there that outrank the placed pods, in order of nomination.
    std::vector<std::pair<uint64_t, const std::string*>> kept;
    for (const auto& [key, n] : nominations_) {
      if (own.contains(key) || n.node != node || !n.pod) continue;
      if (n.pod->priority < priority) continue;
      if (n.pod->priority == priority && n.seq > own_seq) continue;  // nominated after them
      kept.emplace_back(n.seq, &key);
    }
    if (kept.empty()) continue;
    std::sort(kept.begin(), kept.end());
    std::vector<std::string> leaving;
    for (const auto& [k, info] : bound_) {
      const core::Placement* p = engine.Find(k);
      if (p == nullptr || p->node != id) continue;
      if (info->deleting || evicted_at_.contains(k)) leaving.push_back(k);
    }
    const std::vector<core::Candidate> allowed = {core::Candidate{id, ~0ULL}};
    // Each nominated pod, or the members of one gang nominated there together, must still fit
    // once the pods leaving are gone; several of them must fit all at once.
    std::vector<core::PodRequest> together;
    std::vector<std::vector<core::PodRequest>> gangs;
    absl::flat_hash_map<std::string, size_t> gang_of;
    size_t singles = 0;
    for (const auto& [seq, key] : kept) {
      const PodInfo& p = *nominations_.at(*key).pod;
      together.push_back(p.request);
      together.back().gang.reset();
      if (!p.request.gang) {
        ++singles;
        continue;
      }
      auto [it, fresh] = gang_of.try_emplace(StrCat(p.ns, "/", p.request.gang->name), gangs.size());
      if (fresh) gangs.emplace_back();
      gangs[it->second].push_back(p.request);
    }
    const PodInfo& first = *nominations_.at(*kept[0].second).pod;
    std::string who = StrCat("pod ", first.key, " (priority ", first.priority, ")");
    if (singles == 0 && gang_of.size() == 1 && kept.size() > 1) {
      who = StrCat("gang ", gang_of.begin()->first, " (priority ", first.priority, ")");
    } else if (kept.size() > 1) {
      who = StrCat(kept.size(), " pods nominated there (the first: ", who, ")");
    }
    bool fits = true;
    if (together.size() == 1) {
      fits = ledger.WhatIf(together[0], leaving, &allowed).placed();
    } else {
      std::vector<core::PlacementResult> r = ledger.WhatIfGang(together, leaving, &allowed);
      fits = !r.empty() && std::all_of(r.begin(), r.end(),
                                       [](const core::PlacementResult& x) { return x.placed(); });
    }
    for (size_t g = 0; fits && g < gangs.size(); ++g) {
      if (gangs[g].size() < 2) continue;      // one member alone: checked with the others above
      for (core::PodRequest& m : gangs[g]) {  // the members nominated here, as a gang of their own
        m.gang->size = static_cast<int32_t>(gangs[g].size());
        m.gang->min = 0;
      }
      std::vector<core::PlacementResult> r = ledger.WhatIfGang(gangs[g], leaving, &allowed);
      fits = !r.empty() && std::all_of(r.begin(), r.end(),
                                       [](const core::PlacementResult& x) { return x.placed(); });
    }
    if (!fits) {
      return StrCat("the room on node ", node, " is kept for ", who,
                    ", for which pods there are being preempted");
    }
  }
  return "";
}

}  // namespace tessera::k8s
