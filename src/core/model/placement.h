// Where a pod went: the node, and on each GPU what was granted.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "core/model/ids.h"
#include "core/model/mig.h"
#include "core/model/request.h"

namespace tessera::core {

struct GpuGrant {
  int32_t gpu = 0;            // GPU index on the node
  int64_t memory_mib = 0;     // reserved device memory
  int32_t compute_milli = 0;  // reserved compute (0 = best-effort time sharing)
  bool exclusive = false;     // a whole GPU: nobody else may share it
  MigPlacement mig;           // a MIG instance: profile (index in the GPU's MigModel) and start
  ShareMode mode = ShareMode::kShim;  // a share (not exclusive, not MIG): how it is enforced
  bool operator==(const GpuGrant&) const = default;
  bool is_mig() const { return mig.profile >= 0; }
};

// How a MIG grant changes its GPU's configured instances. Reuse: an idle instance of the profile
// at that start exists (create false, destroy empty). Create: the slices are unconfigured.
// Re-partition: idle instances in the way are destroyed first (`destroy`), then the new one is
// created: the plan `tessera simulate` prints and the node agent carries out.
struct MigPlan {
  bool create = false;
  absl::InlinedVector<MigPlacement, 2> destroy;
  bool operator==(const MigPlan&) const = default;
  bool repartition() const { return !destroy.empty(); }
};

struct Placement {
  NodeId node;
  absl::InlinedVector<GpuGrant, 1> gpus;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  MigPlan mig_plan;  // for a MIG grant

  uint64_t gpu_mask() const {
    uint64_t m = 0;
    for (const GpuGrant& g : gpus) m |= 1ULL << g.gpu;
    return m;
  }
};

// The three answers the engine gives (Ray's feasible / infeasible-now / never).
enum class Outcome : uint8_t {
  kPlaced,
  kNoFitNow,   // fits the cluster's capacity but not what is free now: retry when things change
  kNeverFits,  // no node of this cluster could ever take it, even empty
};

struct PlacementResult {
  Outcome outcome = Outcome::kNoFitNow;
  std::string reason;  // for people: why it did not fit (empty when placed)
  Placement placement;
  bool placed() const { return outcome == Outcome::kPlaced; }
};

}  // namespace tessera::core
