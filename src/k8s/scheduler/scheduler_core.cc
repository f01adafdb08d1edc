#include "k8s/scheduler/scheduler_core.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "records/assignment.h"
#include "records/inventory.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

using Stage = SchedulerCore::Stage;

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kNew:
      return "new";
    case Stage::kIgnored:
      return "ignored";
    case Stage::kBadInput:
      return "bad-input";
    case Stage::kQueued:
      return "queued";
    case Stage::kUnschedulable:
      return "unschedulable";
    case Stage::kGangWaiting:
      return "gang-waiting";
    case Stage::kBackoff:
      return "backoff";
    case Stage::kBinding:
      return "binding";
    case Stage::kBindConflict:
      return "bind-conflict";
    case Stage::kBound:
      return "bound";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<SchedulerCore>> SchedulerCore::Create(SchedulerCoreOptions options,
                                                                     SchedulerActions* actions,
                                                                     SchedulerMetrics* metrics,
                                                                     Clock clock) {
  core::PolicyOptions po;
  po.seed = options.seed;
  TESSERA_RETURN_IF_ERROR(core::CreatePolicy(options.policy, po).status());
  if (options.max_pods_per_cycle < 1) options.max_pods_per_cycle = 1;
  std::unique_ptr<SchedulerCore> c(
      new SchedulerCore(std::move(options), actions, metrics, std::move(clock)));
  c->Rebuild();
  return c;
}

SchedulerCore::SchedulerCore(SchedulerCoreOptions options, SchedulerActions* actions,
                             SchedulerMetrics* metrics, Clock clock)
    : options_(std::move(options)),
      actions_(actions),
      metrics_(metrics),
      clock_(clock ? std::move(clock) : [] { return std::chrono::steady_clock::now(); }) {
  last_flush_ = clock_();
}

// --- cluster ---------------------------------------------------------------------------------

void SchedulerCore::OnNode(Change change, std::shared_ptr<const NodeInfo> node) {
  const std::string& name = node->name;
  if (change == Change::kDeleted) {
    if (nodes_.erase(name) > 0) {
      cluster_dirty_ = true;
      spdlog::info("node {} deleted", name);
    }
    return;
  }
  auto it = nodes_.find(name);
  std::shared_ptr<const NodeInfo> old = it == nodes_.end() ? nullptr : it->second;
  nodes_[name] = node;
  if (old && old->fingerprint == node->fingerprint) return;
  cluster_dirty_ = true;
  RequestRetry();
  if (!node->inventory_error.empty() && (!old || old->inventory_error != node->inventory_error)) {
    spdlog::warn(
        "node {}: annotation {} is unusable, so its GPUs are not used until it is "
        "fixed: {}",
        name, records::kInventoryAnnotation, node->inventory_error);
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
}

void SchedulerCore::Rebuild() {
  std::vector<core::NodeSpec> specs;
  specs.reserve(nodes_.size());
  int bad = 0;
  tainted_nodes_ = 0;
  allowed_sets_.clear();  // node ids change with the cluster
  for (const auto& [name, info] : nodes_) {
    if (!info->inventory_error.empty()) ++bad;
    // A cordoned node takes no new pods. Leaving it out of the engine's cluster is enough: what
    // its bound pods hold matters only on it, and it is restored when the node is uncordoned.
    if (info->unschedulable) continue;
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
  cluster_dirty_ = false;
  // Bound pods first (the API server's truth), then what this scheduler is binding.
  for (auto& [key, s] : pods_) s.accounted = false;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& [key, s] : pods_) {
      if (!s.held) continue;
      bool bound = s.stage == Stage::kBound;
      if ((pass == 0) != bound) continue;
      Restore(key, s);
    }
  }
  if (metrics_ != nullptr) {
    metrics_->cluster_rebuilds++;
    metrics_->nodes_bad_inventory = bad;
  }
}

