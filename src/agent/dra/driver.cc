#include "agent/dra/driver.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <set>

#include "agent/dra/names.h"
#include "agent/pods/grant.h"
#include "common/json_fields.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/mig.h"
#include "core/model/quantity.h"
#include "shim/files_at.h"
#include "spdlog/spdlog.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A claim UID (a UUID), the only names made and removed under the claims dir.
bool ValidUid(std::string_view uid) {
  if (uid.size() != 36) return false;
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uid[i] != '-' : !std::isxdigit(static_cast<unsigned char>(uid[i]))) return false;
  }
  return true;
}

std::string PodsOf(const PreparedClaim& c) {
  if (c.pods.empty()) return "";
  std::vector<std::string> names;
  for (const ClaimConsumer& p : c.pods) names.push_back(StrCat(c.ns, "/", p.name));
  return StrCat(", used by pod ", StrJoin(names, ", "));
}

// The GPU a prepared device stands on, and how much of it the device takes.
struct Use {
  const PreparedClaim* claim;
  const PreparedDevice* device;
};

}  // namespace

absl::StatusOr<Consumption> ConsumptionOf(const json& result, int64_t device_memory_mib) {
  Consumption c;
  const json& consumed = JsonField(result, "consumedCapacity");
  if (!consumed.is_object() || consumed.empty()) {
    c.memory_mib = device_memory_mib;
    c.compute_percent = 100;
    return c;
  }
  const json& memory = JsonField(consumed, std::string(kCapMemory).c_str());
  const json& compute = JsonField(consumed, std::string(kCapCompute).c_str());
  if (memory.is_string()) {
    absl::StatusOr<int64_t> mib = core::ParseMemoryMiB(memory.get<std::string>());
    if (!mib.ok()) {
      return absl::InvalidArgumentError(StrCat(
          "consumedCapacity.memory \"", memory.get<std::string>(), "\": ", mib.status().message()));
    }
    c.memory_mib = *mib;
  } else {
    c.memory_mib = device_memory_mib;  // not consumed as capacity: all of it
  }
  if (compute.is_string()) {
    absl::StatusOr<int64_t> percent = core::ParseCount(compute.get<std::string>());
    if (!percent.ok() || *percent > 100) {
      return absl::InvalidArgumentError(StrCat("consumedCapacity.compute \"",
                                               compute.get<std::string>(),
                                               "\" is not a percentage 0..100"));
    }
    c.compute_percent = static_cast<int32_t>(*percent);
  }
  c.exclusive = c.memory_mib >= device_memory_mib;
  if (c.exclusive) {
    c.memory_mib = device_memory_mib;
    c.compute_percent = 100;
  }
  return c;
}

DraDriver::DraDriver(ClaimSource& claims, DriverOptions options)
    : claims_(claims), options_(std::move(options)), checkpoint_(options_.checkpoint_path) {}

void DraDriver::SetGpus(std::shared_ptr<const NodeGpus> gpus, std::shared_ptr<const Pool> pool) {
  std::vector<DeviceHealthInfo> health;
  for (const PoolDevice& d : pool->devices) {
    health.push_back({d.name, d.healthy, d.healthy ? "" : d.health_reason});
  }
  std::lock_guard<std::mutex> lock(mu_);
  gpus_ = std::move(gpus);
  pool_ = std::move(pool);
  auto same = [](const DeviceHealthInfo& a, const DeviceHealthInfo& b) {
    return a.device == b.device && a.healthy == b.healthy && a.message == b.message;
  };
  if (health.size() != health_.size() ||
      !std::equal(health.begin(), health.end(), health_.begin(), same)) {
    health_ = std::move(health);
    ++health_version_;
    health_cv_.notify_all();
  }
}

bool DraDriver::has_gpus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_ != nullptr;
}

std::string DraDriver::pool_name() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pool_ ? pool_->name : options_.node_name;
}

std::vector<DeviceHealthInfo> DraDriver::Health(uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (version) *version = health_version_;
  return health_;
}

bool DraDriver::WaitForHealthChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return health_cv_.wait_for(lock, timeout, [&] { return health_version_ != seen; });
}

std::vector<PreparedClaim> DraDriver::Prepared() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PreparedClaim> out;
  for (const auto& [uid, c] : state_.claims) out.push_back(c);
  return out;
}

absl::Status DraDriver::SetDeletionReported(const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = state_.claims.find(uid);
  if (it == state_.claims.end() || it->second.deletion_reported) return absl::OkStatus();
  it->second.deletion_reported = true;
  absl::Status saved = SaveCheckpoint();
  if (!saved.ok()) it->second.deletion_reported = false;
  return saved;
}

