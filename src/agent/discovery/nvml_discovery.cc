#include "agent/discovery/nvml_discovery.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <thread>

#include "agent/discovery/fake_gpus_file.h"
#include "agent/discovery/model_names.h"
#include "agent/discovery/numa.h"
#include "agent/discovery/nvml_library.h"
#include "agent/discovery/nvml_mig.h"
#include "agent/discovery/xid.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/mig.h"
#include "core/model/profiles.h"

namespace tessera::agent {

namespace {

template <typename Fn>
void Find(void* handle, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

std::string CString(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

// "0-15,32-47" from a CPU bit mask.
std::string CpuListFromMask(const std::vector<unsigned long>& mask) {
  std::vector<std::string> ranges;
  const int bits = static_cast<int>(mask.size() * sizeof(unsigned long) * 8);
  auto set = [&](int cpu) {
    const size_t word = static_cast<size_t>(cpu) / (sizeof(unsigned long) * 8);
    return (mask[word] >> (cpu % (sizeof(unsigned long) * 8))) & 1UL;
  };
  for (int cpu = 0; cpu < bits;) {
    if (!set(cpu)) {
      ++cpu;
      continue;
    }
    int last = cpu;
    while (last + 1 < bits && set(last + 1)) ++last;
    ranges.push_back(last == cpu ? StrCat(cpu) : StrCat(cpu, "-", last));
    cpu = last + 1;
  }
  return StrJoin(ranges, ",");
}

std::string FabricUuid(const unsigned char* bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < nvml::kFabricUuidLen; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 15]);
  }
  return out;
}

bool AllZero(const unsigned char* bytes, unsigned n) {
  return std::all_of(bytes, bytes + n, [](unsigned char b) { return b == 0; });
}

// NUMA node from sysfs, for drivers without nvmlDeviceGetNumaNodeId: the PCI device's numa_node
// (a 4-digit domain, lower case).
int32_t NumaFromSysfs(const std::string& sys_root, const std::string& bus_id) {
  if (bus_id.size() != 16) return -1;
  std::string sysfs = bus_id.substr(4);
  for (char& c : sysfs) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::ifstream in(sys_root + "/bus/pci/devices/" + sysfs + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

core::Link LinkForLevel(nvml::TopologyLevel level) {
  using core::LinkKind;
  switch (level) {
    case nvml::kTopologyInternal:
    case nvml::kTopologySingle:
      return {LinkKind::kPix, 0};
    case nvml::kTopologyMultiple:
      return {LinkKind::kPxb, 0};
    case nvml::kTopologyHostBridge:
      return {LinkKind::kPhb, 0};
    case nvml::kTopologyNode:
      return {LinkKind::kNode, 0};
    default:
      return {LinkKind::kSys, 0};
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlDiscovery>> NvmlDiscovery::Open(const std::string& library,
                                                                   const std::string& sys_root) {
  auto lib = std::make_unique<NvmlLibrary>();
  lib->handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->handle) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(StrCat(
        "cannot load NVML (", library, "): ", why ? why : "unknown error",
        ". Is the NVIDIA driver installed? In a container, mount the driver's libraries (the "
        "agent's DaemonSet mounts the host's /usr/lib/x86_64-linux-gnu) or pass --nvml-library; "
        "on a machine without GPUs use --gpus-file"));
  }
  lib->path = library;
  NvmlLibrary& l = *lib;
  Find(l.handle, "nvmlInit_v2", &l.init);
  Find(l.handle, "nvmlShutdown", &l.shutdown);
  Find(l.handle, "nvmlErrorString", &l.error_string);
  Find(l.handle, "nvmlSystemGetDriverVersion", &l.driver_version);
  Find(l.handle, "nvmlSystemGetCudaDriverVersion_v2", &l.cuda_version);
  Find(l.handle, "nvmlDeviceGetCount_v2", &l.count);
  Find(l.handle, "nvmlDeviceGetHandleByIndex_v2", &l.by_index);
  Find(l.handle, "nvmlDeviceGetUUID", &l.uuid);
  Find(l.handle, "nvmlDeviceGetName", &l.name);
  Find(l.handle, "nvmlDeviceGetMinorNumber", &l.minor);
  Find(l.handle, "nvmlDeviceGetNumaNodeId", &l.numa);
  Find(l.handle, "nvmlDeviceGetMemoryInfo", &l.memory);
  Find(l.handle, "nvmlDeviceGetMemoryInfo_v2", &l.memory_v2);
  Find(l.handle, "nvmlDeviceGetAttributes_v2", &l.attributes);
  Find(l.handle, "nvmlDeviceGetPciInfo_v3", &l.pci);
  Find(l.handle, "nvmlDeviceGetCpuAffinity", &l.cpu_affinity);
  Find(l.handle, "nvmlDeviceGetTopologyCommonAncestor", &l.common_ancestor);
  Find(l.handle, "nvmlDeviceGetNvLinkState", &l.nvlink_state);
  Find(l.handle, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &l.nvlink_remote_pci);
  Find(l.handle, "nvmlDeviceGetNvLinkRemoteDeviceType", &l.nvlink_remote_type);
  Find(l.handle, "nvmlDeviceGetGpuFabricInfo", &l.fabric);
  Find(l.handle, "nvmlDeviceGetGpuFabricInfoV", &l.fabric_v);
  Find(l.handle, "nvmlDeviceGetMigMode", &l.mig_mode);
  Find(l.handle, "nvmlDeviceGetGpuInstanceProfileInfo", &l.gi_profile);
  Find(l.handle, "nvmlDeviceGetGpuInstances", &l.gi_list);
  Find(l.handle, "nvmlGpuInstanceGetInfo", &l.gi_info);
  Find(l.handle, "nvmlDeviceSetMigMode", &l.set_mig_mode);
  Find(l.handle, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", &l.gi_placements);
  Find(l.handle, "nvmlDeviceCreateGpuInstanceWithPlacement", &l.gi_create);
  Find(l.handle, "nvmlGpuInstanceDestroy", &l.gi_destroy);
  Find(l.handle, "nvmlGpuInstanceGetComputeInstanceProfileInfo", &l.ci_profile);
  Find(l.handle, "nvmlGpuInstanceCreateComputeInstance", &l.ci_create);
  Find(l.handle, "nvmlGpuInstanceGetComputeInstances", &l.ci_list);
  Find(l.handle, "nvmlComputeInstanceDestroy", &l.ci_destroy);
  Find(l.handle, "nvmlDeviceGetMaxMigDeviceCount", &l.mig_device_count);
  Find(l.handle, "nvmlDeviceGetMigDeviceHandleByIndex", &l.mig_device);
  Find(l.handle, "nvmlDeviceGetGpuInstanceId", &l.mig_gi_id);
  Find(l.handle, "nvmlDeviceGetComputeInstanceId", &l.mig_ci_id);
  Find(l.handle, "nvmlDeviceGetSupportedEventTypes", &l.supported_events);
  Find(l.handle, "nvmlEventSetCreate", &l.event_set_create);
  Find(l.handle, "nvmlDeviceRegisterEvents", &l.register_events);
  Find(l.handle, "nvmlEventSetWait_v2", &l.event_set_wait);
  Find(l.handle, "nvmlEventSetFree", &l.event_set_free);
  Find(l.handle, "nvmlDeviceGetFieldValues", &l.field_values);
  Find(l.handle, "nvmlDeviceGetRemappedRows", &l.remapped_rows);
  Find(l.handle, "nvmlDeviceGetRetiredPagesPendingStatus", &l.retired_pending);

  std::vector<std::string> missing;
  auto need = [&](const void* fn, const char* symbol) {
    if (!fn) missing.emplace_back(symbol);
  };
  need(reinterpret_cast<const void*>(l.init), "nvmlInit_v2");
  need(reinterpret_cast<const void*>(l.shutdown), "nvmlShutdown");
  need(reinterpret_cast<const void*>(l.count), "nvmlDeviceGetCount_v2");
  need(reinterpret_cast<const void*>(l.by_index), "nvmlDeviceGetHandleByIndex_v2");
  need(reinterpret_cast<const void*>(l.uuid), "nvmlDeviceGetUUID");
  need(reinterpret_cast<const void*>(l.name), "nvmlDeviceGetName");
  need(reinterpret_cast<const void*>(l.memory), "nvmlDeviceGetMemoryInfo");
  need(reinterpret_cast<const void*>(l.pci), "nvmlDeviceGetPciInfo_v3");
  need(reinterpret_cast<const void*>(l.common_ancestor), "nvmlDeviceGetTopologyCommonAncestor");
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        StrCat(library, " lacks ", StrJoin(missing, ", "),
               ": the NVIDIA driver is too old for tessera (R450 or newer is needed)"));
  }
  const nvml::Return r = l.init();
  if (r != nvml::kSuccess) {
    std::string hint;
    switch (r) {
      case nvml::kErrorDriverNotLoaded:
        hint = "the NVIDIA kernel module is not loaded (no GPU, or the driver is not installed)";
        break;
      case nvml::kErrorNoPermission:
        hint = "no permission to open /dev/nvidia*: run the agent as root";
        break;
      case nvml::kErrorLibRmVersionMismatch:
        hint =
            "the library and the kernel module come from different driver versions: reboot or "
            "reload the driver";
        break;
      default:
        hint = "see `nvidia-smi` on this node";
    }
    return absl::FailedPreconditionError(StrCat("nvmlInit failed: ", l.Error(r), ": ", hint));
  }
  l.initialized = true;
  auto discovery = std::unique_ptr<NvmlDiscovery>(new NvmlDiscovery(std::move(lib)));
  discovery->sys_root_ = sys_root;
  return discovery;
}

NvmlDiscovery::NvmlDiscovery(std::unique_ptr<NvmlLibrary> lib) : lib_(std::move(lib)) {}

NvmlDiscovery::~NvmlDiscovery() {
  if (have_event_set_ && lib_->event_set_free) lib_->event_set_free(event_set_);
}

std::string NvmlDiscovery::Describe() const {
  std::string version;
  if (lib_->driver_version) {
    char buffer[nvml::kDriverVersionBufferSize] = {};
    if (lib_->driver_version(buffer, sizeof(buffer)) == nvml::kSuccess) {
      version = CString(buffer, sizeof(buffer));
    }
  }
  return StrCat("NVML (", lib_->path, version.empty() ? "" : ", driver ", version, ")");
}

absl::StatusOr<NodeGpus> NvmlDiscovery::Discover() {
  std::lock_guard<std::mutex> lock(mu_);
  return DiscoverLocked();
}

absl::StatusOr<NodeGpus> NvmlDiscovery::DiscoverLocked() {
  NvmlLibrary& l = *lib_;
  NodeGpus out;
  if (l.driver_version) {
    char buffer[nvml::kDriverVersionBufferSize] = {};
    if (l.driver_version(buffer, sizeof(buffer)) == nvml::kSuccess) {
      out.driver_version = CString(buffer, sizeof(buffer));
    }
  }
  if (l.cuda_version) {
    int v = 0;
    if (l.cuda_version(&v) == nvml::kSuccess && v > 0) {
      out.cuda_version = StrCat(v / 1000, ".", (v % 1000) / 10);
    }
  }
  unsigned count = 0;
  if (nvml::Return r = l.count(&count); r != nvml::kSuccess) {
    return absl::InternalError(StrCat("nvmlDeviceGetCount_v2: ", l.Error(r)));
  }
  if (count == 0) {
    return absl::NotFoundError(
        "NVML reports no GPU on this node (nvidia-smi -L lists none): nothing to publish");
  }
  if (count > static_cast<unsigned>(core::kMaxGpusPerNode)) {
    return absl::FailedPreconditionError(StrCat("NVML reports ", count,
                                                " GPUs; tessera supports at most ",
                                                core::kMaxGpusPerNode, " per node"));
  }
  const int n = static_cast<int>(count);
  std::vector<nvml::Device> devices(n, nvml::Device{nullptr});
  std::vector<bool> lost(n, false);
  std::vector<std::map<unsigned, std::string>> mig_by_gi(n);
  for (int i = 0; i < n; ++i) {
    DiscoveredGpu gpu;
    core::GpuSpec& spec = gpu.spec;
    spec.index = i;
    auto lose = [&](std::string_view call, nvml::Return r) {
      lost[i] = true;
      if (static_cast<size_t>(i) < last_.size()) gpu = last_[i];  // what it was before
      gpu.spec.index = i;
      gpu.conditions.clear();
      if (r == nvml::kErrorGpuIsLost) {
        gpu.conditions.push_back(Condition(HealthCondition::kGpuLost,
                                           StrCat(XidText(79), " (NVML: GPU is lost)"), {79}));
      } else {
        gpu.conditions.push_back(
            Condition(HealthCondition::kGpuLost, StrCat("NVML ", call, ": ", l.Error(r))));
      }
    };
    nvml::Return r = l.by_index(static_cast<unsigned>(i), &devices[i]);
    char buffer[nvml::kUuidBufferSize] = {};
    if (r == nvml::kSuccess) r = l.uuid(devices[i], buffer, sizeof(buffer));
    if (r == nvml::kErrorGpuIsLost ||
        (r != nvml::kSuccess && static_cast<size_t>(i) < last_.size())) {
      lose(r == nvml::kSuccess ? "nvmlDeviceGetUUID" : "nvmlDeviceGetHandleByIndex_v2", r);
    } else if (r != nvml::kSuccess) {
      return absl::InternalError(
          StrCat("GPU ", i, ": nvmlDeviceGetHandleByIndex_v2 / UUID: ", l.Error(r)));
    }
    if (!lost[i]) {
      spec.uuid = CString(buffer, sizeof(buffer));
      char name[nvml::kNameBufferSize] = {};
      if (nvml::Return rn = l.name(devices[i], name, sizeof(name)); rn == nvml::kSuccess) {
        gpu.product_name = CString(name, sizeof(name));
      } else if (rn == nvml::kErrorGpuIsLost) {
        lose("nvmlDeviceGetName", rn);
      }
    }
    if (!lost[i]) {
      spec.model = ModelFromProductName(gpu.product_name);
      nvml::MemoryV2 m2{};
      m2.version = nvml::kMemoryV2Version;
      nvml::Memory m1{};
      if (l.memory_v2 && l.memory_v2(devices[i], &m2) == nvml::kSuccess) {
        spec.memory_mib = static_cast<int64_t>(m2.total >> 20);
      } else if (nvml::Return rm = l.memory(devices[i], &m1); rm == nvml::kSuccess) {
        spec.memory_mib = static_cast<int64_t>(m1.total >> 20);
      } else if (rm == nvml::kErrorGpuIsLost) {
        lose("nvmlDeviceGetMemoryInfo", rm);
      } else {
        return absl::InternalError(
            StrCat("GPU ", i, " (", spec.uuid, "): nvmlDeviceGetMemoryInfo: ", l.Error(rm)));
      }
    }
    if (!lost[i]) {
      nvml::PciInfo pci{};
      if (nvml::Return rp = l.pci(devices[i], &pci); rp == nvml::kSuccess) {
        spec.pci_bus_id = NormalizePciBusId(CString(pci.busId, sizeof(pci.busId)));
      } else if (rp == nvml::kErrorGpuIsLost) {
        lose("nvmlDeviceGetPciInfo_v3", rp);
      }
    }
    if (!lost[i]) {
      unsigned v = 0;
      if (l.minor && l.minor(devices[i], &v) == nvml::kSuccess) gpu.minor = static_cast<int32_t>(v);
      if (l.numa && l.numa(devices[i], &v) == nvml::kSuccess) {
        spec.numa_node = static_cast<int32_t>(v);
      } else {
        spec.numa_node = NumaFromSysfs(sys_root_, spec.pci_bus_id);
      }
      if (l.cpu_affinity) {
        std::vector<unsigned long> mask(64, 0);  // 4096 CPUs
        if (l.cpu_affinity(devices[i], static_cast<unsigned>(mask.size()), mask.data()) ==
            nvml::kSuccess) {
          spec.cpu_affinity = CpuListFromMask(mask);
        }
      }
      // Neither the driver nor the PCI device says (a VM, a host without NUMA information): the
      // node of the GPU's CPUs, as nvidia-smi topo -m prints it (numa.h).
      if (spec.numa_node < 0 && !spec.cpu_affinity.empty()) {
        spec.numa_node = NumaNodeOfCpus(spec.cpu_affinity, ReadNodeCpus(sys_root_));
      }
      nvml::DeviceAttributes attributes{};
      if (l.attributes && l.attributes(devices[i], &attributes) == nvml::kSuccess &&
          attributes.multiprocessorCount > 0) {
        spec.sm_count = static_cast<int32_t>(attributes.multiprocessorCount);
      } else {
        spec.sm_count = core::KnownSmCount(spec.model);  // full GPUs: NVML answers for MIG only
      }
      // Fabric clique (GB200-class): the versioned call first, then the original one.
      nvml::GpuFabricInfoV2 fv{};
      fv.version = nvml::kGpuFabricInfoV2Version;
      nvml::GpuFabricInfo f1{};
      const unsigned char* cluster = nullptr;
      unsigned clique = 0;
      if (l.fabric_v && l.fabric_v(devices[i], &fv) == nvml::kSuccess) {
        if (fv.state == nvml::kFabricStateCompleted && fv.status == nvml::kSuccess) {
          cluster = fv.clusterUuid;
          clique = fv.cliqueId;
        }
      } else if (l.fabric && l.fabric(devices[i], &f1) == nvml::kSuccess) {
        if (f1.state == nvml::kFabricStateCompleted && f1.status == nvml::kSuccess) {
          cluster = f1.clusterUuid;
          clique = f1.cliqueId;
        }
      }
      if (cluster && !AllZero(cluster, nvml::kFabricUuidLen)) {
        gpu.has_fabric = true;
        gpu.fabric = FabricInfo{FabricUuid(cluster), clique};
      }
      // MIG mode and configured GPU instances.
      unsigned current = 0, pending = 0;
      std::string mig_problem;  // why the GPU's MIG instances cannot be described
      if (l.mig_mode && l.mig_mode(devices[i], &current, &pending) == nvml::kSuccess &&
          current == nvml::kMigEnable) {
        const core::MigModel* model = core::FindMigModel(gpu.product_name);
        if (!model) model = core::FindMigModel(spec.model);
        if (!model) {
          mig_problem =
              StrCat("MIG mode is on, but tessera has no MIG profile table for ", gpu.product_name,
                     " (it has: ", StrJoin(core::MigModelNames(), ", "), "): the GPU is not used");
        } else if (!l.gi_profile || !l.gi_list || !l.gi_info) {
          mig_problem = "MIG mode is on, but this driver cannot list GPU instances";
        } else {
          spec.mig_enabled = true;
          // The MIG devices (compute instances): their UUIDs by GPU instance id, the compute
          // instance with the lowest id where a GPU instance has several.
          std::map<unsigned, std::pair<unsigned, std::string>> mig_devices;
          unsigned max_devices = 0;
          if (l.mig_device_count && l.mig_device && l.mig_gi_id && l.mig_ci_id &&
              l.mig_device_count(devices[i], &max_devices) == nvml::kSuccess) {
            for (unsigned m = 0; m < max_devices; ++m) {
              nvml::Device mig{nullptr};
              unsigned gi_id = 0, ci_id = 0;
              char mig_uuid[nvml::kUuidBufferSize] = {};
              if (l.mig_device(devices[i], m, &mig) != nvml::kSuccess ||
                  l.mig_gi_id(mig, &gi_id) != nvml::kSuccess ||
                  l.mig_ci_id(mig, &ci_id) != nvml::kSuccess ||
                  l.uuid(mig, mig_uuid, sizeof(mig_uuid)) != nvml::kSuccess) {
                continue;
              }
              auto [it, fresh] =
                  mig_devices.try_emplace(gi_id, ci_id, CString(mig_uuid, sizeof(mig_uuid)));
              if (!fresh && ci_id < it->second.first) {
                it->second = {ci_id, CString(mig_uuid, sizeof(mig_uuid))};
              }
            }
          }
          std::vector<std::pair<core::MigPlacement, std::string>> placed;
          std::map<unsigned, std::string> by_gi;  // GPU instance id -> "profile@start"
          for (unsigned p = 0; p < nvml::kGpuInstanceProfileIndexMax && mig_problem.empty(); ++p) {
            nvml::GpuInstanceProfileInfo info{};
            if (l.gi_profile(devices[i], p, &info) != nvml::kSuccess) continue;
            if (info.instanceCount == 0) continue;
            std::vector<nvml::GpuInstance> instances(info.instanceCount,
                                                     nvml::GpuInstance{nullptr});
            unsigned got = 0;
            nvml::Return rl = l.gi_list(devices[i], info.id, instances.data(), &got);
            if (rl == nvml::kErrorNoPermission) {
              return absl::FailedPreconditionError(
                  StrCat("GPU ", i, " (", spec.uuid,
                         "): nvmlDeviceGetGpuInstances: no permission; listing MIG instances "
                         "needs root"));
            }
            if (rl != nvml::kSuccess) continue;
            for (unsigned k = 0; k < got && k < instances.size(); ++k) {
              nvml::GpuInstanceInfo gi{};
              if (l.gi_info(instances[k], &gi) != nvml::kSuccess) continue;
              int found = -1;
              for (size_t q = 0; q < model->profiles.size(); ++q) {
                if (model->profiles[q].id == static_cast<int32_t>(gi.profileId)) {
                  found = static_cast<int>(q);
                }
              }
              if (found < 0 || gi.placement.start >= static_cast<unsigned>(core::kMigSlots)) {
                mig_problem = StrCat("a MIG instance of profile id ", gi.profileId, " at slice ",
                                     gi.placement.start, " is not in tessera's ", model->model,
                                     " table: the GPU is not used");
                break;
              }
              by_gi[gi.id] = StrCat(model->profiles[found].name, "@", gi.placement.start);
              auto uuid_it = mig_devices.find(gi.id);
              placed.emplace_back(core::MigPlacement{static_cast<int8_t>(found),
                                                     static_cast<int8_t>(gi.placement.start)},
                                  uuid_it == mig_devices.end() ? "" : uuid_it->second.second);
            }
          }
          std::sort(placed.begin(), placed.end(),
                    [](const auto& a, const auto& b) { return a.first.start < b.first.start; });
          for (auto& [placement, mig_uuid] : placed) {
            spec.mig_layout.push_back(placement);
            gpu.mig_uuids.push_back(std::move(mig_uuid));
          }
          if (absl::Status valid = core::ValidateMigInstances(*model, spec.mig_layout, "");
              mig_problem.empty() && !valid.ok()) {
            mig_problem = StrCat("its MIG instances do not fit tessera's table", valid.message());
          }
          if (!mig_problem.empty()) {
            spec.mig_enabled = false;
            spec.mig_layout.clear();
            gpu.mig_uuids.clear();
          } else {
            mig_by_gi[i] = std::move(by_gi);
          }
        }
      }
      if (!mig_problem.empty()) {
        GpuCondition c = Condition(HealthCondition::kMarkedUnhealthy, mig_problem);
        c.effect = FaultEffect::kDrain;  // nothing new on it; what runs is not affected
        gpu.conditions.push_back(std::move(c));
      }
      HealthConditionsLocked(devices[i], &gpu);
    }
    gpu.health = HealthFromConditions(gpu.conditions);
    gpu.fault = gpu.health.healthy ? FaultEffect::kNone : StrongestEffect(gpu.conditions);
    out.gpus.push_back(std::move(gpu));
  }

  // Links: NVLink first (direct to a peer, or through NVSwitch), else the PCIe relation.
  std::vector<std::vector<int>> direct(n, std::vector<int>(n, 0));
  std::vector<int> switch_links(n, 0);
  if (l.nvlink_state && l.nvlink_remote_pci) {
    for (int i = 0; i < n; ++i) {
      if (lost[i]) continue;
      for (unsigned link = 0; link < nvml::kNvLinkMaxLinks; ++link) {
        nvml::EnableState active = 0;
        const nvml::Return r = l.nvlink_state(devices[i], link, &active);
        if (r == nvml::kErrorInvalidArgument || r == nvml::kErrorNotSupported) break;
        if (r != nvml::kSuccess || active != 1) continue;
        int type = nvml::kNvLinkDeviceTypeUnknown;
        if (l.nvlink_remote_type &&
            l.nvlink_remote_type(devices[i], link, &type) == nvml::kSuccess &&
            type == nvml::kNvLinkDeviceTypeSwitch) {
          ++switch_links[i];
          continue;
        }
        nvml::PciInfo remote{};
        if (l.nvlink_remote_pci(devices[i], link, &remote) != nvml::kSuccess) continue;
        const std::string bus = NormalizePciBusId(CString(remote.busId, sizeof(remote.busId)));
        for (int k = 0; k < n; ++k) {
          if (k != i && !bus.empty() && out.gpus[k].spec.pci_bus_id == bus) ++direct[i][k];
        }
      }
    }
  }
  out.links = core::LinkMatrix(n);
  for (int i = 0; i < n; ++i) {
    for (int k = i + 1; k < n; ++k) {
      // Each side counts the links it sees; both see the same direct links.
      const int lanes =
          std::max(direct[i][k], direct[k][i]) + std::min(switch_links[i], switch_links[k]);
      if (lanes > 0) {
        out.links.Set(i, k, core::Link{core::LinkKind::kNvLink, static_cast<uint8_t>(lanes)});
        continue;
      }
      if (lost[i] || lost[k]) {
        if (static_cast<size_t>(std::max(i, k)) < last_links_.size() &&
            last_links_.size() == static_cast<size_t>(n)) {
          out.links.Set(i, k, last_links_[i][k]);
        }
        continue;
      }
      nvml::TopologyLevel level = nvml::kTopologySystem;
      if (nvml::Return r = l.common_ancestor(devices[i], devices[k], &level); r != nvml::kSuccess) {
        return absl::InternalError(
            StrCat("nvmlDeviceGetTopologyCommonAncestor(GPU ", i, ", GPU ", k, "): ", l.Error(r)));
      }
      out.links.Set(i, k, LinkForLevel(level));
    }
  }

  // A GPU lost at the first discovery has nothing to describe it: it is kept (the indices of the
  // others must not move) with what the others are.
  for (int i = 0; i < n; ++i) {
    core::GpuSpec& spec = out.gpus[i].spec;
    if (spec.model.empty()) {
      for (const DiscoveredGpu& other : out.gpus) {
        if (!other.spec.model.empty()) {
          spec.model = other.spec.model;
          spec.memory_mib = other.spec.memory_mib;
          spec.sm_count = other.spec.sm_count;
          break;
        }
      }
      if (spec.model.empty()) {
        return absl::InternalError(StrCat("every GPU is lost: ", out.gpus[i].health.reason));
      }
    }
  }

  // Fabric: a node label needs every GPU in one clique.
  std::vector<std::string> cliques;
  for (const DiscoveredGpu& g : out.gpus) {
    if (g.has_fabric) cliques.push_back(StrCat(g.fabric.cluster_uuid, ".", g.fabric.clique_id));
  }
  std::sort(cliques.begin(), cliques.end());
  cliques.erase(std::unique(cliques.begin(), cliques.end()), cliques.end());
  if (cliques.size() > 1) {
    out.fabric_note = StrCat("GPUs report different NVLink fabric cliques (",
                             StrJoin(cliques, ", "), "): no tessera.dev/nvlink-domain label");
  }

  devices_ = devices;
  mig_by_gi_ = std::move(mig_by_gi);
  uuids_.clear();
  for (const DiscoveredGpu& g : out.gpus) uuids_.push_back(g.spec.uuid);
  last_ = out.gpus;
  last_links_.assign(n, std::vector<core::Link>(n));
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) last_links_[i][k] = out.links.at(i, k);
  }
  if (!events_registered_) {
    absl::Status registered = RegisterEvents();
    (void)registered;  // without events, health comes from discovery alone; Wait() says so
  }
  return out;
}

