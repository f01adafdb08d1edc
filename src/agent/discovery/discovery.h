// GPU discovery for the node agent: what GPUs this node has, how they are linked, and whether they
// are healthy. One small interface with two backends:
//   - NVML (nvml_discovery.h): the NVIDIA driver's management library, loaded at run time with
//     dlopen("libnvidia-ml.so.1"), so that the agent starts (and says why it cannot work) on a
//     machine without the driver;
//   - a GPU description file (fake_discovery.h, format in fake_gpus_file.h) for machines without
//     GPUs: the node harness's fake GPUs and tests.
//
// The result is plain data (NodeGpus); turning it into the node's inventory record, labels and
// capacity is the publisher's job (agent/publish). Nothing here talks to Kubernetes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/discovery/xid.h"
#include "core/model/node.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::agent {

// The NVLink fabric a GPU belongs to on GB200-class (multi-node NVLink) systems: GPUs of one
// clique of one cluster reach each other over NVLink across trays. `nvidia-smi -q` prints it
// under "Fabric" (ClusterUUID, CliqueId).
struct FabricInfo {
  std::string cluster_uuid;  // "b7f0e0a1-..." (36 characters)
  uint32_t clique_id = 0;
  bool operator==(const FabricInfo&) const = default;
};

// A health condition the GPU shows now (xid.h's HealthCondition): it holds while the driver (or
// the description file) reports it.
struct GpuCondition {
  HealthCondition condition = HealthCondition::kMarkedUnhealthy;
  FaultEffect effect = FaultEffect::kFail;  // ClassifyCondition's, or the listed XIDs'
  std::vector<int32_t> xids;                // XIDs that explain it, when known
  std::string detail;                       // "NVML nvmlDeviceGetUUID: GPU is lost"
  bool operator==(const GpuCondition&) const = default;
};
// The condition with its table's effect and `detail`.
GpuCondition Condition(HealthCondition c, std::string detail, std::vector<int32_t> xids = {});

struct DiscoveredGpu {
  // index, uuid, model (tessera's name), memory_mib, sm_count, pci_bus_id, numa_node,
  // cpu_affinity, mig_enabled and mig_layout (configured GPU instances).
  core::GpuSpec spec;
  std::string product_name;  // what nvidia-smi prints as "Product Name", when known
  int32_t minor = -1;        // /dev/nvidia<minor>
  // What discovery found wrong with the GPU now; empty when nothing.
  std::vector<GpuCondition> conditions;
  // The health the inventory publishes: discovery sets it from `conditions`
  // (HealthFromConditions); the agent's health tracker (agent/health) replaces it with what it
  // holds (faults seen as events, quiet periods) before publishing.
  records::GpuHealth health;
  // The strongest effect of what makes `health` unhealthy (kNone when healthy): kDrain keeps new
  // pods off, kFail also acts on the running ones (DRA taint effect, fault policy).
  FaultEffect fault = FaultEffect::kNone;
  bool has_fabric = false;  // `fabric` is meaningful (the GPU registered with a fabric manager)
  FabricInfo fabric;
  // The identity of each configured MIG instance ("MIG-..."), parallel to spec.mig_layout; empty
  // where the backend does not know it.
  std::vector<std::string> mig_uuids;
};

// The MIG instance `profile`@`start` among a GPU's configured instances: its index in
// spec.mig_layout (and mig_uuids), or -1.
int FindMigInstance(const DiscoveredGpu& gpu, const std::string& profile, int start);

struct NodeGpus {
  std::string driver_version;       // "580.95.05", when known
  std::string cuda_version;         // "13.0", when known
  std::vector<DiscoveredGpu> gpus;  // in index order, at least one
  core::LinkMatrix links;           // gpus.size() x gpus.size()

  // The node's NVLink domain for the label tessera.dev/nvlink-domain: "<cluster uuid>.<clique>"
  // when every GPU reports the same fabric clique, else empty (and `fabric_note` says why when
  // GPUs disagree).
  std::string NvLinkDomain() const;
  std::string fabric_note;

