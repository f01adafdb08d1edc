#include "k8s/scheduler/ledger.h"

#include <algorithm>
#include <map>

#include "common/status.h"
#include "common/strings.h"
#include "records/inventory.h"
#include "records/names.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

Holding Holding::OfBoundPod(const PodInfo& pod) {
  Holding h;
  h.node = pod.node_name;
  if (pod.input_error.empty()) {
    h.cpu_milli = pod.request.cpu_milli;
    h.memory_mib = pod.request.memory_mib;
  }
  if (pod.assignment) {
    if (pod.assignment->node != pod.node_name) {
      h.unreadable = StrCat("its ", records::kAssignmentAnnotation, " names node ",
                            pod.assignment->node, " but the pod is bound to ", pod.node_name);
    } else {
      h.gpus = *pod.assignment;
      h.gpus.gang.reset();  // who it runs with, not what it holds
    }
  } else if (!pod.assignment_error.empty()) {
    h.unreadable =
        StrCat("its ", records::kAssignmentAnnotation, " cannot be read: ", pod.assignment_error);
  }
  return h;
}

ClusterLedger::ClusterLedger(LedgerOptions options, SchedulerMetrics* metrics, OnBlocked on_blocked)
    : options_(std::move(options)), metrics_(metrics), on_blocked_(std::move(on_blocked)) {
  core::PolicyOptions po;
  po.seed = options_.seed;
  absl::StatusOr<std::unique_ptr<core::Policy>> policy = core::CreatePolicy(options_.policy, po);
  TESSERA_CHECK(policy.ok());
  absl::StatusOr<core::Cluster> empty = core::Cluster::Create({});
  TESSERA_CHECK(empty.ok());
  engine_ = std::make_unique<core::Engine>(*empty, std::move(*policy), options_.levels);
  engine_->KeepSpares(options_.spare_gpus_per_domain);
}

// --- nodes -----------------------------------------------------------------------------------

bool ClusterLedger::OnNode(Change change, std::shared_ptr<const NodeInfo> node) {
  const std::string name = node->name;
  auto latest = [&]() -> std::shared_ptr<const NodeInfo> {
    if (auto p = pending_.find(name); p != pending_.end()) return p->second;
    if (auto n = nodes_.find(name); n != nodes_.end()) return n->second;
    return nullptr;
  };
  std::shared_ptr<const NodeInfo> old = latest();
  if (change == Change::kDeleted) {
    if (old) {
      pending_[name] = nullptr;
      spdlog::info("node {} deleted", name);
    }
    return false;
  }
  pending_[name] = node;
  if (old && old->fingerprint == node->fingerprint) return false;
  if (!node->inventory_error.empty() && (!old || old->inventory_error != node->inventory_error)) {
    spdlog::warn(
        "node {}: annotation {} is unusable, so its GPUs are not used until it is fixed: {}", name,
        records::kInventoryAnnotation, node->inventory_error);
  } else if (node->inventory_error.empty() && old && !old->inventory_error.empty()) {
    spdlog::info("node {}: annotation {} is valid again ({} GPUs)", name,
                 records::kInventoryAnnotation, node->spec.gpu_count());
  }
  if (!node->capacity_error.empty() && (!old || old->capacity_error != node->capacity_error)) {
    spdlog::warn("node {}: {} (counted as 0)", name, node->capacity_error);
  }
  if (!old) {
    spdlog::debug("node {} added: {} GPUs, {}m CPU, {}Mi memory", name, node->spec.gpu_count(),
                  node->spec.cpu_milli, node->spec.memory_mib);
  }
  return true;
}

void ClusterLedger::Sync() {
  if (!pending_.empty()) ApplyNodeChanges();
}

