// The part of the CUDA driver API (cuda.h) that the shim and the test fake use, declared from
// NVIDIA's public documentation because this project builds without the CUDA toolkit.
//
// Everything here is ABI: enum values, struct layouts (checked by static_assert against the sizes
// the documentation implies on x86-64 and aarch64 Linux) and the versioned symbol names that
// libcuda.so.1 exports (cuMemAlloc_v2, cuCtxCreate_v4, cuGetProcAddress_v2, the _ptsz variants).
// Only C types: the shim exports functions with these signatures under these names.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int CUresult;  // an enum in cuda.h; an int on the wire
enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_MAP_FAILED = 205,
  CUDA_ERROR_ALREADY_MAPPED = 208,
  CUDA_ERROR_INVALID_SOURCE = 300,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
  CUDA_ERROR_UNKNOWN = 999,
};

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;  // CUdeviceptr_v2
typedef unsigned long long cuuint64_t;
typedef unsigned int cuuint32_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUarray_st* CUarray;
typedef struct CUmipmappedArray_st* CUmipmappedArray;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCigParam_st CUctxCigParam;

// The special stream handles (cuda.h: CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
#define TESSERA_CU_STREAM_LEGACY (reinterpret_cast<CUstream>(0x1))
#define TESSERA_CU_STREAM_PER_THREAD (reinterpret_cast<CUstream>(0x2))

typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

// CUdevice_attribute values used here.
enum : int {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT = 14,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
  CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
  CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
};

// CUmemLocationType. CUDA 13.2 added INVISIBLE (imported pools); 13.4 adds device locality
// domains, whose value the shim does not assume: any type it does not know is device memory.
typedef int CUmemLocationType;
enum : int {
  CU_MEM_LOCATION_TYPE_INVALID = 0,
  CU_MEM_LOCATION_TYPE_DEVICE = 1,
  CU_MEM_LOCATION_TYPE_HOST = 2,
  CU_MEM_LOCATION_TYPE_HOST_NUMA = 3,
  CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 4,
  CU_MEM_LOCATION_TYPE_INVISIBLE = 5,
};

typedef int CUmemAllocationType;
enum : int {
  CU_MEM_ALLOCATION_TYPE_INVALID = 0,
  CU_MEM_ALLOCATION_TYPE_PINNED = 1,
  CU_MEM_ALLOCATION_TYPE_MANAGED = 2,  // CUDA 13: managed pools
};

typedef int CUmemAllocationHandleType;
enum : int {
  CU_MEM_HANDLE_TYPE_NONE = 0,
  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1,
  CU_MEM_HANDLE_TYPE_WIN32 = 2,
  CU_MEM_HANDLE_TYPE_WIN32_KMT = 4,
  CU_MEM_HANDLE_TYPE_FABRIC = 8,
};

typedef int CUmemAllocationGranularity_flags;
enum : int { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 };

typedef int CUmemAccess_flags;
enum : int {
  CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
  CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
  CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
};

// CUmemLocation: {type, id}; in CUDA 13.4 `id` shares a union with `localized` (two bytes).
typedef struct CUmemLocation_st {
  CUmemLocationType type;
  int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  CUmemAccess_flags flags;
} CUmemAccessDesc;

