// What a container of a tessera pod gets for its grant: the one place that decides it, called by
// every delivery mechanism (the NRI plugin, nri/delivery.h; a DRA kubelet plugin writing CDI
// specs). From (the pod's grant, the node's facts) to container edits:
//
//   devices   /dev/nvidia<minor> of each granted GPU (a MIG instance: its GPU's), and the
//             driver's control nodes that exist (nvidiactl, nvidia-uvm, nvidia-uvm-tools), major
//             and minor read from the host's nodes; or, with a CDI kind (nodes whose driver a CDI
//             spec describes), the CDI devices <kind>=<UUID> instead
//   env       NVIDIA_VISIBLE_DEVICES = the GPUs' (or the MIG instance's) UUIDs; for a share
//             TESSERA_GPU_SHARING (shim | mps), TESSERA_GPU_MEMORY_LIMIT_MIB,
//             TESSERA_GPU_COMPUTE_PERCENT, TESSERA_GPU_COMPUTE_MODE (informational: the shim
//             enforces the files, never these); MPS: the client's CUDA_MPS_* variables
//   mounts    /run/tessera/assignment.json (the record, read-only); the driver's libraries at
//             <container lib dir>/libcuda.so.1 and libnvidia-ml.so.1 (and the others found);
//             a shim share instead (src/shim/contract.h): the shim libraries at those two names,
//             the real ones at /usr/local/lib/tessera/libtessera-real-{cuda,nvml}.so.1, each
//             shared GPU's limits file (read-only) and ledger file (read-write) under
//             /run/tessera/{limits,ledger}, files mounted one by one, never their folders; an MPS
//             share: the daemon's pipe directory and /dev/shm
//
// Pure apart from reading the device nodes' numbers (DeviceLookup): the files it names (the
// assignment, the segments, the installed shim) are made by the pod manager (pod_manager.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/mps/mps_control.h"
#include "agent/pods/grant.h"

namespace tessera::agent {

inline constexpr char kAssignmentInContainer[] = "/run/tessera/assignment.json";
inline constexpr char kEnvVisibleDevices[] = "NVIDIA_VISIBLE_DEVICES";
inline constexpr char kDefaultContainerLibDir[] = "/usr/lib/x86_64-linux-gnu";

struct DeviceNumber {
  char type = 'c';
  int64_t major = 0;
  int64_t minor = 0;
};
// The device number of the node at `path` (stat), or an error naming it.
using DeviceLookup = std::function<absl::StatusOr<DeviceNumber>(const std::string& path)>;
absl::StatusOr<DeviceNumber> StatDevice(const std::string& path);

// A driver library to put into containers: the host file and the name it gets there.
struct LibraryFile {
  std::string host_path;  // the file itself (symlinks resolved): libcuda.so.580.95.05
  std::string soname;     // libcuda.so.1
  bool operator==(const LibraryFile&) const = default;
};

// The libraries, as host paths (driver_files.h finds and installs them).
struct DriverLibraries {
  LibraryFile cuda;  // empty host_path: not found on this node
  LibraryFile nvml;
  std::vector<LibraryFile> others;  // libnvidia-ptxjitcompiler.so.1, ... (mounted as they are)
  std::string shim_cuda;            // the installed libtessera-cuda.so; empty: not installed
  std::string shim_nvml;            // the installed libtessera-nvml.so
  std::string container_lib_dir = kDefaultContainerLibDir;  // where the image's loader looks
};

struct EditsOptions {
  std::string dev_dir = "/dev";  // the host's device nodes
  DeviceLookup lookup = StatDevice;
  std::string cdi_kind;                        // "nvidia.com/gpu": CDI devices, not device nodes
  std::string pods_dir = "/run/tessera/pods";  // host: <pod UID>/{assignment.json,limits,ledger}
  DriverLibraries driver;
  std::string driver_version;  // "580.95.05", for CDI-injected library names
};

struct DeviceNode {
  std::string path;  // in the container (and on the host under dev_dir)
  char type = 'c';
  int64_t major = 0;
  int64_t minor = 0;
  bool operator==(const DeviceNode&) const = default;
};

struct BindMount {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
  bool operator==(const BindMount&) const = default;
};

struct ContainerEdits {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<BindMount> mounts;
  std::vector<DeviceNode> devices;
  std::vector<std::string> cdi_devices;  // fully qualified: "nvidia.com/gpu=GPU-..."
  bool empty() const {
    return env.empty() && mounts.empty() && devices.empty() && cdi_devices.empty();
  }
};

// Host paths of a pod's files.
std::string PodDir(const std::string& pods_dir, const std::string& uid);
std::string AssignmentFile(const std::string& pods_dir, const std::string& uid);

// The files of one share's segment (its limits, read-only, and its ledger, read-write), as they
// are mounted into a container: each file on its own, never their folders (the one rule for
// classic pods and DRA claims alike).
struct SegmentFile {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
};
std::vector<SegmentFile> SegmentFiles(const std::string& segment_dir, const std::string& uuid);

// The edits for every container of the pod. `mps` is the client edits of the GPU's daemon for an
// MPS share (required then, ignored otherwise). Errors name what is missing on the node (a device
// node, the driver libraries a shim share needs, a MIG instance's identity).
[[nodiscard]] absl::StatusOr<ContainerEdits> ContainerEditsFor(
    const PodGrant& grant, const EditsOptions& options, const mps::ContainerEdits* mps = nullptr);

}  // namespace tessera::agent
