// A fake libcuda.so.1 for tests: the driver API entry points the shim and the test programs use,
// with real state behind them, loaded through the real dynamic loader.
//
//   - Device memory is host memory: cuMemAlloc sub-allocates from one sparse memfd mapped once
//     (no system call per allocation, as a driver's sub-allocator), so programs can write and
//     read it (cuMemcpy*, or directly) and export it over IPC.
//   - Every device byte is recorded in the shared fake machine (fake_machine.h), per process;
//     a dying process's bytes stop counting, as a real driver frees them.
//   - Virtual memory: reservations are PROT_NONE mappings, physical allocations are files mapped
//     into them; an allocation is freed when its last handle reference and its last mapping are
//     gone. DEVICE locations count on the device; HOST and HOST_NUMA are host memory. Exported
//     as a file descriptor, it lives on (counted in the machine, FakeShared) until no process
//     holds a handle, a mapping or a descriptor of it, as a real driver frees it.
//   - Stream-ordered pools grow by whole chunks (size rounded up to 2 MiB), reuse free chunks,
//     release what is above their release threshold at synchronisation and when trimmed.
//   - Graph memory: cuMemAllocAsync/cuMemFreeAsync into a capturing stream record allocation and
//     free nodes; a launch maps them from the device's graph memory, which stays reserved (and
//     charged) until cuDeviceGraphMemTrim. cuCtxSetLimit reserves the stack, FIFO and heap.
//   - Kernels run on the machine's per-device engine: "spin" takes the nanoseconds in its first
//     parameter, anything else takes no time. Stream capture records launches into graphs; a
//     graph launch runs them in order.
//   - cuGetProcAddress picks the variant of a symbol by version and stream flag (the newest
//     variant introduced at or before the requested version; _ptsz under
//     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
//   - With TESSERA_FAKE_CUDA_INTERNAL_ENTRY_POINTS=1, cuGetProcAddress returns internal entry
//     points (same behaviour, an address dlsym never gives), as real drivers may.
//   - CUDA_VISIBLE_DEVICES (indices or UUIDs) selects and orders devices.
// tessera_fake_symbol_name(fn) names any function this library exports, or an internal entry
// point by the export it stands for (for the loader tests).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "fake_cuda/fake_machine.h"
#include "shim/cuda_abi.h"

extern "C" {
typedef CUresult (*PFN_cuLaunch)(CUfunction);
typedef CUresult (*PFN_cuLaunchGrid)(CUfunction, int, int);
typedef CUresult (*PFN_cuLaunchGridAsync)(CUfunction, int, int, CUstream);
typedef CUresult (*PFN_cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode*);
typedef CUresult (*PFN_cuMemPoolImportFromShareableHandle)(CUmemoryPool*, void*,
                                                           CUmemAllocationHandleType,
                                                           unsigned long long);
}

// X(name, pfn type, introduced in CUDA version)
#define FAKE_EXPORTS(X)                                                                        \
  X(cuInit, PFN_cuInit, 2000)                                                                  \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion, 2020)                                          \
  X(cuGetErrorString, PFN_cuGetErrorString, 6000)                                              \
  X(cuGetErrorName, PFN_cuGetErrorName, 6000)                                                  \
  X(cuGetProcAddress, PFN_cuGetProcAddress, 11030)                                             \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v2, 12000)                                       \
  X(cuDeviceGet, PFN_cuDeviceGet, 2000)                                                        \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount, 2000)                                              \
  X(cuDeviceGetName, PFN_cuDeviceGetName, 2000)                                                \
  X(cuDeviceGetUuid, PFN_cuDeviceGetUuid, 9020)                                                \
  X(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid, 11040)                                            \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute, 2000)                                      \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem, 2000)                                              \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v2, 3020)                                        \
  X(cuCtxCreate_v2, PFN_cuCtxCreate_v2, 3020)                                                  \
  X(cuCtxCreate_v3, PFN_cuCtxCreate_v3, 0)                                                     \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v4, 13000)                                                 \
  X(cuCtxDestroy, PFN_cuCtxDestroy_v2, 2000)                                                   \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v2, 4000)                                                \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent, 4000)                                                \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent, 4000)                                                \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v2, 4000)                                        \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v2, 4000)                                          \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice, 2000)                                                  \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize, 2000)                                              \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain, 7000)                              \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v2, 11000)                     \
  X(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v2, 11000)                         \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState, 7000)                          \
  X(cuMemGetInfo, PFN_cuMemGetInfo, 2000)                                                      \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v2, 3020)                                                \
  X(cuMemAlloc, PFN_cuMemAlloc_v1, 2000)                                                       \
  X(cuMemAllocPitch, PFN_cuMemAllocPitch_v1, 2000)                                             \
  X(cuArrayCreate, PFN_cuArrayCreate_v1, 2000)                                                 \
  X(cuArray3DCreate, PFN_cuArray3DCreate_v1, 2000)                                             \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v2, 3020)                                                    \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v2, 3020)                                          \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged, 6000)                                            \
  X(cuMemFree_v2, PFN_cuMemFree_v2, 3020)                                                      \
  X(cuMemcpyHtoD_v2, PFN_cuMemcpyHtoD_v2, 3020)                                                \
  X(cuMemcpyDtoH_v2, PFN_cuMemcpyDtoH_v2, 3020)                                                \
  X(cuMemsetD8_v2, PFN_cuMemsetD8_v2, 3020)                                                    \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v2, 3020)                                              \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v2, 3020)                                          \
  X(cuArrayDestroy, PFN_cuArrayDestroy, 2000)                                                  \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate, 5000)                                  \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy, 5000)                                \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve, 10020)                                       \
  X(cuMemAddressFree, PFN_cuMemAddressFree, 10020)                                             \
  X(cuMemCreate, PFN_cuMemCreate, 10020)                                                       \
  X(cuMemRelease, PFN_cuMemRelease, 10020)                                                     \
  X(cuMemMap, PFN_cuMemMap, 10020)                                                             \
  X(cuMemUnmap, PFN_cuMemUnmap, 10020)                                                         \
  X(cuMemSetAccess, PFN_cuMemSetAccess, 10020)                                                 \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle, 11000)                       \
  X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity, 10020)                   \
  X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle, 10020)                     \
  X(cuMemImportFromShareableHandle, PFN_cuMemImportFromShareableHandle, 10020)                 \
  X(cuMemGetAllocationPropertiesFromHandle, PFN_cuMemGetAllocationPropertiesFromHandle, 10020) \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync, 11020)                                               \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync, 11020)                                          \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync, 11020)                               \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync, 11020)                          \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync, 11020)                                                 \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync, 11020)                                            \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate, 11020)                                               \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy, 11020)                                             \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo, 11020)                                               \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute, 11020)                                   \
  X(cuMemPoolSetAttribute, PFN_cuMemPoolSetAttribute, 11020)                                   \
  X(cuMemPoolImportFromShareableHandle, PFN_cuMemPoolImportFromShareableHandle, 11020)         \
  X(cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool, 11020)                           \
  X(cuDeviceGetMemPool, PFN_cuDeviceGetMemPool, 11020)                                         \
  X(cuDeviceSetMemPool, PFN_cuDeviceSetMemPool, 11020)                                         \
  X(cuIpcGetMemHandle, PFN_cuIpcGetMemHandle, 4010)                                            \
  X(cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle, 4010)                                          \
  X(cuIpcOpenMemHandle_v2, PFN_cuIpcOpenMemHandle_v2, 11000)                                   \
  X(cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle, 4010)                                        \
  X(cuStreamCreate, PFN_cuStreamCreate, 2000)                                                  \
  X(cuStreamDestroy_v2, PFN_cuStreamDestroy_v2, 4000)                                          \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize, 2000)                                        \
  X(cuStreamSynchronize_ptsz, PFN_cuStreamSynchronize, 7000)                                   \
  X(cuStreamQuery, PFN_cuStreamQuery, 2000)                                                    \
  X(cuStreamGetCtx, PFN_cuStreamGetCtx, 9020)                                                  \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing, 10000)                                       \
  X(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v2, 10010)                               \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture, 10000)                                         \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode, 10010)           \
  X(cuEventCreate, PFN_cuEventCreate, 2000)                                                    \
  X(cuEventRecord, PFN_cuEventRecord, 2000)                                                    \
  X(cuEventQuery, PFN_cuEventQuery, 2000)                                                      \
  X(cuEventSynchronize, PFN_cuEventSynchronize, 2000)                                          \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime, 2000)                                          \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v2, 4000)                                            \
  X(cuModuleLoadData, PFN_cuModuleLoadData, 2000)                                              \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction, 2000)                                        \
  X(cuModuleUnload, PFN_cuModuleUnload, 2000)                                                  \
  X(cuLaunchKernel, PFN_cuLaunchKernel, 4000)                                                  \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel, 7000)                                             \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx, 11060)                                             \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx, 11060)                                        \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel, 9000)                            \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel, 9000)                       \
  X(cuLaunchCooperativeKernelMultiDevice, PFN_cuLaunchCooperativeKernelMultiDevice, 9000)      \
  X(cuLaunch, PFN_cuLaunch, 2000)                                                              \
  X(cuLaunchGrid, PFN_cuLaunchGrid, 2000)                                                      \
  X(cuLaunchGridAsync, PFN_cuLaunchGridAsync, 2000)                                            \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags, 11040)                       \
  X(cuGraphLaunch, PFN_cuGraphLaunch, 10000)                                                   \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch, 10000)                                              \
  X(cuGraphUpload, PFN_cuGraphUpload, 11010)                                                   \
  X(cuGraphDestroy, PFN_cuGraphDestroy, 10000)                                                 \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy, 10000)                                         \
  X(cuGraphGetNodes, PFN_cuGraphGetNodes, 10000)                                               \
  X(cuGraphNodeGetType, PFN_cuGraphNodeGetType, 10000)                                         \
  X(cuGraphMemAllocNodeGetParams, PFN_cuGraphMemAllocNodeGetParams, 11040)                     \
  X(cuDeviceGetGraphMemAttribute, PFN_cuDeviceGetGraphMemAttribute, 11040)                     \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim, 11040)                                     \
  X(cuCtxSetLimit, PFN_cuCtxSetLimit, 3010)

