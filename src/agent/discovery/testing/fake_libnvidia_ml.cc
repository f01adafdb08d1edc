// A stateful fake of libnvidia-ml.so.1 for the agent's discovery tests: built as a shared library
// named libnvidia-ml.so.1 and loaded by the code under test through the real dynamic loader
// (dlopen), exactly as the driver's library would be. It exports the NVML symbols the agent's
// NVML backend uses, with NVML's C ABI (declared independently of agent/discovery/nvml_api.h, from
// the same public reference, so that a layout mistake in either shows up as a failing test).
//
// State comes from a JSON file named by $TESSERA_FAKE_NVML (read at nvmlInit_v2 and on
// tessera_fake_nvml_reload()):
//   {"driver_version": "580.95.05", "cuda_version": 13000,
//    "init_error": 0,                        nvmlInit_v2's answer (9 = driver not loaded)
//    "unsupported": ["nvmlDeviceGetMemoryInfo_v2", ...],   answer NOT_SUPPORTED
//    "errors": {"nvmlDeviceCreateGpuInstanceWithPlacement": 4, ...},   answer that error
//    "gpus": [{"uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3",
//              "memory_bytes": 85520809984, "pci_bus_id": "00000000:18:00.0", "minor": 0,
//              "numa_node": 0,               absent: NOT_SUPPORTED
//              "cpus": [0, 1, 2],            the CPU affinity mask, as CPU numbers
//              "sm_count": 132,              nvmlDeviceGetAttributes_v2; absent: NOT_SUPPORTED
//              "nvlinks": ["switch", "gpu:00000000:2A:00.0", "off", ...],   one per link
//              "fabric": {"cluster_uuid": "<32 hex digits>", "clique_id": 3, "state": 3,
//                         "status": 0},
//              "mig": {"current": 1, "pending": 1,
//                      "activation": 0,      nvmlDeviceSetMigMode's activationStatus: 0 the mode
//                                            changes at once, 16 (RESET_REQUIRED) or 19 (IN_USE)
//                                            it stays pending
//                      "instances": [{"profile_id": 9, "start": 4, "size": 4,
//                                     "uuid": "MIG-...",   its compute instance's MIG device
//                                     "compute_instance": true,   false: a GPU instance alone
//                                     "busy": false}]},    destroying its compute instance
//                                                          answers IN_USE (a process runs there)
//              "events": 264,                supported event types (default XID | MIG change)
//              "recovery_action": 0,         NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (0 none, 1 reset,
//                                            2 reboot, 3 drain P2P, 4 drain and reset); absent:
//                                            the field is NOT_SUPPORTED (a driver before r570)
//              "remapped_rows": {"corrected": 0, "uncorrected": 1, "pending": true,
//                                "failure": false},   nvmlDeviceGetRemappedRows; absent:
//                                            NOT_SUPPORTED
//              "retired_pages_pending": false}],   nvmlDeviceGetRetiredPagesPendingStatus
//    "pcie": [[0, 10], [10, 0]]}            common-ancestor levels per pair
//
// Control functions for tests (look them up with dlsym on the same handle):
//   tessera_fake_nvml_inject_xid(index, xid)  queue an XID critical-error event
//   tessera_fake_nvml_inject_mig_xid(index, xid, gi, ci)   the same, naming a GPU instance id and
//                                             a compute instance id (a MIG instance's fault)
//   tessera_fake_nvml_set_recovery_action(index, action)   what the driver does when it decides a
//                                             GPU needs something: the field changes and XID 154
//                                             is queued
//   tessera_fake_nvml_set_nvlink(index, link, up)   an NVLink goes down (or back up)
//   tessera_fake_nvml_reset(index)            what a GPU reset (nvidia-smi -r) leaves: the GPU
//                                             answers again, recovery action none, pending row
//                                             remapping and page retirement applied
//   tessera_fake_nvml_set_lost(index, lost)   every call on that GPU answers GPU_IS_LOST
//   tessera_fake_nvml_reload()                re-read the file; a GPU whose MIG instances changed
//                                             gets a MIG-configuration-change event
//   tessera_fake_nvml_init_count()            nvmlInit_v2 calls not yet matched by nvmlShutdown
//
// MIG as the driver does it (A100/H100-class profile table, placements on 8 memory slices): GPU
// instances are created at a placement the profile allows (else INVALID_ARGUMENT) and not over
// another instance's slices or past a profile's count (INSUFFICIENT_RESOURCES); compute instances
// within their GPU instance's compute slices; a GPU instance with compute instances, or a compute
// instance a process uses, is not destroyed (IN_USE); each compute instance is a MIG device with a
// UUID of its own (a new one per creation), listed by nvmlDeviceGetMigDeviceHandleByIndex. Every
// creation and destruction raises a MIG-configuration-change event. Created instances live in
// memory until the file is read again.
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