bool SchedulerCore::Restore(const std::string& key, PodState& s) {
  s.accounted = false;
  if (!s.held) return false;
  core::NodeId id = cluster_->FindNode(s.held->node);
  if (!id.valid()) return false;  // the node is gone or not ours: nothing to account
  core::Placement p;
  if (!s.held->gpus.gpus.empty()) {
    absl::StatusOr<core::Placement> gpus = records::AssignmentToPlacement(*cluster_, s.held->gpus);
    if (!gpus.ok()) {
      spdlog::error("pod {} on node {}: {}", key, s.held->node, FromAbsl(gpus.status().message()));
      if (metrics_ != nullptr) metrics_->restore_failures++;
      BlockGpus(key, s, s.held->node,
                StrCat("its ", records::kAssignmentAnnotation, " does not match node ",
                       s.held->node, ": ", FromAbsl(gpus.status().message())));
      return false;
    }
    p = *std::move(gpus);
  }
  p.node = id;
  p.cpu_milli = s.held->cpu_milli;
  p.memory_mib = s.held->memory_mib;
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
    spdlog::error("pod {} on node {}: {}", key, s.held->node, FromAbsl(st.message()));
    if (metrics_ != nullptr) metrics_->restore_failures++;
    if (!p.gpus.empty()) {
      BlockGpus(key, s, s.held->node,
                StrCat("its ", records::kAssignmentAnnotation,
                       " cannot be restored: ", FromAbsl(st.message())));
    }
    return false;
  }
  s.accounted = true;
  return true;
}

void SchedulerCore::BlockGpus(const std::string& key, PodState& s, const std::string& node,
                              const std::string& why) {
  if (s.blocks != node) {
    UnblockGpus(key, s);
    s.blocks = node;
    std::set<std::string>& by = gpu_blocked_[node];
    if (by.empty()) allowed_sets_.clear();  // GPU pods' allowed sets change
    by.insert(key);
    spdlog::error(
        "pod {} on node {}: {}; node {} takes no GPU pods until the pod is gone or its record "
        "is readable (its GPUs are never treated as free)",
        key, node, why, node);
  }
  if (s.warned != why) {
    s.warned = why;
    actions_->ReportWarning(
        *s.info, "GpuAssignmentUnreadable",
        StrCat(why, "; node ", node,
               " takes no GPU pods until this pod is gone or its record is readable"));
  }
  if (metrics_ != nullptr) {
    metrics_->nodes_gpu_blocked = static_cast<int64_t>(gpu_blocked_.size());
    int64_t pods = 0;
    for (const auto& [n, by] : gpu_blocked_) pods += static_cast<int64_t>(by.size());
    metrics_->pods_unaccounted_gpus = pods;
  }
}

void SchedulerCore::UnblockGpus(const std::string& key, PodState& s) {
  if (s.blocks.empty()) return;
  auto it = gpu_blocked_.find(s.blocks);
  if (it != gpu_blocked_.end()) {
    it->second.erase(key);
    if (it->second.empty()) {
      spdlog::info("node {} takes GPU pods again", s.blocks);
      gpu_blocked_.erase(it);
      allowed_sets_.clear();
      RequestRetry();
    }
  }
  s.blocks.clear();
  if (metrics_ != nullptr) {
    metrics_->nodes_gpu_blocked = static_cast<int64_t>(gpu_blocked_.size());
    int64_t pods = 0;
    for (const auto& [n, by] : gpu_blocked_) pods += static_cast<int64_t>(by.size());
    metrics_->pods_unaccounted_gpus = pods;
  }
}

void SchedulerCore::Release(PodState& s) {
  if (s.accounted) {
    absl::Status st = engine_->Release(s.info->key);
    if (!st.ok()) spdlog::error("release {}: {}", s.info->key, FromAbsl(st.message()));
    RequestRetry();
  }
  UnblockGpus(s.info->key, s);
  s.accounted = false;
  s.held.reset();
}