#define FAKE_DECLARE(name, type, since) std::remove_pointer_t<type> name;
extern "C" {
FAKE_EXPORTS(FAKE_DECLARE)
}
#undef FAKE_DECLARE

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

using tessera::fake::Execute;
using tessera::fake::FakeMachine;
using tessera::fake::Machine;
using tessera::fake::MonoNs;
using tessera::fake::Self;

constexpr uint64_t kGranule = 2ULL << 20;
constexpr uint32_t kIpcMagic = 0x1FCA11C0;

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

void SleepUntil(int64_t mono_ns) {
  timespec ts{};
  ts.tv_sec = mono_ns / 1'000'000'000LL;
  ts.tv_nsec = mono_ns % 1'000'000'000LL;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

// ----------------------------------------------------------------------------- objects

struct Ctx {
  int device;  // machine index
  bool primary = false;
  bool alive = true;
  uint64_t limit_bytes[3] = {};  // reserved for cuCtxSetLimit's stack, printf FIFO and heap
};

// A kernel (duration), or a graph memory node: an allocation of `bytes` on `device` at `dptr`
// (CU_GRAPH_NODE_TYPE_MEM_ALLOC), or the free of one (MEM_FREE).
struct GraphNode {
  int64_t duration_ns = 0;
  int type = CU_GRAPH_NODE_TYPE_KERNEL;
  uint64_t bytes = 0;
  int device = 0;  // machine index
  CUdeviceptr dptr = 0;
};
struct Graph {
  std::vector<GraphNode> nodes;
};
struct GraphExec {
  std::vector<GraphNode> nodes;
};

struct Stream {
  int device = 0;
  std::atomic<int64_t> tail{0};
  Graph* capture = nullptr;
};

struct Event {
  std::atomic<int64_t> time{-1};
};

struct Function {
  std::string name;
};
struct Module {
  std::vector<std::unique_ptr<Function>> functions;
};

struct Pool;
struct Chunk {
  uint64_t size = 0;
  void* base = nullptr;
  bool in_use = false;
};

struct Pool {
  int device = 0;  // machine index
  bool host = false;
  uint64_t threshold = 0;
  std::vector<std::unique_ptr<Chunk>> chunks;
  uint64_t reserved = 0, used = 0, reserved_high = 0, used_high = 0;
  uint64_t live = 0;
  bool destroyed = false;
};

enum class Kind { kLinear, kManaged, kPool, kIpc };

struct Alloc {
  uint64_t bytes = 0;  // charged to the ledger
  int device = -1;
  Ctx* ctx = nullptr;
  Kind kind = Kind::kLinear;
  void* base = nullptr;
  size_t map_len = 0;
  int fd = -1;                // an IPC import's own mapping has none; arena memory uses the arena's
  int64_t arena_offset = -1;  // linear memory: where in the arena
  Pool* pool = nullptr;
  Chunk* chunk = nullptr;
};

struct ArrayObj {
  uint64_t bytes;
  int device;
  Ctx* ctx;
};

struct Physical {
  uint64_t size = 0;
  int device = -1;  // machine index; -1 host; -2 imported from something the fake does not know
  int fd = -1;
  uint32_t refs = 1;
  uint32_t maps = 0;
  std::string path;     // the backing file, when it has a name (device memory on a machine file)
  bool shared = false;  // exported, or imported from an export: its bytes are the machine's entry
};

struct Mapping {
  uint64_t size;
  CUmemGenericAllocationHandle handle;
};

struct IpcHandle {
  uint32_t magic;
  uint32_t pid;
  int32_t fd;
  uint32_t reserved;
  uint64_t size;
  uint64_t offset;
  uint8_t pad[32];
};
static_assert(sizeof(IpcHandle) == sizeof(CUipcMemHandle));

// --------------------------------------------------------------------------- the driver

struct Driver {
  std::mutex mu;
  bool initialised = false;
  std::vector<int> visible;  // ordinal -> machine index
  std::unordered_map<CUdeviceptr, Alloc> allocs;
  std::unordered_map<void*, ArrayObj> arrays;
  std::unordered_map<CUmemGenericAllocationHandle, Physical> physical;
  std::map<CUdeviceptr, Mapping> mappings;
  std::map<CUdeviceptr, uint64_t> reservations;
  CUmemGenericAllocationHandle next_handle = 0x1000;
  std::unordered_map<int, std::unique_ptr<Ctx>> primary;  // by ordinal
  std::unordered_map<int, int> primary_refs;
  std::vector<std::unique_ptr<Ctx>> contexts;
  std::vector<std::unique_ptr<Stream>> streams;
  std::unordered_map<int, std::unique_ptr<Stream>> legacy;  // by ordinal
  std::unordered_map<int, std::unique_ptr<Pool>> default_pool;
  std::unordered_map<int, Pool*> current_pool;
  std::vector<std::unique_ptr<Pool>> pools;
  std::vector<std::unique_ptr<Module>> modules;  // kept: their functions may still be launched
  // Graph memory, per machine device: what graph allocations use and what the driver reserved
  // for them (kept after they are freed, for the next launch, until trimmed).
  struct GraphMemory {
    uint64_t used = 0, reserved = 0, used_high = 0, reserved_high = 0;
  };
  std::unordered_map<int, GraphMemory> graph_memory;
  std::unordered_map<CUdeviceptr, GraphNode> graph_live;  // graph allocations not freed yet
  CUdeviceptr next_graph_ptr = 0x7e0000000000ULL;
};

Driver& D() {
  static Driver* d = new Driver();
  return *d;
}

thread_local std::vector<CUcontext> t_ctx_stack;
thread_local std::unordered_map<int, std::unique_ptr<Stream>> t_per_thread;
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

Ctx* AsCtx(CUcontext c) { return reinterpret_cast<Ctx*>(c); }
CUcontext AsHandle(Ctx* c) { return reinterpret_cast<CUcontext>(c); }

Ctx* Current() {
  if (t_ctx_stack.empty()) return nullptr;
  Ctx* c = AsCtx(t_ctx_stack.back());
  return (c != nullptr && c->alive) ? c : nullptr;
}

int Ordinal(int machine_index) {
  auto& v = D().visible;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == machine_index) return static_cast<int>(i);
  }
  return -1;
}