// NVML's ABI, written out again (see the file comment).
typedef int nvmlReturn_t;
enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_UNKNOWN = 999,
};
struct FakeGpu;
struct FakeInstance;
struct FakeCompute;
typedef struct {
  FakeGpu* handle;
} nvmlDevice_t;
typedef struct {
  FakeInstance* handle;
} nvmlGpuInstance_t;
typedef struct {
  FakeCompute* handle;
} nvmlComputeInstance_t;
typedef struct {
  void* handle;
} nvmlEventSet_t;
typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
  unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
      sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
  unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;
typedef struct {
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
} nvmlGpuFabricInfo_t;
typedef struct {
  unsigned int version;
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;
typedef struct {
  unsigned int start, size;
} nvmlGpuInstancePlacement_t;
typedef struct {
  unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
  nvmlDevice_t device;
  unsigned int id, profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
  unsigned int start, size;
} nvmlComputeInstancePlacement_t;
typedef struct {
  unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id, profileId;
  nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;
static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32);
typedef struct {
  nvmlDevice_t device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

constexpr unsigned long long kXidEvent = 0x8ULL;
constexpr unsigned long long kMigEvent = 0x100ULL;
constexpr unsigned int kMemoryV2 = sizeof(nvmlMemory_v2_t) | (2u << 24);
constexpr unsigned int kFabricV2 = sizeof(nvmlGpuFabricInfo_v2_t) | (2u << 24);

struct FakeCompute {
  unsigned id = 0, profile_id = 0, start = 0, slices = 0;
  std::string uuid;  // the MIG device's
  bool busy = false;
  FakeInstance* gi = nullptr;
};

struct FakeInstance {
  unsigned id = 0, profile_id = 0, start = 0, size = 0;
  FakeGpu* gpu = nullptr;
  std::list<FakeCompute> cis;  // list: handles stay valid
};

struct FakeGpu {
  unsigned index = 0;
  std::string uuid, name, bus_id;
  unsigned long long memory_bytes = 0;
  unsigned minor = 0;
  int numa = -1;
  std::vector<int> cpus;
  int sm_count = -1;
  std::vector<std::string> nvlinks;
  bool has_fabric = false;
  unsigned char cluster[16] = {};
  unsigned clique = 0, fabric_state = 0;
  int fabric_status = 0;
  bool mig_capable = false;
  unsigned mig_current = 0, mig_pending = 0;
  int mig_activation = 0;             // nvmlDeviceSetMigMode's activationStatus
  std::list<FakeInstance> instances;  // list: handles stay valid
  unsigned long long events = kXidEvent | kMigEvent;
  bool lost = false;
  unsigned long long registered = 0;  // event types registered in the (one) event set
  int recovery_action = -1;           // -1: the field is not supported
  bool has_remapped_rows = false;
  unsigned remapped_corrected = 0, remapped_uncorrected = 0;
  bool remap_pending = false, remap_failure = false;
  bool retired_pages_pending = false;
  std::set<unsigned> links_down;  // NVLinks brought down (tessera_fake_nvml_set_nvlink)
};

struct State {
  std::mutex mu;
  int init_count = 0;
  std::string driver = "580.95.05";
  int cuda = 13000;
  int init_error = 0;
  std::set<std::string> unsupported;
  std::map<std::string, int> errors;
  unsigned long long created = 0;  // MIG devices made, for their UUIDs
  std::deque<FakeGpu> gpus;
  std::vector<std::vector<int>> pcie;
  std::deque<nvmlEventData_t> events;
  bool event_set = false;
};

State& S() {
  static State* state = new State;  // never destroyed: the library may be unloaded at exit
  return *state;
}

// The GPU instance profiles of A100/H100-class GPUs (nvidia-smi mig -lgip, -lgipp): profile index
// (NVML_GPU_INSTANCE_PROFILE_*), id, instance count, compute slices (sliceCount), memory slices a
// placement occupies, allowed start slices (bit mask).
struct ProfileRow {
  unsigned index, id, count, slices, size, starts;
};
constexpr ProfileRow kProfiles[] = {
    {0, 19, 7, 1, 1, 0x7F}, {1, 14, 3, 2, 2, 0x15}, {2, 9, 2, 3, 4, 0x11}, {3, 5, 1, 4, 4, 0x01},
    {4, 0, 1, 7, 8, 0x01},  {7, 20, 1, 1, 1, 0x7F}, {9, 15, 4, 1, 2, 0x55}};
constexpr unsigned kGpuInstanceProfileCount = 0x12;  // NVML_GPU_INSTANCE_PROFILE_COUNT
// Compute instance profiles: index (NVML_COMPUTE_INSTANCE_PROFILE_*) = id, compute slices.
struct ComputeRow {
  unsigned index, slices;
};
constexpr ComputeRow kComputeProfiles[] = {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 7}};
constexpr unsigned kComputeInstanceProfileCount = 0x9;  // NVML_COMPUTE_INSTANCE_PROFILE_COUNT
constexpr unsigned kMaxMigDevices = 7;

const ProfileRow* ProfileById(unsigned id) {
  for (const ProfileRow& row : kProfiles) {
    if (row.id == id) return &row;
  }
  return nullptr;
}

// A MIG device UUID, new for each creation (as the driver's are).
std::string NewMigUuid(State& s) {
  char text[64];
  std::snprintf(text, sizeof(text), "MIG-%08llx-7e55-4a00-8000-%012llx", 0x5eed0000ULL + s.created,
                s.created);
  ++s.created;
  return text;
}

void AddDefaultCompute(State& s, FakeInstance& gi, const std::string& uuid) {
  FakeCompute ci;
  ci.id = 0;
  const ProfileRow* row = ProfileById(gi.profile_id);
  ci.slices = row ? row->slices : 1;
  for (const ComputeRow& c : kComputeProfiles) {
    if (c.slices == ci.slices) ci.profile_id = c.index;
  }
  ci.uuid = uuid.empty() ? NewMigUuid(s) : uuid;
  gi.cis.push_back(ci);
}

std::string MigKey(const FakeGpu& g) {
  std::string key;
  for (const FakeInstance& i : g.instances) {
    key += std::to_string(i.profile_id) + "@" + std::to_string(i.start) + ",";
  }
  return key;
}

// `reload`: the library is in use (tessera_fake_nvml_reload): lost GPUs stay lost, registered
// events stay registered, and changed MIG configurations raise events. Otherwise (nvmlInit_v2 after
// everything was shut down) the state starts afresh.
int Load(State& s, bool reload) {
  const char* path = std::getenv("TESSERA_FAKE_NVML");
  if (!path) return NVML_ERROR_DRIVER_NOT_LOADED;
  std::ifstream in(path);
  if (!in) return NVML_ERROR_DRIVER_NOT_LOADED;
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception&) {
    return NVML_ERROR_UNKNOWN;
  }
  std::vector<std::string> old_mig;
  for (const FakeGpu& g : s.gpus) old_mig.push_back(MigKey(g));
  if (!reload) {
    s.events.clear();
    s.event_set = false;
  }
  s.driver = doc.value("driver_version", std::string("580.95.05"));
  s.cuda = doc.value("cuda_version", 13000);
  s.init_error = doc.value("init_error", 0);
  s.unsupported.clear();
  for (const json& u : doc.value("unsupported", json::array())) s.unsupported.insert(u);
  s.errors = doc.value("errors", std::map<std::string, int>{});
  s.pcie = doc.value("pcie", std::vector<std::vector<int>>{});
  std::deque<FakeGpu> gpus;
  unsigned index = 0;
  for (const json& j : doc.value("gpus", json::array())) {
    FakeGpu g;
    g.index = index++;
    g.uuid = j.value("uuid", "");
    g.name = j.value("name", "NVIDIA Fake GPU");
    g.bus_id = j.value("pci_bus_id", "");
    g.memory_bytes = j.value("memory_bytes", 0ULL);
    g.minor = j.value("minor", g.index);
    g.numa = j.value("numa_node", -1);
    g.cpus = j.value("cpus", std::vector<int>{});
    g.sm_count = j.value("sm_count", -1);
    g.nvlinks = j.value("nvlinks", std::vector<std::string>{});
    g.events = j.value("events", kXidEvent | kMigEvent);
    g.recovery_action = j.value("recovery_action", -1);
    if (j.contains("remapped_rows")) {
      const json& r = j["remapped_rows"];
      g.has_remapped_rows = true;
      g.remapped_corrected = r.value("corrected", 0u);
      g.remapped_uncorrected = r.value("uncorrected", 0u);
      g.remap_pending = r.value("pending", false);
      g.remap_failure = r.value("failure", false);
    }
    g.retired_pages_pending = j.value("retired_pages_pending", false);
    if (j.contains("fabric")) {
      const json& f = j["fabric"];
      g.has_fabric = true;
      const std::string hex = f.value("cluster_uuid", std::string(32, '0'));
      for (size_t k = 0; k < 16 && 2 * k + 1 < hex.size(); ++k) {
        g.cluster[k] = static_cast<unsigned char>(std::stoi(hex.substr(2 * k, 2), nullptr, 16));
      }
      g.clique = f.value("clique_id", 0u);
      g.fabric_state = f.value("state", 3u);
      g.fabric_status = f.value("status", 0);
    }
    if (j.contains("mig")) {
      const json& m = j["mig"];
      g.mig_capable = true;
      g.mig_current = m.value("current", 0u);
      g.mig_pending = m.value("pending", g.mig_current);
      g.mig_activation = m.value("activation", 0);
      unsigned id = 1;
      for (const json& i : m.value("instances", json::array())) {
        FakeInstance inst;
        inst.id = id++;
        inst.profile_id = i.value("profile_id", 0u);
        inst.start = i.value("start", 0u);
        const ProfileRow* row = ProfileById(inst.profile_id);
        inst.size = i.value("size", row ? row->size : 1u);
        if (i.value("compute_instance", true)) {
          AddDefaultCompute(s, inst, i.value("uuid", ""));
          inst.cis.back().busy = i.value("busy", false);
        }
        g.instances.push_back(inst);
      }
    }
    gpus.push_back(std::move(g));
  }
  // Update in place: device handles (pointers into s.gpus) stay valid, as NVML's do.
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (i < s.gpus.size()) {
      const bool lost = reload && s.gpus[i].lost;
      const unsigned long long registered = reload ? s.gpus[i].registered : 0;
      std::set<unsigned> links_down = reload ? s.gpus[i].links_down : std::set<unsigned>{};
      s.gpus[i] = std::move(gpus[i]);
      s.gpus[i].lost = lost;
      s.gpus[i].registered = registered;
      s.gpus[i].links_down = std::move(links_down);
    } else {
      s.gpus.push_back(std::move(gpus[i]));
    }
  }
  while (s.gpus.size() > gpus.size()) s.gpus.pop_back();
  for (FakeGpu& g : s.gpus) {
    for (FakeInstance& inst : g.instances) {
      inst.gpu = &g;
      for (FakeCompute& ci : inst.cis) ci.gi = &inst;
    }
  }
  if (reload) {
    for (size_t i = 0; i < s.gpus.size() && i < old_mig.size(); ++i) {
      if (MigKey(s.gpus[i]) != old_mig[i] && (s.gpus[i].registered & kMigEvent)) {
        s.events.push_back(nvmlEventData_t{{&s.gpus[i]}, kMigEvent, 0, 0xFFFFFFFFu, 0xFFFFFFFFu});
      }
    }
  }
  return NVML_SUCCESS;
}

