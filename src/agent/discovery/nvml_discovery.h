// The NVML discovery backend: the node's NVIDIA GPUs as the driver reports them, through
// libnvidia-ml.so.1 opened at run time (nvml_api.h; no link-time dependency on the driver).
//
// What it asks, per GPU: UUID, product name (-> tessera's model name), memory, SM count (when the
// driver answers; else tessera's figure for the model), PCI bus id, minor number, NUMA node (NVML,
// else sysfs, else the node of its CPU affinity: numa.h) and CPU affinity, MIG mode and configured
// GPU instances, NVLink fabric clique. Per pair: the active NVLinks (direct to the peer, or through
// NVSwitch: NV<min of both GPUs' switch links>, as nvidia-smi topo -m counts them) or else the PCIe
// relation (closest common ancestor: PIX/PXB/PHB/NODE/SYS).
//
// Health: XID critical-error events (nvmlEventSetWait) are returned by Wait(), classified (xid.h),
// with the MIG instance they concern when the event names a GPU instance; what they mean over time
// is the agent's health tracker's (agent/health). Each discovery reads the health conditions the
// driver reports now (xid.h HealthCondition): a lost GPU, the driver's recovery action
// (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, r570 and newer), pending row remapping or a remapping
// failure (nvmlDeviceGetRemappedRows), else pending page retirement; an NVLink that is down shows
// as the link matrix without it. A MIG-enabled GPU whose instances tessera cannot describe (no MIG
// table for the model, an unknown profile) carries a condition with the reason, so that nothing is
// placed on it by mistake.
//
// MIG changes (MigReconfigurer, nvml_mig.h): MIG mode on and off, GPU instances created at an exact
// placement with their compute instance, destroyed compute instances first; each answers the GPU
// as a discovery right after the change finds it (with its instances' MIG device UUIDs).
//
// Thread-safe: Discover() and the MIG changes take one lock; Wait() blocks outside it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/discovery/discovery.h"
#include "agent/discovery/nvml_api.h"

namespace tessera::agent {

class NvmlLibrary;  // the opened library and its functions (nvml_discovery.cc)

struct NvmlMigTarget;

class NvmlDiscovery : public GpuDiscovery, public MigReconfigurer {
 public:
  // Opens `library` (a soname searched as the dynamic loader does, or a path) and initialises
  // NVML. Errors: the library is missing (the NVIDIA driver is not installed, or not mounted into
  // the agent's container), a symbol is missing, nvmlInit fails (driver not loaded, version
  // mismatch, no permission), each with what to do.
  // `sys_root` is where sysfs is (the PCI devices' NUMA nodes, the nodes' CPUs; tests give their
  // own).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NvmlDiscovery>> Open(
      const std::string& library = "libnvidia-ml.so.1", const std::string& sys_root = "/sys");
  ~NvmlDiscovery() override;

  std::string Describe() const override;
  absl::StatusOr<NodeGpus> Discover() override;
  absl::StatusOr<WaitResult> Wait(std::chrono::milliseconds timeout) override;
  MigReconfigurer* mig() override { return this; }

  absl::StatusOr<DiscoveredGpu> ReconfigureMig(
      const std::string& uuid, const std::vector<records::MigInstanceRecord>& destroy,
      const records::MigInstanceRecord& create) override;
  absl::StatusOr<DiscoveredGpu> DestroyMig(const std::string& uuid,
                                           const records::MigInstanceRecord& instance) override;
  absl::StatusOr<DiscoveredGpu> SetMigMode(const std::string& uuid, bool enabled) override;

 private:
  explicit NvmlDiscovery(std::unique_ptr<NvmlLibrary> lib);
  absl::StatusOr<NodeGpus> DiscoverLocked();
  absl::Status RegisterEvents();
  // The GPU `uuid` now (a fresh handle: a MIG mode change may reset the GPU) and its MIG table.
  absl::StatusOr<NvmlMigTarget> MigTargetLocked(const std::string& uuid,
                                                const core::MigModel** model);
  // The driver's health conditions of one GPU (recovery action, memory remapping), added to
  // `gpu->conditions`.
  void HealthConditionsLocked(nvml::Device device, DiscoveredGpu* gpu);
  // The GPU `uuid` as discovery finds it after a change.
  absl::StatusOr<DiscoveredGpu> RediscoverLocked(const std::string& uuid);

  std::mutex mu_;  // guards everything below, and serialises MIG changes

  std::unique_ptr<NvmlLibrary> lib_;
  std::string sys_root_ = "/sys";
  std::vector<nvml::Device> devices_;  // from the last Discover(), by index
  std::vector<std::string> uuids_;     // same order
  // By GPU index: GPU instance id -> "profile@start", for the MIG instance an XID event names.
  std::vector<std::map<unsigned, std::string>> mig_by_gi_;
  bool events_registered_ = false;
  bool have_event_set_ = false;
  nvml::EventSet event_set_{nullptr};
  // The last discovery, by index: what a GPU that is lost later is still described as.
  std::vector<DiscoveredGpu> last_;
  std::vector<std::vector<core::Link>> last_links_;
};

}  // namespace tessera::agent
