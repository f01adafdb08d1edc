// A fake libnvidia-ml.so.1 for tests, reading the fake machine (fake_machine.h) that the fake
// libcuda.so.1 writes: memory used = the living processes' bytes, the compute process list =
// processes with a context or memory on the device, and utilisation computed from the kernels the
// fake driver executed (per process: nvmlDeviceGetProcessUtilization; per device:
// nvmlDeviceGetUtilizationRates over the last 500 ms, and nvmlDeviceGetSamples's record of it, a
// sample every 1/6 s for the last 2 s). Sees every process, as NVML on a host does;
// CUDA_VISIBLE_DEVICES does not apply to NVML.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "fake_cuda/fake_machine.h"
#include "shim/nvml_abi.h"

#define FAKE_NVML_EXPORTS(X)                                                              \
  X(nvmlInit_v2, PFN_nvmlInit_v2)                                                         \
  X(nvmlInitWithFlags, PFN_nvmlInitWithFlags)                                             \
  X(nvmlShutdown, PFN_nvmlShutdown)                                                       \
  X(nvmlErrorString, PFN_nvmlErrorString)                                                 \
  X(nvmlSystemGetDriverVersion, PFN_nvmlSystemGetDriverVersion)                           \
  X(nvmlDeviceGetCount_v2, PFN_nvmlDeviceGetCount_v2)                                     \
  X(nvmlDeviceGetHandleByIndex_v2, PFN_nvmlDeviceGetHandleByIndex_v2)                     \
  X(nvmlDeviceGetHandleByUUID, PFN_nvmlDeviceGetHandleByUUID)                             \
  X(nvmlDeviceGetUUID, PFN_nvmlDeviceGetUUID)                                             \
  X(nvmlDeviceGetName, PFN_nvmlDeviceGetName)                                             \
  X(nvmlDeviceGetIndex, PFN_nvmlDeviceGetIndex)                                           \
  X(nvmlDeviceGetMemoryInfo, PFN_nvmlDeviceGetMemoryInfo)                                 \
  X(nvmlDeviceGetMemoryInfo_v2, PFN_nvmlDeviceGetMemoryInfo_v2)                           \
  X(nvmlDeviceGetComputeRunningProcesses, PFN_nvmlDeviceGetComputeRunningProcesses)       \
  X(nvmlDeviceGetComputeRunningProcesses_v2, PFN_nvmlDeviceGetComputeRunningProcesses_v3) \
  X(nvmlDeviceGetComputeRunningProcesses_v3, PFN_nvmlDeviceGetComputeRunningProcesses_v3) \
  X(nvmlDeviceGetProcessUtilization, PFN_nvmlDeviceGetProcessUtilization)                 \
  X(nvmlDeviceGetUtilizationRates, PFN_nvmlDeviceGetUtilizationRates)                     \
  X(nvmlDeviceGetSamples, PFN_nvmlDeviceGetSamples)

#define FAKE_DECLARE(name, type) std::remove_pointer_t<type> name;
extern "C" {
FAKE_NVML_EXPORTS(FAKE_DECLARE)
}
#undef FAKE_DECLARE

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

using tessera::fake::FakeMachine;
using tessera::fake::Machine;

bool g_initialised = false;

// Handles are 1-based machine indices.
int Index(nvmlDevice_t d) {
  auto v = reinterpret_cast<intptr_t>(d) - 1;
  if (v < 0 || v >= static_cast<intptr_t>(Machine()->device_count)) return -1;
  return static_cast<int>(v);
}
nvmlDevice_t Handle(int index) { return reinterpret_cast<nvmlDevice_t>(intptr_t{index} + 1); }

struct ProcUse {
  unsigned int pid;
  unsigned long long bytes;
};