// Common checks: initialised, a known device, not lost, the call not marked unsupported.
nvmlReturn_t Check(State& s, nvmlDevice_t d, const char* fn) {
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  bool known = false;
  for (FakeGpu& g : s.gpus) known = known || &g == d.handle;
  if (!known) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.handle->lost) return NVML_ERROR_GPU_IS_LOST;
  if (s.unsupported.count(fn)) return NVML_ERROR_NOT_SUPPORTED;
  if (auto it = s.errors.find(fn); it != s.errors.end()) return it->second;
  return NVML_SUCCESS;
}

// The live GPU instance / compute instance a handle names, or nullptr (destroyed, or never one).
FakeInstance* FindInstance(State& s, FakeInstance* handle) {
  for (FakeGpu& g : s.gpus) {
    for (FakeInstance& inst : g.instances) {
      if (&inst == handle) return &inst;
    }
  }
  return nullptr;
}
FakeCompute* FindCompute(State& s, const void* handle) {
  for (FakeGpu& g : s.gpus) {
    for (FakeInstance& inst : g.instances) {
      for (FakeCompute& ci : inst.cis) {
        if (&ci == handle) return &ci;
      }
    }
  }
  return nullptr;
}
// A MIG device handle is its compute instance (an nvmlDevice_t that is no GPU).
nvmlDevice_t MigHandle(FakeCompute* ci) { return nvmlDevice_t{reinterpret_cast<FakeGpu*>(ci)}; }