bool ValidOrdinal(CUdevice dev) {
  return dev >= 0 && static_cast<size_t>(dev) < D().visible.size();
}

// Caller holds D().mu.
bool Charge(int device, uint64_t bytes) {
  FakeMachine* m = Machine();
  if (tessera::fake::LiveBytes(*m, device) + bytes > m->devices[device].total_bytes) return false;
  auto* self = Self();
  uint64_t now = self->bytes[device].fetch_add(bytes, std::memory_order_acq_rel) + bytes;
  uint64_t peak = self->peak[device].load(std::memory_order_relaxed);
  while (peak < now && !self->peak[device].compare_exchange_weak(peak, now)) {
  }
  return true;
}

void Uncharge(int device, uint64_t bytes) {
  if (device < 0) return;
  Self()->bytes[device].fetch_sub(bytes, std::memory_order_acq_rel);
}

// Linear device memory comes from one sparse memfd mapped once (an arena), so that an allocation
// costs no system call, as a driver's sub-allocator does, and any of it can be exported over IPC
// (the importer maps the same file at the allocation's offset). Caller holds D().mu.
struct Arena {
  int fd = -1;
  char* base = nullptr;
  uint64_t bytes = 0;  // virtual only: pages exist once written
  uint64_t top = 0;
  std::map<uint64_t, uint64_t> free;  // offset -> size
};

Arena& TheArena() {
  static Arena* a = [] {
    auto* arena = new Arena();
    arena->fd = ::memfd_create("fake-cuda-arena", MFD_CLOEXEC);
    // As large as the address space allows (sanitizers reserve much of it).
    for (uint64_t bytes : {1ULL << 40, 1ULL << 38, 1ULL << 36, 1ULL << 34}) {
      if (arena->fd < 0 || ::ftruncate(arena->fd, static_cast<off_t>(bytes)) != 0) continue;
      void* p =
          ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, arena->fd, 0);
      if (p == MAP_FAILED) continue;
      arena->base = static_cast<char*>(p);
      arena->bytes = bytes;
      break;
    }
    return arena;
  }();
  return *a;
}

int64_t ArenaAlloc(uint64_t size) {
  Arena& a = TheArena();
  if (a.base == nullptr) return -1;
  size = RoundUp(std::max<uint64_t>(size, 1), 4096);
  for (auto it = a.free.begin(); it != a.free.end(); ++it) {
    if (it->second < size) continue;
    uint64_t off = it->first, left = it->second - size;
    a.free.erase(it);
    if (left > 0) a.free[off + size] = left;
    return static_cast<int64_t>(off);
  }
  if (a.top + size > a.bytes) return -1;
  uint64_t off = a.top;
  a.top += size;
  return static_cast<int64_t>(off);
}

void ArenaFree(int64_t offset, uint64_t size) {
  Arena& a = TheArena();
  size = RoundUp(std::max<uint64_t>(size, 1), 4096);
  uint64_t off = static_cast<uint64_t>(offset);
  auto next = a.free.lower_bound(off);
  if (next != a.free.end() && next->first == off + size) {
    size += next->second;
    a.free.erase(next);
  }
  auto prev = a.free.lower_bound(off);
  if (prev != a.free.begin()) {
    --prev;
    if (prev->first + prev->second == off) {
      prev->second += size;
      return;
    }
  }
  a.free[off] = size;
}

Stream* StreamOf(CUstream s, bool ptsz) {
  Ctx* c = Current();
  int ordinal = c != nullptr ? Ordinal(c->device) : 0;
  if (s == nullptr && ptsz) s = TESSERA_CU_STREAM_PER_THREAD;
  if (s == TESSERA_CU_STREAM_PER_THREAD) {
    auto& st = t_per_thread[ordinal];
    if (!st) {
      st = std::make_unique<Stream>();
      st->device = c != nullptr ? c->device : D().visible.empty() ? 0 : D().visible[0];
    }
    return st.get();
  }
  if (s == nullptr || s == TESSERA_CU_STREAM_LEGACY) {
    std::lock_guard<std::mutex> lock(D().mu);
    auto& st = D().legacy[ordinal];
    if (!st) {
      st = std::make_unique<Stream>();
      st->device = c != nullptr ? c->device : D().visible.empty() ? 0 : D().visible[0];
    }
    return st.get();
  }
  return reinterpret_cast<Stream*>(s);
}

// Pools release what is above their threshold at a synchronisation. Caller holds D().mu.
void ReleaseAbove(Pool* p, uint64_t keep) {
  for (auto it = p->chunks.begin(); it != p->chunks.end() && p->reserved > keep;) {
    Chunk* c = it->get();
    if (c->in_use) {
      ++it;
      continue;
    }
    ::munmap(c->base, c->size);
    p->reserved -= c->size;
    if (!p->host) Uncharge(p->device, c->size);
    it = p->chunks.erase(it);
  }
}

void SyncPools(int device) {
  std::lock_guard<std::mutex> lock(D().mu);
  for (auto& p : D().pools) {
    if (p->device == device || device < 0) ReleaseAbove(p.get(), std::max(p->threshold, p->used));
  }
  for (auto& [ord, p] : D().default_pool) {
    if (p->device == device || device < 0) ReleaseAbove(p.get(), std::max(p->threshold, p->used));
  }
}

Pool* DefaultPool(int ordinal) {
  auto& p = D().default_pool[ordinal];
  if (!p) {
    p = std::make_unique<Pool>();
    p->device = D().visible[ordinal];
  }
  return p.get();
}

Pool* CurrentPool(int ordinal) {
  auto it = D().current_pool.find(ordinal);
  if (it != D().current_pool.end()) return it->second;
  return DefaultPool(ordinal);
}

