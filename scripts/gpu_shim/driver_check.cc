// The driver-API half of the GPU check (scripts/gpu_shim_check.py): every allocation path the shim
// counts, on whatever libcuda.so.1 the loader finds, with the share's ledger read directly. Built
// without the CUDA toolkit (src/shim/cuda_abi.h), so the same program runs on a GPU machine and
// against the fake driver in CI (test/shim/shim_gpu_check_test.cc).
//
//   driver_check ROOT            checks against the share under ROOT (TESSERA_SHIM_ROOT); prints
//                                one JSON object: {"cap":..., "checks":[{"name","pass","detail"}]}
//   driver_check --ipc-child HEX (used by the IPC check: a second process of the pod)
//   driver_check --vmm-child     (used by the export check: imports the descriptor on fd 3)
//   driver_check --ipc-hold HEX  (used by the IPC free check: opens, closes when told)
//
// The checks of issue 27 also report what only a real driver can say (in their detail): whether
// its cuGetProcAddress hands out entry points dlsym does not (the shim must stand its hooks in),
// whether its exported descriptors carry the shim's tag (fdinfo lists OFD locks on them), how
// much memory a raised context limit and graph allocations really take next to what the shim
// charges, whether it keeps IPC memory for an opener after the exporter freed it, and whether it
// still serves CUDA 2.x's cuMemAlloc.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shim/contract.h"
#include "shim/cuda_abi.h"
#include "shim/export_tag.h"
#include "shim/ledger.h"
#include "shim/real_driver.h"

extern char** environ;

namespace {

// clang-format off
#define CHECK_API(X)                                                        \
  X(cuInit, PFN_cuInit, "cuInit")                                           \
  X(cuDeviceGet, PFN_cuDeviceGet, "cuDeviceGet")                            \
  X(cuDeviceGetUuid, PFN_cuDeviceGetUuid, "cuDeviceGetUuid_v2")             \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v2, "cuDeviceTotalMem_v2")       \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent, "cuCtxSetCurrent")                \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize, "cuCtxSynchronize")             \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v2, "cuMemGetInfo_v2")                   \
  X(cuMemAlloc, PFN_cuMemAlloc_v2, "cuMemAlloc_v2")                         \
  X(cuMemAllocPitch, PFN_cuMemAllocPitch_v2, "cuMemAllocPitch_v2")          \
  X(cuMemFree, PFN_cuMemFree_v2, "cuMemFree_v2")                            \
  X(cuMemsetD8, PFN_cuMemsetD8_v2, "cuMemsetD8_v2")                         \
  X(cuMemcpyDtoH, PFN_cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2")                   \
  X(cuArray3DCreate, PFN_cuArray3DCreate_v2, "cuArray3DCreate_v2")          \
  X(cuArrayDestroy, PFN_cuArrayDestroy, "cuArrayDestroy")                   \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate, "cuMipmappedArrayCreate") \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy") \
  X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity") \
  X(cuMemCreate, PFN_cuMemCreate, "cuMemCreate")                            \
  X(cuMemRelease, PFN_cuMemRelease, "cuMemRelease")                         \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve, "cuMemAddressReserve")    \
  X(cuMemAddressFree, PFN_cuMemAddressFree, "cuMemAddressFree")             \
  X(cuMemMap, PFN_cuMemMap, "cuMemMap")                                     \
  X(cuMemUnmap, PFN_cuMemUnmap, "cuMemUnmap")                               \
  X(cuMemSetAccess, PFN_cuMemSetAccess, "cuMemSetAccess")                   \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync, "cuMemAllocAsync")                \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync") \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync, "cuMemFreeAsync")                   \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate, "cuMemPoolCreate")                \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy, "cuMemPoolDestroy")             \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo, "cuMemPoolTrimTo")                \
  X(cuIpcGetMemHandle, PFN_cuIpcGetMemHandle, "cuIpcGetMemHandle")          \
  X(cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle_v2") \
  X(cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle, "cuIpcCloseMemHandle")    \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v2, "cuGetProcAddress_v2")          \
  X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle, "cuMemExportToShareableHandle") \
  X(cuMemImportFromShareableHandle, PFN_cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle") \
  X(cuStreamCreate, PFN_cuStreamCreate, "cuStreamCreate")                   \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize, "cuStreamSynchronize")    \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v2, "cuStreamBeginCapture_v2") \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture, "cuStreamEndCapture")       \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") \
  X(cuGraphLaunch, PFN_cuGraphLaunch, "cuGraphLaunch")                      \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy, "cuGraphExecDestroy")       \
  X(cuGraphDestroy, PFN_cuGraphDestroy, "cuGraphDestroy")                   \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim") \
  X(cuCtxSetLimit, PFN_cuCtxSetLimit, "cuCtxSetLimit")
