#include "k8s/scheduler/preemption.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "common/strings.h"
#include "core/queues/resources.h"
#include "nlohmann/json.hpp"
#include "records/queue.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

// `requests` placed on node `id` all at once (one what-if, or the gang what-if for several), with
// the pods `without` gone; empty when one of them does not fit.
std::vector<core::PlacementResult> PlaceAllOn(ClusterLedger& ledger, core::NodeId id,
                                              std::span<const core::PodRequest> requests,
                                              std::span<const std::string> without) {
  const std::vector<core::Candidate> allowed = {core::Candidate{id, ~0ULL}};
  std::vector<core::PlacementResult> placed;
  if (requests.size() == 1) {
    placed.push_back(ledger.WhatIf(requests[0], without, &allowed));
  } else {
    placed = ledger.WhatIfGang(requests, without, &allowed);
  }
  const bool all = !placed.empty() && placed.size() == requests.size() &&
                   std::all_of(placed.begin(), placed.end(),
                               [](const core::PlacementResult& r) { return r.placed(); });
  if (!all) placed.clear();
  return placed;
}

}  // namespace

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
  absl::StatusOr<std::optional<records::QueueUsageStatus>> usage =
      records::QueueUsageFromObject(object);
  if (usage.ok()) {
    q->usage = *std::move(usage);
  } else {
    q->usage_error = std::string(FromAbsl(usage.status().message()));
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
  // Earlier plans are decided: the pods nominated before these (of at least their priority)
  // keep the room their victims leave, and the nominated pods of this queue will hold what they
  // ask (the reclaim rule counts them with these).
  std::vector<std::string> own;
  for (const PodInfo* m : members) own.push_back(m->key);
  const uint64_t own_seq = SeqOf(own);
  const absl::flat_hash_set<std::string> claimed = Claimed(ledger, own, pod.priority, own_seq, now);
  for (const auto& [key, n] : nominations_) {
    if (!n.pod || n.pod->queue != pod.queue || n.node.empty()) continue;
    if (std::find(own.begin(), own.end(), key) != own.end()) continue;
    request.demand += core::DemandOf(n.pod->request, gpu_memory > 0 ? gpu_memory : 1);
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
    if (info->disrupted_with_group) {
      // PodGroup disruptionMode all: the whole group, gang or basic, is one victim.
      rp.gang = StrCat(info->ns, "/", info->pod_group);
      rp.created = info->created;
    } else if (info->request.gang) {
      rp.gang = StrCat(info->ns, "/", info->request.gang->name);
      rp.gang_min = info->request.gang->min;  // elastic: members above it may go alone
      rp.created = info->created;
    }
    auto e = evicted_at_.find(key);
    const bool ours = e != evicted_at_.end() && now - e->second < kEvictingFor;
    rp.claimed = claimed.contains(key);
    rp.terminating = (info->deleting || ours) && !rp.claimed;
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
  // The plan must leave the pods nominated before these their room, on every node it uses (the
  // claims above cover the room being made; this covers free room they count on too).
  std::vector<core::NodeId> where;
  for (const core::PlacementResult& r : plan.placements) where.push_back(r.placement.node);
  std::vector<std::string> gone = plan.victims;
  gone.insert(gone.end(), plan.awaited.begin(), plan.awaited.end());
  d.reason = TakesKeptRoom(ledger, std::span<const PodInfo* const>(members).first(where.size()),
                           where, std::move(gone), now);
  if (!d.reason.empty()) return d;
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

uint64_t Preemption::SeqOf(std::span<const std::string> keys) const {
  uint64_t seq = UINT64_MAX;
  for (const std::string& k : keys) {
    if (auto it = nominations_.find(k); it != nominations_.end())
      seq = std::min(seq, it->second.seq);
  }
  return seq;
}

std::vector<const Preemption::Nomination*> Preemption::Outranking(const ClusterLedger& ledger,
                                                                  const std::string& node,
                                                                  std::span<const std::string> own,
                                                                  int32_t priority,
                                                                  uint64_t own_seq) const {
  std::vector<const Nomination*> out;
  for (const auto& [key, n] : nominations_) {
    if (n.node != node || !n.pod) continue;
    if (ledger.engine().Find(key) != nullptr) continue;  // placed already: it holds its room
    if (std::find(own.begin(), own.end(), key) != own.end()) continue;
    if (n.pod->priority < priority) continue;
    if (n.pod->priority == priority && n.seq > own_seq) continue;  // nominated after them
    out.push_back(&n);
  }
  std::sort(out.begin(), out.end(),
            [](const Nomination* a, const Nomination* b) { return a->seq < b->seq; });
  return out;
}

bool Preemption::LeavingNow(const std::string& key, const PodInfo& info, TimePoint now) const {
  return info.deleting || Evicting(key, now);
}

std::vector<std::string> Preemption::Leaving(const ClusterLedger& ledger, core::NodeId id,
                                             TimePoint now) const {
  std::vector<std::string> out;
  for (const auto& [k, info] : bound_) {
    if (!LeavingNow(k, *info, now)) continue;
    const core::Placement* p = ledger.engine().Find(k);
    if (p != nullptr && p->node == id) out.push_back(k);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool Preemption::FitsOn(ClusterLedger& ledger, core::NodeId id,
                        std::span<const PodInfo* const> pods, std::vector<std::string> without) {
  std::sort(without.begin(), without.end());
  without.erase(std::unique(without.begin(), without.end()), without.end());
  // All of them at once, and the members of each gang together (with its topology).
  std::vector<core::PodRequest> together;
  std::vector<std::vector<core::PodRequest>> gangs;
  absl::flat_hash_map<std::string, size_t> gang_of;
  for (const PodInfo* p : pods) {
    together.push_back(p->request);
    together.back().gang.reset();
    if (!p->request.gang) continue;
    auto [it, fresh] = gang_of.try_emplace(StrCat(p->ns, "/", p->request.gang->name), gangs.size());
    if (fresh) gangs.emplace_back();
    gangs[it->second].push_back(p->request);
  }
  if (PlaceAllOn(ledger, id, together, without).empty()) return false;
  for (std::vector<core::PodRequest>& gang : gangs) {
    if (gang.size() < 2) continue;      // one member alone: checked with the others above
    for (core::PodRequest& m : gang) {  // the members here, as a gang of their own
      m.gang->size = static_cast<int32_t>(gang.size());
      m.gang->min = 0;
    }
    if (PlaceAllOn(ledger, id, gang, without).empty()) return false;
  }
  return true;
}

absl::flat_hash_set<std::string> Preemption::Claimed(ClusterLedger& ledger,
                                                     std::span<const std::string> own,
                                                     int32_t priority, uint64_t own_seq,
                                                     TimePoint now) {
  absl::flat_hash_set<std::string> out;
  absl::flat_hash_map<std::string, std::vector<const PodInfo*>> kept;  // by node
  for (const auto& [key, n] : nominations_) {
    (void)key;
    if (!n.pod || n.node.empty()) continue;
    if (kept.contains(n.node)) continue;
    std::vector<const Nomination*> there = Outranking(ledger, n.node, own, priority, own_seq);
    std::vector<const PodInfo*>& pods = kept[n.node];
    for (const Nomination* o : there) pods.push_back(o->pod.get());
  }
  const core::Cluster& cluster = ledger.engine().cluster();
  for (const auto& [node, pods] : kept) {
    if (pods.empty()) continue;
    const core::NodeId id = cluster.FindNode(node);
    if (!id.valid()) continue;
    for (const std::string& k : ClaimedOn(ledger, id, pods, Leaving(ledger, id, now))) {
      out.insert(k);
    }
  }
  return out;
}

std::vector<std::string> Preemption::ClaimedOn(ClusterLedger& ledger, core::NodeId id,
                                               std::span<const PodInfo* const> kept,
                                               const std::vector<std::string>& leaving) {
  if (kept.empty() || leaving.empty()) return {};
  // They need more than is leaving: all of it is theirs.
  if (!FitsOn(ledger, id, kept, leaving)) return leaving;
  // The fewest they need: each pod leaving given back while they still fit without it.
  std::vector<std::string> gone = leaving;
  for (const std::string& l : leaving) {
    std::vector<std::string> without;
    for (const std::string& g : gone) {
      if (g != l) without.push_back(g);
    }
    if (FitsOn(ledger, id, kept, without)) gone = std::move(without);
  }
  return gone;
}

std::string Preemption::TakesKeptRoom(ClusterLedger& ledger, std::span<const PodInfo* const> pods,
                                      std::span<const core::NodeId> nodes,
                                      std::vector<std::string> gone, TimePoint now) {
  if (pods.empty()) return "";
  std::vector<std::string> own;
  for (const PodInfo* p : pods) own.push_back(p->key);
  const uint64_t own_seq = SeqOf(own);
  std::vector<core::NodeId> distinct(nodes.begin(), nodes.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const core::Cluster& cluster = ledger.engine().cluster();
  for (const core::NodeId id : distinct) {
    const std::string& node = cluster.node(id).name;
    const std::vector<const Nomination*> kept =
        Outranking(ledger, node, own, pods[0]->priority, own_seq);
    if (kept.empty()) continue;
    std::vector<const PodInfo*> together;
    for (const Nomination* n : kept) together.push_back(n->pod.get());
    for (size_t i = 0; i < pods.size() && i < nodes.size(); ++i) {
      if (nodes[i] == id) together.push_back(pods[i]);
    }
    std::vector<std::string> without = Leaving(ledger, id, now);
    without.insert(without.end(), gone.begin(), gone.end());
    if (FitsOn(ledger, id, together, std::move(without))) continue;
    return StrCat("the room being made on node ", node, " is claimed by pod ", kept[0]->pod->key,
                  " (priority ", kept[0]->pod->priority, "); planning again once it has landed");
  }
  return "";
}

Promised Preemption::Promises(ClusterLedger& ledger, std::span<const PodInfo* const> pods,
                              TimePoint now) {
  Promised out;
  if (pods.empty()) return out;
  std::vector<std::string> own;
  for (const PodInfo* p : pods) own.push_back(p->key);
  const uint64_t own_seq = SeqOf(own);
  std::vector<std::string> nodes;
  for (const auto& [key, n] : nominations_) {
    (void)key;
    if (n.pod && !n.node.empty()) nodes.push_back(n.node);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  const core::Cluster& cluster = ledger.engine().cluster();
  for (const std::string& node : nodes) {
    const std::vector<const Nomination*> kept =
        Outranking(ledger, node, own, pods[0]->priority, own_seq);
    const core::NodeId id = cluster.FindNode(node);
    if (kept.empty() || !id.valid()) continue;
    const std::vector<std::string> leaving = Leaving(ledger, id, now);
    std::vector<core::PodRequest> requests;
    for (const Nomination* n : kept) {
      requests.push_back(n->pod->request);
      requests.back().gang.reset();
      requests.back().name = n->pod->key;
    }
    std::vector<core::PlacementResult> placed = PlaceAllOn(ledger, id, requests, leaving);
    if (placed.empty()) {
      out.full.push_back(id);
      continue;
    }
    out.gone.insert(out.gone.end(), leaving.begin(), leaving.end());
    for (size_t i = 0; i < requests.size(); ++i) {
      out.arriving.push_back(
          plan::RunningPod{std::move(requests[i]), std::move(placed[i].placement), false});
    }
  }
  return out;
}

bool Preemption::RoomBeingMade(ClusterLedger& ledger, const std::string& key, TimePoint now) {
  auto n = nominations_.find(key);
  if (n == nominations_.end() || n->second.node.empty() || !n->second.pod) return false;
  const core::NodeId id = ledger.engine().cluster().FindNode(n->second.node);
  if (!id.valid()) return false;
  const std::vector<std::string> leaving = Leaving(ledger, id, now);
  if (leaving.empty()) return false;
  // Not all of it for the pods nominated there before this one.
  const std::string own[] = {key};
  std::vector<const PodInfo*> kept;
  for (const Nomination* o :
       Outranking(ledger, n->second.node, own, n->second.pod->priority, n->second.seq)) {
    kept.push_back(o->pod.get());
  }
  return ClaimedOn(ledger, id, kept, leaving).size() < leaving.size();
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
  std::vector<std::string> own;
  for (const PodInfo* p : pods) own.push_back(p->key);
  const uint64_t own_seq = SeqOf(own);
  std::vector<core::NodeId> nodes;
  for (const core::Placement& p : placements) {
    if (std::find(nodes.begin(), nodes.end(), p.node) == nodes.end()) nodes.push_back(p.node);
  }
  for (core::NodeId id : nodes) {
    const std::string& node = cluster.node(id).name;
    // The nominations there that outrank the placed pods, in order of nomination.
    const std::vector<const Nomination*> kept = Outranking(ledger, node, own, priority, own_seq);
    if (kept.empty()) continue;
    std::vector<std::string> leaving;
    for (const auto& [k, info] : bound_) {
      const core::Placement* p = engine.Find(k);
      if (p == nullptr || p->node != id) continue;
      if (info->deleting || evicted_at_.contains(k)) leaving.push_back(k);
    }
    // Each nominated pod, or the members of one gang nominated there together, must still fit
    // once the pods leaving are gone; several of them must fit all at once.
    std::vector<const PodInfo*> kept_pods;
    absl::flat_hash_set<std::string> gangs;
    size_t singles = 0;
    for (const Nomination* n : kept) {
      kept_pods.push_back(n->pod.get());
      if (n->pod->request.gang) {
        gangs.insert(StrCat(n->pod->ns, "/", n->pod->request.gang->name));
      } else {
        ++singles;
      }
    }
    const PodInfo& first = *kept[0]->pod;
    std::string who = StrCat("pod ", first.key, " (priority ", first.priority, ")");
    if (singles == 0 && gangs.size() == 1 && kept.size() > 1) {
      who = StrCat("gang ", *gangs.begin(), " (priority ", first.priority, ")");
    } else if (kept.size() > 1) {
      who = StrCat(kept.size(), " pods nominated there (the first: ", who, ")");
    }
    if (!FitsOn(ledger, id, kept_pods, std::move(leaving))) {
      return StrCat("the room on node ", node, " is kept for ", who,
                    ", for which pods there are being preempted");
    }
  }
  return "";
}

}  // namespace tessera::k8s