// Caller holds D().mu.
CUresult PoolAllocLocked(Pool* p, uint64_t size, CUdeviceptr* out, Ctx* ctx) {
  if (p->destroyed) return CUDA_ERROR_INVALID_VALUE;
  Chunk* best = nullptr;
  for (auto& c : p->chunks) {
    if (!c->in_use && c->size >= size && (best == nullptr || c->size < best->size)) {
      best = c.get();
    }
  }
  if (best == nullptr) {
    uint64_t grow = RoundUp(std::max<uint64_t>(size, 1), kGranule);
    if (!p->host && !Charge(p->device, grow)) return CUDA_ERROR_OUT_OF_MEMORY;
    void* base = ::mmap(nullptr, grow, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      if (!p->host) Uncharge(p->device, grow);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto chunk = std::make_unique<Chunk>();
    chunk->size = grow;
    chunk->base = base;
    best = chunk.get();
    p->chunks.push_back(std::move(chunk));
    p->reserved += grow;
    p->reserved_high = std::max(p->reserved_high, p->reserved);
  }
  best->in_use = true;
  p->used += best->size;
  p->used_high = std::max(p->used_high, p->used);
  ++p->live;
  Alloc a;
  a.kind = Kind::kPool;
  a.device = p->device;
  a.ctx = ctx;
  a.base = best->base;
  a.pool = p;
  a.chunk = best;
  *out = reinterpret_cast<CUdeviceptr>(best->base);
  D().allocs[*out] = a;
  return CUDA_SUCCESS;
}

// Caller holds D().mu.
void PoolFreeLocked(const Alloc& a) {
  Pool* p = a.pool;
  a.chunk->in_use = false;
  p->used -= a.chunk->size;
  if (p->live > 0) --p->live;
  if (p->destroyed && p->live == 0) ReleaseAbove(p, 0);
}

// Frees one linear/managed/ipc allocation's backing. Caller holds D().mu.
void FreeBacking(const Alloc& a) {
  if (a.arena_offset >= 0) {
    ArenaFree(a.arena_offset, a.map_len);
  } else if (a.base != nullptr) {
    ::munmap(a.base, a.map_len);
  }
  if (a.fd >= 0) ::close(a.fd);
  if (a.kind != Kind::kIpc) Uncharge(a.device, a.bytes);
}

// A context's allocations are freed when it is destroyed. Caller holds D().mu.
void DestroyContextLocked(Ctx* c) {
  for (uint64_t& reserved : c->limit_bytes) {
    Uncharge(c->device, reserved);
    reserved = 0;
  }
  for (auto it = D().allocs.begin(); it != D().allocs.end();) {
    if (it->second.ctx == c && it->second.kind != Kind::kPool) {
      FreeBacking(it->second);
      it = D().allocs.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = D().arrays.begin(); it != D().arrays.end();) {
    if (it->second.ctx == c) {
      Uncharge(it->second.device, it->second.bytes);
      it = D().arrays.erase(it);  // the handle's memory stays allocated: it may still be named
    } else {
      ++it;
    }
  }
  c->alive = false;
}

// A physical allocation's backing store: a named file next to the machine file for device memory
// (so that an exported allocation's liveness can be tested from any process, FakeShared), else a
// memfd. Returns the descriptor, or -1.
int CreateBacking(uint64_t size, bool device, std::string* path) {
  static std::atomic<uint64_t> seq{0};
  const char* machine = std::getenv("TESSERA_FAKE_GPU_MACHINE");
  int fd = -1;
  if (device && machine != nullptr && machine[0] != '\0') {
    std::string dir = std::string(machine) + ".vmm";
    ::mkdir(dir.c_str(), 0700);
    *path = dir + "/" + std::to_string(::getpid()) + "-" + std::to_string(seq.fetch_add(1));
    fd = ::open(path->c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) path->clear();
  }
  if (fd < 0) fd = ::memfd_create("fake-cuda-vmm", MFD_CLOEXEC);
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    if (!path->empty()) ::unlink(path->c_str());
    return -1;
  }
  return fd;
}

// Caller holds D().mu. A private allocation is freed with this process's last handle and
// mapping; a shared one lives on in the machine until no description of it is open anywhere.
void MaybeFreePhysical(CUmemGenericAllocationHandle h) {
  auto it = D().physical.find(h);
  if (it == D().physical.end()) return;
  Physical& p = it->second;
  if (p.refs > 0 || p.maps > 0) return;
  if (p.fd >= 0) ::close(p.fd);
  if (!p.shared) {
    if (p.device >= 0) Uncharge(p.device, p.size);
    if (!p.path.empty()) ::unlink(p.path.c_str());
  }
  D().physical.erase(it);
}

int64_t KernelDuration(CUfunction f, void** params) {
  if (f == nullptr) return 0;
  const auto* fn = reinterpret_cast<const Function*>(f);
  if (fn->name.rfind("spin", 0) == 0 && params != nullptr && params[0] != nullptr) {
    return static_cast<int64_t>(*static_cast<const uint64_t*>(params[0]));
  }
  return 0;
}

CUresult Launch(CUfunction f, CUstream s, void** params, bool ptsz) {
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Stream* st = StreamOf(s, ptsz);
  int64_t duration = KernelDuration(f, params);
  if (st->capture != nullptr) {
    st->capture->nodes.push_back(GraphNode{duration});  // a kernel node
    return CUDA_SUCCESS;
  }
  if (duration > 0) {
    st->tail.store(Execute(st->device, st->tail.load(), duration));
  }
  return CUDA_SUCCESS;
}

CUresult SyncStream(CUstream s, bool ptsz) {
  if (Current() == nullptr && s == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* st = StreamOf(s, ptsz);
  SleepUntil(st->tail.load());
  SyncPools(st->device);
  return CUDA_SUCCESS;
}

// A driver-internal entry point that does what export F does at a different address: what a
// real driver's cuGetProcAddress may hand out instead of the function dlsym finds.
template <auto F>
struct Internal;
template <typename R, typename... A, R (*F)(A...)>
struct Internal<F> {
  static R Call(A... a) { return F(a...); }
};

struct ExportEntry {
  const char* name;
  void* fn;
  void* internal;  // the same function at an address dlsym never returns
  int since;
};

#define FAKE_ENTRY(name, type, since)       \
  {#name, reinterpret_cast<void*>(&::name), \
   reinterpret_cast<void*>(&Internal<static_cast<type>(&::name)>::Call), since},
const ExportEntry kExports[] = {FAKE_EXPORTS(FAKE_ENTRY)};
#undef FAKE_ENTRY

// TESSERA_FAKE_CUDA_INTERNAL_ENTRY_POINTS=1: cuGetProcAddress answers with internal entry
// points, never the exported ones (read once).
bool InternalEntryPoints() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_FAKE_CUDA_INTERNAL_ENTRY_POINTS");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

std::string BaseName(const std::string& name, bool* ptsz) {
  std::string s = name;
  *ptsz = false;
  for (const char* suffix : {"_ptsz", "_ptds"}) {
    size_t n = std::strlen(suffix);
    if (s.size() > n && s.compare(s.size() - n, n, suffix) == 0) {
      s.resize(s.size() - n);
      *ptsz = true;
    }
  }
  for (const char* suffix : {"_v2", "_v3", "_v4"}) {
    size_t n = std::strlen(suffix);
    if (s.size() > n && s.compare(s.size() - n, n, suffix) == 0) s.resize(s.size() - n);
  }
  return s;
}

CUresult ProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                     CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ExportEntry* best = nullptr;
  const ExportEntry* best_pt = nullptr;
  bool found = false;
  for (const auto& e : kExports) {
    if (e.since == 0) continue;  // not reachable by base name
    bool ptsz = false;
    if (BaseName(e.name, &ptsz) != symbol) continue;
    found = true;
    if (e.since > version) continue;
    auto& slot = ptsz ? best_pt : best;
    if (slot == nullptr || e.since > slot->since) slot = &e;
  }
  const ExportEntry* chosen = (per_thread && best_pt != nullptr) ? best_pt : best;
  if (chosen == nullptr) {
    if (status != nullptr) {
      *status =
          found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = InternalEntryPoints() ? chosen->internal : chosen->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

void ParseVisible() {
  FakeMachine* m = Machine();
  auto& v = D().visible;
  v.clear();
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) {
    for (uint32_t i = 0; i < m->device_count; ++i) v.push_back(static_cast<int>(i));
    return;
  }
  std::string s = env;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? s.size() + 1 : comma + 1;
    if (item.empty()) break;
    int index = -1;
    if (item.rfind("GPU-", 0) == 0) {
      for (uint32_t i = 0; i < m->device_count; ++i) {
        if (item == m->devices[i].uuid) index = static_cast<int>(i);
      }
    } else {
      char* end = nullptr;
      long n = std::strtol(item.c_str(), &end, 10);
      if (*end == '\0' && n >= 0 && n < static_cast<long>(m->device_count)) {
        index = static_cast<int>(n);
      }
    }
    if (index < 0) break;  // the driver stops at the first invalid entry
    v.push_back(index);
  }
}

}  // namespace

// --------------------------------------------------------------------------- exports

FAKE_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  if (!D().initialised) {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
    ParseVisible();
    D().initialised = true;
  }
  return D().visible.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

FAKE_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = Machine()->driver_version;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *str = "no error";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *str = "out of memory";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *str = "invalid argument";
      break;
    case CUDA_ERROR_NOT_FOUND:
      *str = "named symbol not found";
      break;
    default:
      *str = "unknown error";
      break;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *str = "CUDA_SUCCESS";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *str = "CUDA_ERROR_OUT_OF_MEMORY";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *str = "CUDA_ERROR_INVALID_VALUE";
      break;
    default:
      *str = "CUDA_ERROR_UNKNOWN";
      break;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return ProcAddress(symbol, pfn, version, flags, nullptr);
}

FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status) {
  return ProcAddress(symbol, pfn, version, flags, status);
}

