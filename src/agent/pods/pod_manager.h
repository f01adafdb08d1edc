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
// adopted), so a restarted agent keeps reaping and serving. A running pod is taken back even where
// the node's accounting says its GPU is given twice or over-committed (typically a pod that ended
// and whose share is not yet given back, counted beside the pod the scheduler placed in its room):
// it already holds what it was given, so its share stays enforced as assigned, the over-commit is
// logged and told to the pod (a notice, GPUOverCommitted), and its next container gets the check a
// new pod gets. A listed pod with no process on the host (where the host shows pods' processes)
// does not run and gets a new pod's check. A running pod that cannot be taken back at all (its GPU
// gone, an MPS and a shim pod on one GPU...) is not served but is still watched: its files go when
// it ends, by the runtime's word or by the rule below, as a served pod's do. The runtime may also
// never say that a pod ended (containerd keeps what it told plugins about pod sandboxes in memory
// only: after it restarts it sends no StopPodSandbox or RemovePodSandbox for the pods it had
// before, and its list includes stopped sandboxes), so maintenance releases a pod that has had no
// process on the host (not even its sandbox's pause process) for options.released_without_processes
// since it was last seen with one or taken back (a pod taken back counts as seen where the host's
// processes show any pod at all).
//
// Rules it keeps: a GPU serves MPS pods or shim pods, never both at once (MPS puts the GPU in
// EXCLUSIVE_PROCESS mode); a MIG plan never destroys an instance a running pod holds; nothing is
// given twice: a whole GPU or a MIG instance held by one pod, or more than a GPU's memory and
// compute in shares, is refused to the next record that asks for it (a record written by someone
// other than the scheduler, which admission should have stopped, gets nothing another pod has);
// only a pod taken back at a restart is exempt, and only until its next container.
//
// Thread-safe: the runtime's calls, the maintenance loop and the metrics reader may come from
// different threads (one mutex; nothing in it waits on the network).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
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
#include "agent/pods/idle_watch.h"
#include "agent/pods/memory_backstop.h"
#include "agent/pods/usage_meter.h"
#include "agent/procs/gpu_processes.h"
#include "agent/procs/host_processes.h"
#include "shim/compute_controller.h"
#include "shim/segments.h"

namespace tessera::agent {

// Something a pod should be told about (a Warning Event on the pod), found while the agent
// served it: the caller posts it (PodManager never waits on the network).
struct PodNotice {
  PodRef pod;  // namespace, name, UID
  std::string reason;
  std::string message;
  bool evict = false;  // the memory backstop asks for the pod's eviction (BackstopAction::kEvict)
  // The pod was found idle (GPUIdle) with PodManagerOptions::idle_reclaim on: the caller evicts it
  // if the idle-reclaim policy allows (idle_reclaim.h decides from the pod's API object).
  bool reclaim_idle = false;
};

struct PodManagerOptions {
  std::string node_name;
  std::string pods_dir = "/run/tessera/pods";  // host: <pod UID>/{assignment.json,limits,ledger}
  EditsOptions edits;                          // devices, driver libraries
  mps::MpsOptions mps;
  uint32_t ledger_slots = shim::kDefaultLedgerSlots;
  // Each pod's ledger folder is a tmpfs of the size of its ledgers (shim::SegmentOptions), so a
  // container cannot fill the host's /run through it; needs CAP_SYS_ADMIN (the agent has it).
  bool sized_ledger_folders = true;
  // The host's /proc: host PIDs of ledger slots, and the pods of the GPU's processes (the agent
  // runs with hostPID; see agent/procs/host_processes.h).
  std::string proc_root = "/proc";
  // The driver's view of each pod's GPU memory (needs a GpuProcessSampler): memory_backstop.h.
  BackstopOptions backstop;
  // A pod whose processes were seen on the host (or that was taken back after a restart) and have
  // all been gone this long is released as if the runtime had said it ended (needs the host's PID
  // namespace; a pod prepared but never seen with a process is left to the runtime's word).
  std::chrono::seconds released_without_processes{10};
  // Called by RunMaintenance, outside the pod manager's lock, with what pods should be told.
  std::function<void(std::vector<PodNotice>)> notify;
  // The same notice about the same pod and GPU is given at most this often.
  std::chrono::seconds notice_interval{60};
  // How often each GPU's busy time is sampled for the usage counters (usage_meter.h; needs a
  // GpuProcessSampler).
  std::chrono::milliseconds usage_interval{1000};
  // A pod that ran alone on a GPU and kept it busy less than this, for this long, is idle there:
  // a notice (GPUIdle) and tessera_agent_pod_gpu_idle (idle_watch.h). A zero window turns it off.
  IdleOptions idle;
  // GPUIdle notices ask for the pod's eviction under the idle-reclaim policy (reclaim_idle).
  bool idle_reclaim = false;
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
    std::string mig;    // "1g.10gb@0" for a MIG instance
    std::string queue;  // its tessera.dev/queue annotation ("": none, the default queue)
    int64_t memory_mib = 0;
    int32_t compute_milli = 0;
    int64_t used_bytes = -1;  // what the pod's processes hold (shim shares), -1 unknown
    uint64_t oom_count = 0;
    uint32_t processes = 0;
    uint64_t ledger_tampered = 0;    // times its processes changed the ledger's header or length
    int64_t driver_used_bytes = -1;  // what NVML says its processes hold (-1: not sampled)
    int64_t busy_ns = -1;  // the GPU's busy time charged to the pod (usage_meter.h; -1: none)
    int32_t idle = -1;     // 1: idle there by the idle rule, 0: not, -1: not watched long enough
  };
  std::vector<Pod> pods;
  // Busy time since the agent started (usage_meter.h); -1 where not sampled.
  int64_t busy_ns = -1;
  int64_t unattributed_busy_ns = -1;
  int64_t rejected_usage_reports = -1;  // the pods' usage reports refused
};