// The processes on the device, by the caller's PIDs (the host's, for an agent on the host), as
// NVML lists them; processes the caller cannot see are left out (fake_machine.h, "PIDs").
std::vector<ProcUse> Processes(int device) {
  std::vector<ProcUse> out;
  const FakeMachine& m = *Machine();
  tessera::fake::PidView view;
  for (const auto& p : m.procs) {
    uint32_t pid = 0;
    if (p.pid.load() == 0 || view.Check(p, &pid) != tessera::fake::PidView::State::kAlive) continue;
    // With the exported allocations it created that are still alive (FakeShared: by its own PID).
    uint64_t bytes = p.bytes[device].load() + tessera::fake::SharedBytes(m, p.pid.load(), device);
    if (bytes == 0 && p.has_context[device].load() == 0) continue;
    out.push_back({pid, bytes});
  }
  return out;
}

void Memory(int device, unsigned long long* total, unsigned long long* used,
            unsigned long long* free) {
  const FakeMachine& m = *Machine();
  *total = m.devices[device].total_bytes;
  *used = std::min<unsigned long long>(tessera::fake::LiveBytes(m, device), *total);
  *free = *total - *used;
}

}  // namespace

FAKE_API nvmlReturn_t nvmlInit_v2() {
  Machine();
  g_initialised = true;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  return nvmlInit_v2();
}

FAKE_API nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

FAKE_API const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    default:
      return "Unknown Error";
  }
}

