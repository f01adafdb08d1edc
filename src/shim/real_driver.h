// The real driver's entry points, as the shim calls them. Resolved once, by name, from the real
// libcuda.so.1 and libnvidia-ml.so.1 that the shim lists as DT_NEEDED (contract.h), through
// their own handles, so a lookup never finds the shim's definition of the same name.
//
// TESSERA_CUDA_HOOKS lists every driver function the shim exports (and therefore intercepts),
// with the CUDA version that introduced that variant (cudaTypedefs.h's PFN_<name>_v<version>:
// what cuGetProcAddress's version argument selects by); TESSERA_CUDA_USED the ones it only calls. A
// hooked name the installed driver lacks stays null: the shim's export then answers
// CUDA_ERROR_NOT_SUPPORTED instead of crashing.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "shim/cuda_abi.h"
#include "shim/nvml_abi.h"

extern "C" {
// Legacy launch and capture-mode entry points, not needed elsewhere.
typedef CUresult (*PFN_cuLaunch)(CUfunction);
typedef CUresult (*PFN_cuLaunchGrid)(CUfunction, int, int);
typedef CUresult (*PFN_cuLaunchGridAsync)(CUfunction, int, int, CUstream);
typedef CUresult (*PFN_cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode*);
typedef CUresult (*PFN_cuStreamGetDevice)(CUstream, CUdevice*);
typedef CUresult (*PFN_cuMemPoolImportFromShareableHandle)(CUmemoryPool*, void*,
                                                           CUmemAllocationHandleType,
                                                           unsigned long long);
}

// X(name, pfn type)
#define TESSERA_CUDA_HOOKS(X)                                                             \
  X(cuGetProcAddress, PFN_cuGetProcAddress, 11030)                                        \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v2, 12000)                                  \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v2, 3020)                                               \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v2, 3020)                                     \
  X(cuMemAlloc, PFN_cuMemAlloc_v1, 2000)                                                  \
  X(cuMemAllocPitch, PFN_cuMemAllocPitch_v1, 2000)                                        \
  X(cuArrayCreate, PFN_cuArrayCreate_v1, 2000)                                            \
  X(cuArray3DCreate, PFN_cuArray3DCreate_v1, 2000)                                        \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged, 6000)                                       \
  X(cuMemFree_v2, PFN_cuMemFree_v2, 3020)                                                 \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v2, 3020)                                           \
  X(cuMemGetInfo, PFN_cuMemGetInfo, 2000)                                                 \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v2, 3020)                                   \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem, 2000)                                         \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v2, 3020)                                         \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v2, 3020)                                     \
  X(cuArrayDestroy, PFN_cuArrayDestroy, 2000)                                             \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate, 5000)                             \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy, 5000)                           \
  X(cuMemCreate, PFN_cuMemCreate, 10020)                                                  \
  X(cuMemRelease, PFN_cuMemRelease, 10020)                                                \
  X(cuMemMap, PFN_cuMemMap, 10020)                                                        \
  X(cuMemUnmap, PFN_cuMemUnmap, 10020)                                                    \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle, 11000)                  \
  X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle, 10020)                \
  X(cuMemImportFromShareableHandle, PFN_cuMemImportFromShareableHandle, 10020)            \
  X(cuIpcGetMemHandle, PFN_cuIpcGetMemHandle, 4010)                                       \
  X(cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle, 4010)                                     \
  X(cuIpcOpenMemHandle_v2, PFN_cuIpcOpenMemHandle_v2, 11000)                              \
  X(cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle, 4010)                                   \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync, 11020)                                          \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync, 11020)                                     \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync, 11020)                          \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync, 11020)                     \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync, 11020)                                            \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync, 11020)                                       \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate, 11020)                                          \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy, 11020)                                        \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo, 11020)                                          \
  X(cuMemPoolImportFromShareableHandle, PFN_cuMemPoolImportFromShareableHandle, 11020)    \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize, 2000)                                   \
  X(cuStreamSynchronize_ptsz, PFN_cuStreamSynchronize, 7000)                              \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize, 2000)                                         \
  X(cuEventSynchronize, PFN_cuEventSynchronize, 2000)                                     \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v2, 4000)                                           \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain, 7000)                         \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v2, 11000)                \
  X(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v2, 11000)                    \
  X(cuLaunchKernel, PFN_cuLaunchKernel, 4000)                                             \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel, 7000)                                        \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx, 11060)                                        \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx, 11060)                                   \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel, 9000)                       \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel, 9000)                  \
  X(cuLaunchCooperativeKernelMultiDevice, PFN_cuLaunchCooperativeKernelMultiDevice, 9000) \
  X(cuGraphLaunch, PFN_cuGraphLaunch, 10000)                                              \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch, 10000)                                         \
  X(cuGraphUpload, PFN_cuGraphUpload, 11010)                                              \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags, 11040)                  \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy, 10000)                                    \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim, 11040)                                \
  X(cuCtxSetLimit, PFN_cuCtxSetLimit, 3010)                                               \
  X(cuLaunch, PFN_cuLaunch, 2000)                                                         \
  X(cuLaunchGrid, PFN_cuLaunchGrid, 2000)                                                 \
  X(cuLaunchGridAsync, PFN_cuLaunchGridAsync, 2000)

