// Uninstalling the agent leaves nothing on the nodes (docs/operations.md, "Uninstall"):
//
//   - on the Node objects: the annotations tessera.dev/gpu-inventory and tessera.dev/agent-labels,
//     the labels the agent owns (tessera.dev/gpu-model, -gpu-count, -nvlink-domain), tessera's
//     extended resources in capacity and allocatable (publish/advertisement.h, WithdrawNode), and
//     in DRA mode the ResourceSlices of the driver;
//   - on the hosts: the folders the agent made (per-pod files, the installed CUDA shim, MPS
//     daemons' folders, the DRA claims' files and the kubelet plugin's folder) and the CDI specs
//     of prepared claims.
//
// Who does what. A restarting agent (an upgrade, a crash) must keep all of it: running pods use
// the files and the scheduler reads the Node. So the agent removes its host footprint only when it
// stops because its DaemonSet is going (`tessera agent --cleanup-on-delete NS/NAME`: on SIGTERM,
// the DaemonSet is gone or has a deletionTimestamp). The chart's pre-delete hook (`tessera agent
// uninstall`, UninstallAgents) makes that ordering certain: it deletes the DaemonSet first, in the
// foreground, and waits for its pods to end (each cleaning its node) before Helm deletes the
// ServiceAccounts and roles those pods need; then it sweeps every Node and ResourceSlice, so that
// a node whose agent could not clean (down, unreachable) keeps nothing in the API either.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "k8s/client/http.h"

namespace tessera::agent {

// True when the DaemonSet `ns/name` is gone or being deleted.
[[nodiscard]] absl::StatusOr<bool> DaemonSetLeaving(k8s::ApiClient& client, const std::string& ns,
                                                    const std::string& name);

// Removes from Node `node` what the agent wrote (WithdrawNode); what it removed is appended to
// `changes`. A node that is gone is nothing to do.
[[nodiscard]] absl::Status WithdrawNodeObject(k8s::ApiClient& client, const std::string& node,
                                              std::vector<std::string>* changes);

// Deletes the ResourceSlices of `driver` (on `node`, or on every node when empty); returns how
// many.
[[nodiscard]] absl::StatusOr<int> DeleteDriverSlices(k8s::ApiClient& client,
                                                     const std::string& driver,
                                                     const std::string& node);

// What the agent made on its host.
struct HostFootprint {
  std::vector<std::string> dirs;   // removed with everything in them
  std::string cdi_dir;             // with cdi_prefix: spec files removed
  std::string cdi_prefix;          // "k8s.gpu.tessera.dev-gpu_"
  std::vector<std::string> files;  // single files (the kubelet plugin's registration socket)
};
// Removes it, and the folders its `dirs` leave empty above them (never a mount point, never one
// less than two levels deep); what it removed is appended to `removed`. Missing paths are nothing
// to do. A pod's sized ledger folder (a tmpfs) is unmounted first; trees go through descriptors,
// never following a symlink (shim/files_at.h).
[[nodiscard]] absl::Status RemoveHostFootprint(const HostFootprint& footprint,
                                               std::vector<std::string>* removed);

struct UninstallOptions {
  std::string ns;         // the release namespace
  std::string daemonset;  // the agent's DaemonSet
  // DRA mode: the driver whose ResourceSlices are swept; empty (classic mode) sweeps none, so the
  // hook needs no access to resource.k8s.io there.
  std::string driver;
  std::chrono::milliseconds timeout{120'000};  // for the agents' pods to end
  std::chrono::milliseconds poll{1'000};
};
struct UninstallReport {
  int pods_waited = 0;                    // agent pods that were running
  bool pods_gone = false;                 // all ended within the timeout
  std::vector<std::string> node_changes;  // "node/NAME: label ...: removed", from the sweep
  int slices_deleted = 0;
};
// The chart's pre-delete hook: deletes the agents' DaemonSet in the foreground, waits for its pods
// to end, then removes what any agent left in the API (every Node, and with options.driver every
// slice of that driver).
[[nodiscard]] absl::StatusOr<UninstallReport> UninstallAgents(
    k8s::ApiClient& client, const UninstallOptions& options,
    const std::function<void(const std::string&)>& log);

}  // namespace tessera::agent
