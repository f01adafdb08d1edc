// ComputeGate: when this process may launch work on a GPU with a compute share.
//
// The share is enforced in time. Each period (default 50 ms) the pod has a window of
// duty x period; the agent's controller sets the duty (the cap, or more when work-conserving and
// the GPU is idle) and the phase (where the window starts), so that the windows of the pods on
// one GPU tile the period: pods with 30% and 70% run in turn, each alone on the GPU, which is
// what makes a 3:7 split come out 3:7 instead of sharing the overlap.
//
// Launches are asynchronous: a program can queue 80 ms of kernels in 80 microseconds, so gating
// launch *time* alone would not bound GPU time. The gate therefore learns what one launch costs
// on the GPU (from synchronisations: the time from the first launch after the previous sync to
// the end of the drain, over the launches in between) and admits a launch only if
//   - the window is open,
//   - the pod has credit: each window grants duty x period of GPU time, spent at the learnt cost
//     per launch (so a graph longer than the window runs every other window, not every one),
//   - and the launch is predicted to finish by the window's end (queued work included; rounded
//     to the nearest launch), so that the pod's work does not spill into the next pod's window.
// A launch that is not admitted waits: the gate drains the stream (which also measures the
// cost) and sleeps until the next window.
// Launches are charged at the learnt cost when admitted, and trued up at each sync: the GPU time
// the launches since the previous sync really took (when the sync found the GPU busy: from the
// first of them to the end of the drain) replaces what they were charged, so the credit is spent
// by what the pod ran, not by a per-launch average. Without it a program could hide a long launch
// (a CUDA graph) among many empty ones and have it charged at their average.
//
// Worked example: period 50 ms, duty 300, a loop of 1.6 ms kernels synced every 50 launches. The
// first window admits 16 launches (cost unknown) and drains them, which measures 1.6 ms; from
// then on each window admits 9 launches (14.4 ms, the 10th would end 1 ms late): 29% of the GPU.
//
// Pure arithmetic on a monotonic clock in nanoseconds (the hooks drain and sleep), tested with a
// simulated GPU in compute_gate_test.cc. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>

namespace tessera::shim {

class ComputeGate {
 public:
  struct Window {
    bool open = true;           // now is inside the window
    int64_t start_ns = 0;       // start of the current period's window
    int64_t target_end_ns = 0;  // start + duty x period
    int64_t next_start_ns = 0;  // start of the next window
  };

  // The window at `now_ns` for a duty and phase in permille and a period in nanoseconds.
  // duty >= 1000 is always open.
  static Window At(int64_t now_ns, uint32_t duty_permille, uint32_t phase_permille,
                   int64_t period_ns);

  // Whether a launch at `now_ns` may go; if so it is accounted (credit, predicted queue).
  // `window` receives the window it was judged in.
  bool Admit(int64_t now_ns, uint32_t duty_permille, uint32_t phase_permille, int64_t period_ns,
             Window* window);

  // A synchronisation of this process's work (a drain by the gate, or the program's own
  // stream or context synchronisation) was called at call_ns and returned at done_ns.
  void ObserveSync(int64_t call_ns, int64_t done_ns);

  int64_t cost_ns() const;
  int64_t credit_ns() const;

  // A sync shorter than this found the GPU idle.
  static constexpr int64_t kIdleSyncNs = 50'000;
  // Launches admitted before the first measurement.
  static constexpr int64_t kProbeLaunches = 16;
  // A sync after this many launches measures the cost outright.
  static constexpr int64_t kFullSampleLaunches = 8;

 private:
  mutable std::mutex mu_;
  int64_t cost_ = 0;            // learnt GPU nanoseconds per launch (0: not yet known)
  int64_t predicted_free_ = 0;  // when the queued launches should be done
  int64_t launches_since_sync_ = 0;
  int64_t charged_since_sync_ = 0;  // credit taken for the launches since the last sync
  int64_t first_launch_ = 0;        // first launch after the last sync
  int64_t window_start_ = -1;       // the window the credit belongs to
  int64_t credit_ = 0;
  int64_t credit_cap_ = 0;  // the current window's grant: a refund never raises credit above it
};

}  // namespace tessera::shim