std::optional<SchedulerCore::Held> SchedulerCore::HeldFromPod(const PodInfo& pod) const {
  if (!pod.bound()) return std::nullopt;
  Held h;
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
  } else if (pod.input_error.empty() && pod.request.gpu.kind != core::GpuAsk::Kind::kNone &&
             pod.scheduler_name == options_.scheduler_name) {
    spdlog::warn(
        "pod {} asks for GPUs and is bound to {} without {}; its GPUs are not "
        "accounted",
        pod.key, pod.node_name, records::kAssignmentAnnotation);
  }
  return h;
}

SchedulerCore::Held SchedulerCore::HeldFromPlacement(const core::Placement& p) const {
  Held h;
  h.node = cluster_->node(p.node).name;
  if (!p.gpus.empty()) h.gpus = records::MakeAssignment(*cluster_, p);
  h.cpu_milli = p.cpu_milli;
  h.memory_mib = p.memory_mib;
  return h;
}

void SchedulerCore::AccountBound(const std::string& key, PodState& s) {
  s.held = HeldFromPod(*s.info);
  s.stage = Stage::kBound;
  if (!s.held->unreadable.empty()) BlockGpus(key, s, s.held->node, s.held->unreadable);
  if (cluster_dirty_) return;  // the rebuild before the next decision restores it
  Restore(key, s);
}

// --- pods ------------------------------------------------------------------------------------

void SchedulerCore::OnPod(Change change, std::shared_ptr<const PodInfo> pod) {
  const std::string key = pod->key;
  if (change == Change::kDeleted || pod->terminal()) {
    Forget(key);
    return;
  }
  auto [it, inserted] = pods_.try_emplace(key);
  PodState& s = it->second;
  if (inserted) s.first_seen = clock_();
  std::shared_ptr<const PodInfo> prev = s.info;
  s.info = pod;

  if (pod->bound()) {
    Dequeue(key, s);
    std::optional<Held> truth = HeldFromPod(*pod);
    if (s.stage == Stage::kBinding || s.stage == Stage::kBindConflict) {
      if (metrics_ != nullptr && s.stage == Stage::kBinding) metrics_->binding_in_flight--;
      if (s.held && s.held->node == pod->node_name &&
          (!pod->assignment || truth->gpus == s.held->gpus)) {
        Confirm(s);  // our bind, seen on the watch (perhaps before its answer)
        return;
      }
      spdlog::warn("pod {} was bound to {} by someone else while this scheduler was binding it",
                   key, pod->node_name);
      Release(s);
    } else if (s.stage == Stage::kBound && s.held && truth && *truth == *s.held &&
               (s.accounted || cluster_dirty_)) {
      return;  // nothing that matters changed
    } else {
      Release(s);
    }
    LeaveGang(key, s);
    AccountBound(key, s);
    return;
  }

  if (s.stage == Stage::kBound) {
    Release(s);  // cannot happen (bindings are final); keep the ledger right anyway
    s.stage = Stage::kNew;
  }
  if (pod->scheduler_name != options_.scheduler_name || pod->deleting || pod->gated) {
    if (s.stage == Stage::kBinding || s.stage == Stage::kBindConflict) {
      if (!pod->deleting && !pod->gated) return;  // schedulerName is immutable: not reached
      if (metrics_ != nullptr && s.stage == Stage::kBinding) metrics_->binding_in_flight--;
      Release(s);
    }
    Dequeue(key, s);
    LeaveGang(key, s);
    s.stage = Stage::kIgnored;
    return;
  }
  if (s.stage == Stage::kBinding || s.stage == Stage::kBindConflict) return;
  if (!pod->input_error.empty()) {
    Dequeue(key, s);
    LeaveGang(key, s);
    if (s.stage != Stage::kBadInput || !prev || prev->input_error != pod->input_error) {
      if (metrics_ != nullptr) metrics_->failed_invalid_pod++;
      Report(s, "Unschedulable", StrCat("invalid pod: ", pod->input_error));
    }
    s.stage = Stage::kBadInput;
    return;
  }
  const bool fresh = s.stage == Stage::kNew || s.stage == Stage::kIgnored ||
                     s.stage == Stage::kBadInput || !prev || !prev->SameAsk(*pod);
  if (fresh) {
    Dequeue(key, s);
    LeaveGang(key, s);
    Enqueue(key, s);
  }
}