absl::StatusOr<PreparedClaim> DraDriver::Build(const ClaimRef& ref, const json& claim) const {
  const json& meta = JsonField(claim, "metadata");
  const std::string who = StrCat("ResourceClaim ", ref.ns, "/", ref.name);
  if (JsonStringField(meta, "uid") != ref.uid) {
    return absl::FailedPreconditionError(
        StrCat(who, " has UID ", JsonStringField(meta, "uid"), ", not ", ref.uid,
               ": the claim the pod was allocated was deleted and another one made under its "
               "name; delete the pod so that it is scheduled with the new claim"));
  }
  const json& allocation = JsonField(JsonField(claim, "status"), "allocation");
  if (!allocation.is_object()) {
    return absl::FailedPreconditionError(StrCat(who, " is not allocated"));
  }
  PreparedClaim out;
  out.uid = ref.uid;
  out.ns = ref.ns;
  out.name = ref.name;
  for (const json& r : JsonField(JsonField(claim, "status"), "reservedFor")) {
    if (JsonStringField(r, "resource") == "pods")
      out.pods.push_back({JsonStringField(r, "name"), JsonStringField(r, "uid")});
  }
  for (const json& config : JsonField(JsonField(allocation, "devices"), "config")) {
    if (JsonStringField(JsonField(config, "opaque"), "driver") == kDriverName) {
      return absl::InvalidArgumentError(
          StrCat(who, " carries opaque configuration for ", kDriverName, " (from its ",
                 JsonStringField(config, "source") == "FromClass" ? "DeviceClass" : "claim",
                 "), which tessera does not take: remove it; ask for shares with capacity "
                 "requests (memory, compute)"));
    }
  }
  const json& results = JsonField(JsonField(allocation, "devices"), "results");
  for (size_t i = 0; i < results.size(); ++i) {
    const json& r = results[i];
    if (JsonStringField(r, "driver") != kDriverName) continue;
    const std::string device = JsonStringField(r, "device");
    const std::string pool = JsonStringField(r, "pool");
    if (pool != pool_->name) {
      return absl::FailedPreconditionError(StrCat(who, ": device ", device, " is in pool ", pool,
                                                  ", not in this node's pool ", pool_->name));
    }
    const PoolDevice* d = pool_->Find(device);
    if (d == nullptr) {
      return absl::NotFoundError(
          StrCat(who, ": device ", device, " is not among the devices node ", options_.node_name,
                 " publishes (its GPUs changed since the claim was allocated?): delete the pod "
                 "and its claim so that it is allocated again"));
    }
    if (!d->healthy) {
      spdlog::warn("{}: device {} is unhealthy ({}); prepared as allocated", who, device,
                   d->health_reason);
    }
    PreparedDevice p;
    p.request = JsonStringField(r, "request");
    p.pool = pool;
    p.device = device;
    p.share_id = JsonStringField(r, "shareID");
    p.gpu_uuid = d->gpu_uuid;
    p.gpu_index = gpus_->gpus[d->gpu_index].spec.index;
    if (d->mig) {
      p.mig = true;
      p.mig_profile = d->mig_profile;
      p.mig_start = d->placement.start;
      p.exclusive = true;
      p.memory_mib = d->memory_mib;
      p.compute_percent = d->compute_percent;
    } else {
      absl::StatusOr<Consumption> use = ConsumptionOf(r, d->memory_mib);
      if (!use.ok()) {
        return absl::InvalidArgumentError(
            StrCat(who, ": results[", i, "] (", device, "): ", use.status().message()));
      }
      p.exclusive = use->exclusive;
      p.memory_mib = use->memory_mib;
      p.compute_percent = use->compute_percent;
    }
    out.devices.push_back(std::move(p));
  }
  if (out.devices.empty()) {
    return absl::FailedPreconditionError(
        StrCat(who, " has no device of driver ", kDriverName, " allocated"));
  }
  return out;
}

