#include "shim/compute_gate.h"

#include <algorithm>

namespace tessera::shim {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

ComputeGate::Window ComputeGate::At(int64_t now_ns, uint32_t duty, uint32_t phase,
                                    int64_t period_ns) {
  Window w;
  if (duty >= 1000 || period_ns <= 0) {
    w.open = true;
    w.start_ns = now_ns;
    w.target_end_ns = now_ns + std::max<int64_t>(period_ns, 0);
    w.next_start_ns = now_ns;
    return w;
  }
  const int64_t offset = static_cast<int64_t>(phase % 1000) * period_ns / 1000;
  const int64_t k = FloorDiv(now_ns - offset, period_ns);
  w.start_ns = k * period_ns + offset;
  w.next_start_ns = w.start_ns + period_ns;
  w.target_end_ns = w.start_ns + static_cast<int64_t>(duty) * period_ns / 1000;
  w.open = now_ns < w.target_end_ns;
  return w;
}

bool ComputeGate::Admit(int64_t now_ns, uint32_t duty, uint32_t phase, int64_t period_ns,
                        Window* window) {
  Window w = At(now_ns, duty, phase, period_ns);
  if (window != nullptr) *window = w;
  if (duty >= 1000) return true;
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t on = w.target_end_ns - w.start_ns;
  if (w.start_ns != window_start_) {
    // Each window since the last one seen grants its time: a debt is repaid by the windows that
    // passed (also those the pod spent blocked on its own long work), but unused time is not
    // banked.
    const int64_t passed =
        window_start_ < 0 ? 1 : std::max<int64_t>(1, (w.start_ns - window_start_) / period_ns);
    credit_ = credit_ + std::min(passed, int64_t{1000}) * on;
    credit_ = std::min(credit_, on);
    window_start_ = w.start_ns;
  }
  credit_cap_ = on;
  if (!w.open || credit_ <= 0) return false;
  // Until a sync has measured what a launch costs, admit a few and then drain to learn it,
  // rather than let an unknown amount of work queue up.
  if (cost_ == 0 && launches_since_sync_ >= kProbeLaunches) return false;
  const int64_t start = std::max(now_ns, predicted_free_);
  // Rounded to the nearest launch: a launch that would end within half its cost past the window
  // goes, so that the pod's time per window is right on average instead of short by half a launch.
  bool fits = start + cost_ / 2 <= w.target_end_ns;
  if (!fits && cost_ > on) {
    // A launch longer than the whole window never fits: it goes at the start of a window with
    // credit, and the credit it overdraws keeps the following windows shut.
    fits = start - w.start_ns <= on / 10;
  }
  if (!fits) return false;
  credit_ -= cost_;
  charged_since_sync_ += cost_;
  predicted_free_ = start + cost_;
  if (launches_since_sync_ == 0) first_launch_ = now_ns;
  ++launches_since_sync_;
  return true;
}

void ComputeGate::ObserveSync(int64_t call_ns, int64_t done_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (launches_since_sync_ > 0) {
    if (done_ns - call_ns > kIdleSyncNs) {
      // The GPU was still busy when the sync began: it ran the launches since first_launch_
      // back to back until done.
      // A sample over many launches replaces the estimate; over a few, it moves it part of the
      // way (a program's kernels change length from phase to phase).
      const int64_t took = done_ns - first_launch_;
      int64_t sample = std::max<int64_t>(took / launches_since_sync_, 1);
      const int64_t weight = std::min<int64_t>(launches_since_sync_, kFullSampleLaunches);
      cost_ = cost_ == 0 ? sample : cost_ + (sample - cost_) * weight / kFullSampleLaunches;
      // The true-up: they took `took` of GPU time, whatever they were charged.
      credit_ -= took - charged_since_sync_;
    } else {
      // They were done before the sync: each took at most this.
      int64_t bound = std::max<int64_t>((call_ns - first_launch_) / launches_since_sync_, 1);
      if (cost_ > bound) cost_ = bound;
      // Together at most call - first launch: what they were charged beyond it is given back.
      const int64_t most = call_ns - first_launch_;
      if (charged_since_sync_ > most) credit_ += charged_since_sync_ - most;
    }
    credit_ = std::min(credit_, credit_cap_);
  }
  predicted_free_ = done_ns;
  launches_since_sync_ = 0;
  charged_since_sync_ = 0;
}

int64_t ComputeGate::cost_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cost_;
}

int64_t ComputeGate::credit_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return credit_;
}

}  // namespace tessera::shim
