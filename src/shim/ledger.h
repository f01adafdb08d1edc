// Ledger: one pod's usage of one GPU, shared by all of the pod's processes through a mapped file
// (segment_format.h). Each process owns one slot; the pod's usage is the sum of the live slots.
//
// Used by the shim inside the container (claim, charge, uncharge, reclaim when short) and by the
// agent outside it (inspect, reap). No dependencies beyond libc and the C++ standard library, so
// that it can live inside libtessera-cuda.so, which is loaded into arbitrary images.
//
// Invariants:
//   - a slot is owned by the holder of the OFD write lock on its lock byte; a process never
//     writes another live process's slot, except to zero it after the owner died (reclaim);
//   - Used() >= the sum of every process's committed allocations (in-flight reservations add to
//     it briefly, and a dead process's bytes stay until reclaimed), so the cap errs on the side
//     of refusing, never of passing;
//   - TryCharge never lets two concurrent reservations both succeed when together they would
//     pass the limit (see its comment).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shim/segment_format.h"

namespace tessera::shim {

// The start time (field 22, clock ticks since boot) in the text of /proc/<pid>/stat; 0 when the
// text has none.
uint64_t StatStartTimeTicks(std::string_view stat);

// Who this process is, as recorded in its slot.
struct ProcessIdentity {
  uint32_t pid = 0;
  uint64_t pidns_inode = 0;
  uint64_t start_time_ticks = 0;
  static ProcessIdentity Current();
};

struct ReclaimResult {
  uint32_t slots = 0;
  uint64_t bytes = 0;
};

// A copy of one live slot, for inspection.
struct SlotInfo {
  uint32_t index = 0;
  uint32_t pid = 0;
  uint64_t pidns_inode = 0;
  uint64_t start_time_ticks = 0;
  uint32_t host_pid = 0;
  uint64_t used_bytes = 0;
  uint64_t peak_bytes = 0;
  uint64_t claimed_at_unix_ns = 0;
  bool alive = false;   // its owner still holds the lock (only when checked)
  bool shared = false;  // an allocation held by several processes, not a process (kSlotShared)
};

// The header fields a ledger was validated with at open, kept by this process: every index into
// the mapping is bounded by this copy, never by the header, which any process of the pod can
// rewrite at any moment.
struct LedgerShape {
  uint32_t slot_count = 0;
  uint64_t file_bytes = 0;
  std::string gpu_uuid;
};

class Ledger {
 public:
  // Maps an existing ledger file read-write and checks its header. The descriptor stays open
  // (close-on-exec) because the slot's lock lives on it.
  static std::unique_ptr<Ledger> Open(const std::string& path, std::string* error);
  // The agent's view of a pod's ledger: `name` in the directory `dir_fd`, opened without
  // following a symlink and accepted only as a regular file with one link, owned by this
  // process's user and exactly as long as its header says (`path` names it in messages). An
  // observer never claims a slot; its calls take no lock of this object (the caller serialises
  // them), so that a guarded access cut short by a SIGBUS (bus_guard.h) leaves nothing held.
  static std::unique_ptr<Ledger> Observe(int dir_fd, const std::string& name,
                                         const std::string& path, std::string* error);
  // A ledger in anonymous memory, for one process only: used when a device has limits but its
  // ledger file is missing, so that the cap still holds for this process.
  static std::unique_ptr<Ledger> Private(const std::string& gpu_uuid);
  // Writes a new, empty ledger file (the agent's job; also tests). Fails if it exists.
  static bool Create(const std::string& path, const std::string& gpu_uuid, uint32_t slot_count,
                     std::string* error);
  // The same in the directory `dir_fd`, which the pod's processes may be able to write: the file
  // is written under a random name created with O_EXCL and O_NOFOLLOW and published with linkat,
  // so a name planted there (a symlink to a host file) is never opened, truncated or chmodded.
  static bool CreateAt(int dir_fd, const std::string& name, const std::string& gpu_uuid,
                       uint32_t slot_count, std::string* error);

  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Takes a slot for this process (idempotent). False when every slot is held by a living
  // process; `error` says so.
  bool Claim(const ProcessIdentity& me, std::string* error);
  bool claimed() const { return slot_ != nullptr; }
  int slot_index() const { return slot_index_; }

  // Adds `bytes` to this process's slot if the pod's usage stays within `limit` (0: no limit).
  // Protocol: add to the own slot first (seq_cst), then sum all live slots; over the limit,
  // take it back. Of two concurrent reservations that together pass the limit, at least one
  // sees the other in its sum (both increments precede both sums in the single total order of
  // seq_cst operations), so they cannot both succeed. A refusal caused only by another
  // process's in-flight reservation is retried; before giving up, dead processes' slots are
  // reclaimed once. Requires claimed().
  bool TryCharge(uint64_t bytes, uint64_t limit);
  // Adds without a check (memory that already exists, e.g. a pool that grew more than asked).
  void ForceCharge(uint64_t bytes);
  // Gives back; never below zero (an unbalanced release is logged by the caller).
  void Uncharge(uint64_t bytes);

