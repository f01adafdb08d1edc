// The pods this node serves, and everything the agent keeps for them on the host while they run:
//   - <pods dir>/<pod UID>/assignment.json, the record mounted into the containers;
//   - for a share enforced by the CUDA shim, one segment per shared GPU (src/shim/segments.h:
//     <pod dir>/limits/<UUID>.limits and ledger/<UUID>.ledger), reaped and run by the compute
//     controller every 250 ms (Maintain) while the pod runs;
//   - for an MPS share, the GPU's MPS control daemon (src/agent/mps), started with the first MPS
//     pod on the GPU, its ceilings the largest share there, stopped with the last;
//   - for a MIG grant whose record carries a plan, the plan carried out (idle instances destroyed,
//     the pod's instance created) before the first container starts.
// Prepare is called for every container the runtime creates (NRI) and returns the container edits
// (edits/container_edits.h, from the pod's ContainerGrantOf); it is idempotent: the
// second container of a pod, or the same pod after an agent restart, gets the same edits and the
// files already there. Release (the pod sandbox is removed) undoes all of it; Synchronize (the
// runtime's list after a (re)connection) releases the pods that are gone, including those whose
// files a previous agent left, and takes back the running ones (segments reopened, MPS daemons
// adopted), so a restarted agent keeps reaping and serving.
//
// Rules it keeps: a GPU serves MPS pods or shim pods, never both at once (MPS puts the GPU in
// EXCLUSIVE_PROCESS mode); a MIG plan never destroys an instance a running pod holds; nothing is
// given twice: a whole GPU or a MIG instance held by one pod, or more than a GPU's memory and
// compute in shares, is refused to the next record that asks for it (a record written by someone
// other than the scheduler, which admission should have stopped, gets nothing another pod has).
//
// Thread-safe: the runtime's calls, the maintenance loop and the metrics reader may come from
// different threads (one mutex; nothing in it waits on the network).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/discovery/discovery.h"
#include "agent/edits/container_edits.h"
#include "agent/mps/mps_control.h"
#include "agent/pods/grant.h"
#include "shim/compute_controller.h"
#include "shim/segments.h"

namespace tessera::agent {

struct PodManagerOptions {
  std::string node_name;
  std::string pods_dir = "/run/tessera/pods";  // host: <pod UID>/{assignment.json,limits,ledger}
  EditsOptions edits;                          // devices, driver libraries
  mps::MpsOptions mps;
  uint32_t ledger_slots = shim::kDefaultLedgerSlots;
  std::string proc_root = "/proc";  // the host's, for the reaper's host PIDs
};

// What the agent has granted on one GPU, for /metrics.
struct GpuUse {
  int32_t index = 0;
  std::string uuid;
  bool healthy = true;
  std::string mps;  // "running" when its MPS daemon is, else empty
  struct Pod {
    std::string ns, name, uid;
    Sharing sharing = Sharing::kNone;
    bool exclusive = false;
    std::string mig;  // "1g.10gb@0" for a MIG instance
    int64_t memory_mib = 0;
    int32_t compute_milli = 0;
    int64_t used_bytes = -1;  // what the pod's processes hold (shim shares), -1 unknown
    uint64_t oom_count = 0;
    uint32_t processes = 0;
  };
  std::vector<Pod> pods;
};

class PodManager {
 public:
  // `mig` (optional) carries out MIG plans; `utilization` (optional) feeds the compute
  // controller (without it the shims' windows stay at the caps).
  PodManager(PodManagerOptions options, MigReconfigurer* mig = nullptr,
             shim::UtilizationSource* utilization = nullptr);
  ~PodManager();

  void SetGpus(std::shared_ptr<const NodeGpus> gpus);
  // The driver and shim libraries changed (found again).
  void SetDriver(DriverLibraries driver);

  // The container edits for `pod`: nullopt for a pod without a record (it gets no GPU), or an
  // error that says why its record cannot be honoured here.
  [[nodiscard]] absl::StatusOr<std::optional<ContainerEdits>> Prepare(const PodRef& pod);
  // The pod is gone: its files, segments and its share of an MPS daemon go.
  void Release(const std::string& uid);
  // The pods the runtime has: the others are released (and files left by an earlier agent
  // removed); running ones this agent does not know yet are taken back.
  void Synchronize(const std::vector<PodRef>& live);

  // One maintenance step: reap every segment, run the compute controller on GPUs with compute
  // shares. Called every shim::contract::kMaintenanceIntervalMs by RunMaintenance.
  void Maintain();
  void RunMaintenance(const std::atomic<bool>& stop);

  std::vector<GpuUse> Use() const;
  int64_t prepared() const { return prepared_.load(); }
  int64_t refused() const { return refused_.load(); }
  int64_t reaped_slots() const { return reaped_slots_.load(); }
  size_t pod_count() const;

 private:
  struct Prepared {
    PodGrant grant;
    ContainerEdits edits;
    std::vector<std::unique_ptr<shim::Segment>> segments;
  };
  absl::StatusOr<std::optional<ContainerEdits>> PrepareLocked(const PodRef& pod);
  // The node's own check of a record (a defence against records the scheduler did not write):
  // nothing of the grant is held by another pod here, whole GPUs and MIG instances go to one pod,
  // and the shares of a GPU fit its memory and compute.
  absl::Status CheckNotGivenLocked(const PodGrant& grant) const;
  // Carries out the grant's MIG plan when its instance does not exist yet.
  absl::Status CarryOutMigPlan(PodGrant* grant);
  absl::StatusOr<mps::ContainerEdits> JoinMps(const PodGrant& grant);
  void ReleaseLocked(const std::string& uid);
  void StopIdleMpsLocked();

  PodManagerOptions options_;
  MigReconfigurer* mig_;
  shim::UtilizationSource* utilization_;
  mutable std::mutex mu_;
  std::shared_ptr<const NodeGpus> gpus_;
  std::map<std::string, Prepared> pods_;                        // by pod UID
  std::map<std::string, std::unique_ptr<mps::MpsDaemon>> mps_;  // by GPU UUID
  shim::ComputeController controller_;
  std::set<std::string> controller_errors_;  // GPUs whose utilisation failed (logged once)
  std::atomic<int64_t> prepared_{0}, refused_{0}, reaped_slots_{0};
};

// A pod UID (a UUID: 8-4-4-4-12 hex digits), the only names made and removed under pods_dir.
bool ValidPodUid(std::string_view uid);

}  // namespace tessera::agent