void ClusterLedger::ApplyNodeChanges() {
  core::NodeChanges changes;
  std::vector<std::string> added_names;
  std::vector<int> reclassify;  // ids whose labels or taints changed
  std::vector<std::string> restore;
  for (auto& [name, node] : pending_) {
    auto have = nodes_.find(name);
    if (!node) {
      if (have == nodes_.end()) continue;
      changes.remove.push_back(ids_.at(name));
      continue;
    }
    if (have == nodes_.end()) {
      changes.add.push_back(node->spec);
      added_names.push_back(name);
      continue;
    }
    const NodeInfo& was = *have->second;
    const core::NodeId id = ids_.at(name);
    const bool labels = was.spec.labels != node->spec.labels;
    if (labels || !was.spec.SameHardware(node->spec)) changes.update.emplace_back(id, node->spec);
    if (!was.spec.SameHardware(node->spec)) {
      for (const std::string& key : held_on_[name]) restore.push_back(key);
    }
    if (was.unschedulable != node->unschedulable) {
      changes.cordon.emplace_back(id, node->unschedulable);
    }
    if (labels || was.taints != node->taints) reclassify.push_back(id.value());
  }
  std::vector<core::NodeId> added;
  std::vector<std::string> released;
  absl::Status st = engine_->ChangeNodes(changes, &added, &released);
  // Every node was validated alone when decoded; a refusal is a bug, not bad input.
  TESSERA_CHECK_MSG(st.ok(), std::string(FromAbsl(st.message())).c_str());
  if (metrics_ != nullptr) {
    metrics_->node_changes +=
        static_cast<int64_t>(changes.add.size() + changes.update.size() + changes.remove.size());
  }
  for (const std::string& key : released) {
    if (auto it = held_.find(key); it != held_.end()) it->second.accounted = false;
  }
  for (core::NodeId id : changes.remove) unhealthy_held_.erase(names_[id.value()]);
  for (core::NodeId id : changes.remove) {
    const std::string name = names_[id.value()];
    index_.Remove(id.value());
    for (auto& [k, a] : allowed_) a.set->nodes.Set(id, false);
    ids_.erase(name);
    names_[id.value()] = "";
    nodes_.erase(name);
  }
  core::NodeChanges cordon_added;
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string& name = added_names[i];
    const int id = added[i].value();
    if (pending_.at(name)->unschedulable) cordon_added.cordon.emplace_back(added[i], true);
    ids_[name] = added[i];
    if (static_cast<int>(names_.size()) <= id) names_.resize(id + 1);
    names_[id] = name;
    nodes_[name] = pending_.at(name);
    index_.Set(id, nodes_[name]);
    reclassify.push_back(id);
    if (auto on = held_on_.find(name); on != held_on_.end()) {
      for (const std::string& key : on->second) restore.push_back(key);
    }
  }
  for (auto& [name, node] : pending_) {
    if (!node || !ids_.contains(name)) continue;
    const int id = ids_.at(name).value();
    if (nodes_[name] != node) {
      nodes_[name] = node;
      index_.Set(id, node);
    }
  }
  if (!cordon_added.cordon.empty()) TESSERA_CHECK(engine_->ChangeNodes(cordon_added).ok());
  std::vector<std::string> changed;
  for (const auto& [name, node] : pending_) {
    if (node) changed.push_back(name);
  }
  pending_.clear();
  bad_inventory_ = 0;
  for (const auto& [name, node] : nodes_) bad_inventory_ += node->inventory_error.empty() ? 0 : 1;
  if (metrics_ != nullptr) metrics_->nodes_bad_inventory = bad_inventory_;
  for (int id : reclassify) {
    if (Reclassify(id)) engine_->TouchNode(core::NodeId(id));
  }
  RestoreAll(restore);
  for (const std::string& name : changed) HoldUnhealthy(name);
  ++node_changes_applied_;
  if (!released.empty() || !restore.empty()) ++holdings_moved_;
}

std::string UnhealthyKey(const std::string& node, int gpu) {
  return StrCat("unhealthy-gpu:", node, "/", gpu);
}

