#include "agent/pods/pod_manager.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "agent/discovery/fake_gpus_file.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/mig.h"
#include "records/names.h"
#include "shim/contract.h"
#include "shim/files_at.h"
#include "spdlog/spdlog.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

// Writes the pod's record to <pods dir>/<UID>/assignment.json unless it already holds exactly
// that (atomic; through the folder's descriptor, never following a symlink: files_at.h).
absl::Status WriteAssignment(const std::string& pods_dir, const std::string& uid,
                             const std::string& text) {
  absl::StatusOr<shim::Fd> dir = shim::MakeDirs(PodDir(pods_dir, uid), 0755);
  if (!dir.ok()) return dir.status();
  return shim::WriteFileAt(dir->get(), "assignment.json", text, 0644,
                           AssignmentFile(pods_dir, uid));
}

// The utilisation source when there is none: the controller still tiles the windows.
class NoUtilization : public shim::UtilizationSource {
 public:
  absl::StatusOr<std::vector<shim::PidUtilization>> Sample(const std::string&) override {
    return absl::UnavailableError("no NVML");
  }
};

shim::ShareLimits LimitsOf(const PodGrant& grant, const GrantedGpu& g) {
  shim::ShareLimits l;
  l.memory_limit_bytes = static_cast<uint64_t>(g.assigned.grant.memory_mib) << 20;
  const int32_t c = g.assigned.grant.compute_milli;  // milli-GPU is permille of the GPU
  l.compute_limit_permille = c > 0 && c < 1000 ? static_cast<uint32_t>(c) : 0;
  l.compute_mode =
      grant.work_conserving ? shim::ComputeMode::kWorkConserving : shim::ComputeMode::kHardCap;
  return l;
}

// An MPS client's share: its active-thread percentage (a compute share, else all) and memory.
mps::ClientShare MpsShareOf(const GrantedGpu& g) {
  mps::ClientShare s;
  const int32_t c = g.assigned.grant.compute_milli;
  s.active_thread_percentage = c > 0 && c < 1000 ? std::max(1, c / 10) : 100;
  s.pinned_memory_mib = static_cast<uint64_t>(std::max<int64_t>(0, g.assigned.grant.memory_mib));
  return s;
}

void RemovePodFiles(const std::string& pods_dir, const std::string& uid) {
  if (!ValidPodUid(uid)) return;
  // The segments first (the ledger folder's tmpfs is unmounted), then the rest; through
  // descriptors, never following a symlink (files_at.h).
  const std::string dir = PodDir(pods_dir, uid);
  absl::Status s = shim::RemovePodSegments(dir);
  if (s.ok()) s = shim::RemoveTree(dir);
  if (!s.ok()) spdlog::warn("removing the files of pod {}: {}", uid, s.message());
}

}  // namespace

bool ValidPodUid(std::string_view uid) {
  if (uid.size() != 36) return false;
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uid[i] != '-' : !std::isxdigit(static_cast<unsigned char>(uid[i]))) return false;
  }
  return true;
}

PodManager::PodManager(PodManagerOptions options, MigReconfigurer* mig, GpuProcessSampler* sampler)
    : options_(std::move(options)),
      mig_(mig),
      sampler_(sampler),
      processes_(options_.proc_root),
      backstop_(options_.backstop),
      idle_(options_.idle) {
  sees_host_pids_ = processes_.InHostPidNamespace();
  if (!sees_host_pids_) {
    spdlog::warn(
        "{} is not the host's PID namespace (run the agent with hostPID: true): host PIDs of "
        "the pods' GPU processes will not resolve, and the compute controller and the memory "
        "backstop cannot tell the pods' processes",
        options_.proc_root);
  }
}

PodManager::~PodManager() = default;  // segments unmap; daemons and files stay for the next agent

void PodManager::SetGpus(std::shared_ptr<const NodeGpus> gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  gpus_ = std::move(gpus);
  options_.edits.driver_version = gpus_ ? gpus_->driver_version : "";
  if (gpus_ && !awaiting_gpus_.empty()) {
    const std::vector<PodRef> listed = std::exchange(awaiting_gpus_, {});
    const int adopted = TakeBackLocked(listed);
    StopIdleMpsLocked();
    spdlog::info("GPUs discovered: {} pod(s) the runtime listed before ({} taken back)",
                 listed.size(), adopted);
  }
}

void PodManager::SetDriver(DriverLibraries driver) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.edits.driver = std::move(driver);
}

size_t PodManager::pod_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_.size();
}

absl::StatusOr<std::optional<ContainerEdits>> PodManager::Prepare(const PodRef& pod) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<std::optional<ContainerEdits>> edits = PrepareLocked(pod, Admission::kNew);
  if (!edits.ok()) {
    ++refused_;
  } else if (edits->has_value()) {
    ++prepared_;
  }
  return edits;
}

