// The soak's seeded plans: the faults to inject (kind and time) and the workload's draws. The
// same seed gives the same plan, which a failure prints so that it replays
// (SOAK_SEED=<seed> SOAK_DURATION=<s> ctest -R soak_e2e_test).
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::soak {

enum class FaultKind {
  kSchedulerKill,   // SIGKILL the scheduler replica holding the lease, then start it again
  kAgentKill,       // SIGKILL a node's agent, then start it again
  kKubeletKill,     // SIGKILL a node's kubelet, then start it again
  kContainerdKill,  // SIGKILL a node's containerd, then start it again
  kApiServerRestart,
  kEtcdRestart,
  kNodeNotReady,    // the kubelet stopped, the Node NotReady and tainted unreachable, then back
  kXidApplication,  // an application XID on a GPU a pod uses
  kXidHardware,     // a hardware XID and the driver's "reset required", then the reset
  kShimLockKill,    // SIGKILL a share pod's CUDA process, which holds its ledger slot's lock
  kLeaseSkew,       // a scheduler replica whose clock runs ahead renews the lease
};
std::string_view FaultKindName(FaultKind k);
std::vector<FaultKind> AllFaultKinds();

struct PlannedFault {
  std::chrono::seconds at;  // after the soak's start
  FaultKind kind;
  uint32_t pick = 0;  // chooses the target (node, GPU, pod) among those there are then
};

// Faults from `seed` over `duration`: one every `mean_gap` on average (exponential gaps, at least
// `min_gap`), the kinds drawn in turn from a shuffled deck of `kinds` so that every kind comes
// about equally often.
std::vector<PlannedFault> PlanFaults(uint64_t seed, std::chrono::seconds duration,
                                     std::chrono::seconds mean_gap, std::chrono::seconds min_gap,
                                     const std::vector<FaultKind>& kinds);
// "t+37s xid-hardware pick=123456; ..." for logs and failures.
std::string DescribePlan(const std::vector<PlannedFault>& plan);

// The workload's units: one pod, or a gang of pods created and deleted together.
enum class UnitKind {
  kShare,     // classic: tessera.dev/gpu-memory, the CUDA shim holding memory
  kWhole,     // classic: tessera.dev/gpu: 1
  kGang,      // classic: 2-3 whole-GPU members, tessera.dev/gang
  kMig,       // classic: tessera.dev/mig
  kDraShare,  // DRA: a claim of gpu-share.tessera.dev with a memory request
  kDraWhole,  // DRA: a claim of gpu.tessera.dev
  kDraMig,    // DRA: a claim of mig.tessera.dev
};
std::string_view UnitKindName(UnitKind k);

struct PlannedUnit {
  UnitKind kind;
  int members = 1;                // gangs: 2 or 3
  int64_t memory_gib = 0;         // shares
  std::chrono::seconds lifetime;  // from creation to deletion
};

// The workload's draws: what to create next.
class WorkloadDraws {
 public:
  explicit WorkloadDraws(uint64_t seed) : rng_(seed) {}
  PlannedUnit Next();
  // Seconds to the next arrival.
  std::chrono::milliseconds Gap();

 private:
  std::mt19937_64 rng_;
};

}  // namespace tessera::soak
