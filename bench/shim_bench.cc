// The shim's overhead against the fake driver alone, in one process per configuration (the
// configuration is which libcuda.so.1 the loader finds). bench/run_shim.sh runs it side by side
// and writes bench/results/shim.md.
//
//   shim_bench setup DIR       a fake machine, a pod with an 8 GiB share, a pod without, and the
//                              library layouts (DIR/plain: the fake driver; DIR/shim: the shim)
//   shim_bench measure         per-call latency of the driver entry points the shim intercepts:
//                              one JSON line per operation, p50 and p99 in nanoseconds
//   shim_bench startup N       N processes started at once, each timing cuInit to its first
//                              context and allocation: one JSON line, median and max in ms
//   shim_bench first-context   (one of those processes)
//   shim_bench accounting DIR  the shim's bookkeeping alone (ledger, tracker, gate), in process
//
// Times are per call, as the medians of batch means (a batch of B calls timed together, so that
// the clock read is not what is measured).
#include <dlfcn.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "shim/contract.h"
#include "shim/cuda_abi.h"
#ifndef SHIM_BENCH_NO_SETUP  // the GPU check builds measure and startup only, with g++ alone
#include "fake_cuda/fake_machine.h"
#include "shim/compute_gate.h"
#include "shim/ledger.h"
#include "shim/segments.h"
#include "shim/tracker.h"
#endif

extern char** environ;

namespace {

int64_t Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

// clang-format off
#define BENCH_API(X)                                                  \
  X(cuInit, PFN_cuInit, "cuInit")                                     \
  X(cuDeviceGet, PFN_cuDeviceGet, "cuDeviceGet")                      \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent, "cuCtxSetCurrent")          \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize, "cuCtxSynchronize")       \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v2, "cuMemGetInfo_v2")             \
  X(cuMemAlloc, PFN_cuMemAlloc_v2, "cuMemAlloc_v2")                   \
  X(cuMemFree, PFN_cuMemFree_v2, "cuMemFree_v2")                      \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync, "cuMemAllocAsync")          \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync, "cuMemFreeAsync")             \
  X(cuMemCreate, PFN_cuMemCreate, "cuMemCreate")                      \
  X(cuMemRelease, PFN_cuMemRelease, "cuMemRelease")                   \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve, "cuMemAddressReserve") \
  X(cuMemAddressFree, PFN_cuMemAddressFree, "cuMemAddressFree")       \
  X(cuMemMap, PFN_cuMemMap, "cuMemMap")                               \
  X(cuMemUnmap, PFN_cuMemUnmap, "cuMemUnmap")                         \
  X(cuModuleLoadData, PFN_cuModuleLoadData, "cuModuleLoadData")       \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction, "cuModuleGetFunction") \
  X(cuLaunchKernel, PFN_cuLaunchKernel, "cuLaunchKernel")             \
  X(cuStreamCreate, PFN_cuStreamCreate, "cuStreamCreate")             \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v2, "cuStreamBeginCapture_v2") \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture, "cuStreamEndCapture") \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") \
  X(cuGraphLaunch, PFN_cuGraphLaunch, "cuGraphLaunch")
// clang-format on

struct Api {
#define FIELD(name, type, sym) type name = nullptr;
  BENCH_API(FIELD)
#undef FIELD
};

bool Load(Api* api) {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen libcuda.so.1: %s\n", ::dlerror());
    return false;
  }
#define LOAD(name, type, sym) api->name = reinterpret_cast<type>(::dlsym(h, sym));
  BENCH_API(LOAD)
#undef LOAD
  return api->cuInit != nullptr && api->cuLaunchKernel != nullptr;
}

