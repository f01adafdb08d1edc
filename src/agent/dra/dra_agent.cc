#include "agent/dra/dra_agent.h"

#include <filesystem>

#include "agent/dra/names.h"
#include "common/status.h"
#include "common/strings.h"
#include "k8s/client/events.h"
#include "spdlog/spdlog.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// "00000000:18:00.0" (NVML) -> "0000:18:00.0" (sysfs).
std::string SysfsPciId(const std::string& bus_id) { return StandardPciBusId(bus_id); }

}  // namespace

std::map<std::string, std::string> PcieRoots(const NodeGpus& gpus,
                                             const std::string& sysfs_pci_dir) {
  std::map<std::string, std::string> out;
  for (const DiscoveredGpu& g : gpus.gpus) {
    const std::string id = SysfsPciId(g.spec.pci_bus_id);
    if (id.empty()) continue;
    std::error_code ec;
    const fs::path target = fs::canonical(fs::path(sysfs_pci_dir) / id, ec);
    if (ec) continue;
    for (const fs::path& part : target) {
      const std::string p = part.string();
      if (p.rfind("pci", 0) == 0 && p.find(':') != std::string::npos) {
        out[g.spec.pci_bus_id] = p;
        break;
      }
    }
  }
  return out;
}

DraAgent::DraAgent(k8s::ApiClient& client, DraAgentOptions options)
    : client_(client),
      options_(std::move(options)),
      claims_(client),
      driver_(claims_,
              DriverOptions{.node_name = options_.node_name,
                            .cdi_dir = options_.cdi_dir,
                            .claims_dir = options_.claims_dir,
                            .checkpoint_path = StrCat(options_.kubelet_dir, "/", kPluginsSubdir,
                                                      "/", kDriverName, "/checkpoint.json"),
                            .edits = options_.edits,
                            .mig = options_.mig,
                            .mig_mode_switch = options_.mig_mode_switch}),
      slices_(client, options_.node_name),
      plugin_(driver_,
              PluginServerOptions{.kubelet_dir = options_.kubelet_dir, .on_registered = [this] {
                                    std::lock_guard<std::mutex> lock(mu_);
                                    republish_ = true;
                                    cv_.notify_all();
                                  }}) {}

DraAgent::~DraAgent() { plugin_.Stop(); }

void DraAgent::OnGpus(std::shared_ptr<const NodeGpus> gpus) {
  PoolOptions po;
  po.node_name = options_.node_name;
  po.mig_devices = options_.mig_devices;
  po.mig_mode_switch = options_.mig_mode_switch;
  po.pcie_roots = PcieRoots(*gpus, options_.sysfs_pci_dir);
  po.no_execute_on_failure = options_.no_execute_on_failure;
  auto pool = std::make_shared<const Pool>(BuildPool(*gpus, po));
  driver_.SetGpus(gpus, pool);
  std::lock_guard<std::mutex> lock(mu_);
  if (!pool_ || pool_->slices != pool->slices) gpus_changed_ = true;
  gpus_ = std::move(gpus);
  pool_ = std::move(pool);
  cv_.notify_all();
}

void DraAgent::ReportDeletedClaims() {
  for (const PreparedClaim& c : driver_.Prepared()) {
    if (c.deletion_reported) continue;
    absl::StatusOr<json> claim = claims_.GetClaim(c.ns, c.name);
    std::string why;
    if (!claim.ok()) {
      if (!absl::IsNotFound(claim.status())) continue;  // try again later
      why = "was deleted";
    } else if ((*claim)["metadata"].value("uid", "") != c.uid) {
      why = "was deleted (another claim now has its name)";
    } else if ((*claim)["metadata"].contains("deletionTimestamp")) {
      why = "is being deleted";
    } else {
      continue;
    }
    std::vector<std::string> devices;
    for (const PreparedDevice& d : c.devices) {
      devices.push_back(StrCat(d.device, " (GPU ", d.gpu_index, ", ", d.gpu_uuid, ")"));
    }
    const std::string message =
        StrCat("ResourceClaim ", c.ns, "/", c.name, " ", why, " while this pod runs on node ",
               options_.node_name, ": ", StrJoin(devices, ", "),
               " stay prepared for the pod until it ends, then they are released; delete the pod "
               "to release them now");
    bool all_posted = true;
    for (const ClaimConsumer& pod : c.pods) {
      const absl::Status posted =
          k8s::PostEvent(client_,
                         {.object = k8s::PodRef(c.ns, pod.name, pod.uid),
                          .reason = "ResourceClaimDeleted",
                          .message = message},
                         {"tessera-agent", options_.node_name, options_.node_name});
      if (!posted.ok()) {
        all_posted = false;
        spdlog::error("{}", posted.message());
      }
    }
    spdlog::warn("{}", message);
    if (all_posted) {
      absl::Status saved = driver_.SetDeletionReported(c.uid);
      if (!saved.ok()) spdlog::error("claim {}: {}", c.Describe(), saved.message());
    }
  }
}

