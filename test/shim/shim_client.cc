// A CUDA program for the shim's tests, driven one command per line on stdin (answers one line
// each on stdout: "ok ..." or "err <CUresult> ..."). It reaches the driver the way applications
// do, chosen at build time and on the command line:
//   shim_client_linked           linked with -lcuda -lnvidia-ml (the symbols bind at load time)
//   shim_client                  dlopen("libcuda.so.1") + dlsym, like the CUDA runtime and ctypes
//   shim_client --procaddr=V[,ptsz]   dlsym("cuGetProcAddress[_v2]") only, then every entry
//                                point through it at CUDA version V (and the per-thread flag)
//   shim_client --libcuda=PATH   dlopen(PATH) instead of "libcuda.so.1": a tenant loading the
//                                real driver by the path it is mounted at (the security tests)
// Which libcuda.so.1 it gets (the shim or the fake driver alone) is up to LD_LIBRARY_PATH.
//
// Commands (sizes in bytes; NAME labels an allocation):
//   init [dev]                cuInit, retain and set the primary context of dev (default 0)
//   ctx4 [dev]                cuCtxCreate_v4 instead of the primary context
//   ctxdestroy | reset        cuCtxDestroy_v2 of that context / cuDevicePrimaryCtxReset_v2
//   alloc NAME B | free NAME  cuMemAlloc_v2 / cuMemFree_v2
//   pitch NAME W H            cuMemAllocPitch_v2 (element 4)      -> ok <pitch>
//   managed NAME B            cuMemAllocManaged
//   array NAME W H | array3d NAME W H D | mipmap NAME W H LEVELS | destroy NAME
//   vmm NAME B LOC            reserve + cuMemCreate(LOC: device|host|host_numa|host_numa_current)
//                             + map + set access;  vmmfree NAME: unmap, release, free the range
//   vmmearly NAME B           create, map, release the handle at once (NCCL); vmmfree unmaps
//   vmmretain NAME            cuMemRetainAllocationHandle + cuMemRelease on its address
//   fdlisten PATH             binds a datagram socket at PATH to receive descriptors on
//   vmmsend NAME PATH         cuMemExportToShareableHandle (file descriptor), sends it and the
//                             size to the socket at PATH (SCM_RIGHTS), closes its own copy
//   vmmexport NAME            exports and keeps the descriptor;   fdclose NAME: closes it
//   vmmimport NAME            receives a descriptor on the fdlisten socket, imports it, closes
//                             the descriptor, maps it (vmmfree NAME unmaps and releases it)
//   async NAME B | asyncfree NAME      cuMemAllocAsync / cuMemFreeAsync on the default stream
//   poolcreate | poolalloc NAME B | pooldestroy | trim     an explicit pool of device 0
//   sync                      cuCtxSynchronize
//   meminfo                   -> ok <free> <total>      totalmem -> ok <total>
//   ipcget NAME -> ok <hex>   ipcopen NAME <hex>        ipcclose NAME
//   legacy SYMBOL B           a CUDA 2.x allocator (cuMemAlloc, cuMemAllocPitch, cuArrayCreate,
//                             cuArray3DCreate) by dlsym from libcuda.so.1, for B bytes (kept)
//   write NAME BYTE | read NAME -> ok <first byte>     (through cuMemsetD8 / cuMemcpyDtoH)
//   spin NS COUNT SYNC_EVERY  launches COUNT kernels of NS each (cuLaunchKernel), syncing
//   spinex NS COUNT SYNC_EVERY | coop NS COUNT SYNC_EVERY   (cuLaunchKernelEx, cooperative)
//   graph NS NODES COUNT      captures NODES kernels into a graph, launches it COUNT times
//   graphalloc NAME B FREE    captures a graph whose allocation node takes B (FREE=1: and a
//                             free node), instantiates it; graphlaunch NAME launches it and
//                             syncs; graphfree NAME frees what it allocated; graphtrim:
//                             cuDeviceGraphMemTrim
//   setlimit stack|fifo|heap V    cuCtxSetLimit
//   threads N B ROUNDS        N threads allocating and freeing B ROUNDS times each
//   bgthreads N B ROUNDS      the same in the background; bgjoin waits for them
//   poolrace ROUNDS B         two threads allocating B from two pools of their own, ROUNDS times
//                             each  -> ok <granted> <refused>
//   nvmlmem -> ok <used> <free> <total>     nvmlprocs -> ok pid:bytes,...
//   hookname SYMBOL -> ok <name the shim gives the pointer dlsym returns, or "-">
//   procmatrix -> one line per symbol/version/flag, then "ok <checked> <mismatches>"
//   procaddr SYMBOL VERSION [ptsz] -> cuGetProcAddress_v2 through libcuda.so.1:
//                             ok <the hook's name, or "-" for a pointer that is not a hook>,
//                             or err <CUresult> <query status>
//   forkrun CMD... -> runs one command in a forked child, ok <child's answer>
//   pid -> ok <pid>           status -> ok <shim status JSON>    exit
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "shim/cuda_abi.h"
#include "shim/nvml_abi.h"
#include "shim/real_driver.h"

extern "C" {
typedef CUresult (*PFN_cuIpcOpenMemHandle_v2_)(CUdeviceptr*, CUipcMemHandle, unsigned int);
}

