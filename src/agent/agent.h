// The node agent's composition root: what `tessera agent` runs once its flags are read (the CLI,
// src/cli/agent.cc, only parses and checks them), as k8s::Scheduler is the scheduler's. It is the
// one place that sees every part of the agent (src/agent/README.md "Parts",
// cmake/layering.cmake) and wires them into one process:
//   - the driver's libraries and the CUDA shim as containers get them (pods/driver_files.h);
//   - NVML's per-process view (procs/gpu_processes.h), when the library loads;
//   - the pod manager (pods/pod_manager.h), with its maintenance thread (reaping, the compute
//     controller, the memory backstop), whose notices become Events and evictions;
//   - /metrics (metrics/agent_metrics.h);
//   - the NRI plugin (nri/plugin.h) on its own thread, unless delivery is off;
//   - in DRA mode, the DRA driver (dra/dra_agent.h) on its own thread;
//   - the publishing loop (node_agent.h) on the thread that calls Run();
// and, when it stops because its DaemonSet is being deleted, removes what it made on the node and
// the host (uninstall.h).
//
// Stopping: Stop() ends Run() (every thread sees one flag, which the Agent owns); so does the
// publishing loop's end or the DRA driver's failure, which stops the other threads. Run() returns
// only after every thread it started has been joined.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "agent/discovery/discovery.h"
#include "agent/dra/dra_agent.h"
#include "agent/node_agent.h"
#include "agent/nri/plugin.h"
#include "agent/pods/driver_files.h"
#include "agent/pods/pod_manager.h"
#include "common/prometheus.h"
#include "k8s/client/http.h"
#include "k8s/eviction/evictor.h"

namespace tessera::agent {

struct AgentOptions {
  // The node's name, rediscovery, GPU health and the fault policy (on_gpus and
  // faults.local_pods are the Agent's).
  NodeAgentOptions node;
  // Where the driver's libraries and the CUDA shim are, and where they go.
  DriverFilesOptions driver;
  // The pods' files, MPS, the memory backstop, idle GPUs (node_name, edits.driver and notify are
  // the Agent's).
  PodManagerOptions pods;
  // NVML for the per-process view (a soname or a path); a library that does not load leaves the
  // agent without it (logged).
  std::string nvml_library = "libnvidia-ml.so.1";
  bool nri = true;  // false: publish only, deliver nothing into containers
  nri::NriPluginOptions nri_plugin;
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 9402;  // 0: any free port (logged); -1: no /metrics
  prometheus::BuildInfo build{"unknown", "unknown"};
  // DRA mode (node_name, mig and edits are the Agent's: the node's, the discovery backend's, the
  // pods' edits).
  std::optional<dra::DraAgentOptions> dra;
  // --cleanup-on-delete: the DaemonSet whose deletion makes a stop remove what the agent made
  // (both empty: every stop keeps it for the next agent).
  std::string cleanup_namespace;
  std::string cleanup_daemonset;
  // The idle-reclaim policy (pods/idle_reclaim.h): pods found idle whose priority is below this
  // are evicted. nullopt: off (idle pods are only told).
  std::optional<int32_t> idle_reclaim_below_priority;
};

// Why Run() returned.
struct AgentExit {
  absl::Status status;  // OK: stopped
  // The error is the publishing loop's (its first discovery: a GPU description file or NVML);
  // any other (the driver's libraries, /metrics, the DRA driver) is a failure at run time.
  bool from_discovery = false;
};

class Agent {
 public:
  // `discovery` and `client` outlive the Agent.
  Agent(AgentOptions options, GpuDiscovery& discovery, k8s::ApiClient& client);

  // Runs everything until Stop() or a failure, then joins every thread and, when the DaemonSet
  // is being deleted, cleans up. Blocks; once per Agent.
  [[nodiscard]] AgentExit Run();

  // Async-signal-safe (one store to a lock-free atomic): a signal handler may call it.
  void Stop() { stop_.store(true); }

 private:
  absl::StatusOr<DriverLibraries> PrepareDriver();
  std::unique_ptr<NvmlProcessSampler> LoadSampler();
  // What pods must be told (PodManagerOptions::notify): evictions and Warning Events.
  void Notify(const std::vector<PodNotice>& notices);
  // Evicts `pod` through the Eviction API (PDBs honoured; the calling thread waits for the
  // answer) and logs `what` with the outcome.
  k8s::EvictionResult Evict(const PodRef& pod, std::string_view what);
  // The idle-reclaim policy for a pod found idle: reads the pod, evicts it if the policy allows,
  // and says what happened (the GPUIdle Event's reason and the words added to its message).
  std::pair<std::string, std::string> ReclaimIdle(const PodNotice& notice);
  void CleanUpIfUninstalled();

  AgentOptions options_;
  GpuDiscovery& discovery_;
  k8s::ApiClient& client_;
  std::atomic<bool> stop_{false};
  static_assert(std::atomic<bool>::is_always_lock_free);
  std::atomic<int64_t> idle_reclaims_{0};  // idle pods evicted (the API server accepted it)
};

}  // namespace tessera::agent
