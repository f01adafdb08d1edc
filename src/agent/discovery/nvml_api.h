// The part of NVML (the NVIDIA Management Library, libnvidia-ml.so.1) the agent uses, declared
// here from NVIDIA's public NVML API reference so that nothing links against the driver: the
// library is opened with dlopen and each function looked up by its versioned symbol name.
//
// ABI facts (NVML API version 13; the layouts below have not changed since they were introduced;
// the MIG calls and structs were checked against nvml.h of NVIDIA's go-nvml, API version 13):
//   - every call returns nvmlReturn_t, an int (0 = success);
//   - handles (nvmlDevice_t, nvmlGpuInstance_t, nvmlEventSet_t) are structs holding one pointer,
//     passed and returned by value;
//   - "versioned" structs start with `unsigned int version` = sizeof(struct) | (version << 24);
//   - strings are NUL-terminated in caller buffers of the documented sizes.
// A struct or constant added here must be checked against the reference's layout, field by field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::agent::nvml {

using Return = int;  // nvmlReturn_t
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorLibRmVersionMismatch = 18;
inline constexpr Return kErrorInUse = 19;
inline constexpr Return kErrorInsufficientResources = 23;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorUnknown = 999;

struct Device {  // nvmlDevice_t
  void* handle;
};
struct GpuInstance {  // nvmlGpuInstance_t
  void* handle;
};
struct ComputeInstance {  // nvmlComputeInstance_t
  void* handle;
};
struct EventSet {  // nvmlEventSet_t
  void* handle;
};

// Buffer sizes (NVML_DEVICE_*_BUFFER_SIZE, NVML_SYSTEM_*_BUFFER_SIZE).
inline constexpr unsigned kUuidBufferSize = 96;            // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kNameBufferSize = 96;            // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kDriverVersionBufferSize = 80;   // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
inline constexpr unsigned kPciBusIdBufferSize = 32;        // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
inline constexpr unsigned kPciBusIdLegacyBufferSize = 16;  // ..._BUFFER_V2_SIZE

struct PciInfo {  // nvmlPciInfo_t
  char busIdLegacy[kPciBusIdLegacyBufferSize];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[kPciBusIdBufferSize];  // "00000000:18:00.0"
};
static_assert(sizeof(PciInfo) == 68);

struct Memory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(MemoryV2) == 40);
inline constexpr unsigned int kMemoryV2Version = sizeof(MemoryV2) | (2u << 24);

struct DeviceAttributes {  // nvmlDeviceAttributes_t
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;
};
static_assert(sizeof(DeviceAttributes) == 40);

// nvmlGpuTopologyLevel_t: the closest common PCIe ancestor of two GPUs.
enum TopologyLevel : int {
  kTopologyInternal = 0,     // one board (K80-style)
  kTopologySingle = 10,      // one PCIe switch                        -> PIX
  kTopologyMultiple = 20,    // several switches, no host bridge        -> PXB
  kTopologyHostBridge = 30,  // one host bridge                         -> PHB
  kTopologyNode = 40,        // host bridges of one NUMA node           -> NODE
  kTopologySystem = 50,      // across the inter-socket link           -> SYS
};

using EnableState = int;  // nvmlEnableState_t: 0 disabled, 1 enabled

// nvmlIntNvLinkDeviceType_t
inline constexpr int kNvLinkDeviceTypeGpu = 0x00;
inline constexpr int kNvLinkDeviceTypeIbmNpu = 0x01;
inline constexpr int kNvLinkDeviceTypeSwitch = 0x02;
inline constexpr int kNvLinkDeviceTypeUnknown = 0xFF;

// NVML_NVLINK_MAX_LINKS is 18 in older headers and 36 in newer ones; the agent asks up to 36 and
// stops at the first link the driver calls invalid.
inline constexpr unsigned kNvLinkMaxLinks = 36;

// Fabric (GB200-class multi-node NVLink).
inline constexpr unsigned kFabricUuidLen = 16;
inline constexpr unsigned char kFabricStateNotSupported = 0;
inline constexpr unsigned char kFabricStateNotStarted = 1;
inline constexpr unsigned char kFabricStateInProgress = 2;
inline constexpr unsigned char kFabricStateCompleted = 3;

