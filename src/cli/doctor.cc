// `tessera doctor` (also `kubectl tessera doctor`): the preflight of a cluster (from its API
// server) or of a node (where the agent runs). Thin: flags in, k8s/doctor and agent/doctor out.
#include <iostream>

#include "agent/doctor/node_checks.h"
#include "cli/cluster_access.h"
#include "cli/command.h"
#include "cli/output.h"
#include "common/strings.h"
#include "k8s/doctor/cluster_checks.h"
#include "spdlog/spdlog.h"

namespace tessera::cli {
namespace {

struct DoctorFlags {
  ClusterAccessFlags access;
  OutputFlags output;
  k8s::ClusterCheckOptions cluster;
  agent::NodeCheckOptions node;
};

int Report(const k8s::DoctorReport& r, const OutputFlags& output) {
  if (output.json()) {
    std::cout << k8s::DoctorToJson(r).dump(2) << "\n";
  } else {
    std::cout << k8s::RenderDoctorText(r);
  }
  return r.errors() > 0 ? kExitProblemsFound : kExitOk;
}

int RunCluster(const DoctorFlags& f) {
  absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = ConnectToCluster(f.access);
  if (!client.ok()) {
    std::cerr << "tessera doctor: " << client.status().message() << "\n";
    return kExitBadInput;
  }
  absl::StatusOr<k8s::ClusterFacts> facts = k8s::GatherClusterFacts(**client, f.cluster);
  if (!facts.ok()) {
    std::cerr << "tessera doctor: cannot read the cluster at " << (*client)->config().server << " ("
              << (*client)->config().source << "): " << facts.status().message() << "\n";
    return kExitFailure;
  }
  return Report(k8s::CheckCluster(*facts, f.cluster), f.output);
}

}  // namespace

void AddDoctorCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<DoctorFlags>();
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "Preflight checks, each finding with what is wrong, why it matters and the command or value\n"
      "that fixes it. `tessera doctor` (or `doctor cluster`) reads the API server: the Kubernetes\n"
      "version and DRA API and feature gates the mode needs, tessera's namespace and its\n"
      "PodSecurity label, the scheduler's and agent's pods and whether their images differ,\n"
      "another device plugin advertising nvidia.com/gpu on tessera's nodes, GPU nodes without\n"
      "an inventory. `tessera doctor node` runs where the agent runs (the host, or the agent's\n"
      "pod): NVML and the GPUs, device nodes, the driver's libraries, the NRI socket (classic)\n"
      "or the CDI folder and kubelet plugin registry (DRA), cgroup v2.\n"
      "Exit status: 0 no errors (warnings may be shown), 1 the cluster could not be read,\n"
      "2 bad flags, 4 errors found.");
  cmd->require_subcommand(0, 1);
  AddClusterAccessFlags(cmd, &f->access);
  AddOutputFlags(cmd, &f->output);
  auto cluster_flags = [f](CLI::App* c) {
    c->add_option("--namespace", f->cluster.ns, "The namespace tessera is installed in")
        ->capture_default_str();
    c->add_option("--mode", f->cluster.mode,
                  "classic, dra, or auto (dra when tessera's DeviceClasses or ResourceSlices "
                  "exist)")
        ->check(CLI::IsMember({"auto", "classic", "dra"}))
        ->capture_default_str();
    c->add_option("--driver", f->cluster.driver, "The DRA driver's name")->capture_default_str();
  };
  cluster_flags(cmd);
  CLI::App* cluster = cmd->add_subcommand("cluster", "The cluster's checks (the default)");
  AddClusterAccessFlags(cluster, &f->access);
  AddOutputFlags(cluster, &f->output);
  cluster_flags(cluster);
  cluster->callback([f, exit_code] { *exit_code = RunCluster(*f); });

  CLI::App* node = cmd->add_subcommand(
      "node",
      "This node's checks, with the agent's flags (give the same values the agent runs with)");
  AddOutputFlags(node, &f->output);
  agent::NodeCheckOptions& n = f->node;
  node->add_option("--node-name", n.node_name, "The node's name, for the report");
  node->add_option("--mode", n.mode, "classic (NRI delivery) or dra (kubelet plugin, CDI)")
      ->check(CLI::IsMember({"classic", "dra"}))
      ->capture_default_str();
  node->add_option("--gpus-file", n.gpus_file, "A test node's GPU description file, not NVML");
  node->add_option("--nvml-library", n.nvml_library, "The NVML library the agent loads")
      ->capture_default_str();
  node->add_option("--dev-dir", n.dev_dir, "Where the GPU device nodes are")->capture_default_str();
  node->add_option("--driver-lib-dir", n.driver.driver_lib_dirs,
                   "Folders with libcuda.so.1 and libnvidia-ml.so.1 (repeatable; default: the "
                   "agent's)");
  node->add_option("--host-root", n.driver.host_root, "Where the host's / is seen (e.g. /host)");
  node->add_option("--nri-socket", n.nri_socket, "The runtime's NRI socket")->capture_default_str();
  node->add_flag("--no-nri", n.no_nri, "The agent runs with --no-nri: skip the NRI check");
  node->add_option("--cdi-dir", n.cdi_dir, "DRA: where the runtime reads CDI specs")
      ->capture_default_str();
  node->add_option("--kubelet-dir", n.kubelet_dir, "DRA: the kubelet's root directory")
      ->capture_default_str();
  node->add_option("--cgroup-root", n.cgroup_root, "The cgroup mount")->capture_default_str();
  node->callback([f, exit_code] {
    spdlog::set_level(spdlog::level::warn);
    *exit_code = Report(agent::CheckNode(f->node), f->output);
  });

  cmd->callback([f, cmd, exit_code] {
    if (!cmd->get_subcommands().empty()) return;  // node or cluster ran
    *exit_code = RunCluster(*f);
  });
}

}  // namespace tessera::cli