// Every entry point the client uses.
#define CLIENT_CUDA(X)                                                  \
  X(cuInit, PFN_cuInit)                                                 \
  X(cuDeviceGet, PFN_cuDeviceGet)                                       \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount)                             \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v2)                          \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain)             \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent)                               \
  X(cuCtxCreate, PFN_cuCtxCreate_v4)                                    \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize)                             \
  X(cuCtxDestroy, PFN_cuCtxDestroy_v2)                                  \
  X(cuDevicePrimaryCtxReset, PFN_cuDevicePrimaryCtxReset_v2)            \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v2)                                  \
  X(cuMemAlloc, PFN_cuMemAlloc_v2)                                      \
  X(cuMemAllocPitch, PFN_cuMemAllocPitch_v2)                            \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged)                           \
  X(cuMemFree, PFN_cuMemFree_v2)                                        \
  X(cuMemsetD8, PFN_cuMemsetD8_v2)                                      \
  X(cuMemcpyDtoH, PFN_cuMemcpyDtoH_v2)                                  \
  X(cuArrayCreate, PFN_cuArrayCreate_v2)                                \
  X(cuArray3DCreate, PFN_cuArray3DCreate_v2)                            \
  X(cuArrayDestroy, PFN_cuArrayDestroy)                                 \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate)                 \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy)               \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve)                       \
  X(cuMemAddressFree, PFN_cuMemAddressFree)                             \
  X(cuMemCreate, PFN_cuMemCreate)                                       \
  X(cuMemRelease, PFN_cuMemRelease)                                     \
  X(cuMemMap, PFN_cuMemMap)                                             \
  X(cuMemUnmap, PFN_cuMemUnmap)                                         \
  X(cuMemSetAccess, PFN_cuMemSetAccess)                                 \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle)       \
  X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle)     \
  X(cuMemImportFromShareableHandle, PFN_cuMemImportFromShareableHandle) \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync)                               \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync)               \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync)                                 \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate)                               \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy)                             \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo)                               \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim)                     \
  X(cuCtxSetLimit, PFN_cuCtxSetLimit)                                   \
  X(cuIpcGetMemHandle, PFN_cuIpcGetMemHandle)                           \
  X(cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle_v2_)                     \
  X(cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle)                       \
  X(cuStreamCreate, PFN_cuStreamCreate)                                 \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize)                       \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v2)                  \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture)                         \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags)       \
  X(cuGraphLaunch, PFN_cuGraphLaunch)                                   \
  X(cuGraphDestroy, PFN_cuGraphDestroy)                                 \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy)                         \
  X(cuModuleLoadData, PFN_cuModuleLoadData)                             \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction)                       \
  X(cuLaunchKernel, PFN_cuLaunchKernel)                                 \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx)                             \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel)

// The exported names a linked program binds to (cuda.h's #defines).
// clang-format off
#define CLIENT_LINKED_NAMES(X) \
  X(cuInit, cuInit) \
  X(cuDeviceGet, cuDeviceGet) \
  X(cuDeviceGetCount, cuDeviceGetCount) \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v2) \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain) \
  X(cuCtxSetCurrent, cuCtxSetCurrent) \
  X(cuCtxCreate, cuCtxCreate_v4) \
  X(cuCtxSynchronize, cuCtxSynchronize) \
  X(cuCtxDestroy, cuCtxDestroy_v2) \
  X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2) \
  X(cuMemGetInfo, cuMemGetInfo_v2) \
  X(cuMemAlloc, cuMemAlloc_v2) \
  X(cuMemAllocPitch, cuMemAllocPitch_v2) \
  X(cuMemAllocManaged, cuMemAllocManaged) \
  X(cuMemFree, cuMemFree_v2) \
  X(cuMemsetD8, cuMemsetD8_v2) \
  X(cuMemcpyDtoH, cuMemcpyDtoH_v2) \
  X(cuArrayCreate, cuArrayCreate_v2) \
  X(cuArray3DCreate, cuArray3DCreate_v2) \
  X(cuArrayDestroy, cuArrayDestroy) \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate) \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy) \
  X(cuMemAddressReserve, cuMemAddressReserve) \
  X(cuMemAddressFree, cuMemAddressFree) \
  X(cuMemCreate, cuMemCreate) \
  X(cuMemRelease, cuMemRelease) \
  X(cuMemMap, cuMemMap) \
  X(cuMemUnmap, cuMemUnmap) \
  X(cuMemSetAccess, cuMemSetAccess) \
  X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle) \
  X(cuMemExportToShareableHandle, cuMemExportToShareableHandle) \
  X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle) \
  X(cuMemAllocAsync, cuMemAllocAsync) \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync) \
  X(cuMemFreeAsync, cuMemFreeAsync) \
  X(cuMemPoolCreate, cuMemPoolCreate) \
  X(cuMemPoolDestroy, cuMemPoolDestroy) \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo) \
  X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim) \
  X(cuCtxSetLimit, cuCtxSetLimit) \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle) \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2) \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle) \
  X(cuStreamCreate, cuStreamCreate) \
  X(cuStreamSynchronize, cuStreamSynchronize) \
  X(cuStreamBeginCapture, cuStreamBeginCapture_v2) \
  X(cuStreamEndCapture, cuStreamEndCapture) \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags) \
  X(cuGraphLaunch, cuGraphLaunch) \
  X(cuGraphDestroy, cuGraphDestroy) \
  X(cuGraphExecDestroy, cuGraphExecDestroy) \
  X(cuModuleLoadData, cuModuleLoadData) \
  X(cuModuleGetFunction, cuModuleGetFunction) \
  X(cuLaunchKernel, cuLaunchKernel) \
  X(cuLaunchKernelEx, cuLaunchKernelEx) \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel)
// clang-format on

#define CLIENT_NVML(X)                                                \
  X(nvmlInit_v2, PFN_nvmlInit_v2)                                     \
  X(nvmlDeviceGetHandleByIndex_v2, PFN_nvmlDeviceGetHandleByIndex_v2) \
  X(nvmlDeviceGetMemoryInfo, PFN_nvmlDeviceGetMemoryInfo)             \
  X(nvmlDeviceGetComputeRunningProcesses_v3, PFN_nvmlDeviceGetComputeRunningProcesses_v3)