// clang-format on

struct Api {
#define FIELD(name, type, sym) type name = nullptr;
  CHECK_API(FIELD)
#undef FIELD
  const char* (*hook_name)(const void*) = nullptr;
  size_t (*status)(char*, size_t) = nullptr;
};

Api api;
std::string g_root;
std::string g_uuid;
std::string g_checks;
int g_failed = 0;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n') ? ' ' : c;
  }
  return out;
}

void Check(const std::string& name, bool pass, const std::string& detail) {
  if (!g_checks.empty()) g_checks += ",";
  g_checks += "{\"name\":\"" + name + "\",\"pass\":" + (pass ? "true" : "false") +
              ",\"detail\":\"" + Escape(detail) + "\"}";
  if (!pass) ++g_failed;
}

std::string Uuid(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char out[64];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

// The pod's usage as the ledger says (what every process of the pod is charged).
uint64_t PodUsed() {
  std::string error;
  auto l = tessera::shim::Ledger::Open(g_root + "/" + tessera::shim::contract::kLedgerSubdir + "/" +
                                           g_uuid + tessera::shim::contract::kLedgerSuffix,
                                       &error);
  return l == nullptr ? 0 : l->Used();
}

bool Load() {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen libcuda.so.1: %s\n", ::dlerror());
    return false;
  }
#define LOAD(name, type, sym) api.name = reinterpret_cast<type>(::dlsym(h, sym));
  CHECK_API(LOAD)
#undef LOAD
  api.hook_name =
      reinterpret_cast<const char* (*)(const void*)>(::dlsym(h, "tessera_shim_hook_name"));
  api.status = reinterpret_cast<size_t (*)(char*, size_t)>(::dlsym(h, "tessera_shim_status"));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUuuid u{};
  if (api.cuInit(0) != CUDA_SUCCESS || api.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      api.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      api.cuCtxSetCurrent(ctx) != CUDA_SUCCESS || api.cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cannot set up a CUDA context\n");
    return false;
  }
  g_uuid = Uuid(u);
  return true;
}

std::string Hex(const void* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    char b[3];
    std::snprintf(b, sizeof(b), "%02x", static_cast<const unsigned char*>(p)[i]);
    s += b;
  }
  return s;
}

std::string N(uint64_t v) { return std::to_string(v); }

void VmmCheck(const char* name, CUmemLocationType type, bool charged) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = 0;
  size_t gran = 2 << 20;
  api.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  const size_t size = ((64ULL << 20) + gran - 1) / gran * gran;
  const uint64_t before = PodUsed();
  CUmemGenericAllocationHandle h = 0;
  CUresult r = api.cuMemCreate(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS) {
    // Host locations may be unsupported on a machine; what matters is a clean error.
    Check(name, !charged && PodUsed() == before, "cuMemCreate returned " + N(r) + ", no crash");
    return;
  }
  CUdeviceptr va = 0;
  api.cuMemAddressReserve(&va, size, 0, 0, 0);
  CUresult mr = api.cuMemMap(va, size, 0, h, 0);
  const uint64_t during = PodUsed();
  if (mr == CUDA_SUCCESS) api.cuMemUnmap(va, size);
  api.cuMemRelease(h);
  api.cuMemAddressFree(va, size);
  const uint64_t after = PodUsed();
  bool pass = (charged ? during - before == size : during == before) && after == before;
  Check(name, pass,
        "pod used " + N(before) + " -> " + N(during) + " -> " + N(after) + " for " + N(size));
}

