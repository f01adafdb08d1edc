#include "cli/simulate_cluster.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "absl/strings/numbers.h"
#include "cli/snapshot_file.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/profiles.h"
#include "k8s/snapshot/snapshot.h"
#include "spdlog/spdlog.h"

namespace tessera::cli {
namespace {

// Writes `text` to `path` through a temporary file beside it and a rename, so an interrupted
// write never leaves half a file under the name.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InvalidArgumentError(StrCat("--save: cannot write ", tmp));
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::InvalidArgumentError(StrCat("--save: writing ", tmp, " failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InvalidArgumentError(StrCat("--save: cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::Status AddNodes(const std::vector<std::string>& specs, sim::ClusterFile* file) {
  for (const std::string& spec : specs) {
    const size_t colon = spec.rfind(':');
    int count = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(spec.substr(colon + 1), &count) || count < 1) {
      return absl::InvalidArgumentError(StrCat("--add-nodes \"", spec,
                                               "\": expected PROFILE:N with N >= 1 (profiles: ",
                                               StrJoin(core::ProfileNames(), ", "), ")"));
    }
    absl::Status st = sim::AddProfileNodes(file, spec.substr(0, colon), count);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          StrCat("--add-nodes \"", spec, "\": ", FromAbsl(st.message())));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void AddClusterSourceFlags(CLI::App* cmd, ClusterSourceFlags* flags) {
  cmd->add_flag("--from-cluster", flags->from_cluster,
                "Start from the live cluster instead of --cluster: its nodes with their GPU "
                "inventories, cordoned nodes, and every bound pod holding what it holds now (one "
                "list of nodes and one of pods). Needs --workload, or --save alone to only write "
                "the snapshot");
  AddClusterAccessFlags(cmd, &flags->access);
  cmd->add_option("--add-nodes", flags->add_nodes,
                  StrCat("Add N nodes of a built-in profile to the cluster, PROFILE:N (repeatable; "
                         "profiles: ",
                         StrJoin(core::ProfileNames(), ", "), ")"))
      ->take_all();
  cmd->add_option("--save", flags->save,
                  "Write the cluster simulated (the snapshot with --from-cluster, added nodes "
                  "included) as a cluster file, to replay it later with --cluster");
}

absl::StatusOr<sim::ClusterFile> PrepareCluster(const ClusterSourceFlags& flags,
                                                const std::string& cluster_file,
                                                std::string* source) {
  sim::ClusterFile file;
  if (flags.from_cluster) {
    absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = ConnectToCluster(flags.access);
    if (!client.ok()) return absl::InvalidArgumentError(client.status().message());
    *source = StrCat("the cluster at ", (*client)->config().server);
    // The ledger's restore messages are for the scheduler's log; problems are told below.
    spdlog::set_level(spdlog::level::off);
    k8s::SnapshotOptions so;
    so.page_size = flags.page_size;
    absl::StatusOr<k8s::ClusterSnapshot> snapshot = k8s::ReadSnapshot(**client, so);
    if (!snapshot.ok()) {
      return absl::UnavailableError(StrCat("cannot read ", *source, " (",
                                           (*client)->config().source,
                                           "): ", FromAbsl(snapshot.status().message())));
    }
    std::vector<k8s::SnapshotProblem> problems;
    file = SnapshotToClusterFile(*snapshot, k8s::LedgerOptions{}, &problems);
    for (const k8s::SnapshotProblem& p : problems) {
      std::cerr << "tessera simulate: " << p.object << ": " << p.message << "\n";
    }
  } else {
    *source = cluster_file;
    TESSERA_ASSIGN_OR_RETURN(file, sim::LoadClusterFile(cluster_file));
  }
  TESSERA_RETURN_IF_ERROR(AddNodes(flags.add_nodes, &file));
  if (!flags.save.empty()) {
    TESSERA_RETURN_IF_ERROR(WriteFileAtomically(flags.save, sim::ClusterFileToYaml(file)));
  }
  return file;
}

}  // namespace tessera::cli
