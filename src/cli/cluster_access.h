// How the user-facing commands that read a cluster (`tessera status`, `tessera simulate
// --from-cluster`) find it: kubectl's order (--kubeconfig, then $KUBECONFIG or ~/.kube/config),
// then the pod's own service account when run inside a cluster.
#pragma once

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"

namespace tessera::cli {

struct ClusterAccessFlags {
  std::string kubeconfig;
  std::string context;
};

// Adds --kubeconfig and --context to `cmd`.
void AddClusterAccessFlags(CLI::App* cmd, ClusterAccessFlags* flags);

// The API server to talk to, or an error saying how to name one.
[[nodiscard]] absl::StatusOr<k8s::ClientConfig> ResolveClusterAccess(const ClusterAccessFlags& f);

// A client for it (no request is made yet).
[[nodiscard]] absl::StatusOr<std::unique_ptr<k8s::ApiClient>> ConnectToCluster(
    const ClusterAccessFlags& f);

}  // namespace tessera::cli
