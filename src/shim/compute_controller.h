// ComputeController: the agent's half of compute shares. Per GPU, every maintenance interval, it
// measures how much GPU time each pod's processes got (NVML's per-process utilisation, summed by
// pod through the host PIDs the ledger's slots carry) and sets each pod's schedule in its limits
// file: the phase (where its window starts in the period) and the duty (how long the window is).
// The shims enforce the windows (compute_gate.h).
//
// Phases tile the period in a stable order (pod UID), so that pods with 30% and 70% take turns
// instead of overlapping. Duties start at the cap and then follow measurement (a moving average
// of NVML's per-process utilisation over about a second):
//   - hard cap: the window itself gives the pod its share (the shim's gate makes the pod's GPU
//     work fit its window); the controller only trims a steady error beyond a dead band, slowly,
//     while the pod is hungry (its processes waited at the gate in the last two intervals, or
//     it used its whole window); a pod using less than its window is demand-limited and drifts
//     back to its cap;
//   - work-conserving: the target is everything the other processes on the GPU leave unused
//     (at least the cap), and the cap again as soon as another capped pod waits at its gate
//     with less than its cap: a pod takes idle time and hands it back when it is wanted.
// Duties stay within [0.8 x cap, 1.25 x cap] for hard caps (the windows keep tiling the period
// and a measurement error never turns into an unbounded window) and [0.8 x cap, 1000] for
// work-conserving shares.
// Measurements it cannot believe change nothing: an interval in which a pod waited at its gate
// (so its window ran some of its work) yet is measured at nothing. A real driver does this: on an
// H200 with driver 580, NVML's per-process samples name one process per sample when several run
// (bench/results/usage-gpu.md); with such a driver the windows stay as the caps set them (a 30/70
// pair splits 0.291 : 0.709 there, bench/results/shim-gpu.md). A driver that names no process for
// an interval is not believed either (alone on the GPU, the pod's window would otherwise widen to
// 1.25 x its cap on no evidence). Counted in untrusted_steps().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shim/segments.h"

namespace tessera::shim {

struct PidUtilization {
  uint32_t pid = 0;          // host PID
  uint32_t sm_permille = 0;  // share of the interval its kernels ran
};

// Per-process GPU utilisation of one GPU since the previous call for that GPU (the agent's NVML
// sampler, agent/procs/gpu_processes.h; tests script it).
class UtilizationSource {
 public:
  virtual ~UtilizationSource() = default;
  virtual absl::StatusOr<std::vector<PidUtilization>> Sample(const std::string& gpu_uuid) = 0;
};

class ComputeController {
 public:
  struct PodMeasure {
    uint32_t utilization_permille = 0;
    bool hungry = false;
    uint32_t duty_permille = 0;
    uint32_t phase_permille = 0;
  };

  // One control step for the pods sharing one GPU; returns what it measured and set, by ledger
  // path. Pods without a compute cap are left open (duty 1000).
  std::map<std::string, PodMeasure> Step(const std::string& gpu_uuid,
                                         const std::vector<Segment*>& pods,
                                         UtilizationSource& source);

  // Steps whose per-process split was not believed (see above).
  int64_t untrusted_steps() const { return untrusted_steps_; }

  // A pod this far below its cap while waiting at its gate is short of its share.
  static constexpr uint32_t kToleranceBelowCap = 20;
  // A hard cap's duty is trimmed only for errors larger than this.
  static constexpr int64_t kDeadbandPermille = 20;

 private:
  struct PodState {
    int64_t duty = 0;         // 0: not seen yet
    int64_t utilization = 0;  // moving average, permille
    int64_t samples = 0;
    uint64_t gate_wait_ns = 0;
    int64_t last_wait_step = -10;
  };
  std::map<std::string, PodState> state_;
  int64_t steps_ = 0;
  int64_t untrusted_steps_ = 0;
};

}  // namespace tessera::shim