absl::StatusOr<std::optional<ContainerEdits>> PodManager::PrepareLocked(const PodRef& pod,
                                                                        Admission admission) {
  auto record = pod.annotations.find(std::string(records::kAssignmentAnnotation));
  if (record == pod.annotations.end()) return std::optional<ContainerEdits>();
  if (auto it = pods_.find(pod.uid);
      it != pods_.end() && it->second.grant.record == record->second) {
    Prepared& p = it->second;
    // Taken back over the accounting: a new container gets nothing another pod holds.
    if (p.over_committed && admission == Admission::kNew) {
      TESSERA_RETURN_IF_ERROR(CheckNotGivenLocked(p.grant));
      p.over_committed = false;
    }
    return std::optional<ContainerEdits>(p.edits);
  }
  if (!gpus_) return absl::UnavailableError("the agent has not discovered this node's GPUs yet");
  TESSERA_ASSIGN_OR_RETURN(std::optional<PodGrant> grant,
                           ResolveGrant(pod, options_.node_name, *gpus_));
  if (!grant) return std::optional<ContainerEdits>();
  if (!ValidPodUid(pod.uid)) {
    return absl::InvalidArgumentError(
        StrCat("pod ", pod.Name(), " has no usable UID (\"", pod.uid, "\") for its files"));
  }
  // A pod that already runs holds what it was given: refusing it frees nothing, and would leave it
  // unserved (no reaping, no compute controller). It is taken back, the over-commit told.
  absl::Status given = CheckNotGivenLocked(*grant);
  if (!given.ok() && admission == Admission::kNew) return given;
  if (grant->has_mig()) TESSERA_RETURN_IF_ERROR(CarryOutMigPlan(&*grant));

  // No share runs without a memory cap: the scheduler reserves one for every share (a
  // compute-only ask gets the same fraction of the GPU's memory as of its compute). A grant
  // without one (written by an older scheduler, or by hand) is refused, not run uncapped.
  for (const GrantedGpu& g : grant->gpus) {
    if (g.share() && g.assigned.grant.memory_mib <= 0) {
      return absl::FailedPreconditionError(
          StrCat("pod ", pod.Name(), ": its share of GPU ", g.gpu.spec.index, " (", g.gpu.spec.uuid,
                 ") has no memory reserved, and tessera runs no share without a memory cap; the "
                 "scheduler reserves one for every share (ask ",
                 records::kGpuMemoryResource, ", or update the scheduler)"));
    }
  }

  // A GPU serves MPS pods or shim pods, not both.
  for (const GrantedGpu& g : grant->gpus) {
    if (!g.share()) continue;
    for (const auto& [uid, other] : pods_) {
      if (uid == pod.uid || other.grant.sharing == grant->sharing ||
          other.grant.sharing == Sharing::kNone) {
        continue;
      }
      for (const GrantedGpu& og : other.grant.gpus) {
        if (og.share() && og.gpu.spec.uuid == g.gpu.spec.uuid) {
          return absl::FailedPreconditionError(
              StrCat("pod ", pod.Name(), " wants its share of GPU ", g.gpu.spec.index, " (",
                     g.gpu.spec.uuid, ") enforced by ", SharingName(grant->sharing), ", but pod ",
                     other.grant.pod.Name(), " runs there with ", SharingName(other.grant.sharing),
                     "; a GPU serves MPS pods or shim pods, not both (",
                     records::kGpuSharingAnnotation, ")"));
        }
      }
    }
  }

  // Files this call may remove on failure: not those of a pod served already, nor those an earlier
  // agent made for a running pod (they go when it ends: unserved_).
  const bool known = pods_.contains(pod.uid) || admission == Admission::kTakeBack;
  TESSERA_RETURN_IF_ERROR(WriteAssignment(options_.pods_dir, pod.uid, record->second));
  Prepared p;
  if (grant->sharing == Sharing::kShim) {
    const std::string dir = PodDir(options_.pods_dir, pod.uid);
    uint32_t shares = 0;
    for (const GrantedGpu& g : grant->gpus) shares += g.share() ? 1 : 0;
    for (const GrantedGpu& g : grant->gpus) {
      if (!g.share()) continue;
      shim::SegmentOptions so;
      so.pod_uid = pod.uid;
      so.limits = LimitsOf(*grant, g);
      so.slots = options_.ledger_slots;
      // The pod's ledgers live in a tmpfs of their size: a container that grows its ledger fills
      // that, never the host's /run.
      if (options_.sized_ledger_folders) {
        so.ledger_folder_bytes = shim::LedgerFolderBytes(shares, options_.ledger_slots);
      }
      absl::StatusOr<std::unique_ptr<shim::Segment>> seg =
          shim::Segment::Create(dir, g.gpu.spec.uuid, so);
      if (!seg.ok()) {
        p.segments.clear();
        if (!known) RemovePodFiles(options_.pods_dir, pod.uid);
        return absl::InternalError(StrCat("pod ", pod.Name(), ": cannot create the share of GPU ",
                                          g.gpu.spec.uuid, ": ", seg.status().message()));
      }
      p.segments.push_back(std::move(*seg));
    }
  }
  std::optional<mps::ContainerEdits> mps_edits;
  if (grant->sharing == Sharing::kMps) {
    absl::StatusOr<mps::ContainerEdits> joined = JoinMps(*grant);
    if (!joined.ok()) {
      if (!known) RemovePodFiles(options_.pods_dir, pod.uid);
      return joined.status();
    }
    mps_edits = std::move(*joined);
  }
  absl::StatusOr<ContainerEdits> edits =
      ContainerEditsFor(ContainerGrantOf(*grant, options_.pods_dir), options_.edits,
                        mps_edits ? &*mps_edits : nullptr);
  if (!edits.ok()) {
    p.segments.clear();
    if (!known) {
      RemovePodFiles(options_.pods_dir, pod.uid);
      StopIdleMpsLocked();
    }
    return edits.status();
  }
  p.grant = std::move(*grant);
  p.edits = *edits;
  p.over_committed = !given.ok();
  Prepared& served = pods_[pod.uid] = std::move(p);
  unserved_.erase(pod.uid);
  if (served.over_committed) {
    spdlog::warn(
        "pod {} runs and is taken back with its GPUs and limits as assigned, although the check "
        "a new pod gets refuses it: {}; its next container waits until that check passes",
        pod.Name(), given.message());
    NoticeLocked(
        served, "GPUOverCommitted", "GPUOverCommitted",
        StrCat("the node agent restarted and took this running pod back with its GPUs and limits "
               "as assigned, although the check a new pod gets refuses it: ",
               given.message(),
               ". The pod already holds what it was given, so it is not refused; the pods counted "
               "with it have probably ended without their shares given back yet (the agent gives "
               "a pod's share back once it has had no process for ",
               options_.released_without_processes.count(),
               " s). A new container of this pod waits until that check passes"));
  }
  return std::optional<ContainerEdits>(std::move(*edits));
}

