// What a queue has held lately: fair share that remembers (issue 31). The order between queues
// (QueueSet::Pick) is by what each holds now plus what it held in the recent past, so that a team
// that burst yesterday does not go first today merely because it holds nothing at this moment.
//
// A queue's decayed usage, per resource (resources.h: milli-GPU, GPU memory MiB, milli-GPU of
// compute), is its allocation A averaged over the past with weights that halve every half-life h:
//
//   U(t) = (ln 2 / h) x integral over s <= t of A(s) x 2^(-(t - s) / h) ds
//
// The weights integrate to 1, so U is in the resource's own unit: a queue that has held 4 GPUs for
// much longer than h has U = 4 GPUs; one that held nothing before and 4 GPUs for exactly one h
// has U = 2 GPUs, and one h after it let them go, 1 GPU. Allocations change in steps, and over a
// step of length d during which the queue held A the integral is exact:
//
//   U <- U x 2^(-d / h) + A x (1 - 2^(-d / h))
//
// Half-life 0 keeps no history: U is 0 always, and the order is by current allocation alone.
// Time is injected (milliseconds on any clock that does not go back: the simulator's, the
// scheduler's wall clock); a step back in time is taken as no time passing. The decay is a real
// factor, so U is kept as a double internally and read rounded to the resource's integer unit.
//
// Example (h = 1 hour, in GPUs): a queue holds 8 GPUs from 0:00 to 2:00 and nothing after.
// At 1:00 U = 8 x (1 - 1/2) = 4; at 2:00 U = 4 x 1/2 + 8 x 1/2 = 6; at 3:00 U = 3; at 5:00 0.75.
#pragma once

#include <array>
#include <cstdint>

#include "core/queues/resources.h"

namespace tessera::core {

class DecayedUsage {
 public:
  // A queue with no history: U = 0, and its first Advance starts the clock.
  DecayedUsage() = default;
  // A history read back (after a restart): U = `usage` at `at_ms`.
  DecayedUsage(const QueueResources& usage, int64_t at_ms);

  // Takes in `held`, held since the last time, up to `now_ms` (no step when the clock has not
  // moved on, or on the first call).
  void Advance(int64_t now_ms, const QueueResources& held, int64_t half_life_ms);

  // U, rounded to the nearest unit of each resource.
  QueueResources Rounded() const;
  // The time U is for (kNever before the first Advance).
  int64_t at_ms() const { return at_ms_; }
  static constexpr int64_t kNever = INT64_MIN;

 private:
  std::array<double, kQueueResourceCount> value_{};
  int64_t at_ms_ = kNever;
};

}  // namespace tessera::core
