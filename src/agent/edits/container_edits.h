// What a container gets for its GPUs: the one place that decides it, whichever API granted them.
// Classic mode (a pod's tessera.dev/assignment, src/agent/pods) and DRA mode (a prepared
// ResourceClaim, src/agent/dra) each describe what they grant as a ContainerGrant and call
// ContainerEditsFor; each then only writes the result in its runtime's format: the NRI plugin as a
// container adjustment (nri/delivery.h AdjustmentFor), the DRA kubelet plugin as a CDI spec
// (dra/claim_edits.h). So the same grant gives a container the same devices, environment and
// mounts in both modes (src/agent/delivery_modes_test.cc runs grants through both renderers).
//
//   devices   /dev/nvidia<minor> of each granted GPU (a MIG instance: its GPU's; instances of
//             one GPU share it), and the driver's control nodes that exist (nvidiactl,
//             nvidia-uvm, nvidia-uvm-tools), major and minor read from the host's nodes; or, with
//             a CDI kind (nodes whose driver a CDI spec describes: nvidia-ctk, the GPU operator),
//             the CDI devices <kind>=<UUID> instead, which bring the nodes and the libraries
//   env       NVIDIA_VISIBLE_DEVICES = the GPUs' (MIG instances': their MIG-...) UUIDs; for a
//             share TESSERA_GPU_SHARING (shim | mps | unenforced) and, when the grant's shares
//             are on one GPU, TESSERA_GPU_MEMORY_LIMIT_MIB and, for a compute share of less than
//             the GPU, TESSERA_GPU_COMPUTE_PERCENT and TESSERA_GPU_COMPUTE_MODE (informational:
//             the shim enforces its files, never these); MPS: the client's CUDA_MPS_* variables
//   mounts    the grant's record, read-only, at /run/tessera/assignment.json (when it has one:
//             a pod's assignment; a claim has none); without a CDI kind the driver's libraries
//             at <container lib dir>/libcuda.so.1, libnvidia-ml.so.1 and the others found; for a
//             share enforced by the shim (src/shim/contract.h) the shim libraries at those two
//             names instead (with a CDI kind, at the files the sonames resolve to:
//             libcuda.so.<driver version>), the real ones at
//             /usr/local/lib/tessera/libtessera-real-{cuda,nvml}.so.1, and each shared GPU's
//             limits file (read-only) and ledger file (read-write) under
//             /run/tessera/{limits,ledger}, files mounted one by one, never their folders
//             (SegmentFiles); an MPS share: the daemon's pipe folder and /dev/shm
//
// Example: a share of 4096 MiB and 30% compute of GPU 1 (minor 5), enforced by the shim, gets
// /dev/nvidia5 and /dev/nvidiactl; NVIDIA_VISIBLE_DEVICES=<its UUID>, TESSERA_GPU_SHARING=shim,
// TESSERA_GPU_MEMORY_LIMIT_MIB=4096, TESSERA_GPU_COMPUTE_PERCENT=30,
// TESSERA_GPU_COMPUTE_MODE=hard-cap; the shim at libcuda.so.1 and libnvidia-ml.so.1, the driver
// behind it, and its limits and ledger files. A whole GPU gets its node, the control nodes,
// NVIDIA_VISIBLE_DEVICES and the driver's libraries as they are.
//
// Pure apart from reading the host: the device nodes' numbers (DeviceLookup) and whether the
// shim's files are still where they were found (FileCheck). The files it names are made by their
// owners: the record and segments by the pod manager (pods/pod_manager.h) or the DRA driver
// (dra/driver.h), the installed shim and the driver's libraries by pods/driver_files.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/mps/mps_control.h"

namespace tessera::agent {

inline constexpr char kAssignmentInContainer[] = "/run/tessera/assignment.json";
inline constexpr char kEnvVisibleDevices[] = "NVIDIA_VISIBLE_DEVICES";
inline constexpr char kDefaultContainerLibDir[] = "/usr/lib/x86_64-linux-gnu";

// How a grant's shares are enforced in its containers.
enum class Sharing {
  kNone,        // whole GPUs or MIG instances: the hardware is the grant's alone
  kShim,        // the CUDA shim (src/shim/contract.h)
  kMps,         // the GPU's MPS daemon (src/agent/mps)
  kUnenforced,  // accounted by the scheduler but not enforced (DRA: --share-enforcement=none)
};
// "none", "shim", "mps", "unenforced": TESSERA_GPU_SHARING and the metrics' label.
const char* SharingName(Sharing s);

// What a container is granted on this node, whichever API granted it.
struct ContainerGrant {
  // One granted GPU (or a MIG instance on it, or a share of it), as this node has it.
  struct Gpu {
    int32_t index = -1;  // the node's GPU, as in its inventory
    std::string uuid;    // GPU-...
    int32_t minor = -1;  // /dev/nvidia<minor>
    // A MIG instance: its profile and start slice, and its identity (MIG-...) once it exists.
    std::string mig_profile;
    int32_t mig_start = -1;
    std::string mig_uuid;
    bool exclusive = true;      // the whole GPU (or the MIG instance)
    int64_t memory_mib = 0;     // a share: its memory
    int32_t compute_milli = 0;  // a share: its compute, milli-GPU (0: best-effort time sharing)

