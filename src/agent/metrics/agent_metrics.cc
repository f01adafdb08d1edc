#include "agent/metrics/agent_metrics.h"

#include <thread>

#include "common/strings.h"
#include "httplib.h"

namespace tessera::agent {
namespace {

// A label value with Prometheus' escapes.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Family {
 public:
  Family(std::string* out, const std::string& name, const std::string& type,
         const std::string& help)
      : out_(out), name_(name) {
    StrAppend(out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Add(const std::vector<std::pair<std::string, std::string>>& labels, int64_t value) {
    StrAppend(out_, name_);
    if (!labels.empty()) {
      StrAppend(out_, "{");
      for (size_t i = 0; i < labels.size(); ++i) {
        StrAppend(out_, i ? "," : "", labels[i].first, "=\"", Escape(labels[i].second), "\"");
      }
      StrAppend(out_, "}");
    }
    StrAppend(out_, " ", value, "\n");
  }

 private:
  std::string* out_;
  std::string name_;
};

}  // namespace

std::string MetricsText(const std::vector<GpuUse>& gpus, const AgentCounters& counters) {
  std::string out;
  using Labels = std::vector<std::pair<std::string, std::string>>;
  auto gpu_labels = [&](const GpuUse& g) {
    return Labels{{"node", counters.node}, {"gpu", StrCat(g.index)}, {"uuid", g.uuid}};
  };
  auto pod_labels = [&](const GpuUse& g, const GpuUse::Pod& p) {
    Labels l = gpu_labels(g);
    l.push_back({"namespace", p.ns});
    l.push_back({"pod", p.name});
    l.push_back({"sharing", p.exclusive      ? "whole"
                            : !p.mig.empty() ? "mig"
                                             : SharingName(p.sharing)});
    if (!p.mig.empty()) l.push_back({"mig", p.mig});
    return l;
  };
  Family healthy(&out, "tessera_agent_gpu_healthy", "gauge",
                 "1 if the GPU is healthy (no critical XID), 0 if the agent marked it unhealthy");
  for (const GpuUse& g : gpus) healthy.Add(gpu_labels(g), g.healthy ? 1 : 0);
  Family pods(&out, "tessera_agent_gpu_pods", "gauge", "Pods the agent has given this GPU to");
  for (const GpuUse& g : gpus) pods.Add(gpu_labels(g), static_cast<int64_t>(g.pods.size()));
  Family mps(&out, "tessera_agent_gpu_mps_daemon", "gauge",
             "1 while the GPU's MPS control daemon runs for pods that opted into MPS");
  for (const GpuUse& g : gpus) mps.Add(gpu_labels(g), g.mps.empty() ? 0 : 1);
  Family memory(&out, "tessera_agent_pod_gpu_memory_granted_bytes", "gauge",
                "GPU memory granted to the pod on this GPU (a whole GPU: all of it)");
  for (const GpuUse& g : gpus) {
    for (const GpuUse::Pod& p : g.pods) memory.Add(pod_labels(g, p), p.memory_mib << 20);
  }
  Family compute(&out, "tessera_agent_pod_gpu_compute_granted_permille", "gauge",
                 "Compute granted to the pod on this GPU, in thousandths of the GPU");
  for (const GpuUse& g : gpus) {
    for (const GpuUse::Pod& p : g.pods) compute.Add(pod_labels(g, p), p.compute_milli);
  }
  Family used(&out, "tessera_agent_pod_gpu_memory_used_bytes", "gauge",
              "GPU memory the pod's processes hold now, as the CUDA shim accounts it (shares "
              "enforced by the shim only)");
  Family procs(&out, "tessera_agent_pod_gpu_processes", "gauge",
               "Live processes of the pod using the GPU through the CUDA shim");
  Family ooms(&out, "tessera_agent_pod_gpu_cap_refusals_total", "counter",
              "Allocations the CUDA shim refused because they would pass the pod's cap");
  Family tampered(&out, "tessera_agent_pod_ledger_tampered_total", "counter",
                  "Times the pod's processes changed the header or length of its GPU memory "
                  "ledger under the agent (which put it back and sent a LedgerTampered Event)");
  Family driver(&out, "tessera_agent_pod_gpu_memory_driver_bytes", "gauge",
                "GPU memory the pod's processes hold as the driver counts it (NVML, per process, "
                "summed by pod): what the memory backstop compares with the share");
  for (const GpuUse& g : gpus) {
    for (const GpuUse::Pod& p : g.pods) {
      if (p.driver_used_bytes >= 0) driver.Add(pod_labels(g, p), p.driver_used_bytes);
    }
  }
  for (const GpuUse& g : gpus) {
    for (const GpuUse::Pod& p : g.pods) {
      if (p.used_bytes < 0) continue;
      used.Add(pod_labels(g, p), p.used_bytes);
      procs.Add(pod_labels(g, p), p.processes);
      ooms.Add(pod_labels(g, p), static_cast<int64_t>(p.oom_count));
      tampered.Add(pod_labels(g, p), static_cast<int64_t>(p.ledger_tampered));
    }
  }
  const Labels node = {{"node", counters.node}};
  Family delivered(&out, "tessera_agent_containers_delivered_total", "counter",
                   "Containers the agent gave GPUs to");
  delivered.Add(node, counters.containers_delivered);
  Family refused(&out, "tessera_agent_containers_refused_total", "counter",
                 "Container creations the agent failed because the pod's record cannot be "
                 "honoured on this node");
  refused.Add(node, counters.containers_refused);
  Family reaped(&out, "tessera_agent_reaped_processes_total", "counter",
                "Processes that died holding GPU memory of a share, given back by the agent");
  reaped.Add(node, counters.reaped_processes);
  Family over(&out, "tessera_agent_backstop_over_share_total", "counter",
              "Times a pod's processes were found holding more GPU memory than its share (with "
              "the tolerance) by the driver's count");
  over.Add(node, counters.backstop_over);
  Family actions(&out, "tessera_agent_backstop_actions_total", "counter",
                 "Times the memory backstop killed a pod's processes or evicted a pod that stayed "
                 "over its share past the grace period");
  actions.Add(node, counters.backstop_actions);
  Family host_pids(&out, "tessera_agent_host_pid_namespace", "gauge",
                   "1 if the agent sees the host's PID namespace (hostPID), which the compute "
                   "controller and the memory backstop need");
  host_pids.Add(node, counters.host_pids ? 1 : 0);
  return out;
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