void NvmlDiscovery::HealthConditionsLocked(nvml::Device device, DiscoveredGpu* gpu) {
  NvmlLibrary& l = *lib_;
  // What the driver says the GPU needs (r570 and newer; XID 154 when it changes).
  if (l.field_values) {
    nvml::FieldValue v{};
    v.fieldId = nvml::kFieldGpuRecoveryAction;
    HealthCondition c;
    if (l.field_values(device, 1, &v) == nvml::kSuccess && v.nvmlReturn == nvml::kSuccess &&
        RecoveryActionCondition(v.value.uiVal, &c)) {
      gpu->conditions.push_back(Condition(
          c, StrCat(ClassifyCondition(c).text, " (NVML recovery action ", v.value.uiVal, ")")));
    }
  }
  // Memory: row remapping (Ampere and newer), else page retirement; both applied at a reset.
  unsigned corrected = 0, uncorrected = 0, pending = 0, failure = 0;
  if (l.remapped_rows &&
      l.remapped_rows(device, &corrected, &uncorrected, &pending, &failure) == nvml::kSuccess) {
    if (pending) {
      gpu->conditions.push_back(Condition(
          HealthCondition::kRowRemapPending,
          StrCat(ClassifyCondition(HealthCondition::kRowRemapPending).text, " (", corrected,
                 " correctable and ", uncorrected, " uncorrectable rows remapped)")));
    }
    if (failure) gpu->conditions.push_back(Condition(HealthCondition::kRowRemapFailure, ""));
    return;
  }
  nvml::EnableState retired = 0;
  if (l.retired_pending && l.retired_pending(device, &retired) == nvml::kSuccess && retired) {
    gpu->conditions.push_back(Condition(HealthCondition::kRetiredPagesPending, ""));
  }
}

