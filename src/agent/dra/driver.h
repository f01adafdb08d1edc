// The kubelet plugin's logic, without the gRPC (plugin_server.h serves it): prepare and unprepare
// ResourceClaims on this node, keep what is prepared across restarts, report device health.
//
// NodePrepareResources for a claim (idempotent: a claim already prepared is answered from the
// record, also after an agent restart):
//   1. read the ResourceClaim from the API server (its UID must be the one the kubelet asked
//      for: a claim deleted and created again under the same name is another claim), take the
//      allocation's results for this driver, each on this node's pool and a device it publishes;
//   2. check it against everything else prepared here: the driver is the last guard against one
//      device given to two unrelated claims (an allocator's bug, or a claim deleted while its pod
//      still runs and its device allocated again). A whole GPU, a MIG instance and shares of one
//      GPU exclude each other; shares of one GPU together stay within its memory and compute;
//   3. for shares: the shim's segments (src/shim/segments.h) in <claims dir>/<claim UID>; for a
//      MIG placement: its instance (mig.h: created through the GPU backend's MigReconfigurer,
//      or taken as it is when it is configured already);
//   4. the claim's CDI spec (claim_edits.h) in the node's CDI directory, then the checkpoint;
//   5. answer with each device's CDI ids.
// A failure names the claim, the device and what to do; the kubelet shows it in the pod's
// FailedPrepareDynamicResources event and retries.
//
// NodeUnprepareResources removes the record (checkpoint first), the spec and the segments, and
// destroys the MIG instances the driver created for the claim; a claim that is not prepared is
// not an error.
//
// Thread-safe: the kubelet calls in parallel; API reads happen outside the lock, the checks and
// writes under it, so two claims racing for one device are decided one after the other.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/discovery/discovery.h"
#include "agent/dra/checkpoint.h"
#include "agent/dra/claim_edits.h"
#include "agent/dra/pool.h"
#include "agent/procs/host_processes.h"
#include "nlohmann/json.hpp"
#include "shim/segments.h"

namespace tessera::agent::dra {

// Where ResourceClaims come from (the API server; tests give their own).
class ClaimSource {
 public:
  virtual ~ClaimSource() = default;
  // The ResourceClaim (resource.k8s.io/v1). NotFound when it does not exist.
  [[nodiscard]] virtual absl::StatusOr<nlohmann::json> GetClaim(const std::string& ns,
                                                                const std::string& name) = 0;
};

struct ClaimRef {
  std::string ns;
  std::string uid;
  std::string name;
};

struct DriverOptions {
  std::string node_name;
  std::string cdi_dir = "/var/run/cdi";
  std::string claims_dir = "/run/tessera/claims";  // host tmpfs: <claim UID>/{limits,ledger}
  std::string checkpoint_path;                     // required
  EditOptions edits;
  // Creates and destroys MIG instances (the GPU backend's; nullptr: a MIG claim is prepared only
  // on an instance configured already, e.g. by mig-parted).
  MigReconfigurer* mig = nullptr;
  // May put a GPU that is not in MIG mode into it for a MIG claim (nothing else is prepared on
  // it), and take it out again when its last instance goes. Off: such a claim is refused.
  bool mig_mode_switch = false;
  // Each claim's ledger folder is a tmpfs of the size of its ledgers, so that a container cannot
  // fill the host's /run through it (needs CAP_SYS_ADMIN, as the agent has).
  bool sized_ledger_folders = true;
};

struct DeviceHealthInfo {
  std::string device;
  bool healthy = true;
  std::string message;
};

// What Restore found and did, for the logs and the Node's event.
struct RestoreReport {
  int claims = 0;                // prepared claims known after the restore
  int specs_rewritten = 0;       // CDI specs of prepared claims that were missing
  int leaked_specs_removed = 0;  // specs of claims nobody prepared (a crash mid-way)
  int leaked_dirs_removed = 0;   // segment folders of claims nobody prepared
  std::string checkpoint_error;  // the checkpoint could not be read (then rebuilt from specs)
  std::string moved_to;          // where the unreadable checkpoint was moved
};

class DraDriver {
 public:
  DraDriver(ClaimSource& claims, DriverOptions options);

  // What discovery found and the pool published from it (the devices claims are allocated).
  void SetGpus(std::shared_ptr<const NodeGpus> gpus, std::shared_ptr<const Pool> pool);
  bool has_gpus() const;
  // The pool's name (the node's), for the health stream.
  std::string pool_name() const;