absl::Status PodManager::CheckNotGivenLocked(const PodGrant& grant) const {
  for (const GrantedGpu& g : grant.gpus) {
    const std::string gpu = StrCat("GPU ", g.gpu.spec.index, " (", g.gpu.spec.uuid, ")");
    int64_t memory_mib = g.share() ? g.assigned.grant.memory_mib : 0;
    int64_t compute_milli = g.share() ? g.assigned.grant.compute_milli : 0;
    std::vector<std::string> sharing;  // the other pods with a share of the GPU
    for (const auto& [uid, other] : pods_) {
      if (uid == grant.pod.uid) continue;
      for (const GrantedGpu& og : other.grant.gpus) {
        if (og.gpu.spec.uuid != g.gpu.spec.uuid) continue;
        std::string held;
        if (g.mig() || og.mig()) {
          if (g.mig() && og.mig() && g.assigned.mig_profile == og.assigned.mig_profile &&
              g.assigned.mig_start == og.assigned.mig_start) {
            held = StrCat("its MIG instance ", g.assigned.mig_profile, "@", g.assigned.mig_start);
          }
        } else if (!g.share() || !og.share()) {
          held = og.share() ? "a share of it" : "all of it";
        } else {
          memory_mib += og.assigned.grant.memory_mib;
          compute_milli += og.assigned.grant.compute_milli;
          sharing.push_back(other.grant.pod.Name());
        }
        if (!held.empty()) {
          return absl::FailedPreconditionError(
              StrCat("pod ", grant.pod.Name(), " is assigned ", gpu, ", but pod ",
                     other.grant.pod.Name(), " holds ", held,
                     " on this node; the agent never "
                     "gives a GPU twice (was the record written by tessera's scheduler?)"));
        }
      }
    }
    if (memory_mib > g.gpu.spec.memory_mib || compute_milli > 1000) {
      return absl::FailedPreconditionError(StrCat(
          "pod ", grant.pod.Name(), " is assigned a share of ", gpu,
          sharing.empty() ? " that"
                          : StrCat(" that, with the shares of ", StrJoin(sharing, ", "), " there,"),
          " comes to ", memory_mib, " MiB of its ", g.gpu.spec.memory_mib, " MiB and ",
          compute_milli / 10,
          "% of its compute; the agent never over-commits a GPU "
          "(was the record written by tessera's scheduler?)"));
    }
  }
  return absl::OkStatus();
}

