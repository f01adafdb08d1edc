#include "k8s/scheduler/unix_clock.h"

namespace tessera::k8s {

UnixClock::UnixClock(std::function<TimePoint()> now)
    : now_(now ? std::move(now) : [] { return std::chrono::steady_clock::now(); }) {}

int64_t UnixClock::Of(TimePoint t) const {
  if (!anchor_) {
    anchor_ = {now_(), std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()};
  }
  return anchor_->second +
         std::chrono::duration_cast<std::chrono::seconds>(t - anchor_->first).count();
}

UnixClock::TimePoint UnixClock::TimeOf(int64_t unix_seconds) const {
  Of(now_());  // anchors
  return anchor_->first + std::chrono::seconds(unix_seconds - anchor_->second);
}

}  // namespace tessera::k8s