struct GpuFabricInfo {  // nvmlGpuFabricInfo_t (nvmlDeviceGetGpuFabricInfo)
  unsigned char clusterUuid[kFabricUuidLen];
  Return status;
  unsigned int cliqueId;
  unsigned char state;  // nvmlGpuFabricState_t
};
static_assert(sizeof(GpuFabricInfo) == 28);

struct GpuFabricInfoV2 {  // nvmlGpuFabricInfo_v2_t (nvmlDeviceGetGpuFabricInfoV)
  unsigned int version;
  unsigned char clusterUuid[kFabricUuidLen];
  Return status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
};
static_assert(sizeof(GpuFabricInfoV2) == 36);
inline constexpr unsigned int kGpuFabricInfoV2Version = sizeof(GpuFabricInfoV2) | (2u << 24);

// MIG.
inline constexpr unsigned int kMigDisable = 0;
inline constexpr unsigned int kMigEnable = 1;
// NVML_GPU_INSTANCE_PROFILE_* indices run 0..NVML_GPU_INSTANCE_PROFILE_COUNT-1 (0x12 in API 13);
// the agent asks up to 32 and skips the ones a driver does not know.
inline constexpr unsigned kGpuInstanceProfileIndexMax = 32;

struct GpuInstancePlacement {  // nvmlGpuInstancePlacement_t
  unsigned int start;
  unsigned int size;
};

struct GpuInstanceProfileInfo {  // nvmlGpuInstanceProfileInfo_t
  unsigned int id;               // the profile id `nvidia-smi mig -lgip` prints
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};
static_assert(sizeof(GpuInstanceProfileInfo) == 48);

struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  Device device;
  unsigned int id;
  unsigned int profileId;
  GpuInstancePlacement placement;
};
static_assert(sizeof(GpuInstanceInfo) == 24);

// Compute instances (inside a GPU instance). NVML_COMPUTE_INSTANCE_PROFILE_* indices run
// 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT-1 (9 in API 13: 1, 2, 3, 4, 7, 8, 6 slices, 1 slice rev1,
// 7 slices NVL); the agent asks up to 16 and skips the ones a GPU instance does not offer.
inline constexpr unsigned kComputeInstanceProfileIndexMax = 16;
inline constexpr unsigned kComputeInstanceEngineProfileShared = 0;  // ..._ENGINE_PROFILE_SHARED

struct ComputeInstanceProfileInfo {  // nvmlComputeInstanceProfileInfo_t
  unsigned int id;                   // what nvmlGpuInstanceCreateComputeInstance takes
  unsigned int sliceCount;           // compute slices
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};
static_assert(sizeof(ComputeInstanceProfileInfo) == 36);

// Events.
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x0000000000000008ULL;
inline constexpr unsigned long long kEventMigConfigChange = 0x0000000000000100ULL;

struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for kEventTypeXidCriticalError (999: unknown)
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(EventData) == 32);
// nvmlEventData_t's gpuInstanceId / computeInstanceId when the event is not about a MIG instance.
inline constexpr unsigned int kNoInstance = 0xFFFFFFFFu;

// Health (nvml.h of driver r570 and newer for the recovery action).
// nvmlFieldValue_t, for nvmlDeviceGetFieldValues.
union Value {  // nvmlValue_t
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
};
struct FieldValue {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  Return nvmlReturn;
  Value value;
};
static_assert(sizeof(FieldValue) == 40);
// NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: its value (uiVal) is an nvmlDeviceGpuRecoveryAction_t,
// NVML_GPU_RECOVERY_ACTION_NONE (0), _GPU_RESET (1), _NODE_REBOOT (2), _DRAIN_P2P (3),
// _DRAIN_AND_RESET (4).
inline constexpr unsigned int kFieldGpuRecoveryAction = 230;
inline constexpr int kValueTypeUnsignedInt = 1;