absl::Status PodManager::CarryOutMigPlan(PodGrant* grant) {
  for (GrantedGpu& g : grant->gpus) {
    if (!g.mig()) continue;
    const std::string instance = StrCat(g.assigned.mig_profile, "@", g.assigned.mig_start);
    if (FindMigInstance(g.gpu, g.assigned.mig_profile, g.assigned.mig_start) >= 0) {
      continue;  // configured already (the plan ran for an earlier container, or by mig-parted)
    }
    if (mig_ == nullptr) {
      return absl::UnimplementedError(
          StrCat("pod ", grant->pod.Name(), " needs MIG instance ", instance, " created on GPU ",
                 g.gpu.spec.uuid, ", and this node's GPU backend cannot reconfigure MIG"));
    }
    // Never take an instance from a running pod.
    for (const records::MigInstanceRecord& d : grant->assignment.mig_destroy) {
      for (const auto& [uid, other] : pods_) {
        for (const GrantedGpu& og : other.grant.gpus) {
          if (og.mig() && og.gpu.spec.uuid == g.gpu.spec.uuid &&
              og.assigned.mig_profile == d.profile && og.assigned.mig_start == d.start) {
            return absl::FailedPreconditionError(
                StrCat("pod ", grant->pod.Name(), ": its MIG plan destroys instance ", d.profile,
                       "@", d.start, " of GPU ", g.gpu.spec.uuid, ", which pod ",
                       other.grant.pod.Name(), " holds"));
          }
        }
      }
    }
    absl::StatusOr<DiscoveredGpu> after = mig_->ReconfigureMig(
        g.gpu.spec.uuid, grant->assignment.mig_destroy,
        records::MigInstanceRecord{g.assigned.mig_profile, g.assigned.mig_start});
    if (!after.ok()) {
      return absl::Status(after.status().code(),
                          StrCat("pod ", grant->pod.Name(), ": creating MIG instance ", instance,
                                 " on GPU ", g.gpu.spec.uuid, ": ", after.status().message()));
    }
    const int k = FindMigInstance(*after, g.assigned.mig_profile, g.assigned.mig_start);
    if (k < 0) {
      return absl::InternalError(StrCat("pod ", grant->pod.Name(), ": MIG instance ", instance,
                                        " is not on GPU ", g.gpu.spec.uuid, " after creating it"));
    }
    std::vector<std::string> destroyed;
    for (const auto& d : grant->assignment.mig_destroy)
      destroyed.push_back(StrCat(d.profile, "@", d.start));
    spdlog::info("pod {}: MIG instance {} created on GPU {} ({}){}", grant->pod.Name(), instance,
                 g.gpu.spec.index, g.gpu.spec.uuid,
                 static_cast<size_t>(k) < after->mig_uuids.size() ? after->mig_uuids[k] : "",
                 destroyed.empty() ? "" : StrCat(", after destroying ", StrJoin(destroyed, ", ")));
    g.gpu = *after;
    g.mig_uuid = static_cast<size_t>(k) < after->mig_uuids.size() ? after->mig_uuids[k] : "";
    // The node's view follows at once (discovery republishes it).
    if (gpus_) {
      auto next = std::make_shared<NodeGpus>(*gpus_);
      for (DiscoveredGpu& dg : next->gpus) {
        if (dg.spec.uuid == after->spec.uuid) dg = *after;
      }
      gpus_ = std::move(next);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<mps::ContainerEdits> PodManager::JoinMps(const PodGrant& grant) {
  const GrantedGpu& g = grant.gpus.front();
  const std::string& uuid = g.gpu.spec.uuid;
  auto it = mps_.find(uuid);
  if (it == mps_.end()) {
    absl::StatusOr<std::unique_ptr<mps::MpsDaemon>> d = mps::MpsDaemon::Start(uuid, options_.mps);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          StrCat("pod ", grant.pod.Name(), ": cannot run the MPS daemon of GPU ",
                                 g.gpu.spec.index, " (", uuid, "): ", d.status().message()));
    }
    spdlog::info("MPS daemon of GPU {} ({}) {}", g.gpu.spec.index, uuid,
                 (*d)->adopted() ? "adopted (already running)" : "started");
    it = mps_.emplace(uuid, std::move(*d)).first;
  }
  // The daemon's defaults: the largest share of the GPU's MPS pods, this one included.
  mps::ClientShare mine = MpsShareOf(g);
  int atp = mine.active_thread_percentage;
  uint64_t memory = mine.pinned_memory_mib;
  for (const auto& [uid, other] : pods_) {
    if (other.grant.sharing != Sharing::kMps || other.grant.gpus.front().gpu.spec.uuid != uuid) {
      continue;
    }
    mps::ClientShare s = MpsShareOf(other.grant.gpus.front());
    atp = std::max(atp, s.active_thread_percentage);
    memory = std::max(memory, s.pinned_memory_mib);
  }
  if (absl::Status s = it->second->SetCeilings(atp, memory); !s.ok()) {
    return absl::Status(s.code(), StrCat("pod ", grant.pod.Name(), ": the MPS daemon of GPU ", uuid,
                                         ": ", s.message()));
  }
  return it->second->EditsFor(mine);
}

void PodManager::Release(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(uid);
  StopIdleMpsLocked();
}

void PodManager::ReleaseLocked(const std::string& uid) {
  std::erase_if(awaiting_gpus_, [&](const PodRef& p) { return p.uid == uid; });
  auto it = pods_.find(uid);
  if (it != pods_.end()) {
    spdlog::info("pod {} ended: its GPU files go", it->second.grant.pod.Name());
    pods_.erase(it);  // unmaps its segments
    usage_.Forget(uid);
    idle_.Forget(uid);
    std::erase_if(usage_rejected_, [&uid](const auto& key) { return key.first == uid; });
  }
  if (auto u = unserved_.find(uid); u != unserved_.end()) {
    spdlog::info("pod {} ended: the files an earlier agent made for it go", u->second.name);
    unserved_.erase(u);
  }
  RemovePodFiles(options_.pods_dir, uid);
}

void PodManager::StopIdleMpsLocked() {
  for (auto it = mps_.begin(); it != mps_.end();) {
    bool used = false;
    for (const auto& [uid, p] : pods_) {
      used |= p.grant.sharing == Sharing::kMps && p.grant.gpus.front().gpu.spec.uuid == it->first;
    }
    if (used) {
      ++it;
      continue;
    }
    if (absl::Status s = it->second->Stop(); !s.ok()) {
      spdlog::warn("stopping the MPS daemon of GPU {}: {}", it->first, s.message());
    } else {
      spdlog::info("MPS daemon of GPU {} stopped (no MPS pod left)", it->first);
    }
    it = mps_.erase(it);
  }
}

int PodManager::TakeBackLocked(const std::vector<PodRef>& live) {
  int adopted = 0;
  std::optional<std::set<std::string>> host_pods;  // the pods with processes, scanned once
  // The pods with processes on the host, or null where the host's processes show no pod at all
  // (cgroup names not understood, or not the host's PID namespace): then nobody can tell.
  auto shown = [&]() -> const std::set<std::string>* {
    if (!sees_host_pids_) return nullptr;
    if (!host_pods) host_pods = processes_.PodsWithProcesses();
    return host_pods->empty() ? nullptr : &*host_pods;
  };
  // The runtime lists stopped sandboxes too (containerd until the kubelet removes them), and may
  // never say they ended: a pod taken back (or left unserved) counts as seen with a process now, so
  // that one with none is released like any other; where nobody can tell, it is left to the
  // runtime's word.
  auto seen_now = [&](std::chrono::steady_clock::time_point& seen) {
    if (shown() != nullptr) seen = std::chrono::steady_clock::now();
  };
  for (const PodRef& p : live) {
    if (pods_.contains(p.uid) ||
        !p.annotations.contains(std::string(records::kAssignmentAnnotation))) {
      continue;
    }
    // A pod with no process on the host does not run (it ended, or its sandbox is stopped): it
    // gets a new pod's check, and holds nothing a running pod is refused for.
    const bool runs = shown() == nullptr || shown()->contains(p.uid);
    absl::StatusOr<std::optional<ContainerEdits>> e =
        PrepareLocked(p, runs ? Admission::kTakeBack : Admission::kNew);
    if (!e.ok()) {
      spdlog::warn("pod {} {}, but its GPUs cannot be served again: {}; its files go when it ends",
                   p.Name(), runs ? "runs" : "is listed by the runtime (no process)",
                   e.status().message());
      auto [u, added] = unserved_.try_emplace(p.uid, Unserved{p.Name()});
      if (added) seen_now(u->second.processes_seen);
    } else if (e->has_value()) {
      ++adopted;
      seen_now(pods_.at(p.uid).processes_seen);
    }
  }
  return adopted;
}

void PodManager::Synchronize(const std::vector<PodRef>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> uids;
  for (const PodRef& p : live) uids.insert(p.uid);
  std::vector<std::string> gone;
  for (const auto& [uid, p] : pods_) {
    if (!uids.contains(uid)) gone.push_back(uid);
  }
  for (const std::string& uid : gone) ReleaseLocked(uid);
  std::erase_if(unserved_, [&](const auto& u) { return !uids.contains(u.first); });
  // Files of pods the runtime no longer has (removed while no agent was running).
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.pods_dir, ec)) {
    const std::string uid = entry.path().filename().string();
    if (entry.is_directory() && !uids.contains(uid) && ValidPodUid(uid)) {
      spdlog::info("removing the files of pod {}, which the runtime no longer has", uid);
      RemovePodFiles(options_.pods_dir, uid);
    }
  }
  // Running pods this agent has not served yet (it restarted): take them back, once the GPUs
  // are known. The runtime synchronizes as soon as the plugin registers, which on a busy node can
  // come before discovery: then SetGpus takes them back.
  int adopted = 0;
  awaiting_gpus_.clear();
  if (gpus_) {
    adopted = TakeBackLocked(live);
  } else {
    for (const PodRef& p : live) {
      if (!pods_.contains(p.uid) &&
          p.annotations.contains(std::string(records::kAssignmentAnnotation))) {
        awaiting_gpus_.push_back(p);
      }
    }
    if (!awaiting_gpus_.empty()) {
      spdlog::info("{} pod(s) with GPUs are taken back once this node's GPUs are discovered",
                   awaiting_gpus_.size());
    }
  }
  // MPS daemons an earlier agent left for GPUs without MPS pods now.
  for (const auto& entry : fs::directory_iterator(options_.mps.root, ec)) {
    const std::string uuid = entry.path().filename().string();
    if (!IsGpuUuid(uuid) || mps_.contains(uuid)) continue;
    if (!fs::exists(entry.path() / "pipe" / "control", ec)) continue;
    absl::StatusOr<std::unique_ptr<mps::MpsDaemon>> d = mps::MpsDaemon::Start(uuid, options_.mps);
    if (d.ok()) mps_.emplace(uuid, std::move(*d));
  }
  // A daemon left for pods still to be taken back stays until SetGpus has taken them.
  if (awaiting_gpus_.empty()) StopIdleMpsLocked();
  spdlog::info("synchronized with the runtime: {} pod(s), {} with GPUs served ({} taken back)",
               live.size(), pods_.size(), adopted);
}

