// Retry delays for reconnecting watches and retrying requests, after client-go's reflector
// (wait.Backoff 800 ms, factor 2, cap 30 s, jitter 1.0, reset after 2 minutes without a failure).
//
// Each failure returns the current delay with up to `jitter` x itself added at random, then
// doubles the base (never above `max`); the returned delay never exceeds `max`. A failure more than
// `reset_after` after the previous one starts again from `initial`, so a watch that ran fine for a
// while reconnects quickly. Worked example with jitter 0: 800 ms, 1.6 s, 3.2 s, ..., 25.6 s, 30 s,
// 30 s; with jitter 1.0 the first delay is uniform in [800 ms, 1.6 s).
//
// Backoff::Delay is the one formula for every retry delay of ours: Backoff (watches) and callers
// that count attempts themselves (request retries in k8s/client/http.cc, the scheduler's failed
// binds, the NRI plugin's reconnects in agent/nri/plugin.cc). It lives in common so that parts
// that never talk to the API server (the NRI plugin) use it too.
//
// Not thread-safe: each retrying loop owns one. Time and randomness are injected for tests.
#pragma once

#include <chrono>
#include <optional>

#include "common/random.h"

namespace tessera {

class Backoff {
 public:
  using Duration = std::chrono::milliseconds;
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Params {
    Duration initial{800};
    double factor = 2.0;
    Duration max{30'000};
    double jitter = 1.0;
    Duration reset_after{120'000};
  };

  Backoff() : Backoff(Params{}, 0x7e55e7a) {}
  Backoff(Params params, uint64_t seed) : params_(params), random_(seed) {}

  // The delay before retry number `failures` (1: after the first failure): initial x
  // factor^(failures - 1), at most max, plus jitter x that x `jitter_draw` (uniform in [0, 1)),
  // never above max.
  static Duration Delay(const Params& params, int failures, double jitter_draw);

  // The delay to wait after a failure observed at `now`.
  Duration Next(TimePoint now);
  // After a success: the next failure starts from `initial`.
  void Reset() { failures_ = 0; }

  const Params& params() const { return params_; }

 private:
  Params params_;
  Random random_;
  int failures_ = 0;  // since the last reset
  std::optional<TimePoint> last_failure_;
};

}  // namespace tessera
