// Tracker: what this process holds on each GPU, by allocation, so that a free gives back exactly
// what its allocation took. Plain bookkeeping with no driver calls (the hooks call the driver and
// then tell the tracker), testable without a GPU.
//
// What is tracked, and when its bytes are given back:
//   - linear memory (cuMemAlloc, pitch, managed) and arrays: until freed or destroyed, or until
//     the context that owns them is destroyed or reset (the driver frees them then);
//   - virtual-memory physical allocations (cuMemCreate): until the last handle reference
//     (create + retains - releases) AND the last mapping (cuMemMap - cuMemUnmap) are gone, which
//     is when the driver frees the memory;
//   - stream-ordered pools: what the driver reserved for the pool (its RESERVED_MEM_CURRENT),
//     set by the hooks after each operation that can change it (PoolState); graph memory the
//     same way, per device (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
//   - memory a context reserves for a raised limit (stack, printf FIFO, heap): until the limit
//     is lowered or the context destroyed;
//   - virtual memory exported as a file descriptor: in the pod's shared slot for it, held by every
//     process of the pod that holds the allocation (its creator until its last reference,
//     mapping and exported descriptor are gone; each importer until its own are), so it counts
//     once, for as long as the driver keeps it; imported from outside the pod: by the extent of
//     this process's mappings of it;
//   - linear memory exported over CUDA IPC (cuIpcGetMemHandle): in the pod's shared slot for it
//     (named by IpcHandleKey), held by the exporter until it frees it and by each process of the
//     pod that opened it until it closes it, so a free by the exporter while another process still
//     maps it (which CUDA leaves undefined) does not end the count; an opened handle whose
//     exporter is not of the pod (no such slot) is not added: the exporting process counts it;
//   - imported pool pointers are never added: the exporting process counts them.
// Thread-safe (one mutex; allocation-rate operations only, never the launch path).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "shim/cuda_abi.h"

namespace tessera::shim {

// kLimit: device memory a context reserves for a raised limit (cuCtxSetLimit), keyed by
// LimitKey(context, limit). kIpcOpened: another process's memory this one opened over CUDA IPC
// (cuIpcOpenMemHandle), keyed by the pointer it got.
enum class AllocKind : uint8_t {
  kLinear,
  kPitch,
  kManaged,
  kArray,
  kMipmappedArray,
  kPool,
  kLimit,
  kIpcOpened
};

struct Allocation {
  uint64_t bytes = 0;  // charged to this process's own slot (0 for what a shared slot holds)
  int device = -1;
  CUcontext ctx = nullptr;
  AllocKind kind = AllocKind::kLinear;
  CUmemoryPool pool = nullptr;  // kPool only
  // Exported over CUDA IPC (kLinear, kPitch) or opened from such an export (kIpcOpened): the
  // pod's shared slot (Ledger::CreateShared) that holds its bytes, which this process holds once
  // for it; -1: none.
  int shared_slot = -1;
  uint32_t opens = 1;  // kIpcOpened: cuIpcOpenMemHandle calls not yet closed
};

// A cuMemCreate allocation, or one imported from a shareable handle. device -1: host memory
// (HOST, HOST_NUMA, ...), never charged.
struct Physical {
  uint64_t bytes = 0;
  int device = -1;
  uint32_t refs = 1;  // handle references
  uint32_t maps = 0;  // live mappings
  // Exported or imported within the pod: its bytes are charged to the pod's shared slot
  // `shared_slot` (Ledger::CreateShared), named by `share_key`, which this process holds.
  int shared_slot = -1;
  uint64_t share_key = 0;
  int probe = -1;  // the exporter's probe of its exported descriptors (export_tag.h), or -1
  // Imported from outside the pod's ledger: charged to this process by how far its mappings
  // reach (the driver does not say how large an imported allocation is).
  bool sized_by_mappings = false;
};

// A stream-ordered memory pool this process allocated from. The hooks hold `mu` around an
// allocation and the re-reading of the pool's reservation that follows it.
struct PoolState {
  int device = -1;         // -1: a host pool (not charged)
  uint64_t charged = 0;    // bytes of the pool's reservation charged to the ledger
  uint64_t live = 0;       // allocations from it not yet freed
  bool destroyed = false;  // cuMemPoolDestroy returned; the driver frees it when live == 0
  bool imported = false;   // an imported pool: its memory belongs to the exporter
  std::mutex mu;
};

// Sizes the backing store of a CUDA array from its descriptor. An estimate: the driver pads
// arrays by layout rules it does not publish; rows are rounded to 512 bytes and the total to
// 4 KiB. Sparse and deferred-mapping arrays have no backing store (0): their memory comes from
// cuMemCreate and is counted there.
uint64_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned int mip_levels);
uint64_t ArrayBytes(const CUDA_ARRAY_DESCRIPTOR& desc);