  // Shared allocations: memory several of the pod's processes may hold at once (a virtual-memory
  // allocation exported as a file descriptor and imported elsewhere). Its bytes sit in a slot of
  // their own (kSlotShared, named by `key`), which each holding process holds with an OFD read
  // lock; it counts until the last holder lets go or dies, whichever process created it, so the
  // pod's usage is what the driver holds, once. Requires claimed(); a private ledger has none.
  //
  // Moves `bytes` of this process's own charge into a new shared slot named `key` (nonzero) and
  // holds it. -1 when no slot is free: the bytes then stay on the own slot.
  int CreateShared(uint64_t key, uint64_t bytes);
  // Holds the live shared slot named `key` (again, if this process already does); -1 when there
  // is none. `bytes`: what it charges.
  int JoinShared(uint64_t key, uint64_t* bytes);
  // Lets go of one hold (from CreateShared or JoinShared); the last holder of the pod frees it.
  void LeaveShared(int index);

  uint64_t Used() const;     // the pod's usage: sum of live slots
  uint64_t OwnUsed() const;  // this process's slot

  // Frees the slots whose owners died (their lock is free) and returns what they held. Never
  // touches this process's own slot.
  ReclaimResult ReclaimDead();

  // Live slots; with check_alive, also whether each owner still holds its lock.
  std::vector<SlotInfo> Slots(bool check_alive) const;
  // The same into `out` (at most `capacity`; returns how many), allocating nothing: for a SIGBUS
  // guard (bus_guard.h).
  uint32_t CopySlots(SlotInfo* out, uint32_t capacity, bool check_alive) const;
  // Records a slot's host PID (agent side).
  void SetHostPid(uint32_t slot, uint32_t host_pid);

  // The file's length now (fstat; 0 if it cannot be had).
  uint64_t FileBytesNow() const;
  // A copy of the header as it is in the mapping now (agent side; inside a SIGBUS guard).
  void CopyHeader(LedgerHeader* out) const;
  // Puts the validated header (and the file's length) back; false with `error` if it cannot
  // (agent side; inside a SIGBUS guard: the error is made before the mapping is touched).
  bool RestoreHeader(std::string* error);
  const LedgerShape& shape() const { return shape_; }

  // Process exit: zero and free the own slot, drop the lock.
  void Release();
  // In a fork child: the slot (and the inherited lock's descriptor) belong to the parent. Forget
  // both without touching the slot, so that the child claims its own.
  void AbandonAfterFork();
  // Reopens the descriptor for a fork child (a new open file description, hence new locks).
  bool ReopenAfterFork(std::string* error);

  // Serialises this process's lock-taking (Claim, ReclaimDead, Release): two threads share one
  // open file description, so its locks cannot tell them apart. Held around fork() by the shim.
  std::mutex& lock_mutex() { return mu_; }

  LedgerHeader* header() const { return header_; }
  const std::string& path() const { return path_; }
  uint32_t slot_count() const { return shape_.slot_count; }

 private:
  Ledger() = default;
  static std::unique_ptr<Ledger> Map(int fd, const std::string& path, uint64_t file_bytes,
                                     std::string* error);
  // The fixed fields of a new header.
  static void WriteHeader(LedgerHeader* h, const std::string& gpu_uuid, uint32_t slot_count);
  bool IsLive(uint32_t i) const;
  ReclaimResult ReclaimDeadLocked();
  LedgerSlot* SlotAt(uint32_t i) const;
  bool TryLock(uint32_t i) const;
  bool TryReadLock(uint32_t i) const;
  void Unlock(uint32_t i) const;
  // Frees shared slot i if no process holds it. Caller holds mu_ and no hold of its own on it.
  void FreeSharedIfUnheld(uint32_t i);
  void FreeSlot(uint32_t i, LedgerSlot* s);
  void InitSlot(uint32_t i, const ProcessIdentity& me);

  std::string path_;
  int fd_ = -1;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  bool private_ = false;
  bool observer_ = false;
  LedgerShape shape_;  // validated at open; bounds every index
  LedgerHeader* header_ = nullptr;
  LedgerSlot* slot_ = nullptr;
  int slot_index_ = -1;
  std::unordered_map<uint32_t, uint32_t> held_;  // shared slots this process holds: holds each
  mutable std::mutex mu_;
};

// What differs between `now` (a copy of a ledger's header, the file `file_bytes` long) and the
// shape it was validated with: the length, magic, version, sizes, slot count, GPU UUID, live bits
// past the slot count. Empty when nothing does.
std::string DescribeHeaderChange(const LedgerShape& shape, const LedgerHeader& now,
                                 uint64_t file_bytes);

// Opens the folder of `path` (trusted: the agent's own) and returns its descriptor, the last
// component in `name`; -1 with `error` on failure. For the path-taking Create functions.
int OpenParentFolder(const std::string& path, std::string* name, std::string* error);

// Creates a new file named `prefix` + 16 random hex digits in `dir_fd` (O_EXCL, O_NOFOLLOW,
// read-write, `mode`) and returns its descriptor, its name in `name`; -1 with errno on failure.
// For files the agent writes in a directory someone else may be able to write.
int CreateUniqueAt(int dir_fd, const std::string& prefix, unsigned mode, std::string* name);

// Checks a ledger header read from a file of `file_bytes` bytes; empty when valid.
std::string ValidateLedgerHeader(const LedgerHeader& h, uint64_t file_bytes);
// Same for a limits file.
std::string ValidateLimitsFile(const LimitsFile& l, uint64_t file_bytes);

}  // namespace tessera::shim
