// The driver API entry points the shim intercepts. Each one calls the real driver; on a shared
// GPU it first reserves memory in the pod's ledger (rolled back if the driver refuses) or waits
// for the pod's compute window. On a GPU without limits it adds one branch.
//
// Memory: every allocation path reserves before the real call, so that a cap is never passed,
// and frees give back exactly what their allocation took (Tracker). Over the cap the answer is
// CUDA_ERROR_OUT_OF_MEMORY, what frameworks expect from a full GPU.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "shim/export_tag.h"
#include "shim/hooks.h"
#include "shim/shim_state.h"

using tessera::shim::Allocation;
using tessera::shim::AllocKind;
using tessera::shim::Log;
using tessera::shim::Physical;
using tessera::shim::PoolState;
using tessera::shim::Share;
using tessera::shim::Shim;

namespace {

constexpr uint64_t kPoolGranule = 2ULL << 20;  // what a pool is assumed to grow by, at least

Shim& S() { return Shim::Get(); }

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

void SleepUntil(int64_t mono_ns) {
  timespec ts{};
  ts.tv_sec = mono_ns / 1'000'000'000LL;
  ts.tv_nsec = mono_ns % 1'000'000'000LL;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// A stream handle as the non-_ptsz entry points understand it.
CUstream Effective(CUstream stream, bool ptsz) {
  return (ptsz && stream == nullptr) ? TESSERA_CU_STREAM_PER_THREAD : stream;
}

// The share of the current context's device, or null. Also reports the device.
Share* CurrentShare(CUdevice* dev) {
  Shim& s = S();
  if (!s.any_share()) return nullptr;
  if (!s.CurrentDevice(dev)) return nullptr;
  return s.ShareForDevice(*dev);
}

// Before refusing an allocation: pool reservations that a sync released may still be charged,
// and exported allocations whose last descriptor has closed may still be held.
void RefreshPools(int device);
void SweepLingering();
void EndPhysical(const Physical& p);

bool ChargeOrRefresh(Share* share, int device, uint64_t bytes) {
  if (share->Charge(bytes)) return true;
  RefreshPools(device);
  SweepLingering();
  if (share->Charge(bytes)) return true;
  Log(1, "%s: refused %llu bytes, the pod holds %llu of its %llu", share->uuid().c_str(),
      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(share->Used()),
      static_cast<unsigned long long>(share->memory_limit()));
  return false;
}

void UnchargeDevice(int device, uint64_t bytes) {
  if (device < 0 || bytes == 0) return;
  if (Share* share = S().ShareForDevice(device)) share->Uncharge(bytes);
}

// ------------------------------------------------------------------------------- pools

uint64_t PoolReserved(CUmemoryPool pool, bool* ok) {
  cuuint64_t v = 0;
  auto get = S().real.cuMemPoolGetAttribute;
  *ok = get != nullptr && get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS;
  return v;
}

// Sets what `ps` charges to what the driver reports it reserves, after `worst` was charged for
// an operation that may have grown it: the reservation is memory the driver already holds, so
// growth beyond the worst case is charged without a check. Holds ps->mu.
void SettleReservation(Share* share, PoolState* ps, uint64_t worst, uint64_t reserved) {
  const uint64_t before = ps->charged + worst;
  if (reserved > before) {
    share->ForceCharge(reserved - before);
    if (worst > 0) {
      Log(1, "a reservation grew by %llu bytes beyond the %llu expected",
          static_cast<unsigned long long>(reserved - before),
          static_cast<unsigned long long>(worst));
    }
  } else if (reserved < before) {
    share->Uncharge(before - reserved);
  }
  ps->charged = reserved;
}

// Re-reads a pool's reservation and moves the ledger by the difference. Holds ps->mu. Returns
// whether the pool holds cached memory (reserved beyond what is in use), which a later
// synchronisation may release.
bool RefreshPoolLocked(CUmemoryPool pool, PoolState* ps) {
  if (ps->device < 0 || ps->imported || ps->destroyed) return false;
  Share* share = S().ShareForDevice(ps->device);
  if (share == nullptr) return false;
  bool ok = false;
  uint64_t reserved = PoolReserved(pool, &ok);
  if (!ok) return false;
  SettleReservation(share, ps, 0, reserved);
  cuuint64_t used = 0;
  auto get = S().real.cuMemPoolGetAttribute;
  return get != nullptr && get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS &&
         reserved > used;
}

// Re-reads every pool of `device` (-1: all), each under its own mutex. The caller holds no pool's
// mutex (see PoolAlloc's lock order).
void RefreshPools(int device) {
  bool cached = false;
  for (auto& [pool, ps] : S().tracker.Pools()) {
    if (device >= 0 && ps->device != device) continue;
    std::lock_guard<std::mutex> lock(ps->mu);
    cached |= RefreshPoolLocked(pool, ps);
  }
  if (cached) S().pools_stale.store(true, std::memory_order_relaxed);
}

// Exported allocations this process let go of while a descriptor of them was open: let go of
// their shared slots once the descriptors have closed.
void SweepLingering() {
  if (!S().tracker.any_lingering()) return;
  for (const Physical& p : S().tracker.TakeLingering()) EndPhysical(p);
}

// At a synchronisation point: pools with cached memory may have released some.
void RefreshGraphMemory();
void RefreshStalePools() {
  if (!S().pools_stale.exchange(false, std::memory_order_relaxed)) return;
  RefreshPools(-1);
  RefreshGraphMemory();
}

// The device a pool's memory lives on: -1 for host pools; unknown location types (a newer
// driver's) count as the current device's, so that nothing new escapes the cap.
int PoolDevice(const CUmemPoolProps* props) {
  if (props == nullptr) return -1;
  switch (props->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return props->location.id;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return -1;
    default: {
      CUdevice dev = -1;
      return S().CurrentDevice(&dev) ? dev : -1;
    }
  }
}

// One stream-ordered allocation from `pool` on a shared device. The pool's reservation, not the
// allocation's size, is what the GPU holds: the worst-case growth is reserved first, then the
// ledger is set to what the pool really reserved afterwards.
//
// Lock order: a thread holds at most one pool's mutex at a time. Near the cap the other pools
// are re-read with this pool's mutex released (two threads allocating from two pools, each
// holding its own pool's mutex and waiting for the other's, deadlocked before).
template <typename Call>
CUresult PoolAlloc(Share* share, CUdevice dev, CUmemoryPool pool, PoolState* ps, size_t size,
                   CUdeviceptr* dptr, Call call) {
  std::unique_lock<std::mutex> lock(ps->mu);
  RefreshPoolLocked(pool, ps);
  const uint64_t worst = RoundUp(std::max<uint64_t>(size, 1), kPoolGranule);
  if (!share->Charge(worst)) {
    // The pool's cached free memory, or stale charges of other pools, may be what stands in
    // the way: give the cached memory back and retry.
    if (S().real.cuMemPoolTrimTo != nullptr) S().real.cuMemPoolTrimTo(pool, 0);
    lock.unlock();
    RefreshPools(dev);  // this pool too, each under its own mutex alone
    SweepLingering();
    lock.lock();
    RefreshPoolLocked(pool, ps);
    if (!share->Charge(worst)) {
      Log(1, "%s: refused %zu stream-ordered bytes, the pod holds %llu of its %llu",
          share->uuid().c_str(), size, static_cast<unsigned long long>(share->Used()),
          static_cast<unsigned long long>(share->memory_limit()));
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    share->Uncharge(worst);
    return r;
  }
  bool ok = false;
  uint64_t reserved = PoolReserved(pool, &ok);
  if (!ok) reserved = ps->charged + worst;  // cannot read it: keep the worst case
  SettleReservation(share, ps, worst, reserved);
  ++ps->live;
  S().pools_stale.store(true, std::memory_order_relaxed);  // a later sync may release some
  Allocation a;
  a.bytes = size;
  a.device = dev;
  a.kind = AllocKind::kPool;
  a.pool = pool;
  S().tracker.Add(*dptr, a);
  return CUDA_SUCCESS;
}

CUresult AllocAsync(CUdeviceptr* dptr, size_t size, CUstream stream, bool ptsz) {
  auto real = ptsz ? S().real.cuMemAllocAsync_ptsz : S().real.cuMemAllocAsync;
  if (real == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  Shim& s = S();
  CUdevice dev = -1;
  Share* share = nullptr;
  if (s.any_share() && s.StreamDevice(Effective(stream, ptsz), &dev)) {
    share = s.ShareForDevice(dev);
  }
  // Into a capturing stream it only records a graph allocation node: counted when a launch of
  // the graph maps it (GraphMemoryLaunch).
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (share != nullptr && s.real.cuStreamIsCapturing != nullptr &&
      s.real.cuStreamIsCapturing(Effective(stream, ptsz), &capture) == CUDA_SUCCESS &&
      capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    return real(dptr, size, stream);
  }
  CUmemoryPool pool = nullptr;
  if (share == nullptr || dptr == nullptr || s.real.cuDeviceGetMemPool == nullptr ||
      s.real.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS) {
    if (share == nullptr || dptr == nullptr) return real(dptr, size, stream);
    // No pool to read: charge the allocation itself.
    if (!ChargeOrRefresh(share, dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(dptr, size, stream);
    if (r != CUDA_SUCCESS) {
      share->Uncharge(size);
      return r;
    }
    Allocation a;
    a.bytes = size;
    a.device = dev;
    a.kind = AllocKind::kLinear;
    s.tracker.Add(*dptr, a);
    return r;
  }
  PoolState* ps = s.tracker.Pool(pool, dev, /*imported=*/false);
  return PoolAlloc(share, dev, pool, ps, size, dptr, [&] { return real(dptr, size, stream); });
}

CUresult AllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream stream,
                            bool ptsz) {
  auto real = ptsz ? S().real.cuMemAllocFromPoolAsync_ptsz : S().real.cuMemAllocFromPoolAsync;
  if (real == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  Shim& s = S();
  if (!s.any_share() || dptr == nullptr) return real(dptr, size, pool, stream);
  PoolState* ps = s.tracker.FindPool(pool);
  if (ps == nullptr) {
    // Not created through the shim: a device's default pool. Its device is the stream's.
    CUdevice dev = -1;
    if (!s.StreamDevice(Effective(stream, ptsz), &dev)) return real(dptr, size, pool, stream);
    ps = s.tracker.Pool(pool, dev, /*imported=*/false);
  }
  Share* share = ps->imported ? nullptr : s.ShareForDevice(ps->device);
  if (share == nullptr) return real(dptr, size, pool, stream);
  return PoolAlloc(share, ps->device, pool, ps, size, dptr,
                   [&] { return real(dptr, size, pool, stream); });
}

// A pool allocation ended (freed, or freed with cuMemFree).
void PoolAllocationEnded(const Allocation& a) {
  PoolState* ps = S().tracker.FindPool(a.pool);
  if (ps == nullptr) return;
  std::lock_guard<std::mutex> lock(ps->mu);
  if (ps->live > 0) --ps->live;
  if (ps->destroyed && ps->live == 0 && ps->charged > 0) {
    UnchargeDevice(ps->device, ps->charged);
    ps->charged = 0;
  }
  S().pools_stale.store(true, std::memory_order_relaxed);
}

// An allocation of the tracker ended (freed, destroyed, closed, or its context went): give back
// its charge, or let go of the shared slot that holds it.
void EndAllocation(const Allocation& a) {
  if (a.kind == AllocKind::kPool) {
    PoolAllocationEnded(a);
  } else if (a.shared_slot >= 0) {
    if (Share* share = S().ShareForDevice(a.device)) share->LeaveShared(a.shared_slot);
  } else {
    UnchargeDevice(a.device, a.bytes);
  }
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream stream, bool ptsz) {
  auto real = ptsz ? S().real.cuMemFreeAsync_ptsz : S().real.cuMemFreeAsync;
  if (real == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (!S().any_share()) return real(dptr, stream);
  auto a = S().tracker.Take(dptr);
  CUresult r = real(dptr, stream);
  if (r != CUDA_SUCCESS) {
    if (a) S().tracker.Add(dptr, *a);
    return r;
  }
  if (a) EndAllocation(*a);
  return r;
}

// ------------------------------------------------------------------------- graph memory
//
// A graph's allocation nodes take their memory from the device's graph memory when a launch (or
// an upload) maps them; the driver keeps it reserved for the next launch until
// cuDeviceGraphMemTrim. Counted like a pool: what the device's graph memory reserves
// (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), re-read after each launch, at synchronisations and
// trims; before a launch, what the graph's allocation nodes add up to (read at instantiation)
// is reserved in the ledger, so a graph that would pass the cap is refused, not run.

uint64_t GraphReserved(int device, bool* ok) {
  cuuint64_t v = 0;
  auto get = S().real.cuDeviceGetGraphMemAttribute;
  *ok = get != nullptr && get(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS;
  return v;
}

void RefreshGraphMemoryLocked(int device, PoolState* gs) {
  Share* share = S().ShareForDevice(device);
  bool ok = false;
  uint64_t reserved = GraphReserved(device, &ok);
  if (share != nullptr && ok) SettleReservation(share, gs, 0, reserved);
}

void RefreshGraphMemory() {
  for (auto& [device, gs] : S().tracker.GraphMemories()) {
    std::lock_guard<std::mutex> lock(gs->mu);
    RefreshGraphMemoryLocked(device, gs);
  }
}

// Bytes the allocation nodes of `graph` (and of its child graphs) take, by device.
void GraphAllocations(CUgraph graph, std::vector<std::pair<int, uint64_t>>* out, int depth = 0) {
  const auto& real = S().real;
  size_t n = 0;
  if (depth > 8 || real.cuGraphGetNodes == nullptr || real.cuGraphNodeGetType == nullptr ||
      real.cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0) {
    return;
  }
  std::vector<CUgraphNode> nodes(n);
  if (real.cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return;
  nodes.resize(std::min(n, nodes.size()));
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type = -1;
    if (real.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    CUgraph child = nullptr;
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && real.cuGraphMemAllocNodeGetParams != nullptr &&
        real.cuGraphMemAllocNodeGetParams(node, &params) == CUDA_SUCCESS &&
        params.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      out->emplace_back(params.poolProps.location.id, params.bytesize);
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && real.cuGraphChildGraphNodeGetGraph != nullptr &&
               real.cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS) {
      GraphAllocations(child, out, depth + 1);
    }
  }
}

// A launch or upload of `exec`: what its allocation nodes take on a shared device is reserved
// first (refused over the cap, after trimming the graph memory the driver keeps), then the ledger
// follows what the device's graph memory really reserved.
template <typename Call>
CUresult GraphMemoryLaunch(CUgraphExec exec, Call call) {
  if (!S().any_share()) return call();
  auto allocations = S().tracker.GraphExecAllocations(exec);
  int device = -1;
  uint64_t worst = 0;
  for (const auto& [dev, bytes] : allocations) {
    if (S().ShareForDevice(dev) == nullptr) continue;
    if (device < 0) device = dev;
    if (dev == device) worst += bytes;  // a second shared device is settled after the launch
  }
  if (device < 0) {
    CUresult r = call();
    if (r == CUDA_SUCCESS && !allocations.empty()) RefreshGraphMemory();
    return r;
  }
  Share* share = S().ShareForDevice(device);
  PoolState* gs = S().tracker.GraphMemory(device);
  std::unique_lock<std::mutex> lock(gs->mu);
  RefreshGraphMemoryLocked(device, gs);
  if (!share->Charge(worst)) {
    if (S().real.cuDeviceGraphMemTrim != nullptr) S().real.cuDeviceGraphMemTrim(device);
    RefreshGraphMemoryLocked(device, gs);
    lock.unlock();  // one reservation's mutex at a time (PoolAlloc's lock order)
    RefreshPools(device);
    SweepLingering();
    lock.lock();
    if (!share->Charge(worst)) {
      Log(1, "%s: refused a graph launch that allocates %llu bytes, the pod holds %llu of its %llu",
          share->uuid().c_str(), static_cast<unsigned long long>(worst),
          static_cast<unsigned long long>(share->Used()),
          static_cast<unsigned long long>(share->memory_limit()));
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  CUresult r = call();
  bool ok = false;
  uint64_t reserved = GraphReserved(device, &ok);
  if (r != CUDA_SUCCESS || !ok) {
    share->Uncharge(worst);
    if (ok) SettleReservation(share, gs, 0, reserved);
    return r;
  }
  SettleReservation(share, gs, worst, reserved);
  S().pools_stale.store(true, std::memory_order_relaxed);
  return r;
}

// ---------------------------------------------------------------------------- compute

// What this process's work took on a shared GPU between two syncs, added to the pod's ledger
// (LedgerHeader::gpu_busy_ns) for the agent's split of the GPU's busy time (busy_meter.h).
void PublishBusy(Share* share, uint64_t busy) {
  if (busy == 0) return;
  if (auto* h = share->ledger()->header()) {
    h->gpu_busy_ns.fetch_add(busy, std::memory_order_relaxed);
  }
}

// Whether `stream` is being captured into a graph (or cannot be told): its launches only record.
bool Capturing(Shim& s, CUstream stream) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  return s.real.cuStreamIsCapturing == nullptr ||
         s.real.cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS ||
         capture != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Whether the GPU is done with the work queued on `stream` (for BusyMeter after a pause): a
// non-blocking query, never of a stream being captured (there the query would invalidate the
// capture), made in relaxed capture mode (as the gate's drain) so that a capture in another
// thread is not invalidated either.
bool StreamDone(Shim& s, CUstream stream) {
  if (s.real.cuStreamQuery == nullptr || Capturing(s, stream)) return false;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged = s.real.cuThreadExchangeStreamCaptureMode != nullptr &&
                   s.real.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  const bool done = s.real.cuStreamQuery(stream) == CUDA_SUCCESS;
  if (exchanged) s.real.cuThreadExchangeStreamCaptureMode(&mode);
  return done;
}

void GateSlow(CUstream stream, bool ptsz) {
  Shim& s = S();
  CUstream eff = Effective(stream, ptsz);
  CUdevice dev = -1;
  if (!s.StreamDevice(eff, &dev)) return;
  Share* share = s.ShareForDevice(dev);
  if (share == nullptr) return;
  // Every launch on a shared GPU is metered, capped or not, once admitted (when it goes to the
  // GPU); after a pause the stream is asked whether the GPU is done with the work before it.
  auto& busy = share->busy();
  auto meter = [&](int64_t t) {
    // A launch into a capturing stream only records into a graph: not GPU time, and it must not
    // open an interval. Asked where that matters (BusyMeter::Asks), not at every launch.
    if (busy.Asks(t) && Capturing(s, eff)) return;
    PublishBusy(share, busy.Launch(t, [&] { return StreamDone(s, eff); }));
  };
  const auto& limits = share->limits();
  const int64_t now = MonoNs();
  if (limits.effective_duty() >= 1000) {
    meter(now);
    return;
  }
  auto& gate = share->gate();
  auto admit = [&](int64_t t, tessera::shim::ComputeGate::Window* w) {
    return gate.Admit(t, limits.effective_duty(), limits.phase(),
                      int64_t{limits.period_us()} * 1000, w);
  };
  if (admit(now, nullptr)) {
    meter(now);
    return;
  }
  // A launch into a capturing stream is only recorded into a graph: nothing runs now.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (s.real.cuStreamIsCapturing != nullptr &&
      s.real.cuStreamIsCapturing(eff, &capture) == CUDA_SUCCESS &&
      capture != CU_STREAM_CAPTURE_STATUS_NONE) {
    return;
  }
  // Drain this stream (which also measures what a launch costs). Relaxed capture mode, so that
  // a graph capture in another thread is not invalidated by the sync.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged = s.real.cuThreadExchangeStreamCaptureMode != nullptr &&
                   s.real.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
  if (s.real.cuStreamSynchronize != nullptr) s.real.cuStreamSynchronize(eff);
  if (exchanged) s.real.cuThreadExchangeStreamCaptureMode(&mode);
  int64_t t = MonoNs();
  gate.ObserveSync(now, t);
  PublishBusy(share, busy.Sync(now, t));
  tessera::shim::ComputeGate::Window w;
  while (!admit(t, &w)) {
    Log(2,
        "gate: drained %lld us at %lld us into the window; cost %lld us, credit %lld us; "
        "sleeping %lld us",
        static_cast<long long>((t - now) / 1000), static_cast<long long>((now - w.start_ns) / 1000),
        static_cast<long long>(gate.cost_ns() / 1000),
        static_cast<long long>(gate.credit_ns() / 1000),
        static_cast<long long>((w.next_start_ns - t) / 1000));
    SleepUntil(w.next_start_ns);  // the next window brings time and credit
    t = MonoNs();
  }
  meter(t);
  if (auto* h = share->ledger()->header()) {
    h->gate_wait_ns.fetch_add(static_cast<uint64_t>(t - now), std::memory_order_relaxed);
    h->gated_launches.fetch_add(1, std::memory_order_relaxed);
  }
}

// The program's own synchronisations tell the gate what its launches cost (capped shares) and
// the busy meter what they took (every share).
template <typename Call>
CUresult TimedSync(CUstream stream, bool ptsz, bool whole_context, Call call) {
  Shim& s = S();
  if (!s.any_share()) return call();
  CUdevice dev = -1;
  bool known =
      whole_context ? s.CurrentDevice(&dev) : s.StreamDevice(Effective(stream, ptsz), &dev);
  Share* share = known ? s.ShareForDevice(dev) : nullptr;
  if (share == nullptr) return call();
  const int64_t start = MonoNs();
  CUresult r = call();
  if (r != CUDA_SUCCESS) return r;
  const int64_t done = MonoNs();
  if (share->limits().compute_limit() != 0) share->gate().ObserveSync(start, done);
  PublishBusy(share, share->busy().Sync(start, done));
  return r;
}

// The launch fast path: one load and a branch when this container has no shares.
inline void Gate(CUstream stream, bool ptsz) {
  if (S().any_share()) GateSlow(stream, ptsz);
}

}  // namespace

#define TESSERA_REAL(name) (S().real.name)
#define TESSERA_CALL_OR_UNSUPPORTED(name, ...) \
  (TESSERA_REAL(name) != nullptr ? TESSERA_REAL(name)(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

// Definitions of the hooks declared extern "C" in hooks.h (which gives them C linkage).

// ----------------------------------------------------------------------- linear memory

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUdevice dev = -1;
  Share* share = CurrentShare(&dev);
  if (share == nullptr || dptr == nullptr) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemAlloc_v2, dptr, bytesize);
  }
  if (!ChargeOrRefresh(share, dev, bytesize)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemAlloc_v2, dptr, bytesize);
  if (r != CUDA_SUCCESS) {
    share->Uncharge(bytesize);
    return r;
  }
  S().tracker.Add(*dptr, Allocation{bytesize, dev, S().CurrentContext(), AllocKind::kLinear});
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch,
                                                                   size_t width, size_t height,
                                                                   unsigned int element_size) {
  CUdevice dev = -1;
  Share* share = CurrentShare(&dev);
  if (share == nullptr || dptr == nullptr || pitch == nullptr) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemAllocPitch_v2, dptr, pitch, width, height,
                                       element_size);
  }
  // The driver picks the pitch; reserve the usual one (rows aligned to 512 bytes), then settle
  // on the pitch it really returned.
  const uint64_t estimate = RoundUp(std::max<uint64_t>(width, 1), 512) * height;
  if (!ChargeOrRefresh(share, dev, estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r =
      TESSERA_CALL_OR_UNSUPPORTED(cuMemAllocPitch_v2, dptr, pitch, width, height, element_size);
  if (r != CUDA_SUCCESS) {
    share->Uncharge(estimate);
    return r;
  }
  const uint64_t actual = uint64_t{*pitch} * height;
  if (actual > estimate && !share->Charge(actual - estimate)) {
    S().real.cuMemFree_v2(*dptr);
    share->Uncharge(estimate);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (actual < estimate) share->Uncharge(estimate - actual);
  S().tracker.Add(*dptr, Allocation{actual, dev, S().CurrentContext(), AllocKind::kPitch});
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocManaged(CUdeviceptr* dptr,
                                                                  size_t bytesize,
                                                                  unsigned int flags) {
  CUdevice dev = -1;
  Share* share = CurrentShare(&dev);
  if (share == nullptr || dptr == nullptr) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemAllocManaged, dptr, bytesize, flags);
  }
  // Managed memory may live on the device in full: counted at its size.
  if (!ChargeOrRefresh(share, dev, bytesize)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemAllocManaged, dptr, bytesize, flags);
  if (r != CUDA_SUCCESS) {
    share->Uncharge(bytesize);
    return r;
  }
  S().tracker.Add(*dptr, Allocation{bytesize, dev, S().CurrentContext(), AllocKind::kManaged});
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (!S().any_share()) return TESSERA_CALL_OR_UNSUPPORTED(cuMemFree_v2, dptr);
  auto a = S().tracker.Take(dptr);
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemFree_v2, dptr);
  if (r != CUDA_SUCCESS) {
    if (a) S().tracker.Add(dptr, *a);
    return r;
  }
  if (a) EndAllocation(*a);
  return r;
}

// ------------------------------------------------------------------ the CUDA 2.x allocators
//
// cuMemAlloc, cuMemAllocPitch, cuArrayCreate and cuArray3DCreate without a suffix are the 32-bit
// ABI that CUDA 3.2 replaced with the _v2 functions. Drivers still export them, so a program
// could reach them by name (dlsym) past the _v2 hooks and allocate uncounted. Nothing built for
// CUDA 3.2 or later calls them: refused on a shared GPU, passed through elsewhere.

namespace {
// CUDA_SUCCESS when the current device has no share; otherwise the refusal, said once.
CUresult RefuseLegacyAllocator(const char* name) {
  CUdevice dev = -1;
  Share* share = CurrentShare(&dev);
  if (share == nullptr) return CUDA_SUCCESS;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    Log(0,
        "%s: refused %s, an allocator of CUDA 2.x's 32-bit ABI that the share does not count; "
        "the program must call the _v2 functions (any CUDA since 3.2 does)",
        share->uuid().c_str(), name);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}
}  // namespace

__attribute__((visibility("default"))) CUresult cuMemAlloc(CUdeviceptr_v1* dptr,
                                                           unsigned int bytesize) {
  if (CUresult refused = RefuseLegacyAllocator("cuMemAlloc"); refused != CUDA_SUCCESS) {
    return refused;
  }
  return TESSERA_CALL_OR_UNSUPPORTED(cuMemAlloc, dptr, bytesize);
}

__attribute__((visibility("default"))) CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr,
                                                                unsigned int* pitch,
                                                                unsigned int width,
                                                                unsigned int height,
                                                                unsigned int element_size) {
  if (CUresult refused = RefuseLegacyAllocator("cuMemAllocPitch"); refused != CUDA_SUCCESS) {
    return refused;
  }
  return TESSERA_CALL_OR_UNSUPPORTED(cuMemAllocPitch, dptr, pitch, width, height, element_size);
}

__attribute__((visibility("default"))) CUresult cuArrayCreate(CUarray* array, const void* desc) {
  if (CUresult refused = RefuseLegacyAllocator("cuArrayCreate"); refused != CUDA_SUCCESS) {
    return refused;
  }
  return TESSERA_CALL_OR_UNSUPPORTED(cuArrayCreate, array, desc);
}

__attribute__((visibility("default"))) CUresult cuArray3DCreate(CUarray* array, const void* desc) {
  if (CUresult refused = RefuseLegacyAllocator("cuArray3DCreate"); refused != CUDA_SUCCESS) {
    return refused;
  }
  return TESSERA_CALL_OR_UNSUPPORTED(cuArray3DCreate, array, desc);
}

// ------------------------------------------------------------------------------------ IPC
//
// Linear memory exported with cuIpcGetMemHandle and opened by another process of the pod: its
// charge moves to a shared slot of the pod's ledger named by the handle's bytes
// (IpcHandleKey), held by the exporter until it frees the memory and by each opener until it
// closes it (or their contexts go, or they die), so it counts once for as long as anyone holds
// it. Without this, the exporter's cuMemFree gave the charge back while an opener still mapped
// the memory (CUDA calls that undefined; a driver may keep the memory for the opener).

__attribute__((visibility("default"))) CUresult cuIpcGetMemHandle(CUipcMemHandle* handle,
                                                                  CUdeviceptr dptr) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuIpcGetMemHandle, handle, dptr);
  if (r != CUDA_SUCCESS || handle == nullptr || !S().any_share()) return r;
  auto a = S().tracker.Find(dptr);
  if (!a || a->shared_slot >= 0 || a->bytes == 0 ||
      (a->kind != AllocKind::kLinear && a->kind != AllocKind::kPitch)) {
    return r;
  }
  Share* share = S().ShareForDevice(a->device);
  if (share == nullptr) return r;
  const uint64_t key = tessera::shim::IpcHandleKey(handle, sizeof(*handle));
  int slot = share->CreateShared(key, a->bytes);
  if (slot < 0) {
    // It stays on this process's charge; an opener of the pod pays nothing (the driver may keep
    // the memory after this process frees it: the agent's backstop sees that).
    Log(1, "%s: no ledger slot for memory exported over IPC", share->uuid().c_str());
    return r;
  }
  if (!S().tracker.SetAllocationShared(dptr, slot)) share->LeaveShared(slot);  // freed meanwhile
  return r;
}

namespace {
template <typename Call>
CUresult IpcOpen(CUdeviceptr* dptr, const CUipcMemHandle& handle, Call call) {
  CUresult r = call();
  if (r != CUDA_SUCCESS || dptr == nullptr || !S().any_share()) return r;
  if (S().tracker.OpenAgain(*dptr)) return r;  // the same handle again: the same pointer
  CUdevice dev = -1;
  Share* share = CurrentShare(&dev);
  if (share == nullptr) return r;
  Allocation a;
  a.device = dev;
  a.ctx = S().CurrentContext();
  a.kind = AllocKind::kIpcOpened;
  uint64_t bytes = 0;
  a.shared_slot = share->JoinShared(tessera::shim::IpcHandleKey(&handle, sizeof(handle)), &bytes);
  // No slot: exported by a process outside the pod's ledger, which counts it.
  S().tracker.Add(*dptr, a);
  return r;
}
}  // namespace

__attribute__((visibility("default"))) CUresult cuIpcOpenMemHandle(CUdeviceptr* dptr,
                                                                   CUipcMemHandle handle,
                                                                   unsigned int flags) {
  return IpcOpen(dptr, handle, [&] {
    return TESSERA_CALL_OR_UNSUPPORTED(cuIpcOpenMemHandle, dptr, handle, flags);
  });
}

__attribute__((visibility("default"))) CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr,
                                                                      CUipcMemHandle handle,
                                                                      unsigned int flags) {
  return IpcOpen(dptr, handle, [&] {
    return TESSERA_CALL_OR_UNSUPPORTED(cuIpcOpenMemHandle_v2, dptr, handle, flags);
  });
}

__attribute__((visibility("default"))) CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuIpcCloseMemHandle, dptr);
  if (r != CUDA_SUCCESS || !S().any_share()) return r;
  if (auto a = S().tracker.CloseOpened(dptr)) EndAllocation(*a);
  return r;
}

