// MemoryBackstop: the agent's check, from outside the containers, that a pod's processes together
// hold no more of a GPU's memory than the pod's share. The CUDA shim enforces the share inside the
// container, but it sees only what goes through it: a hostile tenant loads the real driver by its
// mounted path (/usr/local/lib/tessera/libtessera-real-cuda.so.1), or allocates through paths the
// shim does not count (contexts, modules, graph memory nodes, cuCtxSetLimit heaps). The driver
// sees everything: NVML's per-process used memory (GpuProcessSampler), by host PID, summed by pod
// (HostProcesses: the PID's cgroup names the pod).
//
// Policy, per pod and shared GPU, at each Step:
//   allowed = cap + cap x tolerance_permille / 1000 + processes x per_process_bytes
//   (a context and its modules cost the driver some hundreds of MiB per process that the shim does
//   not count, so the tolerance grows with the pod's processes on the GPU)
//   - used <= allowed: fine (and a pod that was over is forgiven);
//   - used > allowed, first seen: kOver (the caller sends the pod a Warning Event);
//   - still over `grace` later: kAct, with the PIDs to act on; the caller kills them (SIGKILL),
//     evicts the pod, or only reports, as configured (BackstopAction); kAct repeats every Step
//     while the pod stays over.
// Worked example: a 4 GiB share, tolerance 5% and 768 MiB per process, one process that loaded the
// real driver and holds 6 GiB: allowed = 4096 + 204 + 768 = 5068 MiB < 6144 MiB: kOver now, kAct
// after 30 s (the default grace) if it still holds it.
// The per-process default is measured, not guessed: on an H200 with driver 580 and CUDA 13 a
// context alone costs the driver 518 MiB, and a PyTorch process that ran a bf16 matmul 522 MiB
// beyond what its ledger counts (scripts/gpu_shim_check.py stage backstop,
// bench/results/shim-gpu.md); 768 MiB leaves room for libraries that load more modules.
//
// Pure apart from the sampler and /proc (injected); the clock is the caller's.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/procs/gpu_processes.h"
#include "agent/procs/host_processes.h"

namespace tessera::agent {

enum class BackstopAction {
  kReport,  // Events and metrics only
  kKill,    // SIGKILL the pod's processes on the GPU (the default)
  kEvict,   // evict the pod through the API server (its PodDisruptionBudget applies)
};
const char* BackstopActionName(BackstopAction a);
// "report", "kill", "evict".
absl::StatusOr<BackstopAction> ParseBackstopAction(const std::string& name);

struct BackstopOptions {
  uint32_t tolerance_permille = 50;           // of the cap
  uint64_t per_process_bytes = 768ull << 20;  // a context and its modules, per process
  std::chrono::seconds grace{30};             // over for this long before the action
  BackstopAction action = BackstopAction::kKill;
  std::chrono::milliseconds interval{1000};  // how often the pod manager runs a Step
};

// One pod's share of one GPU, as the backstop checks it.
struct BackstopShare {
  std::string pod_uid;
  std::string gpu_uuid;
  uint64_t cap_bytes = 0;  // 0: no memory cap (a whole GPU): measured for /metrics, not checked
};

struct BackstopVerdict {
  enum Kind { kOver, kAct };
  Kind kind = kOver;
  std::string pod_uid;
  std::string gpu_uuid;
  uint64_t used_bytes = 0;     // what the driver says the pod's processes hold
  uint64_t allowed_bytes = 0;  // the cap with its tolerance
  uint64_t cap_bytes = 0;
  std::vector<uint32_t> pids;  // the pod's processes on the GPU (host PIDs)
  std::chrono::seconds over_for{0};
};

// What the driver says a pod holds on a GPU, for /metrics.
struct DriverUse {
  uint64_t used_bytes = 0;
  uint32_t processes = 0;
};

class MemoryBackstop {
 public:
  explicit MemoryBackstop(BackstopOptions options) : options_(std::move(options)) {}

  // One check of every share; a GPU whose processes cannot be sampled is skipped (its error in
  // `errors`, by GPU UUID).
  std::vector<BackstopVerdict> Step(const std::vector<BackstopShare>& shares,
                                    GpuProcessSampler& sampler, HostProcesses& processes,
                                    std::chrono::steady_clock::time_point now,
                                    std::map<std::string, std::string>* errors = nullptr);

  // The allowance of a cap for `processes` processes (the formula above).
  uint64_t Allowed(uint64_t cap_bytes, uint32_t processes) const;

  // By (pod UID, GPU UUID): what the driver said at the last Step.
  const std::map<std::pair<std::string, std::string>, DriverUse>& use() const { return use_; }
  // Whether the last Step sampled the GPU's processes (a pod of it absent from use() held none).
  bool sampled(const std::string& gpu_uuid) const { return sampled_.contains(gpu_uuid); }
  const BackstopOptions& options() const { return options_; }

 private:
  BackstopOptions options_;
  std::map<std::pair<std::string, std::string>, std::chrono::steady_clock::time_point> over_since_;
  std::map<std::pair<std::string, std::string>, DriverUse> use_;
  std::set<std::string> sampled_;
};

}  // namespace tessera::agent