// Checks for calls on a GPU instance (`fn` as in Check).
nvmlReturn_t CheckInstance(State& s, FakeInstance* handle, const char* fn) {
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!FindInstance(s, handle)) return NVML_ERROR_INVALID_ARGUMENT;
  if (handle->gpu->lost) return NVML_ERROR_GPU_IS_LOST;
  if (s.unsupported.count(fn)) return NVML_ERROR_NOT_SUPPORTED;
  if (auto it = s.errors.find(fn); it != s.errors.end()) return it->second;
  return NVML_SUCCESS;
}

void MigChanged(State& s, FakeGpu& g) {
  if (g.registered & kMigEvent) {
    s.events.push_back(nvmlEventData_t{{&g}, kMigEvent, 0, 0xFFFFFFFFu, 0xFFFFFFFFu});
  }
}

// Memory slices an instance occupies.
unsigned SliceMask(unsigned start, unsigned size) { return ((1u << size) - 1) << start; }

nvmlReturn_t CopyString(const std::string& value, char* out, unsigned length) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

void FillPci(const std::string& bus_id, nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", bus_id.c_str());
  // Legacy form: 4-digit domain.
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%s",
                bus_id.size() == 16 ? bus_id.substr(4).c_str() : bus_id.c_str());
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function);
  pci->domain = domain;
  pci->bus = bus;
  pci->device = device;
  pci->pciDeviceId = 0x233010DE;
}

}  // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) {
    if (int r = Load(s, /*reload=*/false); r != NVML_SUCCESS) return r;
    if (s.init_error != 0) return s.init_error;
  }
  ++s.init_count;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlShutdown() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --s.init_count;
  return NVML_SUCCESS;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient resources";
    default:
      return "Unknown Error";
  }
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  return CopyString(s.driver, version, length);
}

FAKE_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!version) return NVML_ERROR_INVALID_ARGUMENT;
  *version = s.cuda;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(s.gpus.size());
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  device->handle = &s.gpus[index];
  return s.gpus[index].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

