// `tessera agent`: the node agent (one per GPU node, a DaemonSet).
//   tessera agent [--gpus-file FILE]                 discover, publish, keep the node up to date
//   tessera agent --print-inventory [--gpus-file F]  print what discovery finds and exit
//   tessera agent compare --inventory F --nvidia-smi-q F --nvidia-smi-topo F
//                                                    the GPU check (scripts/gpu_check.sh)
//   tessera agent uninstall --namespace NS --daemonset DS
//                                                    remove the agents and what they wrote
//                                                    (the chart's pre-delete hook)
#include "agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "agent/discovery/fake_discovery.h"
#include "agent/discovery/nvidia_smi_check.h"
#include "agent/discovery/nvml_discovery.h"
#include "agent/health/fault_responder.h"
#include "agent/pods/driver_files.h"
#include "agent/pods/memory_backstop.h"
#include "agent/uninstall.h"
#include "cli/command.h"
#include "cli/output.h"
#include "cli/version.h"
#include "common/duration.h"
#include "common/strings.h"
#include "core/topology/topo_text.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "sim/yaml_util.h"
#include "spdlog/spdlog.h"

namespace tessera::cli {
namespace {

struct AgentFlags {
  std::string gpus_file;
  std::string nvml_library = "libnvidia-ml.so.1";
  bool print_inventory = false;
  bool compact = false;
  std::string node_name;
  std::string kubeconfig;
  std::string context;
  std::string rediscover = "30s";
  std::string log_level = "info";
  bool no_nri = false;
  std::string nri_socket = "/var/run/nri/nri.sock";
  std::string nri_index = "50";
  std::string dev_dir = "/dev";
  std::string pods_dir = "/run/tessera/pods";
  std::string cdi_kind;
  std::string host_root;
  std::vector<std::string> driver_lib_dirs;
  std::string shim_dir;  // default: <the binary's dir>/../lib/tessera
  std::string shim_install_dir = "/run/tessera/lib";
  std::string container_lib_dir = agent::kDefaultContainerLibDir;
  std::string mps_control = "nvidia-cuda-mps-control";
  std::string mps_root = "/run/tessera/mps";
  int mps_shm_mib = 1024;
  std::string nvidia_smi = "nvidia-smi";
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 9402;
  // DRA mode.
  bool dra = false;
  std::string kubelet_dir = "/var/lib/kubelet";
  std::string cdi_dir = "/var/run/cdi";
  std::string claims_dir = "/run/tessera/claims";
  std::string share_enforcement = "shim";
  bool no_mig_devices = false;
  bool dra_mig_mode_switch = false;
  std::string dra_resync = "10s";
  // GPU faults (src/agent/health).
  std::string gpu_fault_policy = "evict";
  std::string gpu_quiet_period = "5m";
  std::string gpu_fault_retry = "5s";
  // Host processes and the memory backstop.
  std::string proc_root = "/proc";
  std::string backstop_action = "kill";
  std::string backstop_grace = "30s";
  int backstop_tolerance_percent = 5;
  int backstop_process_mib = 768;
  // Idle GPUs (issue 34).
  double gpu_idle_percent = 5;
  std::string gpu_idle_window = "30m";
  std::string idle_reclaim_below_priority;  // empty: off
  std::string cleanup_on_delete;            // NAMESPACE/DAEMONSET
};

struct UninstallFlags {
  std::string kubeconfig, context, ns, daemonset, dra_driver, timeout = "120s";
  OutputFlags output;
};

struct CompareFlags {
  std::string inventory, smi_q, smi_topo;
  OutputFlags output;
};

// "500ms", "30s", "2m".
absl::StatusOr<std::unique_ptr<agent::GpuDiscovery>> OpenDiscovery(const AgentFlags& f) {
  if (!f.gpus_file.empty()) return std::make_unique<agent::FakeDiscovery>(f.gpus_file);
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<agent::NvmlDiscovery> nvml,
                           agent::NvmlDiscovery::Open(f.nvml_library));
  return std::unique_ptr<agent::GpuDiscovery>(std::move(nvml));
}

// A problem with a file the user named is bad input (2); a machine without a driver or GPUs is a
// failure at run time (1).
int ExitFor(const AgentFlags& f, const absl::Status& s) {
  return !f.gpus_file.empty() && s.code() != absl::StatusCode::kNotFound ? kExitBadInput
                                                                         : kExitFailure;
}

std::string NodeNameFor(const AgentFlags& f) {
  if (!f.node_name.empty()) return f.node_name;
  if (const char* env = std::getenv("NODE_NAME"); env && *env) return env;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) return host;
  return "";
}