std::string ClusterLedger::SpareRuleWarning() const {
  const int per_domain = engine_->spares_per_domain();
  const core::TopologyDomains& domains = engine_->domains();
  const int level = domains.LevelIndex(core::kNvlinkDomainLevel);
  if (per_domain <= 0 || level < 0) return "";
  // Per node: the spares its own domains keep (a rack-scale domain's are not counted: the
  // largest pod fits on its other nodes).
  std::map<int32_t, int> kept;
  for (const core::Domain& d : domains.domains(level)) {
    if (d.candidates.size() != 1) continue;
    kept[d.candidates[0].node.value()] += std::min(per_domain, d.gpu_count);
  }
  // Servers alike (GPUs, spares kept): how many, and the first by name.
  std::map<std::pair<int, int>, std::pair<int, std::string>> alike;
  const core::Cluster& cluster = engine_->cluster();
  for (const auto& [node, spares] : kept) {
    const core::NodeSpec& spec = cluster.node(core::NodeId(node));
    auto& [count, first] = alike[{spec.gpu_count(), spares}];
    if (count++ == 0 || spec.name < first) first = spec.name;
  }
  std::string out;
  for (const auto& [shape, seen] : alike) {
    const auto& [gpus, spares] = shape;
    StrAppend(&out, out.empty() ? "" : "; ", seen.first, seen.first == 1 ? " server" : " servers",
              " of ", gpus, " GPUs (", seen.second, seen.first == 1 ? "" : ", ...", ") keep ",
              spares, spares == 1 ? " spare" : " spares", seen.first == 1 ? "" : " each",
              ": a pod asking more than ", gpus - spares, " GPUs never fits on ",
              seen.first == 1 ? "it" : "them");
  }
  if (out.empty()) return out;
  return StrCat("spareGpusPerDomain ", per_domain, ": ", out,
                " (each server is an NVLink domain of its own; spares suit rack-scale domains: "
                "docs/workloads.md)");
}

std::string ClusterLedger::FaultOf(const PodInfo& pod) const {
  if (pod.node_name.empty()) return "";
  // The latest word on the node: a change not synced yet, else the node as synced.
  const NodeInfo* node = nullptr;
  if (auto p = pending_.find(pod.node_name); p != pending_.end()) {
    node = p->second.get();
  } else if (auto n = nodes_.find(pod.node_name); n != nodes_.end()) {
    node = n->second.get();
  }
  if (node == nullptr) return StrCat("its node ", pod.node_name, " is gone");
  if (!pod.assignment || node->unhealthy_gpus.empty()) return "";
  for (const records::AssignedGpu& g : pod.assignment->gpus) {
    const std::vector<int32_t>& bad = node->unhealthy_gpus;
    if (std::find(bad.begin(), bad.end(), g.grant.gpu) != bad.end()) {
      return StrCat("GPU ", g.grant.gpu, " of node ", pod.node_name, " is unhealthy");
    }
  }
  return "";
}

void ClusterLedger::HoldUnhealthy(const std::string& name) {
  auto held = unhealthy_held_.find(name);
  if (held != unhealthy_held_.end()) {
    for (const std::string& key : held->second) (void)engine_->Release(key);
    unhealthy_held_.erase(held);
  }
  auto node = nodes_.find(name);
  const core::NodeId id = engine_->cluster().FindNode(name);
  if (node == nodes_.end() || !id.valid() || node->second->unhealthy_gpus.empty()) return;
  for (int32_t g : node->second->unhealthy_gpus) {
    if (g < 0 || static_cast<size_t>(g) >= node->second->spec.gpus.size()) continue;
    const core::GpuSpec& spec = node->second->spec.gpus[static_cast<size_t>(g)];
    if (spec.mig_enabled) continue;  // MIG instances are not held (see README)
    // A hot spare on it (the engine's, chosen while the GPU was free and not held) is free room:
    // the hold takes its place (Engine::Restore moves the spare).
    const core::GpuState& state = engine_->state().gpu(id, g);
    const bool spare = (engine_->spare_gpus(id) >> g) & 1;
    const int64_t free_memory = spare ? spec.memory_mib : state.free_memory_mib;
    const int32_t free_compute = spare ? 1000 : state.free_compute_milli;
    if (free_memory <= 0 && free_compute <= 0) continue;
    records::Assignment a;
    a.node = name;
    records::AssignedGpu ag;
    ag.grant.gpu = g;
    ag.uuid = spec.uuid;
    ag.grant.memory_mib = free_memory;
    ag.grant.compute_milli = free_compute;
    ag.grant.exclusive = free_memory == spec.memory_mib && free_compute == 1000;
    a.gpus.push_back(ag);
    absl::StatusOr<core::Placement> p = records::AssignmentToPlacement(engine_->cluster(), a);
    const std::string key = UnhealthyKey(name, g);
    absl::Status st = p.status();
    if (p.ok()) {
      p->node = id;
      st = engine_->Restore(key, *p);
    }
    if (!st.ok()) {
      spdlog::error("node {}: cannot keep unhealthy GPU {} free: {}", name, g,
                    FromAbsl(st.message()));
      continue;
    }
    unhealthy_held_[name].insert(key);
  }
  if (unhealthy_held_.contains(name)) {
    std::vector<std::string> gpus;
    for (int32_t g : node->second->unhealthy_gpus) gpus.push_back(StrCat(g));
    spdlog::info("node {}: unhealthy GPU(s) {} take no new pods", name, StrJoin(gpus, ","));
  }
}