// Device memory a context reserves for `limit` set to `value`, beyond what every context holds
// (its defaults: 1 KiB of stack per thread, a 1 MiB printf FIFO, an 8 MiB device-malloc heap).
// The stack is reserved for every thread the device can hold (`device_threads`: SMs x threads
// per SM). An estimate, as the driver does not publish its own. Example: a 4 KiB stack on 132 SMs
// of 2048 threads reserves 3 KiB x 270336 = 792 MiB.
uint64_t LimitReservation(CUlimit limit, uint64_t value, uint64_t device_threads);
// The tracker key of a context's reservation for `limit`: above every user-space address, so it
// never collides with a device pointer or an array handle.
uint64_t LimitKey(CUcontext ctx, CUlimit limit);

class Tracker {
 public:
  // Linear allocations and arrays, keyed by device pointer or array handle.
  void Add(uint64_t key, const Allocation& a);
  std::optional<Allocation> Take(uint64_t key);
  std::optional<Allocation> Find(uint64_t key) const;
  // Everything `ctx` owned (the context was destroyed or reset).
  std::vector<Allocation> TakeContext(CUcontext ctx);
  // The allocation at `key` was exported over CUDA IPC: its bytes now sit in the pod's shared
  // slot `slot`. False (nothing changed) when there is no such allocation any more.
  bool SetAllocationShared(uint64_t key, int slot);
  // One more cuIpcOpenMemHandle of the memory already opened at `key` (the driver counts opens
  // of one handle in a context and hands back the same pointer); false when none is.
  bool OpenAgain(uint64_t key);
  // One cuIpcCloseMemHandle of `key`: the allocation when that was its last open (removed), else
  // nothing (the open count goes down).
  std::optional<Allocation> CloseOpened(uint64_t key);

  // Virtual memory.
  void AddPhysical(CUmemGenericAllocationHandle h, uint64_t bytes, int device);
  void AddPhysical(CUmemGenericAllocationHandle h, const Physical& p);
  std::optional<Physical> FindPhysical(CUmemGenericAllocationHandle h) const;
  // The allocation behind `h` became shared (exported): see Physical.
  void SetShared(CUmemGenericAllocationHandle h, int slot, uint64_t key, int probe);
  // A mapping-sized import now charges `bytes`.
  void SetPhysicalBytes(CUmemGenericAllocationHandle h, uint64_t bytes);
  // Exported allocations this process let go of while an exported descriptor of them is still
  // open somewhere (it keeps the memory alive in the driver): their shared slot stays held until
  // the hooks find the descriptors closed.
  void Linger(const Physical& p);
  std::vector<Physical> TakeLingering();
  bool any_lingering() const { return lingering_count_.load(std::memory_order_relaxed) > 0; }
  // A retain of the allocation behind `h` (cuMemRetainAllocationHandle returned h).
  void RetainPhysical(CUmemGenericAllocationHandle h);
  // A cuMemRelease; returns the allocation when that was its last reference and mapping.
  std::optional<Physical> ReleasePhysical(CUmemGenericAllocationHandle h);
  void Map(CUdeviceptr va, uint64_t size, CUmemGenericAllocationHandle h);
  // A cuMemUnmap of [va, va + size); returns the allocations freed by it.
  std::vector<Physical> Unmap(CUdeviceptr va, uint64_t size);
  // The allocation handle mapped at `addr`, if this process mapped it.
  std::optional<CUmemGenericAllocationHandle> HandleAt(CUdeviceptr addr) const;

  // Graph memory: the state of a device's graph allocations (charged = the driver's reservation
  // for them), and what the allocation nodes of an instantiated graph take, by device.
  PoolState* GraphMemory(int device);
  std::vector<std::pair<int, PoolState*>> GraphMemories() const;
  void SetGraphExecAllocations(CUgraphExec exec, std::vector<std::pair<int, uint64_t>> bytes);
  std::vector<std::pair<int, uint64_t>> GraphExecAllocations(CUgraphExec exec) const;

  // Pools (the state object lives until the tracker is cleared).
  PoolState* Pool(CUmemoryPool pool, int device_if_new, bool imported_if_new);
  PoolState* FindPool(CUmemoryPool pool) const;
  std::vector<std::pair<CUmemoryPool, PoolState*>> Pools() const;

  // Bytes charged per device by linear allocations and arrays (for checks and stats).
  uint64_t LinearBytes(int device) const;
  uint64_t PhysicalBytes(int device) const;
  size_t allocation_count() const;

  // Forget everything (a fork child: the parent's allocations are not the child's).
  void Clear();
  std::mutex& mutex() { return mu_; }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Allocation> allocations_;
  std::unordered_map<CUmemGenericAllocationHandle, Physical> physical_;
  struct Mapping {
    uint64_t size;
    CUmemGenericAllocationHandle handle;
  };
  std::map<CUdeviceptr, Mapping> mappings_;  // by start address
  std::unordered_map<CUmemoryPool, std::unique_ptr<PoolState>> pools_;
  std::unordered_map<int, std::unique_ptr<PoolState>> graph_memory_;
  std::unordered_map<CUgraphExec, std::vector<std::pair<int, uint64_t>>> graph_execs_;
  std::vector<Physical> lingering_;
  std::atomic<size_t> lingering_count_{0};
  std::vector<std::unique_ptr<PoolState>> abandoned_;  // a fork child's parent pools
};

}  // namespace tessera::shim