void SchedulerCore::Forget(const std::string& key) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  PodState& s = it->second;
  if (metrics_ != nullptr && s.stage == Stage::kBinding) metrics_->binding_in_flight--;
  Release(s);
  Dequeue(key, s);
  LeaveGang(key, s);
  pods_.erase(it);
}

void SchedulerCore::Enqueue(const std::string& key, PodState& s) {
  s.stage = Stage::kQueued;
  queue_.Push(key, s.info->priority, s.info->queue);
  JoinGang(key, s);
}

void SchedulerCore::Dequeue(const std::string& key, PodState& s) {
  queue_.Remove(key);
  unschedulable_.erase(key);
  delayed_.erase(key);
  (void)s;
}

void SchedulerCore::JoinGang(const std::string& key, PodState& s) {
  if (!s.info->request.gang) return;
  std::string gk = StrCat(s.info->ns, "/", s.info->request.gang->name);
  if (s.gang == gk) return;
  LeaveGang(key, s);
  Gang& g = gangs_[gk];
  if (g.members.empty()) g.size = s.info->request.gang->size;
  g.members.insert(key);
  s.gang = gk;
}

void SchedulerCore::LeaveGang(const std::string& key, PodState& s) {
  if (s.gang.empty()) return;
  auto it = gangs_.find(s.gang);
  if (it != gangs_.end()) {
    it->second.members.erase(key);
    if (it->second.members.empty()) gangs_.erase(it);
  }
  s.gang.clear();
}

void SchedulerCore::Confirm(PodState& s) {
  s.stage = Stage::kBound;
  s.bind_failures = 0;
  if (!s.counted) {
    s.counted = true;
    if (metrics_ != nullptr) {
      metrics_->pods_scheduled++;
      metrics_->scheduling_duration.Observe(
          std::chrono::duration<double>(clock_() - s.first_seen).count());
    }
  }
}

void SchedulerCore::OnBindResult(const std::string& key, uint64_t attempt,
                                 const absl::Status& status) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;
  PodState& s = it->second;
  if (s.stage != Stage::kBinding || s.attempt != attempt) return;  // settled meanwhile
  if (metrics_ != nullptr) metrics_->binding_in_flight--;
  if (status.ok()) {
    Confirm(s);
    return;
  }
  if (status.code() == absl::StatusCode::kAborted ||
      status.code() == absl::StatusCode::kAlreadyExists) {
    // 409: already bound (perhaps by an earlier attempt of ours), recreated, or being deleted.
    // Keep the placement until the watch says which.
    spdlog::info("bind {}: {}; waiting for the watch to show what happened", key,
                 FromAbsl(status.message()));
    s.stage = Stage::kBindConflict;
    s.retry_at = clock_() + options_.bind_conflict_timeout;
    delayed_.insert(key);
    return;
  }
  if (status.code() == absl::StatusCode::kNotFound) {
    Release(s);
    s.stage = Stage::kIgnored;  // the DELETED event follows
    return;
  }
  spdlog::warn("bind {}: {}", key, FromAbsl(status.message()));
  if (metrics_ != nullptr) metrics_->failed_bind_error++;
  std::string node = s.held ? s.held->node : "";
  Release(s);
  ++s.bind_failures;
  s.stage = Stage::kBackoff;
  s.retry_at = clock_() + Backoff::Delay(options_.bind_backoff, s.bind_failures, 0.0);
  delayed_.insert(key);
  Report(s, "SchedulerError",
         StrCat("binding to node ", node, " failed: ", FromAbsl(status.message())));
}

void SchedulerCore::SetSynced(bool nodes, bool pods) {
  nodes_synced_ = nodes_synced_ || nodes;
  pods_synced_ = pods_synced_ || pods;
}

// --- deciding --------------------------------------------------------------------------------