// ----------------------------------------------------------------------------- reporting

__attribute__((visibility("default"))) CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemGetInfo_v2, free, total);
  if (r != CUDA_SUCCESS || free == nullptr || total == nullptr) return r;
  CUdevice dev = -1;
  Share* share = CurrentShare(&dev);
  if (share == nullptr) return r;
  RefreshStalePools();
  SweepLingering();
  uint64_t t = 0, f = 0;
  share->Report(*total, *free, &t, &f);
  *total = t;
  *free = f;
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemGetInfo(unsigned int* free,
                                                             unsigned int* total) {
  if (TESSERA_REAL(cuMemGetInfo_v2) == nullptr) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemGetInfo, free, total);
  }
  size_t f = 0, t = 0;
  CUresult r = cuMemGetInfo_v2(&f, &t);
  if (r != CUDA_SUCCESS) return r;
  if (free != nullptr) *free = static_cast<unsigned int>(std::min<size_t>(f, 0xFFFFFFFFu));
  if (total != nullptr) *total = static_cast<unsigned int>(std::min<size_t>(t, 0xFFFFFFFFu));
  return r;
}

__attribute__((visibility("default"))) CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuDeviceTotalMem_v2, bytes, dev);
  if (r != CUDA_SUCCESS || bytes == nullptr || !S().any_share()) return r;
  if (Share* share = S().ShareForDevice(dev); share != nullptr && share->memory_limit() != 0) {
    *bytes = std::min<size_t>(*bytes, share->memory_limit());
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuDeviceTotalMem(unsigned int* bytes,
                                                                 CUdevice dev) {
  if (TESSERA_REAL(cuDeviceTotalMem_v2) == nullptr) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuDeviceTotalMem, bytes, dev);
  }
  size_t b = 0;
  CUresult r = cuDeviceTotalMem_v2(&b, dev);
  if (r == CUDA_SUCCESS && bytes != nullptr) {
    *bytes = static_cast<unsigned int>(std::min<size_t>(b, 0xFFFFFFFFu));
  }
  return r;
}

