// UsageMeter: how long each GPU of the node was busy, and which pod it was busy for, as
// monotonic counters (nanoseconds) for /metrics (issue 34).
//
// The GPU's busy time B of an interval is the device's own utilisation since the previous
// observation (the driver's record of it, GpuProcessSampler::DeviceBusyTime: every sample period
// counted, so that work between two observations is not missed; B is its fraction times the span
// of the samples, not times the interval, which the samples trail by up to a sample period),
// which a real GPU reports right: on an H200 its rate stayed within 5% of the ground truth, also
// with several processes on the GPU. The pod cannot write it. NVML's split by process is not used:
// there it named one process per 200 ms sample when several ran, with the GPU's whole load
// (bench/results/usage-gpu.md).
//
// Who B goes to:
//   - one pod running on the GPU (a whole GPU; a MIG-less GPU shared by pods of which one has
//     processes now): all of B, whatever it reported;
//   - several: each running pod's own report r_i, the increase since the previous observation
//     of the GPU time its shims measured (LedgerHeader::gpu_busy_ns, shim/busy_meter.h). The pod
//     writes that counter, so it is checked here before it counts:
//       * a counter that went backwards, or rose by more than the interval plus
//         kReportSlackPermille of it, is rejected (the pod gets nothing from this interval; the
//         GPU's rejected_reports counts it);
//       * r_i is clamped to the interval, and for a hard cap to the window the agent gave it:
//         (cap + kHardCapSlackPermille) x the interval;
//       * if sum(r) <= B each pod gets r_i; if sum(r) > B every r_i is scaled by B / sum(r);
//       * what a pod's r_i was not paid is owed to it for the next kOwedIntervals intervals, and
//         paid out of what is left of each interval's B after that interval's own reports (the
//         oldest debt first; scaled the same way if short); after that it is dropped.
//         The two figures are not aligned in time: a shim reports its work when a sync ends it,
//         and the device's record runs up to a sample period (1/6 s) behind, so a burst that
//         ends near an observation is in one interval's reports and the next one's B; on the
//         fake driver, without this, pods taking turns were charged 5% under their truth, and
//         with a debt kept for one interval only, a pod whose next interval had no time left
//         over (its neighbours' reports took it all) was charged 17% under (agent_usage_e2e);
//       * what is left of B stays unattributed.
//     A pod is never charged more than it reported (when not alone on the GPU).
//     A pod that lies can hide its own use (it then shows as unattributed: visible) or take more
//     of B onto itself; it can never put time on a neighbour beyond what the neighbour reported.
//     A pod with no report (no shim: a container without it, an older shim) gets nothing, and its
//     time stays unattributed;
//   - none: B is unattributed (someone else's work, or none of tessera's pods ran).
// So per GPU: busy = the pods' sum + unattributed, always.
//
// Worked example: 1 s with B = 0.80 s and pods a, b, c running that reported 0.15, 0.30 and
// 0.45 s: sum 0.90 > B, so they get 0.133, 0.267 and 0.400 s, and are owed 0.017, 0.033 and
// 0.050 s. If in the next second B = 0.05 s and none reports anything, the 0.10 s owed is paid
// half (0.008, 0.017, 0.025 s); the other half is paid by the seconds after it, if they have
// time left over, until the third, and then dropped. Had c reported 0.25 s in the first
// second (under B), they would get 0.15, 0.30, 0.25 s and 0.10 s would be unattributed.
//
// The idle rule (idle_watch.h) uses only the one-pod case, never a split: a pod could make a
// neighbour look idle by over-reporting.
//
// Pure: the caller brings the clock, the utilisation, which pods run and what they reported. Not
// thread-safe (the pod manager's lock).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::agent {

class UsageMeter {
 public:
  struct Gpu {
    uint64_t sampled_ns = 0;        // time covered by observations
    uint64_t busy_ns = 0;           // the GPU ran kernels (the device's record; it trails)
    uint64_t unattributed_ns = 0;   // busy time charged to no pod
    uint64_t rejected_reports = 0;  // pods' self-reports refused (backwards, or too large)
  };

