// The one `tessera` binary.
#include <string_view>

#include "cli/command.h"
#include "cli/version.h"

int main(int argc, char** argv) {
  CLI::App app(
      "tessera: workload-aware GPU allocation for Kubernetes (fractional GPUs, topology-aware\n"
      "placement, gangs). Run a subcommand with --help for its flags.",
      "tessera");
  // Installed as the kubectl plugin too: `kubectl tessera status` runs `kubectl-tessera status`.
  if (std::string_view a0 = argv[0]; a0.substr(a0.rfind('/') + 1) == "kubectl-tessera") {
    app.name("kubectl tessera");
  }
  app.require_subcommand(1);
  app.set_version_flag("--version", tessera::cli::VersionLine());
  int exit_code = tessera::cli::kExitOk;
  tessera::cli::AddSimulateCommand(app, &exit_code);
  tessera::cli::AddTopoCommand(app, &exit_code);
  tessera::cli::AddSchedulerCommand(app, &exit_code);
  tessera::cli::AddAgentCommand(app, &exit_code);
  tessera::cli::AddPlanCommand(app, &exit_code);
  tessera::cli::AddStatusCommand(app, &exit_code);
  tessera::cli::AddDoctorCommand(app, &exit_code);
  tessera::cli::AddExplainCommand(app, &exit_code);
  return tessera::cli::Run(app, argc, argv, &exit_code);
}
