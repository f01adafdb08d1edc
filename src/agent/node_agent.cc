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

FaultResponderOptions WithNode(FaultResponderOptions options, const std::string& node) {
  options.node_name = node;
  return options;
}

}  // namespace

NodeAgent::NodeAgent(GpuDiscovery& discovery, k8s::ApiClient& client, NodeAgentOptions options)
    : discovery_(discovery),
      client_(client),
      options_(std::move(options)),
      publisher_(client, options_.node_name),
      tracker_(options_.health),
      responder_(client, WithNode(options_.faults, options_.node_name)) {}

bool NodeAgent::LogChanges(const std::vector<HealthChange>& changes) {
  for (const HealthChange& c : changes) {
    switch (c.kind) {
      case HealthChange::Kind::kOutOfService:
        spdlog::warn("GPU {} ({}) failed: {}; no new pods go to it", c.gpu, c.uuid, c.reason);
        break;
      case HealthChange::Kind::kDraining:
        spdlog::warn("GPU {} ({}) takes no new pods: {}", c.gpu, c.uuid, c.reason);
        break;
      case HealthChange::Kind::kBackInService:
      case HealthChange::Kind::kLinkUp:
        spdlog::info("{}", c.reason);
        break;
      case HealthChange::Kind::kLinkDown:
        spdlog::warn("{}", c.reason);
        break;
    }
  }
  return !changes.empty();
}

absl::Status NodeAgent::Run(const std::atomic<bool>& stop) {
  absl::StatusOr<NodeGpus> first = discovery_.Discover();
  ++discoveries_;
  if (!first.ok()) return first.status();
  tracker_.Observe(*first, Clock::now());
  std::vector<HealthChange> pending = tracker_.TakeChanges();  // told once published
  (void)LogChanges(pending);
  auto published = std::make_shared<const NodeGpus>(tracker_.Published());
  if (options_.on_gpus) options_.on_gpus(published);
  auto advertise = [&](const NodeGpus& gpus) {
    NodeAdvertisement ad = AdvertisementFor(gpus);
    if (!options_.extended_resources) ad.resources.clear();
    return ad;
  };
  NodeAdvertisement ad = advertise(*published);
  spdlog::info("{}: {} GPU(s) ({}), driver {}", discovery_.Describe(), published->gpus.size(),
               ad.labels[std::string(records::kGpuModelLabel)],
               published->driver_version.empty() ? "?" : published->driver_version);
  if (!published->fabric_note.empty()) spdlog::warn("{}", published->fabric_note);

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
      } else {
        const std::string error(outcome.status().message());
        if (error != last_error)
          spdlog::error("publishing to node {}: {}", options_.node_name, error);
        last_error = error;
        dirty = true;
        next_retry = Clock::now() + options_.retry_interval;
      }
    }
    // The faults act once the inventory that says so is on the Node.
    if (!dirty) {
      responder_.Step(tracker_, pending, Clock::now());
      pending.clear();
    }

    const auto now = Clock::now();
    const auto until = std::min(next_rediscover, tracker_.NextRelease());
    const auto wait = std::clamp<Clock::duration>(until - now, Clock::duration::zero(),
                                                  std::chrono::milliseconds(500));
    absl::StatusOr<WaitResult> waited =
        discovery_.Wait(std::chrono::duration_cast<std::chrono::milliseconds>(wait));
    bool rediscover = Clock::now() >= next_rediscover;
    std::vector<HealthEvent> application;
    if (waited.ok()) {
      for (const std::string& w : waited->warnings) spdlog::warn("{}", w);
      for (const HealthEvent& e : waited->events) {
        spdlog::log(e.critical() ? spdlog::level::warn : spdlog::level::info,
                    "GPU {} ({}){}: {} ({}, NVIDIA's catalogue: {})", e.gpu_index, e.uuid,
                    e.mig.empty() ? "" : StrCat(" MIG ", e.mig), e.text,
                    FaultCauseName(e.klass.cause), e.klass.action);
        tracker_.OnXid(e, Clock::now());
        if (e.klass.effect == FaultEffect::kPodEvent) application.push_back(e);
      }
      rediscover = rediscover || waited->changed;
    } else {
      spdlog::warn("watching GPU events: {}", waited.status().message());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    bool observed = false;
    if (rediscover) {
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
      } else {
        if (!last_discovery_error.empty()) {
          spdlog::info("{}: readable again", discovery_.Describe());
          last_discovery_error.clear();
        }
        tracker_.Observe(*again, Clock::now());
        observed = true;
      }
    }
    tracker_.Tick(Clock::now());
    std::vector<HealthChange> changes = tracker_.TakeChanges();
    const bool health_changed = LogChanges(changes);
    pending.insert(pending.end(), changes.begin(), changes.end());
    if (observed || health_changed || !application.empty()) {
      published = std::make_shared<const NodeGpus>(tracker_.Published());
    }
    for (const HealthEvent& e : application) responder_.OnApplicationXid(e, *published);
    if (!observed && !health_changed) continue;
    if (options_.on_gpus) options_.on_gpus(published);
    NodeAdvertisement next = advertise(*published);
    if (next.inventory == ad.inventory && next.labels == ad.labels &&
        next.resources == ad.resources) {
      continue;
    }
    ad = std::move(next);
    dirty = true;
    next_retry = Clock::now();
  }
  informer.Stop();
  return absl::OkStatus();
}

}  // namespace tessera::agent