std::optional<uint32_t> PodManager::PodHostPid(const std::string& uid, uint64_t pidns_inode,
                                               uint32_t ns_pid) {
  std::optional<uint32_t> host = processes_.HostPidOf(pidns_inode, ns_pid);
  if (!host) return std::nullopt;
  // A slot names whatever identity its writer chose: only a process of the pod itself counts.
  std::optional<ProcessOwner> owner = processes_.OwnerOf(*host);
  if (!owner || owner->pod_uid != uid) return std::nullopt;
  return host;
}

void PodManager::Maintain() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  // One scan of /proc at most a second, whatever the ledgers claim (host_processes.h).
  if (now - processes_refreshed_ >= std::chrono::seconds(1)) {
    processes_.Refresh();
    processes_refreshed_ = now;
    // The pods with a process on the host (one scan of /proc), for the release rule below and
    // the usage counters.
    running_.clear();
    if (sees_host_pids_ && (!pods_.empty() || !unserved_.empty())) {
      running_ = processes_.PodsWithProcesses();
    }
    ReleasePodsWithoutProcessesLocked(now);
  }
  std::map<std::string, std::vector<shim::Segment*>> capped;  // by GPU UUID
  for (auto& [uid, p] : pods_) {
    for (auto& seg : p.segments) {
      shim::ReapResult r = seg->Reap(
          // An init-capture: clang-tidy's clang (14) cannot capture a structured binding.
          [this, &pod_uid = uid](uint64_t inode, uint32_t pid) {
            return PodHostPid(pod_uid, inode, pid);
          });
      if (!r.tampered.empty()) {
        ++p.tampered[seg->gpu_uuid()];
        spdlog::warn(
            "pod {}: the ledger of GPU {} was changed under the agent ({}); its header "
            "was put back",
            p.grant.pod.Name(), seg->gpu_uuid(), r.tampered);
        NoticeLocked(
            p, StrCat("LedgerTampered/", seg->gpu_uuid()), "LedgerTampered",
            StrCat("a process of this pod changed the GPU memory ledger of GPU ", seg->gpu_uuid(),
                   " (", r.tampered,
                   "): the node agent put back its header and trusts nothing it reads there; "
                   "the CUDA shim never does this"));
      }
      if (r.slots > 0) {
        reaped_slots_ += r.slots;
        spdlog::info("pod {}: {} dead process(es) gave back {} bytes of GPU {}", p.grant.pod.Name(),
                     r.slots, r.bytes, seg->gpu_uuid());
      }
      if (seg->limits().compute_limit() > 0) capped[seg->gpu_uuid()].push_back(seg.get());
    }
  }
  NoUtilization none;
  for (auto& [uuid, segs] : capped) {
    controller_.Step(uuid, segs,
                     sampler_ != nullptr ? static_cast<shim::UtilizationSource&>(*sampler_) : none);
  }
  if (sampler_ != nullptr && now >= next_backstop_) {
    next_backstop_ = now + options_.backstop.interval;
    RunBackstopLocked(now);
  }
  if (sampler_ != nullptr && gpus_ && now >= next_usage_) {
    next_usage_ = now + options_.usage_interval;
    RunUsageLocked(now);
  }
}

