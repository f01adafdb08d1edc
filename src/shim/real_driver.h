// The real driver's entry points, as the shim calls them. Resolved once, by name, from the real
// libcuda.so.1 and libnvidia-ml.so.1 that the shim lists as DT_NEEDED (contract.h), through
// their own handles, so a lookup never finds the shim's definition of the same name.
//
// TESSERA_CUDA_HOOKS lists every driver function the shim exports (and therefore intercepts);
// TESSERA_CUDA_USED the ones it only calls. A hooked name the installed driver lacks stays null:
// the shim's export then answers CUDA_ERROR_NOT_SUPPORTED instead of crashing.
#pragma once

#include <string>

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
#define TESSERA_CUDA_HOOKS(X)                                                       \
  X(cuGetProcAddress, PFN_cuGetProcAddress)                                         \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v2)                                   \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v2)                                               \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v2)                                     \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged)                                       \
  X(cuMemFree_v2, PFN_cuMemFree_v2)                                                 \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v2)                                           \
  X(cuMemGetInfo, PFN_cuMemGetInfo)                                                 \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v2)                                   \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem)                                         \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v2)                                         \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v2)                                     \
  X(cuArrayDestroy, PFN_cuArrayDestroy)                                             \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate)                             \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy)                           \
  X(cuMemCreate, PFN_cuMemCreate)                                                   \
  X(cuMemRelease, PFN_cuMemRelease)                                                 \
  X(cuMemMap, PFN_cuMemMap)                                                         \
  X(cuMemUnmap, PFN_cuMemUnmap)                                                     \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle)                   \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync)                                           \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync)                                      \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync)                           \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync)                      \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync)                                             \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync)                                        \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate)                                           \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy)                                         \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo)                                           \
  X(cuMemPoolImportFromShareableHandle, PFN_cuMemPoolImportFromShareableHandle)     \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize)                                   \
  X(cuStreamSynchronize_ptsz, PFN_cuStreamSynchronize)                              \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize)                                         \
  X(cuEventSynchronize, PFN_cuEventSynchronize)                                     \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v2)                                           \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain)                         \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v2)                 \
  X(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v2)                     \
  X(cuLaunchKernel, PFN_cuLaunchKernel)                                             \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel)                                        \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx)                                         \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx)                                    \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel)                       \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel)                  \
  X(cuLaunchCooperativeKernelMultiDevice, PFN_cuLaunchCooperativeKernelMultiDevice) \
  X(cuGraphLaunch, PFN_cuGraphLaunch)                                               \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch)                                          \
  X(cuLaunch, PFN_cuLaunch)                                                         \
  X(cuLaunchGrid, PFN_cuLaunchGrid)                                                 \
  X(cuLaunchGridAsync, PFN_cuLaunchGridAsync)

#define TESSERA_CUDA_USED(X)                                                  \
  X(cuDeviceGetUuid, PFN_cuDeviceGetUuid)                                     \
  X(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid)                                  \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount)                                   \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice)                                       \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent)                                     \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v2)                             \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v2)                               \
  X(cuStreamGetCtx, PFN_cuStreamGetCtx)                                       \
  X(cuStreamGetDevice, PFN_cuStreamGetDevice)                                 \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing)                             \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode) \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute)                         \
  X(cuDeviceGetMemPool, PFN_cuDeviceGetMemPool)                               \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState)

#define TESSERA_NVML_HOOKS(X)                                                             \
  X(nvmlDeviceGetMemoryInfo, PFN_nvmlDeviceGetMemoryInfo)                                 \
  X(nvmlDeviceGetMemoryInfo_v2, PFN_nvmlDeviceGetMemoryInfo_v2)                           \
  X(nvmlDeviceGetComputeRunningProcesses, PFN_nvmlDeviceGetComputeRunningProcesses)       \
  X(nvmlDeviceGetComputeRunningProcesses_v2, PFN_nvmlDeviceGetComputeRunningProcesses_v3) \
  X(nvmlDeviceGetComputeRunningProcesses_v3, PFN_nvmlDeviceGetComputeRunningProcesses_v3)

#define TESSERA_NVML_USED(X) X(nvmlDeviceGetUUID, PFN_nvmlDeviceGetUUID)

namespace tessera::shim {

struct RealDriver {
#define TESSERA_REAL_FIELD(name, type) type name = nullptr;
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