bool ClusterLedger::Reclassify(int id) {
  bool changed = false;
  const NodeInfo& node = *nodes_.at(names_[id]);
  std::vector<std::pair<NodeConstraints, bool>> stale;
  for (auto& [key, a] : allowed_) {
    const bool allows =
        NodeAllows(node, a.constraints) && !(a.gpus && gpu_blocked_.contains(node.name));
    if (a.set->nodes.Contains(core::NodeId(id)) == allows) continue;
    a.set->nodes.Set(core::NodeId(id), allows);
    changed = true;
    // The reason an empty set gives is computed with it: a set that becomes empty, or stops
    // being empty, is made again when next asked for.
    if ((a.set->nodes.size() == 0) != !a.set->none.empty()) stale.push_back(key);
  }
  for (const auto& key : stale) allowed_.erase(key);
  return changed;
}

// --- what pods hold --------------------------------------------------------------------------

void ClusterLedger::RestoreAll(const std::vector<std::string>& keys) {
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::string& key : keys) {
      auto it = held_.find(key);
      if (it == held_.end() || it->second.accounted || (pass == 0) != it->second.bound) continue;
      Restore(key, it->second);
    }
  }
}

bool ClusterLedger::Restore(const std::string& key, Entry& e) {
  e.accounted = false;
  const Holding& h = e.holding;
  if (!h.unreadable.empty()) Block(key, e, h.node, h.unreadable);
  const core::Cluster& cluster = engine_->cluster();
  core::NodeId id = cluster.FindNode(h.node);
  if (!id.valid()) return false;  // the node is gone or not ours (yet): nothing to account
  core::Placement p;
  if (!h.gpus.gpus.empty()) {
    absl::StatusOr<core::Placement> gpus = records::AssignmentToPlacement(cluster, h.gpus);
    if (!gpus.ok()) {
      spdlog::error("pod {} on node {}: {}", key, h.node, FromAbsl(gpus.status().message()));
      if (metrics_ != nullptr) metrics_->restore_failures++;
      Block(key, e, h.node,
            StrCat("its ", records::kAssignmentAnnotation, " does not match node ", h.node, ": ",
                   FromAbsl(gpus.status().message())));
      return false;
    }
    p = *std::move(gpus);
  }
  p.node = id;
  p.cpu_milli = h.cpu_milli;
  p.memory_mib = h.memory_mib;
  absl::Status st = engine_->Restore(key, p);
  if (!st.ok() && (p.cpu_milli > 0 || p.memory_mib > 0) && !p.gpus.empty()) {
    // CPU or memory over-committed by pods others placed: keep at least the GPUs exclusive.
    core::Placement gpus_only = p;
    gpus_only.cpu_milli = gpus_only.memory_mib = 0;
    if (engine_->Restore(key, gpus_only).ok()) {
      spdlog::warn("pod {}: {}; accounting its GPUs only", key, FromAbsl(st.message()));
      st = absl::OkStatus();
    }
  }
  if (!st.ok()) {
    spdlog::error("pod {} on node {}: {}", key, h.node, FromAbsl(st.message()));
    if (metrics_ != nullptr) metrics_->restore_failures++;
    if (!p.gpus.empty()) {
      Block(key, e, h.node,
            StrCat("its ", records::kAssignmentAnnotation,
                   " cannot be restored: ", FromAbsl(st.message())));
    }
    return false;
  }
  e.accounted = true;
  return true;
}