// -------------------------------------------------------------------------------- arrays

namespace {
template <typename Handle, typename Call>
CUresult CountedCreate(Handle* out, uint64_t bytes, AllocKind kind, Call call) {
  CUdevice dev = -1;
  Share* share = bytes == 0 ? nullptr : CurrentShare(&dev);
  if (share == nullptr || out == nullptr) return call();
  if (!ChargeOrRefresh(share, dev, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    share->Uncharge(bytes);
    return r;
  }
  S().tracker.Add(reinterpret_cast<uint64_t>(*out),
                  Allocation{bytes, dev, S().CurrentContext(), kind});
  return r;
}

template <typename Call>
CUresult CountedDestroy(uint64_t key, Call call) {
  if (!S().any_share()) return call();
  auto a = S().tracker.Take(key);
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    if (a) S().tracker.Add(key, *a);
    return r;
  }
  if (a) EndAllocation(*a);
  return r;
}
}  // namespace

__attribute__((visibility("default"))) CUresult cuArrayCreate_v2(
    CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  uint64_t bytes = desc != nullptr ? tessera::shim::ArrayBytes(*desc) : 0;
  return CountedCreate(array, bytes, AllocKind::kArray,
                       [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuArrayCreate_v2, array, desc); });
}

__attribute__((visibility("default"))) CUresult cuArray3DCreate_v2(
    CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  uint64_t bytes = desc != nullptr ? tessera::shim::ArrayBytes(*desc, 1) : 0;
  return CountedCreate(array, bytes, AllocKind::kArray, [&] {
    return TESSERA_CALL_OR_UNSUPPORTED(cuArray3DCreate_v2, array, desc);
  });
}

