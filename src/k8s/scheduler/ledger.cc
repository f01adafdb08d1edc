#include "k8s/scheduler/ledger.h"

#include <algorithm>

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
    }
  } else if (!pod.assignment_error.empty()) {
    h.unreadable =
        StrCat("its ", records::kAssignmentAnnotation, " cannot be read: ", pod.assignment_error);
  }
  return h;
}

ClusterLedger::ClusterLedger(LedgerOptions options, SchedulerMetrics* metrics, OnBlocked on_blocked)
    : options_(std::move(options)), metrics_(metrics), on_blocked_(std::move(on_blocked)) {
  Rebuild();
}

// --- nodes -----------------------------------------------------------------------------------

bool ClusterLedger::OnNode(Change change, std::shared_ptr<const NodeInfo> node) {
  const std::string& name = node->name;
  if (change == Change::kDeleted) {
    if (nodes_.erase(name) > 0) {
      dirty_ = true;
      spdlog::info("node {} deleted", name);
    }
    return false;
  }
  auto it = nodes_.find(name);
  std::shared_ptr<const NodeInfo> old = it == nodes_.end() ? nullptr : it->second;
  nodes_[name] = node;
  if (old && old->fingerprint == node->fingerprint) return false;
  dirty_ = true;
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
  if (dirty_) Rebuild();
}

void ClusterLedger::Rebuild() {
  std::vector<core::NodeSpec> specs;
  specs.reserve(nodes_.size());
  int bad = 0;
  tainted_nodes_ = 0;
  allowed_.clear();  // node ids change with the cluster
  for (const auto& [name, info] : nodes_) {
    if (!info->inventory_error.empty()) ++bad;
    if (info->unschedulable) continue;  // cordoned: see the class comment
    if (!info->taints.empty()) ++tainted_nodes_;
    specs.push_back(info->spec);
  }
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(std::move(specs));
  if (!cluster.ok()) {
    // Every node was validated alone when decoded; this is a bug, not bad input.
    spdlog::error("cannot build the cluster: {}", FromAbsl(cluster.status().message()));
    TESSERA_CHECK_MSG(cluster.ok(), "cluster of validated nodes is invalid");
  }
  core::PolicyOptions po;
  po.seed = options_.seed;
  absl::StatusOr<std::unique_ptr<core::Policy>> policy = core::CreatePolicy(options_.policy, po);
  TESSERA_CHECK(policy.ok());
  engine_.reset();
  cluster_ = std::make_unique<core::Cluster>(std::move(*cluster));
  engine_ = std::make_unique<core::Engine>(*cluster_, std::move(*policy), options_.levels);
  dirty_ = false;
  // Bound pods first (the API server's truth), then what this scheduler is binding.
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& [key, e] : held_) {
      if ((pass == 0) == e.bound) Restore(key, e);
    }
  }
  if (metrics_ != nullptr) {
    metrics_->cluster_rebuilds++;
    metrics_->nodes_bad_inventory = bad;
  }
}

// --- what pods hold --------------------------------------------------------------------------