// The functions, by the symbol each is looked up as.
extern "C" {
using InitFn = Return (*)();                                   // nvmlInit_v2
using ShutdownFn = Return (*)();                               // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);                 // nvmlErrorString
using SystemGetDriverVersionFn = Return (*)(char*, unsigned);  // nvmlSystemGetDriverVersion
using SystemGetCudaDriverVersionFn = Return (*)(int*);         // nvmlSystemGetCudaDriverVersion_v2
using DeviceGetCountFn = Return (*)(unsigned*);                // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexFn = Return (*)(unsigned, Device*);  // nvmlDeviceGetHandleByIndex_v2
using DeviceGetStringFn = Return (*)(Device, char*, unsigned);   // nvmlDeviceGetUUID, GetName
using DeviceGetUintFn = Return (*)(Device, unsigned*);  // GetMinorNumber, GetNumaNodeId, GetIndex
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);            // nvmlDeviceGetMemoryInfo
using DeviceGetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);        // nvmlDeviceGetMemoryInfo_v2
using DeviceGetAttributesFn = Return (*)(Device, DeviceAttributes*);  // ..GetAttributes_v2
using DeviceGetPciInfoFn = Return (*)(Device, PciInfo*);              // nvmlDeviceGetPciInfo_v3
using DeviceGetCpuAffinityFn = Return (*)(Device, unsigned, unsigned long*);
using DeviceGetTopologyCommonAncestorFn = Return (*)(Device, Device, TopologyLevel*);
using DeviceGetNvLinkStateFn = Return (*)(Device, unsigned, EnableState*);
using DeviceGetNvLinkRemotePciInfoFn = Return (*)(Device, unsigned, PciInfo*);  // .._v2
using DeviceGetNvLinkRemoteDeviceTypeFn = Return (*)(Device, unsigned, int*);
using DeviceGetGpuFabricInfoFn = Return (*)(Device, GpuFabricInfo*);
using DeviceGetGpuFabricInfoVFn = Return (*)(Device, GpuFabricInfoV2*);
using DeviceGetMigModeFn = Return (*)(Device, unsigned*, unsigned*);
using DeviceGetGpuInstanceProfileInfoFn = Return (*)(Device, unsigned, GpuInstanceProfileInfo*);
using DeviceGetGpuInstancesFn = Return (*)(Device, unsigned, GpuInstance*, unsigned*);
using GpuInstanceGetInfoFn = Return (*)(GpuInstance, GpuInstanceInfo*);
// MIG changes (root only).
using DeviceSetMigModeFn = Return (*)(Device, unsigned, Return*);  // nvmlDeviceSetMigMode
using DeviceGetGpuInstancePossiblePlacementsFn =                   // .._v2
    Return (*)(Device, unsigned, GpuInstancePlacement*, unsigned*);
using DeviceCreateGpuInstanceWithPlacementFn = Return (*)(Device, unsigned,
                                                          const GpuInstancePlacement*,
                                                          GpuInstance*);
using GpuInstanceDestroyFn = Return (*)(GpuInstance);
using GpuInstanceGetComputeInstanceProfileInfoFn = Return (*)(GpuInstance, unsigned, unsigned,
                                                              ComputeInstanceProfileInfo*);
using GpuInstanceCreateComputeInstanceFn = Return (*)(GpuInstance, unsigned, ComputeInstance*);
using GpuInstanceGetComputeInstancesFn = Return (*)(GpuInstance, unsigned, ComputeInstance*,
                                                    unsigned*);
using ComputeInstanceDestroyFn = Return (*)(ComputeInstance);
// MIG devices (a compute instance seen as a device: its UUID is the MIG-... one).
using DeviceGetMaxMigDeviceCountFn = Return (*)(Device, unsigned*);
using DeviceGetMigDeviceHandleByIndexFn = Return (*)(Device, unsigned, Device*);
// nvmlDeviceGetGpuInstanceId, nvmlDeviceGetComputeInstanceId: DeviceGetUintFn.
using DeviceGetSupportedEventTypesFn = Return (*)(Device, unsigned long long*);
using EventSetCreateFn = Return (*)(EventSet*);
using DeviceRegisterEventsFn = Return (*)(Device, unsigned long long, EventSet);
using EventSetWaitFn = Return (*)(EventSet, EventData*, unsigned);  // nvmlEventSetWait_v2
using EventSetFreeFn = Return (*)(EventSet);
using DeviceGetFieldValuesFn = Return (*)(Device, int, FieldValue*);  // nvmlDeviceGetFieldValues
// nvmlDeviceGetRemappedRows(device, &corrRows, &uncRows, &isPending, &failureOccurred).
using DeviceGetRemappedRowsFn = Return (*)(Device, unsigned*, unsigned*, unsigned*, unsigned*);
// nvmlDeviceGetRetiredPagesPendingStatus(device, &isPending).
using DeviceGetRetiredPagesPendingStatusFn = Return (*)(Device, EnableState*);
}

}  // namespace tessera::agent::nvml
