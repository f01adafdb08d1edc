// The binary layout of the two files that carry one share (one pod on one GPU) between the agent
// and the shim. Dependency-free: the shim (inside every container), the agent's segment library
// and the GPU check script's helper all include it. See src/shim/README.md ("Segment format").
//
//   <pod dir>/limits/<GPU-UUID>.limits   written by the agent; the container sees it read-only
//   <pod dir>/ledger/<GPU-UUID>.ledger   written by the shims of the pod's processes
//
// Both are little-endian, fixed-size and versioned (magic + version + sizes); fields are
// std::atomic so that processes map them and read or update them concurrently without locks.
// A reader refuses a file whose magic, version or sizes it does not know.
//
// Invariants of the ledger:
//   - slot i belongs to the process that holds an open-file-description write lock
//     (F_OFD_SETLK) on the one byte at offset LockOffset(i); the kernel drops the lock when that
//     process dies or execs, which is how the dead are told from the living, in any PID
//     namespace and without PIDs;
//   - the pod's usage is the sum of used_bytes over live slots (bit set in live_bitmap); there is
//     no separate total that a crash could leave wrong;
//   - a shared slot (an allocation several processes hold) is held by OFD read locks on its lock
//     byte, one per holding process, and is freed once no process holds it;
//   - a process adds to its own slot before its real allocation and checks the sum against the
//     limit afterwards (rolling back if over), so that concurrent reservations never pass the
//     limit together (see Ledger::TryCharge).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tessera::shim {

inline constexpr uint64_t kLimitsMagic = 0x314D494C52535354ULL;  // "TSRSLIM1"
inline constexpr uint64_t kLedgerMagic = 0x3144454C52535354ULL;  // "TSRSLED1"
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint32_t kLimitsFileSize = 4096;
inline constexpr uint32_t kLedgerHeaderSize = 4096;
inline constexpr uint32_t kLedgerSlotSize = 64;
inline constexpr uint32_t kMaxLedgerSlots = 4096;
inline constexpr uint32_t kDefaultLedgerSlots = 1024;
inline constexpr uint32_t kUuidBytes = 96;
inline constexpr uint32_t kPodUidBytes = 64;
inline constexpr uint32_t kDefaultPeriodUs = 50'000;
inline constexpr uint32_t kMinPeriodUs = 1'000;
inline constexpr uint32_t kMaxPeriodUs = 1'000'000;

// How a compute share behaves when the GPU has idle time.
enum class ComputeMode : uint32_t {
  kHardCap = 0,         // never more than the share, even on an idle GPU
  kWorkConserving = 1,  // the share when others want the GPU, more when it would sit idle
};

// <GPU-UUID>.limits: what the agent commands. Only the agent writes it; shims map it read-only
// and read the fields on every decision, so a change (a resize, a new duty) applies at once.
struct LimitsFile {
  uint64_t magic;
  uint32_t version;
  uint32_t size;               // kLimitsFileSize
  char gpu_uuid[kUuidBytes];   // "GPU-xxxxxxxx-...", NUL-terminated; the device this file is for
  char pod_uid[kPodUidBytes];  // informational (inspection), NUL-terminated
  std::atomic<uint64_t> generation;              // +1 on every update by the agent
  std::atomic<uint64_t> memory_limit_bytes;      // 0: no memory cap on this GPU
  std::atomic<uint32_t> compute_limit_permille;  // 0 or >= 1000: no compute cap
  std::atomic<uint32_t> compute_mode;            // ComputeMode
  // The compute controller's command (agent side): the fraction of each period in which the
  // pod may launch work, and where in the period its window starts. duty 0 means "use
  // compute_limit_permille" (no controller running).
  std::atomic<uint32_t> duty_permille;
  std::atomic<uint32_t> phase_permille;
  std::atomic<uint32_t> period_us;  // 0: kDefaultPeriodUs
  uint32_t reserved0;
  uint8_t reserved[kLimitsFileSize - 8 - 4 - 4 - kUuidBytes - kPodUidBytes - 8 - 8 - 4 * 6];
};

