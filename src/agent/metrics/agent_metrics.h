// The agent's /metrics (Prometheus text format 0.0.4, through the one writer,
// common/prometheus.h): per GPU, its health and the pods on it with what each was granted
// (memory, compute, whole GPU or MIG instance) and, for shares enforced by the CUDA shim, what the
// pod's processes hold now and how often the cap refused them; the agent's own counters, its
// requests to the API server and its build. What GPU exporters attribute through the kubelet's
// pod-resources API in device-plugin setups, tessera's NRI delivery makes visible here
// (src/agent/README.md "Metrics"; every series in docs/metrics.md, checked by
// docs_reference_test).
//
// MetricsText is pure (AgentMetricsInput in, text out): to add a family, add what it needs to
// the input and write it in WriteAgentMetrics. MetricsServer serves it with /healthz on a port
// of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/pods/pod_manager.h"
#include "common/prometheus.h"
#include "k8s/client/request_counts.h"

namespace tessera::agent {

struct AgentCounters {
  std::string node;
  int64_t containers_delivered = 0;  // containers given GPUs
  int64_t containers_refused = 0;    // container creations failed with a reason
  int64_t reaped_processes = 0;      // ledger slots of dead processes given back
  int64_t backstop_over = 0;         // pods found over their share by the memory backstop
  int64_t backstop_actions = 0;      // processes killed or pods evicted for it
  int64_t idle_reclaims = 0;         // idle pods evicted by the idle-reclaim policy
  bool host_pids = true;             // the agent sees the host's PID namespace
};

// Everything the agent's /metrics reports, gathered at each scrape.
struct AgentMetricsInput {
  std::vector<GpuUse> gpus;  // PodManager::Use()
  AgentCounters counters;
  prometheus::BuildInfo build{"unknown", "unknown"};
  const k8s::RequestCounts* requests = nullptr;  // the agent's API client's (optional)
};

void WriteAgentMetrics(prometheus::Exposition& out, const AgentMetricsInput& in);
std::string MetricsText(const AgentMetricsInput& in);

class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  // Listens on `address`:`port` (0: any free port) and serves /metrics from `text` and /healthz.
  absl::Status Start(const std::string& address, int port, std::function<std::string()> text);
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace tessera::agent