__attribute__((visibility("default"))) CUresult cuArrayDestroy(CUarray array) {
  return CountedDestroy(reinterpret_cast<uint64_t>(array),
                        [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuArrayDestroy, array); });
}

__attribute__((visibility("default"))) CUresult cuMipmappedArrayCreate(
    CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int levels) {
  uint64_t bytes = desc != nullptr ? tessera::shim::ArrayBytes(*desc, levels) : 0;
  return CountedCreate(handle, bytes, AllocKind::kMipmappedArray, [&] {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMipmappedArrayCreate, handle, desc, levels);
  });
}

__attribute__((visibility("default"))) CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
  return CountedDestroy(reinterpret_cast<uint64_t>(h),
                        [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuMipmappedArrayDestroy, h); });
}

// ------------------------------------------------------------------------ virtual memory
//
// The virtual-memory calls run under one mutex with their bookkeeping, so that a handle value
// the driver frees and hands out again is never confused between two allocations.

namespace {
std::mutex g_vmm_mu;
// Held across driver calls: never inherited locked by a fork child.
const bool g_vmm_mu_registered = (Shim::Get().AddForkMutex(&g_vmm_mu), true);

// A share's allocation ended in this process: give back its charge, or let go of its shared
// slot, unless a descriptor this process exported is still open somewhere (it keeps the memory
// alive in the driver): then keep holding the slot until SweepLingering finds it closed.
void EndPhysical(const Physical& p) {
  if (p.shared_slot < 0) {
    UnchargeDevice(p.device, p.bytes);
    return;
  }
  if (p.probe >= 0 && tessera::shim::ExportedDescriptorOpen(p.probe, p.share_key)) {
    S().tracker.Linger(p);
    return;
  }
  if (p.probe >= 0) ::close(p.probe);
  if (Share* share = S().ShareForDevice(p.device)) share->LeaveShared(p.shared_slot);
}

int AllocationDevice(const CUmemAllocationProp* prop) {
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return prop->location.id;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return -1;  // host memory (NCCL, expandable segments' host side): never charged
    default: {
      CUdevice dev = -1;  // a location type this build does not know: device memory
      return S().CurrentDevice(&dev) ? dev : -1;
    }
  }
}
}  // namespace

