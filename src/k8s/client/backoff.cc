#include "k8s/client/backoff.h"

#include <algorithm>

namespace tessera::k8s {

Backoff::Duration Backoff::Next(TimePoint now) {
  if (last_failure_ && now - *last_failure_ > params_.reset_after) base_ = params_.initial;
  last_failure_ = now;
  Duration delay = base_;
  if (params_.jitter > 0) {
    delay += Duration(static_cast<int64_t>(random_.UniformDouble() * params_.jitter *
                                           static_cast<double>(base_.count())));
  }
  delay = std::min(delay, params_.max);
  base_ =
      std::min(params_.max,
               Duration(static_cast<int64_t>(static_cast<double>(base_.count()) * params_.factor)));
  return delay;
}

}  // namespace tessera::k8s