// CUmemPoolProps (v1): reserved[64] became maxSize (12.2) and usage (12.x); size unchanged.
typedef struct CUmemPoolProps_st {
  CUmemAllocationType allocType;
  CUmemAllocationHandleType handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;

typedef struct CUmemPoolPtrExportData_st {
  unsigned char reserved[64];
} CUmemPoolPtrExportData;

typedef int CUmemPool_attribute;
enum : int {
  CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
  CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
  CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
  CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
};

typedef struct CUipcMemHandle_st {
  char reserved[64];
} CUipcMemHandle;
enum : unsigned { CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1 };

// CUarray_format values the shim sizes exactly; others are sized conservatively.
typedef int CUarray_format;
enum : int {
  CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
  CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
  CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
  CU_AD_FORMAT_SIGNED_INT8 = 0x08,
  CU_AD_FORMAT_SIGNED_INT16 = 0x09,
  CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
  CU_AD_FORMAT_HALF = 0x10,
  CU_AD_FORMAT_FLOAT = 0x20,
};

typedef struct CUDA_ARRAY_DESCRIPTOR_st {  // CUDA_ARRAY_DESCRIPTOR_v2
  size_t Width;
  size_t Height;
  CUarray_format Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {  // CUDA_ARRAY3D_DESCRIPTOR_v2
  size_t Width;
  size_t Height;
  size_t Depth;
  CUarray_format Format;
  unsigned int NumChannels;
  unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

enum : unsigned {
  CUDA_ARRAY3D_LAYERED = 0x01,
  CUDA_ARRAY3D_SURFACE_LDST = 0x02,
  CUDA_ARRAY3D_CUBEMAP = 0x04,
  CUDA_ARRAY3D_TEXTURE_GATHER = 0x08,
  CUDA_ARRAY3D_SPARSE = 0x40,
  CUDA_ARRAY3D_DEFERRED_MAPPING = 0x80,
};

typedef int CUstreamCaptureStatus;
enum : int {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};
typedef int CUstreamCaptureMode;
enum : int {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

// CUlimit values that reserve device memory for the context.
typedef int CUlimit;
enum : int {
  CU_LIMIT_STACK_SIZE = 0,        // bytes per thread, for every thread the device can hold
  CU_LIMIT_PRINTF_FIFO_SIZE = 1,  // bytes
  CU_LIMIT_MALLOC_HEAP_SIZE = 2,  // bytes: the heap of device-side malloc
};

typedef struct CUgraphNode_st* CUgraphNode;
typedef int CUgraphNodeType;
enum : int {
  CU_GRAPH_NODE_TYPE_KERNEL = 0,
  CU_GRAPH_NODE_TYPE_GRAPH = 4,
  CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
  CU_GRAPH_NODE_TYPE_MEM_FREE = 11,
};

typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_st {  // CUDA_MEM_ALLOC_NODE_PARAMS_v1
  CUmemPoolProps poolProps;
  const CUmemAccessDesc* accessDescs;
  size_t accessDescCount;
  size_t bytesize;
  CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;

typedef int CUgraphMem_attribute;
enum : int {
  CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
  CU_GRAPH_MEM_ATTR_USED_MEM_HIGH = 1,
  CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
  CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH = 3,
};

enum : unsigned {
  CU_MEM_ATTACH_GLOBAL = 0x1,
  CU_MEM_ATTACH_HOST = 0x2,
  CU_MEM_ATTACH_SINGLE = 0x4,
};

enum : unsigned {
  CU_EVENT_DEFAULT = 0x0,
  CU_EVENT_BLOCKING_SYNC = 0x1,
  CU_EVENT_DISABLE_TIMING = 0x2
};
enum : unsigned { CU_STREAM_DEFAULT = 0x0, CU_STREAM_NON_BLOCKING = 0x1 };

// cuGetProcAddress (CUDA 11.3) and cuGetProcAddress_v2 (CUDA 12.0).
typedef int CUdriverProcAddressQueryResult;
enum : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};
enum : unsigned long long {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1ULL << 0,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1ULL << 1,
};

// cuLaunchKernelEx's configuration (CUDA 12.0).
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

// cuLaunchCooperativeKernelMultiDevice's parameters (deprecated, still exported).
typedef struct CUDA_LAUNCH_PARAMS_st {
  CUfunction function;
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void** kernelParams;
} CUDA_LAUNCH_PARAMS;

// cuCtxCreate_v4's parameters (CUDA 12.5).
typedef struct CUctxCreateParams_st {
  CUexecAffinityParam* execAffinityParams;
  int numExecAffinityParams;
  CUctxCigParam* cigParams;
} CUctxCreateParams;

}  // extern "C"

static_assert(sizeof(CUuuid) == 16);
static_assert(sizeof(CUmemLocation) == 8);
static_assert(sizeof(CUmemAllocationProp) == 32);
static_assert(offsetof(CUmemAllocationProp, location) == 8);
static_assert(sizeof(CUmemAccessDesc) == 12);
static_assert(sizeof(CUmemPoolProps) == 88);
static_assert(offsetof(CUmemPoolProps, location) == 8);
static_assert(sizeof(CUipcMemHandle) == 64);
static_assert(sizeof(CUDA_ARRAY_DESCRIPTOR) == 24);
static_assert(sizeof(CUDA_ARRAY3D_DESCRIPTOR) == 40);
static_assert(offsetof(CUlaunchConfig, hStream) == 32);
static_assert(sizeof(CUlaunchConfig) == 56);
static_assert(sizeof(CUctxCreateParams) == 24);
static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == 120);
static_assert(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize) == 104);

// Function types, named after the exported symbol they describe. The shim hooks these names;
// the fake driver exports them.
extern "C" {
typedef CUresult (*PFN_cuInit)(unsigned int);
typedef CUresult (*PFN_cuDriverGetVersion)(int*);
typedef CUresult (*PFN_cuGetErrorString)(CUresult, const char**);
typedef CUresult (*PFN_cuGetErrorName)(CUresult, const char**);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice*, int);
typedef CUresult (*PFN_cuDeviceGetCount)(int*);
typedef CUresult (*PFN_cuDeviceGetName)(char*, int, CUdevice);
typedef CUresult (*PFN_cuDeviceGetUuid)(CUuuid*, CUdevice);
typedef CUresult (*PFN_cuDeviceGetAttribute)(int*, int, CUdevice);
typedef CUresult (*PFN_cuDeviceTotalMem_v2)(size_t*, CUdevice);
typedef CUresult (*PFN_cuDeviceTotalMem)(unsigned int*, CUdevice);
typedef CUresult (*PFN_cuCtxCreate_v2)(CUcontext*, unsigned int, CUdevice);
typedef CUresult (*PFN_cuCtxCreate_v3)(CUcontext*, CUexecAffinityParam*, int, unsigned int,
                                       CUdevice);
typedef CUresult (*PFN_cuCtxCreate_v4)(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
typedef CUresult (*PFN_cuCtxDestroy_v2)(CUcontext);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext*);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext);
typedef CUresult (*PFN_cuCtxPushCurrent_v2)(CUcontext);
typedef CUresult (*PFN_cuCtxPopCurrent_v2)(CUcontext*);
typedef CUresult (*PFN_cuCtxGetDevice)(CUdevice*);
typedef CUresult (*PFN_cuCtxSynchronize)();
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease_v2)(CUdevice);
typedef CUresult (*PFN_cuDevicePrimaryCtxReset_v2)(CUdevice);
typedef CUresult (*PFN_cuDevicePrimaryCtxGetState)(CUdevice, unsigned int*, int*);
typedef CUresult (*PFN_cuMemGetInfo_v2)(size_t*, size_t*);
typedef CUresult (*PFN_cuMemGetInfo)(unsigned int*, unsigned int*);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr*, size_t);
typedef CUresult (*PFN_cuMemAllocPitch_v2)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
typedef CUresult (*PFN_cuMemAllocManaged)(CUdeviceptr*, size_t, unsigned int);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr);
typedef CUresult (*PFN_cuMemcpyHtoD_v2)(CUdeviceptr, const void*, size_t);
typedef CUresult (*PFN_cuMemcpyDtoH_v2)(void*, CUdeviceptr, size_t);
typedef CUresult (*PFN_cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
typedef CUresult (*PFN_cuArrayCreate_v2)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
typedef CUresult (*PFN_cuArray3DCreate_v2)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
typedef CUresult (*PFN_cuArrayDestroy)(CUarray);
typedef CUresult (*PFN_cuMipmappedArrayCreate)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*,
                                               unsigned int);