__attribute__((visibility("default"))) CUresult cuMemCreate(CUmemGenericAllocationHandle* handle,
                                                            size_t size,
                                                            const CUmemAllocationProp* prop,
                                                            unsigned long long flags) {
  if (!S().any_share() || handle == nullptr || prop == nullptr) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemCreate, handle, size, prop, flags);
  }
  const int dev = AllocationDevice(prop);
  Share* share = dev >= 0 ? S().ShareForDevice(dev) : nullptr;
  if (share == nullptr) return TESSERA_CALL_OR_UNSUPPORTED(cuMemCreate, handle, size, prop, flags);
  if (!ChargeOrRefresh(share, dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemCreate, handle, size, prop, flags);
  if (r != CUDA_SUCCESS) {
    share->Uncharge(size);
    return r;
  }
  S().tracker.AddPhysical(*handle, size, dev);
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  if (!S().any_share()) return TESSERA_CALL_OR_UNSUPPORTED(cuMemRelease, h);
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemRelease, h);
  if (r != CUDA_SUCCESS) return r;
  if (auto freed = S().tracker.ReleasePhysical(h)) EndPhysical(*freed);
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemMap(CUdeviceptr ptr, size_t size,
                                                         size_t offset,
                                                         CUmemGenericAllocationHandle h,
                                                         unsigned long long flags) {
  if (!S().any_share()) return TESSERA_CALL_OR_UNSUPPORTED(cuMemMap, ptr, size, offset, h, flags);
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  // An allocation imported from outside the pod is charged by how far its mappings reach.
  auto p = S().tracker.FindPhysical(h);
  Share* share = p && p->sized_by_mappings ? S().ShareForDevice(p->device) : nullptr;
  const uint64_t reach = uint64_t{offset} + size;
  const uint64_t grow = share != nullptr && reach > p->bytes ? reach - p->bytes : 0;
  if (grow > 0 && !ChargeOrRefresh(share, p->device, grow)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemMap, ptr, size, offset, h, flags);
  if (r != CUDA_SUCCESS) {
    if (grow > 0) share->Uncharge(grow);
    return r;
  }
  if (grow > 0) S().tracker.SetPhysicalBytes(h, reach);
  S().tracker.Map(ptr, size, h);
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (!S().any_share()) return TESSERA_CALL_OR_UNSUPPORTED(cuMemUnmap, ptr, size);
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemUnmap, ptr, size);
  if (r != CUDA_SUCCESS) return r;
  for (const auto& freed : S().tracker.Unmap(ptr, size)) EndPhysical(freed);
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemRetainAllocationHandle(
    CUmemGenericAllocationHandle* handle, void* addr) {
  if (!S().any_share())
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemRetainAllocationHandle, handle, addr);
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemRetainAllocationHandle, handle, addr);
  if (r == CUDA_SUCCESS && handle != nullptr) S().tracker.RetainPhysical(*handle);
  return r;
}

