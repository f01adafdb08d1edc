// The shim's state in one process: the real driver, the shares (GPUs of this pod with limits),
// which device ordinal and NVML handle is which share, what this process holds (Tracker), and
// what happens at fork and exit. One instance per process, created on first use and never
// destroyed (hooks may run during exit, after static destructors).
//
// A GPU is shared when <root>/limits/<its UUID>.limits exists (contract.h). Devices are matched
// by UUID, never by ordinal, so CUDA_VISIBLE_DEVICES and device reordering change nothing.
// Everything read from the environment is read once, here.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "shim/busy_meter.h"
#include "shim/compute_gate.h"
#include "shim/ledger.h"
#include "shim/limits.h"
#include "shim/real_driver.h"
#include "shim/tracker.h"

namespace tessera::shim {

// One shared GPU as this process sees it.
class Share {
 public:
  // `ledger` null: the pod's ledger could not be opened, for the reason `ledger_problem`.
  Share(std::string uuid, std::unique_ptr<LimitsMap> limits, std::unique_ptr<Ledger> ledger,
        std::string ledger_problem = "");

  const std::string& uuid() const { return uuid_; }
  const LimitsMap& limits() const { return *limits_; }
  // What this process may hold on the GPU, with the pod: the pod's cap (0: none) or, when this
  // process has no slot in the pod's ledger, the small allowance of a process counted alone
  // (contract::kNoLedgerAllowanceBytes).
  uint64_t memory_limit() const;
  // Why this process has no slot in the pod's ledger; empty when it has one.
  std::string ledger_problem() const;

  // Takes this process's slot in the pod's ledger (once): a process that uses the GPU is one of
  // the pod's processes, whether or not it allocates (the controller finds it through its slot).
  void Join() { EnsureClaimed(); }
  // Reserves `bytes` for this process within the pod's cap; false: over the cap (the caller
  // answers CUDA_ERROR_OUT_OF_MEMORY). Claims this process's slot on first use.
  bool Charge(uint64_t bytes);
  void ForceCharge(uint64_t bytes);
  void Uncharge(uint64_t bytes);
  // An allocation several processes may hold (Ledger's shared slots): moves `bytes` of this
  // process's charge into a new shared slot named `key` / holds an existing one / lets go. -1:
  // none (no shared ledger, no free slot, or no such allocation).
  int CreateShared(uint64_t key, uint64_t bytes);
  int JoinShared(uint64_t key, uint64_t* bytes);
  void LeaveShared(int slot);
  // The pod's usage of this GPU.
  uint64_t Used();
  // Total and free as the share reports them, from the device's real values.
  void Report(uint64_t real_total, uint64_t real_free, uint64_t* total, uint64_t* free);

  Ledger* ledger() { return active_.load(std::memory_order_acquire); }
  Ledger* shared_ledger() { return ledger_.get(); }
  ComputeGate& gate() { return gate_; }
  // What this process's work took on the GPU, for the pod's ledger (busy_meter.h).
  BusyMeter& busy() { return busy_; }

  // Fork child: forget the parent's slot.
  void ResetAfterFork();
  // Exit: give the slot back.
  void ReleaseAtExit();

 private:
  bool EnsureClaimed();

  std::string uuid_;
  std::unique_ptr<LimitsMap> limits_;
  std::unique_ptr<Ledger> ledger_;   // the pod's shared ledger (null if missing)
  std::unique_ptr<Ledger> private_;  // fallback when the shared one is missing or full
  std::atomic<Ledger*> active_{nullptr};
  std::atomic<bool> claimed_{false};
  mutable std::mutex claim_mu_;  // also guards ledger_problem_
  std::string ledger_problem_;
  ComputeGate gate_;
  BusyMeter busy_;
};

class Shim {
 public:
  static Shim& Get() {
    Shim* s = instance_.load(std::memory_order_acquire);
    return s != nullptr ? *s : Init();
  }

  RealDriver real;
  Tracker tracker;

  bool ready() const { return ready_; }
  int log_level() const { return log_level_; }
  // True when this container has any limits file: otherwise every hook passes straight through.
  bool any_share() const { return any_share_; }

  Share* ShareForUuid(const std::string& uuid);
  Share* ShareForDevice(CUdevice dev);
  Share* ShareForNvml(nvmlDevice_t dev);

  // The device ordinal of the current context / of a stream (ptsz: stream 0 is per-thread).
  bool CurrentDevice(CUdevice* dev);
  bool StreamDevice(CUstream stream, CUdevice* dev);
  CUcontext CurrentContext();

  // Primary contexts, recorded when retained, so that a reset or last release can drop what
  // they held.
  void NotePrimaryContext(CUdevice dev, CUcontext ctx);
  CUcontext PrimaryContext(CUdevice dev);

  // Pools: set when a stream-ordered free may have left a pool's reservation stale; a sync
  // point or a refusal then re-reads the pools.
  std::atomic<bool> pools_stale{false};

  // Snapshot for tessera_shim_status().
  std::string StatusJson();

  // A mutex that must not be held across fork by another thread (locked first at fork, so it
  // must be outermost wherever it is held with the shim's others).
  void AddForkMutex(std::mutex* mu);

  // Fork handlers.
  void PrepareFork();
  void ParentAfterFork();
  void ChildAfterFork();
  void AtExit();

 private:
  static Shim& Init();
  Shim() = default;
  bool CtxDevice(CUcontext ctx, CUdevice* dev);
  bool SingleDevice();

  static std::atomic<Shim*> instance_;
  bool ready_ = false;
  int log_level_ = 0;
  bool any_share_ = false;
  std::string root_;

  std::vector<std::mutex*> fork_mutexes_;  // registered at load, before any fork
  std::mutex mu_;                          // guards the maps below
  std::unordered_map<std::string, std::unique_ptr<Share>> shares_;  // by UUID; null: not shared
  std::unordered_map<nvmlDevice_t, Share*> nvml_shares_;
  std::unordered_map<CUcontext, CUdevice> ctx_devices_;
  std::unordered_map<CUdevice, CUcontext> primary_;
  static constexpr int kMaxDevices = 64;
  std::atomic<intptr_t> device_shares_[kMaxDevices] = {};  // 0 unknown, 1 none, else Share*
  std::atomic<int> single_device_{-1};
};

// Logging to stderr, "tessera-shim[pid]: ...", filtered by TESSERA_SHIM_LOG.
void Log(int level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML and nvidia-smi print UUIDs.
std::string UuidString(const CUuuid& uuid);

}  // namespace tessera::shim