    bool mig() const { return !mig_profile.empty(); }
    bool share() const { return !mig() && !exclusive; }
    bool operator==(const Gpu&) const = default;
  };

  std::string owner;      // for messages: "pod team/trainer", "the claim"
  std::vector<Gpu> gpus;  // a GPU may come twice (two shares of it in one claim)
  Sharing sharing = Sharing::kNone;
  bool work_conserving = false;  // a compute share's mode (shim::ComputeMode), else hard cap
  std::string record_file;       // host: the grant's record (assignment.json); empty: none
  std::string segments_dir;      // host: the shim's limits/ and ledger/ (a shim share)
};

struct DeviceNumber {
  char type = 'c';
  int64_t major = 0;
  int64_t minor = 0;
};
// The device number of the node at `path` (stat), or an error naming it.
using DeviceLookup = std::function<absl::StatusOr<DeviceNumber>(const std::string& path)>;
absl::StatusOr<DeviceNumber> StatDevice(const std::string& path);
// Whether a file is at `path` (as the agent sees it).
using FileCheck = std::function<bool(const std::string& path)>;
bool FileExists(const std::string& path);

// A driver library to put into containers: the host file and the name it gets there.
struct LibraryFile {
  std::string host_path;  // the file itself (symlinks resolved): libcuda.so.580.95.05
  std::string soname;     // libcuda.so.1
  bool operator==(const LibraryFile&) const = default;
};

// The libraries, as host paths (pods/driver_files.h finds them and installs the shim).
struct DriverLibraries {
  LibraryFile cuda;  // empty host_path: not found on this node
  LibraryFile nvml;
  std::vector<LibraryFile> others;  // libnvidia-ptxjitcompiler.so.1, ... (mounted as they are)
  std::string shim_cuda;            // the installed libtessera-cuda.so; empty: not installed
  std::string shim_nvml;            // the installed libtessera-nvml.so
  std::string container_lib_dir = kDefaultContainerLibDir;  // where the image's loader looks
};

// The node's facts the edits depend on.
struct EditsOptions {
  // Where the agent sees the host's files ("/host" in the DaemonSet, "" on the host itself):
  // device nodes found under it are named by their host paths, and host files are checked there.
  std::string host_root;
  std::string dev_dir = "/dev";  // the host's device nodes, as the agent sees them
  DeviceLookup lookup = StatDevice;
  FileCheck file_exists = FileExists;  // called with <host_root><host path>
  std::string cdi_kind;                // "nvidia.com/gpu": CDI devices, not device nodes
  DriverLibraries driver;
  std::string driver_version;  // "580.95.05", for CDI-injected library names
};

struct DeviceNode {
  std::string path;  // in the container
  char type = 'c';
  int64_t major = 0;
  int64_t minor = 0;
  std::string host_path;  // on the host (CDI needs it; NRI makes the node from its numbers)
  bool operator==(const DeviceNode&) const = default;
};

struct BindMount {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
  bool operator==(const BindMount&) const = default;
};

// The files of one share's segment (its limits, read-only, and its ledger, read-write), as they
// are mounted into a container: each file on its own, never their folders, so a container can
// write only into its ledger (fixed names, nothing to create, no symlink to plant). `segment_dir`
// is the grant's segments_dir (a pod's or a claim's folder).
struct SegmentFile {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
  bool operator==(const SegmentFile&) const = default;
};
std::vector<SegmentFile> SegmentFiles(const std::string& segment_dir, const std::string& uuid);

struct ContainerEdits {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<BindMount> mounts;
  std::vector<DeviceNode> devices;
  std::vector<std::string> cdi_devices;  // per GPU of the grant: "nvidia.com/gpu=GPU-..."
  // Per GPU of the grant, in its order: the place of its node in `devices` (-1 with a CDI kind).
  // The other devices are the driver's control nodes. For formats that attach nodes to devices
  // (CDI).
  std::vector<int> gpu_nodes;
  bool empty() const {
    return env.empty() && mounts.empty() && devices.empty() && cdi_devices.empty();
  }
};

// The edits for every container that uses `grant`. `mps` is the client edits of the GPU's daemon
// for an MPS share (required then, ignored otherwise). Errors name what is missing on the node (a
// device node, the shim or the driver libraries a shim share needs, a MIG instance's identity).
[[nodiscard]] absl::StatusOr<ContainerEdits> ContainerEditsFor(
    const ContainerGrant& grant, const EditsOptions& options,
    const mps::ContainerEdits* mps = nullptr);

}  // namespace tessera::agent