void SchedulerCore::Report(PodState& s, std::string_view reason, const std::string& message) {
  auto now = clock_();
  if (message == s.reported) {
    if (now - s.reported_at < options_.report_repeat_interval) return;
    s.reported_at = now;
    actions_->ReportFailure(*s.info, reason, message, /*repeat=*/true);
    return;
  }
  s.reported = message;
  s.reported_at = now;
  spdlog::info("pod {}: {}: {}", s.info->key, reason, message);
  // Already on the pod from an earlier life of the scheduler: do not write it again.
  if (message == s.info->unschedulable_message) return;
  actions_->ReportFailure(*s.info, reason, message, /*repeat=*/false);
}

bool SchedulerCore::ChangeUnseen() {
  if (checked_epoch_ == change_epoch_) return false;
  for (const std::string& key : unschedulable_) {
    if (pods_.at(key).tried_epoch < change_epoch_) return true;
  }
  checked_epoch_ = change_epoch_;  // every waiting pod was tried after the latest change
  return false;
}

void SchedulerCore::MarkUnschedulable(const std::string& key, PodState& s,
                                      const std::string& reason) {
  s.stage = Stage::kUnschedulable;
  s.tried_epoch = change_epoch_;
  unschedulable_.insert(key);
  if (metrics_ != nullptr) metrics_->failed_unschedulable++;
  Report(s, "Unschedulable", reason);
}

void SchedulerCore::StartBind(const std::string& key, PodState& s,
                              const core::Placement& placement) {
  s.held = HeldFromPlacement(placement);
  s.accounted = true;
  s.stage = Stage::kBinding;
  ++s.attempt;
  if (metrics_ != nullptr) metrics_->binding_in_flight++;
  records::Assignment record = s.held->gpus;
  record.node = s.held->node;
  actions_->Bind(*s.info, s.held->node, records::AssignmentToJson(record), s.attempt);
  (void)key;
}

namespace {

constexpr size_t kMaxAllowedSets = 4096;

}  // namespace

std::shared_ptr<const SchedulerCore::AllowedSet> SchedulerCore::Allowed(const PodInfo& pod) {
  const bool gpus = pod.request.gpu.kind != core::GpuAsk::Kind::kNone;
  const bool blocked = gpus && !gpu_blocked_.empty();
  if (!pod.constraints.selects() && tainted_nodes_ == 0 && !blocked) return nullptr;
  auto key = std::make_pair(pod.constraints, blocked);
  if (auto it = allowed_sets_.find(key); it != allowed_sets_.end()) return it->second;
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
  if (allowed_sets_.size() >= kMaxAllowedSets) allowed_sets_.clear();
  auto set = std::make_shared<const AllowedSet>(AllowedSet{core::NodeSet(std::move(allows)), none});
  allowed_sets_.emplace(key, set);
  return set;
}

void SchedulerCore::PlaceOne(const std::string& key, PodState& s) {
  std::shared_ptr<const AllowedSet> allowed = Allowed(*s.info);
  if (allowed && allowed->nodes.size() == 0) {
    MarkUnschedulable(key, s, allowed->none);
    return;
  }
  core::PlacementResult r = engine_->Place(s.info->request, core::Mode::kCommit, nullptr,
                                           allowed ? &allowed->nodes : nullptr);
  if (r.placed()) {
    StartBind(key, s, r.placement);
    return;
  }
  MarkUnschedulable(key, s, r.reason);
}