bool ClusterLedger::Hold(const std::string& key, Holding holding, bool bound) {
  Drop(key);
  Entry& e = held_[key];
  e.holding = std::move(holding);
  e.bound = bound;
  held_on_[e.holding.node].insert(key);
  // A node not in the engine yet: restored when it is added (ApplyNodeChanges).
  auto unhealthy = unhealthy_held_.find(e.holding.node);
  if (unhealthy == unhealthy_held_.end() || e.holding.gpus.gpus.empty()) return Restore(key, e);
  // A pod the API server shows on an unhealthy GPU (seen after its node) keeps it: the held free
  // part gives way and is taken again around it.
  for (const std::string& k : unhealthy->second) (void)engine_->Release(k);
  unhealthy_held_.erase(unhealthy);
  const std::string node = e.holding.node;
  const bool restored = Restore(key, e);
  HoldUnhealthy(node);
  return restored;
}

void ClusterLedger::HoldPlaced(const std::string& key, const core::Placement& placement) {
  Drop(key);
  Entry& e = held_[key];
  e.holding = HoldingOf(placement);
  e.accounted = true;
  held_on_[e.holding.node].insert(key);
}

bool ClusterLedger::Drop(const std::string& key) {
  auto it = held_.find(key);
  if (it == held_.end()) return false;
  Entry& e = it->second;
  bool freed = false;
  const bool was_accounted = e.accounted;
  if (e.accounted) {
    absl::Status st = engine_->Release(key);
    if (!st.ok()) spdlog::error("release {}: {}", key, FromAbsl(st.message()));
    freed = true;
  }
  if (!e.blocks.empty()) freed = true;
  Unblock(key, e);
  if (auto on = held_on_.find(e.holding.node); on != held_on_.end()) {
    on->second.erase(key);
    if (on->second.empty()) held_on_.erase(on);
  }
  const std::string node = e.holding.node;
  held_.erase(it);
  // What the pod leaves on an unhealthy GPU is not for others.
  if (was_accounted) {
    auto n = nodes_.find(node);
    if (n != nodes_.end() && !n->second->unhealthy_gpus.empty()) HoldUnhealthy(node);
  }
  return freed;
}

const Holding* ClusterLedger::Find(const std::string& key) const {
  auto it = held_.find(key);
  return it == held_.end() ? nullptr : &it->second.holding;
}

bool ClusterLedger::Accounted(const std::string& key) const {
  auto it = held_.find(key);
  return it != held_.end() && it->second.accounted;
}

std::vector<std::string> ClusterLedger::EngineKeys() const {
  std::vector<std::string> out;
  for (const auto& [key, e] : held_) {
    if (e.accounted) out.push_back(key);
  }
  std::sort(out.begin(), out.end());
  for (const auto& [node, keys] : unhealthy_held_) {
    for (const std::string& k : keys) {
      if (engine_->Find(k) != nullptr) out.push_back(k);
    }
  }
  return out;
}

void ClusterLedger::Block(const std::string& key, Entry& e, const std::string& node,
                          const std::string& why) {
  if (e.blocks == node) return;
  Unblock(key, e);
  e.blocks = node;
  std::set<std::string>& by = gpu_blocked_[node];
  if (by.empty()) allowed_.clear();  // GPU pods' allowed sets change
  by.insert(key);
  spdlog::error(
      "pod {} on node {}: {}; node {} takes no GPU pods until the pod is gone or its record is "
      "readable (its GPUs are never treated as free)",
      key, node, why, node);
  PublishBlocked();
  if (on_blocked_) on_blocked_(key, node, why);
}

void ClusterLedger::Unblock(const std::string& key, Entry& e) {
  if (e.blocks.empty()) return;
  auto it = gpu_blocked_.find(e.blocks);
  if (it != gpu_blocked_.end()) {
    it->second.erase(key);
    if (it->second.empty()) {
      spdlog::info("node {} takes GPU pods again", e.blocks);
      gpu_blocked_.erase(it);
      allowed_.clear();
    }
  }
  e.blocks.clear();
  PublishBlocked();
}

void ClusterLedger::PublishBlocked() {
  if (metrics_ == nullptr) return;
  metrics_->nodes_gpu_blocked = static_cast<int64_t>(gpu_blocked_.size());
  int64_t pods = 0;
  for (const auto& [node, by] : gpu_blocked_) pods += static_cast<int64_t>(by.size());
  metrics_->pods_unaccounted_gpus = pods;
}

