// Unix seconds on the scheduler's clock. The scheduler's timers run on its steady clock (a test's
// fake one); what it writes for other processes and for its own restart to read (a Moving
// condition's hold, a Reserved condition's expected start) is in wall-clock Unix seconds. This
// is the one conversion between them: the steady clock anchored once, at first use, to the wall
// clock, so that the two agree for the scheduler's life and a fake clock moves both.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

namespace tessera::k8s {

class UnixClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // `now`: the scheduler's steady clock (nullptr: the real one).
  explicit UnixClock(std::function<TimePoint()> now);

  int64_t Now() const { return Of(now_()); }
  // A time point as Unix seconds, and back (whole seconds, on the same anchor).
  int64_t Of(TimePoint t) const;
  TimePoint TimeOf(int64_t unix_seconds) const;

 private:
  // (steady, Unix seconds) at the first conversion: set then.
  const std::pair<TimePoint, int64_t>& Anchor() const;

  std::function<TimePoint()> now_;
  mutable std::optional<std::pair<TimePoint, int64_t>> anchor_;
};

}  // namespace tessera::k8s