// One process of the pod (64 bytes, one cache line).
struct LedgerSlot {
  std::atomic<uint64_t> used_bytes;        // device bytes this process holds on the GPU
  std::atomic<uint32_t> state;             // SlotState
  std::atomic<uint32_t> pid;               // in the process's own PID namespace
  std::atomic<uint64_t> pidns_inode;       // inode of /proc/<pid>/ns/pid
  std::atomic<uint64_t> start_time_ticks;  // /proc/<pid>/stat field 22 (clock ticks since boot)
  std::atomic<uint32_t> host_pid;  // the PID on the host, filled by the agent (0: not known)
  uint32_t reserved0;
  std::atomic<uint64_t> peak_bytes;
  std::atomic<uint64_t> claimed_at_unix_ns;
  std::atomic<uint64_t> share_key;  // kSlotShared: what names the allocation (0 otherwise)
};

// kSlotShared: not a process but an allocation that several of the pod's processes may hold
// (virtual memory exported as a file descriptor); every holder holds an OFD read lock on the
// slot's lock byte, and it counts until the last one lets go or dies.
enum SlotState : uint32_t { kSlotFree = 0, kSlotLive = 1, kSlotShared = 2 };

// <GPU-UUID>.ledger header; kLedgerHeaderSize bytes, then slot_count slots.
struct LedgerHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_size;  // kLedgerHeaderSize
  uint32_t slot_size;    // kLedgerSlotSize
  uint32_t slot_count;   // <= kMaxLedgerSlots
  char gpu_uuid[kUuidBytes];
  std::atomic<uint32_t> claim_hint;  // where the next claim starts looking
  uint32_t reserved0;
  std::atomic<uint64_t> oom_count;        // allocations refused for the cap
  std::atomic<uint64_t> reclaimed_slots;  // slots of dead processes given back
  std::atomic<uint64_t> reclaimed_bytes;
  std::atomic<uint64_t> peak_used_bytes;  // highest pod total seen by a successful charge
  // Compute: what the shims report to the controller.
  std::atomic<uint64_t> gate_wait_ns;    // time launches waited outside the pod's window
  std::atomic<uint64_t> gated_launches;  // launches that waited
  // The GPU time the pod's processes measured their own work taking on this GPU (each adds its
  // BusyMeter's charges, shim/busy_meter.h), monotonic, for the agent's split of the GPU's busy
  // time among the pods running on it (agent/pods/usage_meter.h). The pod writes it: the agent
  // checks every increase against the device's own busy time. It took the first of six reserved
  // words, so ledgers keep their size, layout and version: an older shim leaves it 0 (no
  // report), an older agent does not read it.
  std::atomic<uint64_t> gpu_busy_ns;
  uint64_t reserved1[5];
  std::atomic<uint64_t> live_bitmap[kMaxLedgerSlots / 64];  // bit i: slot i is live
  uint8_t reserved[kLedgerHeaderSize - 8 - 4 * 4 - kUuidBytes - 8 - 8 * 7 - 8 * 5 -
                   8 * (kMaxLedgerSlots / 64)];
};

inline constexpr uint64_t LedgerFileSize(uint32_t slot_count) {
  return uint64_t{kLedgerHeaderSize} + uint64_t{slot_count} * kLedgerSlotSize;
}
// The byte whose lock says that slot i is owned by a living process.
inline constexpr uint64_t LockOffset(uint32_t slot) {
  return uint64_t{kLedgerHeaderSize} + uint64_t{slot} * kLedgerSlotSize;
}

static_assert(sizeof(LimitsFile) == kLimitsFileSize);
static_assert(sizeof(LedgerSlot) == kLedgerSlotSize);
static_assert(sizeof(LedgerHeader) == kLedgerHeaderSize);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(offsetof(LimitsFile, generation) == 176);
static_assert(offsetof(LimitsFile, memory_limit_bytes) == 184);
static_assert(offsetof(LedgerHeader, gpu_busy_ns) == 176);
static_assert(offsetof(LedgerHeader, live_bitmap) == 224);

}  // namespace tessera::shim
