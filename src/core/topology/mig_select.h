// Where a MIG instance goes: which MIG-enabled GPU and which start slice, and whether idle
// instances must be destroyed first (a re-partitioning plan).
//
// Options for profile P on one GPU, for each start s that P may take whose slices hold no
// assigned instance:
//   cost 0  reuse: an idle instance P@s is configured already;
//   cost 1  create: the slices of P@s are unconfigured;
//   cost 2  re-partition: idle instances overlap P@s (or hold the GPU's one +me set of media
//           engines that a +me profile needs); they are destroyed, then P@s is created.
// Lower cost always wins: a plan is made only when a request fits nowhere without one.
//
// Fragmentation: a GPU's capacity for profile Q is how many Q instances its unassigned slices
// (free or idle) could still take, counting Q's allowed starts. The loss of an option is the
// drop in capacity, profile by profile, largest profile first (7g, 4g, 3g, 2g, 1g.20gb, 1g);
// options are compared on that vector lexicographically, so a 1g goes where it costs no 7g, 4g
// or 3g room if such a place exists. Worked example (A100-80GB, empty): a 1g.10gb at slice 0
// loses one of every profile; at slice 6 it loses the 7g, one 3g, one 1g.20gb and one 1g but
// keeps the 4g and all three 2g, so it goes to 6. The next two 1g.10gb go to 4 and 5 (only a 2g
// and a 1g.20gb more are lost), and a 4g.40gb still fits at 0 afterwards; first fit (0, 1, 2)
// would have made the 4g impossible.
// GPU preference (across GPUs of a node and across nodes) depends on the policy:
//   kLeastLoss (tessera): least loss, then the fewest idle instances destroyed, then the fullest
//                         GPU (fewest unassigned slices after);
//   kFullest (binpack):   the fullest GPU, then least loss, then the fewest destroyed;
//   kEmptiest (spread):   the emptiest GPU, then least loss, then the fewest destroyed;
//   kFirstFit (whole-gpu, topology-blind): the lowest GPU and the lowest start that fit.
// Ties: the lower GPU index, then the lower start.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/cluster_state.h"

namespace tessera::core {

enum class MigPreference : uint8_t { kLeastLoss, kFullest, kEmptiest, kFirstFit };

struct MigChoice {
  int gpu = -1;
  MigPlacement placement;  // profile index in the GPU's MigModel, start slice
  MigPlan plan;
  int cost = 0;                  // 0 reuse, 1 create, 2 re-partition
  std::array<int8_t, 8> loss{};  // capacity lost per profile, largest first
  int unassigned_after = 0;      // unassigned slices left on the GPU
  double score = 0;              // higher is better; comparable across nodes
};

// How the configured instances of one GPU (`m`) change for an instance `want` to exist there: an
// idle instance of exactly `want` is reused (an empty plan); otherwise it is created after
// destroying every idle instance in its way (MigInstancesConflict). The one owner of "what is in
// the way": placement (ChooseMig) and restoring recorded grants (Engine::Restore) both use it.
// Assigned instances in the way are not this function's business: callers check them.
MigPlan MigPlanFor(const MigModel& model, const MigGpuState& m, MigPlacement want);

// The MIG capacity vector of a GPU's free-or-idle slices (`available`), largest profile first.
std::array<int8_t, 8> MigCapacity(const MigModel& model, uint8_t available);

// The best option for one instance of `profile` on the MIG-enabled GPUs `gpus` of `node`, or
// nullopt when none can take it.
std::optional<MigChoice> ChooseMig(const ClusterState& state, NodeId node, uint64_t gpus,
                                   std::string_view profile, MigPreference preference);

// Whether some option exists on GPU `g` of `node` (CheckNode's question; cheap).
bool MigFits(const ClusterState& state, NodeId node, int g, std::string_view profile);

// "node a GPU 3: destroy idle 1g.10gb@4, 1g.10gb@5; create 3g.40gb@4" for a placement with a
// re-partitioning plan; empty otherwise.
std::string DescribeMigPlan(const ClusterState& state, const Placement& placement);

}  // namespace tessera::core
