// The agent's side of the shim contract (contract.h): the files that carry one share (one pod on
// one GPU) into the pod's containers. The agent creates them at pod start, keeps them open while
// the pod runs (reap, controller), updates limits live, and removes them at pod end.
//
//   <pod dir>/limits/<GPU-UUID>.limits   mounted read-only into the pod's containers
//   <pod dir>/ledger/<GPU-UUID>.ledger   mounted read-write
//
// Formats: segment_format.h and src/shim/README.md. Worked example (a 4 GiB, 30% share):
//   SegmentOptions opt{.pod_uid = "8d1c...", .limits = {.memory_limit_bytes = 4ULL << 30,
//                      .compute_limit_permille = 300}};
//   auto seg = Segment::Create("/run/tessera/pods/8d1c...", "GPU-6f1c...", opt);
//   ... every 250 ms: (*seg)->Reap();   at pod end: RemovePodSegments(pod dir).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shim/ledger.h"
#include "shim/limits.h"

namespace tessera::shim {

struct SegmentPaths {
  std::string limits;
  std::string ledger;
};
SegmentPaths PathsFor(const std::string& pod_dir, const std::string& gpu_uuid);

struct SegmentOptions {
  std::string pod_uid;
  ShareLimits limits;
  uint32_t slots = kDefaultLedgerSlots;  // the most processes of the pod using this GPU at once
  // > 0: the pod's ledger folder is a tmpfs of this size (all its ledgers: LedgerFolderBytes),
  // so that a container growing its ledger (the one file it can write) fills that and never the
  // host's /run. 0: a plain folder (tests without CAP_SYS_ADMIN).
  uint64_t ledger_folder_bytes = 0;
};

// The size of a ledger folder for `ledgers` ledgers of `slots` slots: the files, in pages.
uint64_t LedgerFolderBytes(uint32_t ledgers, uint32_t slots);

struct ProcessUsage {
  uint32_t slot = 0;
  uint32_t pid = 0;  // in the process's own PID namespace
  uint64_t pidns_inode = 0;
  uint32_t host_pid = 0;  // 0: not resolved
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  bool alive = false;
};

// What a segment says now.
struct SegmentInfo {
  std::string gpu_uuid;
  std::string pod_uid;
  ShareLimits limits;
  uint32_t duty_permille = 0;
  uint32_t phase_permille = 0;
  uint32_t slots = 0;
  uint64_t used_bytes = 0;    // the pod's usage: its processes' and shared allocations'
  uint64_t shared_bytes = 0;  // of which allocations several processes hold (not in processes)
  uint64_t peak_used_bytes = 0;
  uint64_t oom_count = 0;
  uint64_t reclaimed_slots = 0;
  uint64_t reclaimed_bytes = 0;
  uint64_t gate_wait_ns = 0;
  uint64_t gated_launches = 0;
  // What the pod's shims measured their work taking on the GPU (LedgerHeader::gpu_busy_ns):
  // the pod wrote it, so a figure to check, not to trust.
  uint64_t gpu_busy_ns = 0;
  std::vector<ProcessUsage> processes;
};

struct ReapResult {
  uint32_t slots = 0;     // slots of dead processes (and of shared allocations no one holds) freed
  uint64_t bytes = 0;     // what they held
  uint32_t resolved = 0;  // host PIDs newly filled in
  // Non-empty when the ledger's header or length was changed under the agent (by the pod's own
  // processes, the only other writers): what changed. The validated header was put back.
  std::string tampered;
};

// The host PID of the process that is `ns_pid` in the PID namespace whose inode is `pidns_inode`;
// nullopt when there is none (or, for the agent, when it is not a process of the segment's pod).
using HostPidLookup = std::function<std::optional<uint32_t>(uint64_t pidns_inode, uint32_t ns_pid)>;

// One open segment (the agent holds one per pod and shared GPU while the pod runs).
//
// The ledger is written by the pod's processes, so everything the agent reads from it is
// untrusted: the agent maps it as an observer (Ledger::Observe: no symlink, a regular file it
// owns, the length its header names), bounds every index by the header it validated then, reads
// it inside a SIGBUS guard (a container may truncate the file at any moment), and at each Reap
// compares the header with the validated one and puts it back if it changed (ReapResult::tampered
// says what changed, for the pod's Event and the agent's metric).
class Segment {
 public:
  // Pod start. Creates the directories and both files. If the segment exists (an agent that
  // restarted replays a pod start), it is opened and its limits are updated instead.
  static absl::StatusOr<std::unique_ptr<Segment>> Create(const std::string& pod_dir,
                                                         const std::string& gpu_uuid,
                                                         const SegmentOptions& options);
  static absl::StatusOr<std::unique_ptr<Segment>> Open(const std::string& pod_dir,
                                                       const std::string& gpu_uuid);

