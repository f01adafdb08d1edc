#include "k8s/scheduler/unix_clock.h"

namespace tessera::k8s {

UnixClock::UnixClock(std::function<TimePoint()> now)
    : now_(now ? std::move(now) : [] { return std::chrono::steady_clock::now(); }) {}

const std::pair<UnixClock::TimePoint, int64_t>& UnixClock::Anchor() const {
  if (!anchor_) {
    anchor_ = {now_(), std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()};
  }
  return *anchor_;
}

int64_t UnixClock::Of(TimePoint t) const {
  const auto& [steady, wall] = Anchor();
  return wall + std::chrono::duration_cast<std::chrono::seconds>(t - steady).count();
}

UnixClock::TimePoint UnixClock::TimeOf(int64_t unix_seconds) const {
  const auto& [steady, wall] = Anchor();
  return steady + std::chrono::seconds(unix_seconds - wall);
}

}  // namespace tessera::k8s