// Shareable handles. An allocation exported as a file descriptor may outlive its creator's
// handle: the driver frees it when every handle, mapping and exported descriptor of it, in any
// process, is gone. Its charge moves to a shared slot of the pod's ledger that each holder holds
// (export_tag.h says how an importer finds it), so it counts once, for as long as it lives.
// Other handle types (fabric, Win32) carry no descriptor to follow: refused on a shared GPU.

__attribute__((visibility("default"))) CUresult cuMemExportToShareableHandle(
    void* out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,
    unsigned long long flags) {
  if (!S().any_share()) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemExportToShareableHandle, out, h, type, flags);
  }
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  auto p = S().tracker.FindPhysical(h);
  Share* share = p && p->device >= 0 ? S().ShareForDevice(p->device) : nullptr;
  if (share == nullptr) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuMemExportToShareableHandle, out, h, type, flags);
  }
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    Log(0,
        "%s: refused to export an allocation as handle type %d: only file descriptors are "
        "counted across processes on a shared GPU",
        share->uuid().c_str(), static_cast<int>(type));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemExportToShareableHandle, out, h, type, flags);
  if (r != CUDA_SUCCESS || out == nullptr) return r;
  const int fd = *static_cast<int*>(out);
  uint64_t key = p->share_key;
  if (p->shared_slot < 0) {
    key = tessera::shim::NewExportKey();
    int slot = share->CreateShared(key, p->bytes);
    if (slot < 0) {
      // No slot for it: it stays on this process's charge, and an importer pays again (counted
      // twice rather than not at all).
      Log(1, "%s: no ledger slot for an exported allocation", share->uuid().c_str());
      return r;
    }
    S().tracker.SetShared(h, slot, key, tessera::shim::OpenProbe(fd));
  } else if (p->probe < 0) {  // an importer exporting it on
    S().tracker.SetShared(h, p->shared_slot, key, tessera::shim::OpenProbe(fd));
  }
  if (!tessera::shim::TagDescriptor(fd, key)) {
    Log(1, "%s: cannot tag an exported descriptor; an importer pays for it again",
        share->uuid().c_str());
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemImportFromShareableHandle(
    CUmemGenericAllocationHandle* handle, void* os_handle, CUmemAllocationHandleType type) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemImportFromShareableHandle, handle, os_handle, type);
  if (r != CUDA_SUCCESS || handle == nullptr || !S().any_share()) return r;
  CUmemAllocationProp prop{};
  auto props = S().real.cuMemGetAllocationPropertiesFromHandle;
  if (props == nullptr || props(&prop, *handle) != CUDA_SUCCESS) return r;
  const int dev = AllocationDevice(&prop);
  Share* share = dev >= 0 ? S().ShareForDevice(dev) : nullptr;
  if (share == nullptr) return r;  // host memory, or a GPU without a share
  Physical p;
  p.device = dev;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
    uint64_t key = tessera::shim::ReadExportTag(fd);
    p.shared_slot = key != 0 ? share->JoinShared(key, &p.bytes) : -1;
    if (p.shared_slot >= 0) p.share_key = key;
  }
  p.sized_by_mappings = p.shared_slot < 0;  // another pod's, or unmarked: charged here
  std::lock_guard<std::mutex> lock(g_vmm_mu);
  S().tracker.AddPhysical(*handle, p);
  return r;
}