Holding ClusterLedger::HoldingOf(const core::Placement& p) const {
  Holding h;
  h.node = engine_->cluster().node(p.node).name;
  if (!p.gpus.empty()) h.gpus = records::MakeAssignment(engine_->cluster(), p);
  h.cpu_milli = p.cpu_milli;
  h.memory_mib = p.memory_mib;
  return h;
}

// --- deciding --------------------------------------------------------------------------------

namespace {
constexpr size_t kMaxAllowedSets = 4096;
}  // namespace

std::shared_ptr<const ClusterLedger::Allowed> ClusterLedger::AllowedFor(const PodInfo& pod) {
  return AllowedFor(pod.constraints, pod.request.gpu.kind != core::GpuAsk::Kind::kNone);
}

std::shared_ptr<const ClusterLedger::Allowed> ClusterLedger::AllowedFor(
    const NodeConstraints& constraints, bool gpus) {
  const bool blocked = gpus && !gpu_blocked_.empty();
  if (!constraints.selects() && index_.tainted() == 0 && !blocked) return nullptr;
  auto key = std::make_pair(constraints, blocked);
  if (auto it = allowed_.find(key); it != allowed_.end()) return it->second.set;
  const int size = engine_->cluster().node_count();
  NodeIndex::Result r = index_.Allowed(constraints, size);
  int unaccounted = 0;
  if (blocked) {
    for (const auto& [node, by] : gpu_blocked_) {
      auto id = ids_.find(node);
      if (id == ids_.end() || !r.allowed[id->second.value()]) continue;
      r.allowed[id->second.value()] = false;
      ++unaccounted;
    }
  }
  const int live = engine_->cluster().live_count();
  std::string none;
  if (r.taint + r.selector + unaccounted == live) {
    none = StrCat("no node may take this pod: ", live, " nodes; ", r.taint,
                  " with taints it does not tolerate, ", r.selector,
                  " not matching its nodeSelector or node affinity");
    if (unaccounted > 0) {
      StrAppend(&none, ", ", unaccounted, " blocked for GPU pods (a bound pod's ",
                records::kAssignmentAnnotation, " there cannot be read)");
    }
  }
  // Pods with constraints of their own (one hostname each, say) would grow this without end.
  if (allowed_.size() >= kMaxAllowedSets) allowed_.clear();
  auto set = std::make_shared<Allowed>(Allowed{core::NodeSet(std::move(r.allowed)), none});
  allowed_.emplace(std::move(key), AllowedSet{constraints, blocked, set});
  return set;
}

core::PlacementResult ClusterLedger::Decide(const PodInfo& pod) {
  std::shared_ptr<const Allowed> allowed = AllowedFor(pod);
  if (allowed && allowed->nodes.size() == 0) {
    core::PlacementResult r;
    r.reason = allowed->none.empty()
                   ? "no node may take this pod now (taints, nodeSelector, node affinity)"
                   : allowed->none;
    return r;
  }
  return engine_->DecideOne(
      core::Ask::Pod(pod.request).In({nullptr, allowed ? &allowed->nodes : nullptr}));
}

core::PlacementResult ClusterLedger::DecideReserved(const PodInfo& pod,
                                                    const core::PodRequest& request,
                                                    const core::Reservations& reservations,
                                                    int64_t now, core::Admission* how) {
  std::shared_ptr<const Allowed> allowed = AllowedFor(pod);
  if (allowed && allowed->nodes.size() == 0) {
    core::PlacementResult r;
    r.reason = allowed->none.empty()
                   ? "no node may take this pod now (taints, nodeSelector, node affinity)"
                   : allowed->none;
    return r;
  }
  return reservations.Place(*engine_, request, core::Mode::kCommit, now, pod.max_runtime_s, how,
                            allowed ? &allowed->nodes : nullptr);
}

std::vector<core::PlacementResult> ClusterLedger::DecideGang(
    const std::vector<const PodInfo*>& members, const std::string& gang_key) {
  std::vector<core::PodRequest> requests;
  for (const PodInfo* m : members) requests.push_back(m->request);
  return DecideGangWith(members, std::move(requests), gang_key, nullptr);
}