void PodManager::RunUsageLocked(std::chrono::steady_clock::time_point now) {
  const int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::set<std::string>& running = running_;  // as of the last scan of /proc (<= 1 s)
  for (const DiscoveredGpu& g : gpus_->gpus) {
    const std::string& uuid = g.spec.uuid;
    std::vector<std::string> holders;  // pods given this GPU (not a MIG instance of it)
    bool mig = false;
    for (const auto& [uid, p] : pods_) {
      for (const GrantedGpu& gg : p.grant.gpus) {
        if (gg.gpu.spec.uuid != uuid) continue;
        mig |= gg.mig();
        holders.push_back(uid);
      }
    }
    // The device's figure covers all of its MIG instances: no pod's own.
    if (mig) {
      usage_.Skip(uuid);
      continue;
    }
    absl::StatusOr<DeviceBusy> u = sampler_->DeviceBusyTime(uuid);
    if (!u.ok()) {
      usage_.Skip(uuid);
      if (usage_errors_.insert(uuid).second) {
        spdlog::warn("usage: the utilisation of GPU {} cannot be read: {}", uuid,
                     u.status().message());
      }
      continue;
    }
    // The pods running on it now: those with a process on the host, where the agent sees the
    // host's processes; else the one pod given it, if only one is.
    // Without the host's processes, every pod given the GPU may be running on it: several share
    // its time by their reports.
    std::vector<std::string> on_gpu;
    for (const std::string& uid : holders) {
      if (sees_host_pids_ ? running.contains(uid) : true) on_gpu.push_back(uid);
    }
    const UsageMeter::Charge charge = usage_.Observe(uuid, now_ns, u->permille, on_gpu,
                                                     UsageReportsLocked(uuid, holders), u->span_ns);
    for (const std::string& uid : charge.rejected) {
      // Once per pod and GPU in the log; the GPU's counter counts them all.
      if (usage_rejected_.insert({uid, uuid}).second) {
        spdlog::warn(
            "usage: pod {} reported GPU time on GPU {} that cannot be true (its ledger's counter "
            "went back, or rose by more than the time since the last reading): it is not charged "
            "by it; a process of the pod wrote its ledger, which the CUDA shim never does",
            pods_.at(uid).grant.pod.Name(), uuid);
      }
    }
    // The idle rule: only on the evidence of a pod alone on the GPU, never on the split (a pod
    // could make a neighbour look idle by its own reports).
    if (on_gpu.size() != 1 || charge.elapsed_ns == 0) continue;
    const std::string& uid = on_gpu.front();
    idle_.Observe(uid, uuid, now_ns, charge.elapsed_ns, charge.busy_ns);
    uint32_t busy = 0;
    if (idle_.Idle(uid, uuid, &busy)) {
      Prepared& p = pods_.at(uid);
      const IdleOptions& o = idle_.options();
      // Told once per window while it stays idle.
      const size_t before = notices_.size();
      NoticeLocked(p, StrCat("GPUIdle/", uuid), "GPUIdle",
                   StrCat("GPU ", g.spec.index, " (", uuid, ") ran this pod's kernels ", busy / 10,
                          ".", busy % 10, "% of the last ",
                          o.window.count() % 60 == 0 ? StrCat(o.window.count() / 60, " min")
                                                     : StrCat(o.window.count(), " s"),
                          " (under ", o.threshold_permille / 10, ".", o.threshold_permille % 10,
                          "%): the pod holds a GPU it does not use; a smaller share, or ending "
                          "the pod, gives it to pods that would"),
                   o.window);
      if (options_.idle_reclaim && notices_.size() > before) notices_.back().reclaim_idle = true;
    }
  }
}

