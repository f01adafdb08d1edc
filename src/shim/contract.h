// The contract between the node agent (which delivers a share into a container) and the CUDA shim
// (which enforces it inside). Dependency-free: names and paths only. The agent implements the
// "pod start" and "pod end" steps below with the segment library (src/shim/segments.h); the shim
// reads only what is named here. DESIGN.md ("Node side") and src/shim/README.md say why.
//
// HOW THE SHIM GETS INTO A CONTAINER: as a drop-in libcuda.so.1 and libnvidia-ml.so.1, placed by
// bind mounts. Not LD_PRELOAD, not /etc/ld.so.preload. Two libraries, one per driver library:
//   libtessera-cuda.so  (SONAME libcuda.so.1)       DT_NEEDED kRealCudaLibrary
//   libtessera-nvml.so  (SONAME libnvidia-ml.so.1)  DT_NEEDED kRealNvmlLibrary
// Each exports the entry points it enforces (cuMemAlloc_v2, cuGetProcAddress_v2, ...;
// nvmlDeviceGetMemoryInfo, ...) and nothing else of the driver; its real library, found through
// its RUNPATH kLibraryDir, supplies every other symbol in both lookups an application can make:
// the global one (linked with -lcuda) and the handle-scoped one (dlopen("libcuda.so.1") + dlsym,
// which is how the CUDA runtime, PyTorch, JAX, CuPy and ctypes load the driver). Two libraries,
// because the loader answers dlopen("libnvidia-ml.so.1") with any loaded object of that SONAME:
// one shim standing in for both would have loaded the real NVML, which would then answer.
// Why this and not the alternatives:
//   - LD_PRELOAD alone never sees dlsym(handle, ...) lookups, so a preload shim must replace
//     dlsym itself (HAMi-core does; that hung Nsight Compute, HAMi #723, and breaks with each
//     glibc that moves dlsym's version); and an environment variable can be unset by the tenant.
//   - /etc/ld.so.preload cannot be unset but has the same dlsym problem, and preloads into every
//     program of the image (shells, compilers), not only CUDA ones.
//   - A proxy at the path the loader resolves for libcuda.so.1 is reached by every loading path,
//     including dlmopen into a new namespace, and needs no dlsym override. What it cannot stop
//     (nor can any in-process shim): a program that dlopens the real library by its full path,
//     static re-implementations of the driver, raw ioctls on /dev/nvidia*. Against a hostile
//     tenant the backstop is the agent comparing NVML's per-process usage with the cap.
//
// POD START (share of GPU G for pod P; the agent, before the container starts):
//   1. tessera::shim::CreateSegment(<pod dir>, P's UID, G's UUID, limits, slots): writes
//      <pod dir>/limits/<UUID>.limits and <pod dir>/ledger/<UUID>.ledger. <pod dir> is on a
//      host tmpfs, e.g. /run/tessera/pods/<pod UID> (kHostPodsDir).
//   2. Container edits (CDI or NRI), for every container of the pod:
//        host <pod dir>/limits          -> kLimitsDir   read-only
//        host <pod dir>/ledger          -> kLedgerDir   read-write
//        host libcuda.so.<driver ver>   -> kLibraryDir/kRealCudaLibrary      read-only
//        host libnvidia-ml.so.<drv ver> -> kLibraryDir/kRealNvmlLibrary      read-only
//        host libtessera-cuda.so        -> <libdir>/libcuda.so.1             read-only
//        host libtessera-nvml.so        -> <libdir>/libnvidia-ml.so.1        read-only
//      where <libdir> is the directory the driver libraries are injected into (Debian/Ubuntu
//      images: /usr/lib/x86_64-linux-gnu). When another runtime hook also injects the driver,
//      mount over the files those names resolve to (libcuda.so.<driver version>, ...).
//      plus the other driver libraries (libnvidia-ptxjitcompiler, ...) and device nodes as for an
//      exclusive GPU, and the informational environment below.
//   3. While the pod runs, every kMaintenanceInterval: ReapSegments (gives back the memory of
//      processes that died, fills in host PIDs) and, on GPUs with compute shares, one
//      ComputeController step (src/shim/compute_controller.h).
// POD END (all containers stopped): RemovePodSegments(<pod dir>).
// AGENT RESTART: the pod dirs persist on the host tmpfs; ListPodSegments(kHostPodsDir) finds them.
#pragma once

namespace tessera::shim::contract {

// Inside the container.
inline constexpr char kRootDir[] = "/run/tessera";
inline constexpr char kLimitsDir[] = "/run/tessera/limits";  // <UUID>.limits, read-only
inline constexpr char kLedgerDir[] = "/run/tessera/ledger";  // <UUID>.ledger, read-write
inline constexpr char kLimitsSubdir[] = "limits";
inline constexpr char kLedgerSubdir[] = "ledger";
inline constexpr char kLimitsSuffix[] = ".limits";
inline constexpr char kLedgerSuffix[] = ".ledger";
inline constexpr char kLibraryDir[] = "/usr/local/lib/tessera";  // the shim's RUNPATH
inline constexpr char kShimCudaLibrary[] = "libtessera-cuda.so";
inline constexpr char kShimNvmlLibrary[] = "libtessera-nvml.so";
inline constexpr char kRealCudaLibrary[] = "libtessera-real-cuda.so.1";
inline constexpr char kRealNvmlLibrary[] = "libtessera-real-nvml.so.1";

// A process that cannot take a slot in its pod's ledger (the file is missing, unreadable or
// malformed, or every slot is held) would count against nobody but itself: with N such processes
// the pod would get N caps. It may allocate this much on the GPU and no more (enough for a
// context and a probe), and the shim says why on stderr.
inline constexpr unsigned long long kNoLedgerAllowanceBytes = 64ULL << 20;

// On the host.
inline constexpr char kHostPodsDir[] = "/run/tessera/pods";  // <pod UID>/{limits,ledger}/
inline constexpr int kMaintenanceIntervalMs = 250;

// Environment the shim reads (once, at load; never per call).
//   TESSERA_SHIM_ROOT: replaces kRootDir (tests; nodes with another layout). The limits stay
//   whatever the agent wrote: pointing the shim elsewhere gives a tenant nothing it could not
//   get by loading the real driver by path (see the threat model above).
inline constexpr char kEnvRoot[] = "TESSERA_SHIM_ROOT";
//   TESSERA_SHIM_LOG: 0 errors only (default), 1 also refusals and shares found, 2 also every
//   launch the compute gate held back.
inline constexpr char kEnvLog[] = "TESSERA_SHIM_LOG";

// Environment the agent sets for people and programs in the pod (informational: the shim
// enforces the files above, never these).
inline constexpr char kEnvSharing[] = "TESSERA_GPU_SHARING";  // "shim" or "mps"
inline constexpr char kEnvMemoryLimitMib[] = "TESSERA_GPU_MEMORY_LIMIT_MIB";
inline constexpr char kEnvComputePercent[] = "TESSERA_GPU_COMPUTE_PERCENT";
inline constexpr char kEnvComputeMode[] = "TESSERA_GPU_COMPUTE_MODE";  // hard-cap|work-conserving

// The pod annotation that opts a pod into MPS instead of the shim is records::kGpuSharingAnnotation
// (src/records/names.h), read by the agent; a GPU runs MPS pods or shim pods, not both.

}  // namespace tessera::shim::contract
