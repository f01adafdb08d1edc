#include "agent/node_agent.h"

#include <algorithm>
#include <thread>

#include "common/strings.h"
#include "k8s/client/events.h"
#include "k8s/client/informer.h"
#include "records/assignment.h"
#include "records/node_names.h"
#include "spdlog/spdlog.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

}  // namespace

NodeAgent::NodeAgent(GpuDiscovery& discovery, k8s::ApiClient& client, NodeAgentOptions options)
    : discovery_(discovery),
      client_(client),
      options_(std::move(options)),
      publisher_(client, options_.node_name) {}

absl::Status NodeAgent::Run(const std::atomic<bool>& stop) {
  absl::StatusOr<NodeGpus> first = discovery_.Discover();
  ++discoveries_;
  if (!first.ok()) return first.status();
  NodeGpus gpus = std::move(*first);
  if (options_.on_gpus) options_.on_gpus(std::make_shared<const NodeGpus>(gpus));
  NodeAdvertisement ad = AdvertisementFor(gpus);
  if (!options_.extended_resources) ad.resources.clear();
  spdlog::info("{}: {} GPU(s) ({}), driver {}", discovery_.Describe(), gpus.gpus.size(),
               ad.labels[std::string(records::kGpuModelLabel)],
               gpus.driver_version.empty() ? "?" : gpus.driver_version);
  if (!gpus.fabric_note.empty()) spdlog::warn("{}", gpus.fabric_note);

  // Watch this one Node: anything that changes it may need a reconcile.
  std::atomic<bool> node_changed{true};
  k8s::ListWatchOptions watch;
  watch.resource = "nodes";
  watch.path = "/api/v1/nodes";
  watch.field_selector = StrCat("metadata.name=", options_.node_name);
  k8s::Informer<json> informer(
      client_, watch, [](const json& j) { return std::make_shared<const json>(j); },
      [&node_changed](k8s::Informer<json>::Event&&) { node_changed.store(true); });
  informer.Start();

  bool dirty = true;  // the advertisement changed since the last successful reconcile
  Clock::time_point next_rediscover = Clock::now() + options_.rediscover_interval;
  Clock::time_point next_retry = Clock::now();
  std::string last_error;            // of publishing, logged once until it changes
  std::string last_discovery_error;  // likewise
  std::vector<int> newly_bad;        // GPUs whose pods are told once the inventory says so
  while (!stop.load()) {
    const bool changed_node = node_changed.exchange(false);
    if ((dirty || changed_node) && Clock::now() >= next_retry) {
      std::shared_ptr<const json> cached = informer.Get(options_.node_name);
      absl::StatusOr<json> node = cached ? absl::StatusOr<json>(*cached) : publisher_.GetNode();
      absl::StatusOr<PublishOutcome> outcome = node.ok()
                                                   ? publisher_.Reconcile(*node, ad)
                                                   : absl::StatusOr<PublishOutcome>(node.status());
      ++reconciles_;
      if (outcome.ok()) {
        patch_requests_ += outcome->requests;
        for (const std::string& c : outcome->changes) {
          spdlog::info("node {}: {}", options_.node_name, c);
        }
        dirty = false;
        last_error.clear();
        if (!newly_bad.empty()) {
          TellPodsOnUnhealthyGpus(gpus, newly_bad);
          newly_bad.clear();
        }
      } else {
        const std::string error(outcome.status().message());
        if (error != last_error)
          spdlog::error("publishing to node {}: {}", options_.node_name, error);
        last_error = error;
        dirty = true;
        next_retry = Clock::now() + options_.retry_interval;
      }
    }

    const auto now = Clock::now();
    const auto wait = std::clamp<Clock::duration>(next_rediscover - now, Clock::duration::zero(),
                                                  std::chrono::milliseconds(500));
    absl::StatusOr<WaitResult> waited =
        discovery_.Wait(std::chrono::duration_cast<std::chrono::milliseconds>(wait));
    bool rediscover = Clock::now() >= next_rediscover;
    if (waited.ok()) {
      for (const HealthEvent& e : waited->events) {
        if (e.critical) {
          spdlog::warn("GPU {} ({}): {}", e.gpu_index, e.uuid, e.text);
        } else {
          spdlog::info("GPU {} ({}): {} (an application error; the GPU stays in use)", e.gpu_index,
                       e.uuid, e.text);
        }
      }
      rediscover = rediscover || waited->changed;
    } else {
      spdlog::warn("watching GPU events: {}", waited.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (!rediscover) continue;
    next_rediscover = Clock::now() + options_.rediscover_interval;
    absl::StatusOr<NodeGpus> again = discovery_.Discover();
    ++discoveries_;
    if (!again.ok()) {
      const std::string error(again.status().message());
      if (error != last_discovery_error) {
        spdlog::error("rediscovering the GPUs ({}): {}; keeping the last inventory",
                      discovery_.Describe(), error);
      }
      last_discovery_error = error;
      continue;
    }
    if (!last_discovery_error.empty()) {
      spdlog::info("{}: readable again", discovery_.Describe());
      last_discovery_error.clear();
    }
    if (options_.on_gpus) options_.on_gpus(std::make_shared<const NodeGpus>(*again));
    NodeAdvertisement next = AdvertisementFor(*again);
    if (!options_.extended_resources) next.resources.clear();
    if (next.inventory == ad.inventory && next.labels == ad.labels &&
        next.resources == ad.resources) {
      continue;
    }
    for (const DiscoveredGpu& g : again->gpus) {
      bool was_healthy = true;
      for (const DiscoveredGpu& old : gpus.gpus) {
        if (old.spec.uuid == g.spec.uuid) was_healthy = old.health.healthy;
      }
      if (was_healthy && !g.health.healthy) {
        spdlog::warn("GPU {} ({}) is unhealthy: {}; no new pods go to it", g.spec.index,
                     g.spec.uuid, g.health.reason);
        newly_bad.push_back(g.spec.index);
      } else if (!was_healthy && g.health.healthy) {
        spdlog::info("GPU {} ({}) is healthy again", g.spec.index, g.spec.uuid);
      }
    }
    gpus = std::move(*again);
    ad = std::move(next);
    dirty = true;
    next_retry = Clock::now();
  }
  informer.Stop();
  return absl::OkStatus();
}

void NodeAgent::TellPodsOnUnhealthyGpus(const NodeGpus& gpus, const std::vector<int>& newly_bad) {
  absl::StatusOr<json> pods =
      client_.Get(StrCat("/api/v1/pods?fieldSelector=",
                         k8s::QueryEscape(StrCat("spec.nodeName=", options_.node_name))));
  if (!pods.ok()) {
    spdlog::error("listing the pods on node {} to tell them about unhealthy GPUs: {}",
                  options_.node_name, pods.status().message());
    return;
  }
  for (const json& pod : pods->value("items", json::array())) {
    const json& meta = pod.value("metadata", json::object());
    const json annotations = meta.value("annotations", json::object());
    auto it = annotations.find(records::kAssignmentAnnotation);
    if (it == annotations.end() || !it->is_string()) continue;
    absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(it->get<std::string>());
    if (!a.ok()) continue;  // the scheduler reports bad records; nothing to add here
    for (int index : newly_bad) {
      const DiscoveredGpu& g = gpus.gpus[index];
      const bool holds =
          std::any_of(a->gpus.begin(), a->gpus.end(), [&](const records::AssignedGpu& ag) {
            return ag.uuid.empty() ? ag.grant.gpu == index : ag.uuid == g.spec.uuid;
          });
      if (!holds) continue;
      const std::string ns = meta.value("namespace", "");
      const std::string name = meta.value("name", "");
      const std::string message = StrCat("GPU ", index, " (", g.spec.uuid, ") on node ",
                                         options_.node_name, " is unhealthy: ", g.health.reason);
      const absl::Status posted =
          k8s::PostEvent(client_,
                         {.object = k8s::PodRef(ns, name, meta.value("uid", "")),
                          .reason = "GPUUnhealthy",
                          .message = message},
                         {"tessera-agent", options_.node_name, options_.node_name});
      if (posted.ok()) {
        ++pod_events_;
        spdlog::info("pod {}/{}: {}", ns, name, message);
      } else {
        spdlog::error("{}", posted.message());
      }
    }
  }
}

}  // namespace tessera::agent
