// The opened NVML library (libnvidia-ml.so.1 through dlopen) and its functions, looked up once by
// NvmlDiscovery::Open. Shared by discovery (nvml_discovery.cc) and MIG changes (nvml_mig.cc); not
// part of the agent's interface.
#pragma once

#include <dlfcn.h>

#include <string>

#include "agent/discovery/nvml_api.h"
#include "common/strings.h"

namespace tessera::agent {

// The opened library: dlopen handle and the functions, looked up once. Optional functions (newer
// drivers only) are null when absent and the queries that need them are skipped.
class NvmlLibrary {
 public:
  ~NvmlLibrary() {
    if (initialized && shutdown) shutdown();
    if (handle) dlclose(handle);
  }

  std::string Error(nvml::Return r) const {
    const char* text = error_string ? error_string(r) : nullptr;
    return text ? StrCat(text, " (NVML error ", r, ")") : StrCat("NVML error ", r);
  }

  void* handle = nullptr;
  std::string path;  // what was opened, as dlinfo would name it
  bool initialized = false;

  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::SystemGetDriverVersionFn driver_version = nullptr;
  nvml::SystemGetCudaDriverVersionFn cuda_version = nullptr;
  nvml::DeviceGetCountFn count = nullptr;
  nvml::DeviceGetHandleByIndexFn by_index = nullptr;
  nvml::DeviceGetStringFn uuid = nullptr;
  nvml::DeviceGetStringFn name = nullptr;
  nvml::DeviceGetUintFn minor = nullptr;
  nvml::DeviceGetUintFn numa = nullptr;
  nvml::DeviceGetMemoryInfoFn memory = nullptr;
  nvml::DeviceGetMemoryInfoV2Fn memory_v2 = nullptr;
  nvml::DeviceGetAttributesFn attributes = nullptr;
  nvml::DeviceGetPciInfoFn pci = nullptr;
  nvml::DeviceGetCpuAffinityFn cpu_affinity = nullptr;
  nvml::DeviceGetTopologyCommonAncestorFn common_ancestor = nullptr;
  nvml::DeviceGetNvLinkStateFn nvlink_state = nullptr;
  nvml::DeviceGetNvLinkRemotePciInfoFn nvlink_remote_pci = nullptr;
  nvml::DeviceGetNvLinkRemoteDeviceTypeFn nvlink_remote_type = nullptr;
  nvml::DeviceGetGpuFabricInfoFn fabric = nullptr;
  nvml::DeviceGetGpuFabricInfoVFn fabric_v = nullptr;
  nvml::DeviceGetMigModeFn mig_mode = nullptr;
  nvml::DeviceGetGpuInstanceProfileInfoFn gi_profile = nullptr;
  nvml::DeviceGetGpuInstancesFn gi_list = nullptr;
  nvml::GpuInstanceGetInfoFn gi_info = nullptr;
  // MIG changes and MIG devices (nvml_mig.h); null when the driver lacks them.
  nvml::DeviceSetMigModeFn set_mig_mode = nullptr;
  nvml::DeviceGetGpuInstancePossiblePlacementsFn gi_placements = nullptr;
  nvml::DeviceCreateGpuInstanceWithPlacementFn gi_create = nullptr;
  nvml::GpuInstanceDestroyFn gi_destroy = nullptr;
  nvml::GpuInstanceGetComputeInstanceProfileInfoFn ci_profile = nullptr;
  nvml::GpuInstanceCreateComputeInstanceFn ci_create = nullptr;
  nvml::GpuInstanceGetComputeInstancesFn ci_list = nullptr;
  nvml::ComputeInstanceDestroyFn ci_destroy = nullptr;
  nvml::DeviceGetMaxMigDeviceCountFn mig_device_count = nullptr;
  nvml::DeviceGetMigDeviceHandleByIndexFn mig_device = nullptr;
  nvml::DeviceGetUintFn mig_gi_id = nullptr;  // nvmlDeviceGetGpuInstanceId
  nvml::DeviceGetUintFn mig_ci_id = nullptr;  // nvmlDeviceGetComputeInstanceId
  nvml::DeviceGetSupportedEventTypesFn supported_events = nullptr;
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::DeviceRegisterEventsFn register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  nvml::EventSetFreeFn event_set_free = nullptr;
  // Health queries (health conditions, xid.h); null on drivers without them.
  nvml::DeviceGetFieldValuesFn field_values = nullptr;
  nvml::DeviceGetRemappedRowsFn remapped_rows = nullptr;
  nvml::DeviceGetRetiredPagesPendingStatusFn retired_pending = nullptr;
};

}  // namespace tessera::agent