FAKE_API CUresult cuDeviceGet(CUdevice* dev, int ordinal) {
  if (!D().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetCount(int* count) {
  if (!D().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(D().visible.size());
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "%s", Machine()->devices[D().visible[dev]].name);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // "GPU-aabbccdd-eeff-..." back to 16 bytes.
  const char* s = Machine()->devices[D().visible[dev]].uuid + 4;
  int n = 0;
  for (; *s != '\0' && n < 16; ++s) {
    if (*s == '-') continue;
    unsigned int byte = 0;
    std::sscanf(s, "%2x", &byte);
    uuid->bytes[n++] = static_cast<char>(byte);
    ++s;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid(uuid, dev);
}

FAKE_API CUresult cuDeviceGetAttribute(int* value, int attrib, CUdevice dev) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = static_cast<int>(Machine()->devices[D().visible[dev]].sm_count);
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = 9;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *value = 2048;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *value = 512;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *value = 32;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    default:
      *value = 0;
      return CUDA_SUCCESS;
  }
}

FAKE_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = Machine()->devices[D().visible[dev]].total_bytes;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t b = 0;
  CUresult r = cuDeviceTotalMem_v2(&b, dev);
  if (r == CUDA_SUCCESS) *bytes = static_cast<unsigned int>(std::min<size_t>(b, 0xFFFFFFFFu));
  return r;
}

// ---------------------------------------------------------------------------- contexts

namespace {
CUresult CreateContext(CUcontext* out, CUdevice dev) {
  if (!D().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto c = std::make_unique<Ctx>();
  c->device = D().visible[dev];
  Self()->has_context[c->device].store(1);
  *out = AsHandle(c.get());
  D().contexts.push_back(std::move(c));
  t_ctx_stack.push_back(*out);
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_API CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  (void)flags;
  return CreateContext(ctx, dev);
}

FAKE_API CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int n,
                                 unsigned int flags, CUdevice dev) {
  (void)params;
  (void)n;
  (void)flags;
  return CreateContext(ctx, dev);
}

FAKE_API CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags,
                                 CUdevice dev) {
  (void)params;
  (void)flags;
  return CreateContext(ctx, dev);
}

FAKE_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  Ctx* c = AsCtx(ctx);
  if (c == nullptr || !c->alive || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> lock(D().mu);
  DestroyContextLocked(c);
  for (auto it = t_ctx_stack.begin(); it != t_ctx_stack.end();) {
    it = (*it == ctx) ? t_ctx_stack.erase(it) : it + 1;
  }
  return CUDA_SUCCESS;
}

// Raising a limit reserves device memory for the context: the heap and the printf FIFO at their
// size, the stack for every thread the device can hold; the defaults (1 KiB of stack, 1 MiB of
// FIFO, 8 MiB of heap) come with the context.
FAKE_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (limit < CU_LIMIT_STACK_SIZE || limit > CU_LIMIT_MALLOC_HEAP_SIZE) return CUDA_SUCCESS;
  const uint64_t threads = uint64_t{Machine()->devices[c->device].sm_count} * 2048;
  const uint64_t base[] = {1024, 1ULL << 20, 8ULL << 20};
  uint64_t extra = value > base[limit] ? value - base[limit] : 0;
  if (limit == CU_LIMIT_STACK_SIZE) extra *= threads;
  std::lock_guard<std::mutex> lock(D().mu);
  uint64_t& reserved = c->limit_bytes[limit];
  if (extra > reserved && !Charge(c->device, extra - reserved)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (extra < reserved) Uncharge(c->device, reserved - extra);
  reserved = extra;
  return CUDA_SUCCESS;
}

// The CUDA 2.0 variant (the shim intercepts only _v2): what cuGetProcAddress picks below 4000.
FAKE_API CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