absl::Status NvmlDiscovery::RegisterEvents() {
  NvmlLibrary& l = *lib_;
  events_registered_ = true;
  if (!l.event_set_create || !l.register_events || !l.event_set_wait) {
    return absl::UnimplementedError("this driver has no NVML events");
  }
  if (nvml::Return r = l.event_set_create(&event_set_); r != nvml::kSuccess) {
    return absl::InternalError(StrCat("nvmlEventSetCreate: ", l.Error(r)));
  }
  have_event_set_ = true;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (!devices_[i].handle) continue;
    unsigned long long supported = nvml::kEventTypeXidCriticalError | nvml::kEventMigConfigChange;
    if (l.supported_events) {
      unsigned long long s = 0;
      if (l.supported_events(devices_[i], &s) == nvml::kSuccess) supported &= s;
    }
    if (supported == 0) continue;
    // Not every GPU supports every event (and a GPU may refuse one): register what it takes.
    (void)l.register_events(devices_[i], supported, event_set_);
  }
  return absl::OkStatus();
}

absl::StatusOr<WaitResult> NvmlDiscovery::Wait(std::chrono::milliseconds timeout) {
  NvmlLibrary& l = *lib_;
  WaitResult result;
  bool have_event_set = false;
  nvml::EventSet event_set{nullptr};
  {
    std::lock_guard<std::mutex> lock(mu_);
    have_event_set = have_event_set_;
    event_set = event_set_;
  }
  if (!have_event_set) {
    std::this_thread::sleep_for(timeout);
    return result;
  }
  unsigned wait_ms = static_cast<unsigned>(std::max<int64_t>(0, timeout.count()));
  while (true) {
    nvml::EventData data{};
    const nvml::Return r = l.event_set_wait(event_set, &data, wait_ms);
    if (r == nvml::kErrorTimeout) break;
    if (r != nvml::kSuccess) {
      if (result.events.empty() && !result.changed) {
        return absl::InternalError(StrCat("nvmlEventSetWait_v2: ", l.Error(r)));
      }
      break;
    }
    wait_ms = 0;  // collect what else is queued, then return
    std::lock_guard<std::mutex> lock(mu_);
    int index = -1;
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i].handle == data.device.handle) index = static_cast<int>(i);
    }
    if (data.eventType & nvml::kEventMigConfigChange) result.changed = true;
    if (data.eventType & nvml::kEventTypeXidCriticalError) {
      std::string mig;  // the MIG instance, when the event names one
      if (index >= 0 && data.gpuInstanceId != nvml::kNoInstance) {
        auto it = mig_by_gi_[index].find(data.gpuInstanceId);
        if (it != mig_by_gi_[index].end()) mig = it->second;
      }
      HealthEvent e = XidEvent(index, index >= 0 ? uuids_[index] : "",
                               static_cast<int32_t>(data.eventData), std::move(mig));
      // Anything but the application's own fault may come with a changed state (a lost GPU, a
      // recovery action, pending remapping): discover again.
      if (e.klass.cause != FaultCause::kApplication) result.changed = true;
      result.events.push_back(std::move(e));
    }
  }
  return result;
}