std::string DraDriver::Conflict(const PreparedClaim& claim) const {
  // Everything else prepared, by GPU.
  std::map<std::string, std::vector<Use>> by_gpu;
  for (const auto& [uid, other] : state_.claims) {
    if (uid == claim.uid) continue;
    for (const PreparedDevice& d : other.devices) by_gpu[d.gpu_uuid].push_back({&other, &d});
  }
  // The claim's own devices count against each other too.
  for (const PreparedDevice& d : claim.devices) by_gpu[d.gpu_uuid].push_back({&claim, &d});

  for (const auto& [uuid, uses] : by_gpu) {
    bool mine = false;
    for (const Use& u : uses) mine = mine || u.claim == &claim;
    if (!mine) continue;
    const DiscoveredGpu* gpu = nullptr;
    for (const DiscoveredGpu& g : gpus_->gpus) {
      if (g.spec.uuid == uuid) gpu = &g;
    }
    int64_t memory = 0;
    int32_t compute = 0;
    for (size_t i = 0; i < uses.size(); ++i) {
      const PreparedDevice& a = *uses[i].device;
      if (!a.exclusive && !a.mig) {
        memory += a.memory_mib;
        compute += a.compute_percent;
      }
      for (size_t k = i + 1; k < uses.size(); ++k) {
        if (uses[i].claim != &claim && uses[k].claim != &claim) continue;  // not ours to judge
        const PreparedDevice& b = *uses[k].device;
        bool overlap = false;
        if (a.mig && b.mig) {
          const core::MigModel* model = gpu ? core::FindMigModel(gpu->spec.model) : nullptr;
          overlap = model == nullptr ||
                    core::MigInstancesConflict(*model,
                                               {static_cast<int8_t>(model->Find(a.mig_profile)),
                                                static_cast<int8_t>(a.mig_start)},
                                               {static_cast<int8_t>(model->Find(b.mig_profile)),
                                                static_cast<int8_t>(b.mig_start)});
        } else {
          overlap = a.mig || b.mig || a.exclusive || b.exclusive;
        }
        if (!overlap) continue;
        const Use& other = uses[i].claim == &claim ? uses[k] : uses[i];
        const Use& own = uses[i].claim == &claim ? uses[i] : uses[k];
        if (other.claim == &claim) {
          return StrCat("devices ", a.device, " and ", b.device, " of the claim overlap on GPU ",
                        uuid);
        }
        return StrCat("device ", own.device->device, " (GPU ", own.device->gpu_index, ", ", uuid,
                      ") is still prepared on this node for ResourceClaim ",
                      other.claim->Describe(), PodsOf(*other.claim), " as ", other.device->device,
                      ": the two allocations overlap (was that claim deleted while its pod "
                      "runs?). This claim is prepared once that pod has ended and the kubelet "
                      "has released it; delete that pod to free the GPU now");
      }
    }
    if (gpu && (memory > gpu->spec.memory_mib || compute > 100)) {
      std::vector<std::string> holders;
      for (const Use& u : uses) {
        if (u.claim != &claim && !u.device->exclusive) holders.push_back(u.claim->Describe());
      }
      return StrCat("GPU ", gpu->spec.index, " (", uuid, ") would hold shares of ", memory,
                    " MiB and ", compute, "% compute, more than its ", gpu->spec.memory_mib,
                    " MiB and 100%; it already serves ResourceClaim(s) ", StrJoin(holders, ", "),
                    " (was one deleted while its pod runs?). This claim is prepared once they "
                    "are released");
    }
  }
  return "";
}

absl::Status DraDriver::OpenSegments(const PreparedClaim& claim) {
  if (claim.share_dir.empty() || !options_.edits.shares.shim) return absl::OkStatus();
  std::map<std::string, std::pair<int64_t, int32_t>> shares;
  for (const PreparedDevice& d : claim.devices) {
    if (d.exclusive || d.mig) continue;
    shares[d.gpu_uuid].first += d.memory_mib;
    shares[d.gpu_uuid].second += d.compute_percent;
  }
  std::vector<std::unique_ptr<shim::Segment>> open;
  for (const auto& [uuid, use] : shares) {
    shim::SegmentOptions opt;
    opt.pod_uid = claim.uid;
    opt.limits.memory_limit_bytes = static_cast<uint64_t>(use.first) << 20;
    opt.limits.compute_limit_permille =
        use.second > 0 && use.second < 100 ? static_cast<uint32_t>(use.second) * 10 : 0;
    // The claim's ledgers in a tmpfs of their size (a container growing one fills that, never
    // the host's /run).
    if (options_.sized_ledger_folders) {
      opt.ledger_folder_bytes =
          shim::LedgerFolderBytes(static_cast<uint32_t>(shares.size()), opt.slots);
    }
    absl::StatusOr<std::unique_ptr<shim::Segment>> seg =
        shim::Segment::Create(claim.share_dir, uuid, opt);
    if (!seg.ok()) {
      return absl::InternalError(StrCat("the shim's files for GPU ", uuid, " in ", claim.share_dir,
                                        ": ", seg.status().message()));
    }
    open.push_back(std::move(*seg));
  }
  segments_[claim.uid] = std::move(open);
  return absl::OkStatus();
}