bool Init(const Api& api) {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  return api.cuInit(0) == CUDA_SUCCESS && api.cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
         api.cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
         api.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

// Per-call nanoseconds: `samples` batches of `batch` calls; p50 and p99 of the batch means.
void Measure(const char* op, int samples, int batch, const std::function<void()>& call) {
  for (int i = 0; i < std::max(batch, 100); ++i) call();  // warm up
  std::vector<double> per_call;
  per_call.reserve(static_cast<size_t>(samples));
  for (int s = 0; s < samples; ++s) {
    int64_t t0 = Now();
    for (int i = 0; i < batch; ++i) call();
    per_call.push_back(static_cast<double>(Now() - t0) / batch);
  }
  std::sort(per_call.begin(), per_call.end());
  auto at = [&](double q) { return per_call[static_cast<size_t>(q * (per_call.size() - 1))]; };
  std::printf("{\"op\":\"%s\",\"p50_ns\":%.1f,\"p99_ns\":%.1f,\"calls\":%d}\n", op, at(0.5),
              at(0.99), samples * batch);
  std::fflush(stdout);
}

#ifndef SHIM_BENCH_NO_SETUP
int Setup(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  std::string error =
      tessera::fake::CreateMachine(dir + "/machine", tessera::fake::Devices(1, 80ULL << 30));
  if (!error.empty()) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  tessera::shim::SegmentOptions o;
  o.pod_uid = "bench";
  o.limits.memory_limit_bytes = 8ULL << 30;
  auto seg =
      tessera::shim::Segment::Create(dir + "/pods/share", tessera::fake::Devices(1, 1)[0].uuid, o);
  if (!seg.ok()) {
    std::fprintf(stderr, "%s\n", std::string(seg.status().message()).c_str());
    return 1;
  }
  ::mkdir((dir + "/pods/noshare").c_str(), 0755);
  struct Link {
    const char* dir;
    const char* name;
    const char* target;
  };
  for (const Link& l :
       std::vector<Link>{{"plain", "libcuda.so.1", TESSERA_FAKE_CUDA},
                         {"plain", "libnvidia-ml.so.1", TESSERA_FAKE_NVML},
                         {"shim", "libcuda.so.1", TESSERA_SHIM_LIBRARY},
                         {"shim", "libnvidia-ml.so.1", TESSERA_SHIM_NVML_LIBRARY},
                         {"shim", tessera::shim::contract::kRealCudaLibrary, TESSERA_FAKE_CUDA},
                         {"shim", tessera::shim::contract::kRealNvmlLibrary, TESSERA_FAKE_NVML}}) {
    std::string d = dir + "/" + l.dir;
    ::mkdir(d.c_str(), 0755);
    std::string path = d + "/" + l.name;
    ::unlink(path.c_str());
    if (::symlink(l.target, path.c_str()) != 0) {
      std::perror(path.c_str());
      return 1;
    }
  }
  return 0;
}

// The shim's own bookkeeping per call, without the loader or a driver: what it adds to an
// allocation (reserve in the pod's ledger, record the pointer; and back) and to a capped launch.
int Accounting(const std::string& dir) {
  using namespace tessera::shim;
  std::string error;
  const std::string path = dir + "/accounting.ledger";
  ::unlink(path.c_str());
  if (!Ledger::Create(path, "GPU-bench", kDefaultLedgerSlots, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  auto ledger = Ledger::Open(path, &error);
  if (ledger == nullptr || !ledger->Claim(ProcessIdentity::Current(), &error)) return 1;
  Tracker tracker;
  uint64_t key = 0x7f0000000000ULL;
  Measure("shim bookkeeping: reserve + record + take + release (no driver)", 200, 1000, [&] {
    ledger->TryCharge(4096, 8ULL << 30);
    tracker.Add(key, Allocation{4096, 0, nullptr, AllocKind::kLinear});
    tracker.Take(key);
    ledger->Uncharge(4096);
    key += 4096;
  });
  Measure("shim bookkeeping: the pod's usage (cuMemGetInfo's share)", 200, 1000,
          [&] { (void)ledger->Used(); });
  ComputeGate gate;
  int64_t t = Now();
  Measure("shim bookkeeping: compute gate admission (open window)", 200, 1000, [&] {
    ComputeGate::Window w;
    (void)gate.Admit(t, 999, 0, 1'000'000'000'000LL, &w);
  });
  ::unlink(path.c_str());
  return 0;
}
#endif

// An empty kernel, as PTX for the driver to compile (the fake driver takes any image).
constexpr char kNoopPtx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry noop()\n{\n  ret;\n}\n";

int MeasureAll() {
  Api api;
  if (!Load(&api) || !Init(api)) return 1;
  CUmodule mod = nullptr;
  CUfunction noop = nullptr;
  if (api.cuModuleLoadData(&mod, kNoopPtx) != CUDA_SUCCESS ||
      api.cuModuleGetFunction(&noop, mod, "noop") != CUDA_SUCCESS) {
    std::fprintf(stderr, "cannot load the empty kernel\n");
    return 1;
  }
  Measure("cuLaunchKernel (empty kernel)", 200, 1000,
          [&] { api.cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr); });
  Measure("cuMemGetInfo_v2", 200, 100, [&] {
    size_t f = 0, t = 0;
    api.cuMemGetInfo(&f, &t);
  });
  Measure("cuMemAlloc_v2 + cuMemFree_v2 (4 KiB)", 5000, 1, [&] {
    CUdeviceptr p = 0;
    api.cuMemAlloc(&p, 4096);
    api.cuMemFree(p);
  });
  Measure("cuMemAlloc_v2 + cuMemFree_v2 (64 MiB)", 2000, 1, [&] {
    CUdeviceptr p = 0;
    api.cuMemAlloc(&p, 64ULL << 20);
    api.cuMemFree(p);
  });
  Measure("cuMemAllocAsync + cuMemFreeAsync (4 KiB)", 5000, 1, [&] {
    CUdeviceptr p = 0;
    api.cuMemAllocAsync(&p, 4096, nullptr);
    api.cuMemFreeAsync(p, nullptr);
  });
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  Measure("cuMemCreate + cuMemMap + cuMemUnmap + cuMemRelease (2 MiB)", 2000, 1, [&] {
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    api.cuMemCreate(&h, 2 << 20, &prop, 0);
    api.cuMemAddressReserve(&va, 2 << 20, 0, 0, 0);
    api.cuMemMap(va, 2 << 20, 0, h, 0);
    api.cuMemUnmap(va, 2 << 20);
    api.cuMemRelease(h);
    api.cuMemAddressFree(va, 2 << 20);
  });
  CUstream s = nullptr;
  api.cuStreamCreate(&s, 0);
  api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
  api.cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
  CUgraph g = nullptr;
  api.cuStreamEndCapture(s, &g);
  CUgraphExec e = nullptr;
  api.cuGraphInstantiateWithFlags(&e, g, 0);
  Measure("cuGraphLaunch (one empty kernel)", 200, 100, [&] { api.cuGraphLaunch(e, s); });
  api.cuCtxSynchronize();
  return 0;
}

int FirstContext() {
  const int64_t t0 = Now();
  Api api;
  if (!Load(&api) || !Init(api)) return 1;
  CUdeviceptr p = 0;
  if (api.cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS) return 1;
  std::printf("%lld %lld\n", static_cast<long long>(Now()), static_cast<long long>(Now() - t0));
  return 0;
}

int Startup(const char* self, int n) {
  std::vector<pid_t> pids;
  std::vector<FILE*> outs;
  const int64_t t0 = Now();
  for (int i = 0; i < n; ++i) {
    int fds[2];
    if (::pipe(fds) != 0) return 1;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    char* argv[] = {const_cast<char*>(self), const_cast<char*>("first-context"), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, self, &actions, nullptr, argv, environ) != 0) return 1;
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    pids.push_back(pid);
    outs.push_back(::fdopen(fds[0], "r"));
  }
  std::vector<double> from_start_ms, in_process_ms;
  for (int i = 0; i < n; ++i) {
    long long done = 0, own = 0;
    if (std::fscanf(outs[i], "%lld %lld", &done, &own) == 2) {
      from_start_ms.push_back(static_cast<double>(done - t0) / 1e6);
      in_process_ms.push_back(static_cast<double>(own) / 1e6);
    }
    std::fclose(outs[i]);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
  }
  if (static_cast<int>(from_start_ms.size()) != n) {
    std::fprintf(stderr, "only %zu of %d processes reached a context\n", from_start_ms.size(), n);
    return 1;
  }
  std::sort(from_start_ms.begin(), from_start_ms.end());
  std::sort(in_process_ms.begin(), in_process_ms.end());
  std::printf(
      "{\"op\":\"%d processes at once: start to first allocation\",\"median_ms\":%.2f,"
      "\"max_ms\":%.2f,\"in_process_median_ms\":%.3f}\n",
      n, from_start_ms[n / 2], from_start_ms.back(), in_process_ms[n / 2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
#ifndef SHIM_BENCH_NO_SETUP
  if (mode == "setup" && argc == 3) return Setup(argv[2]);
  if (mode == "accounting" && argc == 3) return Accounting(argv[2]);
#endif
  if (mode == "measure") return MeasureAll();
  if (mode == "startup" && argc == 3) return Startup(argv[0], std::atoi(argv[2]));
  if (mode == "first-context") return FirstContext();
  std::fprintf(stderr,
               "usage: shim_bench setup DIR | measure | startup N | first-context | "
               "accounting DIR\n"
               "(measure and startup run against whatever libcuda.so.1 LD_LIBRARY_PATH finds;\n"
               " bench/run_shim.sh runs the configurations side by side)\n");
  return 2;
}