// <the directory of this binary>/../lib/tessera: where an installation keeps the CUDA shim.
std::string DefaultShimDir() {
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  std::string dir(exe, static_cast<size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  return StrCat(dir.substr(0, dir.rfind('/')), "/lib/tessera");
}

// The running agent, for the signal handlers (null before it runs and after it stops).
std::atomic<agent::Agent*> g_running_agent{nullptr};
extern "C" void OnAgentSignal(int) {
  if (agent::Agent* a = g_running_agent.load()) a->Stop();
}

// The flags of what the agent does for the pods it serves (their files, MPS, the memory backstop,
// idle GPUs) and of DRA mode; an error names the flag.
absl::Status ReadNodeSideFlags(const AgentFlags& f, agent::AgentOptions& o) {
  agent::PodManagerOptions& pods = o.pods;
  pods.pods_dir = f.pods_dir;
  pods.edits.host_root = f.host_root;
  pods.edits.dev_dir = f.dev_dir;
  pods.edits.cdi_kind = f.cdi_kind;
  pods.mps.control = f.mps_control;
  pods.mps.root = f.mps_root;
  pods.mps.shm_bytes = static_cast<uint64_t>(std::max(1, f.mps_shm_mib)) << 20;
  pods.mps.exclusive_command = {f.nvidia_smi, "-i", "{uuid}", "-c", "EXCLUSIVE_PROCESS"};
  pods.mps.restore_command = {f.nvidia_smi, "-i", "{uuid}", "-c", "DEFAULT"};
  pods.proc_root = f.proc_root;
  absl::StatusOr<agent::BackstopAction> action = agent::ParseBackstopAction(f.backstop_action);
  if (!action.ok()) {
    return absl::InvalidArgumentError(StrCat("--memory-backstop: ", action.status().message()));
  }
  absl::StatusOr<std::chrono::milliseconds> grace = ParseDuration(f.backstop_grace);
  if (!grace.ok()) {
    return absl::InvalidArgumentError(
        StrCat("--memory-backstop-grace: ", grace.status().message()));
  }
  if (f.backstop_tolerance_percent < 0 || f.backstop_tolerance_percent > 1000 ||
      f.backstop_process_mib < 0) {
    return absl::InvalidArgumentError(
        "--memory-backstop-tolerance-percent and --memory-backstop-process-mib take "
        "0..1000 and a size >= 0");
  }
  pods.backstop.action = *action;
  pods.backstop.grace = std::chrono::duration_cast<std::chrono::seconds>(*grace);
  pods.backstop.tolerance_permille = static_cast<uint32_t>(f.backstop_tolerance_percent) * 10;
  pods.backstop.per_process_bytes = static_cast<uint64_t>(f.backstop_process_mib) << 20;
  absl::StatusOr<std::chrono::milliseconds> idle_window = ParseDuration(f.gpu_idle_window);
  if (!idle_window.ok()) {
    return absl::InvalidArgumentError(
        StrCat("--gpu-idle-window: ", idle_window.status().message()));
  }
  if (f.gpu_idle_percent < 0 || f.gpu_idle_percent > 100) {
    return absl::InvalidArgumentError("--gpu-idle-percent takes 0..100");
  }
  pods.idle.threshold_permille = static_cast<uint32_t>(f.gpu_idle_percent * 10 + 0.5);
  pods.idle.window = std::chrono::duration_cast<std::chrono::seconds>(*idle_window);
  if (!f.idle_reclaim_below_priority.empty()) {
    int32_t below = 0;
    if (!absl::SimpleAtoi(f.idle_reclaim_below_priority, &below)) {
      return absl::InvalidArgumentError(
          StrCat("--idle-reclaim-below-priority takes a pod priority (an integer, as a "
                 "PriorityClass's value), not '",
                 f.idle_reclaim_below_priority, "'"));
    }
    if (pods.idle.window.count() == 0) {
      return absl::InvalidArgumentError(
          "--idle-reclaim-below-priority needs the idle rule: --gpu-idle-window is 0");
    }
    o.idle_reclaim_below_priority = below;
  }
  if (f.dra) {
    agent::dra::DraAgentOptions& dra = o.dra.emplace();
    dra.kubelet_dir = f.kubelet_dir;
    dra.cdi_dir = f.cdi_dir;
    dra.claims_dir = f.claims_dir;
    dra.mig_devices = !f.no_mig_devices;
    dra.mig_mode_switch = f.dra_mig_mode_switch;
    absl::StatusOr<std::chrono::milliseconds> resync = ParseDuration(f.dra_resync);
    if (!resync.ok()) {
      return absl::InvalidArgumentError(
          StrCat("--dra-resync-interval: ", resync.status().message()));
    }
    dra.resync = *resync;
    dra.enforce_shares = f.share_enforcement == "shim";
    dra.no_execute_on_failure = o.node.faults.policy == agent::FaultPolicy::kEvict;
  }
  return absl::OkStatus();
}

// Where the agent finds and puts the driver's libraries and the CUDA shim, its NRI plugin, its
// /metrics and its uninstall cleanup, from the flags.
void ReadDeliveryFlags(const AgentFlags& f, agent::AgentOptions& o) {
  o.driver.host_root = f.host_root;
  o.driver.driver_lib_dirs = f.driver_lib_dirs;
  o.driver.shim_dir = f.shim_dir.empty() ? DefaultShimDir() : f.shim_dir;
  o.driver.install_dir = f.shim_install_dir;
  o.driver.container_lib_dir = f.container_lib_dir;
  o.nvml_library = f.nvml_library;
  o.nri = !f.no_nri;
  o.nri_plugin.socket_path = f.nri_socket;
  o.nri_plugin.index = f.nri_index;
  o.metrics_address = f.metrics_address;
  o.metrics_port = f.metrics_port;
  o.build = CurrentBuild();
  if (!f.cleanup_on_delete.empty()) {  // NAMESPACE/DAEMONSET, checked by its flag
    const size_t slash = f.cleanup_on_delete.find('/');
    o.cleanup_namespace = f.cleanup_on_delete.substr(0, slash);
    o.cleanup_daemonset = f.cleanup_on_delete.substr(slash + 1);
  }
}

// `tessera agent`: reads and checks the flags, connects to the API server, and runs the agent
// (agent/agent.h) until SIGTERM or SIGINT.
int RunAgent(const AgentFlags& f) {
  auto fail = [](int code, const auto& message) {
    std::cerr << "tessera agent: " << message << "\n";
    return code;
  };
  absl::StatusOr<std::chrono::milliseconds> rediscover = ParseDuration(f.rediscover);
  if (!rediscover.ok()) {
    return fail(kExitBadInput, StrCat("--rediscover-interval: ", rediscover.status().message()));
  }
  absl::StatusOr<std::unique_ptr<agent::GpuDiscovery>> discovery = OpenDiscovery(f);
  if (!discovery.ok()) return fail(ExitFor(f, discovery.status()), discovery.status().message());

  if (f.print_inventory) {
    absl::StatusOr<agent::NodeGpus> gpus = (*discovery)->Discover();
    if (!gpus.ok()) return fail(ExitFor(f, gpus.status()), gpus.status().message());
    std::cout << records::InventoryToJson(gpus->ToInventory(), !f.compact) << "\n";
    return kExitOk;
  }

  spdlog::set_level(spdlog::level::from_str(f.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
  agent::AgentOptions options;
  options.node.node_name = NodeNameFor(f);
  options.node.rediscover_interval = *rediscover;
  if (options.node.node_name.empty()) {
    return fail(kExitBadInput, "no node name: pass --node-name or set NODE_NAME");
  }
  absl::StatusOr<agent::FaultPolicy> policy = agent::ParseFaultPolicy(f.gpu_fault_policy);
  if (!policy.ok()) {
    return fail(kExitBadInput, StrCat("--gpu-fault-policy: ", policy.status().message()));
  }
  options.node.faults.policy = *policy;
  absl::StatusOr<std::chrono::milliseconds> quiet = ParseDuration(f.gpu_quiet_period);
  if (!quiet.ok()) {
    return fail(kExitBadInput, StrCat("--gpu-quiet-period: ", quiet.status().message()));
  }
  options.node.health.quiet_period = *quiet;
  absl::StatusOr<std::chrono::milliseconds> retry = ParseDuration(f.gpu_fault_retry);
  if (!retry.ok() || retry->count() == 0) {
    return fail(kExitBadInput,
                StrCat("--gpu-fault-retry: ",
                       retry.ok() ? "must be more than 0" : retry.status().message()));
  }
  options.node.faults.retry_interval = *retry;
  // Every flag is checked before the API server is looked for: bad input says so at once.
  if (absl::Status s = ReadNodeSideFlags(f, options); !s.ok()) {
    return fail(kExitBadInput, s.message());
  }
  ReadDeliveryFlags(f, options);
  absl::StatusOr<k8s::ClientConfig> config =
      k8s::ResolveClientConfig(f.kubeconfig, f.context, k8s::ConfigSearch::kInClusterFirst);
  if (!config.ok()) return fail(kExitBadInput, config.status().message());
  absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = k8s::ApiClient::Create(*config);
  if (!client.ok()) return fail(kExitBadInput, client.status().message());
  absl::StatusOr<nlohmann::json> version = (*client)->Get("/version");
  if (!version.ok()) {
    return fail(kExitFailure, StrCat("cannot reach the API server at ", config->server, " (",
                                     config->source, "): ", version.status().message()));
  }
  spdlog::info("tessera agent for node {}; API server {} ({})", options.node.node_name,
               config->server, version->value("gitVersion", "?"));

  agent::Agent agent(std::move(options), **discovery, **client);
  g_running_agent.store(&agent);
  std::signal(SIGTERM, OnAgentSignal);
  std::signal(SIGINT, OnAgentSignal);
  const agent::AgentExit exit = agent.Run();
  g_running_agent.store(nullptr);
  if (!exit.status.ok()) {
    return fail(exit.from_discovery ? ExitFor(f, exit.status) : kExitFailure,
                exit.status.message());
  }
  spdlog::info("stopped");
  return kExitOk;
}

// `tessera agent uninstall`: the chart's pre-delete hook (agent/uninstall.h).
int RunUninstall(const UninstallFlags& f) {
  auto fail = [](int code, const auto& message) {
    std::cerr << "tessera agent uninstall: " << message << "\n";
    return code;
  };
  absl::StatusOr<std::chrono::milliseconds> timeout = ParseDuration(f.timeout);
  if (!timeout.ok()) return fail(kExitBadInput, StrCat("--timeout: ", timeout.status().message()));
  absl::StatusOr<k8s::ClientConfig> config =
      k8s::ResolveClientConfig(f.kubeconfig, f.context, k8s::ConfigSearch::kInClusterFirst);
  if (!config.ok()) return fail(kExitBadInput, config.status().message());
  absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = k8s::ApiClient::Create(*config);
  if (!client.ok()) return fail(kExitBadInput, client.status().message());
  agent::UninstallOptions o;
  o.ns = f.ns;
  o.daemonset = f.daemonset;
  o.driver = f.dra_driver;
  o.timeout = *timeout;
  // With -o json, stdout is the one report document and the progress goes to stderr.
  std::ostream& progress = f.output.json() ? std::cerr : std::cout;
  absl::StatusOr<agent::UninstallReport> report = agent::UninstallAgents(
      **client, o, [&progress](const std::string& line) { progress << line << std::endl; });
  if (!report.ok()) return fail(kExitFailure, report.status().message());
  if (f.output.json()) {
    std::cout << nlohmann::json{{"agentsStopped", report->pods_waited},
                                {"allStoppedInTime", report->pods_gone},
                                {"nodeChanges", report->node_changes},
                                {"resourceSlicesDeleted", report->slices_deleted}}
                     .dump(2)
              << std::endl;
    return kExitOk;
  }
  std::cout << "agents: " << report->pods_waited << " stopped"
            << (report->pods_gone ? "" : " (not all within the timeout)") << "; nodes cleaned by "
            << "this sweep: " << report->node_changes.size()
            << " change(s); ResourceSlices deleted: " << report->slices_deleted << std::endl;
  return kExitOk;
}

int RunCompare(const CompareFlags& f) {
  auto fail = [](const auto& message) {
    std::cerr << "tessera agent compare: " << message << "\n";
    return kExitBadInput;
  };
  absl::StatusOr<std::string> inventory_text = sim::ReadFile(f.inventory);
  if (!inventory_text.ok()) return fail(inventory_text.status().message());
  absl::StatusOr<records::Inventory> inventory = records::InventoryFromJson(*inventory_text);
  if (!inventory.ok()) return fail(StrCat(f.inventory, ": ", inventory.status().message()));
  absl::StatusOr<std::string> q_text = sim::ReadFile(f.smi_q);
  if (!q_text.ok()) return fail(q_text.status().message());
  absl::StatusOr<agent::SmiLog> q = agent::ParseNvidiaSmiQ(*q_text);
  if (!q.ok()) return fail(StrCat(f.smi_q, ": ", q.status().message()));
  absl::StatusOr<std::string> topo_text = sim::ReadFile(f.smi_topo);
  if (!topo_text.ok()) return fail(topo_text.status().message());
  absl::StatusOr<core::ParsedTopology> topo = core::ParseNvidiaSmiTopo(*topo_text);
  if (!topo.ok()) return fail(StrCat(f.smi_topo, ": ", topo.status().message()));
  agent::CheckReport report = agent::CompareWithNvidiaSmi(*inventory, *q, *topo);
  if (f.output.json()) {
    nlohmann::json items = nlohmann::json::array();
    for (const agent::CheckItem& i : report.items) {
      items.push_back(
          {{"what", i.what}, {"nvidiaSmi", i.nvidia_smi}, {"tessera", i.tessera}, {"ok", i.ok}});
    }
    std::cout << nlohmann::json{{"checks", items.size()},
                                {"mismatches", report.mismatches()},
                                {"items", items}}
                     .dump(2)
              << std::endl;
  } else {
    std::cout << report.ToMarkdown();
  }
  return report.mismatches() == 0 ? kExitOk : kExitFailure;
}

}  // namespace

void AddAgentCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<AgentFlags>();
  CLI::App* cmd = app.add_subcommand(
      "agent",
      "The node agent, one per GPU node (deploy/agent-daemonset.yaml). It discovers the node's\n"
      "GPUs through NVML (libnvidia-ml.so.1, loaded at run time) or, on machines without GPUs,\n"
      "from a GPU description file (--gpus-file), and publishes them on the Node: the\n"
      "tessera.dev/gpu-inventory annotation (GPUs, links, health), the labels\n"
      "tessera.dev/gpu-model, tessera.dev/gpu-count and tessera.dev/nvlink-domain (GB200-class\n"
      "fabric cliques), and the extended resources tessera.dev/gpu (GPUs),\n"
      "tessera.dev/gpu-memory (bytes) and tessera.dev/gpu-compute (percent of one GPU) that the\n"
      "kubelet admits tessera's pods against. It watches the GPUs (XID errors, MIG changes) and\n"
      "the Node, and republishes when something changes, never when nothing did.\n"
      "--print-inventory prints the inventory record and exits.\n"
      "Exit status: 0 stopped by SIGTERM/SIGINT (or printed), 1 a failure (no NVIDIA driver, no\n"
      "GPU, API server unreachable), 2 bad input (a flag, the description file, the\n"
      "kubeconfig).");
  cmd->add_option("--gpus-file", f->gpus_file,
                  "GPU description file to read instead of asking NVML (the fake GPUs of a test "
                  "node; format in src/agent/discovery/fake_gpus_file.h)");
  cmd->add_option("--nvml-library", f->nvml_library,
                  "The NVML library to load: a soname searched as the dynamic loader does, or a "
                  "path (for drivers installed under /run/nvidia/driver, say)")
      ->capture_default_str();
  cmd->add_flag("--print-inventory", f->print_inventory,
                "Print the tessera.dev/gpu-inventory document for this node and exit");
  cmd->add_flag("--compact", f->compact, "With --print-inventory: one line, as in the annotation");
  cmd->add_option("--node-name", f->node_name,
                  "This node's name in Kubernetes (default: $NODE_NAME, else the hostname)");
  cmd->add_option("--kubeconfig", f->kubeconfig,
                  "Kubeconfig file (default: in-cluster service account, else $KUBECONFIG or "
                  "~/.kube/config)");
  cmd->add_option("--context", f->context, "Kubeconfig context (default: current-context)");
  cmd->add_option("--rediscover-interval", f->rediscover,
                  "How often to ask the GPUs again besides their events (500ms, 30s, 2m)")
      ->capture_default_str();
  cmd->add_option("--log-level", f->log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  cmd->add_option("--nri-socket", f->nri_socket,
                  "The container runtime's NRI socket; the agent connects as an NRI plugin and "
                  "puts each tessera pod's GPUs into its containers")
      ->capture_default_str();
  cmd->add_option("--nri-index", f->nri_index,
                  "The plugin's index among the node's NRI plugins (two digits; lower runs first)")
      ->check([](const std::string& v) {
        return v.size() == 2 && std::isdigit(static_cast<unsigned char>(v[0])) &&
                       std::isdigit(static_cast<unsigned char>(v[1]))
                   ? std::string()
                   : std::string("must be two digits, 00..99");
      })
      ->capture_default_str();
  cmd->add_flag("--no-nri", f->no_nri,
                "Publish only: deliver nothing into containers (another component does)");
  cmd->add_option("--dev-dir", f->dev_dir,
                  "Where the host's GPU device nodes are (nvidia<minor>, nvidiactl, nvidia-uvm); "
                  "their numbers are given to the containers")
      ->capture_default_str();
  cmd->add_option("--pods-dir", f->pods_dir,
                  "Host folder for per-pod files (the assignment mounted into the containers); "
                  "the agent removes the folders of pods its runtime no longer has, so nodes "
                  "that share a host (test harnesses) need one each")
      ->capture_default_str();
  cmd->add_option("--driver-lib-dir", f->driver_lib_dirs,
                  "Host folder with the NVIDIA driver's libcuda.so.1 and libnvidia-ml.so.1, put "
                  "into GPU containers (the real ones behind the CUDA shim for shares); "
                  "repeatable (default: /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib, the GPU "
                  "operator's /run/nvidia/driver/...)");
  cmd->add_option("--host-root", f->host_root,
                  "Where the host's / is mounted in the agent's container (e.g. /host): the "
                  "driver libraries are looked up there, and named to the runtime by their host "
                  "paths (default: the agent sees the host's files)");
  cmd->add_option("--shim-dir", f->shim_dir,
                  "Where the agent finds libtessera-cuda.so and libtessera-nvml.so (default: "
                  "<the binary's folder>/../lib/tessera)");
  cmd->add_option("--shim-install-dir", f->shim_install_dir,
                  "Host folder the agent copies the CUDA shim to, for the runtime to bind-mount "
                  "into share containers")
      ->capture_default_str();
  cmd->add_option("--container-lib-dir", f->container_lib_dir,
                  "Where images look for libcuda.so.1: the driver's libraries (or the shim) are "
                  "mounted there")
      ->capture_default_str();
  cmd->add_option("--mps-control", f->mps_control,
                  "NVIDIA's MPS control program, run per GPU for pods that opt into MPS "
                  "(tessera.dev/gpu-sharing: mps)")
      ->capture_default_str();
  cmd->add_option("--mps-root", f->mps_root,
                  "Host folder for the MPS daemons' pipes, logs and /dev/shm (one per node)")
      ->capture_default_str();
  cmd->add_option("--mps-shm-mib", f->mps_shm_mib,
                  "Size of each MPS daemon's /dev/shm (a tmpfs shared by its clients), in MiB")
      ->capture_default_str();
  cmd->add_option("--nvidia-smi", f->nvidia_smi,
                  "nvidia-smi, to put a GPU in EXCLUSIVE_PROCESS mode for MPS and back")
      ->capture_default_str();
  cmd->add_option("--metrics-bind-address", f->metrics_address,
                  "Address for /metrics (Prometheus: per GPU the pods on it and what each was "
                  "granted) and /healthz")
      ->capture_default_str();
  cmd->add_option("--metrics-port", f->metrics_port,
                  "Port for /metrics; 0 picks a free one (logged), -1 serves none")
      ->capture_default_str();
  cmd->add_option("--cdi-kind", f->cdi_kind,
                  "Deliver GPUs as CDI devices <kind>=<GPU UUID> (e.g. nvidia.com/gpu, from the "
                  "NVIDIA Container Toolkit's generated spec) instead of device nodes");

  cmd->add_flag("--dra", f->dra,
                "DRA mode: also be the DRA driver gpu.tessera.dev (src/agent/dra/README.md). "
                "Publishes the node's GPUs as ResourceSlices (one shareable device per GPU with "
                "memory and compute capacities, MIG placements on shared counters), serves the "
                "kubelet plugin (prepares claims as CDI specs), and does not advertise the "
                "tessera.dev/gpu extended resources (the DeviceClass gpu.tessera.dev serves such "
                "pods through DRA)");
  cmd->add_option("--kubelet-dir", f->kubelet_dir,
                  "DRA: the kubelet's root directory (plugin sockets in plugins/ and "
                  "plugins_registry/, the checkpoint in plugins/gpu.tessera.dev/)")
      ->capture_default_str();
  cmd->add_option("--cdi-dir", f->cdi_dir,
                  "DRA: where the container runtime reads CDI specs (containerd's cdi_spec_dirs)")
      ->capture_default_str();
  cmd->add_option("--claims-dir", f->claims_dir,
                  "DRA: host folder (tmpfs) for the shim's files of each claim that holds a share")
      ->capture_default_str();
  cmd->add_option("--share-enforcement", f->share_enforcement,
                  "DRA: shim = containers of a share get the CUDA shim that enforces its memory "
                  "and compute (the shim's libraries must be in --shim-dir); none = shares are "
                  "only accounted")
      ->check(CLI::IsMember({"shim", "none"}))
      ->capture_default_str();
  cmd->add_option("--dra-resync-interval", f->dra_resync,
                  "DRA: how often to check the node's ResourceSlices and the prepared claims "
                  "besides the kubelet's registrations and GPU changes (500ms, 10s, 1m)")
      ->capture_default_str();
  cmd->add_flag("--no-mig-devices", f->no_mig_devices,
                "DRA: do not publish MIG placements as partitionable devices");
  cmd->add_option("--gpu-fault-policy", f->gpu_fault_policy,
                  "What happens to the pods of a GPU that fails (a hardware XID, a lost GPU, a "
                  "reset the driver asks for) or that hold both GPUs of an NVLink that went down: "
                  "evict (through the Eviction API, PodDisruptionBudgets honoured; in DRA mode the "
                  "devices are also tainted NoExecute), cordon-gpu (they keep running; no new pods "
                  "go to the GPU), none (they are only told)")
      ->capture_default_str();
  cmd->add_option("--gpu-quiet-period", f->gpu_quiet_period,
                  "How long a GPU (or an NVLink) must be free of faults before it returns to "
                  "service, without a restart")
      ->capture_default_str();
  cmd->add_option("--gpu-fault-retry", f->gpu_fault_retry,
                  "How often the pods of a failed GPU are looked at again (an eviction a "
                  "PodDisruptionBudget refused is tried again)")
      ->capture_default_str();
  cmd->add_flag("--dra-mig-mode-switch", f->dra_mig_mode_switch,
                "DRA: a claim for a MIG placement on a GPU that is not in MIG mode turns MIG mode "
                "on (when nothing else is prepared on the GPU), and off again when its last "
                "instance is gone; without it such a claim is refused with a message saying how "
                "to turn MIG mode on");

  cmd->add_option("--cleanup-on-delete", f->cleanup_on_delete,
                  "NAMESPACE/DAEMONSET: when the agent stops because this DaemonSet is being "
                  "deleted (uninstall), it removes everything it made on the node (annotations, "
                  "labels, extended resources, ResourceSlices) and host (its folders, CDI specs); "
                  "any other stop keeps them for the next agent")
      ->check([](const std::string& v) {
        const size_t slash = v.find('/');
        return slash != std::string::npos && slash > 0 && slash + 1 < v.size()
                   ? std::string()
                   : std::string("must be NAMESPACE/DAEMONSET");
      });
  cmd->add_option("--proc-root", f->proc_root,
                  "The host's /proc as the agent sees it: the agent needs the host's PID "
                  "namespace (hostPID: true) to tell which pod a GPU process belongs to")
      ->capture_default_str();
  cmd->add_option("--memory-backstop", f->backstop_action,
                  "What to do with a pod whose processes hold more GPU memory than its share "
                  "(by the driver's count, NVML) past the grace period: kill its processes on that "
                  "GPU, evict the pod, or only report (Events and metrics)")
      ->check(CLI::IsMember({"kill", "evict", "report"}))
      ->capture_default_str();
  cmd->add_option("--memory-backstop-grace", f->backstop_grace,
                  "How long a pod may stay over its share before the backstop acts (30s, 2m)")
      ->capture_default_str();
  cmd->add_option("--memory-backstop-tolerance-percent", f->backstop_tolerance_percent,
                  "Tolerance over the share, in percent of it")
      ->capture_default_str();
  cmd->add_option("--memory-backstop-process-mib", f->backstop_process_mib,
                  "Tolerance per process on the GPU, in MiB (its context and modules, which the "
                  "CUDA shim does not count)")
      ->capture_default_str();
  cmd->add_option("--gpu-idle-percent", f->gpu_idle_percent,
                  "A pod that ran alone on a GPU and kept it busy less than this percentage of "
                  "the idle window is idle there: a GPUIdle Event and tessera_agent_pod_gpu_idle")
      ->capture_default_str();
  cmd->add_option("--gpu-idle-window", f->gpu_idle_window,
                  "How long a pod must be watched under --gpu-idle-percent to be called idle "
                  "(30m, 2h; 0 turns the rule off)")
      ->capture_default_str();
  cmd->add_option("--idle-reclaim-below-priority", f->idle_reclaim_below_priority,
                  "Evict pods found idle (--gpu-idle-percent, --gpu-idle-window) whose priority "
                  "is below this (a PriorityClass's value; pods without one have 0), through the "
                  "Eviction API (PodDisruptionBudgets honoured); static and DaemonSet pods are "
                  "never evicted. Unset: idle pods are only told (the default)")
      ->type_name("PRIORITY");

  auto c = std::make_shared<CompareFlags>();
  CLI::App* compare = cmd->add_subcommand(
      "compare",
      "The GPU check: compare an inventory (tessera agent --print-inventory) with what\n"
      "nvidia-smi -q and nvidia-smi topo -m print on the same machine: GPU count, and per GPU\n"
      "UUID, index, PCI bus id, memory, model, MIG mode, NUMA node, CPU affinity, and every\n"
      "pair's link. Prints a Markdown table. scripts/gpu_check.sh runs it.\n"
      "Exit status: 0 all agree, 1 a mismatch, 2 a file that cannot be read.");
  compare->add_option("--inventory", c->inventory, "The inventory JSON")->required();
  compare->add_option("--nvidia-smi-q", c->smi_q, "Saved output of nvidia-smi -q")->required();
  compare->add_option("--nvidia-smi-topo", c->smi_topo, "Saved output of nvidia-smi topo -m")
      ->required();
  AddOutputFlags(compare, &c->output, {"text", "json"}, "docs/operations.md");
  compare->callback([c, exit_code]() { *exit_code = RunCompare(*c); });

  auto u = std::make_shared<UninstallFlags>();
  CLI::App* uninstall = cmd->add_subcommand(
      "uninstall",
      "Removes the agents and everything they wrote on the nodes (the Helm chart's pre-delete\n"
      "hook; by hand: the same, before deleting the rest of deploy/). Deletes the agents'\n"
      "DaemonSet in the foreground and waits for its pods to end: each agent, started with\n"
      "--cleanup-on-delete, removes its node's annotations, labels, extended resources,\n"
      "ResourceSlices and host files as it stops. Then removes from every Node and ResourceSlice\n"
      "what an agent that could not run left (src/agent/uninstall.h).\n"
      "Exit status: 0 done (nodes whose agent did not end in time are listed), 1 the API server\n"
      "refused, 2 bad flags.");
  uninstall->add_option("--kubeconfig", u->kubeconfig,
                        "Kubeconfig file (default: in-cluster service account, else $KUBECONFIG "
                        "or ~/.kube/config)");
  uninstall->add_option("--context", u->context, "Kubeconfig context (default: current-context)");
  uninstall->add_option("--namespace", u->ns, "The agents' namespace")->required();
  uninstall->add_option("--daemonset", u->daemonset, "The agents' DaemonSet")->required();
  uninstall->add_option(
      "--dra-driver", u->dra_driver,
      "DRA mode: also delete every ResourceSlice of this driver (gpu.tessera.dev) "
      "that an agent left; classic mode: leave it out");
  uninstall->add_option("--timeout", u->timeout, "How long to wait for the agents to end")
      ->capture_default_str();
  AddOutputFlags(uninstall, &u->output, {"text", "json"}, "docs/operations.md");
  uninstall->callback([u, exit_code]() { *exit_code = RunUninstall(*u); });

  cmd->callback([f, compare, uninstall, exit_code]() {
    if (compare->parsed() || uninstall->parsed()) return;  // a subcommand ran
    *exit_code = RunAgent(*f);
  });
}

}  // namespace tessera::cli