// Opens the IPC handle written in hex (as Hex wrote it) in this process.
CUresult OpenIpcHandle(const std::string& hex, CUdeviceptr* p) {
  CUipcMemHandle h{};
  for (size_t i = 0; i < sizeof(h) && 2 * i + 1 < hex.size(); ++i) {
    h.reserved[i] = static_cast<char>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
  return api.cuIpcOpenMemHandle(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}

int IpcChild(const std::string& hex) {
  if (!Load()) return 1;
  CUdeviceptr p = 0;
  CUresult r = OpenIpcHandle(hex, &p);
  unsigned char b = 0;
  if (r == CUDA_SUCCESS) r = api.cuMemcpyDtoH(&b, p, 1);
  std::printf("%d %u %llu\n", r, b, static_cast<unsigned long long>(PodUsed()));
  if (r == CUDA_SUCCESS) api.cuIpcCloseMemHandle(p);
  return 0;
}

// The real driver under the shim (the shim's DT_NEEDED library), for what it answers itself.
void* RealDriver() { return ::dlopen("libtessera-real-cuda.so.1", RTLD_NOW | RTLD_NOLOAD); }

// Every symbol the shim intercepts, at 12000 and 13000 with both stream flags: through the shim
// it is always a hook, whatever the driver returns; the detail counts the driver's answers that
// were not its exported function (internal entry points the shim cannot know by address).
void ProcAddressCheck() {
  void* real = RealDriver();
  auto real_gpa =
      real ? reinterpret_cast<PFN_cuGetProcAddress_v2>(::dlsym(real, "cuGetProcAddress_v2"))
           : nullptr;
  const std::vector<std::string> bases = tessera::shim::InterceptedProcAddressNames();
  int asked = 0, hooked = 0, internal = 0;
  std::string missing;
  for (const std::string& base : bases) {
    for (int version : {12000, 13000}) {
      for (cuuint64_t flags :
           {CU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
        void* fn = nullptr;
        CUdriverProcAddressQueryResult status = 0;
        if (api.cuGetProcAddress(base.c_str(), &fn, version, flags, &status) != CUDA_SUCCESS ||
            fn == nullptr) {
          continue;  // the driver does not have it at this version
        }
        ++asked;
        if (api.hook_name != nullptr && api.hook_name(fn) != nullptr) {
          ++hooked;
        } else if (missing.size() < 200) {
          missing += " " + base;
        }
        void* raw = nullptr;
        if (real_gpa != nullptr &&
            real_gpa(base.c_str(), &raw, version, flags, &status) == CUDA_SUCCESS && raw) {
          Dl_info info{};
          if (::dladdr(raw, &info) == 0 || info.dli_sname == nullptr ||
              ::dlsym(real, info.dli_sname) != raw) {
            ++internal;
          }
        }
      }
    }
  }
  Check("cuGetProcAddress_every_hooked_symbol", asked > 0 && hooked == asked,
        N(hooked) + " of " + N(asked) + " answers are the shim's hooks;" + " the driver answered " +
            N(internal) + " of them with internal entry points" +
            (missing.empty() ? "" : "; not hooked:" + missing));
}

CUmemGenericAllocationHandle CreateDevice(size_t* size) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 2 << 20;
  api.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  *size = ((128ULL << 20) + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  return api.cuMemCreate(&h, *size, &prop, 0) == CUDA_SUCCESS ? h : 0;
}

// The child's side of RunHolder, once it took the allocation (`r`, its result): reports, waits
// for the parent's byte (the creator let go), reports, lets go itself, reports.
template <typename LetGo>
int HoldUntilTold(CUresult r, LetGo let_go) {
  std::printf("%d %llu\n", r, static_cast<unsigned long long>(PodUsed()));
  std::fflush(stdout);
  char step = 0;
  if (::read(0, &step, 1) != 1) return 1;
  std::printf("%llu\n", static_cast<unsigned long long>(PodUsed()));
  std::fflush(stdout);
  let_go();
  std::printf("%llu\n", static_cast<unsigned long long>(PodUsed()));
  return 0;
}

// The second process of the export check: imports the descriptor on fd 3, maps it, and reports
// the pod's usage at each step the parent asks for (one byte on stdin per step).
int VmmChild() {
  if (!Load()) return 1;
  CUmemGenericAllocationHandle h = 0;
  CUresult r = api.cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(intptr_t{3}),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ::close(3);
  size_t size = 128ULL << 20;
  CUdeviceptr va = 0;
  if (r == CUDA_SUCCESS) r = api.cuMemAddressReserve(&va, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = api.cuMemMap(va, size, 0, h, 0);
  return HoldUntilTold(r, [&] {
    if (r != CUDA_SUCCESS) return;
    api.cuMemUnmap(va, size);
    api.cuMemRelease(h);
    api.cuMemAddressFree(va, size);
  });
}

// A second process of the pod in the checks where an allocation outlives its creator's hold
// (VmmChild, IpcHoldChild): this program again with `mode` and `arg`, on pipes. It takes the
// allocation and prints "<result> <pod used>"; then `let_go` runs here (the creator lets go); one
// byte tells the child to print the pod's usage, let go too, and print it again. `fd3`, when not
// -1, becomes the child's descriptor 3 and is closed here before `let_go`.
struct HolderReport {
  bool read_all = false;
  int result = -1;
  unsigned long long held = 0, after_creator = 0, after_child = 0;
};
template <typename LetGo>
HolderReport RunHolder(const char* self, const char* mode, const char* arg, int fd3, LetGo let_go) {
  HolderReport out;
  // The child gets exactly stdin, stdout and fd 3: any other copy of the exported descriptor
  // open in it would keep the creator's hold (the shim's probe sees it) and hide the release.
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) return out;
  if (fd3 >= 0) ::fcntl(fd3, F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
  if (fd3 >= 0) posix_spawn_file_actions_adddup2(&actions, fd3, 3);
  char* child_argv[] = {const_cast<char*>(self), const_cast<char*>(mode), const_cast<char*>(arg),
                        nullptr};
  pid_t pid = 0;
  bool spawned = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, child_argv, environ) == 0;
  posix_spawn_file_actions_destroy(&actions);
  ::close(to_child[0]);
  ::close(from_child[1]);
  if (fd3 >= 0) ::close(fd3);
  FILE* in = ::fdopen(from_child[0], "r");
  out.read_all = spawned && std::fscanf(in, "%d %llu", &out.result, &out.held) == 2;
  let_go();
  out.read_all = out.read_all && ::write(to_child[1], "x", 1) == 1 &&
                 std::fscanf(in, "%llu", &out.after_creator) == 1 &&
                 std::fscanf(in, "%llu", &out.after_child) == 1;
  std::fclose(in);
  ::close(to_child[1]);
  int status = 0;
  if (spawned) ::waitpid(pid, &status, 0);
  return out;
}

// Export a cuMemCreate allocation as a file descriptor, import it in another process, release the
// original: the pod stays charged for it until the importer lets go (shim README, "Shared
// allocations"). The detail says what the real driver's descriptor is and whether it carries the
// shim's tag.
void ExportCheck(const char* self) {
  const uint64_t before = PodUsed();
  size_t size = 0;
  CUmemGenericAllocationHandle h = CreateDevice(&size);
  int fd = -1;
  CUresult r =
      h != 0 ? api.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
             : CUDA_ERROR_OUT_OF_MEMORY;
  if (r != CUDA_SUCCESS || fd < 0) {
    Check("vmm_export_import_release", false, "create/export: " + N(r));
    if (h != 0) api.cuMemRelease(h);
    return;
  }
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t key = tessera::shim::ReadExportTag(fd);
  const std::string kind = S_ISCHR(st.st_mode)   ? "a character device"
                           : S_ISREG(st.st_mode) ? "a regular file"
                                                 : "another kind of file";
  Check("vmm_export_tagged", key != 0,
        "the exported descriptor is " + kind + " (inode " + N(st.st_ino) + "); tag " + N(key));
  uint64_t creator_gone = 0;
  const HolderReport child = RunHolder(self, "--vmm-child", nullptr, fd, [&] {
    api.cuMemRelease(h);  // the creator lets go: the importer holds it
    creator_gone = PodUsed();
  });
  const int cr = child.result;
  const unsigned long long imported = child.held, after_release = child.after_creator,
                           after_all = child.after_child;
  const bool pass = child.read_all && cr == CUDA_SUCCESS && imported == before + size &&
                    creator_gone == before + size && after_release == before + size &&
                    after_all == before;
  Check("vmm_export_import_release", pass,
        "pod used " + N(before) + "; imported " + N(imported) + "; creator released " +
            N(creator_gone) + "/" + N(after_release) + "; importer released " + N(after_all) +
            " (size " + N(size) + ", child import " + N(cr) + ")");
}

// The second process of the IPC free check: opens the handle, reports, and closes it when the
// parent says (one byte on stdin), reporting the pod's usage before and after.
int IpcHoldChild(const std::string& hex) {
  if (!Load()) return 1;
  CUdeviceptr p = 0;
  CUresult r = OpenIpcHandle(hex, &p);
  return HoldUntilTold(r, [&] {
    if (r == CUDA_SUCCESS) api.cuIpcCloseMemHandle(p);
  });
}

// Export linear memory over IPC, open it in a second process, free it in the first: the pod stays
// charged for it until the opener closes it (CUDA leaves a free before the close undefined). The
// detail says what the real driver did: how much of its free memory came back at the exporter's
// free and at the opener's close.
void IpcFreeCheck(const char* self) {
  void* real = RealDriver();
  auto real_info =
      real ? reinterpret_cast<PFN_cuMemGetInfo_v2>(::dlsym(real, "cuMemGetInfo_v2")) : nullptr;
  auto real_free = [&] {
    size_t f = 0, t = 0;
    if (real_info) real_info(&f, &t);
    return uint64_t{f};
  };
  const uint64_t size = 256ULL << 20;
  const uint64_t before = PodUsed();
  CUdeviceptr p = 0;
  CUipcMemHandle h{};
  CUresult r = api.cuMemAlloc(&p, size);
  if (r == CUDA_SUCCESS) r = api.cuIpcGetMemHandle(&h, p);
  if (r != CUDA_SUCCESS) {
    Check("ipc_free_while_opened", false, "alloc/export: " + N(r));
    if (p != 0) api.cuMemFree(p);
    return;
  }
  const std::string hex = Hex(&h, sizeof(h));
  uint64_t free_opened = 0, exporter_gone = 0, free_after_free = 0;
  const HolderReport child = RunHolder(self, "--ipc-hold", hex.c_str(), -1, [&] {
    free_opened = real_free();
    api.cuMemFree(p);  // the exporter lets go while the opener still maps it
    exporter_gone = PodUsed();
    free_after_free = real_free();
  });
  const uint64_t free_after_close = real_free();
  const int cr = child.result;
  const unsigned long long opened = child.held, after_free = child.after_creator,
                           after_close = child.after_child;
  auto gained = [](uint64_t from, uint64_t to) { return N(to > from ? to - from : 0); };
  const bool pass = child.read_all && cr == CUDA_SUCCESS && opened == before + size &&
                    exporter_gone == before + size && after_free == before + size &&
                    after_close == before;
  Check("ipc_free_while_opened", pass,
        "pod used " + N(before) + "; opened " + N(opened) + "; exporter freed " + N(exporter_gone) +
            "/" + N(after_free) + "; opener closed " + N(after_close) + " (child open " + N(cr) +
            "); the driver gave back " + gained(free_opened, free_after_free) +
            " bytes at the exporter's free and " + gained(free_after_free, free_after_close) +
            " at the opener's close");
}

// CUDA 2.x's allocators (32-bit ABI), reached by name: refused on a shared GPU. The detail says
// whether the driver itself still serves cuMemAlloc (v1).
void LegacyAllocatorCheck() {
  void* self = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto alloc = self ? reinterpret_cast<PFN_cuMemAlloc_v1>(::dlsym(self, "cuMemAlloc")) : nullptr;
  CUdeviceptr_v1 p = 0;
  const uint64_t before = PodUsed();
  CUresult r = alloc ? alloc(&p, 64U << 20) : CUDA_ERROR_NOT_FOUND;
  void* real = RealDriver();
  auto real_alloc =
      real ? reinterpret_cast<PFN_cuMemAlloc_v1>(::dlsym(real, "cuMemAlloc")) : nullptr;
  auto real_free_v1 =
      real ? reinterpret_cast<CUresult (*)(CUdeviceptr_v1)>(::dlsym(real, "cuMemFree")) : nullptr;
  std::string driver = "not exported by the driver";
  if (real_alloc != nullptr) {
    CUdeviceptr_v1 q = 0;
    CUresult rr = real_alloc(&q, 1U << 20);
    driver = "the driver answers cuMemAlloc (v1) with " + N(rr);
    if (rr == CUDA_SUCCESS && real_free_v1 != nullptr) real_free_v1(q);
  }
  Check("cuda2_allocators_refused", r == CUDA_ERROR_NOT_SUPPORTED && PodUsed() == before,
        "cuMemAlloc (v1) through libcuda.so.1: " + N(r) + "; " + driver);
}

// Graph allocation nodes: counted from the launch that maps them, given back by a trim.
void GraphMemoryCheck() {
  CUstream s = nullptr;
  CUgraph g = nullptr;
  CUgraphExec e = nullptr;
  CUdeviceptr p = 0;
  const uint64_t before = PodUsed();
  CUresult r = api.cuStreamCreate(&s, 0);
  if (r == CUDA_SUCCESS) r = api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
  if (r == CUDA_SUCCESS) r = api.cuMemAllocAsync(&p, 192ULL << 20, s);
  if (r == CUDA_SUCCESS) r = api.cuMemFreeAsync(p, s);
  if (r == CUDA_SUCCESS) r = api.cuStreamEndCapture(s, &g);
  if (r == CUDA_SUCCESS) r = api.cuGraphInstantiateWithFlags(&e, g, 0);
  const uint64_t instantiated = PodUsed();
  if (r == CUDA_SUCCESS) r = api.cuGraphLaunch(e, s);
  if (r == CUDA_SUCCESS) r = api.cuStreamSynchronize(s);
  const uint64_t launched = PodUsed();
  if (r == CUDA_SUCCESS) r = api.cuDeviceGraphMemTrim(0);
  api.cuCtxSynchronize();
  const uint64_t trimmed = PodUsed();
  if (e != nullptr) api.cuGraphExecDestroy(e);
  if (g != nullptr) api.cuGraphDestroy(g);
  Check("graph_allocations",
        r == CUDA_SUCCESS && instantiated == before && launched >= before + (192ULL << 20) &&
            trimmed == before,
        "pod used " + N(before) + " -> " + N(instantiated) + " instantiated -> " + N(launched) +
            " launched -> " + N(trimmed) + " trimmed (" + N(r) + ")");
}

// A raised device-malloc heap: charged beyond the 8 MiB default; the detail says what the driver
// itself took (its free memory before and after, read past the shim).
void ContextLimitCheck() {
  void* real = RealDriver();
  auto real_info =
      real ? reinterpret_cast<PFN_cuMemGetInfo_v2>(::dlsym(real, "cuMemGetInfo_v2")) : nullptr;
  size_t free_before = 0, free_after = 0, total = 0;
  if (real_info) real_info(&free_before, &total);
  const uint64_t before = PodUsed();
  CUresult r = api.cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 264ULL << 20);  // 256 MiB beyond
  const uint64_t raised = PodUsed();
  if (real_info) real_info(&free_after, &total);
  CUresult back = api.cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8ULL << 20);
  Check("context_heap_limit",
        r == CUDA_SUCCESS && back == CUDA_SUCCESS && raised == before + (256ULL << 20) &&
            PodUsed() == before,
        "pod used " + N(before) + " -> " + N(raised) + " -> " + N(PodUsed()) +
            "; the driver's free memory fell by " +
            N(free_before > free_after ? free_before - free_after : 0));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--ipc-child") == 0) {
    const char* root = std::getenv(tessera::shim::contract::kEnvRoot);
    g_root = root != nullptr ? root : tessera::shim::contract::kRootDir;
    return IpcChild(argv[2]);
  }
  if (argc == 3 && std::strcmp(argv[1], "--ipc-hold") == 0) {
    const char* root = std::getenv(tessera::shim::contract::kEnvRoot);
    g_root = root != nullptr ? root : tessera::shim::contract::kRootDir;
    return IpcHoldChild(argv[2]);
  }
  if (argc == 2 && std::strcmp(argv[1], "--vmm-child") == 0) {
    const char* root = std::getenv(tessera::shim::contract::kEnvRoot);
    g_root = root != nullptr ? root : tessera::shim::contract::kRootDir;
    return VmmChild();
  }
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: driver_check ROOT | driver_check --ipc-child HANDLE | --ipc-hold HANDLE | "
                 "--vmm-child\n");
    return 2;
  }
  g_root = argv[1];
  if (!Load()) return 1;
  size_t free = 0, total = 0, total_mem = 0;
  api.cuMemGetInfo(&free, &total);
  api.cuDeviceTotalMem(&total_mem, 0);
  const uint64_t cap = total;
  Check(
      "reports_the_share", total_mem == total && free <= total && PodUsed() == 0,
      "cuMemGetInfo total " + N(total) + " free " + N(free) + ", cuDeviceTotalMem " + N(total_mem));

  // Pitch: counted at the pitch the driver chose.
  {
    CUdeviceptr p = 0;
    size_t pitch = 0;
    CUresult r = api.cuMemAllocPitch(&p, &pitch, 5000, 4096, 4);
    uint64_t used = PodUsed();
    if (r == CUDA_SUCCESS) api.cuMemFree(p);
    Check("pitch", r == CUDA_SUCCESS && used == pitch * 4096 && PodUsed() == 0,
          "pitch " + N(pitch) + ", pod used " + N(used));
  }
  // Arrays and mipmaps: counted while they live.
  {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = 1024;
    d.Height = 1024;
    d.Depth = 16;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 4;
    CUarray a = nullptr;
    CUresult r = api.cuArray3DCreate(&a, &d);
    uint64_t used = PodUsed();
    if (r == CUDA_SUCCESS) api.cuArrayDestroy(a);
    Check("array3d", r == CUDA_SUCCESS && used >= 1024ULL * 1024 * 16 * 16 && PodUsed() == 0,
          "pod used " + N(used));
    d.Depth = 0;
    CUmipmappedArray m = nullptr;
    r = api.cuMipmappedArrayCreate(&m, &d, 8);
    used = PodUsed();
    if (r == CUDA_SUCCESS) api.cuMipmappedArrayDestroy(m);
    Check("mipmapped_array", r == CUDA_SUCCESS && used >= 1024ULL * 1024 * 16 && PodUsed() == 0,
          "pod used " + N(used));
  }
  // Virtual memory at every location type.
  VmmCheck("vmm_device", CU_MEM_LOCATION_TYPE_DEVICE, true);
  VmmCheck("vmm_host", CU_MEM_LOCATION_TYPE_HOST, false);
  VmmCheck("vmm_host_numa", CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  // Stream-ordered pools: the default pool, and an explicit one through FromPool.
  {
    CUdeviceptr p = 0;
    CUresult r = api.cuMemAllocAsync(&p, 256ULL << 20, nullptr);
    uint64_t used = PodUsed();
    if (r == CUDA_SUCCESS) api.cuMemFreeAsync(p, nullptr);
    api.cuCtxSynchronize();
    uint64_t after = PodUsed();
    Check("pool_default", r == CUDA_SUCCESS && used >= 256ULL << 20 && after < used,
          "pod used " + N(used) + " -> " + N(after) + " after free and sync");
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemoryPool pool = nullptr;
    r = api.cuMemPoolCreate(&pool, &props);
    if (r == CUDA_SUCCESS) r = api.cuMemAllocFromPoolAsync(&p, 128ULL << 20, pool, nullptr);
    used = PodUsed();
    if (r == CUDA_SUCCESS) {
      api.cuMemFreeAsync(p, nullptr);
      api.cuCtxSynchronize();
      api.cuMemPoolTrimTo(pool, 0);
      api.cuMemPoolDestroy(pool);
    }
    Check("pool_from_pool",
          r == CUDA_SUCCESS && used >= after + (128ULL << 20) && PodUsed() <= after,
          "pod used " + N(used) + " -> " + N(PodUsed()));
  }
  // The cap: over it is CUDA_ERROR_OUT_OF_MEMORY; free - 256 MiB fits, free + 256 MiB does not.
  {
    CUdeviceptr p = 0;
    CUresult over = api.cuMemAlloc(&p, cap + (1ULL << 20));
    api.cuMemGetInfo(&free, &total);
    CUresult fits = api.cuMemAlloc(&p, free - (256ULL << 20));
    if (fits == CUDA_SUCCESS) api.cuMemFree(p);
    CUresult too_much = api.cuMemAlloc(&p, free + (256ULL << 20));
    if (too_much == CUDA_SUCCESS) api.cuMemFree(p);
    Check("out_of_memory", over == CUDA_ERROR_OUT_OF_MEMORY, "over the cap: " + N(over));
    Check("free_minus_256MiB_fits", fits == CUDA_SUCCESS, "free " + N(free) + ": " + N(fits));
    Check("free_plus_256MiB_refused", too_much == CUDA_ERROR_OUT_OF_MEMORY, N(too_much));
  }
  // cuGetProcAddress at CUDA 12.0 and 13.0: the driver's variant, through the shim's hook, counted.
  for (int version : {12000, 13000}) {
    void* fn = nullptr;
    void* launch = nullptr;
    CUdriverProcAddressQueryResult status = 0;
    api.cuGetProcAddress("cuMemAlloc", &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    api.cuGetProcAddress("cuLaunchKernel", &launch, version,
                         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status);
    const char* name = api.hook_name != nullptr && fn != nullptr ? api.hook_name(fn) : nullptr;
    const char* lname =
        api.hook_name != nullptr && launch != nullptr ? api.hook_name(launch) : nullptr;
    bool counted = false;
    if (fn != nullptr) {
      CUdeviceptr p = 0;
      if (reinterpret_cast<PFN_cuMemAlloc_v2>(fn)(&p, 64ULL << 20) == CUDA_SUCCESS) {
        counted = PodUsed() == 64ULL << 20;
        api.cuMemFree(p);
      }
    }
    Check("cuGetProcAddress_" + N(version),
          name != nullptr && std::strcmp(name, "cuMemAlloc_v2") == 0 && lname != nullptr &&
              std::strcmp(lname, "cuLaunchKernel_ptsz") == 0 && counted,
          std::string("cuMemAlloc -> ") + (name ? name : "(not a hook)") +
              ", cuLaunchKernel ptsz -> " + (lname ? lname : "(not a hook)") +
              (counted ? ", counted" : ", not counted"));
  }
  // IPC: a second process of the pod opens this one's memory; nothing is counted twice.
  {
    CUdeviceptr p = 0;
    CUipcMemHandle h{};
    CUresult r = api.cuMemAlloc(&p, 256ULL << 20);
    if (r == CUDA_SUCCESS) r = api.cuMemsetD8(p, 42, 1 << 20);
    if (r == CUDA_SUCCESS) r = api.cuIpcGetMemHandle(&h, p);
    std::string detail = "export: " + N(r);
    bool pass = false;
    if (r == CUDA_SUCCESS) {
      std::string hex = Hex(&h, sizeof(h));
      int fds[2];
      if (::pipe(fds) == 0) {
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
        char* child_argv[] = {argv[0], const_cast<char*>("--ipc-child"),
                              const_cast<char*>(hex.c_str()), nullptr};
        pid_t pid = 0;
        if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, child_argv, environ) == 0) {
          ::close(fds[1]);
          char buf[128] = {};
          ssize_t n = ::read(fds[0], buf, sizeof(buf) - 1);
          int status = 0;
          ::waitpid(pid, &status, 0);
          int cr = -1;
          unsigned byte = 0;
          unsigned long long child_pod = 0;
          if (n > 0 && std::sscanf(buf, "%d %u %llu", &cr, &byte, &child_pod) == 3) {
            pass = cr == CUDA_SUCCESS && byte == 42 && child_pod == 256ULL << 20;
            detail = "child: open " + N(cr) + ", read " + N(byte) + ", pod used " + N(child_pod);
          } else {
            detail = "the child answered nothing";
          }
        }
        posix_spawn_file_actions_destroy(&actions);
        ::close(fds[0]);
      }
      api.cuMemFree(p);
    }
    Check("ipc_not_counted_twice", pass, detail);
  }
  // Issue 27: what a hostile tenant would try, and what only a real driver can tell.
  ProcAddressCheck();
  ExportCheck(argv[0]);
  IpcFreeCheck(argv[0]);
  LegacyAllocatorCheck();
  GraphMemoryCheck();
  ContextLimitCheck();
  std::string status = "{}";
  if (api.status != nullptr) {
    char buf[4096];
    api.status(buf, sizeof(buf));
    status = buf;
  }
  std::printf("{\"uuid\":\"%s\",\"cap\":%llu,\"failed\":%d,\"shim\":%s,\"checks\":[%s]}\n",
              g_uuid.c_str(), static_cast<unsigned long long>(cap), g_failed, status.c_str(),
              g_checks.c_str());
  return g_failed == 0 ? 0 : 1;
}
