#include "agent/metrics/agent_metrics.h"

#include <thread>

#include "common/strings.h"
#include "httplib.h"

namespace tessera::agent {

using prometheus::MetricType;

void WriteAgentMetrics(prometheus::Exposition& out, const AgentMetricsInput& in) {
  const AgentCounters& counters = in.counters;
  const std::vector<GpuUse>& gpus = in.gpus;
  prometheus::WriteBuildInfo(out, in.build);
  const std::vector<std::string> gpu_labels = {"node", "gpu", "uuid"};
  // `queue`: the pod's tessera.dev/queue, left out (empty) for the default queue.
  const std::vector<std::string> pod_labels = {"node", "gpu",     "uuid", "namespace",
                                               "pod",  "sharing", "mig",  "queue"};
  auto sharing = [](const GpuUse::Pod& p) -> std::string {
    return p.exclusive ? "whole" : !p.mig.empty() ? "mig" : std::string(SharingName(p.sharing));
  };
  // One family per GPU figure, one sample per GPU.
  auto per_gpu = [&](const char* name, const char* help, auto value) {
    auto family = out.Family({name, MetricType::kGauge, help, gpu_labels});
    for (const GpuUse& g : gpus) family.Add({counters.node, StrCat(g.index), g.uuid}, value(g));
  };
  per_gpu("tessera_agent_gpu_healthy",
          "1 if the GPU is healthy (no critical XID), 0 if the agent marked it unhealthy",
          [](const GpuUse& g) { return g.healthy ? 1 : 0; });
  per_gpu("tessera_agent_gpu_pods", "Pods the agent has given this GPU to",
          [](const GpuUse& g) { return static_cast<int64_t>(g.pods.size()); });
  per_gpu("tessera_agent_gpu_mps_daemon",
          "1 while the GPU's MPS control daemon runs for pods that opted into MPS",
          [](const GpuUse& g) { return g.mps.empty() ? 0 : 1; });
  // Busy time, where the agent samples it (a GpuProcessSampler; not GPUs in MIG use).
  auto per_sampled_gpu = [&](const char* name, const char* help, auto value) {
    auto family = out.Family({name, MetricType::kCounter, help, gpu_labels});
    for (const GpuUse& g : gpus) {
      if (g.busy_ns >= 0) family.Add({counters.node, StrCat(g.index), g.uuid}, value(g));
    }
  };
  per_sampled_gpu(
      "tessera_agent_gpu_busy_seconds_total",
      "Time the GPU ran kernels, by its own utilisation (NVML), since the agent started",
      [](const GpuUse& g) { return static_cast<double>(g.busy_ns) / 1e9; });
  per_sampled_gpu(
      "tessera_agent_gpu_unattributed_busy_seconds_total",
      "Busy time of the GPU charged to no pod: several pods ran on it and their shims reported "
      "less than the GPU ran (a pod without the shim, or work its shim cannot measure), or none "
      "of tessera's pods ran",
      [](const GpuUse& g) { return static_cast<double>(g.unattributed_busy_ns) / 1e9; });
  per_sampled_gpu(
      "tessera_agent_gpu_usage_reports_rejected_total",
      "Reports of GPU time by the pods' shims on this GPU that the agent refused (the ledger's "
      "counter went back, or rose by more than the time since the last reading): a pod's "
      "process wrote its ledger",
      [](const GpuUse& g) { return g.rejected_usage_reports; });
  // One family per pod figure, one sample per pod on each GPU (`mig` empty but for a MIG
  // instance) that `has` the figure.
  auto all_pods = [](const GpuUse::Pod&) { return true; };
  auto shim_pods = [](const GpuUse::Pod& p) { return p.used_bytes >= 0; };  // the shim accounts
  auto per_pod = [&](const char* name, MetricType type, const char* help, auto has, auto value) {
    auto family = out.Family({name, type, help, pod_labels});
    for (const GpuUse& g : gpus) {
      for (const GpuUse::Pod& p : g.pods) {
        if (!has(p)) continue;
        family.Add(
            {counters.node, StrCat(g.index), g.uuid, p.ns, p.name, sharing(p), p.mig, p.queue},
            value(p));
      }
    }
  };
  per_pod("tessera_agent_pod_gpu_memory_granted_bytes", MetricType::kGauge,
          "GPU memory granted to the pod on this GPU (a whole GPU: all of it)", all_pods,
          [](const GpuUse::Pod& p) { return p.memory_mib << 20; });
  per_pod("tessera_agent_pod_gpu_compute_granted_ratio", MetricType::kGauge,
          "Compute granted to the pod on this GPU, as a fraction of the GPU (1: all of it; 0: "
          "a share without a compute reservation, time-shared)",
          all_pods, [](const GpuUse::Pod& p) { return p.compute_milli / 1000.0; });
  per_pod("tessera_agent_pod_gpu_memory_used_bytes", MetricType::kGauge,
          "GPU memory the pod's processes hold now, as the CUDA shim accounts it (shares "
          "enforced by the shim only)",
          shim_pods, [](const GpuUse::Pod& p) { return p.used_bytes; });
  per_pod("tessera_agent_pod_gpu_processes", MetricType::kGauge,
          "Live processes of the pod using the GPU through the CUDA shim", shim_pods,
          [](const GpuUse::Pod& p) { return static_cast<int64_t>(p.processes); });
  per_pod("tessera_agent_pod_gpu_cap_refusals_total", MetricType::kCounter,
          "Allocations the CUDA shim refused because they would pass the pod's cap", shim_pods,
          [](const GpuUse::Pod& p) { return static_cast<int64_t>(p.oom_count); });
  per_pod("tessera_agent_pod_ledger_tampered_total", MetricType::kCounter,
          "Times the pod's processes changed the header or length of its GPU memory ledger under "
          "the agent (which put it back and sent a LedgerTampered Event)",
          shim_pods, [](const GpuUse::Pod& p) { return static_cast<int64_t>(p.ledger_tampered); });
  per_pod(
      "tessera_agent_pod_gpu_busy_seconds_total", MetricType::kCounter,
      "Time the GPU ran this pod's kernels: the GPU's own busy time while the pod was the only "
      "one running on it (a whole GPU: all of it), and while several ran, the pod's share of it "
      "by what its shim measured (never more than the GPU's busy time in all)",
      [](const GpuUse::Pod& p) { return p.busy_ns >= 0; },
      [](const GpuUse::Pod& p) { return static_cast<double>(p.busy_ns) / 1e9; });
  per_pod(
      "tessera_agent_pod_gpu_idle", MetricType::kGauge,
      "1 if the pod ran alone on this GPU and kept it busy less than the idle threshold over the "
      "whole idle window (a GPUIdle Event tells it), 0 if it kept it busier; absent until watched "
      "for a whole window",
      [](const GpuUse::Pod& p) { return p.idle >= 0; },
      [](const GpuUse::Pod& p) { return static_cast<int64_t>(p.idle); });
  per_pod(
      "tessera_agent_pod_gpu_memory_driver_bytes", MetricType::kGauge,
      "GPU memory the pod's processes hold as the driver counts it (NVML, per process, summed by "
      "pod; for a share, what the memory backstop compares with it; for a whole GPU, the "
      "device's own figure of the pod)",
      [](const GpuUse::Pod& p) { return p.driver_used_bytes >= 0; },
      [](const GpuUse::Pod& p) { return p.driver_used_bytes; });
  auto per_node = [&](const char* name, MetricType type, const char* help, int64_t value) {
    out.Family({name, type, help, {"node"}}).Add({counters.node}, value);
  };
  per_node("tessera_agent_containers_delivered_total", MetricType::kCounter,
           "Containers the agent gave GPUs to", counters.containers_delivered);
  per_node("tessera_agent_containers_refused_total", MetricType::kCounter,
           "Container creations the agent failed because the pod's record cannot be honoured on "
           "this node",
           counters.containers_refused);
  per_node("tessera_agent_reaped_processes_total", MetricType::kCounter,
           "Processes that died holding GPU memory of a share, given back by the agent",
           counters.reaped_processes);
  per_node("tessera_agent_backstop_over_share_total", MetricType::kCounter,
           "Times a pod's processes were found holding more GPU memory than its share (with the "
           "tolerance) by the driver's count",
           counters.backstop_over);
  per_node("tessera_agent_backstop_actions_total", MetricType::kCounter,
           "Times the memory backstop killed a pod's processes or evicted a pod that stayed over "
           "its share past the grace period",
           counters.backstop_actions);
  per_node("tessera_agent_idle_reclaims_total", MetricType::kCounter,
           "Pods found idle on their GPU that the idle-reclaim policy evicted (evictions the API "
           "server accepted)",
           counters.idle_reclaims);
  per_node("tessera_agent_host_pid_namespace", MetricType::kGauge,
           "1 if the agent sees the host's PID namespace (hostPID), which the compute controller "
           "and the memory backstop need",
           counters.host_pids ? 1 : 0);
  if (in.requests != nullptr) in.requests->Write(out, "tessera_agent_api_requests_total");
}

std::string MetricsText(const AgentMetricsInput& in) {
  prometheus::Exposition out;
  WriteAgentMetrics(out, in);
  return std::move(out).Text();
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

MetricsServer::MetricsServer() : impl_(std::make_unique<Impl>()) {}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

absl::Status MetricsServer::Start(const std::string& address, int port,
                                  std::function<std::string()> text) {
  httplib::Server& s = impl_->server;
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };
  s.Get("/metrics", [text](const httplib::Request&, httplib::Response& res) {
    res.set_content(text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  if (port == 0) {
    port_ = s.bind_to_any_port(address);
  } else if (s.bind_to_port(address, port)) {
    port_ = port;
  }
  if (port_ <= 0) {
    port_ = 0;
    return absl::UnavailableError(
        StrCat("cannot listen on ", address, ":", port, " for /metrics (--metrics-address)"));
  }
  impl_->thread = std::thread([&s] { s.listen_after_bind(); });
  return absl::OkStatus();
}

}  // namespace tessera::agent