absl::Status DraAgent::Run(const std::atomic<bool>& stop) {
  // 1. The first discovery.
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!gpus_ && !stop.load()) cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (!gpus_) return absl::OkStatus();
  }
  absl::StatusOr<RestoreReport> restored = driver_.Restore();
  if (!restored.ok()) {
    return absl::Status(restored.status().code(),
                        StrCat("dra: restoring what was prepared: ", restored.status().message()));
  }
  if (!restored->checkpoint_error.empty()) {
    spdlog::error(
        "dra: the checkpoint was unreadable ({}); rebuilt from the CDI specs, the bad "
        "file kept as {}",
        restored->checkpoint_error, restored->moved_to);
  }
  spdlog::info(
      "dra: {} prepared claim(s) restored, {} CDI spec(s) rewritten, {} leftover spec(s) "
      "and {} leftover folder(s) removed",
      restored->claims, restored->specs_rewritten, restored->leaked_specs_removed,
      restored->leaked_dirs_removed);
  absl::StatusOr<int> removed = slices_.RemoveClassicResources();
  if (!removed.ok()) {
    spdlog::error("dra: removing the classic extended resources: {}", removed.status().message());
  } else if (*removed > 0) {
    spdlog::info("dra: removed {} classic tessera.dev extended resource(s) from the Node",
                 *removed);
  }

  // 2. Slices, then the plugin.
  auto publish = [&] {
    std::shared_ptr<const Pool> pool;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pool = pool_;
      gpus_changed_ = false;
      republish_ = false;
    }
    absl::StatusOr<SliceOutcome> out = slices_.Reconcile(*pool);
    if (!out.ok()) {
      spdlog::error("dra: publishing ResourceSlices: {}", out.status().message());
      std::lock_guard<std::mutex> lock(mu_);
      republish_ = true;  // next resync
      return;
    }
    if (out->changed()) {
      spdlog::info(
          "dra: pool {} generation {}: {} device(s) in {} slice(s) ({} created, {} "
          "updated, {} deleted)",
          pool->name, out->generation, pool->devices.size(), pool->slices.size(), out->created,
          out->updated, out->deleted);
    }
  };
  publish();
  TESSERA_RETURN_IF_ERROR(plugin_.Start());

  // 3. Keep it up to date.
  auto next_resync = Clock::now() + options_.resync;
  auto next_reap = Clock::now() + std::chrono::seconds(2);
  while (!stop.load()) {
    bool changed = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(250));
      changed = gpus_changed_ || republish_;
    }
    const auto now = Clock::now();
    if (changed || now >= next_resync) {
      publish();
      if (now >= next_resync) {
        ReportDeletedClaims();
        next_resync = now + options_.resync;
      }
    }
    if (now >= next_reap) {
      for (const DraDriver::LedgerTampered& t : driver_.ReapSegments()) {
        for (const ClaimConsumer& pod : t.claim.pods) {
          const absl::Status posted = k8s::PostEvent(
              client_,
              {.object = k8s::PodRef(t.claim.ns, pod.name, pod.uid),
               .reason = "LedgerTampered",
               .message = StrCat("a process of this pod changed the GPU memory ledger of GPU ",
                                 t.gpu_uuid, " (claim ", t.claim.Describe(), "; ", t.what,
                                 "): the node agent put back its header and trusts nothing it "
                                 "reads there; the CUDA shim never does this")},
              {"tessera-agent", options_.node_name, options_.node_name});
          if (!posted.ok()) spdlog::error("{}", posted.message());
        }
      }
      next_reap = now + std::chrono::seconds(2);
    }
  }
  plugin_.Stop();
  spdlog::info("dra: kubelet plugin stopped; prepared claims stay in the checkpoint");
  return absl::OkStatus();
}

}  // namespace tessera::agent::dra