absl::StatusOr<NvmlMigTarget> NvmlDiscovery::MigTargetLocked(const std::string& uuid,
                                                             const core::MigModel** model) {
  NvmlLibrary& l = *lib_;
  unsigned count = 0;
  if (nvml::Return r = l.count(&count); r != nvml::kSuccess) {
    return absl::InternalError(StrCat("nvmlDeviceGetCount_v2: ", l.Error(r)));
  }
  for (unsigned i = 0; i < count; ++i) {
    NvmlMigTarget t;
    char buffer[nvml::kUuidBufferSize] = {};
    if (l.by_index(i, &t.device) != nvml::kSuccess ||
        l.uuid(t.device, buffer, sizeof(buffer)) != nvml::kSuccess ||
        CString(buffer, sizeof(buffer)) != uuid) {
      continue;
    }
    t.index = static_cast<int>(i);
    t.uuid = uuid;
    char name[nvml::kNameBufferSize] = {};
    std::string product;
    if (l.name(t.device, name, sizeof(name)) == nvml::kSuccess) {
      product = CString(name, sizeof(name));
    }
    *model = core::FindMigModel(product);
    if (*model == nullptr) *model = core::FindMigModel(ModelFromProductName(product));
    if (*model == nullptr) {
      return absl::FailedPreconditionError(StrCat(
          t.Describe(), " (", product, "): tessera has no MIG profile table for it (it has: ",
          StrJoin(core::MigModelNames(), ", "), ")"));
    }
    return t;
  }
  return absl::NotFoundError(StrCat("NVML reports no GPU ", uuid, " on this node (any more)"));
}