std::map<std::string, UsageMeter::Report> PodManager::UsageReportsLocked(
    const std::string& gpu_uuid, const std::vector<std::string>& holders) const {
  std::map<std::string, UsageMeter::Report> reports;
  for (const std::string& uid : holders) {
    for (const auto& seg : pods_.at(uid).segments) {
      if (seg->gpu_uuid() != gpu_uuid) continue;
      if (std::optional<UsageMeter::Report> r = UsageReportOf(*seg)) reports[uid] = *r;
    }
  }
  return reports;
}

std::optional<UsageMeter::Report> UsageReportOf(const shim::Segment& segment) {
  std::optional<uint64_t> ns = segment.GpuBusyNs();
  if (!ns) return std::nullopt;  // truncated under the read: no report this time
  UsageMeter::Report r{.counter_ns = *ns};
  const shim::LimitsMap& limits = segment.limits();
  if (limits.compute_limit() > 0 && limits.compute_mode() == shim::ComputeMode::kHardCap) {
    // The window the controller sets may move around the cap: the larger of the two.
    r.hard_cap_permille = std::max(limits.compute_limit(), limits.effective_duty());
  }
  return r;
}

void PodManager::ReleasePodsWithoutProcessesLocked(std::chrono::steady_clock::time_point now) {
  if (!sees_host_pids_ || (pods_.empty() && unserved_.empty())) return;
  const std::set<std::string>& running = running_;
  std::vector<std::pair<std::string, std::string>> ended;  // UID, namespace/name
  auto check = [&](const std::string& uid, const std::string& name,
                   std::chrono::steady_clock::time_point& seen) {
    if (running.contains(uid)) {
      seen = now;
    } else if (seen != std::chrono::steady_clock::time_point{} &&
               now - seen >= options_.released_without_processes) {
      ended.emplace_back(uid, name);
    }
  };
  for (auto& [uid, p] : pods_) check(uid, p.grant.pod.Name(), p.processes_seen);
  for (auto& [uid, u] : unserved_) check(uid, u.name, u.processes_seen);
  for (const auto& [uid, name] : ended) {
    spdlog::info(
        "pod {} has had no process on this node for {} s, although the runtime did not say it "
        "ended (containerd does not, for pods it had before it restarted)",
        name, options_.released_without_processes.count());
    ReleaseLocked(uid);
  }
  if (!ended.empty()) StopIdleMpsLocked();
}

void PodManager::RunBackstopLocked(std::chrono::steady_clock::time_point now) {
  std::vector<BackstopShare> shares;
  std::map<std::string, Prepared*> by_uid;
  for (auto& [uid, p] : pods_) {
    by_uid[uid] = &p;
    for (const GrantedGpu& g : p.grant.gpus) {
      if (g.mig()) continue;  // NVML lists a MIG instance's processes under its own handle
      // A share with a memory cap is checked; a whole GPU (or a share without a cap) is only
      // measured, for its driver figure on /metrics.
      const bool capped =
          p.grant.sharing != Sharing::kNone && g.share() && g.assigned.grant.memory_mib > 0;
      shares.push_back(
          {uid, g.gpu.spec.uuid,
           capped ? static_cast<uint64_t>(g.assigned.grant.memory_mib) << 20 : uint64_t{0}});
    }
  }
  std::map<std::string, std::string> errors;
  std::vector<BackstopVerdict> verdicts =
      backstop_.Step(shares, *sampler_, processes_, now, &errors);
  for (const auto& [gpu, error] : errors) {
    if (backstop_errors_.insert(gpu).second) {
      spdlog::warn("memory backstop: the processes of GPU {} cannot be sampled: {}", gpu, error);
    }
  }
  const BackstopOptions& o = options_.backstop;
  for (const BackstopVerdict& v : verdicts) {
    Prepared& p = *by_uid[v.pod_uid];
    const std::string what =
        StrCat("its processes hold ", v.used_bytes >> 20, " MiB of GPU ", v.gpu_uuid,
               " as the driver counts it (NVML), more than its share of ", v.cap_bytes >> 20,
               " MiB with the tolerance (", v.allowed_bytes >> 20, " MiB for ", v.pids.size(),
               " process(es))");
    if (v.kind == BackstopVerdict::kOver) {
      ++backstop_over_;
      spdlog::warn("pod {}: {}", p.grant.pod.Name(), what);
      NoticeLocked(p, StrCat("GPUMemoryOverShare/", v.gpu_uuid), "GPUMemoryOverShare",
                   StrCat(what, "; unless it gives the memory back within ", o.grace.count(),
                          " s the node agent will ",
                          o.action == BackstopAction::kKill    ? "kill those processes"
                          : o.action == BackstopAction::kEvict ? "evict the pod"
                                                               : "report it again"));
      continue;
    }
    // kAct: the grace period passed and the pod is still over.
    if (o.action == BackstopAction::kKill) {
      std::vector<uint32_t> killed;
      for (uint32_t pid : v.pids) {
        // Checked again just before: a PID reused by another process is never killed.
        std::optional<ProcessOwner> owner = processes_.OwnerOf(pid);
        if (owner && owner->pod_uid == v.pod_uid && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) {
          killed.push_back(pid);
        }
      }
      if (!killed.empty()) ++backstop_actions_;
      spdlog::warn("pod {}: {} for {} s: killed host PID(s) {}", p.grant.pod.Name(), what,
                   v.over_for.count(), StrJoin(killed, ", "));
      NoticeLocked(p, StrCat("GPUMemoryOverShareKilled/", v.gpu_uuid), "GPUMemoryOverShareKilled",
                   StrCat(what, " for ", v.over_for.count(), " s: the node agent killed them"));
    } else if (o.action == BackstopAction::kEvict) {
      const size_t before = notices_.size();
      NoticeLocked(p, StrCat("GPUMemoryOverShareEvicted/", v.gpu_uuid), "GPUMemoryOverShareEvicted",
                   StrCat(what, " for ", v.over_for.count(), " s: the node agent evicts the pod"));
      if (notices_.size() > before) {
        notices_.back().evict = true;
        ++backstop_actions_;
        spdlog::warn("pod {}: {} for {} s: evicting it", p.grant.pod.Name(), what,
                     v.over_for.count());
      }
    } else {
      NoticeLocked(p, StrCat("GPUMemoryOverShare/", v.gpu_uuid), "GPUMemoryOverShare",
                   StrCat(what, " for ", v.over_for.count(), " s"));
    }
  }
}

