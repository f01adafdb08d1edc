#include "agent/agent.h"

#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "agent/dra/cdi.h"
#include "agent/dra/names.h"
#include "agent/dra/plugin_server.h"
#include "agent/metrics/agent_metrics.h"
#include "agent/nri/delivery.h"
#include "agent/pods/idle_reclaim.h"
#include "agent/procs/gpu_processes.h"
#include "agent/uninstall.h"
#include "common/strings.h"
#include "k8s/client/events.h"
#include "k8s/eviction/evictor.h"
#include "records/dra_names.h"
#include "spdlog/spdlog.h"

namespace tessera::agent {
namespace {

// The pods of the node's GPUs as the pod manager serves them (the shim's ledger counts their
// processes), for the fault responder.
std::vector<GpuPod> ClassicPods(const PodManager& pods) {
  std::vector<GpuPod> out;
  for (const GpuUse& u : pods.Use()) {
    for (const GpuUse::Pod& p : u.pods) {
      const bool ledger = p.sharing == Sharing::kShim;
      out.push_back(
          {p.ns, p.name, p.uid, u.uuid, p.mig, ledger ? static_cast<int64_t>(p.processes) : -1});
    }
  }
  return out;
}

// The pods of the prepared DRA claims, for the fault responder.
std::vector<GpuPod> DraPods(dra::DraAgent& dra) {
  std::vector<GpuPod> out;
  for (const dra::PreparedClaim& c : dra.driver().Prepared()) {
    for (const dra::PreparedDevice& d : c.devices) {
      const std::string instance = d.mig ? StrCat(d.mig_profile, "@", d.mig_start) : std::string();
      for (const dra::ClaimConsumer& pod : c.pods) {
        out.push_back({c.ns, pod.name, pod.uid, d.gpu_uuid, instance, -1});
      }
    }
  }
  return out;
}

}  // namespace

Agent::Agent(AgentOptions options, GpuDiscovery& discovery, k8s::ApiClient& client)
    : options_(std::move(options)), discovery_(discovery), client_(client) {}

absl::StatusOr<DriverLibraries> Agent::PrepareDriver() {
  std::vector<std::string> notes;
  absl::StatusOr<DriverLibraries> driver = PrepareDriverLibraries(options_.driver, &notes);
  if (!driver.ok()) return driver;
  for (const std::string& note : notes) spdlog::warn("{}", note);
  spdlog::info("driver libraries: {} {}; CUDA shim: {}",
               driver->cuda.host_path.empty() ? "-" : driver->cuda.host_path,
               driver->nvml.host_path.empty() ? "-" : driver->nvml.host_path,
               driver->shim_cuda.empty() ? "-" : options_.driver.install_dir);
  return driver;
}

// NVML's per-process view (host PIDs): the compute controller's measurements and the memory
// backstop. With a GPU description file too, when the library loads (the fake NVML of a test
// node).
std::unique_ptr<NvmlProcessSampler> Agent::LoadSampler() {
  absl::StatusOr<std::unique_ptr<NvmlProcessSampler>> loaded =
      NvmlProcessSampler::Load(options_.nvml_library);
  if (loaded.ok()) return std::move(*loaded);
  spdlog::warn(
      "no per-process GPU view: compute shares run without measurement (the shims' windows "
      "stay at the caps) and there is no memory backstop: {}",
      loaded.status().message());
  return nullptr;
}

k8s::EvictionResult Agent::Evict(const PodRef& pod, std::string_view what) {
  const k8s::EvictionTarget target{pod.ns, pod.name, pod.uid, std::nullopt};
  const k8s::HttpRequest request = k8s::ApiEvictor::EvictionRequest(target);
  k8s::EvictionResult r = k8s::ApiEvictor::Classify(request, client_.Call(request));
  spdlog::warn("{}: {}{}", what, k8s::EvictionOutcomeName(r.outcome),
               r.message.empty() ? "" : StrCat(" (", r.message, ")"));
  return r;
}

std::pair<std::string, std::string> Agent::ReclaimIdle(const PodNotice& n) {
  const int32_t below = *options_.idle_reclaim_below_priority;
  // One pod by name: a list (the agent's role lists pods; it has no get).
  absl::StatusOr<nlohmann::json> list = client_.Get(
      StrCat("/api/v1/namespaces/", n.pod.ns,
             "/pods?fieldSelector=", k8s::QueryEscape(StrCat("metadata.name=", n.pod.name))));
  if (!list.ok()) {
    spdlog::warn("idle reclaim: pod {} cannot be read: {}", n.pod.Name(), list.status().message());
    return {n.reason, StrCat(" Idle reclaim: the pod could not be read (", list.status().message(),
                             "); tried again when it is found idle again.")};
  }
  const nlohmann::json items = list->value("items", nlohmann::json::array());
  const IdleReclaimDecision d =
      DecideIdleReclaim(items.empty() ? nlohmann::json() : items.front(), n.pod.uid, below);
  if (!d.evict) {
    spdlog::info("idle reclaim: pod {} stays: {}", n.pod.Name(), d.why);
    return {n.reason, StrCat(" Idle reclaim: not evicted: ", d.why, ".")};
  }
  const k8s::EvictionResult r =
      Evict(n.pod, StrCat("idle reclaim: evicting pod ", n.pod.Name(), " (", d.why, ")"));
  switch (r.outcome) {
    case k8s::EvictionOutcome::kEvicted:
      ++idle_reclaims_;
      return {"GPUIdleEvicted",
              StrCat(" Idle reclaim: the node agent evicts the pod (", d.why, ").")};
    case k8s::EvictionOutcome::kBudget:
      return {n.reason, StrCat(" Idle reclaim: its PodDisruptionBudget allows no eviction now (",
                               r.message, "); tried again when it is found idle again.")};
    case k8s::EvictionOutcome::kGone:
      return {n.reason, " Idle reclaim: the pod is gone."};
    case k8s::EvictionOutcome::kFailed:
      break;
  }
  return {n.reason, StrCat(" Idle reclaim: the eviction failed (", r.message,
                           "); tried again when it is found idle again.")};
}

void Agent::Notify(const std::vector<PodNotice>& notices) {
  const std::string& node = options_.node.node_name;
  for (const PodNotice& n : notices) {
    std::string reason = n.reason;
    std::string message = n.message;
    if (n.reclaim_idle && options_.idle_reclaim_below_priority) {
      auto [r, more] = ReclaimIdle(n);
      reason = std::move(r);
      message += more;
    }
    if (n.evict) (void)Evict(n.pod, StrCat("evicting pod ", n.pod.Name()));
    const absl::Status posted =
        k8s::PostEvent(client_,
                       {.object = k8s::PodRef(n.pod.ns, n.pod.name, n.pod.uid),
                        .reason = reason,
                        .message = message},
                       {"tessera-agent", node, node});
    if (!posted.ok()) spdlog::error("{}", posted.message());
  }
}

AgentExit Agent::Run() {
  // The driver's libraries and the CUDA shim, as the containers get them.
  absl::StatusOr<DriverLibraries> driver = PrepareDriver();
  if (!driver.ok()) return {driver.status()};

  // The pods this node serves: their files, shim segments, MPS daemons and MIG plans.
  NodeAgentOptions node_options = options_.node;
  PodManagerOptions pod_options = options_.pods;
  pod_options.node_name = node_options.node_name;
  pod_options.edits.driver = *driver;
  pod_options.notify = [this](std::vector<PodNotice> notices) { Notify(notices); };
  pod_options.idle_reclaim = options_.idle_reclaim_below_priority.has_value();
  MigReconfigurer* mig = discovery_.mig();
  std::unique_ptr<NvmlProcessSampler> sampler = LoadSampler();
  PodManager pods(pod_options, mig, sampler.get());
  node_options.on_gpus = [&pods](std::shared_ptr<const NodeGpus> gpus) {
    pods.SetGpus(std::move(gpus));
  };
  // The node's own record of the pods on its GPUs, for GPU faults: the pod manager's grants with
  // the shim's ledger (and, in DRA mode, the prepared claims' pods).
  std::unique_ptr<dra::DraAgent> dra;
  node_options.faults.local_pods = [&pods, &dra] {
    std::vector<GpuPod> out = ClassicPods(pods);
    if (dra) {
      for (GpuPod& p : DraPods(*dra)) out.push_back(std::move(p));
    }
    return out;
  };
  std::thread maintenance([this, &pods] { pods.RunMaintenance(stop_); });

  // Delivery into containers: the NRI plugin, on its own thread.
  Delivery delivery(DeliveryOptions{}, pods);

  // /metrics: the pods on each GPU and what they were granted.
  MetricsServer metrics;
  if (options_.metrics_port >= 0) {
    absl::Status listening = metrics.Start(
        options_.metrics_address, options_.metrics_port, [this, &pods, &delivery, &node_options] {
          return MetricsText({pods.Use(),
                              {node_options.node_name, delivery.delivered(), delivery.refused(),
                               pods.reaped_slots(), pods.backstop_over(), pods.backstop_actions(),
                               idle_reclaims_.load(), pods.sees_host_pids()},
                              options_.build,
                              &client_.transport()->requests()});
        });
    if (!listening.ok()) {
      stop_.store(true);
      maintenance.join();
      return {listening};
    }
    spdlog::info("serving /metrics on http://{}:{}", options_.metrics_address, metrics.port());
  }
  nri::NriPlugin plugin(options_.nri_plugin, delivery);
  std::thread nri_thread;
  if (options_.nri) nri_thread = std::thread([this, &plugin] { plugin.Run(stop_); });

  // DRA mode: the driver gpu.tessera.dev (ResourceSlices, the kubelet plugin), on its own thread.
  std::thread dra_thread;
  absl::Status dra_status;
  if (options_.dra) {
    dra::DraAgentOptions dra_options = *options_.dra;
    dra_options.node_name = node_options.node_name;
    dra_options.mig = mig;
    // Claims' containers get what classic pods get (edits/container_edits.h), from the same
    // node facts: device nodes, the driver's libraries and the shim as the agent found them.
    dra_options.edits = pod_options.edits;
    dra = std::make_unique<dra::DraAgent>(client_, dra_options);
    node_options.extended_resources = false;
    node_options.on_gpus = [&pods, &dra](std::shared_ptr<const NodeGpus> gpus) {
      pods.SetGpus(gpus);
      dra->OnGpus(std::move(gpus));
    };
    dra_thread = std::thread([this, &dra, &dra_status] {
      dra_status = dra->Run(stop_);
      if (!dra_status.ok()) stop_.store(true);
    });
  }
  NodeAgent node_agent(discovery_, client_, node_options);
  absl::Status status = node_agent.Run(stop_);
  stop_.store(true);
  if (nri_thread.joinable()) nri_thread.join();
  if (dra_thread.joinable()) dra_thread.join();
  maintenance.join();
  if (!options_.cleanup_daemonset.empty()) CleanUpIfUninstalled();
  if (!status.ok()) return {status, /*from_discovery=*/true};
  return {dra_status};
}

// Stopping because the DaemonSet is going (uninstall.h), the agent removes what it made on this
// node and host; any other stop (an upgrade, a restart) keeps it all.
void Agent::CleanUpIfUninstalled() {
  const std::string& node = options_.node.node_name;
  const std::string daemonset = StrCat(options_.cleanup_namespace, "/", options_.cleanup_daemonset);
  absl::StatusOr<bool> leaving =
      DaemonSetLeaving(client_, options_.cleanup_namespace, options_.cleanup_daemonset);
  if (!leaving.ok()) {
    spdlog::warn(
        "cannot tell whether daemonset {} is being deleted ({}): keeping this node's state",
        daemonset, leaving.status().message());
    return;
  }
  if (!*leaving) return;
  spdlog::info("daemonset {} is being deleted: removing what the agent made on node {}", daemonset,
               node);
  std::vector<std::string> changes;
  if (absl::Status s = WithdrawNodeObject(client_, node, &changes); !s.ok()) {
    spdlog::warn("node {}: {}", node, s.message());
  }
  HostFootprint footprint;
  footprint.dirs = {options_.pods.pods_dir, options_.driver.install_dir, options_.pods.mps.root};
  if (options_.dra) {
    const dra::DraAgentOptions& d = *options_.dra;
    absl::StatusOr<int> slices =
        DeleteDriverSlices(client_, std::string(records::dra::kDriverName), node);
    if (!slices.ok())
      spdlog::warn("deleting this node's ResourceSlices: {}", slices.status().message());
    footprint.dirs.push_back(d.claims_dir);
    footprint.dirs.push_back(dra::DraSocketDir(d.kubelet_dir));
    footprint.files.push_back(dra::RegistrationSocketPath(d.kubelet_dir));
    footprint.cdi_dir = d.cdi_dir;
    footprint.cdi_prefix = dra::TransientSpecFilePrefix(dra::kCdiVendor, dra::kCdiClass);
  }
  std::vector<std::string> removed;
  if (absl::Status s = RemoveHostFootprint(footprint, &removed); !s.ok()) {
    spdlog::warn("removing the agent's host files: {}", s.message());
  }
  for (const std::string& c : changes) spdlog::info("removed: {}", c);
  for (const std::string& r : removed) spdlog::info("removed: {}", r);
}

}  // namespace tessera::agent