  // What one pod's shims said about the GPU, read from its ledger (untrusted).
  struct Report {
    uint64_t counter_ns = 0;  // LedgerHeader::gpu_busy_ns as read now
    // The hard cap's window the agent gives it, in permille of the time (0: none, or a
    // work-conserving share, which may use an idle GPU's whole time).
    uint32_t hard_cap_permille = 0;
  };

  // A report may exceed the interval by this much before it is rejected (a sync that ends a
  // work interval begun before the previous observation; two of the pod's processes at once).
  static constexpr uint64_t kReportSlackPermille = 1000;
  // A hard-capped pod's report may exceed its window by this much of the interval (a launch that
  // ends past its window's end; the window's length moving with the controller's steps).
  static constexpr uint64_t kHardCapSlackPermille = 100;
  // How many intervals after its own a report's unpaid part may still be paid.
  static constexpr size_t kOwedIntervals = 3;

  // What one observation charged: the time since the previous one and the busy part of it, and
  // the pods whose reports were rejected.
  struct Charge {
    uint64_t elapsed_ns = 0;
    uint64_t busy_ns = 0;
    std::vector<std::string> rejected;
  };
  // The GPU `gpu_uuid` at `now_ns` (a monotonic clock): busy `utilization_permille` of the time
  // since the last observation, with `running_pods` (pod UIDs) the pods that have processes on it
  // now and `reports` (by pod UID; pods not running may be in it) what the pods' shims said.
  // `span_ns` > 0: the utilisation is the driver's record of that much time since the previous
  // observation (B = its fraction of span_ns); 0: a rate, B = its fraction of the interval.
  // The first observation of a GPU only starts its clock and reads the reports' starting points;
  // later ones charge the time since the last.
  Charge Observe(const std::string& gpu_uuid, int64_t now_ns, uint32_t utilization_permille,
                 const std::vector<std::string>& running_pods,
                 const std::map<std::string, Report>& reports = {}, uint64_t span_ns = 0);
  // The GPU gave no figure this time: its clock restarts at the next observation.
  void Skip(const std::string& gpu_uuid);
  // The pod is gone: its counters go (its series with it).
  void Forget(const std::string& pod_uid);

  const Gpu* gpu(const std::string& gpu_uuid) const;
  // The busy time charged to the pod on that GPU; nullopt when none was ever charged.
  std::optional<uint64_t> pod_busy_ns(const std::string& pod_uid,
                                      const std::string& gpu_uuid) const;

 private:
  // Each reporting pod's checked increase since the last observation (`elapsed_ns` ago); the
  // pods with a first reading or a rejected one are absent. Takes the new readings.
  std::map<std::string, uint64_t> Increases(const std::string& gpu_uuid, uint64_t elapsed_ns,
                                            const std::map<std::string, Report>& reports, Gpu& gpu,
                                            std::vector<std::string>* rejected);
  // `claims` (by pod UID) paid out of `budget`: all of them if they fit, else each scaled by
  // budget / their sum (rounded down).
  static std::map<std::string, uint64_t> PayOut(const std::map<std::string, uint64_t>& claims,
                                                uint64_t budget);
  // Readings of the reports as the new starting points, without charging.
  void Rebase(const std::string& gpu_uuid, const std::map<std::string, Report>& reports);

  std::map<std::string, Gpu> gpus_;
  std::map<std::string, int64_t> last_ns_;  // by GPU: the previous observation
  std::map<std::pair<std::string, std::string>, uint64_t> pods_;  // (pod UID, GPU) -> busy ns
  // (pod UID, GPU) -> the pod's counter at the previous observation of the GPU
  std::map<std::pair<std::string, std::string>, uint64_t> counters_;
  // GPU -> pod UID -> what earlier intervals' reports were not paid, newest first, one entry per
  // interval (at most kOwedIntervals)
  std::map<std::string, std::map<std::string, std::deque<uint64_t>>> carry_;
};

}  // namespace tessera::agent