void PodManager::NoticeLocked(Prepared& p, const std::string& key, std::string reason,
                              std::string message, std::chrono::seconds interval) {
  const auto now = std::chrono::steady_clock::now();
  auto it = p.noticed.find(key);
  if (it != p.noticed.end() && now - it->second < std::max(interval, options_.notice_interval)) {
    return;
  }
  p.noticed[key] = now;
  PodRef pod = p.grant.pod;
  pod.annotations.clear();
  notices_.push_back(PodNotice{std::move(pod), std::move(reason), std::move(message)});
}

std::vector<PodNotice> PodManager::TakeNotices() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(notices_, {});
}

void PodManager::RunMaintenance(const std::atomic<bool>& stop) {
  const auto interval = std::chrono::milliseconds(shim::contract::kMaintenanceIntervalMs);
  auto next = std::chrono::steady_clock::now();
  while (!stop.load()) {
    Maintain();
    if (std::vector<PodNotice> notices = TakeNotices(); !notices.empty() && options_.notify) {
      options_.notify(std::move(notices));
    }
    next += interval;
    while (!stop.load() && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    if (std::chrono::steady_clock::now() > next + interval) next = std::chrono::steady_clock::now();
  }
}

std::vector<GpuUse> PodManager::Use() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GpuUse> out;
  if (!gpus_) return out;
  for (const DiscoveredGpu& g : gpus_->gpus) {
    GpuUse u;
    u.index = g.spec.index;
    u.uuid = g.spec.uuid;
    u.healthy = g.health.healthy;
    if (mps_.contains(g.spec.uuid)) u.mps = "running";
    if (const UsageMeter::Gpu* m = usage_.gpu(g.spec.uuid); m != nullptr) {
      u.busy_ns = static_cast<int64_t>(m->busy_ns);
      u.unattributed_busy_ns = static_cast<int64_t>(m->unattributed_ns);
      u.rejected_usage_reports = static_cast<int64_t>(m->rejected_reports);
    }
    for (const auto& [uid, p] : pods_) {
      for (const GrantedGpu& gg : p.grant.gpus) {
        if (gg.gpu.spec.uuid != g.spec.uuid) continue;
        GpuUse::Pod pod;
        pod.ns = p.grant.pod.ns;
        pod.name = p.grant.pod.name;
        pod.uid = uid;
        pod.sharing = gg.share() ? p.grant.sharing : Sharing::kNone;
        pod.exclusive = gg.assigned.grant.exclusive;
        if (gg.mig()) pod.mig = StrCat(gg.assigned.mig_profile, "@", gg.assigned.mig_start);
        if (auto q = p.grant.pod.annotations.find(std::string(records::kQueueAnnotation));
            q != p.grant.pod.annotations.end()) {
          pod.queue = q->second;
        }
        pod.memory_mib = gg.assigned.grant.memory_mib;
        pod.compute_milli = gg.assigned.grant.compute_milli;
        if (auto busy = usage_.pod_busy_ns(uid, g.spec.uuid)) {
          pod.busy_ns = static_cast<int64_t>(*busy);
          if (auto permille = idle_.BusyPermille(uid, g.spec.uuid)) {
            pod.idle = *permille < idle_.options().threshold_permille ? 1 : 0;
          }
        }
        if (sampler_ != nullptr && !gg.mig() && backstop_.sampled(g.spec.uuid)) {
          auto d = backstop_.use().find({uid, g.spec.uuid});
          pod.driver_used_bytes =
              d == backstop_.use().end() ? 0 : static_cast<int64_t>(d->second.used_bytes);
        }
        for (const auto& seg : p.segments) {
          if (seg->gpu_uuid() != g.spec.uuid) continue;
          shim::SegmentInfo info = seg->Inspect();
          pod.used_bytes = static_cast<int64_t>(info.used_bytes);
          pod.oom_count = info.oom_count;
          if (auto t = p.tampered.find(g.spec.uuid); t != p.tampered.end()) {
            pod.ledger_tampered = t->second;
          }
          for (const auto& proc : info.processes) pod.processes += proc.alive ? 1 : 0;
        }
        u.pods.push_back(std::move(pod));
      }
    }
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace tessera::agent