  // Once, after the first SetGpus and before serving: the checkpoint (or, if unreadable, the
  // claims' CDI specs), missing specs written again, leftovers of unfinished work removed.
  [[nodiscard]] absl::StatusOr<RestoreReport> Restore();

  struct ClaimAnswer {
    std::vector<PreparedDevice> devices;
    std::string error;  // non-empty: not prepared
  };
  // Keyed by claim UID; every claim asked is answered.
  std::map<std::string, ClaimAnswer> Prepare(const std::vector<ClaimRef>& claims);
  // Keyed by claim UID; "" for done.
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims);

  // Every published device's health; `version` changes whenever any of it does.
  std::vector<DeviceHealthInfo> Health(uint64_t* version) const;
  // Waits until the health version differs from `seen` or the timeout; true if it changed.
  bool WaitForHealthChange(uint64_t seen, std::chrono::milliseconds timeout) const;

  std::vector<PreparedClaim> Prepared() const;
  [[nodiscard]] absl::Status SetDeletionReported(const std::string& uid);
  // A claim's ledger that its pods' processes changed under the agent (put back by the reap).
  struct LedgerTampered {
    PreparedClaim claim;
    std::string gpu_uuid;
    std::string what;
  };
  // The shim's maintenance (contract.h): frees the ledger slots of dead processes; returns the
  // ledgers whose header or length was changed (at most one report per claim and GPU a minute).
  std::vector<LedgerTampered> ReapSegments();

  int64_t prepared_total() const { return prepared_total_.load(); }
  int64_t refused_total() const { return refused_total_.load(); }
  int64_t unprepared_total() const { return unprepared_total_.load(); }

 private:
  absl::StatusOr<PreparedClaim> Build(const ClaimRef& ref, const nlohmann::json& claim) const;
  std::string Conflict(const PreparedClaim& claim) const;    // under mu_
  absl::Status Materialize(PreparedClaim* claim);            // under mu_: segments, spec
  absl::Status WriteSpec(const PreparedClaim& claim) const;  // under mu_
  void RemoveFiles(const PreparedClaim& claim);              // under mu_
  absl::Status OpenSegments(const PreparedClaim& claim);     // under mu_
  absl::Status SaveCheckpoint();                             // under mu_
  // Under mu_: the claim's MIG instances, created when they do not exist (mig.h).
  absl::Status PrepareMig(PreparedClaim* claim);
  absl::Status PrepareMigDevice(const PreparedClaim& claim, PreparedDevice* device);
  // Under mu_: destroys the owned instances no prepared claim holds (the claim's own, once it is
  // no longer prepared; leftovers of a crash) and takes GPUs the driver put into MIG mode out of
  // it when they have no instance left. Best effort: failures are logged and retried at the next
  // unprepare or restart.
  void ReleaseMig();
  const DiscoveredGpu* FindGpuLocked(const std::string& uuid) const;
  void UpdateGpuLocked(const DiscoveredGpu& gpu);

  ClaimSource& claims_;
  DriverOptions options_;
  Checkpoint checkpoint_;
  mutable std::mutex mu_;
  mutable std::condition_variable health_cv_;
  std::shared_ptr<const NodeGpus> gpus_;
  std::shared_ptr<const Pool> pool_;
  uint64_t health_version_ = 0;
  std::vector<DeviceHealthInfo> health_;
  CheckpointState state_;  // the prepared claims (by UID), the owned MIG instances and modes
  std::map<std::string, std::vector<std::unique_ptr<shim::Segment>>> segments_;
  std::map<std::string, std::chrono::steady_clock::time_point> tamper_reported_;  // uid/GPU
  HostProcesses processes_;  // the host's /proc: host PIDs of the claims' ledger slots
  std::atomic<int64_t> prepared_total_{0}, refused_total_{0}, unprepared_total_{0};
};

// The consumed share of one allocation result, from its consumedCapacity ("4Gi", "25"), for a
// device with `device_memory_mib`: exclusive when it takes all of the memory (or the result has
// no consumed capacity: an allocator that does not share).
struct Consumption {
  bool exclusive = true;
  int64_t memory_mib = 0;
  int32_t compute_percent = 0;
};
[[nodiscard]] absl::StatusOr<Consumption> ConsumptionOf(const nlohmann::json& result,
                                                        int64_t device_memory_mib);

}  // namespace tessera::agent::dra