FAKE_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int len) {
  if (version == nullptr || len == 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(version, len, "580.95.05");
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = Machine()->device_count;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* dev) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (dev == nullptr || index >= Machine()->device_count) return NVML_ERROR_INVALID_ARGUMENT;
  *dev = Handle(static_cast<int>(index));
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* dev) {
  if (!g_initialised) return NVML_ERROR_UNINITIALIZED;
  if (uuid == nullptr || dev == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < Machine()->device_count; ++i) {
    if (std::strcmp(Machine()->devices[i].uuid, uuid) == 0) {
      *dev = Handle(static_cast<int>(i));
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

FAKE_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char* uuid, unsigned int len) {
  int i = Index(dev);
  if (i < 0 || uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (std::strlen(Machine()->devices[i].uuid) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::snprintf(uuid, len, "%s", Machine()->devices[i].uuid);
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char* name, unsigned int len) {
  int i = Index(dev);
  if (i < 0 || name == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::snprintf(name, len, "%s", Machine()->devices[i].name);
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int* index) {
  int i = Index(dev);
  if (i < 0 || index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<unsigned int>(i);
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t* mem) {
  int i = Index(dev);
  if (i < 0 || mem == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  Memory(i, &mem->total, &mem->used, &mem->free);
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t* mem) {
  int i = Index(dev);
  if (i < 0 || mem == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (mem->version != TESSERA_NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  mem->reserved = 0;
  Memory(i, &mem->total, &mem->used, &mem->free);
  return NVML_SUCCESS;
}

namespace {
template <typename Info, typename Fill>
nvmlReturn_t List(nvmlDevice_t dev, unsigned int* count, Info* infos, Fill fill) {
  int i = Index(dev);
  if (i < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto procs = Processes(i);
  unsigned int n = static_cast<unsigned int>(procs.size());
  if (infos == nullptr || *count < n) {
    *count = n;
    return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int k = 0; k < n; ++k) fill(&infos[k], procs[k]);
  *count = n;
  return NVML_SUCCESS;
}
}  // namespace

FAKE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int* count,
                                                           nvmlProcessInfo_v1_t* infos) {
  return List(dev, count, infos, [](nvmlProcessInfo_v1_t* info, const ProcUse& p) {
    info->pid = p.pid;
    info->usedGpuMemory = p.bytes;
  });
}

FAKE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int* count,
                                                              nvmlProcessInfo_t* infos) {
  return List(dev, count, infos, [](nvmlProcessInfo_t* info, const ProcUse& p) {
    info->pid = p.pid;
    info->usedGpuMemory = p.bytes;
    info->gpuInstanceId = 0xFFFFFFFFu;
    info->computeInstanceId = 0xFFFFFFFFu;
  });
}

FAKE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int* count,
                                                              nvmlProcessInfo_t* infos) {
  return nvmlDeviceGetComputeRunningProcesses_v3(dev, count, infos);
}

// One sample per process that ran kernels since lastSeen (a CPU timestamp in microseconds; 0:
// the last second), with smUtil = its share of that interval in percent.
FAKE_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t dev,
                                                      nvmlProcessUtilizationSample_t* samples,
                                                      unsigned int* count,
                                                      unsigned long long last_seen_us) {
  int i = Index(dev);
  if (i < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const uint64_t now_us = tessera::fake::RealtimeUs();
  const int64_t now_ns = tessera::fake::MonoNs();
  uint64_t from_us = last_seen_us != 0 ? last_seen_us : now_us - 1'000'000;
  if (from_us >= now_us) from_us = now_us - 1;
  const int64_t from_ns = now_ns - static_cast<int64_t>(now_us - from_us) * 1000;
  auto busy = tessera::fake::BusyByPid(*Machine(), i, from_ns, now_ns);
  const unsigned int n = static_cast<unsigned int>(busy.size());
  if (n == 0) {
    *count = 0;
    return NVML_ERROR_NOT_FOUND;
  }
  if (samples == nullptr || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  const double window = static_cast<double>(now_ns - from_ns);
  for (unsigned int k = 0; k < n; ++k) {
    samples[k].pid = busy[k].first;
    samples[k].timeStamp = now_us;
    samples[k].smUtil = static_cast<unsigned int>(
        std::min(100.0, 100.0 * static_cast<double>(busy[k].second) / window + 0.5));
    samples[k].memUtil = 0;
    samples[k].encUtil = 0;
    samples[k].decUtil = 0;
  }
  *count = n;
  return NVML_SUCCESS;
}

FAKE_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t* util) {
  int i = Index(dev);
  if (i < 0 || util == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const int64_t now = tessera::fake::MonoNs(), from = now - 500'000'000;
  int64_t busy = 0;
  for (const auto& [pid, ns] : tessera::fake::BusyByPid(*Machine(), i, from, now)) busy += ns;
  util->gpu = static_cast<unsigned int>(std::min<int64_t>(100, busy * 100 / (now - from)));
  util->memory = 0;
  return NVML_SUCCESS;
}

// NVML_GPU_UTILIZATION_SAMPLES: a sample at the end of every 1/6 s period of CLOCK_REALTIME (as a
// real driver's record, ending at the last whole period), the percent of it in which a kernel
// ran, for the periods of the last 2 s newer than last_seen_us (0: all of them).
FAKE_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t dev, int type,
                                           unsigned long long last_seen_us, int* value_type,
                                           unsigned int* count, nvmlSample_t* samples) {
  int i = Index(dev);
  if (i < 0 || count == nullptr || value_type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
  constexpr uint64_t kPeriodUs = 166'667, kRecordUs = 2'000'000;
  const uint64_t now_us = tessera::fake::RealtimeUs();
  const int64_t now_ns = tessera::fake::MonoNs();
  std::vector<uint64_t> ends;  // the periods' ends, oldest first
  for (uint64_t end = now_us / kPeriodUs * kPeriodUs;
       end + kRecordUs > now_us && end > last_seen_us; end -= kPeriodUs) {
    ends.insert(ends.begin(), end);
  }
  *value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
  if (ends.empty()) {
    *count = 0;
    return NVML_ERROR_NOT_FOUND;
  }
  const unsigned int n = static_cast<unsigned int>(ends.size());
  if (samples == nullptr) {
    *count = n;
    return NVML_SUCCESS;
  }
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int k = 0; k < n; ++k) {
    const int64_t to = now_ns - static_cast<int64_t>(now_us - ends[k]) * 1000;
    const int64_t from = to - static_cast<int64_t>(kPeriodUs) * 1000;
    int64_t busy = 0;
    for (const auto& [pid, ns] : tessera::fake::BusyByPid(*Machine(), i, from, to)) busy += ns;
    samples[k].timeStamp = ends[k];
    samples[k].sampleValue.uiVal = static_cast<unsigned int>(
        std::min<int64_t>(100, (busy * 100 + (to - from) / 2) / (to - from)));
  }
  *count = n;
  return NVML_SUCCESS;
}
