// BusyMeter: how much GPU time this process's work took on one shared GPU, measured at its
// synchronisations, for the pod's ledger (LedgerHeader::gpu_busy_ns) and from there the agent's
// split of a shared GPU's busy time among the pods running on it (issue 34,
// src/agent/pods/usage_meter.h). NVML cannot make that split (bench/results/usage-gpu.md).
//
// The measurement is the compute gate's true-up (compute_gate.h), without the gate: between two
// synchronisations the process launched work from `first` on; a sync called at `call` returned
// at `done`.
//   - The sync found the GPU busy (it took longer than ComputeGate::kIdleSyncNs): the launches
//     since `first` ran until `done`, and they are charged done - first.
//   - It found it idle: they were done by `call`, having taken at most call - first. They are
//     charged launches x the learnt cost per launch (the last busy sync's (done - first) /
//     launches), at most call - first; 0 before any busy sync taught a cost.
//
//   - A launch that comes more than kPauseNs after the previous one (the program computed on
//     the CPU, or was descheduled) asks the driver whether the work launched so far is done (a
//     non-blocking stream query). If it is, the interval closes there as at a sync that found
//     the GPU idle, and the launch opens the next: the pause is not counted as GPU time.
//
// Error bound. The truth T of an interval (the GPU time of this process's own launches in it)
// and the charge C: with a busy sync T <= C = done - first, and C - T is the time in
// [first, done] in which the GPU ran none of this process's work: pauses shorter than kPauseNs
// (or on another stream than the one queried) in which the GPU was idle between two of its
// launches, and time the GPU gave to other processes (time-slicing, or another pod's kernels
// queued before). Measured on the fake driver of test/fake_cuda on a loaded 2-core machine,
// before the pause rule the reports ran up to 25% over the truth for pods taking turns. Where the
// compute controller's windows (hard caps) tile the period each pod runs alone in its window and
// the second term is small (the spill of one launch past a window's end); where they overlap (on
// the fake: 15/30/45% caps widened to 1.12 of the period) the reports ran 8-33% over
// (bench/results/usage-gpu.md). With an idle sync C is an estimate (the learnt cost), never more
// than call - first. Work that no stream or context synchronisation ends (events, polling, a
// process that exits without a sync) is not charged; launches recorded into a graph (stream
// capture) are left out where they would open an interval or follow a pause, and counted
// otherwise (then at most in an idle sync's learnt-cost estimate). The agent therefore trusts no
// single figure: it clamps each pod's reports and never lets their sum pass the device's own busy
// time (usage_meter.h).
//
// Worked example: 10 launches at t = 0 ms, a cuStreamSynchronize called at 1 ms returns at 16
// ms (busy): charged 16 ms, cost 1.6 ms. Then 5 launches at 20 ms, a sync called at 40 ms
// returns at once (idle): charged min(5 x 1.6, 40 - 20) = 8 ms.
//
// One per process and shared GPU (shim_state.h's Share). Pure arithmetic on a monotonic clock
// in nanoseconds; thread-safe. Its cost on a shared pod's launch path: the clock read and a lock,
// and a stream query after a pause (never for a container without shares: the hooks do not get
// here).
#pragma once

#include <cstdint>
#include <mutex>

namespace tessera::shim {

class BusyMeter {
 public:
  // A launch of this process on the GPU goes at now_ns. After a pause `done()` (bool) says
  // whether the work launched before it has finished; if it has, that work is charged (returned;
  // else 0) as a sync that found the GPU idle would charge it.
  template <typename Done>
  uint64_t Launch(int64_t now_ns, Done&& done) {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t charged = 0;
    if (launches_ > 0 && now_ns - last_ns_ > kPauseNs && done()) charged = CloseIdleLocked(now_ns);
    if (launches_++ == 0) first_ns_ = now_ns;
    last_ns_ = now_ns;
    return charged;
  }
  // Whether a launch at now_ns would open an interval or follow a pause: where the caller asks
  // the driver whether the launch goes to the GPU at all (a stream being captured into a graph
  // only records it; such a launch is not given to Launch). Launches inside an interval without
  // a pause are not asked about (their cost: the driver call at every launch).
  bool Asks(int64_t now_ns) const {
    std::lock_guard<std::mutex> lock(mu_);
    return launches_ == 0 || now_ns - last_ns_ > kPauseNs;
  }
  // A synchronisation of this process's work was called at call_ns and returned at done_ns:
  // the GPU time charged for the launches since the previous one (0 when there were none).
  uint64_t Sync(int64_t call_ns, int64_t done_ns);

  int64_t cost_ns() const;

  // Fork (Shim::PrepareFork): held across it, so that a child never inherits it locked by a
  // thread it does not have. The child forgets the parent's launches: they are not its work.
  void LockForFork() { mu_.lock(); }
  void UnlockAfterFork(bool child) {
    if (child) launches_ = 0;
    mu_.unlock();
  }

  // A gap between two launches after which the driver is asked whether the GPU went idle.
  static constexpr int64_t kPauseNs = 200'000;

 private:
  // The launches since the last sync were done by call_ns: what they are charged. Closes them.
  uint64_t CloseIdleLocked(int64_t call_ns);

  mutable std::mutex mu_;
  int64_t launches_ = 0;  // launches since the last sync
  int64_t first_ns_ = 0;  // the first of them
  int64_t last_ns_ = 0;   // and the last
  int64_t cost_ns_ = 0;   // learnt GPU time per launch (0: no busy sync yet)
};

}  // namespace tessera::shim
