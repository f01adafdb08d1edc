// How little GPU capacity a set of shares could leave unused, whatever the placement: a proven
// lower bound on the GPUs that one-GPU shares need, from the linear relaxation of bin packing
// (Gilmore and Gomory's cutting-stock LP), solved by column generation.
//
// Why: at the end of an FGD-protocol run the unallocated GPUs are the pieces left beside shares.
// Some of that is placement (0.47 + 0.32 leaves 0.21 where 0.65 + 0.32 leaves 0.03) and some is
// the shares themselves (a 0.81 share leaves 0.19 that only the rare 0.19-or-smaller shares can
// use). The bound separates the two: no policy that places these shares can leave less.
//
// Method: minimise the number of GPUs x_p used with each pattern p (a multiset of shares that fits
// one GPU, at most as many of each size as there are) subject to covering every share. The
// simplex works on a basis of one pattern per size; the entering pattern is the best bounded
// knapsack under the current duals y. Whatever the iteration, y / max(1, v), v the knapsack's
// value, is dual feasible, so n . y / max(1, v) (Farley's bound) is a lower bound; at the optimum
// v = 1 and it equals the LP's value. The integer count of GPUs is at least its ceiling.
//
// Example: three shares of 0.5 need 1.5 GPUs by the LP, so at least 2; 0.5 GPU is left unused.
// Ten 0.81 shares and four 0.16 shares need 10 GPUs: 1.26 GPUs are left, however they are placed.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::sim {

struct PackingBound {
  int64_t min_gpus = 0;      // no placement puts the shares on fewer GPUs (proven)
  double lp_gpus = 0;        // the LP's value (Farley's bound if not optimal)
  double stranded_gpus = 0;  // min_gpus - (sum of the shares) / capacity: left unused, at least
  bool optimal = false;      // the LP's optimum was reached
  int iterations = 0;
};

// `shares`: milli-GPU per share (1..capacity) -> how many shares of that size. Errors: a size
// outside 1..capacity, a negative count.
absl::StatusOr<PackingBound> SharePackingBound(const std::map<int32_t, int64_t>& shares,
                                               int32_t capacity = 1000);

// How much GPU capacity can be taken on `gpus` GPUs of `capacity` milli-GPU when, for each share
// size i, at least lower[i] and at most upper[i] shares of sizes[i] are placed, and between
// whole_lower and whole_upper GPUs are taken whole: a proven upper bound from the linear
// relaxation (every GPU holds one pattern of shares, one whole-GPU grant, or nothing).
//
// Why: the FGD protocol's ceiling (protocol_bound.h) asks how full the cluster could possibly end
// given which pods must have been placed and which could have been.
//
// Method: column generation on
//   max sum_p content_p x_p + capacity W   s.t.  sum_p x_p + W <= gpus,
//       lower <= sum_p a_p x_p <= upper,  whole_lower <= W <= whole_upper,  x, W >= 0,
// with big-M artificials for the lower bounds and the bounded knapsack as pricer. The answer is
// certified by its dual: for any share values pi, with K(pi) the best pattern's value,
//   placed <= min over lambda in {K, max(K, capacity)} of
//             lambda gpus + (capacity - lambda)^+ whole_upper - (lambda - capacity)^+ whole_lower
//             + sum_i (s_i - pi_i)^+ upper_i - (pi_i - s_i)^+ lower_i,
// so the bound holds even if the simplex stops early (and, vacuously, when no packing meets the
// lower bounds).
//
// Example: 2 GPUs, exactly two 0.81 shares, up to two 0.5 shares: the 0.81 shares take both GPUs
// (a 0.5 share fits beside neither), so at most 1620 milli-GPU is placed.
struct PlacementLp {
  std::vector<int32_t> sizes;  // milli-GPU, 1..capacity, distinct
  std::vector<int64_t> lower;  // per size: shares that must be placed
  std::vector<int64_t> upper;  // per size: shares that may be placed (>= lower)
  int64_t gpus = 0;
  int64_t whole_lower = 0;  // GPUs that must be taken whole
  int64_t whole_upper = 0;  // GPUs that may be taken whole
  int32_t capacity = 1000;
};

struct PlacementBound {
  double max_placed_milli = 0;  // proven: no packing takes more
  bool optimal = false;         // the LP's optimum was reached (else a weaker, still valid bound)
  int iterations = 0;
};

// Errors: sizes and bounds of different lengths, a size outside 1..capacity or repeated, a
// negative count, lower above upper.
absl::StatusOr<PlacementBound> MaxPlacedBound(const PlacementLp& lp);

}  // namespace tessera::sim
