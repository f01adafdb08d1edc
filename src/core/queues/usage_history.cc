#include "core/queues/usage_history.h"

#include <algorithm>
#include <cmath>

namespace tessera::core {

DecayedUsage::DecayedUsage(const QueueResources& usage, int64_t at_ms) : at_ms_(at_ms) {
  for (int r = 0; r < kQueueResourceCount; ++r) {
    value_[r] = static_cast<double>(std::max<int64_t>(0, usage[r]));
  }
}

void DecayedUsage::Advance(int64_t now_ms, const QueueResources& held, int64_t half_life_ms) {
  if (half_life_ms <= 0) {
    value_ = {};
    at_ms_ = now_ms;
    return;
  }
  if (at_ms_ == kNever || now_ms <= at_ms_) {
    if (at_ms_ == kNever) at_ms_ = now_ms;
    return;
  }
  const double keep =
      std::exp2(-static_cast<double>(now_ms - at_ms_) / static_cast<double>(half_life_ms));
  for (int r = 0; r < kQueueResourceCount; ++r) {
    value_[r] = value_[r] * keep + static_cast<double>(held[r]) * (1.0 - keep);
  }
  at_ms_ = now_ms;
}

QueueResources DecayedUsage::Rounded() const {
  QueueResources out;
  for (int r = 0; r < kQueueResourceCount; ++r) out[r] = std::llround(value_[r]);
  return out;
}

}  // namespace tessera::core