// ---------------------------------------------------------------- stream-ordered memory

__attribute__((visibility("default"))) CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size,
                                                                CUstream stream) {
  return AllocAsync(dptr, size, stream, false);
}
__attribute__((visibility("default"))) CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size,
                                                                     CUstream stream) {
  return AllocAsync(dptr, size, stream, true);
}
__attribute__((visibility("default"))) CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr,
                                                                        size_t size,
                                                                        CUmemoryPool pool,
                                                                        CUstream stream) {
  return AllocFromPoolAsync(dptr, size, pool, stream, false);
}
__attribute__((visibility("default"))) CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr,
                                                                             size_t size,
                                                                             CUmemoryPool pool,
                                                                             CUstream stream) {
  return AllocFromPoolAsync(dptr, size, pool, stream, true);
}
__attribute__((visibility("default"))) CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return FreeAsync(dptr, stream, false);
}
__attribute__((visibility("default"))) CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr,
                                                                    CUstream stream) {
  return FreeAsync(dptr, stream, true);
}

__attribute__((visibility("default"))) CUresult cuMemPoolCreate(CUmemoryPool* pool,
                                                                const CUmemPoolProps* props) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemPoolCreate, pool, props);
  if (r != CUDA_SUCCESS || pool == nullptr || !S().any_share()) return r;
  PoolState* ps = S().tracker.Pool(*pool, PoolDevice(props), /*imported=*/false);
  std::lock_guard<std::mutex> lock(ps->mu);  // a reused handle starts afresh
  ps->device = PoolDevice(props);
  ps->charged = 0;
  ps->live = 0;
  ps->destroyed = false;
  ps->imported = false;
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemPoolImportFromShareableHandle(
    CUmemoryPool* pool, void* handle, CUmemAllocationHandleType type, unsigned long long flags) {
  CUresult r =
      TESSERA_CALL_OR_UNSUPPORTED(cuMemPoolImportFromShareableHandle, pool, handle, type, flags);
  if (r == CUDA_SUCCESS && pool != nullptr && S().any_share()) {
    PoolState* ps = S().tracker.Pool(*pool, -1, /*imported=*/true);
    std::lock_guard<std::mutex> lock(ps->mu);
    ps->imported = true;  // the exporter's memory: never charged here
    ps->device = -1;
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemPoolDestroy, pool);
  if (r != CUDA_SUCCESS || !S().any_share()) return r;
  if (PoolState* ps = S().tracker.FindPool(pool)) {
    std::lock_guard<std::mutex> lock(ps->mu);
    ps->destroyed = true;  // the driver frees it once its last allocation is freed
    if (ps->live == 0 && ps->charged > 0) {
      UnchargeDevice(ps->device, ps->charged);
      ps->charged = 0;
    }
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuMemPoolTrimTo(CUmemoryPool pool,
                                                                size_t min_bytes_to_keep) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuMemPoolTrimTo, pool, min_bytes_to_keep);
  if (r == CUDA_SUCCESS && S().any_share()) {
    if (PoolState* ps = S().tracker.FindPool(pool)) {
      std::lock_guard<std::mutex> lock(ps->mu);
      RefreshPoolLocked(pool, ps);
    }
  }
  return r;
}

// Synchronisation points: where pools release memory above their threshold, and where the
// compute gate learns what a launch costs.
__attribute__((visibility("default"))) CUresult cuStreamSynchronize(CUstream stream) {
  CUresult r = TimedSync(stream, false, false,
                         [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuStreamSynchronize, stream); });
  RefreshStalePools();
  return r;
}
__attribute__((visibility("default"))) CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  CUresult r = TimedSync(stream, true, false, [&] {
    return TESSERA_CALL_OR_UNSUPPORTED(cuStreamSynchronize_ptsz, stream);
  });
  RefreshStalePools();
  return r;
}
__attribute__((visibility("default"))) CUresult cuCtxSynchronize() {
  CUresult r = TimedSync(nullptr, false, true,
                         [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuCtxSynchronize); });
  RefreshStalePools();
  return r;
}
__attribute__((visibility("default"))) CUresult cuEventSynchronize(CUevent event) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuEventSynchronize, event);
  RefreshStalePools();
  return r;
}

// ------------------------------------------------------------------------------ contexts
//
// Destroying or resetting a context frees what it held.

namespace {
void DropContext(CUcontext ctx) {
  if (ctx == nullptr) return;
  for (const auto& a : S().tracker.TakeContext(ctx)) EndAllocation(a);
}
}  // namespace

__attribute__((visibility("default"))) CUresult cuCtxDestroy_v2(CUcontext ctx) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuCtxDestroy_v2, ctx);
  if (r == CUDA_SUCCESS && S().any_share()) DropContext(ctx);
  return r;
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx,
                                                                         CUdevice dev) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuDevicePrimaryCtxRetain, ctx, dev);
  if (r == CUDA_SUCCESS && ctx != nullptr && S().any_share()) S().NotePrimaryContext(dev, *ctx);
  return r;
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuDevicePrimaryCtxRelease_v2, dev);
  if (r != CUDA_SUCCESS || !S().any_share()) return r;
  unsigned int flags = 0;
  int active = 1;
  if (S().real.cuDevicePrimaryCtxGetState != nullptr &&
      S().real.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active) {
    DropContext(S().PrimaryContext(dev));  // that was the last reference
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuDevicePrimaryCtxReset_v2, dev);
  if (r == CUDA_SUCCESS && S().any_share()) DropContext(S().PrimaryContext(dev));
  return r;
}

// --------------------------------------------------------------------------- context limits
//
// Raising the stack, printf FIFO or device-malloc heap limit makes the driver reserve device
// memory for the context: charged like an allocation of the context (given back when it is
// destroyed or reset), beyond what a context holds by default.

