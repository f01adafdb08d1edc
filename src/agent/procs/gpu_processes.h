// GpuProcessSampler: what the GPU driver says each process holds and does on one GPU, by host PID
// (NVML answers with host PIDs; HostProcesses turns them into pods). One interface for everything
// in the agent that needs the driver's per-process view, whatever the tenant's process did:
//   - the memory backstop (pods/memory_backstop.h): used memory per process (Memory), which
//     counts what the CUDA shim cannot see (contexts, modules, graph memory, and a process that
//     loaded the real driver by its path and bypassed the shim);
//   - the compute controller (shim/compute_controller.h): SM utilisation per process since the
//     last sample (Utilization, the shim::UtilizationSource it takes);
//   - per-pod GPU time (issue 34) and XID attribution (issue 30) are meant to use it too.
//
// NvmlProcessSampler loads libnvidia-ml.so.1 at run time (no link-time dependency):
//   Memory       nvmlDeviceGetComputeRunningProcesses_v3 (else _v2, else the first version) and
//                nvmlDeviceGetGraphicsRunningProcesses_v3 when the library has it; a process on
//                both lists counts once, with the larger figure; memory NVML cannot report
//                (NVML_VALUE_NOT_AVAILABLE, as under MIG without privileges) is reported as 0
//                with `unknown` set
//   Utilization  nvmlDeviceGetProcessUtilization since the previous sample of that GPU (the
//                mean of several samples per process). Right for a process alone on the GPU;
//                with several, a real driver (H200, 580) names one process per 200 ms sample
//                with the GPU's whole load (bench/results/usage-gpu.md)
//   DeviceUtilization  the GPU's own busy fraction since the previous call for that GPU (and
//                DeviceBusyTime: with the span of time the record covers), right
//                also with several processes (usage_meter.h uses it): the driver's record of it,
//                nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES) since the newest sample seen,
//                each sample weighted by the time it covers; where the driver keeps no record
//                (or on the first call), nvmlDeviceGetUtilizationRates, which covers only the
//                GPU's last sample period (1/6 s to 1 s by product): read once a second, it
//                would see a sixth of the time, and a tenant whose work fell between the reads
//                would not be charged for it
// The fake libnvidia-ml.so.1 of test/fake_cuda answers both from what the fake driver did, with
// host PIDs as the real one (tested in procs/gpu_processes_test.cc and on harness nodes).
// Not thread-safe: one owner (the pod manager's maintenance).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shim/compute_controller.h"

namespace tessera::agent {

// The GPU's busy fraction over a span of time (DeviceBusyTime).
struct DeviceBusy {
  uint32_t permille = 0;
  // The time the fraction covers, when it is the driver's record of the time since the previous
  // call (the busy time is then permille x span_ns, whatever the caller's own clock says); 0 when
  // it is a rate now, to be applied to the caller's interval.
  uint64_t span_ns = 0;
};

struct GpuProcessMemory {
  uint32_t pid = 0;         // host PID
  uint64_t used_bytes = 0;  // device memory the driver says it holds
  bool unknown = false;     // the driver would not say (used_bytes is 0 then)
  bool operator==(const GpuProcessMemory&) const = default;
};

class GpuProcessSampler : public shim::UtilizationSource {
 public:
  ~GpuProcessSampler() override = default;
  // The processes holding memory or a context on the GPU now.
  virtual absl::StatusOr<std::vector<GpuProcessMemory>> Memory(const std::string& gpu_uuid) = 0;
  // SM utilisation per process since the previous call for this GPU (permille).
  virtual absl::StatusOr<std::vector<shim::PidUtilization>> Utilization(
      const std::string& gpu_uuid) = 0;
  // The fraction of the time since the previous call for this GPU in which a kernel ran
  // (permille); see NvmlProcessSampler for what a driver without a record gives.
  virtual absl::StatusOr<uint32_t> DeviceUtilization(const std::string& /*gpu_uuid*/) {
    return absl::UnimplementedError("this sampler has no device utilisation");
  }
  // The same with the span of time it covers where the driver's record says (the usage meter's
  // source); by default DeviceUtilization's fraction as a rate (span 0).
  virtual absl::StatusOr<DeviceBusy> DeviceBusyTime(const std::string& gpu_uuid) {
    absl::StatusOr<uint32_t> u = DeviceUtilization(gpu_uuid);
    if (!u.ok()) return u.status();
    return DeviceBusy{.permille = *u};
  }
  absl::StatusOr<std::vector<shim::PidUtilization>> Sample(const std::string& gpu_uuid) final {
    return Utilization(gpu_uuid);
  }
};

class NvmlProcessSampler : public GpuProcessSampler {
 public:
  static absl::StatusOr<std::unique_ptr<NvmlProcessSampler>> Load(
      const std::string& library = "libnvidia-ml.so.1");
  ~NvmlProcessSampler() override;
  absl::StatusOr<std::vector<GpuProcessMemory>> Memory(const std::string& gpu_uuid) override;
  absl::StatusOr<std::vector<shim::PidUtilization>> Utilization(
      const std::string& gpu_uuid) override;
  absl::StatusOr<uint32_t> DeviceUtilization(const std::string& gpu_uuid) override;
  absl::StatusOr<DeviceBusy> DeviceBusyTime(const std::string& gpu_uuid) override;

 private:
  NvmlProcessSampler() = default;
  absl::StatusOr<void*> Device(const std::string& gpu_uuid) const;
  // The mean of the driver's utilisation samples newer than the newest seen for the GPU,
  // weighted by the time each covers; an error when there is no record or no sample to weigh.
  absl::StatusOr<DeviceBusy> SampledUtilization(void* device, const std::string& gpu_uuid);

  void* handle_ = nullptr;
  void* by_uuid_ = nullptr;
  void* compute_v3_ = nullptr;  // or _v2, same layout
  void* compute_v1_ = nullptr;
  void* graphics_v3_ = nullptr;
  void* utilization_ = nullptr;
  void* device_utilization_ = nullptr;
  void* device_samples_ = nullptr;
  std::map<std::string, unsigned long long> last_seen_us_;
  std::map<std::string, unsigned long long> last_device_sample_us_;  // 0: none seen yet
};

}  // namespace tessera::agent