absl::StatusOr<DiscoveredGpu> NvmlDiscovery::RediscoverLocked(const std::string& uuid) {
  TESSERA_ASSIGN_OR_RETURN(NodeGpus node, DiscoverLocked());
  for (DiscoveredGpu& g : node.gpus) {
    if (g.spec.uuid == uuid) return std::move(g);
  }
  return absl::NotFoundError(StrCat("GPU ", uuid, " is gone after the MIG change"));
}

namespace {

absl::StatusOr<const core::MigProfile*> MigProfileOf(const core::MigModel& model,
                                                     const NvmlMigTarget& t,
                                                     const records::MigInstanceRecord& r) {
  const int p = model.Find(r.profile);
  if (p < 0) {
    return absl::InvalidArgumentError(StrCat(t.Describe(), " (", model.model,
                                             ") has no MIG profile ", r.profile, " (it has ",
                                             StrJoin(model.ProfileNames(), ", "), ")"));
  }
  return &model.profiles[p];
}

}  // namespace

absl::StatusOr<DiscoveredGpu> NvmlDiscovery::ReconfigureMig(
    const std::string& uuid, const std::vector<records::MigInstanceRecord>& destroy,
    const records::MigInstanceRecord& create) {
  std::lock_guard<std::mutex> lock(mu_);
  const core::MigModel* model = nullptr;
  TESSERA_ASSIGN_OR_RETURN(NvmlMigTarget t, MigTargetLocked(uuid, &model));
  TESSERA_ASSIGN_OR_RETURN(const core::MigProfile* want, MigProfileOf(*model, t, create));
  std::vector<const core::MigProfile*> go;
  for (const records::MigInstanceRecord& d : destroy) {
    TESSERA_ASSIGN_OR_RETURN(const core::MigProfile* p, MigProfileOf(*model, t, d));
    go.push_back(p);
  }
  std::vector<std::string> destroyed;
  for (size_t k = 0; k < destroy.size(); ++k) {
    absl::Status gone = NvmlDestroyMigInstance(*lib_, t, *go[k], destroy[k].start);
    if (!gone.ok() && !absl::IsNotFound(gone)) {
      return absl::Status(
          gone.code(),
          StrCat("destroying what is in the way: ", gone.message(),
                 destroyed.empty()
                     ? ""
                     : StrCat(" (destroyed already: ", StrJoin(destroyed, ", "), ")")));
    }
    destroyed.push_back(StrCat(destroy[k].profile, "@", destroy[k].start));
  }
  absl::Status made = NvmlCreateMigInstance(*lib_, t, *want, create.start);
  if (!made.ok()) {
    return absl::Status(
        made.code(),
        StrCat(made.message(),
               destroyed.empty() ? ""
                                 : StrCat(" (destroyed before: ", StrJoin(destroyed, ", "), ")")));
  }
  return RediscoverLocked(uuid);
}

absl::StatusOr<DiscoveredGpu> NvmlDiscovery::DestroyMig(
    const std::string& uuid, const records::MigInstanceRecord& instance) {
  std::lock_guard<std::mutex> lock(mu_);
  const core::MigModel* model = nullptr;
  TESSERA_ASSIGN_OR_RETURN(NvmlMigTarget t, MigTargetLocked(uuid, &model));
  TESSERA_ASSIGN_OR_RETURN(const core::MigProfile* p, MigProfileOf(*model, t, instance));
  TESSERA_RETURN_IF_ERROR(NvmlDestroyMigInstance(*lib_, t, *p, instance.start));
  return RediscoverLocked(uuid);
}

absl::StatusOr<DiscoveredGpu> NvmlDiscovery::SetMigMode(const std::string& uuid, bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  const core::MigModel* model = nullptr;
  TESSERA_ASSIGN_OR_RETURN(NvmlMigTarget t, MigTargetLocked(uuid, &model));
  TESSERA_RETURN_IF_ERROR(NvmlSetMigMode(*lib_, t, enabled));
  return RediscoverLocked(uuid);
}

}  // namespace tessera::agent