  const std::string& gpu_uuid() const { return gpu_uuid_; }
  const std::string& pod_dir() const { return pod_dir_; }

  // A live resize: the shims read the new limits on their next decision. Shrinking the memory
  // cap below what the pod holds refuses further allocations; nothing already held is taken.
  absl::Status Update(const ShareLimits& limits);
  // The compute controller's command.
  void SetSchedule(uint32_t duty_permille, uint32_t phase_permille);

  // What the segment says now. Read inside a SIGBUS guard: a ledger truncated meanwhile reads
  // as what was read before the fault (the next Reap puts its length back).
  SegmentInfo Inspect() const;
  // Only the pod's LedgerHeader::gpu_busy_ns (what its shims measured their work taking), read
  // inside a SIGBUS guard; nullopt when the file was truncated under the read. The pod writes
  // it: the caller checks it (agent/pods/usage_meter.h).
  std::optional<uint64_t> GpuBusyNs() const;
  // Frees the slots of dead processes (memory a SIGKILLed process held comes back at once) and
  // resolves the host PIDs of live ones through `lookup`, keeping them in the agent's own memory
  // (Inspect reports those, never the host_pid a slot claims: the pod's processes write slots).
  // A slot's identity (PID and namespace) is resolved again only when it changes.
  ReapResult Reap(const HostPidLookup& lookup);
  // The same with a lookup that scans proc_root (the host's /proc) once, when a slot needs it.
  ReapResult Reap(const std::string& proc_root = "/proc");

  const LimitsMap& limits() const { return *limits_; }
  Ledger& ledger() { return *ledger_; }

 private:
  Segment() = default;
  // Opens the ledger, putting back a header the pod's processes broke while no agent watched it
  // (`slots`: the slot count it must have then); what was put back goes to pending_tampered_.
  static std::unique_ptr<Ledger> ObserveLedger(int ledger_dir_fd, const std::string& name,
                                               const std::string& path, const std::string& uuid,
                                               uint32_t slots, std::string* tampered,
                                               std::string* error);
  std::string CheckAndRestoreHeader();
  std::string pod_dir_;
  std::string gpu_uuid_;
  std::unique_ptr<LimitsMap> limits_;
  std::unique_ptr<Ledger> ledger_;
  std::string pending_tampered_;  // found at open, reported by the first Reap
  struct Resolved {
    uint32_t pid = 0;
    uint64_t pidns_inode = 0;
    uint32_t host_pid = 0;  // 0: looked up and not found
    int retry_in = 0;       // reaps until an identity not found is looked up again
  };
  static constexpr int kLookupRetryReaps = 8;
  std::map<uint32_t, Resolved> resolved_;  // by slot: what Reap resolved for its identity
};

// The GPU UUIDs that have segments in a pod dir.
absl::StatusOr<std::vector<std::string>> ListSegments(const std::string& pod_dir);
// The pod dirs under a root (kHostPodsDir), for an agent that restarted.
absl::StatusOr<std::vector<std::string>> ListPodDirs(const std::string& root);
// Pod end: removes the pod dir's segment files and directories (the ledger folder's tmpfs
// unmounted first). Missing is not an error.
absl::Status RemovePodSegments(const std::string& pod_dir);

// The NSpid line of the text of /proc/<pid>/status: the process's PID in each PID namespace from
// the reader's down to its own (the last: its PID in its own namespace). Empty when there is none
// or it is malformed.
std::vector<uint32_t> ParseNsPids(std::string_view proc_pid_status);

// Host PIDs by (PID namespace inode, PID in that namespace), from one scan of proc_root
// (/proc/<pid>/ns/pid and the NSpid line of /proc/<pid>/status), made on the first Find.
class HostPidIndex {
 public:
  explicit HostPidIndex(std::string proc_root = "/proc") : proc_root_(std::move(proc_root)) {}
  std::optional<uint32_t> Find(uint64_t pidns_inode, uint32_t ns_pid);
  bool scanned() const { return scanned_; }

 private:
  std::string proc_root_;
  bool scanned_ = false;
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> pids_;
};

// One Find of a fresh HostPidIndex.
std::optional<uint32_t> ResolveHostPid(uint64_t pidns_inode, uint32_t ns_pid,
                                       const std::string& proc_root = "/proc");

}  // namespace tessera::shim