class PodManager {
 public:
  // `mig` (optional) carries out MIG plans; `sampler` (optional: NVML's per-process view) feeds
  // the compute controller (without it the shims' windows stay at the caps) and the memory
  // backstop (without it there is none).
  PodManager(PodManagerOptions options, MigReconfigurer* mig = nullptr,
             GpuProcessSampler* sampler = nullptr);
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
  // removed); running ones this agent does not know yet are taken back, at once or, when the
  // runtime synchronizes before the node's GPUs are discovered (the plugin registers first), by
  // the SetGpus that brings them.
  void Synchronize(const std::vector<PodRef>& live);

  // One maintenance step: reap every segment (a ledger whose header or length its pod's
  // processes changed is put back, counted and noticed: reason LedgerTampered), run the compute
  // controller on GPUs with compute shares. Called every shim::contract::kMaintenanceIntervalMs
  // by RunMaintenance, which hands the notices to options.notify.
  void Maintain();
  // The notices found since the last call.
  std::vector<PodNotice> TakeNotices();
  void RunMaintenance(const std::atomic<bool>& stop);

  std::vector<GpuUse> Use() const;
  int64_t prepared() const { return prepared_.load(); }
  int64_t refused() const { return refused_.load(); }
  int64_t reaped_slots() const { return reaped_slots_.load(); }
  // The memory backstop: pods found over their share, and actions taken (kill or evict).
  int64_t backstop_over() const { return backstop_over_.load(); }
  int64_t backstop_actions() const { return backstop_actions_.load(); }
  bool sees_host_pids() const { return sees_host_pids_; }
  size_t pod_count() const;

