// The host files a GPU container is given besides its devices: the NVIDIA driver's user-space
// libraries (found on the host) and tessera's CUDA shim (installed by the agent into a host
// directory, since the container runtime bind-mounts host paths and the agent's own files may be
// inside its container image).
//
// The agent may see the host's file system under a prefix (--host-root, e.g. /host in a
// DaemonSet that mounts the host's / there): it looks at <host root><path> and hands the
// runtime <path>. Symbolic links are followed inside the host root, as the host would follow
// them (libcuda.so.1 -> libcuda.so.580.95.05), so the container gets the file, never a link
// that might not resolve in its image.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/pods/container_edits.h"

namespace tessera::agent {

struct DriverFilesOptions {
  std::string host_root;                         // "" : the agent sees the host's files directly
  std::vector<std::string> driver_lib_dirs;      // host paths searched in order; empty: the usual
  std::string shim_dir;                          // where the agent finds libtessera-{cuda,nvml}.so
  std::string install_dir = "/run/tessera/lib";  // host path the shim is installed to
  std::string container_lib_dir = kDefaultContainerLibDir;
};

// Where drivers are usually installed: Debian/Ubuntu, RHEL-style, the GPU operator's driver
// container.
std::vector<std::string> DefaultDriverLibDirs();

// Finds the driver's libraries (libcuda.so.1, libnvidia-ml.so.1 and the others containers get) in
// the driver folders, changing nothing; what is not found stays empty, with a line in `notes`.
// `tessera doctor node` asks the same question the agent does, through this.
DriverLibraries FindDriverLibraries(const DriverFilesOptions& options,
                                    std::vector<std::string>* notes);

// Finds the driver's libraries (FindDriverLibraries) and installs the shim (copied only when its
// content changed, by rename, so running containers keep the file they mapped). What is not found
// stays empty, with a line in `notes` saying so; errors are for an install directory that cannot be
// written.
[[nodiscard]] absl::StatusOr<DriverLibraries> PrepareDriverLibraries(
    const DriverFilesOptions& options, std::vector<std::string>* notes);

// `path` (a host path) with its symbolic links followed inside `host_root`; the host path of the
// file, or an error if it does not exist.
[[nodiscard]] absl::StatusOr<std::string> ResolveHostPath(const std::string& host_root,
                                                          const std::string& path);

}  // namespace tessera::agent