absl::Status DraDriver::WriteSpec(const PreparedClaim& claim) const {
  TESSERA_ASSIGN_OR_RETURN(CdiSpec spec, ClaimCdiSpec(claim, *gpus_, options_.edits));
  spec.annotations[kPreparedClaimAnnotation] = PreparedClaimToJson(claim).dump();
  return WriteCdiSpec(options_.cdi_dir, claim.cdi_file, spec);
}

absl::Status DraDriver::Materialize(PreparedClaim* claim) {
  TESSERA_RETURN_IF_ERROR(PrepareMig(claim));
  AssignCdiIds(options_.edits, claim);
  claim->cdi_file = TransientSpecFileName(kCdiVendor, kCdiClass, claim->uid);
  const bool shares = std::any_of(claim->devices.begin(), claim->devices.end(),
                                  [](const PreparedDevice& d) { return !d.exclusive && !d.mig; });
  if (shares && options_.edits.shares.shim) {
    claim->share_dir = (fs::path(options_.claims_dir) / claim->uid).string();
  }
  absl::Status status = OpenSegments(*claim);
  if (status.ok()) status = WriteSpec(*claim);
  return status;
}

void DraDriver::RemoveFiles(const PreparedClaim& claim) {
  segments_.erase(claim.uid);
  if (!claim.cdi_file.empty()) {
    absl::Status removed = RemoveCdiSpec(options_.cdi_dir, claim.cdi_file);
    if (!removed.ok()) spdlog::error("claim {}: {}", claim.Describe(), removed.message());
  }
  if (!claim.share_dir.empty()) {
    // The segments first (the ledger folder's tmpfs is unmounted), then the rest; through
    // descriptors, never following a symlink (shim/files_at.h).
    absl::Status removed = shim::RemovePodSegments(claim.share_dir);
    if (removed.ok()) removed = shim::RemoveTree(claim.share_dir);
    if (!removed.ok()) spdlog::error("claim {}: {}", claim.Describe(), removed.message());
  }
}

absl::Status DraDriver::SaveCheckpoint() { return checkpoint_.Save(options_.node_name, state_); }

const DiscoveredGpu* DraDriver::FindGpuLocked(const std::string& uuid) const {
  if (!gpus_) return nullptr;
  for (const DiscoveredGpu& g : gpus_->gpus) {
    if (g.spec.uuid == uuid) return &g;
  }
  return nullptr;
}

void DraDriver::UpdateGpuLocked(const DiscoveredGpu& gpu) {
  // The node's view follows the change at once; discovery reports it too, a moment later.
  auto next = std::make_shared<NodeGpus>(*gpus_);
  for (DiscoveredGpu& g : next->gpus) {
    if (g.spec.uuid == gpu.spec.uuid) g = gpu;
  }
  gpus_ = std::move(next);
}