typedef CUresult (*PFN_cuMipmappedArrayDestroy)(CUmipmappedArray);
typedef CUresult (*PFN_cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr,
                                            unsigned long long);
typedef CUresult (*PFN_cuMemAddressFree)(CUdeviceptr, size_t);
typedef CUresult (*PFN_cuMemCreate)(CUmemGenericAllocationHandle*, size_t,
                                    const CUmemAllocationProp*, unsigned long long);
typedef CUresult (*PFN_cuMemRelease)(CUmemGenericAllocationHandle);
typedef CUresult (*PFN_cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                 unsigned long long);
typedef CUresult (*PFN_cuMemUnmap)(CUdeviceptr, size_t);
typedef CUresult (*PFN_cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
typedef CUresult (*PFN_cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle*, void*);
typedef CUresult (*PFN_cuMemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*,
                                                      CUmemAllocationGranularity_flags);
typedef CUresult (*PFN_cuMemExportToShareableHandle)(void*, CUmemGenericAllocationHandle,
                                                     CUmemAllocationHandleType, unsigned long long);
typedef CUresult (*PFN_cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle*, void*,
                                                       CUmemAllocationHandleType);
typedef CUresult (*PFN_cuMemGetAllocationPropertiesFromHandle)(CUmemAllocationProp*,
                                                               CUmemGenericAllocationHandle);
typedef CUresult (*PFN_cuMemAllocAsync)(CUdeviceptr*, size_t, CUstream);
typedef CUresult (*PFN_cuMemAllocFromPoolAsync)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
typedef CUresult (*PFN_cuMemFreeAsync)(CUdeviceptr, CUstream);
typedef CUresult (*PFN_cuMemPoolCreate)(CUmemoryPool*, const CUmemPoolProps*);
typedef CUresult (*PFN_cuMemPoolDestroy)(CUmemoryPool);
typedef CUresult (*PFN_cuMemPoolTrimTo)(CUmemoryPool, size_t);
typedef CUresult (*PFN_cuMemPoolGetAttribute)(CUmemoryPool, CUmemPool_attribute, void*);
typedef CUresult (*PFN_cuMemPoolSetAttribute)(CUmemoryPool, CUmemPool_attribute, void*);
typedef CUresult (*PFN_cuDeviceGetDefaultMemPool)(CUmemoryPool*, CUdevice);
typedef CUresult (*PFN_cuDeviceGetMemPool)(CUmemoryPool*, CUdevice);
typedef CUresult (*PFN_cuDeviceSetMemPool)(CUdevice, CUmemoryPool);
typedef CUresult (*PFN_cuMemPoolExportPointer)(CUmemPoolPtrExportData*, CUdeviceptr);
typedef CUresult (*PFN_cuMemPoolImportPointer)(CUdeviceptr*, CUmemoryPool, CUmemPoolPtrExportData*);
typedef CUresult (*PFN_cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
typedef CUresult (*PFN_cuIpcOpenMemHandle_v2)(CUdeviceptr*, CUipcMemHandle, unsigned int);
typedef CUresult (*PFN_cuIpcCloseMemHandle)(CUdeviceptr);
typedef CUresult (*PFN_cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned int);
// The CUDA 2.x ABI (32-bit device pointers and sizes) that CUDA 3.2 replaced with the _v2
// functions; drivers still export it. The array descriptors are passed through unread.
typedef unsigned int CUdeviceptr_v1;
typedef CUresult (*PFN_cuMemAlloc_v1)(CUdeviceptr_v1*, unsigned int);
typedef CUresult (*PFN_cuMemAllocPitch_v1)(CUdeviceptr_v1*, unsigned int*, unsigned int,
                                           unsigned int, unsigned int);
typedef CUresult (*PFN_cuArrayCreate_v1)(CUarray*, const void*);
typedef CUresult (*PFN_cuArray3DCreate_v1)(CUarray*, const void*);
typedef CUresult (*PFN_cuStreamCreate)(CUstream*, unsigned int);
typedef CUresult (*PFN_cuStreamDestroy_v2)(CUstream);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream);
typedef CUresult (*PFN_cuStreamQuery)(CUstream);
typedef CUresult (*PFN_cuStreamGetCtx)(CUstream, CUcontext*);
typedef CUresult (*PFN_cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*);
typedef CUresult (*PFN_cuStreamBeginCapture_v2)(CUstream, CUstreamCaptureMode);
typedef CUresult (*PFN_cuStreamEndCapture)(CUstream, CUgraph*);
typedef CUresult (*PFN_cuEventCreate)(CUevent*, unsigned int);
typedef CUresult (*PFN_cuEventRecord)(CUevent, CUstream);
typedef CUresult (*PFN_cuEventQuery)(CUevent);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent);
typedef CUresult (*PFN_cuEventElapsedTime)(float*, CUevent, CUevent);
typedef CUresult (*PFN_cuEventDestroy_v2)(CUevent);
typedef CUresult (*PFN_cuModuleLoadData)(CUmodule*, const void*);
typedef CUresult (*PFN_cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
typedef CUresult (*PFN_cuModuleUnload)(CUmodule);
typedef CUresult (*PFN_cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
                                       unsigned int, unsigned int, unsigned int, unsigned int,
                                       CUstream, void**, void**);
typedef CUresult (*PFN_cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
typedef CUresult (*PFN_cuLaunchCooperativeKernel)(CUfunction, unsigned int, unsigned int,
                                                  unsigned int, unsigned int, unsigned int,
                                                  unsigned int, unsigned int, CUstream, void**);
typedef CUresult (*PFN_cuLaunchCooperativeKernelMultiDevice)(CUDA_LAUNCH_PARAMS*, unsigned int,
                                                             unsigned int);
typedef CUresult (*PFN_cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
typedef CUresult (*PFN_cuGraphLaunch)(CUgraphExec, CUstream);
typedef CUresult (*PFN_cuGraphUpload)(CUgraphExec, CUstream);
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph);
typedef CUresult (*PFN_cuGraphExecDestroy)(CUgraphExec);
typedef CUresult (*PFN_cuDeviceGetGraphMemAttribute)(CUdevice, CUgraphMem_attribute, void*);
typedef CUresult (*PFN_cuGraphGetNodes)(CUgraph, CUgraphNode*, size_t*);
typedef CUresult (*PFN_cuGraphNodeGetType)(CUgraphNode, CUgraphNodeType*);
typedef CUresult (*PFN_cuGraphMemAllocNodeGetParams)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS*);
typedef CUresult (*PFN_cuGraphChildGraphNodeGetGraph)(CUgraphNode, CUgraph*);
typedef CUresult (*PFN_cuCtxSetLimit)(CUlimit, size_t);
typedef CUresult (*PFN_cuCtxGetLimit)(size_t*, CUlimit);
typedef CUresult (*PFN_cuDeviceGraphMemTrim)(CUdevice);
typedef CUresult (*PFN_cuGetProcAddress)(const char*, void**, int, cuuint64_t);
typedef CUresult (*PFN_cuGetProcAddress_v2)(const char*, void**, int, cuuint64_t,
                                            CUdriverProcAddressQueryResult*);
}  // extern "C"
