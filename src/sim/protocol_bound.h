// The most GPU capacity any placement policy can have allocated at the end of an FGD-protocol run
// (fgd_replay.h): a proven ceiling for one pod sequence, whatever the policy, as long as it places
// every pod that fits somewhere (the protocol's rule) and nothing departs.
//
// Why: packing_bound.h bounds how well one policy arranged the shares it placed, but a different
// policy places a different set of shares. This ceiling holds for every policy, so a target above
// it is out of reach for any scheduler, not just for the ones measured.
//
// Argument. Pick a reference ask r (one GPU's worth: a share of r.gpu_milli, or a whole GPU, with
// r.cpu_milli and r.memory_mib on the node, any GPU model). Free resources only shrink, so there
// is a first arrival t at which r no longer fits anywhere (t = n if it always fits). Then:
//  - every pod arriving before t that asks no more than r (and has no model constraint) fitted
//    when it arrived, so it was placed: a lower bound on the shares and whole GPUs placed;
//  - no pod arriving at or after t that asks at least r on one GPU can be placed (it needs a GPU
//    and a node with at least r free): an upper bound on what is placed;
//  - every GPU ends up holding a pattern of shares, a whole-GPU grant, or nothing.
// For a given t this is MaxPlacedBound's LP (packing_bound.h). t depends on the policy, so the
// ceiling is the worst case over t, found by branch and bound over ranges of t: both the lower and
// the upper bounds only grow with t, so the LP with a's lower bounds and b's upper bounds is looser
// than that of every t in [a, b] and bounds the whole range. Every reference gives a valid
// ceiling; FgdCeiling tries a few and keeps the lowest.
//
// Example: 1 GPU; a 0.81 share arrives, then a 0.5 share (same CPU and memory). The 0.81 share fits
// so it is placed, and then the 0.5 share cannot be: 0.19 GPU stays unallocated whatever the
// policy, and the ceiling is 81%. The argument does not use where r failed to fit, so it can be
// loose: with 2 GPUs and the pods 0.81, 0.81, 0.5, 0.5 every policy ends at 81%, but the ceiling
// allows for r failing after the first pod (t = 1) and says 90.5%.
//
// The figure bounds the allocation at the end of the run; the protocol's reported point at 130%
// arrived demand is a mean of steps up to the end, so it is no higher (up to its 2-decimal
// rounding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "sim/fgd_replay.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim {

// One GPU's worth of request: a share of gpu_milli (1..999) or a whole GPU (1000).
struct ReferenceAsk {
  int32_t gpu_milli = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string Describe() const;  // "810/1000 GPU, 3152m CPU, 5600 MiB"
};

struct ProtocolCeiling {
  double min_unallocated_gpus = 0;  // proven: at least this much GPU capacity stays unallocated
  double max_allocation_pct = 0;    // 100 x (1 - min_unallocated / GPUs)
  ReferenceAsk reference;           // the reference that gave it
  int64_t worst_exhaustion = 0;     // the arrival at which r stops fitting in the worst case
  int64_t pods = 0;                 // pods in the sequence (worst_exhaustion == pods: never)
  int lps = 0;                      // LPs solved
  int lps_not_optimal = 0;          // of which stopped early (still valid, if looser, bounds)
};

// The ceiling for one reference. Errors: a cluster without GPUs, a reference outside 1..1000.
// `every_arrival` solves the LP for every t instead of branch and bound (the same answer, slower:
// for tests).
[[nodiscard]] absl::StatusOr<ProtocolCeiling> FgdCeilingFor(const core::Cluster& cluster,
                                                            const PodTrace& trace,
                                                            const FgdSequence& sequence,
                                                            const ReferenceAsk& reference,
                                                            bool every_arrival = false);

// References worth trying for a trace: the most frequent one-GPU asks without a model constraint
// (up to three shares of at least half a GPU and one whole GPU).
std::vector<ReferenceAsk> CeilingReferences(const PodTrace& trace);

// The lowest ceiling over CeilingReferences(trace).
[[nodiscard]] absl::StatusOr<ProtocolCeiling> FgdCeiling(const core::Cluster& cluster,
                                                         const PodTrace& trace,
                                                         const FgdSequence& sequence);

}  // namespace tessera::sim