namespace {

struct Api {
#define FIELD(name, type) type name = nullptr;
  CLIENT_CUDA(FIELD)
  CLIENT_NVML(FIELD)
#undef FIELD
  void* cuda = nullptr;  // dlopen handle (dlopen and procaddr modes)
};

Api api;
int g_version = 13000;
cuuint64_t g_flags = 0;

std::string Err(CUresult r) { return "err " + std::to_string(r); }

#ifndef SHIM_CLIENT_LINKED
PFN_cuGetProcAddress_v2 g_gpa2 = nullptr;
PFN_cuGetProcAddress g_gpa1 = nullptr;

// What dlopen is given: the soname, or (--libcuda=PATH) a file by its path, as a tenant that
// loads the real driver from where it is mounted and bypasses the shim would.
std::string g_libcuda = "libcuda.so.1";

bool LoadDlopen() {
  api.cuda = ::dlopen(g_libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api.cuda == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", g_libcuda.c_str(), ::dlerror());
    return false;
  }
  std::map<std::string, std::string> exported = {
#define NAME(field, sym) {#field, #sym},
      CLIENT_LINKED_NAMES(NAME)
#undef NAME
  };
#define LOAD(name, type) \
  api.name = reinterpret_cast<type>(::dlsym(api.cuda, exported[#name].c_str()));
  CLIENT_CUDA(LOAD)
#undef LOAD
  return true;
}

bool LoadProcAddress() {
  api.cuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api.cuda == nullptr) return false;
  g_gpa2 = reinterpret_cast<PFN_cuGetProcAddress_v2>(::dlsym(api.cuda, "cuGetProcAddress_v2"));
  g_gpa1 = reinterpret_cast<PFN_cuGetProcAddress>(::dlsym(api.cuda, "cuGetProcAddress"));
  auto resolve = [](const char* name) -> void* {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (g_version >= 12000 && g_gpa2 != nullptr) {
      g_gpa2(name, &fn, g_version, g_flags, &status);
    } else if (g_gpa1 != nullptr) {
      g_gpa1(name, &fn, g_version, g_flags);
    }
    return fn;
  };
  // cuCtxCreate at a version below 13000 is the v2 ABI: not what the client calls; create
  // contexts through the primary context instead in that mode.
// The field names are cuda.h's base names, which cuGetProcAddress takes.
#define LOAD(name, type) api.name = reinterpret_cast<type>(resolve(#name));
  CLIENT_CUDA(LOAD)
#undef LOAD
  if (g_version < 13000) api.cuCtxCreate = nullptr;
  return api.cuInit != nullptr;
}
#endif

#ifdef SHIM_CLIENT_LINKED
extern "C" {
CUresult cuInit(unsigned int);
}
#define DECL(field, sym) extern "C" std::remove_pointer_t<decltype(Api::field)> sym;
CLIENT_LINKED_NAMES(DECL)
#undef DECL
extern "C" std::remove_pointer_t<PFN_nvmlInit_v2> nvmlInit_v2;
extern "C" std::remove_pointer_t<PFN_nvmlDeviceGetHandleByIndex_v2> nvmlDeviceGetHandleByIndex_v2;
extern "C" std::remove_pointer_t<PFN_nvmlDeviceGetMemoryInfo> nvmlDeviceGetMemoryInfo;
extern "C" std::remove_pointer_t<PFN_nvmlDeviceGetComputeRunningProcesses_v3>
    nvmlDeviceGetComputeRunningProcesses_v3;

void LoadLinked() {
#define BIND(field, sym) api.field = &::sym;
  CLIENT_LINKED_NAMES(BIND)
#undef BIND
  api.nvmlInit_v2 = &::nvmlInit_v2;
  api.nvmlDeviceGetHandleByIndex_v2 = &::nvmlDeviceGetHandleByIndex_v2;
  api.nvmlDeviceGetMemoryInfo = &::nvmlDeviceGetMemoryInfo;
  api.nvmlDeviceGetComputeRunningProcesses_v3 = &::nvmlDeviceGetComputeRunningProcesses_v3;
}
#endif

bool LoadNvml() {
  if (api.nvmlInit_v2 != nullptr) return true;
  void* h = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
#define LOAD(name, type) api.name = reinterpret_cast<type>(::dlsym(h, #name));
  CLIENT_NVML(LOAD)
#undef LOAD
  return api.nvmlInit_v2 != nullptr;
}

// ------------------------------------------------------------------------------ state

struct Vmm {
  CUdeviceptr va = 0;
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool released = false;
};

std::map<std::string, CUdeviceptr> g_ptrs;
std::map<std::string, void*> g_arrays;
std::map<std::string, bool> g_mipmapped;
std::map<std::string, Vmm> g_vmm;
std::map<std::string, CUdeviceptr> g_ipc;
struct GraphRun {
  CUgraphExec exec = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr dptr = 0;  // what its allocation node allocates
};
std::map<std::string, GraphRun> g_graphs;
std::map<std::string, int> g_fds;
int g_listen = -1;
std::thread g_background;
std::atomic<int> g_background_failures{0};
CUmemoryPool g_pool = nullptr;
CUfunction g_spin = nullptr;
CUdevice g_dev = 0;
CUcontext g_ctx = nullptr;

uint64_t Num(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 0); }

CUresult Spin(int64_t ns, int64_t count, int64_t sync_every, int how) {
  if (g_spin == nullptr) {
    CUmodule mod = nullptr;
    static const char image[] = "fake module";
    if (CUresult r = api.cuModuleLoadData(&mod, image); r != CUDA_SUCCESS) return r;
    if (CUresult r = api.cuModuleGetFunction(&g_spin, mod, "spin"); r != CUDA_SUCCESS) return r;
  }
  uint64_t duration = static_cast<uint64_t>(ns);
  void* params[] = {&duration};
  for (int64_t i = 0; i < count; ++i) {
    CUresult r;
    if (how == 0) {
      r = api.cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    } else if (how == 1) {
      CUlaunchConfig cfg{};
      cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
      cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
      r = api.cuLaunchKernelEx(&cfg, g_spin, params, nullptr);
    } else {
      r = api.cuLaunchCooperativeKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params);
    }
    if (r != CUDA_SUCCESS) return r;
    if (sync_every > 0 && (i + 1) % sync_every == 0) api.cuCtxSynchronize();
  }
  return api.cuCtxSynchronize();
}

std::string Hex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<const unsigned char*>(p)[i];
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

void Unhex(const std::string& s, void* p, size_t n) {
  for (size_t i = 0; i < n && 2 * i + 1 < s.size(); ++i) {
    static_cast<unsigned char*>(p)[i] =
        static_cast<unsigned char>(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  }
}

// Every symbol the shim hooks, at every version and stream flag, through the shim's
// cuGetProcAddress and the real driver's own: the shim must give back its hook for exactly
// the variant the driver picked, or fail the same way.
std::string ProcMatrix() {
  using NameFn = const char* (*)(const void*);
  void* self = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* real = ::dlopen("libtessera-real-cuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (self == nullptr || real == nullptr) return "err no shim layout";
  auto shim_name = reinterpret_cast<NameFn>(::dlsym(self, "tessera_shim_hook_name"));
  auto fake_name = reinterpret_cast<NameFn>(::dlsym(real, "tessera_fake_symbol_name"));
  auto shim_gpa2 = reinterpret_cast<PFN_cuGetProcAddress_v2>(::dlsym(self, "cuGetProcAddress_v2"));
  auto shim_gpa1 = reinterpret_cast<PFN_cuGetProcAddress>(::dlsym(self, "cuGetProcAddress"));
  auto real_gpa2 = reinterpret_cast<PFN_cuGetProcAddress_v2>(::dlsym(real, "cuGetProcAddress_v2"));
  auto real_gpa1 = reinterpret_cast<PFN_cuGetProcAddress>(::dlsym(real, "cuGetProcAddress"));
  if (!shim_name || !fake_name || !shim_gpa2 || !shim_gpa1 || !real_gpa2 || !real_gpa1) {
    return "err missing introspection";
  }
  const std::vector<std::string> bases = tessera::shim::InterceptedProcAddressNames();
  int checked = 0, mismatches = 0, hooked = 0;
  for (const auto& base : bases) {
    for (int version : {11080, 12000, 12080, 13000}) {
      for (cuuint64_t flags :
           {CU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
        for (int api_version : {1, 2}) {
          void* via_shim = nullptr;
          void* via_real = nullptr;
          CUdriverProcAddressQueryResult s1 = 0, s2 = 0;
          CUresult r1, r2;
          if (api_version == 2) {
            r1 = shim_gpa2(base.c_str(), &via_shim, version, flags, &s1);
            r2 = real_gpa2(base.c_str(), &via_real, version, flags, &s2);
          } else {
            r1 = shim_gpa1(base.c_str(), &via_shim, version, flags);
            r2 = real_gpa1(base.c_str(), &via_real, version, flags);
          }
          ++checked;
          const char* want = via_real != nullptr ? fake_name(via_real) : nullptr;
          const char* got = via_shim != nullptr ? shim_name(via_shim) : nullptr;
          bool ok = r1 == r2 && s1 == s2 &&
                    ((want == nullptr && via_shim == nullptr) ||
                     (want != nullptr && got != nullptr && std::strcmp(want, got) == 0));
          if (got != nullptr) ++hooked;
          std::printf("%s %s %d %s %s -> %s\n", ok ? "match" : "MISMATCH", base.c_str(), version,
                      flags == CU_GET_PROC_ADDRESS_LEGACY_STREAM ? "legacy" : "per-thread",
                      want ? want : "(none)", got ? got : "(not a hook)");
          if (!ok) ++mismatches;
        }
      }
    }
  }
  return "ok " + std::to_string(checked) + " " + std::to_string(mismatches) + " " +
         std::to_string(hooked);
}

std::string Run(const std::vector<std::string>& a);

// Reserves an address range for a VMM allocation, maps it whole and makes it accessible.
CUresult MapAll(Vmm* v) {
  CUresult r;
  if ((r = api.cuMemAddressReserve(&v->va, v->size, 0, 0, 0)) != CUDA_SUCCESS) return r;
  if ((r = api.cuMemMap(v->va, v->size, 0, v->handle, 0)) != CUDA_SUCCESS) return r;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = g_dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return api.cuMemSetAccess(v->va, v->size, &access, 1);
}

// One descriptor and a size over a datagram socket, as NCCL and PyTorch pass exported handles.
bool SendFd(const std::string& path, int fd, uint64_t size) {
  int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&size, sizeof(size)};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = sizeof(addr);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  bool ok = ::sendmsg(s, &msg, 0) == static_cast<ssize_t>(sizeof(size));
  ::close(s);
  return ok;
}

int ReceiveFd(int socket, uint64_t* size) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{size, sizeof(*size)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof(*size))) return -1;
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  if (cm == nullptr || cm->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  return fd;
}

void ThreadsWork(int n, uint64_t bytes, int rounds, std::atomic<int>* failures) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([=] {
      CUcontext ctx = nullptr;
      if (api.cuDevicePrimaryCtxRetain(&ctx, g_dev) != CUDA_SUCCESS ||
          api.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        ++*failures;
        return;
      }
      for (int i = 0; i < rounds; ++i) {
        CUdeviceptr p = 0;
        CUresult r = api.cuMemAlloc(&p, bytes);
        if (r == CUDA_SUCCESS) {
          api.cuMemFree(p);
        } else if (r != CUDA_ERROR_OUT_OF_MEMORY) {
          ++*failures;
        }
        if (api.cuMemAllocAsync != nullptr &&
            api.cuMemAllocAsync(&p, bytes, nullptr) == CUDA_SUCCESS) {
          api.cuMemFreeAsync(p, nullptr);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Two threads, each allocating `bytes` from a pool of its own and freeing it, `rounds` times:
// near the cap both are refused at once and re-read each other's pool.
std::string PoolRace(int rounds, uint64_t bytes) {
  CUmemoryPool pools[2] = {};
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = g_dev;
  for (auto& pool : pools) {
    if (CUresult r = api.cuMemPoolCreate(&pool, &props); r != CUDA_SUCCESS) return Err(r);
  }
  std::atomic<int> granted{0}, refused{0}, failed{0};
  std::vector<std::thread> threads;
  for (CUmemoryPool pool : pools) {
    threads.emplace_back([&, pool] {
      CUcontext ctx = nullptr;
      api.cuDevicePrimaryCtxRetain(&ctx, g_dev);
      api.cuCtxSetCurrent(ctx);
      for (int i = 0; i < rounds; ++i) {
        CUdeviceptr p = 0;
        CUresult r = api.cuMemAllocFromPoolAsync(&p, bytes, pool, nullptr);
        if (r == CUDA_SUCCESS) {
          ++granted;
          api.cuMemFreeAsync(p, nullptr);
        } else {
          ++(r == CUDA_ERROR_OUT_OF_MEMORY ? refused : failed);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (CUmemoryPool pool : pools) api.cuMemPoolDestroy(pool);
  if (failed > 0) return "err " + std::to_string(failed.load()) + " failures";
  return "ok " + std::to_string(granted.load()) + " " + std::to_string(refused.load());
}

std::string Run(const std::vector<std::string>& a) {
  if (a.empty()) return "err empty";
  const std::string& c = a[0];
  CUresult r = CUDA_SUCCESS;
  if (c == "init" || c == "ctx4") {
    if ((r = api.cuInit(0)) != CUDA_SUCCESS) return Err(r);
    int ordinal = a.size() > 1 ? static_cast<int>(Num(a[1])) : 0;
    if ((r = api.cuDeviceGet(&g_dev, ordinal)) != CUDA_SUCCESS) return Err(r);
    CUcontext ctx = nullptr;
    if (c == "ctx4" && api.cuCtxCreate != nullptr) {
      CUctxCreateParams params{};
      r = api.cuCtxCreate(&ctx, &params, 0, g_dev);
      g_ctx = ctx;
    } else {
      r = api.cuDevicePrimaryCtxRetain(&ctx, g_dev);
      if (r == CUDA_SUCCESS) r = api.cuCtxSetCurrent(ctx);
    }
    return r == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "ctxdestroy") {
    r = api.cuCtxDestroy(g_ctx);
    g_ptrs.clear();
    return r == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "reset") {
    r = api.cuDevicePrimaryCtxReset(g_dev);
    g_ptrs.clear();
    return r == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "alloc") {
    CUdeviceptr p = 0;
    if ((r = api.cuMemAlloc(&p, Num(a[2]))) != CUDA_SUCCESS) return Err(r);
    g_ptrs[a[1]] = p;
    return "ok";
  }
  if (c == "free") {
    if (!g_ptrs.count(a[1])) return "err unknown";
    if ((r = api.cuMemFree(g_ptrs[a[1]])) != CUDA_SUCCESS) return Err(r);
    g_ptrs.erase(a[1]);
    return "ok";
  }
  if (c == "pitch") {
    CUdeviceptr p = 0;
    size_t pitch = 0;
    if ((r = api.cuMemAllocPitch(&p, &pitch, Num(a[2]), Num(a[3]), 4)) != CUDA_SUCCESS) {
      return Err(r);
    }
    g_ptrs[a[1]] = p;
    return "ok " + std::to_string(pitch);
  }
  if (c == "managed") {
    CUdeviceptr p = 0;
    if ((r = api.cuMemAllocManaged(&p, Num(a[2]), CU_MEM_ATTACH_GLOBAL)) != CUDA_SUCCESS) {
      return Err(r);
    }
    g_ptrs[a[1]] = p;
    return "ok";
  }
  if (c == "array" || c == "array3d" || c == "mipmap") {
    void* h = nullptr;
    if (c == "array") {
      CUDA_ARRAY_DESCRIPTOR d{};
      d.Width = Num(a[2]);
      d.Height = Num(a[3]);
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 4;
      r = api.cuArrayCreate(reinterpret_cast<CUarray*>(&h), &d);
    } else {
      CUDA_ARRAY3D_DESCRIPTOR d{};
      d.Width = Num(a[2]);
      d.Height = Num(a[3]);
      d.Depth = c == "array3d" ? Num(a[4]) : 0;
      d.Format = CU_AD_FORMAT_FLOAT;
      d.NumChannels = 1;
      r = c == "array3d" ? api.cuArray3DCreate(reinterpret_cast<CUarray*>(&h), &d)
                         : api.cuMipmappedArrayCreate(reinterpret_cast<CUmipmappedArray*>(&h), &d,
                                                      static_cast<unsigned>(Num(a[4])));
    }
    if (r != CUDA_SUCCESS) return Err(r);
    g_arrays[a[1]] = h;
    g_mipmapped[a[1]] = c == "mipmap";
    return "ok";
  }
  if (c == "destroy") {
    void* h = g_arrays[a[1]];
    r = g_mipmapped[a[1]] ? api.cuMipmappedArrayDestroy(reinterpret_cast<CUmipmappedArray>(h))
                          : api.cuArrayDestroy(reinterpret_cast<CUarray>(h));
    g_arrays.erase(a[1]);
    return r == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "vmm" || c == "vmmearly") {
    Vmm v;
    v.size = Num(a[2]);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    std::string loc = c == "vmm" ? a[3] : "device";
    prop.location.type = loc == "device"              ? CU_MEM_LOCATION_TYPE_DEVICE
                         : loc == "host"              ? CU_MEM_LOCATION_TYPE_HOST
                         : loc == "host_numa"         ? CU_MEM_LOCATION_TYPE_HOST_NUMA
                         : loc == "host_numa_current" ? CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
                                                      : 77;
    prop.location.id = loc == "device" ? g_dev : 0;
    if ((r = api.cuMemCreate(&v.handle, v.size, &prop, 0)) != CUDA_SUCCESS) return Err(r);
    if ((r = MapAll(&v)) != CUDA_SUCCESS) return Err(r);
    if (c == "vmmearly") {
      if ((r = api.cuMemRelease(v.handle)) != CUDA_SUCCESS) return Err(r);
      v.released = true;
    }
    g_vmm[a[1]] = v;
    return "ok";
  }
  if (c == "vmmretain") {
    Vmm& v = g_vmm[a[1]];
    CUmemGenericAllocationHandle h = 0;
    if ((r = api.cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(v.va))) != CUDA_SUCCESS) {
      return Err(r);
    }
    return (r = api.cuMemRelease(h)) == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "fdlisten") {
    g_listen = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", a[1].c_str());
    if (::bind(g_listen, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return "err bind";
    }
    return "ok";
  }
  if (c == "vmmexport" || c == "vmmsend") {
    Vmm& v = g_vmm[a[1]];
    int fd = -1;
    r = api.cuMemExportToShareableHandle(&fd, v.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                         0);
    if (r != CUDA_SUCCESS) return Err(r);
    if (c == "vmmexport") {
      g_fds[a[1]] = fd;
      return "ok";
    }
    bool sent = SendFd(a[2], fd, v.size);
    ::close(fd);
    return sent ? "ok" : "err send";
  }
  if (c == "fdclose") {
    ::close(g_fds[a[1]]);
    g_fds.erase(a[1]);
    return "ok";
  }
  if (c == "vmmimport") {
    Vmm v;
    int fd = ReceiveFd(g_listen, &v.size);
    if (fd < 0) return "err receive";
    r = api.cuMemImportFromShareableHandle(&v.handle, reinterpret_cast<void*>(intptr_t{fd}),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    ::close(fd);
    if (r != CUDA_SUCCESS) return Err(r);
    if ((r = MapAll(&v)) != CUDA_SUCCESS) return Err(r);
    g_vmm[a[1]] = v;
    return "ok";
  }
  if (c == "vmmfree") {
    Vmm v = g_vmm[a[1]];
    if ((r = api.cuMemUnmap(v.va, v.size)) != CUDA_SUCCESS) return Err(r);
    if (!v.released && (r = api.cuMemRelease(v.handle)) != CUDA_SUCCESS) return Err(r);
    if ((r = api.cuMemAddressFree(v.va, v.size)) != CUDA_SUCCESS) return Err(r);
    g_vmm.erase(a[1]);
    return "ok";
  }
  if (c == "async" || c == "poolalloc") {
    CUdeviceptr p = 0;
    r = c == "async" ? api.cuMemAllocAsync(&p, Num(a[2]), nullptr)
                     : api.cuMemAllocFromPoolAsync(&p, Num(a[2]), g_pool, nullptr);
    if (r != CUDA_SUCCESS) return Err(r);
    g_ptrs[a[1]] = p;
    return "ok";
  }
  if (c == "asyncfree") {
    if ((r = api.cuMemFreeAsync(g_ptrs[a[1]], nullptr)) != CUDA_SUCCESS) return Err(r);
    g_ptrs.erase(a[1]);
    return "ok";
  }
  if (c == "poolcreate") {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = g_dev;
    return (r = api.cuMemPoolCreate(&g_pool, &props)) == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "pooldestroy") return (r = api.cuMemPoolDestroy(g_pool)) == CUDA_SUCCESS ? "ok" : Err(r);
  if (c == "trim") return (r = api.cuMemPoolTrimTo(g_pool, 0)) == CUDA_SUCCESS ? "ok" : Err(r);
  if (c == "sync") return (r = api.cuCtxSynchronize()) == CUDA_SUCCESS ? "ok" : Err(r);
  if (c == "meminfo") {
    size_t f = 0, t = 0;
    if ((r = api.cuMemGetInfo(&f, &t)) != CUDA_SUCCESS) return Err(r);
    return "ok " + std::to_string(f) + " " + std::to_string(t);
  }
  if (c == "totalmem") {
    size_t t = 0;
    if ((r = api.cuDeviceTotalMem(&t, g_dev)) != CUDA_SUCCESS) return Err(r);
    return "ok " + std::to_string(t);
  }
  if (c == "ipcget") {
    CUipcMemHandle h{};
    if ((r = api.cuIpcGetMemHandle(&h, g_ptrs[a[1]])) != CUDA_SUCCESS) return Err(r);
    return "ok " + Hex(&h, sizeof(h));
  }
  if (c == "ipcopen") {
    CUipcMemHandle h{};
    Unhex(a[2], &h, sizeof(h));
    CUdeviceptr p = 0;
    if ((r = api.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS) {
      return Err(r);
    }
    g_ipc[a[1]] = p;
    return "ok";
  }
  if (c == "ipcclose") {
    return (r = api.cuIpcCloseMemHandle(g_ipc[a[1]])) == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "write") {
    CUdeviceptr p = g_ptrs.count(a[1]) ? g_ptrs[a[1]] : g_ipc[a[1]];
    return (r = api.cuMemsetD8(p, static_cast<unsigned char>(Num(a[2])), 16)) == CUDA_SUCCESS
               ? "ok"
               : Err(r);
  }
  if (c == "read") {
    CUdeviceptr p = g_ptrs.count(a[1]) ? g_ptrs[a[1]] : g_ipc[a[1]];
    unsigned char b = 0;
    if ((r = api.cuMemcpyDtoH(&b, p, 1)) != CUDA_SUCCESS) return Err(r);
    return "ok " + std::to_string(b);
  }
  if (c == "spin" || c == "spinex" || c == "coop") {
    int how = c == "spin" ? 0 : c == "spinex" ? 1 : 2;
    r = Spin(static_cast<int64_t>(Num(a[1])), static_cast<int64_t>(Num(a[2])),
             static_cast<int64_t>(Num(a[3])), how);
    return r == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "graph") {
    if (g_spin == nullptr && (r = Spin(0, 0, 0, 0)) != CUDA_SUCCESS) return Err(r);
    CUstream s = nullptr;
    if ((r = api.cuStreamCreate(&s, 0)) != CUDA_SUCCESS) return Err(r);
    if ((r = api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS) {
      return Err(r);
    }
    uint64_t duration = Num(a[1]);
    void* params[] = {&duration};
    for (uint64_t i = 0; i < Num(a[2]); ++i) {
      api.cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
    }
    CUgraph g = nullptr;
    if ((r = api.cuStreamEndCapture(s, &g)) != CUDA_SUCCESS) return Err(r);
    CUgraphExec e = nullptr;
    if ((r = api.cuGraphInstantiateWithFlags(&e, g, 0)) != CUDA_SUCCESS) return Err(r);
    for (uint64_t i = 0; i < Num(a[3]) && r == CUDA_SUCCESS; ++i) r = api.cuGraphLaunch(e, s);
    if (r == CUDA_SUCCESS) r = api.cuStreamSynchronize(s);
    api.cuGraphExecDestroy(e);
    api.cuGraphDestroy(g);
    return r == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "graphalloc") {  // captures a graph that allocates B (and frees it, with FREE=1)
    CUstream s = nullptr;
    if ((r = api.cuStreamCreate(&s, 0)) != CUDA_SUCCESS) return Err(r);
    if ((r = api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL)) != CUDA_SUCCESS) {
      return Err(r);
    }
    CUdeviceptr p = 0;
    if ((r = api.cuMemAllocAsync(&p, Num(a[2]), s)) != CUDA_SUCCESS) return Err(r);
    if (Num(a[3]) != 0 && (r = api.cuMemFreeAsync(p, s)) != CUDA_SUCCESS) return Err(r);
    CUgraph g = nullptr;
    if ((r = api.cuStreamEndCapture(s, &g)) != CUDA_SUCCESS) return Err(r);
    CUgraphExec e = nullptr;
    if ((r = api.cuGraphInstantiateWithFlags(&e, g, 0)) != CUDA_SUCCESS) return Err(r);
    g_graphs[a[1]] = {e, s, p};
    return "ok";
  }
  if (c == "graphlaunch") {
    const GraphRun& run = g_graphs[a[1]];
    if ((r = api.cuGraphLaunch(run.exec, run.stream)) != CUDA_SUCCESS) return Err(r);
    return (r = api.cuStreamSynchronize(run.stream)) == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "graphfree") {  // frees what the graph allocated and did not free
    const GraphRun& run = g_graphs[a[1]];
    return (r = api.cuMemFreeAsync(run.dptr, run.stream)) == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "graphtrim") {
    return (r = api.cuDeviceGraphMemTrim(g_dev)) == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "setlimit") {
    CUlimit limit = a[1] == "stack"  ? CU_LIMIT_STACK_SIZE
                    : a[1] == "fifo" ? CU_LIMIT_PRINTF_FIFO_SIZE
                                     : CU_LIMIT_MALLOC_HEAP_SIZE;
    return (r = api.cuCtxSetLimit(limit, Num(a[2]))) == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "bgthreads") {  // threads, in the background (bgjoin waits for them)
    int n = static_cast<int>(Num(a[1]));
    uint64_t bytes = Num(a[2]);
    int rounds = static_cast<int>(Num(a[3]));
    g_background = std::thread([=] { ThreadsWork(n, bytes, rounds, &g_background_failures); });
    return "ok";
  }
  if (c == "bgjoin") {
    if (g_background.joinable()) g_background.join();
    return g_background_failures == 0 ? "ok" : "err failures";
  }
  if (c == "poolrace") return PoolRace(static_cast<int>(Num(a[1])), Num(a[2]));
  if (c == "threads") {
    std::atomic<int> failures{0};
    ThreadsWork(static_cast<int>(Num(a[1])), Num(a[2]), static_cast<int>(Num(a[3])), &failures);
    return failures == 0 ? "ok" : "err " + std::to_string(failures.load()) + " failures";
  }
  if (c == "nvmlmem" || c == "nvmlprocs") {
    if (!LoadNvml()) return "err no nvml";
    api.nvmlInit_v2();
    nvmlDevice_t d = nullptr;
    if (api.nvmlDeviceGetHandleByIndex_v2(static_cast<unsigned>(g_dev), &d) != NVML_SUCCESS) {
      return "err nvml handle";
    }
    if (c == "nvmlmem") {
      nvmlMemory_t m{};
      if (nvmlReturn_t n = api.nvmlDeviceGetMemoryInfo(d, &m); n != NVML_SUCCESS) {
        return "err nvml " + std::to_string(n);
      }
      return "ok " + std::to_string(m.used) + " " + std::to_string(m.free) + " " +
             std::to_string(m.total);
    }
    unsigned int count = 0;
    api.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, nullptr);
    std::vector<nvmlProcessInfo_t> infos(count + 1);
    count = static_cast<unsigned int>(infos.size());
    if (nvmlReturn_t n = api.nvmlDeviceGetComputeRunningProcesses_v3(d, &count, infos.data());
        n != NVML_SUCCESS) {
      return "err nvml " + std::to_string(n);
    }
    std::string out = "ok";
    for (unsigned int i = 0; i < count; ++i) {
      out += (i == 0 ? " " : ",") + std::to_string(infos[i].pid) + ":" +
             std::to_string(infos[i].usedGpuMemory);
    }
    return out;
  }
  if (c == "legacy") {
    // A CUDA 2.x allocator (32-bit ABI) by name from libcuda.so.1, as a program could dlsym it.
    void* self = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void* fn = self != nullptr ? ::dlsym(self, a[1].c_str()) : nullptr;
    if (fn == nullptr) return "err missing " + a[1];
    const auto bytes = static_cast<unsigned int>(Num(a[2]));
    unsigned int ptr = 0, pitch = 0;
    CUarray array = nullptr;
    // Descriptors of CUDA 2.x: 32-bit extents. One byte per element, rows of 16 KiB.
    struct {
      unsigned int width, height, depth;
      CUarray_format format;
      unsigned int channels, flags;
    } desc3{16384, bytes / 16384, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    struct {
      unsigned int width, height;
      CUarray_format format;
      unsigned int channels;
    } desc{16384, bytes / 16384, CU_AD_FORMAT_UNSIGNED_INT8, 1};
    if (a[1] == "cuMemAlloc") {
      r = reinterpret_cast<PFN_cuMemAlloc_v1>(fn)(&ptr, bytes);
    } else if (a[1] == "cuMemAllocPitch") {
      r = reinterpret_cast<PFN_cuMemAllocPitch_v1>(fn)(&ptr, &pitch, 16384, bytes / 16384, 4);
    } else if (a[1] == "cuArrayCreate") {
      r = reinterpret_cast<PFN_cuArrayCreate_v1>(fn)(&array, &desc);
    } else if (a[1] == "cuArray3DCreate") {
      r = reinterpret_cast<PFN_cuArray3DCreate_v1>(fn)(&array, &desc3);
    } else {
      return "err unknown " + a[1];
    }
    return r == CUDA_SUCCESS ? "ok" : Err(r);
  }
  if (c == "hookname") {
    void* self = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    auto name_of = self ? reinterpret_cast<const char* (*)(const void*)>(
                              ::dlsym(self, "tessera_shim_hook_name"))
                        : nullptr;
    if (name_of == nullptr) return "ok -";
    // The pointer this program would call, in its loading mode.
    std::map<std::string, void*> fields = {
#define F(name, type) {#name, reinterpret_cast<void*>(api.name)},
        CLIENT_CUDA(F)
#undef F
    };
    const char* n = name_of(fields[a[1]]);
    return std::string("ok ") + (n ? n : "-");
  }
  if (c == "procmatrix") return ProcMatrix();
  if (c == "procaddr") {
    void* self = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (self == nullptr || a.size() < 3) return "err usage";
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v2>(::dlsym(self, "cuGetProcAddress_v2"));
    auto name_of =
        reinterpret_cast<const char* (*)(const void*)>(::dlsym(self, "tessera_shim_hook_name"));
    if (gpa == nullptr) return "err no cuGetProcAddress_v2";
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    cuuint64_t flags = a.size() > 3 && a[3] == "ptsz"
                           ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                           : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    r = gpa(a[1].c_str(), &fn, static_cast<int>(Num(a[2])), flags, &status);
    if (r != CUDA_SUCCESS) return Err(r) + " " + std::to_string(status);
    const char* n = (name_of != nullptr && fn != nullptr) ? name_of(fn) : nullptr;
    return std::string("ok ") + (n ? n : "-");
  }
  if (c == "forkrun") {
    int fds[2];
    if (::pipe(fds) != 0) return "err pipe";
    pid_t pid = ::fork();
    if (pid == 0) {
      std::string out = Run(std::vector<std::string>(a.begin() + 1, a.end()));
      ssize_t ignored = ::write(fds[1], out.data(), out.size());
      (void)ignored;
      ::_exit(0);
    }
    ::close(fds[1]);
    char buf[512] = {};
    ssize_t n = ::read(fds[0], buf, sizeof(buf) - 1);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return "ok " + std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }
  if (c == "pid") return "ok " + std::to_string(::getpid());
  if (c == "status") {
    void* self = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    auto status =
        self ? reinterpret_cast<size_t (*)(char*, size_t)>(::dlsym(self, "tessera_shim_status"))
             : nullptr;
    if (status == nullptr) return "ok {}";
    char buf[4096];
    status(buf, sizeof(buf));
    return std::string("ok ") + buf;
  }
  if (c == "exit") std::exit(0);
  return "err unknown command " + c;
}

}  // namespace

int main(int argc, char** argv) {
  bool procaddr = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--procaddr=", 0) == 0) {
      procaddr = true;
      std::string v = arg.substr(11);
      g_version = std::atoi(v.c_str());
      if (v.find("ptsz") != std::string::npos)
        g_flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    }
#ifndef SHIM_CLIENT_LINKED
    if (arg.rfind("--libcuda=", 0) == 0) g_libcuda = arg.substr(10);
#endif
  }
#ifdef SHIM_CLIENT_LINKED
  if (procaddr) return 2;  // the linked client binds at load time
  LoadLinked();
#else
  if (!(procaddr ? LoadProcAddress() : LoadDlopen())) return 3;
#endif
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<std::string> args;
    for (std::string w; in >> w;) args.push_back(w);
    if (args.empty()) continue;
    std::string out = Run(args);
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
  }
  return 0;
}