#define TESSERA_CUDA_USED(X)                                                            \
  X(cuDeviceGetUuid, PFN_cuDeviceGetUuid)                                               \
  X(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid)                                            \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount)                                             \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice)                                                 \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent)                                               \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v2)                                       \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v2)                                         \
  X(cuStreamGetCtx, PFN_cuStreamGetCtx)                                                 \
  X(cuStreamGetDevice, PFN_cuStreamGetDevice)                                           \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing)                                       \
  X(cuStreamQuery, PFN_cuStreamQuery)                                                   \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode)           \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute)                                   \
  X(cuDeviceGetMemPool, PFN_cuDeviceGetMemPool)                                         \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState)                         \
  X(cuMemGetAllocationPropertiesFromHandle, PFN_cuMemGetAllocationPropertiesFromHandle) \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute)                                     \
  X(cuDeviceGetGraphMemAttribute, PFN_cuDeviceGetGraphMemAttribute)                     \
  X(cuGraphGetNodes, PFN_cuGraphGetNodes)                                               \
  X(cuGraphNodeGetType, PFN_cuGraphNodeGetType)                                         \
  X(cuGraphMemAllocNodeGetParams, PFN_cuGraphMemAllocNodeGetParams)                     \
  X(cuGraphChildGraphNodeGetGraph, PFN_cuGraphChildGraphNodeGetGraph)

// NVML has no cuGetProcAddress: its version column is 0.
#define TESSERA_NVML_HOOKS(X)                                                                \
  X(nvmlDeviceGetMemoryInfo, PFN_nvmlDeviceGetMemoryInfo, 0)                                 \
  X(nvmlDeviceGetMemoryInfo_v2, PFN_nvmlDeviceGetMemoryInfo_v2, 0)                           \
  X(nvmlDeviceGetComputeRunningProcesses, PFN_nvmlDeviceGetComputeRunningProcesses, 0)       \
  X(nvmlDeviceGetComputeRunningProcesses_v2, PFN_nvmlDeviceGetComputeRunningProcesses_v3, 0) \
  X(nvmlDeviceGetComputeRunningProcesses_v3, PFN_nvmlDeviceGetComputeRunningProcesses_v3, 0)

#define TESSERA_NVML_USED(X) X(nvmlDeviceGetUUID, PFN_nvmlDeviceGetUUID)

namespace tessera::shim {

// The name a caller passes to cuGetProcAddress for a variant: "cuMemAlloc" for cuMemAlloc_v2,
// "cuLaunchKernel" for cuLaunchKernel_ptsz.
inline std::string ProcAddressName(std::string name) {
  auto strip = [&name](const char* suffix) {
    const size_t n = std::char_traits<char>::length(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) {
      name.resize(name.size() - n);
      return true;
    }
    return false;
  };
  for (const char* suffix : {"_ptsz", "_ptds"}) strip(suffix);
  for (const char* suffix : {"_v2", "_v3", "_v4"}) strip(suffix);
  return name;
}

// The cuGetProcAddress names of every driver function the shim intercepts, once each, in the
// order of TESSERA_CUDA_HOOKS (for the checks that ask for all of them).
inline std::vector<std::string> InterceptedProcAddressNames() {
  std::vector<std::string> names;
#define TESSERA_PROC_NAME(name, type, since)                     \
  if (std::string n = ProcAddressName(#name);                    \
      std::find(names.begin(), names.end(), n) == names.end()) { \
    names.push_back(std::move(n));                               \
  }
  TESSERA_CUDA_HOOKS(TESSERA_PROC_NAME)
#undef TESSERA_PROC_NAME
  return names;
}

struct RealDriver {
#define TESSERA_REAL_FIELD(name, type, ...) type name = nullptr;
  TESSERA_CUDA_HOOKS(TESSERA_REAL_FIELD)
  TESSERA_CUDA_USED(TESSERA_REAL_FIELD)
  TESSERA_NVML_HOOKS(TESSERA_REAL_FIELD)
  TESSERA_NVML_USED(TESSERA_REAL_FIELD)
#undef TESSERA_REAL_FIELD
  void* cuda_handle = nullptr;
  void* nvml_handle = nullptr;
};

// Resolves the entry points of the real library this build of the shim stands in for
// (libtessera-cuda.so: the driver; libtessera-nvml.so: NVML), by the names in contract.h.
// Returns false, with a reason, when it cannot be found; every hook then answers "not
// supported" instead of crashing.
bool LoadRealDriver(RealDriver* real, std::string* error);

}  // namespace tessera::shim
