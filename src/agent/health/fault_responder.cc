#include "agent/health/fault_responder.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "k8s/client/events.h"
#include "k8s/eviction/evictor.h"
#include "records/assignment.h"
#include "spdlog/spdlog.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

std::string GpuLabel(int32_t index, const std::string& uuid) {
  return StrCat("GPU ", index, " (", uuid, ")");
}

}  // namespace

std::string_view FaultPolicyName(FaultPolicy p) {
  switch (p) {
    case FaultPolicy::kEvict:
      return "evict";
    case FaultPolicy::kCordonGpu:
      return "cordon-gpu";
    case FaultPolicy::kNone:
      return "none";
  }
  return "?";
}

absl::StatusOr<FaultPolicy> ParseFaultPolicy(std::string_view text) {
  for (FaultPolicy p : {FaultPolicy::kEvict, FaultPolicy::kCordonGpu, FaultPolicy::kNone}) {
    if (text == FaultPolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(
      StrCat("\"", text, "\" is not a GPU fault policy (evict, cordon-gpu, none)"));
}

FaultResponder::FaultResponder(k8s::ApiClient& client, FaultResponderOptions options)
    : client_(client), options_(std::move(options)) {}

bool FaultResponder::Post(const std::string& ns, const std::string& name, const std::string& uid,
                          const std::string& reason, const std::string& message,
                          const std::string& type) {
  k8s::ObjectRef object = ns.empty() ? k8s::ObjectRef{.kind = "Node", .name = name, .uid = uid}
                                     : k8s::PodRef(ns, name, uid);
  const absl::Status posted = k8s::PostEvent(
      client_, {.object = object, .reason = reason, .message = message, .type = type},
      {"tessera-agent", options_.node_name, options_.node_name});
  if (!posted.ok()) {
    spdlog::error("{}", posted.message());
    return false;
  }
  ++events_posted_;
  return true;
}

void FaultResponder::OnApplicationXid(const HealthEvent& event, const NodeGpus& published) {
  std::vector<GpuPod> pods = options_.local_pods ? options_.local_pods() : std::vector<GpuPod>{};
  // The node's record may not know a pod yet (or the agent restarted): the API server's list too.
  if (absl::StatusOr<std::vector<NodePod>> listed = ListPods(published); listed.ok()) {
    for (const NodePod& p : *listed) {
      for (const std::string& gpu : p.gpus) pods.push_back({p.ns, p.name, p.uid, gpu, "", -1});
    }
  }
  const Culprits culprits = AttributeXid(event, pods);
  const std::string where = StrCat(GpuLabel(event.gpu_index, event.uuid),
                                   event.mig.empty() ? "" : StrCat(" MIG instance ", event.mig),
                                   " on node ", options_.node_name);
  if (culprits.pods.empty()) {
    spdlog::info("{} on {}: an application error, no pod holds the GPU; the GPU stays in service",
                 event.text, where);
    return;
  }
  std::vector<std::string> names;
  for (const GpuPod& p : culprits.pods) names.push_back(StrCat(p.ns, "/", p.name));
  for (const GpuPod& p : culprits.pods) {
    const std::string message =
        culprits.certain
            ? StrCat(
                  event.text, " on ", where,
                  ": a fault of this pod's own GPU work (NVIDIA's catalogue: ", event.klass.action,
                  "); its CUDA context is lost, the GPU stays in service for others")
            : StrCat(event.text, " on ", where, ", which ", culprits.pods.size(), " pods use (",
                     StrJoin(names, ", "),
                     "): one of them caused it (NVIDIA's catalogue: ", event.klass.action,
                     "); the GPU stays in service");
    Post(p.ns, p.name, p.uid, "GPUApplicationError", message, "Warning");
  }
  spdlog::info("{} on {}: an application error of {}; the GPU stays in service", event.text, where,
               StrJoin(names, ", "));
}

void FaultResponder::NodeEvent(const HealthChange& c) {
  using K = HealthChange::Kind;
  std::string reason, message, type = "Warning";
  switch (c.kind) {
    case K::kOutOfService:
      reason = "GPUUnhealthy";
      message = StrCat(GpuLabel(c.gpu, c.uuid), " is unhealthy: ", c.reason,
                       "; no new pods go to it; its pods: fault policy ",
                       FaultPolicyName(options_.policy));
      break;
    case K::kDraining:
      reason = "GPUDraining";
      message = StrCat(GpuLabel(c.gpu, c.uuid), " takes no new pods: ", c.reason,
                       "; the running ones stay");
      break;
    case K::kBackInService:
      reason = "GPUHealthy";
      type = "Normal";
      message = c.reason;
      break;
    case K::kLinkDown:
      reason = "GPUNvLinkDown";
      message = StrCat(c.reason,
                       "; the published topology no longer has it; pods holding both "
                       "GPUs: fault policy ",
                       FaultPolicyName(options_.policy));
      break;
    case K::kLinkUp:
      reason = "GPUNvLinkUp";
      type = "Normal";
      message = c.reason;
      break;
  }
  (void)Post("", options_.node_name, options_.node_name, reason, message, type);
}

absl::StatusOr<std::vector<FaultResponder::NodePod>> FaultResponder::ListPods(
    const NodeGpus& published) {
  TESSERA_ASSIGN_OR_RETURN(
      json list,
      client_.Get(StrCat("/api/v1/pods?fieldSelector=",
                         k8s::QueryEscape(StrCat("spec.nodeName=", options_.node_name)))));
  std::vector<NodePod> out;
  for (const json& pod : list.value("items", json::array())) {
    const json& meta = pod.value("metadata", json::object());
    NodePod p;
    p.ns = meta.value("namespace", "");
    p.name = meta.value("name", "");
    p.uid = meta.value("uid", "");
    const std::string phase = pod.value("status", json::object()).value("phase", "");
    p.leaving = meta.contains("deletionTimestamp") || phase == "Succeeded" || phase == "Failed";
    const json annotations = meta.value("annotations", json::object());
    auto it = annotations.find(records::kAssignmentAnnotation);
    if (it != annotations.end() && it->is_string()) {
      absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(it->get<std::string>());
      if (a.ok() && a->node == options_.node_name) {
        for (const records::AssignedGpu& g : a->gpus) {
          if (!g.uuid.empty()) {
            p.gpus.insert(g.uuid);
          } else if (g.grant.gpu >= 0 && static_cast<size_t>(g.grant.gpu) < published.gpus.size()) {
            p.gpus.insert(published.gpus[g.grant.gpu].spec.uuid);
          }
        }
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

void FaultResponder::Step(const GpuHealthTracker& tracker, const std::vector<HealthChange>& changes,
                          Clock::time_point now) {
  using K = HealthChange::Kind;
  for (const HealthChange& c : changes) {
    NodeEvent(c);
    switch (c.kind) {
      case K::kOutOfService:
      case K::kDraining: {
        Episode e;
        e.effect = c.kind == K::kOutOfService ? FaultEffect::kFail : FaultEffect::kDrain;
        e.uuids = {c.uuid};
        e.reason = StrCat(
            GpuLabel(c.gpu, c.uuid), " on node ", options_.node_name,
            c.kind == K::kOutOfService ? " is unhealthy: " : " takes no new pods: ", c.reason);
        episodes_[StrCat("gpu/", c.uuid)] = std::move(e);
        break;
      }
      case K::kBackInService:
        episodes_.erase(StrCat("gpu/", c.uuid));
        break;
      case K::kLinkDown: {
        Episode e;
        e.effect = FaultEffect::kLinks;
        e.uuids = {c.uuid, c.peer_uuid};
        e.reason = StrCat(c.reason, " on node ", options_.node_name);
        episodes_[StrCat("link/", c.uuid, "/", c.peer_uuid)] = std::move(e);
        break;
      }
      case K::kLinkUp:
        episodes_.erase(StrCat("link/", c.uuid, "/", c.peer_uuid));
        break;
    }
  }
  if (episodes_.empty()) {
    evicted_at_.clear();
    return;
  }
  if (changes.empty() && now < next_scan_) return;
  next_scan_ = now + options_.retry_interval;
  absl::StatusOr<std::vector<NodePod>> pods = ListPods(tracker.Published());
  if (!pods.ok()) {
    spdlog::error("listing the pods on node {} to act on GPU faults: {}; trying again in {} ms",
                  options_.node_name, pods.status().message(), options_.retry_interval.count());
    return;
  }
  // The node's own record adds what the assignment does not say (DRA claims).
  if (options_.local_pods) {
    for (const GpuPod& g : options_.local_pods()) {
      for (NodePod& p : *pods) {
        if (p.uid == g.uid) p.gpus.insert(g.gpu_uuid);
      }
    }
  }
  for (auto& [key, episode] : episodes_) {
    for (const NodePod& pod : *pods) {
      if (pod.leaving) continue;
      const bool holds = std::all_of(episode.uuids.begin(), episode.uuids.end(),
                                     [&](const std::string& u) { return pod.gpus.contains(u); });
      if (holds) ActOn(episode, key, pod, now);
    }
  }
}

void FaultResponder::ActOn(Episode& episode, const std::string& key, const NodePod& pod,
                           Clock::time_point now) {
  const bool acts = episode.effect != FaultEffect::kDrain;
  if (!episode.told.contains(pod.uid)) {
    std::string reason, message;
    if (!acts) {
      reason = "GPUDraining";
      message = StrCat(episode.reason,
                       "; this pod keeps running; reset the GPU once its pods "
                       "are done");
    } else {
      reason = episode.effect == FaultEffect::kLinks ? "GPUNvLinkDown" : "GPUUnhealthy";
      std::string what;
      switch (options_.policy) {
        case FaultPolicy::kEvict:
          what =
              "the pod is evicted (its PodDisruptionBudget and grace period honoured) so that its "
              "controller can run it elsewhere";
          break;
        case FaultPolicy::kCordonGpu:
          what = "the pod keeps running (fault policy cordon-gpu); no new pods go to the GPU";
          break;
        case FaultPolicy::kNone:
          what = "the pod keeps running (fault policy none)";
          break;
      }
      message = StrCat(episode.reason,
                       episode.effect == FaultEffect::kLinks ? "; this pod holds both GPUs" : "",
                       "; ", what);
    }
    if (Post(pod.ns, pod.name, pod.uid, reason, message, "Warning")) {
      episode.told.insert(pod.uid);
      spdlog::warn("pod {}/{}: {}", pod.ns, pod.name, message);
    }
  }
  if (!acts || options_.policy != FaultPolicy::kEvict) return;
  auto last = evicted_at_.find(pod.uid);
  if (last != evicted_at_.end() && now - last->second < options_.retry_interval) return;
  evicted_at_[pod.uid] = now;
  const k8s::EvictionTarget target{pod.ns, pod.name, pod.uid, std::nullopt};
  const k8s::HttpRequest request = k8s::ApiEvictor::EvictionRequest(target);
  // One attempt: the API server answers a budget's refusal with 429 and Retry-After (10 s), which
  // ApiClient::Call would retry for ~40 s with the agent's loop blocked; this pod is tried again
  // after retry_interval instead.
  const k8s::EvictionResult result =
      k8s::ApiEvictor::Classify(request, client_.NewConnection()->Do(request));
  switch (result.outcome) {
    case k8s::EvictionOutcome::kEvicted:
      ++evictions_;
      spdlog::warn("pod {}/{}: evicted ({})", pod.ns, pod.name, key);
      break;
    case k8s::EvictionOutcome::kBudget:
      ++evictions_blocked_;
      if (episode.blocked.insert(pod.uid).second) {
        Post(pod.ns, pod.name, pod.uid, "GPUEvictionBlocked",
             StrCat(episode.reason, "; evicting this pod is refused by its PodDisruptionBudget (",
                    result.message, "); tried again every ", options_.retry_interval.count() / 1000,
                    " s"),
             "Warning");
      }
      break;
    case k8s::EvictionOutcome::kGone:
      break;
    case k8s::EvictionOutcome::kFailed:
      spdlog::error("evicting pod {}/{} from a failed GPU: {}", pod.ns, pod.name, result.message);
      break;
  }
}

}  // namespace tessera::agent