ClusterLedger::GangNodes ClusterLedger::GangAllowed(
    const std::vector<const PodInfo*>& members, const std::vector<core::PodRequest>& requests,
    const std::string& gang_key, const std::vector<core::Candidate>* candidates) {
  GangNodes out;
  // Every member's node restrictions at once: the nodes all of them may use.
  std::vector<std::shared_ptr<const Allowed>> sets;
  for (size_t i = 0; i < members.size(); ++i) {
    std::shared_ptr<const Allowed> a =
        AllowedFor(members[i]->constraints, requests[i].gpu.kind != core::GpuAsk::Kind::kNone);
    if (!a || std::find(sets.begin(), sets.end(), a) != sets.end()) continue;  // shared sets
    if (a->nodes.size() == 0) out.none = a->none;
    sets.push_back(std::move(a));
  }
  if (sets.empty() && candidates == nullptr) return out;  // anywhere
  if (sets.size() == 1 && candidates == nullptr && out.none.empty()) {
    // The members share one set (members with no restriction may use its nodes too).
    out.set = std::move(sets[0]);
    return out;
  }
  std::vector<core::Candidate>& allowed = out.list.emplace();
  auto member_allowed = [&](core::NodeId id) {
    return std::all_of(sets.begin(), sets.end(),
                       [&](const auto& a) { return a->nodes.Contains(id); });
  };
  if (candidates != nullptr) {
    for (const core::Candidate& c : *candidates) {
      if (member_allowed(c.node)) allowed.push_back(c);
    }
  } else {
    for (int i = 0; i < engine_->cluster().node_count(); ++i) {
      if (member_allowed(core::NodeId(i))) allowed.push_back(core::Candidate{core::NodeId(i)});
    }
  }
  if (allowed.empty()) {
    if (out.none.empty()) {
      out.none = candidates != nullptr
                     ? "no node both takes every member and has devices their claims may use"
                     : "no node may take every member (taints, nodeSelector, affinity)";
    }
    out.none = StrCat("gang ", gang_key, ": ", out.none);
  }
  return out;
}

std::vector<core::PlacementResult> ClusterLedger::DecideGangWith(
    const std::vector<const PodInfo*>& members, std::vector<core::PodRequest> requests,
    const std::string& gang_key, const std::vector<core::Candidate>* candidates) {
  for (core::PodRequest& r : requests) {
    r.gang->size = static_cast<int32_t>(members.size());  // the members not yet placed
  }
  const GangNodes allowed = GangAllowed(members, requests, gang_key, candidates);
  if (!allowed.none.empty()) {
    core::PlacementResult r;
    r.reason = allowed.none;
    return std::vector<core::PlacementResult>(members.size(), r);
  }
  return engine_->Decide(core::Ask::Gang(requests).In({allowed.candidates(), allowed.nodes()}));
}

std::vector<core::PlacementResult> ClusterLedger::DecideGangMembers(
    const std::vector<const PodInfo*>& members, const std::vector<std::string>& running,
    const std::string& gang_key, const Reserved* reserved) {
  std::vector<core::PodRequest> requests;
  for (const PodInfo* m : members) requests.push_back(m->request);
  const GangNodes allowed = GangAllowed(members, requests, gang_key, nullptr);
  if (!allowed.none.empty()) {
    core::PlacementResult r;
    r.reason = allowed.none;
    return std::vector<core::PlacementResult>(members.size(), r);
  }
  // The running members the engine accounts (a member bound on a node not synced yet is not).
  std::vector<std::string> held;
  for (const std::string& key : running) {
    if (Accounted(key)) held.push_back(key);
  }
  const core::Ask ask =
      core::Ask::ElasticGang(requests, held).In({allowed.candidates(), allowed.nodes()});
  if (reserved == nullptr) return engine_->Decide(ask);
  return reserved->reservations.PlaceGang(*engine_, ask, reserved->now, reserved->owners,
                                          reserved->max_runtime_s);
}

