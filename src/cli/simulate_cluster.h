// `tessera simulate --from-cluster`, `--add-nodes`, `--save`: the cluster a scenario runs on when
// it is the live one (a snapshot: nodes with their inventories, bound pods with what they hold),
// or a cluster file, with nodes of a built-in profile added, written out as a cluster file if
// asked (so a snapshot can be replayed and shared: `--cluster saved.yaml`).
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "cli/cluster_access.h"
#include "sim/cluster_file.h"

namespace tessera::cli {

struct ClusterSourceFlags {
  bool from_cluster = false;
  ClusterAccessFlags access;
  std::vector<std::string> add_nodes;  // "PROFILE:N"
  std::string save;
  int page_size = 500;
};

void AddClusterSourceFlags(CLI::App* cmd, ClusterSourceFlags* flags);

// The cluster to simulate: the live cluster's snapshot (flags.from_cluster) or `cluster_file`,
// plus --add-nodes; written to --save when given. `source` names it in messages ("the cluster at
// https://..." or the path); what the snapshot could not account is told on stderr. A cluster
// that cannot be read is Unavailable; bad flags or files are InvalidArgument.
[[nodiscard]] absl::StatusOr<sim::ClusterFile> PrepareCluster(const ClusterSourceFlags& flags,
                                                              const std::string& cluster_file,
                                                              std::string* source);

}  // namespace tessera::cli