FAKE_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = t_ctx_stack.empty() ? nullptr : t_ctx_stack.back();
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx == nullptr) {
    if (!t_ctx_stack.empty()) t_ctx_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (t_ctx_stack.empty()) {
    t_ctx_stack.push_back(ctx);
  } else {
    t_ctx_stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  t_ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxGetDevice(CUdevice* dev) {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *dev = Ordinal(c->device);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuCtxSynchronize() {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  int64_t until = 0;
  {
    std::lock_guard<std::mutex> lock(D().mu);
    for (auto& s : D().streams) {
      if (s->device == c->device) until = std::max(until, s->tail.load());
    }
    for (auto& [ord, s] : D().legacy) {
      if (s->device == c->device) until = std::max(until, s->tail.load());
    }
  }
  for (auto& [ord, s] : t_per_thread) {
    if (s->device == c->device) until = std::max(until, s->tail.load());
  }
  SleepUntil(until);
  SyncPools(c->device);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (!D().initialised) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto& p = D().primary[dev];
  if (!p || !p->alive) {
    p = std::make_unique<Ctx>();
    p->device = D().visible[dev];
    p->primary = true;
    Self()->has_context[p->device].store(1);
  }
  ++D().primary_refs[dev];
  *ctx = AsHandle(p.get());
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto& refs = D().primary_refs[dev];
  if (refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--refs == 0 && D().primary[dev]) DestroyContextLocked(D().primary[dev].get());
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  if (D().primary[dev] && D().primary[dev]->alive) DestroyContextLocked(D().primary[dev].get());
  D().primary_refs[dev] = 0;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  if (flags != nullptr) *flags = 0;
  if (active != nullptr) *active = (D().primary[dev] && D().primary[dev]->alive) ? 1 : 0;
  return CUDA_SUCCESS;
}

// ------------------------------------------------------------------------------ memory

FAKE_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeMachine* m = Machine();
  uint64_t used = tessera::fake::LiveBytes(*m, c->device);
  *total = m->devices[c->device].total_bytes;
  *free = used >= *total ? 0 : *total - used;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  size_t f = 0, t = 0;
  CUresult r = cuMemGetInfo_v2(&f, &t);
  if (r != CUDA_SUCCESS) return r;
  *free = static_cast<unsigned int>(std::min<size_t>(f, 0xFFFFFFFFu));
  *total = static_cast<unsigned int>(std::min<size_t>(t, 0xFFFFFFFFu));
  return r;
}

namespace {
CUresult AllocLinear(CUdeviceptr* dptr, uint64_t bytes, Kind kind) {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  if (!Charge(c->device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  Alloc a;
  a.bytes = bytes;
  a.device = c->device;
  a.ctx = c;
  a.kind = kind;
  a.map_len = bytes;
  a.arena_offset = ArenaAlloc(bytes);
  if (a.arena_offset < 0) {
    Uncharge(c->device, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a.base = TheArena().base + a.arena_offset;
  *dptr = reinterpret_cast<CUdeviceptr>(a.base);
  D().allocs[*dptr] = a;
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return AllocLinear(dptr, bytesize, Kind::kLinear);
}

FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                     unsigned int element_size) {
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Rows aligned to 512 bytes, as real devices do; wide rows to 1024 (exercises the shim's
  // settling on the pitch actually returned).
  size_t p = width > 4096 ? RoundUp(width, 1024) : RoundUp(width, 512);
  CUresult r = AllocLinear(dptr, uint64_t{p} * height, Kind::kLinear);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

// The CUDA 2.x ABI, as drivers still export it: 32-bit pointers and sizes. The memory is held
// like any allocation's (what a program reaching these past the shim's _v2 hooks would get); the
// pointer handed back is the low half of the fake's 64-bit address, so it serves to hold memory,
// not to use it.
FAKE_API CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult r = AllocLinear(&p, bytesize, Kind::kLinear);
  if (r == CUDA_SUCCESS) *dptr = static_cast<CUdeviceptr_v1>(p);
  return r;
}

FAKE_API CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pitch, unsigned int width,
                                  unsigned int height, unsigned int element_size) {
  if (dptr == nullptr || pitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  size_t p_pitch = 0;
  CUresult r = cuMemAllocPitch_v2(&p, &p_pitch, width, height, element_size);
  if (r == CUDA_SUCCESS) {
    *dptr = static_cast<CUdeviceptr_v1>(p);
    *pitch = static_cast<unsigned int>(p_pitch);
  }
  return r;
}

FAKE_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return AllocLinear(dptr, bytesize, Kind::kManaged);
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().allocs.find(dptr);
  if (it == D().allocs.end() || it->second.kind == Kind::kIpc) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.kind == Kind::kPool) {
    PoolFreeLocked(it->second);
  } else {
    FreeBacking(it->second);
  }
  D().allocs.erase(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  if (dst == 0 || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  if (dst == nullptr || src == 0) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  if (dst == 0) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(dst), v, n);
  return CUDA_SUCCESS;
}

// -------------------------------------------------------------------------------- arrays

namespace {
uint64_t FakeArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned int levels) {
  if (d.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) return 0;
  uint64_t element = 4;
  switch (d.Format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      element = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      element = 2;
      break;
    default:
      element = 4;
  }
  element *= std::max(d.NumChannels, 1u);
  uint64_t w = std::max<uint64_t>(d.Width, 1), h = d.Height, dep = d.Depth, total = 0;
  bool layered = d.Flags & CUDA_ARRAY3D_LAYERED;
  for (unsigned int l = 0; l < std::max(levels, 1u); ++l) {
    total += RoundUp(w * element, 512) * std::max<uint64_t>(h, 1) * std::max<uint64_t>(dep, 1);
    w = std::max<uint64_t>(w / 2, 1);
    if (h > 1) h /= 2;
    if (!layered && dep > 1) dep /= 2;
  }
  return RoundUp(total, 4096);
}

CUresult CreateArray(void** out, uint64_t bytes) {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  if (bytes > 0 && !Charge(c->device, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* h = ::operator new(1);
  D().arrays[h] = ArrayObj{bytes, c->device, c};
  *out = h;
  return CUDA_SUCCESS;
}

CUresult DestroyArray(void* h) {
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().arrays.find(h);
  if (it == D().arrays.end()) return CUDA_ERROR_INVALID_HANDLE;
  Uncharge(it->second.device, it->second.bytes);
  D().arrays.erase(it);
  ::operator delete(h);
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_API CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = desc->Width;
  d3.Height = desc->Height;
  d3.Format = desc->Format;
  d3.NumChannels = desc->NumChannels;
  return CreateArray(reinterpret_cast<void**>(array), FakeArrayBytes(d3, 1));
}

FAKE_API CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(reinterpret_cast<void**>(array), FakeArrayBytes(*desc, 1));
}

// The CUDA 2.x array descriptors: 32-bit extents.
struct ArrayDescriptorV1 {
  unsigned int Width, Height;
  CUarray_format Format;
  unsigned int NumChannels;
};
struct Array3DDescriptorV1 {
  unsigned int Width, Height, Depth;
  CUarray_format Format;
  unsigned int NumChannels, Flags;
};

FAKE_API CUresult cuArrayCreate(CUarray* array, const void* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* d = static_cast<const ArrayDescriptorV1*>(desc);
  CUDA_ARRAY_DESCRIPTOR d2{};
  d2.Width = d->Width;
  d2.Height = d->Height;
  d2.Format = d->Format;
  d2.NumChannels = d->NumChannels;
  return cuArrayCreate_v2(array, &d2);
}

FAKE_API CUresult cuArray3DCreate(CUarray* array, const void* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* d = static_cast<const Array3DDescriptorV1*>(desc);
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = d->Width;
  d3.Height = d->Height;
  d3.Depth = d->Depth;
  d3.Format = d->Format;
  d3.NumChannels = d->NumChannels;
  d3.Flags = d->Flags;
  return cuArray3DCreate_v2(array, &d3);
}

FAKE_API CUresult cuArrayDestroy(CUarray array) { return DestroyArray(array); }

FAKE_API CUresult cuMipmappedArrayCreate(CUmipmappedArray* h, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                         unsigned int levels) {
  if (desc == nullptr || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  return CreateArray(reinterpret_cast<void**>(h), FakeArrayBytes(*desc, levels));
}

FAKE_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) { return DestroyArray(h); }

// ------------------------------------------------------------------------ virtual memory

FAKE_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                      CUdeviceptr addr, unsigned long long flags) {
  (void)addr;
  (void)flags;
  if (ptr == nullptr || size == 0 || size % kGranule != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t align = std::max<size_t>(alignment, kGranule);
  size_t len = size + align;
  void* raw = ::mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t base = RoundUp(reinterpret_cast<uintptr_t>(raw), align);
  uintptr_t raw_end = reinterpret_cast<uintptr_t>(raw) + len;
  if (base > reinterpret_cast<uintptr_t>(raw))
    ::munmap(raw, base - reinterpret_cast<uintptr_t>(raw));
  if (raw_end > base + size) ::munmap(reinterpret_cast<void*>(base + size), raw_end - base - size);
  std::lock_guard<std::mutex> lock(D().mu);
  D().reservations[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().reservations.find(ptr);
  if (it == D().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  ::munmap(reinterpret_cast<void*>(ptr), size);
  D().reservations.erase(it);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                const CUmemAllocationProp* prop,
                                                CUmemAllocationGranularity_flags option) {
  (void)option;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranule;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                              const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size % kGranule != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!ValidOrdinal(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
      device = D().visible[prop->location.id];
      break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
          prop->location.type == CU_MEM_LOCATION_TYPE_HOST) {
        return CUDA_ERROR_INVALID_VALUE;  // HOST allocations are not IPC capable
      }
      device = -1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;  // HOST_NUMA_CURRENT, INVALID, unknown
  }
  std::lock_guard<std::mutex> lock(D().mu);
  if (device >= 0 && !Charge(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  Physical p;
  p.size = size;
  p.device = device;
  p.fd = CreateBacking(size, device >= 0, &p.path);
  if (p.fd < 0) {
    if (device >= 0) Uncharge(device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = D().next_handle++;
  D().physical[*handle] = p;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().physical.find(h);
  if (it == D().physical.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.refs;
  MaybeFreePhysical(h);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                           CUmemGenericAllocationHandle h, unsigned long long flags) {
  if (flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().physical.find(h);
  if (it == D().physical.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (offset + size > it->second.size) return CUDA_ERROR_INVALID_VALUE;
  bool reserved = false;
  for (auto& [base, len] : D().reservations) {
    if (ptr >= base && ptr + size <= base + len) reserved = true;
  }
  if (!reserved) return CUDA_ERROR_INVALID_VALUE;
  void* p = ::mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, it->second.fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  ++it->second.maps;
  D().mappings[ptr] = Mapping{size, h};
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().mappings.find(ptr);
  if (it == D().mappings.end()) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUmemGenericAllocationHandle> touched;
  while (it != D().mappings.end() && it->first < ptr + size) {
    ::mmap(reinterpret_cast<void*>(it->first), it->second.size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    auto p = D().physical.find(it->second.handle);
    if (p != D().physical.end() && p->second.maps > 0) --p->second.maps;
    touched.push_back(it->second.handle);
    it = D().mappings.erase(it);
  }
  for (auto h : touched) MaybeFreePhysical(h);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                 size_t count) {
  (void)ptr;
  (void)size;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto a = reinterpret_cast<CUdeviceptr>(addr);
  auto it = D().mappings.upper_bound(a);
  if (it == D().mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (a >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto p = D().physical.find(it->second.handle);
  if (p == D().physical.end()) return CUDA_ERROR_INVALID_VALUE;
  ++p->second.refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

// Exporting makes device memory shared: from then on the machine's entry holds its bytes, and it
// lives while any description of its backing file is open (this process's, the exported
// descriptor and its copies in other processes, their mappings), as the driver frees an
// allocation only when every handle, mapping and shareable handle of it is gone.
FAKE_API CUresult cuMemExportToShareableHandle(void* out, CUmemGenericAllocationHandle h,
                                               CUmemAllocationHandleType type,
                                               unsigned long long flags) {
  (void)flags;
  if (out == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().physical.find(h);
  if (it == D().physical.end()) return CUDA_ERROR_INVALID_HANDLE;
  Physical& p = it->second;
  if (!p.shared && p.device >= 0 && !p.path.empty()) {
    struct flock fl {};
    fl.l_type = F_RDLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    struct stat st {};
    if (::fcntl(p.fd, F_OFD_SETLK, &fl) != 0 || ::fstat(p.fd, &st) != 0 ||
        tessera::fake::AddShared(p.device, p.size, st.st_ino, p.path) == nullptr) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    Uncharge(p.device, p.size);  // the machine's entry holds it now
    p.shared = true;
  }
  *static_cast<int*>(out) = ::dup(p.fd);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                 void* os_handle, CUmemAllocationHandleType type) {
  if (handle == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  Physical p;
  p.size = static_cast<uint64_t>(st.st_size);
  p.device = -2;  // not an export the fake knows: nobody's memory
  p.fd = -1;
  if (const tessera::fake::FakeShared* shared = tessera::fake::FindShared(st.st_ino)) {
    // A handle of its own (a description of its own, locked like every holder's), as a driver's
    // import does not depend on the descriptor it was given, which the program may close.
    struct flock fl {};
    fl.l_type = F_RDLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    p.fd = ::open(shared->path, O_RDWR | O_CLOEXEC);
    if (p.fd < 0 || ::fcntl(p.fd, F_OFD_SETLK, &fl) != 0) {
      if (p.fd >= 0) ::close(p.fd);
      return CUDA_ERROR_INVALID_VALUE;
    }
    p.size = shared->bytes;
    p.device = static_cast<int>(shared->device);
    p.shared = true;
  }
  if (p.fd < 0) p.fd = ::dup(fd);
  *handle = D().next_handle++;
  D().physical[*handle] = p;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                         CUmemGenericAllocationHandle h) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().physical.find(h);
  if (it == D().physical.end()) return CUDA_ERROR_INVALID_HANDLE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  if (it->second.device >= 0) {
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = Ordinal(it->second.device);
  } else {
    prop->location.type = CU_MEM_LOCATION_TYPE_HOST;
  }
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return CUDA_SUCCESS;
}

// ----------------------------------------------------------------- stream-ordered memory

namespace {
CUresult AllocAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream s, bool ptsz) {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = StreamOf(s, ptsz);
  std::lock_guard<std::mutex> lock(D().mu);
  if (st->capture != nullptr) {  // recorded as a graph allocation, made when the graph runs
    GraphNode n;
    n.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    n.bytes = RoundUp(size, kGranule);
    n.device = st->device;
    n.dptr = D().next_graph_ptr;
    D().next_graph_ptr += n.bytes;
    st->capture->nodes.push_back(n);
    *dptr = n.dptr;
    return CUDA_SUCCESS;
  }
  Pool* p = pool != nullptr ? reinterpret_cast<Pool*>(pool) : CurrentPool(Ordinal(st->device));
  return PoolAllocLocked(p, size, dptr, c);
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream s, bool ptsz) {
  Stream* st = StreamOf(s, ptsz);
  std::lock_guard<std::mutex> lock(D().mu);
  if (st->capture != nullptr) {  // a free node
    GraphNode n;
    n.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    n.dptr = dptr;
    st->capture->nodes.push_back(n);
    return CUDA_SUCCESS;
  }
  if (auto g = D().graph_live.find(dptr); g != D().graph_live.end()) {  // a graph's allocation
    D().graph_memory[g->second.device].used -= g->second.bytes;
    D().graph_live.erase(g);
    return CUDA_SUCCESS;
  }
  auto it = D().allocs.find(dptr);
  if (it == D().allocs.end() || it->second.kind != Kind::kPool) return CUDA_ERROR_INVALID_VALUE;
  PoolFreeLocked(it->second);
  D().allocs.erase(it);
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  return AllocAsync(dptr, size, nullptr, s, false);
}
FAKE_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream s) {
  return AllocAsync(dptr, size, nullptr, s, true);
}
FAKE_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                          CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, size, pool, s, false);
}
FAKE_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                               CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, size, pool, s, true);
}
FAKE_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return FreeAsync(dptr, s, false); }
FAKE_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return FreeAsync(dptr, s, true);
}

FAKE_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  auto p = std::make_unique<Pool>();
  switch (props->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      if (!ValidOrdinal(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
      p->device = D().visible[props->location.id];
      break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      p->host = true;
      p->device = -1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lock(D().mu);
  *pool = reinterpret_cast<CUmemoryPool>(p.get());
  D().pools.push_back(std::move(p));
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto* p = reinterpret_cast<Pool*>(pool);
  p->destroyed = true;
  if (p->live == 0) ReleaseAbove(p, 0);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  ReleaseAbove(reinterpret_cast<Pool*>(pool), keep);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (pool == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto* p = reinterpret_cast<Pool*>(pool);
  auto* v = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *v = p->threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *v = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *v = p->reserved_high;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *v = p->used;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *v = p->used_high;
      break;
    default:
      *static_cast<int*>(value) = 0;
      break;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (pool == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto* p = reinterpret_cast<Pool*>(pool);
  auto v = *static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->threshold = v;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      p->reserved_high = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      p->used_high = p->used;
      break;
    default:
      break;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool, void* handle,
                                                     CUmemAllocationHandleType type,
                                                     unsigned long long flags) {
  (void)pool;
  (void)handle;
  (void)type;
  (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

FAKE_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  *pool = reinterpret_cast<CUmemoryPool>(DefaultPool(dev));
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  *pool = reinterpret_cast<CUmemoryPool>(CurrentPool(dev));
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  if (!ValidOrdinal(dev) || pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  D().current_pool[dev] = reinterpret_cast<Pool*>(pool);
  return CUDA_SUCCESS;
}

// ----------------------------------------------------------------------------------- IPC

FAKE_API CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().allocs.find(dptr);
  if (it == D().allocs.end() || it->second.arena_offset < 0) return CUDA_ERROR_INVALID_VALUE;
  IpcHandle h{};
  h.magic = kIpcMagic;
  h.pid = static_cast<uint32_t>(::getpid());
  h.fd = TheArena().fd;
  h.offset = static_cast<uint64_t>(it->second.arena_offset);
  h.size = it->second.map_len;
  std::memcpy(handle, &h, sizeof(h));
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle,
                                        unsigned int flags) {
  (void)flags;
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  IpcHandle h{};
  std::memcpy(&h, &handle, sizeof(h));
  if (h.magic != kIpcMagic) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == static_cast<uint32_t>(::getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%u/fd/%d", h.pid, h.fd);
  int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  void* p =
      ::mmap(nullptr, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(h.offset));
  ::close(fd);
  if (p == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  std::lock_guard<std::mutex> lock(D().mu);
  Alloc a;
  a.kind = Kind::kIpc;
  a.base = p;
  a.map_len = h.size;
  a.ctx = c;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  D().allocs[*dptr] = a;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuIpcOpenMemHandle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  return cuIpcOpenMemHandle_v2(dptr, handle, flags);
}

FAKE_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  std::lock_guard<std::mutex> lock(D().mu);
  auto it = D().allocs.find(dptr);
  if (it == D().allocs.end() || it->second.kind != Kind::kIpc) return CUDA_ERROR_INVALID_VALUE;
  FreeBacking(it->second);
  D().allocs.erase(it);
  return CUDA_SUCCESS;
}

// ------------------------------------------------------------------------------ streams

FAKE_API CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  (void)flags;
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  auto s = std::make_unique<Stream>();
  s->device = c->device;
  *stream = reinterpret_cast<CUstream>(s.get());
  D().streams.push_back(std::move(s));
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamDestroy_v2(CUstream stream) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;  // kept: launches may still reference it
}

FAKE_API CUresult cuStreamSynchronize(CUstream stream) { return SyncStream(stream, false); }
FAKE_API CUresult cuStreamSynchronize_ptsz(CUstream stream) { return SyncStream(stream, true); }

FAKE_API CUresult cuStreamQuery(CUstream stream) {
  return MonoNs() >= StreamOf(stream, false)->tail.load() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_API CUresult cuStreamGetCtx(CUstream stream, CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = StreamOf(stream, false);
  std::lock_guard<std::mutex> lock(D().mu);
  for (auto& c : D().contexts) {
    if (c->alive && c->device == s->device) {
      *ctx = AsHandle(c.get());
      return CUDA_SUCCESS;
    }
  }
  for (auto& [ord, c] : D().primary) {
    if (c && c->alive && c->device == s->device) {
      *ctx = AsHandle(c.get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_CONTEXT;
}

FAKE_API CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *status = StreamOf(stream, false)->capture != nullptr ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                        : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  (void)mode;
  if (stream == nullptr || stream == TESSERA_CU_STREAM_LEGACY) {
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  Stream* s = StreamOf(stream, false);
  if (s->capture != nullptr) return CUDA_ERROR_INVALID_VALUE;
  s->capture = new Graph();
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  Stream* s = StreamOf(stream, false);
  if (s->capture == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(s->capture);
  s->capture = nullptr;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  return CUDA_SUCCESS;
}

// ------------------------------------------------------------------------------- events

FAKE_API CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  (void)flags;
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *event = reinterpret_cast<CUevent>(new Event());
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Stream* s = StreamOf(stream, false);
  reinterpret_cast<Event*>(event)->time.store(std::max(MonoNs(), s->tail.load()));
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventQuery(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return MonoNs() >= reinterpret_cast<Event*>(event)->time.load() ? CUDA_SUCCESS
                                                                  : CUDA_ERROR_NOT_READY;
}

FAKE_API CUresult cuEventSynchronize(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  SleepUntil(reinterpret_cast<Event*>(event)->time.load());
  SyncPools(-1);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int64_t a = reinterpret_cast<Event*>(start)->time.load();
  int64_t b = reinterpret_cast<Event*>(end)->time.load();
  if (a < 0 || b < 0) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(b - a) / 1e6f;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuEventDestroy_v2(CUevent event) {
  delete reinterpret_cast<Event*>(event);
  return CUDA_SUCCESS;
}

// ------------------------------------------------------------------- modules, launches

FAKE_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  D().modules.push_back(std::make_unique<Module>());
  *module = reinterpret_cast<CUmodule>(D().modules.back().get());
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  if (f == nullptr || module == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* m = reinterpret_cast<Module*>(module);
  std::lock_guard<std::mutex> lock(D().mu);
  auto fn = std::make_unique<Function>();
  fn->name = name;
  *f = reinterpret_cast<CUfunction>(fn.get());
  m->functions.push_back(std::move(fn));
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleUnload(CUmodule module) {
  (void)module;  // functions stay valid: launches may be queued
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned int, unsigned int, unsigned int,
                                 unsigned int, unsigned int, unsigned int, unsigned int, CUstream s,
                                 void** params, void**) {
  return Launch(f, s, params, false);
}

FAKE_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int, unsigned int, unsigned int,
                                      unsigned int, unsigned int, unsigned int, unsigned int,
                                      CUstream s, void** params, void**) {
  return Launch(f, s, params, true);
}

FAKE_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                   void**) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->hStream, params, false);
}

FAKE_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                        void**) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, config->hStream, params, true);
}

FAKE_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int, unsigned int, unsigned int,
                                            unsigned int, unsigned int, unsigned int, unsigned int,
                                            CUstream s, void** params) {
  return Launch(f, s, params, false);
}

FAKE_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int, unsigned int,
                                                 unsigned int, unsigned int, unsigned int,
                                                 unsigned int, unsigned int, CUstream s,
                                                 void** params) {
  return Launch(f, s, params, true);
}

FAKE_API CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* params, unsigned int n,
                                                       unsigned int flags) {
  (void)flags;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < n; ++i) {
    CUresult r = Launch(params[i].function, params[i].hStream, params[i].kernelParams, false);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuLaunch(CUfunction f) { return Launch(f, nullptr, nullptr, false); }
FAKE_API CUresult cuLaunchGrid(CUfunction f, int, int) {
  return Launch(f, nullptr, nullptr, false);
}
FAKE_API CUresult cuLaunchGridAsync(CUfunction f, int, int, CUstream s) {
  return Launch(f, s, nullptr, false);
}

FAKE_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                              unsigned long long flags) {
  (void)flags;
  if (exec == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new GraphExec();
  e->nodes = reinterpret_cast<Graph*>(graph)->nodes;
  *exec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

namespace {
// A graph's allocations come from the device's graph memory, which grows (and is charged) when
// what they use passes what is reserved; freed, they stay reserved for the next launch.
// Caller holds D().mu.
CUresult MapGraphMemory(const GraphExec& e) {
  for (const auto& node : e.nodes) {
    if (node.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      auto& gm = D().graph_memory[node.device];
      if (gm.used + node.bytes > gm.reserved) {
        if (!Charge(node.device, gm.used + node.bytes - gm.reserved)) {
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        gm.reserved = gm.used + node.bytes;
        gm.reserved_high = std::max(gm.reserved_high, gm.reserved);
      }
      gm.used += node.bytes;
      gm.used_high = std::max(gm.used_high, gm.used);
      D().graph_live[node.dptr] = node;
    } else if (node.type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      auto g = D().graph_live.find(node.dptr);
      if (g == D().graph_live.end()) continue;
      D().graph_memory[g->second.device].used -= g->second.bytes;
      D().graph_live.erase(g);
    }
  }
  return CUDA_SUCCESS;
}

CUresult GraphLaunch(CUgraphExec exec, CUstream s, bool ptsz) {
  if (exec == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* st = StreamOf(s, ptsz);
  {
    std::lock_guard<std::mutex> lock(D().mu);
    if (CUresult r = MapGraphMemory(*reinterpret_cast<GraphExec*>(exec)); r != CUDA_SUCCESS) {
      return r;
    }
  }
  for (const auto& node : reinterpret_cast<GraphExec*>(exec)->nodes) {
    if (node.duration_ns > 0)
      st->tail.store(Execute(st->device, st->tail.load(), node.duration_ns));
  }
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_API CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  return GraphLaunch(exec, s, false);
}
FAKE_API CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  return GraphLaunch(exec, s, true);
}
FAKE_API CUresult cuGraphUpload(CUgraphExec exec, CUstream s) {
  (void)s;
  return exec == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
                                               void* value) {
  if (!ValidOrdinal(dev) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(D().mu);
  const auto& gm = D().graph_memory[D().visible[dev]];
  uint64_t v = 0;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      v = gm.used;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      v = gm.used_high;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      v = gm.reserved;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      v = gm.reserved_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<cuuint64_t*>(value) = v;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  if (!ValidOrdinal(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(D().mu);
  const int device = D().visible[dev];
  auto& gm = D().graph_memory[device];
  Uncharge(device, gm.reserved - gm.used);
  gm.reserved = gm.used;
  return CUDA_SUCCESS;
}

// Node handles are pointers to the graph's nodes.
FAKE_API CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  if (graph == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& all = reinterpret_cast<Graph*>(graph)->nodes;
  if (nodes != nullptr) {
    for (size_t i = 0; i < std::min(*count, all.size()); ++i) {
      nodes[i] = reinterpret_cast<CUgraphNode>(&all[i]);
    }
  }
  *count = all.size();
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (node == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = reinterpret_cast<GraphNode*>(node)->type;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node,
                                               CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (node == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* n = reinterpret_cast<GraphNode*>(node);
  if (n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
  *params = CUDA_MEM_ALLOC_NODE_PARAMS{};
  params->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params->poolProps.location.id = Ordinal(n->device);
  params->bytesize = n->bytes;
  params->dptr = n->dptr;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphDestroy(CUgraph graph) {
  delete reinterpret_cast<Graph*>(graph);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphExecDestroy(CUgraphExec exec) {
  delete reinterpret_cast<GraphExec*>(exec);
  return CUDA_SUCCESS;
}

// The exported name of one of this library's functions (loader tests), or null.
FAKE_API const char* tessera_fake_symbol_name(const void* fn) {
  for (const auto& e : kExports) {
    if (e.fn == fn || e.internal == fn) return e.name;
  }
  return nullptr;
}
