// `tessera explain pod NS/NAME` (also `kubectl tessera explain pod ...`): why a pod waits, in one
// place. Thin: flags in, k8s/explain out.
#include "k8s/explain/explain.h"

#include <iostream>

#include "cli/cluster_access.h"
#include "cli/command.h"
#include "cli/output.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace tessera::cli {
namespace {

struct ExplainFlags {
  ClusterAccessFlags access;
  OutputFlags output;
  std::string pod;  // NS/NAME or NAME
  std::string ns;
  std::string scheduler_name = "tessera";
};

int Run(const ExplainFlags& f) {
  std::string ns = f.ns, name = f.pod;
  if (const size_t slash = f.pod.find('/'); slash != std::string::npos) {
    if (!f.ns.empty()) {
      std::cerr << "tessera explain: give the pod as NS/NAME or as NAME with -n NS, not both\n";
      return kExitBadInput;
    }
    ns = f.pod.substr(0, slash);
    name = f.pod.substr(slash + 1);
  }
  if (ns.empty() || name.empty() || name.find('/') != std::string::npos) {
    if (ns.empty() && !name.empty() && name.find('/') == std::string::npos) {
      // kubectl's default: the kubeconfig context's namespace.
      absl::StatusOr<k8s::ClientConfig> access = ResolveClusterAccess(f.access);
      if (access.ok()) ns = access->default_namespace;
    }
    if (ns.empty() || name.empty() || name.find('/') != std::string::npos) {
      std::cerr << "tessera explain: \"" << f.pod << "\" is not a pod: give NS/NAME, or NAME "
                << "with -n NS\n";
      return kExitBadInput;
    }
  }
  absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = ConnectToCluster(f.access);
  if (!client.ok()) {
    std::cerr << "tessera explain: " << client.status().message() << "\n";
    return kExitBadInput;
  }
  spdlog::set_level(spdlog::level::off);  // the ledger's restore messages are the scheduler's
  absl::StatusOr<k8s::ExplainInputs> in =
      k8s::GatherExplainInputs(**client, ns, name, f.scheduler_name);
  if (!in.ok()) {
    std::cerr << "tessera explain: " << in.status().message() << "\n";
    return in.status().code() == absl::StatusCode::kNotFound ? kExitBadInput : kExitFailure;
  }
  absl::StatusOr<k8s::PodExplanation> e = k8s::ExplainPod(*in);
  if (!e.ok()) {
    std::cerr << "tessera explain: " << e.status().message() << "\n";
    return kExitFailure;
  }
  if (f.output.json()) {
    std::cout << k8s::ExplanationToJson(*e).dump(2) << "\n";
  } else {
    std::cout << k8s::RenderExplanationText(*e);
  }
  return kExitOk;
}

}  // namespace

void AddExplainCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ExplainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "explain", "Why a pod waits, in one place: `tessera explain pod NS/NAME`.");
  cmd->require_subcommand(1);
  CLI::App* pod = cmd->add_subcommand(
      "pod",
      "Why this pod waits: the scheduler's reason (condition PodScheduled and the pod's\n"
      "Events), its queue and its position in the order the scheduler would try the waiting\n"
      "pods now, its preemption (nominated node, victims) or defragmentation plan, the\n"
      "scale-up template that would let it run, its gang's members; and where the scheduler\n"
      "wrote nothing, the engine's answer on the cluster as it stands (where it would go, or\n"
      "why it does not fit). Works for a user whose RBAC covers only the pod's namespace\n"
      "(less is shown, and it says what it could not read).\n"
      "Exit status: 0 explained, 1 the cluster could not be read, 2 bad flags or no such pod.");
  pod->add_option("POD", f->pod, "NS/NAME, or NAME with -n NS (default: the context's)")
      ->required();
  pod->add_option("-n,--namespace", f->ns, "The pod's namespace");
  pod->add_option("--scheduler-name", f->scheduler_name,
                  "The scheduler whose waiting pods and queues are counted")
      ->capture_default_str();
  AddClusterAccessFlags(pod, &f->access);
  AddOutputFlags(pod, &f->output);
  pod->callback([f, exit_code] { *exit_code = Run(*f); });
}

}  // namespace tessera::cli