int SchedulerCore::TryGang(const std::string& gang_key) {
  auto git = gangs_.find(gang_key);
  if (git == gangs_.end()) return 0;
  Gang& g = git->second;
  std::vector<std::string> pending;
  int placed = 0;
  std::vector<std::string> wrong_size;
  for (const std::string& m : g.members) {
    PodState& ms = pods_.at(m);
    if (ms.info->request.gang->size != g.size) {
      wrong_size.push_back(m);
      continue;
    }
    switch (ms.stage) {
      case Stage::kQueued:
      case Stage::kUnschedulable:
      case Stage::kGangWaiting:
        pending.push_back(m);
        break;
      case Stage::kBinding:
      case Stage::kBindConflict:
      case Stage::kBound:
        ++placed;
        break;
      default:
        break;
    }
  }
  for (const std::string& m : wrong_size) {
    PodState& ms = pods_.at(m);
    Dequeue(m, ms);
    LeaveGang(m, ms);
    ms.stage = Stage::kBadInput;
    if (metrics_ != nullptr) metrics_->failed_invalid_pod++;
    Report(ms, "Unschedulable",
           StrCat("invalid pod: metadata.annotations[", records::kGangSizeAnnotation,
                  "]: ", ms.info->request.gang->size, " differs from ", g.size,
                  ", the size other members of gang ", gang_key, " give"));
  }
  if (gangs_.find(gang_key) == gangs_.end() || pending.empty()) return 0;
  for (const std::string& m : pending) {
    Dequeue(m, pods_.at(m));
  }
  const int need = g.size - placed;
  if (static_cast<int>(pending.size()) < need) {
    for (const std::string& m : pending) pods_.at(m).stage = Stage::kGangWaiting;
    spdlog::debug("gang {}: {} of {} members present", gang_key, pending.size() + placed, g.size);
    return 0;
  }
  // Oldest first; members beyond the gang's size wait (and are reported as such).
  std::sort(pending.begin(), pending.end(), [&](const std::string& a, const std::string& b) {
    const PodInfo& pa = *pods_.at(a).info;
    const PodInfo& pb = *pods_.at(b).info;
    return std::tie(pa.created, pa.name) < std::tie(pb.created, pb.name);
  });
  std::vector<std::string> extra(pending.begin() + std::max(need, 0), pending.end());
  pending.resize(std::max(need, 0));
  for (const std::string& m : extra) {
    PodState& ms = pods_.at(m);
    ms.stage = Stage::kGangWaiting;
    Report(ms, "Unschedulable", StrCat("gang ", gang_key, " already has its ", g.size, " members"));
  }
  if (pending.empty()) return 0;
  std::vector<core::PodRequest> requests;
  for (const std::string& m : pending) {
    core::PodRequest r = pods_.at(m).info->request;
    r.gang->size = static_cast<int32_t>(pending.size());  // the members not yet placed
    requests.push_back(std::move(r));
  }
  // Every member's node restrictions at once: the nodes all of them may use.
  std::vector<std::shared_ptr<const AllowedSet>> sets;
  std::string none;
  for (const std::string& m : pending) {
    std::shared_ptr<const AllowedSet> a = Allowed(*pods_.at(m).info);
    if (!a || std::find(sets.begin(), sets.end(), a) != sets.end()) continue;  // members share sets
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
    for (const std::string& m : pending) {
      MarkUnschedulable(m, pods_.at(m), StrCat("gang ", gang_key, ": ", none));
    }
    return static_cast<int>(pending.size());
  }
  std::vector<core::PlacementResult> results =
      engine_->PlaceGang(requests, core::Mode::kCommit, restricted ? &allowed : nullptr);
  if (!results.empty() && results[0].placed()) {
    spdlog::info("gang {}: placed {} members", gang_key, pending.size());
    for (size_t i = 0; i < pending.size(); ++i) {
      StartBind(pending[i], pods_.at(pending[i]), results[i].placement);
    }
  } else {
    std::string reason = results.empty() ? "no members" : results[0].reason;
    for (const std::string& m : pending) MarkUnschedulable(m, pods_.at(m), reason);
  }
  g.waiting_reported = false;
  return static_cast<int>(pending.size());
}