core::PlacementResult ClusterLedger::DecideWith(const PodInfo& pod, const core::PodRequest& request,
                                                const std::vector<core::Candidate>* candidates,
                                                const core::NodeSet* nodes) {
  std::shared_ptr<const Allowed> allowed =
      AllowedFor(pod.constraints, request.gpu.kind != core::GpuAsk::Kind::kNone);
  core::PlacementResult none;
  if (allowed && allowed->nodes.size() == 0) {
    none.reason = allowed->none.empty()
                      ? "no node may take this pod now (taints, nodeSelector, node affinity)"
                      : allowed->none;
    return none;
  }
  if (candidates == nullptr && nodes == nullptr) {
    return engine_->DecideOne(
        core::Ask::Pod(request).In({nullptr, allowed ? &allowed->nodes : nullptr}));
  }
  if (candidates == nullptr && !allowed)
    return engine_->DecideOne(core::Ask::Pod(request).In({nullptr, nodes}));
  std::vector<core::Candidate> both;
  if (candidates != nullptr) {
    for (const core::Candidate& c : *candidates) {
      if (!allowed || allowed->nodes.Contains(c.node)) both.push_back(c);
    }
  } else {
    for (int i = 0; i < engine_->cluster().node_count(); ++i) {
      const core::NodeId id(i);
      if (nodes->Contains(id) && allowed->nodes.Contains(id)) both.push_back(core::Candidate{id});
    }
  }
  if (both.empty()) {
    none.reason =
        "no node that may take this pod (taints, nodeSelector, node affinity) has devices its "
        "claims may use";
    return none;
  }
  return engine_->DecideOne(core::Ask::Pod(request).In({&both, nullptr}));
}

void ClusterLedger::Unplace(const std::string& key) {
  absl::Status st = engine_->Release(key);
  if (!st.ok()) spdlog::error("release {}: {}", key, FromAbsl(st.message()));
}

// --- what-ifs --------------------------------------------------------------------------------

core::PlacementResult ClusterLedger::WhatIf(const core::PodRequest& request,
                                            std::span<const std::string> without,
                                            const std::vector<core::Candidate>* candidates,
                                            const core::NodeSet* nodes) {
  return engine_->DecideOne(
      core::Ask::Pod(request).In({candidates, nodes}).Without(without).TestOnly());
}

std::vector<core::PlacementResult> ClusterLedger::WhatIfGang(
    std::span<const core::PodRequest> members, std::span<const std::string> without,
    const std::vector<core::Candidate>* candidates) {
  return engine_->Decide(
      core::Ask::Gang(members).In({candidates, nullptr}).Without(without).TestOnly());
}

core::PreemptionPlan ClusterLedger::PlanPreemption(core::QueueSet& queues,
                                                   const core::PreemptionRequest& request,
                                                   std::span<const core::RunningPod> running) {
  return core::PreemptionPlanner(*engine_, queues).Plan(request, running);
}

void ClusterLedger::PublishMetrics() {
  if (metrics_ == nullptr) return;
  Sync();
  const core::Cluster& cluster = engine_->cluster();
  const core::ClusterState& state = engine_->state();
  std::vector<NodeGauges> nodes;
  nodes.reserve(cluster.live_count());
  for (int i = 0; i < cluster.node_count(); ++i) {
    core::NodeId id(i);
    if (!cluster.live(id)) continue;
    const core::NodeSpec& spec = cluster.node(id);
    NodeGauges g;
    g.node = spec.name;
    g.inventory_valid = nodes_.at(spec.name)->inventory_error.empty();
    const uint64_t spares = engine_->spare_gpus(id);
    for (int k = 0; k < spec.gpu_count(); ++k) {
      const core::GpuState& gs = state.gpu(id, k);
      g.gpu_memory_capacity_mib += spec.gpus[k].memory_mib;
      g.gpu_compute_capacity_milli += 1000;
      // A hot spare is held in the engine as a whole GPU of no pod: free, kept back, not granted.
      if ((spares >> k) & 1) continue;
      g.gpu_memory_allocated_mib += spec.gpus[k].memory_mib - gs.free_memory_mib;
      g.gpu_compute_allocated_milli += 1000 - gs.free_compute_milli;
    }
    nodes.push_back(std::move(g));
  }
  metrics_->SetNodes(std::move(nodes));
}

}  // namespace tessera::k8s
