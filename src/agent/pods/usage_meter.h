// UsageMeter: how long each GPU of the node was busy, and which pod it was busy for, as
// monotonic counters (nanoseconds) for /metrics (issue 34).
//
// The source is the device's own utilisation since the previous observation (the driver's record
// of it, GpuProcessSampler::DeviceUtilization: every sample period counted, so that work between
// two observations is not missed), which a real GPU reports right: on an H200 its rate stayed
// within 5% of the ground truth, also with several processes on the GPU. NVML's split by
// process is not used: there it named one process per 200 ms sample when several ran, with the
// GPU's whole load (bench/results/usage-gpu.md). So an interval's busy time goes to the one pod
// running on the GPU (a whole GPU; a MIG-less GPU shared by pods of which one has processes now)
// and otherwise to the GPU's unattributed time, which says how much of a shared GPU's use no pod
// could be charged with. The split among several running pods needs a per-pod source the tenant
// cannot write (the shim's counters are in the pod's own ledger); not done here.
//
// Pure: the caller brings the clock, the utilisation and which pods run. Not thread-safe (the pod
// manager's lock).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::agent {

class UsageMeter {
 public:
  struct Gpu {
    uint64_t sampled_ns = 0;       // time covered by observations
    uint64_t busy_ns = 0;          // of which the GPU ran kernels (the device's utilisation)
    uint64_t unattributed_ns = 0;  // busy time no single running pod could be charged with
  };

  // What one observation charged: the time since the previous one and the busy part of it.
  struct Charge {
    uint64_t elapsed_ns = 0;
    uint64_t busy_ns = 0;
  };
  // The GPU `gpu_uuid` at `now_ns` (a monotonic clock): busy `utilization_permille` of the time
  // since the last observation, with `running_pods` (pod UIDs) the pods that have processes on it
  // now. The
  // first observation of a GPU only starts its clock; later ones charge the time since the last.
  Charge Observe(const std::string& gpu_uuid, int64_t now_ns, uint32_t utilization_permille,
                 const std::vector<std::string>& running_pods);
  // The GPU gave no figure this time: its clock restarts at the next observation.
  void Skip(const std::string& gpu_uuid);
  // The pod is gone: its counters go (its series with it).
  void Forget(const std::string& pod_uid);

  const Gpu* gpu(const std::string& gpu_uuid) const;
  // The busy time charged to the pod on that GPU; nullopt when none was ever charged.
  std::optional<uint64_t> pod_busy_ns(const std::string& pod_uid,
                                      const std::string& gpu_uuid) const;

 private:
  std::map<std::string, Gpu> gpus_;
  std::map<std::string, int64_t> last_ns_;  // by GPU: the previous observation
  std::map<std::pair<std::string, std::string>, uint64_t> pods_;  // (pod UID, GPU) -> busy ns
};

}  // namespace tessera::agent