void SchedulerCore::FlushRetries(std::chrono::steady_clock::time_point now) {
  // Timed retries: failed binds after their backoff; 409s the watch never explained.
  for (auto it = delayed_.begin(); it != delayed_.end();) {
    PodState& s = pods_.at(*it);
    if (s.retry_at > now) {
      ++it;
      continue;
    }
    std::string key = *it;
    it = delayed_.erase(it);
    if (s.stage == Stage::kBindConflict) {
      spdlog::warn("pod {}: bind conflict unexplained after {} ms; trying again", key,
                   options_.bind_conflict_timeout.count());
      Release(s);
    }
    if (s.stage == Stage::kBackoff || s.stage == Stage::kBindConflict) Enqueue(key, s);
  }
  const bool due = now - last_flush_ >= options_.retry_period;
  const bool requested = now - last_flush_ >= options_.retry_min_interval && ChangeUnseen();
  if (!due && !requested) return;
  last_flush_ = now;
  checked_epoch_ = change_epoch_;
  for (const std::string& key : unschedulable_) {
    PodState& s = pods_.at(key);
    s.stage = Stage::kQueued;
    queue_.Push(key, s.info->priority, s.info->queue);
  }
  unschedulable_.clear();
  if (due) {
    // Gangs still short of members after a whole period: say so once.
    for (auto& [gk, g] : gangs_) {
      if (g.waiting_reported) continue;
      int present = 0;
      std::vector<std::string> waiting;
      for (const std::string& m : g.members) {
        const PodState& ms = pods_.at(m);
        if (ms.stage != Stage::kIgnored && ms.stage != Stage::kBadInput) ++present;
        if (ms.stage == Stage::kGangWaiting) waiting.push_back(m);
      }
      if (waiting.empty() || present >= g.size) continue;
      g.waiting_reported = true;
      for (const std::string& m : waiting) {
        Report(pods_.at(m), "Unschedulable",
               StrCat("gang ", gk, ": ", present, " of its ", g.size,
                      " members exist; waiting for the rest"));
      }
    }
  }
}

int SchedulerCore::ScheduleSome() {
  if (!synced()) return 0;
  if (cluster_dirty_) Rebuild();
  FlushRetries(clock_());
  int tried = 0;
  while (tried < options_.max_pods_per_cycle) {
    std::optional<std::string> key = queue_.Pop();
    if (!key) break;
    auto it = pods_.find(*key);
    if (it == pods_.end() || it->second.stage != Stage::kQueued) continue;
    PodState& s = it->second;
    if (s.info->request.gang) {
      tried += std::max(1, TryGang(s.gang));
    } else {
      PlaceOne(*key, s);
      ++tried;
    }
  }
  return tried;
}

std::optional<std::chrono::steady_clock::time_point> SchedulerCore::NextWakeup() const {
  std::optional<std::chrono::steady_clock::time_point> next;
  auto consider = [&](std::chrono::steady_clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (const std::string& key : delayed_) consider(pods_.at(key).retry_at);
  if (!unschedulable_.empty() || !gangs_.empty()) consider(last_flush_ + options_.retry_period);
  if (checked_epoch_ != change_epoch_ && !unschedulable_.empty()) {
    consider(last_flush_ + options_.retry_min_interval);
  }
  return next;
}

void SchedulerCore::PublishMetrics() {
  if (metrics_ == nullptr) return;
  int64_t gang_waiting = 0;
  for (const auto& [key, s] : pods_) {
    if (s.stage == Stage::kGangWaiting) ++gang_waiting;
  }
  metrics_->pending_active = static_cast<int64_t>(queue_.size());
  metrics_->pending_unschedulable = static_cast<int64_t>(unschedulable_.size());
  metrics_->pending_gang_waiting = gang_waiting;
  std::vector<NodeGauges> nodes;
  if (cluster_dirty_) Rebuild();
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

std::optional<Stage> SchedulerCore::StageOf(const std::string& key) const {
  auto it = pods_.find(key);
  if (it == pods_.end()) return std::nullopt;
  return it->second.stage;
}

std::optional<records::Assignment> SchedulerCore::HeldFor(const std::string& key) const {
  auto it = pods_.find(key);
  if (it == pods_.end() || !it->second.held || !it->second.accounted) return std::nullopt;
  records::Assignment a = it->second.held->gpus;
  a.node = it->second.held->node;
  return a;
}

}  // namespace tessera::k8s