 private:
  struct Prepared {
    PodGrant grant;
    ContainerEdits edits;
    std::vector<std::unique_ptr<shim::Segment>> segments;
    std::map<std::string, uint64_t> tampered;  // by GPU UUID: times the ledger was put back
    std::map<std::string, std::chrono::steady_clock::time_point> noticed;  // by reason + GPU
    std::chrono::steady_clock::time_point processes_seen{};  // last seen with one (zero: never)
    // Taken back at a restart although CheckNotGivenLocked refuses its grant: its next container
    // is checked as a new pod's would be (and the mark cleared once it passes).
    bool over_committed = false;
  };
  // A running pod the runtime lists and the agent could not take back: nothing is served, but its
  // files (left by an earlier agent) go when it ends.
  struct Unserved {
    std::string name;                                        // namespace/name, for the log
    std::chrono::steady_clock::time_point processes_seen{};  // last seen with one (zero: never)
  };
  // How a grant is admitted: kNew for a pod the runtime starts (every check), kTakeBack for a
  // running pod after a restart (CheckNotGivenLocked's refusal is reported, not enforced).
  enum class Admission { kNew, kTakeBack };
  // Releases the pods whose processes are gone (options_.released_without_processes).
  void ReleasePodsWithoutProcessesLocked(std::chrono::steady_clock::time_point now);
  // Queues a notice unless the same one was given within options_.notice_interval, or within
  // `interval` when that is longer (a notice about a state that lasts: once per its window).
  void NoticeLocked(Prepared& p, const std::string& key, std::string reason, std::string message,
                    std::chrono::seconds interval = {});
  absl::StatusOr<std::optional<ContainerEdits>> PrepareLocked(const PodRef& pod,
                                                              Admission admission);
  // The node's own check of a record (a defence against records the scheduler did not write):
  // nothing of the grant is held by another pod here, whole GPUs and MIG instances go to one pod,
  // and the shares of a GPU fit its memory and compute.
  absl::Status CheckNotGivenLocked(const PodGrant& grant) const;
  // Carries out the grant's MIG plan when its instance does not exist yet.
  absl::Status CarryOutMigPlan(PodGrant* grant);
  absl::StatusOr<mps::ContainerEdits> JoinMps(const PodGrant& grant);
  void ReleaseLocked(const std::string& uid);
  // Takes back the pods of `live` with a record that this agent does not serve yet (it
  // restarted); the GPUs must be known. Returns how many it serves again.
  int TakeBackLocked(const std::vector<PodRef>& live);
  // One memory backstop step (memory_backstop.h) and its actions.
  void RunBackstopLocked(std::chrono::steady_clock::time_point now);
  // One usage step: each GPU's busy time, charged to the pod running alone on it or split among
  // the pods running on it by their shims' reports (usage_meter.h).
  void RunUsageLocked(std::chrono::steady_clock::time_point now);
  // What the shims of `holders` (pods given the GPU) wrote in their ledgers of the GPU, with the
  // hard caps' windows the agent gives them: untrusted, for UsageMeter to check.
  std::map<std::string, UsageMeter::Report> UsageReportsLocked(
      const std::string& gpu_uuid, const std::vector<std::string>& holders) const;
  // The host PID of a ledger slot's process, only if it is a process of pod `uid`.
  std::optional<uint32_t> PodHostPid(const std::string& uid, uint64_t pidns_inode, uint32_t ns_pid);
  void StopIdleMpsLocked();

  PodManagerOptions options_;
  MigReconfigurer* mig_;
  GpuProcessSampler* sampler_;
  mutable std::mutex mu_;
  std::shared_ptr<const NodeGpus> gpus_;
  std::map<std::string, Prepared> pods_;                        // by pod UID
  std::map<std::string, Unserved> unserved_;                    // by pod UID, none in pods_
  std::map<std::string, std::unique_ptr<mps::MpsDaemon>> mps_;  // by GPU UUID
  // Pods with a record the runtime listed before the GPUs were discovered: taken back by SetGpus.
  std::vector<PodRef> awaiting_gpus_;
  shim::ComputeController controller_;
  std::set<std::string> controller_errors_;  // GPUs whose utilisation failed (logged once)
  std::vector<PodNotice> notices_;
  HostProcesses processes_;
  bool sees_host_pids_ = false;
  std::chrono::steady_clock::time_point processes_refreshed_{};
  std::set<std::string> running_;  // pods with a process on the host, as of that refresh
  MemoryBackstop backstop_;
  std::chrono::steady_clock::time_point next_backstop_{};
  std::set<std::string>
      backstop_errors_;  // GPUs whose processes could not be sampled (logged once)
  UsageMeter usage_;
  IdleWatch idle_;
  std::chrono::steady_clock::time_point next_usage_{};
  std::set<std::string> usage_errors_;  // GPUs whose utilisation could not be read (logged once)
  // (pod UID, GPU UUID) whose usage reports were rejected (logged once)
  std::set<std::pair<std::string, std::string>> usage_rejected_;
  std::atomic<int64_t> prepared_{0}, refused_{0}, reaped_slots_{0};
  std::atomic<int64_t> backstop_over_{0}, backstop_actions_{0};
};

// What a pod's shims reported in its segment's ledger (untrusted) and the hard cap's window the
// agent gives it, for UsageMeter; nullopt when the ledger could not be read (truncated under the
// read). The pod manager's and agent_gpu_run's one reading of a report.
std::optional<UsageMeter::Report> UsageReportOf(const shim::Segment& segment);

// A pod UID (a UUID: 8-4-4-4-12 hex digits), the only names made and removed under pods_dir.
bool ValidPodUid(std::string_view uid);

}  // namespace tessera::agent
