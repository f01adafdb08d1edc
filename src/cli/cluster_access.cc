#include "cli/cluster_access.h"

#include "common/status.h"
#include "common/strings.h"

namespace tessera::cli {

void AddClusterAccessFlags(CLI::App* cmd, ClusterAccessFlags* flags) {
  cmd->add_option("--kubeconfig", flags->kubeconfig,
                  "Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the pod's "
                  "service account when run in a cluster)");
  cmd->add_option("--context", flags->context, "Kubeconfig context (default: current-context)");
}

absl::StatusOr<k8s::ClientConfig> ResolveClusterAccess(const ClusterAccessFlags& f) {
  return k8s::ResolveClientConfig(f.kubeconfig, f.context, k8s::ConfigSearch::kKubeconfigFirst);
}

absl::StatusOr<std::unique_ptr<k8s::ApiClient>> ConnectToCluster(const ClusterAccessFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(k8s::ClientConfig config, ResolveClusterAccess(f));
  k8s::ApiClientOptions options;
  options.user_agent = "tessera-cli/0.1.0";
  options.max_attempts = 3;
  return k8s::ApiClient::Create(std::move(config), options);
}

}  // namespace tessera::cli