absl::Status DraDriver::PrepareMig(PreparedClaim* claim) {
  for (PreparedDevice& d : claim->devices) {
    if (!d.mig) continue;
    absl::Status status = PrepareMigDevice(*claim, &d);
    if (!status.ok()) {
      return absl::Status(status.code(), StrCat("device ", d.device, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status DraDriver::PrepareMigDevice(const PreparedClaim& claim, PreparedDevice* d) {
  const DiscoveredGpu* gpu = FindGpuLocked(d->gpu_uuid);
  if (gpu == nullptr) {
    return absl::NotFoundError(StrCat("GPU ", d->gpu_uuid, " is not on this node (any more)"));
  }
  const core::MigModel* model = core::FindMigModel(gpu->spec.model);
  const int profile = model ? model->Find(d->mig_profile) : -1;
  if (profile < 0) {
    return absl::FailedPreconditionError(StrCat("GPU ", gpu->spec.index, " (", gpu->spec.model,
                                                ") has no MIG profile ", d->mig_profile));
  }
  const std::string instance = StrCat("MIG instance ", d->mig_profile, "@", d->mig_start);
  const std::string on_gpu = StrCat("GPU ", gpu->spec.index, " (", gpu->spec.uuid, ")");
  const std::string uuid = gpu->spec.uuid;
  auto owned = [&](const std::string& p, int start) {
    return std::find(state_.mig_instances.begin(), state_.mig_instances.end(),
                     OwnedMigInstance{uuid, p, start}) != state_.mig_instances.end();
  };

  if (gpu->spec.mig_enabled) {
    int k = FindMigInstance(*gpu, d->mig_profile, d->mig_start);
    auto no_identity = [&] {
      return static_cast<size_t>(k) >= gpu->mig_uuids.size() || gpu->mig_uuids[k].empty();
    };
    if (k >= 0 && no_identity() && options_.mig != nullptr) {
      // A GPU instance without its compute instance (a creation cut short): the backend
      // completes it.
      absl::StatusOr<DiscoveredGpu> after =
          options_.mig->ReconfigureMig(uuid, {}, {d->mig_profile, d->mig_start});
      if (!after.ok()) {
        return absl::Status(after.status().code(), StrCat("completing ", instance, " on ", on_gpu,
                                                          ": ", after.status().message()));
      }
      UpdateGpuLocked(*after);
      gpu = FindGpuLocked(uuid);
      k = FindMigInstance(*gpu, d->mig_profile, d->mig_start);
    }
    if (k >= 0) {  // configured already (by mig-parted, or created before a crash)
      if (no_identity()) {
        return absl::FailedPreconditionError(
            StrCat(instance, " exists on ", on_gpu,
                   ", but this node's GPU backend does not report its identity (MIG-...), which "
                   "the container needs"));
      }
      d->mig_uuid = gpu->mig_uuids[k];
      d->mig_created = owned(d->mig_profile, d->mig_start);
      spdlog::info("claim {}: {} on {} exists already ({}); used as it is", claim.Describe(),
                   instance, on_gpu, d->mig_uuid);
      return absl::OkStatus();
    }
  } else {
    if (!options_.mig_mode_switch) {
      return absl::FailedPreconditionError(StrCat(
          on_gpu, " is not in MIG mode, so ", instance,
          " cannot be created on it: turn MIG mode on (nvidia-smi -i ", gpu->spec.index,
          " -mig 1 while no process uses the GPU, or the GPU operator's MIG manager), or run the "
          "agent with --dra-mig-mode-switch so that it turns MIG mode on for idle GPUs itself"));
    }
    if (options_.mig == nullptr) {
      return absl::UnimplementedError(
          StrCat(on_gpu, " is not in MIG mode and this node's GPU backend cannot change it"));
    }
    // Recorded first: a crash after the switch leaves it known, and turned off again later.
    const bool recorded = std::find(state_.mig_mode_gpus.begin(), state_.mig_mode_gpus.end(),
                                    uuid) != state_.mig_mode_gpus.end();
    if (!recorded) state_.mig_mode_gpus.push_back(uuid);
    absl::Status saved = SaveCheckpoint();
    absl::StatusOr<DiscoveredGpu> after =
        saved.ok() ? options_.mig->SetMigMode(uuid, true) : absl::StatusOr<DiscoveredGpu>(saved);
    if (!after.ok()) {
      if (!recorded) std::erase(state_.mig_mode_gpus, uuid);
      (void)SaveCheckpoint();
      return absl::Status(after.status().code(), StrCat("turning MIG mode on for ", on_gpu, ": ",
                                                        after.status().message()));
    }
    UpdateGpuLocked(*after);
    spdlog::info("claim {}: MIG mode turned on for {}", claim.Describe(), on_gpu);
    gpu = FindGpuLocked(uuid);
  }

  if (options_.mig == nullptr) {
    return absl::UnimplementedError(
        StrCat(instance, " is not configured on ", on_gpu,
               " and this node's GPU backend cannot create MIG instances: configure it beforehand "
               "(nvidia-smi mig -cgi ",
               d->mig_profile, " -C, or mig-parted), or ask for a whole GPU or a share instead"));
  }
  // Instances in the way: the driver's own idle ones go; anyone else's stay, and the claim waits.
  const core::MigPlacement want{static_cast<int8_t>(profile), static_cast<int8_t>(d->mig_start)};
  std::vector<records::MigInstanceRecord> destroy;
  for (size_t i = 0; i < gpu->spec.mig_layout.size(); ++i) {
    const core::MigPlacement& m = gpu->spec.mig_layout[i];
    if (!core::MigInstancesConflict(*model, m, want)) continue;
    const std::string name(model->profiles[m.profile].name);
    if (owned(name, m.start)) {
      destroy.push_back({name, m.start});
      continue;
    }
    return absl::FailedPreconditionError(
        StrCat(on_gpu, " has MIG instance ", name, "@", static_cast<int>(m.start),
               i < gpu->mig_uuids.size() ? StrCat(" (", gpu->mig_uuids[i], ")") : "",
               ", which overlaps ", instance,
               " and was not created by tessera's DRA driver: destroy it (nvidia-smi mig -dci, "
               "-dgi) or reconfigure the GPU so that the allocated placement is free"));
  }
  state_.mig_instances.push_back({uuid, d->mig_profile, d->mig_start});
  absl::Status saved = SaveCheckpoint();
  absl::StatusOr<DiscoveredGpu> after =
      saved.ok() ? options_.mig->ReconfigureMig(uuid, destroy, {d->mig_profile, d->mig_start})
                 : absl::StatusOr<DiscoveredGpu>(saved);
  if (!after.ok()) {
    state_.mig_instances.pop_back();
    (void)SaveCheckpoint();
    return absl::Status(after.status().code(), StrCat("creating ", instance, " on ", on_gpu, ": ",
                                                      after.status().message()));
  }
  for (const records::MigInstanceRecord& r : destroy) {
    std::erase(state_.mig_instances, OwnedMigInstance{uuid, r.profile, r.start});
  }
  UpdateGpuLocked(*after);
  const int k = FindMigInstance(*after, d->mig_profile, d->mig_start);
  if (k < 0 || static_cast<size_t>(k) >= after->mig_uuids.size() || after->mig_uuids[k].empty()) {
    return absl::InternalError(
        StrCat(instance, " is not on ", on_gpu, " with an identity after creating it"));
  }
  d->mig_uuid = after->mig_uuids[k];
  d->mig_created = true;
  spdlog::info("claim {}: created {} on {}: {}", claim.Describe(), instance, on_gpu, d->mig_uuid);
  return absl::OkStatus();
}

void DraDriver::ReleaseMig() {
  auto held = [&](const std::string& gpu, const std::string& profile, int start) {
    for (const auto& [uid, c] : state_.claims) {
      for (const PreparedDevice& d : c.devices) {
        if (d.mig && d.gpu_uuid == gpu && d.mig_profile == profile && d.mig_start == start) {
          return true;
        }
      }
    }
    return false;
  };
  bool changed = false;
  for (const OwnedMigInstance& m : std::vector<OwnedMigInstance>(state_.mig_instances)) {
    if (held(m.gpu_uuid, m.profile, m.start)) continue;
    const DiscoveredGpu* gpu = FindGpuLocked(m.gpu_uuid);
    const std::string what =
        StrCat("MIG instance ", m.profile, "@", m.start, " of GPU ",
               gpu ? StrCat(gpu->spec.index, " (", m.gpu_uuid, ")") : m.gpu_uuid);
    if (gpu != nullptr && FindMigInstance(*gpu, m.profile, m.start) < 0) {
      std::erase(state_.mig_instances, m);  // gone already
      changed = true;
      continue;
    }
    if (options_.mig == nullptr) {
      spdlog::error("{} is no longer used but this node's GPU backend cannot destroy it", what);
      continue;
    }
    absl::StatusOr<DiscoveredGpu> after =
        options_.mig->DestroyMig(m.gpu_uuid, {m.profile, m.start});
    if (!after.ok() && !absl::IsNotFound(after.status())) {
      spdlog::error("destroying {}: {} (tried again at the next release or restart)", what,
                    after.status().message());
      continue;
    }
    if (after.ok()) UpdateGpuLocked(*after);
    std::erase(state_.mig_instances, m);
    changed = true;
    spdlog::info("destroyed {}", what);
  }
  for (const std::string& uuid : std::vector<std::string>(state_.mig_mode_gpus)) {
    const DiscoveredGpu* gpu = FindGpuLocked(uuid);
    if (gpu == nullptr) continue;
    bool in_use = !gpu->spec.mig_layout.empty();
    for (const auto& [uid, c] : state_.claims) {
      for (const PreparedDevice& d : c.devices) in_use = in_use || d.gpu_uuid == uuid;
    }
    if (gpu->spec.mig_enabled && in_use) continue;
    if (gpu->spec.mig_enabled) {
      const int index = gpu->spec.index;  // gpu does not outlive UpdateGpuLocked
      if (options_.mig == nullptr) continue;
      absl::StatusOr<DiscoveredGpu> after = options_.mig->SetMigMode(uuid, false);
      if (!after.ok()) {
        spdlog::error("turning MIG mode off for GPU {} ({}): {}", index, uuid,
                      after.status().message());
        continue;
      }
      UpdateGpuLocked(*after);
      spdlog::info("MIG mode turned off for GPU {} ({}): its last instance is gone", index, uuid);
    }
    std::erase(state_.mig_mode_gpus, uuid);
    changed = true;
  }
  if (changed) {
    absl::Status saved = SaveCheckpoint();
    if (!saved.ok()) spdlog::error("recording released MIG instances: {}", saved.message());
  }
}

std::map<std::string, DraDriver::ClaimAnswer> DraDriver::Prepare(
    const std::vector<ClaimRef>& claims) {
  std::map<std::string, ClaimAnswer> out;
  for (const ClaimRef& ref : claims) {
    ClaimAnswer& answer = out[ref.uid];
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = state_.claims.find(ref.uid);
      if (it != state_.claims.end()) {
        answer.devices = it->second.devices;  // prepared before (a kubelet retry or restart)
        continue;
      }
      if (!gpus_) {
        answer.error = "the agent has not discovered this node's GPUs yet; the kubelet retries";
        continue;
      }
    }
    // The API read happens outside the lock: other claims go on meanwhile.
    absl::StatusOr<json> claim = claims_.GetClaim(ref.ns, ref.name);
    if (!claim.ok()) {
      answer.error = absl::IsNotFound(claim.status())
                         ? StrCat("ResourceClaim ", ref.ns, "/", ref.name, " (", ref.uid,
                                  ") no longer exists: delete the pod that uses it")
                         : StrCat("reading ResourceClaim ", ref.ns, "/", ref.name, ": ",
                                  claim.status().message());
      ++refused_total_;
      spdlog::error("prepare: {}", answer.error);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = state_.claims.find(ref.uid);
        it != state_.claims.end()) {  // a parallel call did it
      answer.devices = it->second.devices;
      continue;
    }
    absl::StatusOr<PreparedClaim> built = Build(ref, *claim);
    std::string error;
    if (!built.ok()) {
      error = std::string(built.status().message());
    } else if (std::string conflict = Conflict(*built); !conflict.empty()) {
      error = StrCat("ResourceClaim ", built->Describe(), ": ", conflict);
    } else if (absl::Status made = Materialize(&*built); !made.ok()) {
      error = StrCat("ResourceClaim ", built->Describe(), ": ", made.message());
      RemoveFiles(*built);
      ReleaseMig();  // an instance created for it before the failure
    } else {
      state_.claims[built->uid] = *built;
      absl::Status saved = SaveCheckpoint();
      if (!saved.ok()) {
        state_.claims.erase(built->uid);
        RemoveFiles(*built);
        ReleaseMig();
        error = StrCat("ResourceClaim ", built->Describe(),
                       ": cannot record it in the "
                       "checkpoint (",
                       saved.message(), ")");
      }
    }
    if (!error.empty()) {
      answer.error = error;
      ++refused_total_;
      spdlog::error("prepare: {}", error);
      continue;
    }
    answer.devices = built->devices;
    ++prepared_total_;
    std::vector<std::string> what;
    for (const PreparedDevice& d : built->devices) {
      what.push_back(d.mig ? StrCat(d.device, " (MIG ", d.mig_uuid, ")")
                     : d.exclusive
                         ? StrCat(d.device, " (whole)")
                         : StrCat(d.device, " (", d.memory_mib, " MiB, ", d.compute_percent, "%)"));
    }
    spdlog::info("prepared claim {}: {}", built->Describe(), StrJoin(what, ", "));
  }
  return out;
}

std::map<std::string, std::string> DraDriver::Unprepare(const std::vector<ClaimRef>& claims) {
  std::map<std::string, std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const ClaimRef& ref : claims) {
    out[ref.uid] = "";
    auto it = state_.claims.find(ref.uid);
    if (it == state_.claims.end()) continue;  // not prepared (or already unprepared): done
    PreparedClaim claim = it->second;
    state_.claims.erase(it);
    absl::Status saved = SaveCheckpoint();
    if (!saved.ok()) {
      state_.claims[claim.uid] = claim;
      out[ref.uid] = StrCat("cannot record the release of ResourceClaim ", claim.Describe(),
                            " in the checkpoint: ", saved.message());
      spdlog::error("unprepare: {}", out[ref.uid]);
      continue;
    }
    RemoveFiles(claim);
    if (std::any_of(claim.devices.begin(), claim.devices.end(),
                    [](const PreparedDevice& d) { return d.mig; })) {
      ReleaseMig();
    }
    ++unprepared_total_;
    spdlog::info("unprepared claim {}", claim.Describe());
  }
  return out;
}

std::vector<DraDriver::LedgerTampered> DraDriver::ReapSegments() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LedgerTampered> tampered;
  const auto now = std::chrono::steady_clock::now();
  processes_.Refresh();  // every 2 s (DraAgent's cadence): one /proc scan at most, when asked
  for (auto& [uid, segs] : segments_) {
    auto prepared = state_.claims.find(uid);
    // A slot's host PID counts only if it is a process of one of the claim's pods.
    const shim::HostPidLookup lookup = [&](uint64_t inode,
                                           uint32_t pid) -> std::optional<uint32_t> {
      std::optional<uint32_t> host = processes_.HostPidOf(inode, pid);
      if (!host || prepared == state_.claims.end()) return std::nullopt;
      std::optional<ProcessOwner> owner = processes_.OwnerOf(*host);
      for (const ClaimConsumer& pod : prepared->second.pods) {
        if (owner && owner->pod_uid == pod.uid) return host;
      }
      return std::nullopt;
    };
    for (auto& s : segs) {
      shim::ReapResult r = s->Reap(lookup);
      if (!r.tampered.empty()) {
        spdlog::warn(
            "claim {} GPU {}: the ledger was changed under the agent ({}); its header "
            "was put back",
            uid, s->gpu_uuid(), r.tampered);
        auto& last = tamper_reported_[StrCat(uid, "/", s->gpu_uuid())];
        auto claim = state_.claims.find(uid);
        if (claim != state_.claims.end() && (last == std::chrono::steady_clock::time_point{} ||
                                             now - last >= std::chrono::minutes(1))) {
          last = now;
          tampered.push_back({claim->second, s->gpu_uuid(), r.tampered});
        }
      }
      if (r.slots > 0) {
        spdlog::info("claim {} GPU {}: {} dead process(es) released {} bytes", uid, s->gpu_uuid(),
                     r.slots, r.bytes);
      }
    }
  }
  return tampered;
}

absl::StatusOr<RestoreReport> DraDriver::Restore() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!gpus_) return absl::FailedPreconditionError("Restore needs the node's GPUs first");
  RestoreReport report;
  absl::StatusOr<CheckpointState> loaded = checkpoint_.Load(options_.node_name);
  const std::vector<std::string> spec_ids =
      ListTransientSpecIds(options_.cdi_dir, kCdiVendor, kCdiClass);
  if (loaded.ok()) {
    state_ = std::move(*loaded);
  } else {
    // Rebuild from the specs, which carry the same record; keep the bad file for a person.
    report.checkpoint_error = std::string(loaded.status().message());
    report.moved_to = StrCat(checkpoint_.path(), ".unreadable-", std::time(nullptr));
    std::error_code ec;
    fs::rename(checkpoint_.path(), report.moved_to, ec);
    if (ec) report.moved_to.clear();
    state_ = CheckpointState();
    for (const std::string& id : spec_ids) {
      absl::StatusOr<CdiSpec> spec = ReadCdiSpec(
          (fs::path(options_.cdi_dir) / TransientSpecFileName(kCdiVendor, kCdiClass, id)).string());
      if (!spec.ok()) continue;
      auto it = spec->annotations.find(kPreparedClaimAnnotation);
      if (it == spec->annotations.end()) continue;
      json record = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
      absl::StatusOr<PreparedClaim> claim = PreparedClaimFromJson(record);
      if (claim.ok() && claim->uid == id) state_.claims[claim->uid] = std::move(*claim);
    }
    // The MIG instances the prepared claims' records say the driver created stay its own.
    for (const auto& [uid, claim] : state_.claims) {
      for (const PreparedDevice& d : claim.devices) {
        if (d.mig && d.mig_created) {
          state_.mig_instances.push_back({d.gpu_uuid, d.mig_profile, d.mig_start});
        }
      }
    }
    TESSERA_RETURN_IF_ERROR(SaveCheckpoint());
  }
  report.claims = static_cast<int>(state_.claims.size());
  // Leftovers of work that never finished.
  for (const std::string& id : spec_ids) {
    if (state_.claims.count(id)) continue;
    if (RemoveCdiSpec(options_.cdi_dir, TransientSpecFileName(kCdiVendor, kCdiClass, id)).ok()) {
      ++report.leaked_specs_removed;
    }
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.claims_dir, ec)) {
    const std::string uid = entry.path().filename().string();
    if (!entry.is_directory() || !ValidUid(uid) || state_.claims.count(uid)) continue;
    absl::Status s = shim::RemovePodSegments(entry.path().string());
    if (s.ok()) s = shim::RemoveTree(entry.path().string());
    if (!s.ok()) spdlog::warn("{}", s.message());
    ++report.leaked_dirs_removed;
  }
  // MIG instances created for claims that were never recorded, or whose release did not finish.
  ReleaseMig();
  // What is prepared has its files.
  for (auto& [uid, claim] : state_.claims) {
    absl::Status seg = OpenSegments(claim);
    if (!seg.ok()) spdlog::error("restoring claim {}: {}", claim.Describe(), seg.message());
    const std::string spec = (fs::path(options_.cdi_dir) / claim.cdi_file).string();
    if (claim.cdi_file.empty() || fs::exists(spec, ec)) continue;
    absl::Status written = WriteSpec(claim);
    if (written.ok()) {
      ++report.specs_rewritten;
    } else {
      spdlog::error("restoring claim {}: its CDI spec cannot be written again: {}",
                    claim.Describe(), written.message());
    }
  }
  return report;
}

}  // namespace tessera::agent::dra
