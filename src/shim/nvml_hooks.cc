// NVML entry points the shim intercepts, so that nvidia-smi, pynvml and frameworks that size
// themselves through NVML see the same share as the driver API: total = the cap, used = the pod's
// usage, free = total - used; and the process list of a shared GPU is the pod's own processes
// (their PIDs as this container sees them, their usage from the ledger), where unshimmed NVML in
// a container shows none (HAMi #1339).
#include <algorithm>
#include <vector>

#include "shim/hooks.h"
#include "shim/shim_state.h"

using tessera::shim::Share;
using tessera::shim::Shim;

namespace {

constexpr nvmlReturn_t kFunctionNotFound = 13;  // NVML_ERROR_FUNCTION_NOT_FOUND
constexpr unsigned int kNoInstance = 0xFFFFFFFFu;

Share* NvmlShare(nvmlDevice_t dev) {
  Shim& s = Shim::Get();
  return s.any_share() ? s.ShareForNvml(dev) : nullptr;
}

void Adjust(Share* share, unsigned long long* total, unsigned long long* free,
            unsigned long long* used) {
  uint64_t t = 0, f = 0;
  share->Report(*total, *free, &t, &f);
  *total = t;
  *free = f;
  *used = t - f;
}

// The pod's processes in this container's PID namespace, with their usage of the GPU.
std::vector<std::pair<unsigned int, unsigned long long>> PodProcesses(Share* share) {
  std::vector<std::pair<unsigned int, unsigned long long>> out;
  uint64_t own_ns = tessera::shim::ProcessIdentity::Current().pidns_inode;
  for (const auto& slot : share->ledger()->Slots(/*check_alive=*/false)) {
    if (slot.pidns_inode != own_ns) continue;  // another container of the pod
    out.emplace_back(slot.pid, slot.used_bytes);
  }
  return out;
}

template <typename Info, typename Fill>
nvmlReturn_t ListProcesses(Share* share, unsigned int* count, Info* infos, Fill fill) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  auto procs = PodProcesses(share);
  const unsigned int n = static_cast<unsigned int>(procs.size());
  if (infos == nullptr || *count < n) {
    *count = n;
    return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < n; ++i) fill(&infos[i], procs[i].first, procs[i].second);
  *count = n;
  return NVML_SUCCESS;
}

}  // namespace

// Definitions of the hooks declared extern "C" in hooks.h (which gives them C linkage).

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev,
                                                                            nvmlMemory_t* mem) {
  auto real = Shim::Get().real.nvmlDeviceGetMemoryInfo;
  if (real == nullptr) return kFunctionNotFound;
  nvmlReturn_t r = real(dev, mem);
  if (r != NVML_SUCCESS || mem == nullptr) return r;
  if (Share* share = NvmlShare(dev)) Adjust(share, &mem->total, &mem->free, &mem->used);
  return r;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(
    nvmlDevice_t dev, nvmlMemory_v2_t* mem) {
  auto real = Shim::Get().real.nvmlDeviceGetMemoryInfo_v2;
  if (real == nullptr) return kFunctionNotFound;
  nvmlReturn_t r = real(dev, mem);
  if (r != NVML_SUCCESS || mem == nullptr) return r;
  if (Share* share = NvmlShare(dev)) {
    mem->reserved = 0;  // the share is what the pod may use; the driver's reserve is not in it
    Adjust(share, &mem->total, &mem->free, &mem->used);
  }
  return r;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t dev, unsigned int* count, nvmlProcessInfo_v1_t* infos) {
  auto real = Shim::Get().real.nvmlDeviceGetComputeRunningProcesses;
  Share* share = NvmlShare(dev);
  if (share == nullptr) return real != nullptr ? real(dev, count, infos) : kFunctionNotFound;
  return ListProcesses(share, count, infos,
                       [](nvmlProcessInfo_v1_t* info, unsigned int pid, unsigned long long used) {
                         info->pid = pid;
                         info->usedGpuMemory = used;
                       });
}

namespace {
nvmlReturn_t ProcessesV2(PFN_nvmlDeviceGetComputeRunningProcesses_v3 real, nvmlDevice_t dev,
                         unsigned int* count, nvmlProcessInfo_t* infos) {
  Share* share = NvmlShare(dev);
  if (share == nullptr) return real != nullptr ? real(dev, count, infos) : kFunctionNotFound;
  return ListProcesses(share, count, infos,
                       [](nvmlProcessInfo_t* info, unsigned int pid, unsigned long long used) {
                         info->pid = pid;
                         info->usedGpuMemory = used;
                         info->gpuInstanceId = kNoInstance;
                         info->computeInstanceId = kNoInstance;
                       });
}
}  // namespace

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t dev, unsigned int* count, nvmlProcessInfo_t* infos) {
  return ProcessesV2(Shim::Get().real.nvmlDeviceGetComputeRunningProcesses_v2, dev, count, infos);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t dev, unsigned int* count, nvmlProcessInfo_t* infos) {
  return ProcessesV2(Shim::Get().real.nvmlDeviceGetComputeRunningProcesses_v3, dev, count, infos);
}