bool ClusterLedger::Restore(const std::string& key, Entry& e) {
  e.accounted = false;
  const Holding& h = e.holding;
  if (!h.unreadable.empty()) Block(key, e, h.node, h.unreadable);
  core::NodeId id = cluster_->FindNode(h.node);
  if (!id.valid()) return false;  // the node is gone, cordoned or not ours: nothing to account
  core::Placement p;
  if (!h.gpus.gpus.empty()) {
    absl::StatusOr<core::Placement> gpus = records::AssignmentToPlacement(*cluster_, h.gpus);
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
  if (dirty_) {
    // Accounted by the rebuild before the next decision; a blocked node is blocked already.
    if (!e.holding.unreadable.empty()) Block(key, e, e.holding.node, e.holding.unreadable);
    return false;
  }
  return Restore(key, e);
}

void ClusterLedger::HoldPlaced(const std::string& key, const core::Placement& placement) {
  Drop(key);
  Entry& e = held_[key];
  e.holding = HoldingOf(placement);
  e.accounted = true;
}

bool ClusterLedger::Drop(const std::string& key) {
  auto it = held_.find(key);
  if (it == held_.end()) return false;
  Entry& e = it->second;
  bool freed = false;
  if (e.accounted) {
    absl::Status st = engine_->Release(key);
    if (!st.ok()) spdlog::error("release {}: {}", key, FromAbsl(st.message()));
    freed = true;
  }
  if (!e.blocks.empty()) freed = true;
  Unblock(key, e);
  held_.erase(it);
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
  h.node = cluster_->node(p.node).name;
  if (!p.gpus.empty()) h.gpus = records::MakeAssignment(*cluster_, p);
  h.cpu_milli = p.cpu_milli;
  h.memory_mib = p.memory_mib;
  return h;
}

// --- deciding --------------------------------------------------------------------------------

namespace {
constexpr size_t kMaxAllowedSets = 4096;
}  // namespace

std::shared_ptr<const ClusterLedger::Allowed> ClusterLedger::AllowedFor(const PodInfo& pod) {
  const bool gpus = pod.request.gpu.kind != core::GpuAsk::Kind::kNone;
  const bool blocked = gpus && !gpu_blocked_.empty();
  if (!pod.constraints.selects() && tainted_nodes_ == 0 && !blocked) return nullptr;
  auto key = std::make_pair(pod.constraints, blocked);
  if (auto it = allowed_.find(key); it != allowed_.end()) return it->second;
  std::vector<bool> allows(cluster_->node_count());
  int taint = 0, selector = 0, unaccounted = 0;
  for (int i = 0; i < cluster_->node_count(); ++i) {
    std::string why;
    const std::string& name = cluster_->node(core::NodeId(i)).name;
    if (!NodeAllows(*nodes_.at(name), pod, &why)) {
      ++(why == "taint" ? taint : selector);
    } else if (blocked && gpu_blocked_.contains(name)) {
      ++unaccounted;
    } else {
      allows[i] = true;
    }
  }
  std::string none;
  if (taint + selector + unaccounted == cluster_->node_count()) {
    none = StrCat("no node may take this pod: ", cluster_->node_count(), " nodes; ", taint,
                  " with taints it does not tolerate, ", selector,
                  " not matching its nodeSelector or node affinity");
    if (unaccounted > 0) {
      StrAppend(&none, ", ", unaccounted, " blocked for GPU pods (a bound pod's ",
                records::kAssignmentAnnotation, " there cannot be read)");
    }
  }
  // Pods with constraints of their own (one hostname each, say) would grow this without end.
  if (allowed_.size() >= kMaxAllowedSets) allowed_.clear();
  auto set = std::make_shared<const Allowed>(Allowed{core::NodeSet(std::move(allows)), none});
  allowed_.emplace(std::move(key), set);
  return set;
}

core::PlacementResult ClusterLedger::Decide(const PodInfo& pod) {
  std::shared_ptr<const Allowed> allowed = AllowedFor(pod);
  if (allowed && allowed->nodes.size() == 0) {
    core::PlacementResult r;
    r.reason = allowed->none;
    return r;
  }
  return engine_->Place(pod.request, core::Mode::kCommit, nullptr,
                        allowed ? &allowed->nodes : nullptr);
}

std::vector<core::PlacementResult> ClusterLedger::DecideGang(
    const std::vector<const PodInfo*>& members, const std::string& gang_key) {
  std::vector<core::PodRequest> requests;
  for (const PodInfo* m : members) {
    core::PodRequest r = m->request;
    r.gang->size = static_cast<int32_t>(members.size());  // the members not yet placed
    requests.push_back(std::move(r));
  }
  // Every member's node restrictions at once: the nodes all of them may use.
  std::vector<std::shared_ptr<const Allowed>> sets;
  std::string none;
  for (const PodInfo* m : members) {
    std::shared_ptr<const Allowed> a = AllowedFor(*m);
    if (!a || std::find(sets.begin(), sets.end(), a) != sets.end()) continue;  // shared sets
    if (a->nodes.size() == 0) none = a->none;
    sets.push_back(std::move(a));
  }
  const bool restricted = !sets.empty();
  std::vector<core::Candidate> allowed;
  for (int i = 0; restricted && i < cluster_->node_count(); ++i) {
    const core::NodeId id(i);
    if (std::all_of(sets.begin(), sets.end(),
                    [&](const auto& a) { return a->nodes.Contains(id); })) {
      allowed.push_back(core::Candidate{id});
    }
  }
  if (restricted && allowed.empty()) {
    if (none.empty()) none = "no node may take every member (taints, nodeSelector, affinity)";
    core::PlacementResult r;
    r.reason = StrCat("gang ", gang_key, ": ", none);
    return std::vector<core::PlacementResult>(members.size(), r);
  }
  return engine_->PlaceGang(requests, core::Mode::kCommit, restricted ? &allowed : nullptr);
}

void ClusterLedger::PublishMetrics() {
  if (metrics_ == nullptr) return;
  Sync();
  std::vector<NodeGauges> nodes;
  const core::ClusterState& state = engine_->state();
  for (int i = 0; i < cluster_->node_count(); ++i) {
    core::NodeId id(i);
    const core::NodeSpec& spec = cluster_->node(id);
    NodeGauges g;
    g.node = spec.name;
    auto info = nodes_.find(spec.name);
    g.inventory_valid = info == nodes_.end() || info->second->inventory_error.empty();
    for (int k = 0; k < spec.gpu_count(); ++k) {
      const core::GpuState& gs = state.gpu(id, k);
      g.gpu_memory_capacity_mib += spec.gpus[k].memory_mib;
      g.gpu_memory_allocated_mib += spec.gpus[k].memory_mib - gs.free_memory_mib;
      g.gpu_compute_capacity_milli += 1000;
      g.gpu_compute_allocated_milli += 1000 - gs.free_compute_milli;
    }
    nodes.push_back(std::move(g));
  }
  metrics_->SetNodes(std::move(nodes));
}

}  // namespace tessera::k8s