__attribute__((visibility("default"))) CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  CUdevice dev = -1;
  Share* share = CurrentShare(&dev);
  if (share == nullptr || limit < CU_LIMIT_STACK_SIZE || limit > CU_LIMIT_MALLOC_HEAP_SIZE) {
    return TESSERA_CALL_OR_UNSUPPORTED(cuCtxSetLimit, limit, value);
  }
  const CUcontext ctx = S().CurrentContext();
  const uint64_t key = tessera::shim::LimitKey(ctx, limit);
  auto& real = S().real;
  int sms = 0, threads_per_sm = 0;
  if (limit == CU_LIMIT_STACK_SIZE && real.cuDeviceGetAttribute != nullptr) {
    real.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    real.cuDeviceGetAttribute(&threads_per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                              dev);
  }
  const uint64_t after = tessera::shim::LimitReservation(
      limit, value, uint64_t(std::max(sms, 0)) * uint64_t(std::max(threads_per_sm, 0)));
  auto held = S().tracker.Find(key);
  const uint64_t before = held ? held->bytes : 0;
  if (after > before && !ChargeOrRefresh(share, dev, after - before)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuCtxSetLimit, limit, value);
  if (r != CUDA_SUCCESS) {
    if (after > before) share->Uncharge(after - before);
    return r;
  }
  if (after < before) share->Uncharge(before - after);
  S().tracker.Take(key);
  if (after > 0) S().tracker.Add(key, Allocation{after, dev, ctx, AllocKind::kLimit});
  return r;
}

// -------------------------------------------------------------------------------- launches

__attribute__((visibility("default"))) CUresult cuLaunchKernel(CUfunction f, unsigned int gx,
                                                               unsigned int gy, unsigned int gz,
                                                               unsigned int bx, unsigned int by,
                                                               unsigned int bz, unsigned int shared,
                                                               CUstream stream, void** params,
                                                               void** extra) {
  Gate(stream, false);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shared, stream,
                                     params, extra);
}

__attribute__((visibility("default"))) CUresult cuLaunchKernel_ptsz(
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
    unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params,
    void** extra) {
  Gate(stream, true);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shared, stream,
                                     params, extra);
}

__attribute__((visibility("default"))) CUresult cuLaunchKernelEx(const CUlaunchConfig* config,
                                                                 CUfunction f, void** params,
                                                                 void** extra) {
  Gate(config != nullptr ? config->hStream : nullptr, false);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchKernelEx, config, f, params, extra);
}

__attribute__((visibility("default"))) CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config,
                                                                      CUfunction f, void** params,
                                                                      void** extra) {
  Gate(config != nullptr ? config->hStream : nullptr, true);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchKernelEx_ptsz, config, f, params, extra);
}

__attribute__((visibility("default"))) CUresult cuLaunchCooperativeKernel(
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
    unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params) {
  Gate(stream, false);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shared,
                                     stream, params);
}

__attribute__((visibility("default"))) CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
    unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params) {
  Gate(stream, true);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz,
                                     shared, stream, params);
}

__attribute__((visibility("default"))) CUresult cuLaunchCooperativeKernelMultiDevice(
    CUDA_LAUNCH_PARAMS* params, unsigned int count, unsigned int flags) {
  if (params != nullptr) {
    for (unsigned int i = 0; i < count; ++i) Gate(params[i].hStream, false);
  }
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchCooperativeKernelMultiDevice, params, count, flags);
}

__attribute__((visibility("default"))) CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  Gate(stream, false);
  return GraphMemoryLaunch(
      exec, [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuGraphLaunch, exec, stream); });
}

__attribute__((visibility("default"))) CUresult cuGraphLaunch_ptsz(CUgraphExec exec,
                                                                   CUstream stream) {
  Gate(stream, true);
  return GraphMemoryLaunch(
      exec, [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuGraphLaunch_ptsz, exec, stream); });
}

__attribute__((visibility("default"))) CUresult cuGraphUpload(CUgraphExec exec, CUstream stream) {
  return GraphMemoryLaunch(
      exec, [&] { return TESSERA_CALL_OR_UNSUPPORTED(cuGraphUpload, exec, stream); });
}

__attribute__((visibility("default"))) CUresult cuGraphInstantiateWithFlags(
    CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuGraphInstantiateWithFlags, exec, graph, flags);
  if (r != CUDA_SUCCESS || exec == nullptr || !S().any_share()) return r;
  std::vector<std::pair<int, uint64_t>> allocations;
  GraphAllocations(graph, &allocations);
  S().tracker.SetGraphExecAllocations(*exec, std::move(allocations));
  return r;
}

__attribute__((visibility("default"))) CUresult cuGraphExecDestroy(CUgraphExec exec) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuGraphExecDestroy, exec);
  if (r == CUDA_SUCCESS && S().any_share()) S().tracker.SetGraphExecAllocations(exec, {});
  return r;
}

__attribute__((visibility("default"))) CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuDeviceGraphMemTrim, dev);
  if (r == CUDA_SUCCESS && S().any_share() && S().ShareForDevice(dev) != nullptr) {
    PoolState* gs = S().tracker.GraphMemory(dev);
    std::lock_guard<std::mutex> lock(gs->mu);
    RefreshGraphMemoryLocked(dev, gs);
  }
  return r;
}

__attribute__((visibility("default"))) CUresult cuLaunch(CUfunction f) {
  Gate(nullptr, false);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunch, f);
}

__attribute__((visibility("default"))) CUresult cuLaunchGrid(CUfunction f, int w, int h) {
  Gate(nullptr, false);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchGrid, f, w, h);
}

__attribute__((visibility("default"))) CUresult cuLaunchGridAsync(CUfunction f, int w, int h,
                                                                  CUstream stream) {
  Gate(stream, false);
  return TESSERA_CALL_OR_UNSUPPORTED(cuLaunchGridAsync, f, w, h, stream);
}

// ----------------------------------------------------------------------- cuGetProcAddress
//
// The real driver decides which variant of a symbol the caller gets for its version and
// stream flags; the shim then swaps in its hook for exactly that variant (by the identity of the
// pointer the driver returned). It never picks a variant itself, so it cannot hand a caller an
// entry point with the wrong ABI.

namespace {
CUresult AnswerProcAddress(CUresult r, const char* symbol, void** pfn, int version,
                           cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (r != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return r;
  auto answer = tessera::shim::ResolveProcAddress(symbol, *pfn, version, flags);
  *pfn = answer.fn;
  if (!answer.refused) return r;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  return CUDA_ERROR_NOT_FOUND;
}
}  // namespace

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int version, cuuint64_t flags,
    CUdriverProcAddressQueryResult* status) {
  CUresult r =
      TESSERA_CALL_OR_UNSUPPORTED(cuGetProcAddress_v2, symbol, pfn, version, flags, status);
  return AnswerProcAddress(r, symbol, pfn, version, flags, status);
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                                                 int version, cuuint64_t flags) {
  CUresult r = TESSERA_CALL_OR_UNSUPPORTED(cuGetProcAddress, symbol, pfn, version, flags);
  return AnswerProcAddress(r, symbol, pfn, version, flags, nullptr);
}