  // The inventory record (gpus with health, links); what `tessera agent --print-inventory` prints.
  records::Inventory ToInventory() const;
};

// The published health of a GPU with these conditions: unhealthy with the conditions' XIDs and
// texts when any has an effect of kDrain or more.
records::GpuHealth HealthFromConditions(const std::vector<GpuCondition>& conditions);
// The strongest effect among `conditions` (kNone for none).
FaultEffect StrongestEffect(const std::vector<GpuCondition>& conditions);

// An XID error the driver reported, seen between two discoveries (an event, not a state).
struct HealthEvent {
  int32_t gpu_index = -1;
  std::string uuid;
  int32_t xid = 0;   // NVIDIA XID number
  std::string mig;   // the MIG instance it concerns ("1g.10gb@0"), when the driver says
  XidClass klass;    // ClassifyXid(xid)
  std::string text;  // XidText(xid), for logs and Events
  bool critical() const { return klass.effect >= FaultEffect::kDrain; }
};
// The event for XID `xid` on GPU `index` (`uuid`), classified.
HealthEvent XidEvent(int32_t index, std::string uuid, int32_t xid, std::string mig = "");

struct WaitResult {
  std::vector<HealthEvent> events;
  bool changed = false;  // discover again: the description or the MIG configuration changed
  std::vector<std::string> warnings;  // events that could not be read, for the log
};

class MigReconfigurer;

class GpuDiscovery {
 public:
  virtual ~GpuDiscovery() = default;

  // "nvml (driver 580.95.05)" or "file /etc/tessera/gpus.json", for logs.
  virtual std::string Describe() const = 0;

  // Every GPU of the node. Errors say what is wrong and what to do: the library or file is
  // missing or broken (kFailedPrecondition / kInvalidArgument), the node has no GPU
  // (kNotFound), a query failed (kInternal, with the call and NVML's message).
  [[nodiscard]] virtual absl::StatusOr<NodeGpus> Discover() = 0;

  // Blocks up to `timeout` for health events (XID errors) and changes; returns early when one
  // comes. Errors are for a backend that can no longer watch (the caller falls back to polling).
  [[nodiscard]] virtual absl::StatusOr<WaitResult> Wait(std::chrono::milliseconds timeout) = 0;

  // The backend's MIG changes (below), or nullptr for a backend that cannot change MIG.
  virtual MigReconfigurer* mig() { return nullptr; }
};

// Carries out MIG changes on one GPU: what the agent does for an assignment whose mig_plan creates
// the pod's instance, and for a DRA claim of a MIG placement (create it when the claim is
// prepared, destroy it when it is unprepared). Both backends implement it (the description file's
// by rewriting the file, NVML's through the driver: nvml_mig.h). Every call returns the GPU as it
// is afterwards (its MIG mode, its instances and their identities) and is thread-safe.
class MigReconfigurer {
 public:
  virtual ~MigReconfigurer() = default;
  // Destroys the idle instances `destroy`, then creates `create` (a GPU instance of the profile
  // at the placement, and its compute instance), on the GPU `uuid`.
  [[nodiscard]] virtual absl::StatusOr<DiscoveredGpu> ReconfigureMig(
      const std::string& uuid, const std::vector<records::MigInstanceRecord>& destroy,
      const records::MigInstanceRecord& create) = 0;
  // Destroys the instance `instance` (its compute instances, then the GPU instance).
  [[nodiscard]] virtual absl::StatusOr<DiscoveredGpu> DestroyMig(
      const std::string& uuid, const records::MigInstanceRecord& instance) = 0;
  // Turns MIG mode on or off; off only with no instance left on the GPU.
  [[nodiscard]] virtual absl::StatusOr<DiscoveredGpu> SetMigMode(const std::string& uuid,
                                                                 bool enabled) = 0;
};

}  // namespace tessera::agent
