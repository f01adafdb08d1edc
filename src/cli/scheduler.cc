// `tessera scheduler`: runs the tessera scheduler against a Kubernetes API server.
#include "k8s/scheduler/scheduler.h"

#include <csignal>
#include <iostream>

#include "cli/command.h"
#include "cli/version.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/policy/policy.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/scheduler/config.h"
#include "spdlog/spdlog.h"

namespace tessera::cli {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void OnSignal(int) { g_stop.store(true); }

struct SchedulerFlags {
  std::string kubeconfig;
  std::string context;
  std::string config_file;
  std::string policy;
  std::string scheduler_name;
  std::string node_selector;
  std::string leader_elect;  // "", "true", "false"
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;
  std::string metrics_address;
  int metrics_port = -1;
  std::string log_level = "info";
  std::string wire;  // "", "protobuf", "json"
};

absl::StatusOr<k8s::SchedulerConfig> ConfigFor(const SchedulerFlags& f) {
  k8s::SchedulerConfig c;
  if (!f.config_file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(c, k8s::LoadSchedulerConfig(f.config_file));
  }
  if (!f.policy.empty()) {
    TESSERA_RETURN_IF_ERROR(core::CreatePolicy(f.policy, {}).status());
    c.core.policy = f.policy;
  }
  if (!f.scheduler_name.empty()) c.core.scheduler_name = f.scheduler_name;
  if (!f.node_selector.empty()) c.node_selector = f.node_selector;
  if (f.leader_elect == "true") c.leader_elect = true;
  if (f.leader_elect == "false") c.leader_elect = false;
  if (!f.lease_namespace.empty()) c.lease.lease_namespace = f.lease_namespace;
  if (!f.lease_name.empty()) c.lease.lease_name = f.lease_name;
  if (!f.identity.empty()) c.lease.identity = f.identity;
  if (!f.metrics_address.empty()) c.metrics_address = f.metrics_address;
  if (f.metrics_port >= 0) c.metrics_port = f.metrics_port;
  if (!f.wire.empty()) c.protobuf_wire = f.wire == "protobuf";
  c.build = CurrentBuild();
  return c;
}

}  // namespace

void AddSchedulerCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<SchedulerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "scheduler",
      "Schedule pods with spec.schedulerName=tessera onto nodes' GPUs, by the tessera engine.\n"
      "Pods ask in container resources.limits: tessera.dev/gpu: N (whole GPUs),\n"
      "tessera.dev/gpu-memory: 4Gi and/or tessera.dev/gpu-compute: 25 (percent; a share of one\n"
      "GPU); annotations tessera.dev/topology(-mode), tessera.dev/gang + gang-size (+\n"
      "gang-topology, gang-topology-mode), tessera.dev/queue. Nodes describe their GPUs in the\n"
      "tessera.dev/gpu-inventory annotation. Each decision is written as the pod's\n"
      "tessera.dev/assignment annotation in the same request that binds it. Unschedulable pods\n"
      "get a PodScheduled=False condition and an Event saying why. Replicas elect a leader with\n"
      "a Lease; /metrics and /healthz are served on --metrics-port.\n"
      "Exit status: 0 stopped by SIGTERM/SIGINT, 1 failure (lost the lease, API server\n"
      "unreachable at start), 2 bad flags or configuration.");
  cmd->add_option("--kubeconfig", f->kubeconfig,
                  "Kubeconfig file (default: in-cluster service account, else $KUBECONFIG or "
                  "~/.kube/config)");
  cmd->add_option("--context", f->context, "Kubeconfig context (default: current-context)");
  cmd->add_option("--config", f->config_file,
                  "Scheduler configuration (YAML; see deploy/configmap.yaml). Flags override it.")
      ->check(CLI::ExistingFile);
  cmd->add_option("--policy", f->policy,
                  StrCat("Placement policy (default tessera; known: ",
                         StrJoin(core::PolicyNames(), ", "), ")"));
  cmd->add_option("--scheduler-name", f->scheduler_name,
                  "Pods with this spec.schedulerName are scheduled (default tessera)");
  cmd->add_option("--node-selector", f->node_selector,
                  "Label selector for the nodes to use (default: all nodes)");
  cmd->add_option("--leader-elect", f->leader_elect,
                  "true|false: elect a leader with a Lease (default true)")
      ->check(CLI::IsMember({"true", "false"}));
  cmd->add_option("--lease-namespace", f->lease_namespace,
                  "Namespace of the leader Lease (default kube-system)");
  cmd->add_option("--lease-name", f->lease_name, "Name of the Lease (default tessera-scheduler)");
  cmd->add_option("--identity", f->identity,
                  "This replica's identity in the Lease (default: hostname_random)");
  cmd->add_option("--metrics-bind-address", f->metrics_address,
                  "Address for /metrics, /healthz, /readyz (default 127.0.0.1)");
  cmd->add_option("--metrics-port", f->metrics_port,
                  "Port for /metrics, /healthz, /readyz (default 10269; 0 = any free port, "
                  "logged)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--wire", f->wire,
                  "protobuf|json: the encoding of the lists and watches of Pods and Nodes "
                  "(default protobuf, which the API server encodes faster; everything else is "
                  "JSON)")
      ->check(CLI::IsMember({"protobuf", "json"}));
  cmd->add_option("--log-level", f->log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  cmd->callback([f, exit_code]() {
    spdlog::set_level(spdlog::level::from_str(f->log_level));
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
    absl::StatusOr<k8s::ClientConfig> client_config =
        k8s::ResolveClientConfig(f->kubeconfig, f->context, k8s::ConfigSearch::kInClusterFirst);
    if (!client_config.ok()) {
      std::cerr << "tessera scheduler: " << client_config.status().message() << "\n";
      *exit_code = kExitBadInput;
      return;
    }
    absl::StatusOr<k8s::SchedulerConfig> config = ConfigFor(*f);
    if (!config.ok()) {
      std::cerr << "tessera scheduler: " << config.status().message() << "\n";
      *exit_code = kExitBadInput;
      return;
    }
    absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = k8s::ApiClient::Create(*client_config);
    if (!client.ok()) {
      std::cerr << "tessera scheduler: " << client.status().message() << "\n";
      *exit_code = kExitBadInput;
      return;
    }
    absl::StatusOr<nlohmann::json> version = (*client)->Get("/version");
    if (!version.ok()) {
      std::cerr << "tessera scheduler: cannot reach the API server at " << client_config->server
                << " (" << client_config->source << "): " << version.status().message() << "\n";
      *exit_code = kExitFailure;
      return;
    }
    spdlog::info("API server {} ({}), {}", client_config->server, version->value("gitVersion", "?"),
                 client_config->source);
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);
    k8s::Scheduler scheduler(**client, *config);
    absl::Status status = scheduler.Run(g_stop);
    if (!status.ok()) {
      std::cerr << "tessera scheduler: " << status.message() << "\n";
      *exit_code =
          status.code() == absl::StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure;
      return;
    }
    *exit_code = kExitOk;
  });
}

}  // namespace tessera::cli
