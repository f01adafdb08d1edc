// The part of NVML (nvml.h) that the shim, the compute controller and the test fake use, declared
// from NVIDIA's public NVML API reference: return codes, struct layouts (sizes checked below)
// and the versioned symbol names libnvidia-ml.so.1 exports.
#pragma once

#include <cstddef>

extern "C" {

typedef int nvmlReturn_t;
enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st* nvmlDevice_t;

enum : unsigned {
  NVML_DEVICE_UUID_BUFFER_SIZE = 80,
  NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96,
  NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96,
  NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80,
};

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

// NVML_STRUCT_VERSION(Memory, 2).
#define TESSERA_NVML_MEMORY_V2 (static_cast<unsigned int>(sizeof(nvmlMemory_v2_t) | (2u << 24u)))

// nvmlDeviceGetComputeRunningProcesses (v1) fills nvmlProcessInfo_v1_t; _v2 and _v3 fill the
// 24-byte nvmlProcessInfo_t (nvmlProcessInfo_v2_t).
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;
  unsigned int memory;
} nvmlUtilization_t;

// nvmlDeviceGetSamples: the driver's record of one quantity, one sample per sampling period
// (NVML_GPU_UTILIZATION_SAMPLES: the percent of the period in which a kernel ran), with CPU
// timestamps in microseconds; the value's type is what the call says (nvmlValueType_t).
enum : int { NVML_GPU_UTILIZATION_SAMPLES = 1 };
enum : int {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
  NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
};
typedef union nvmlValue_st {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} nvmlValue_t;
typedef struct nvmlSample_st {
  unsigned long long timeStamp;  // CPU timestamp, microseconds
  nvmlValue_t sampleValue;
} nvmlSample_t;

// NVML_VALUE_NOT_AVAILABLE for usedGpuMemory.
#define TESSERA_NVML_VALUE_NOT_AVAILABLE (0xFFFFFFFFFFFFFFFFULL)

typedef nvmlReturn_t (*PFN_nvmlInit_v2)();
typedef nvmlReturn_t (*PFN_nvmlInitWithFlags)(unsigned int);
typedef nvmlReturn_t (*PFN_nvmlShutdown)();
typedef const char* (*PFN_nvmlErrorString)(nvmlReturn_t);
typedef nvmlReturn_t (*PFN_nvmlSystemGetDriverVersion)(char*, unsigned int);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetCount_v2)(unsigned int*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetHandleByIndex_v2)(unsigned int, nvmlDevice_t*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetHandleByUUID)(const char*, nvmlDevice_t*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetUUID)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetName)(nvmlDevice_t, char*, unsigned int);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetIndex)(nvmlDevice_t, unsigned int*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned int*,
                                                                 nvmlProcessInfo_v1_t*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t, unsigned int*,
                                                                    nvmlProcessInfo_t*);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetProcessUtilization)(nvmlDevice_t,
                                                            nvmlProcessUtilizationSample_t*,
                                                            unsigned int*, unsigned long long);
typedef nvmlReturn_t (*PFN_nvmlDeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t*);
// (device, nvmlSamplingType_t, lastSeenTimeStamp, nvmlValueType_t* out, count in/out, samples):
// samples null asks for the count.
typedef nvmlReturn_t (*PFN_nvmlDeviceGetSamples)(nvmlDevice_t, int, unsigned long long, int*,
                                                 unsigned int*, nvmlSample_t*);
}  // extern "C"

static_assert(sizeof(nvmlMemory_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_t) == 24);
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
static_assert(sizeof(nvmlValue_t) == 8);
static_assert(sizeof(nvmlSample_t) == 16);
