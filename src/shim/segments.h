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
#include <memory>
#include <optional>
#include <string>
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
};

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
  std::vector<ProcessUsage> processes;
};

struct ReapResult {
  uint32_t slots = 0;     // slots of dead processes (and of shared allocations no one holds) freed
  uint64_t bytes = 0;     // what they held
  uint32_t resolved = 0;  // host PIDs newly filled in
};

// One open segment (the agent holds one per pod and shared GPU while the pod runs).
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

  SegmentInfo Inspect() const;
  // Frees the slots of dead processes (memory a SIGKILLed process held comes back at once) and
  // fills in the host PIDs of live ones from proc_root (the host's /proc).
  ReapResult Reap(const std::string& proc_root = "/proc");

  const LimitsMap& limits() const { return *limits_; }
  Ledger& ledger() { return *ledger_; }

 private:
  Segment() = default;
  std::string pod_dir_;
  std::string gpu_uuid_;
  std::unique_ptr<LimitsMap> limits_;
  std::unique_ptr<Ledger> ledger_;
};

// The GPU UUIDs that have segments in a pod dir.
absl::StatusOr<std::vector<std::string>> ListSegments(const std::string& pod_dir);
// The pod dirs under a root (kHostPodsDir), for an agent that restarted.
absl::StatusOr<std::vector<std::string>> ListPodDirs(const std::string& root);
// Pod end: removes the pod dir's segment files and directories. Missing is not an error.
absl::Status RemovePodSegments(const std::string& pod_dir);

// The host PID of the process whose PID namespace has inode `pidns_inode` and whose PID in it
// is `ns_pid`, found in proc_root (/proc/<pid>/ns/pid and the NSpid line of /proc/<pid>/status).
std::optional<uint32_t> ResolveHostPid(uint64_t pidns_inode, uint32_t ns_pid,
                                       const std::string& proc_root = "/proc");

}  // namespace tessera::shim
