#include "common/backoff.h"

#include <algorithm>
#include <cmath>

namespace tessera {

Backoff::Duration Backoff::Delay(const Params& p, int failures, double jitter_draw) {
  const double max = static_cast<double>(p.max.count());
  double base =
      static_cast<double>(p.initial.count()) * std::pow(p.factor, std::max(failures, 1) - 1);
  base = std::min(base, max);
  if (p.jitter > 0) base += jitter_draw * p.jitter * base;
  return Duration(static_cast<int64_t>(std::min(base, max)));
}

Backoff::Duration Backoff::Next(TimePoint now) {
  if (last_failure_ && now - *last_failure_ > params_.reset_after) failures_ = 0;
  last_failure_ = now;
  ++failures_;
  return Delay(params_, failures_, params_.jitter > 0 ? random_.UniformDouble() : 0.0);
}

}  // namespace tessera