#define DEVICE_CALL(fn)                                                   \
  State& s = S();                                                         \
  std::lock_guard<std::mutex> lock(s.mu);                                 \
  if (nvmlReturn_t r = Check(s, device, fn); r != NVML_SUCCESS) return r; \
  FakeGpu& g = *device.handle

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    if (FakeCompute* ci = s.init_count > 0 ? FindCompute(s, device.handle) : nullptr) {
      return CopyString(ci->uuid, uuid, length);  // a MIG device
    }
  }
  DEVICE_CALL("nvmlDeviceGetUUID");
  return CopyString(g.uuid, uuid, length);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  DEVICE_CALL("nvmlDeviceGetName");
  return CopyString(g.name, name, length);
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned* minor) {
  DEVICE_CALL("nvmlDeviceGetMinorNumber");
  *minor = g.minor;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned* node) {
  DEVICE_CALL("nvmlDeviceGetNumaNodeId");
  if (g.numa < 0) return NVML_ERROR_NOT_SUPPORTED;
  *node = static_cast<unsigned>(g.numa);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  DEVICE_CALL("nvmlDeviceGetMemoryInfo");
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = g.memory_bytes;
  memory->used = 512ULL << 20;
  memory->free = g.memory_bytes - memory->used;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  DEVICE_CALL("nvmlDeviceGetMemoryInfo_v2");
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  if (memory->version != kMemoryV2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  memory->total = g.memory_bytes;
  memory->reserved = 256ULL << 20;
  memory->used = 256ULL << 20;
  memory->free = g.memory_bytes - memory->reserved - memory->used;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                    nvmlDeviceAttributes_t* attributes) {
  DEVICE_CALL("nvmlDeviceGetAttributes_v2");
  if (g.sm_count < 0) return NVML_ERROR_NOT_SUPPORTED;
  std::memset(attributes, 0, sizeof(*attributes));
  attributes->multiprocessorCount = static_cast<unsigned>(g.sm_count);
  attributes->memorySizeMB = g.memory_bytes >> 20;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  DEVICE_CALL("nvmlDeviceGetPciInfo_v3");
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  FillPci(g.bus_id, pci);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned size,
                                                  unsigned long* set) {
  DEVICE_CALL("nvmlDeviceGetCpuAffinity");
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(set, 0, size * sizeof(unsigned long));
  const unsigned bits = 8 * sizeof(unsigned long);
  for (int cpu : g.cpus) {
    if (static_cast<unsigned>(cpu) / bits < size) set[cpu / bits] |= 1UL << (cpu % bits);
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device,
                                                             nvmlDevice_t other, int* level) {
  DEVICE_CALL("nvmlDeviceGetTopologyCommonAncestor");
  if (nvmlReturn_t r = Check(s, other, "nvmlDeviceGetTopologyCommonAncestor"); r != NVML_SUCCESS) {
    return r;
  }
  const unsigned a = g.index, b = other.handle->index;
  if (a >= s.pcie.size() || b >= s.pcie[a].size()) return NVML_ERROR_NOT_SUPPORTED;
  *level = s.pcie[a][b];
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int* active) {
  DEVICE_CALL("nvmlDeviceGetNvLinkState");
  if (g.nvlinks.empty()) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= 18) return NVML_ERROR_INVALID_ARGUMENT;  // an 18-link (Hopper) driver
  *active =
      link < g.nvlinks.size() && g.nvlinks[link] != "off" && !g.links_down.count(link) ? 1 : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned link,
                                                             int* type) {
  DEVICE_CALL("nvmlDeviceGetNvLinkRemoteDeviceType");
  if (link >= g.nvlinks.size() || g.nvlinks[link] == "off") return NVML_ERROR_INVALID_ARGUMENT;
  *type = g.nvlinks[link] == "switch" ? 2 : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link,
                                                             nvmlPciInfo_t* pci) {
  DEVICE_CALL("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  if (link >= g.nvlinks.size() || g.nvlinks[link] == "off") return NVML_ERROR_INVALID_ARGUMENT;
  const std::string& remote = g.nvlinks[link];
  // A switch has a PCI identity of its own; a peer GPU is "gpu:<bus id>".
  FillPci(remote.rfind("gpu:", 0) == 0 ? remote.substr(4) : "00000000:C0:00.0", pci);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device,
                                                    nvmlGpuFabricInfo_t* info) {
  DEVICE_CALL("nvmlDeviceGetGpuFabricInfo");
  if (!g.has_fabric) return NVML_ERROR_NOT_SUPPORTED;
  std::memcpy(info->clusterUuid, g.cluster, 16);
  info->status = g.fabric_status;
  info->cliqueId = g.clique;
  info->state = static_cast<unsigned char>(g.fabric_state);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device,
                                                     nvmlGpuFabricInfo_v2_t* info) {
  DEVICE_CALL("nvmlDeviceGetGpuFabricInfoV");
  if (!g.has_fabric) return NVML_ERROR_NOT_SUPPORTED;
  if (info->version != kFabricV2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  std::memcpy(info->clusterUuid, g.cluster, 16);
  info->status = g.fabric_status;
  info->cliqueId = g.clique;
  info->state = static_cast<unsigned char>(g.fabric_state);
  info->healthMask = 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned* current,
                                              unsigned* pending) {
  DEVICE_CALL("nvmlDeviceGetMigMode");
  if (!g.mig_capable) return NVML_ERROR_NOT_SUPPORTED;
  *current = g.mig_current;
  *pending = g.mig_pending;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned profile,
                                                             nvmlGpuInstanceProfileInfo_t* info) {
  DEVICE_CALL("nvmlDeviceGetGpuInstanceProfileInfo");
  if (!g.mig_capable || g.mig_current != 1) return NVML_ERROR_NOT_SUPPORTED;
  for (const ProfileRow& row : kProfiles) {
    if (row.index != profile) continue;
    std::memset(info, 0, sizeof(*info));
    info->id = row.id;
    info->instanceCount = row.count;
    info->sliceCount = row.slices;
    info->memorySizeMB = (g.memory_bytes >> 20) * row.size / 8;
    return NVML_SUCCESS;
  }
  // A profile NVML knows that this GPU has not, or past the last one NVML knows.
  return profile < kGpuInstanceProfileCount ? NVML_ERROR_NOT_SUPPORTED
                                            : NVML_ERROR_INVALID_ARGUMENT;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned profile_id,
                                                   nvmlGpuInstance_t* out, unsigned* count) {
  DEVICE_CALL("nvmlDeviceGetGpuInstances");
  if (!g.mig_capable || g.mig_current != 1) return NVML_ERROR_NOT_SUPPORTED;
  const ProfileRow* row = ProfileById(profile_id);
  if (!row || !count) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned capacity = row->count;
  unsigned n = 0;
  for (FakeInstance& inst : g.instances) {
    if (inst.profile_id != profile_id) continue;
    if (n >= capacity) return NVML_ERROR_INSUFFICIENT_SIZE;
    out[n++].handle = &inst;
  }
  *count = n;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t instance,
                                                nvmlGpuInstanceInfo_t* info) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!FindInstance(s, instance.handle) || !info) return NVML_ERROR_INVALID_ARGUMENT;
  info->device.handle = instance.handle->gpu;
  info->id = instance.handle->id;
  info->profileId = instance.handle->profile_id;
  info->placement = {instance.handle->start, instance.handle->size};
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned mode,
                                              nvmlReturn_t* activation) {
  DEVICE_CALL("nvmlDeviceSetMigMode");
  if (!g.mig_capable) return NVML_ERROR_NOT_SUPPORTED;
  if (mode > 1 || !activation) return NVML_ERROR_INVALID_ARGUMENT;
  if (mode == 0 && !g.instances.empty()) {
    *activation = NVML_ERROR_IN_USE;  // the driver keeps MIG on while instances exist
    return NVML_SUCCESS;
  }
  g.mig_pending = mode;
  *activation = g.mig_activation;
  if (g.mig_activation == NVML_SUCCESS) g.mig_current = mode;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned profile_id, nvmlGpuInstancePlacement_t* placements,
    unsigned* count) {
  DEVICE_CALL("nvmlDeviceGetGpuInstancePossiblePlacements_v2");
  if (!g.mig_capable) return NVML_ERROR_NOT_SUPPORTED;
  const ProfileRow* row = ProfileById(profile_id);
  if (!row || !count) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (unsigned start = 0; start < 8; ++start) {
    if (!((row->starts >> start) & 1)) continue;
    if (placements) placements[n] = {start, row->size};
    ++n;
  }
  *count = n;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned profile_id, const nvmlGpuInstancePlacement_t* placement,
    nvmlGpuInstance_t* out) {
  DEVICE_CALL("nvmlDeviceCreateGpuInstanceWithPlacement");
  if (!g.mig_capable || g.mig_current != 1) return NVML_ERROR_NOT_SUPPORTED;
  const ProfileRow* row = ProfileById(profile_id);
  if (!row || !placement || !out) return NVML_ERROR_INVALID_ARGUMENT;
  if (placement->start >= 8 || !((row->starts >> placement->start) & 1) ||
      placement->size != row->size) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const unsigned want = SliceMask(placement->start, row->size);
  unsigned same = 0, used_ids = 0;
  for (const FakeInstance& inst : g.instances) {
    if (SliceMask(inst.start, inst.size) & want) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (inst.profile_id == profile_id) ++same;
    used_ids |= 1u << inst.id;
  }
  if (same >= row->count) return NVML_ERROR_INSUFFICIENT_RESOURCES;
  FakeInstance inst;
  inst.id = 1;
  while (used_ids & (1u << inst.id)) ++inst.id;
  inst.profile_id = profile_id;
  inst.start = placement->start;
  inst.size = row->size;
  inst.gpu = &g;
  g.instances.push_back(inst);
  out->handle = &g.instances.back();
  MigChanged(s, g);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t instance) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = CheckInstance(s, instance.handle, "nvmlGpuInstanceDestroy");
      r != NVML_SUCCESS) {
    return r;
  }
  if (!instance.handle->cis.empty()) return NVML_ERROR_IN_USE;
  FakeGpu& g = *instance.handle->gpu;
  g.instances.remove_if([&](const FakeInstance& i) { return &i == instance.handle; });
  MigChanged(s, g);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t instance, unsigned profile, unsigned engine,
    nvmlComputeInstanceProfileInfo_t* info) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r =
          CheckInstance(s, instance.handle, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
      r != NVML_SUCCESS) {
    return r;
  }
  if (engine != 0 || !info || profile >= kComputeInstanceProfileCount) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const ProfileRow* gi = ProfileById(instance.handle->profile_id);
  for (const ComputeRow& row : kComputeProfiles) {
    if (row.index != profile || !gi || row.slices > gi->slices) continue;
    std::memset(info, 0, sizeof(*info));
    info->id = row.index;
    info->sliceCount = row.slices;
    info->instanceCount = gi->slices / row.slices;
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t instance,
                                                              unsigned profile_id,
                                                              nvmlComputeInstance_t* out) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = CheckInstance(s, instance.handle, "nvmlGpuInstanceCreateComputeInstance");
      r != NVML_SUCCESS) {
    return r;
  }
  FakeInstance& gi = *instance.handle;
  const ProfileRow* row = ProfileById(gi.profile_id);
  unsigned slices = 0;
  for (const ComputeRow& c : kComputeProfiles) {
    if (c.index == profile_id) slices = c.slices;
  }
  if (!out || slices == 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (!row || slices > row->slices) return NVML_ERROR_NOT_SUPPORTED;
  unsigned used = 0, used_ids = 0;
  for (const FakeCompute& ci : gi.cis) {
    used += ci.slices;
    used_ids |= 1u << ci.id;
  }
  if (used + slices > row->slices) return NVML_ERROR_INSUFFICIENT_RESOURCES;
  FakeCompute ci;
  while (used_ids & (1u << ci.id)) ++ci.id;
  ci.profile_id = profile_id;
  ci.start = used;
  ci.slices = slices;
  ci.uuid = NewMigUuid(s);
  ci.gi = &gi;
  gi.cis.push_back(ci);
  out->handle = &gi.cis.back();
  MigChanged(s, *gi.gpu);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t instance,
                                                            unsigned profile_id,
                                                            nvmlComputeInstance_t* out,
                                                            unsigned* count) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (nvmlReturn_t r = CheckInstance(s, instance.handle, "nvmlGpuInstanceGetComputeInstances");
      r != NVML_SUCCESS) {
    return r;
  }
  if (!out || !count || profile_id >= kComputeInstanceProfileCount) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  unsigned n = 0;
  for (FakeCompute& ci : instance.handle->cis) {
    if (ci.profile_id == profile_id) out[n++].handle = &ci;
  }
  *count = n;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t instance,
                                                       nvmlComputeInstanceInfo_t* info) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  FakeCompute* ci = FindCompute(s, instance.handle);
  if (!ci || !info) return NVML_ERROR_INVALID_ARGUMENT;
  info->device.handle = ci->gi->gpu;
  info->gpuInstance.handle = ci->gi;
  info->id = ci->id;
  info->profileId = ci->profile_id;
  info->placement = {ci->start, ci->slices};
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t instance) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  FakeCompute* ci = FindCompute(s, instance.handle);
  if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
  if (auto it = s.errors.find("nvmlComputeInstanceDestroy"); it != s.errors.end()) {
    return it->second;
  }
  if (ci->busy) return NVML_ERROR_IN_USE;
  FakeInstance& gi = *ci->gi;
  gi.cis.remove_if([&](const FakeCompute& c) { return &c == ci; });
  MigChanged(s, *gi.gpu);
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned* count) {
  DEVICE_CALL("nvmlDeviceGetMaxMigDeviceCount");
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = g.mig_capable && g.mig_current == 1 ? kMaxMigDevices : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index,
                                                             nvmlDevice_t* mig) {
  DEVICE_CALL("nvmlDeviceGetMigDeviceHandleByIndex");
  if (!mig || index >= kMaxMigDevices) return NVML_ERROR_INVALID_ARGUMENT;
  if (!g.mig_capable || g.mig_current != 1) return NVML_ERROR_NOT_SUPPORTED;
  unsigned n = 0;
  for (FakeInstance& inst : g.instances) {
    for (FakeCompute& ci : inst.cis) {
      if (n++ == index) {
        *mig = MigHandle(&ci);
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned* id) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  FakeCompute* ci = FindCompute(s, device.handle);
  if (!id) return NVML_ERROR_INVALID_ARGUMENT;
  if (!ci) return NVML_ERROR_NOT_SUPPORTED;  // a GPU, not a MIG device
  *id = ci->gi->id;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned* id) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  FakeCompute* ci = FindCompute(s, device.handle);
  if (!id) return NVML_ERROR_INVALID_ARGUMENT;
  if (!ci) return NVML_ERROR_NOT_SUPPORTED;
  *id = ci->id;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                          unsigned long long* types) {
  DEVICE_CALL("nvmlDeviceGetSupportedEventTypes");
  *types = g.events;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  s.event_set = true;
  set->handle = &s;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                                  nvmlEventSet_t set) {
  DEVICE_CALL("nvmlDeviceRegisterEvents");
  if (set.handle != &s || !s.event_set) return NVML_ERROR_INVALID_ARGUMENT;
  if (types & ~g.events) return NVML_ERROR_NOT_SUPPORTED;
  g.registered |= types;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                             unsigned timeout_ms) {
  State& s = S();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.init_count == 0) return NVML_ERROR_UNINITIALIZED;
      if (set.handle != &s || !s.event_set) return NVML_ERROR_INVALID_ARGUMENT;
      if (!s.events.empty()) {
        *data = s.events.front();
        s.events.pop_front();
        return NVML_SUCCESS;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return NVML_ERROR_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

FAKE_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (set.handle != &s || !s.event_set) return NVML_ERROR_INVALID_ARGUMENT;
  s.event_set = false;
  for (FakeGpu& g : s.gpus) g.registered = 0;
  return NVML_SUCCESS;
}

// Health: the driver's recovery action (a field value), row remapping, page retirement.
typedef union {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
} nvmlValue_t;
typedef struct {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;
static_assert(sizeof(nvmlFieldValue_t) == 40);
constexpr unsigned kFieldRecoveryAction = 230;  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                                  nvmlFieldValue_t* values) {
  DEVICE_CALL("nvmlDeviceGetFieldValues");
  if (count <= 0 || !values) return NVML_ERROR_INVALID_ARGUMENT;
  for (int k = 0; k < count; ++k) {
    nvmlFieldValue_t& v = values[k];
    v.valueType = 1;  // NVML_VALUE_TYPE_UNSIGNED_INT
    if (v.fieldId == kFieldRecoveryAction && g.recovery_action >= 0) {
      v.nvmlReturn = NVML_SUCCESS;
      v.value.uiVal = static_cast<unsigned>(g.recovery_action);
    } else {
      v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned* corrected,
                                                   unsigned* uncorrected, unsigned* pending,
                                                   unsigned* failure) {
  DEVICE_CALL("nvmlDeviceGetRemappedRows");
  if (!corrected || !uncorrected || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
  if (!g.has_remapped_rows) return NVML_ERROR_NOT_SUPPORTED;
  *corrected = g.remapped_corrected;
  *uncorrected = g.remapped_uncorrected;
  *pending = g.remap_pending ? 1 : 0;
  *failure = g.remap_failure ? 1 : 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int* pending) {
  DEVICE_CALL("nvmlDeviceGetRetiredPagesPendingStatus");
  if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
  *pending = g.retired_pages_pending ? 1 : 0;
  return NVML_SUCCESS;
}

// Test controls.
FAKE_EXPORT int tessera_fake_nvml_inject_xid(unsigned index, unsigned long long xid) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  FakeGpu& g = s.gpus[index];
  if (!(g.registered & kXidEvent)) return NVML_ERROR_NOT_SUPPORTED;  // nobody listens
  s.events.push_back(nvmlEventData_t{{&g}, kXidEvent, xid, 0xFFFFFFFFu, 0xFFFFFFFFu});
  return NVML_SUCCESS;
}

FAKE_EXPORT int tessera_fake_nvml_inject_mig_xid(unsigned index, unsigned long long xid,
                                                 unsigned gpu_instance, unsigned compute_instance) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  FakeGpu& g = s.gpus[index];
  if (!(g.registered & kXidEvent)) return NVML_ERROR_NOT_SUPPORTED;
  s.events.push_back(nvmlEventData_t{{&g}, kXidEvent, xid, gpu_instance, compute_instance});
  return NVML_SUCCESS;
}

FAKE_EXPORT int tessera_fake_nvml_set_recovery_action(unsigned index, int action) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  FakeGpu& g = s.gpus[index];
  if (g.recovery_action == action) return NVML_SUCCESS;
  g.recovery_action = action;
  if (g.registered & kXidEvent) {  // XID 154: GPU recovery action changed
    s.events.push_back(nvmlEventData_t{{&g}, kXidEvent, 154, 0xFFFFFFFFu, 0xFFFFFFFFu});
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT int tessera_fake_nvml_set_nvlink(unsigned index, unsigned link, int up) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (index >= s.gpus.size() || link >= s.gpus[index].nvlinks.size()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (up) {
    s.gpus[index].links_down.erase(link);
  } else {
    s.gpus[index].links_down.insert(link);
  }
  return NVML_SUCCESS;
}

FAKE_EXPORT int tessera_fake_nvml_reset(unsigned index) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  FakeGpu& g = s.gpus[index];
  g.lost = false;
  if (g.recovery_action > 0) g.recovery_action = 0;
  if (g.remap_pending) {
    g.remap_pending = false;
  }
  g.retired_pages_pending = false;
  return NVML_SUCCESS;
}

FAKE_EXPORT int tessera_fake_nvml_set_lost(unsigned index, int lost) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (index >= s.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  s.gpus[index].lost = lost != 0;
  return NVML_SUCCESS;
}

FAKE_EXPORT int tessera_fake_nvml_reload() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return Load(s, /*reload=*/s.init_count > 0);
}

FAKE_EXPORT int tessera_fake_nvml_init_count() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.init_count;
}
