// What the tests of the container edits share (edits/container_edits_test.cc, and
// delivery_modes_test.cc, which runs the edits through both renderers): a node with GPUs at
// /host/dev/nvidia<minor> (195:<minor>) and nvidiactl (195:255), the driver's libraries and the
// installed shim at fixed host paths, and grants of its GPUs as a pod's grant looks.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/edits/container_edits.h"

namespace tessera::agent::testing {

inline constexpr char kPodUid[] = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a30";

inline std::string GpuUuid(int i) {
  return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i);
}

// The node: device nodes looked up under /host/dev, the driver and the shim always there.
inline EditsOptions TestNode() {
  EditsOptions o;
  o.dev_dir = "/host/dev";
  o.file_exists = [](const std::string&) { return true; };
  o.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
    if (path == "/host/dev/nvidiactl") return DeviceNumber{'c', 195, 255};
    const std::string prefix = "/host/dev/nvidia";
    if (path.starts_with(prefix) && path.size() == prefix.size() + 1 &&
        std::isdigit(static_cast<unsigned char>(path.back()))) {
      return DeviceNumber{'c', 195, path.back() - '0'};
    }
    return absl::NotFoundError(path + ": No such file or directory");
  };
  o.driver.cuda = {"/usr/lib64/libcuda.so.580.95.05", "libcuda.so.1"};
  o.driver.nvml = {"/usr/lib64/libnvidia-ml.so.580.95.05", "libnvidia-ml.so.1"};
  o.driver.others = {
      {"/usr/lib64/libnvidia-ptxjitcompiler.so.580.95.05", "libnvidia-ptxjitcompiler.so.1"}};
  o.driver.shim_cuda = "/run/tessera/lib/libtessera-cuda.so";
  o.driver.shim_nvml = "/run/tessera/lib/libtessera-nvml.so";
  return o;
}

// GPU `index` at /dev/nvidia<minor>, or a share of it.
inline ContainerGrant::Gpu TestGpu(int index, int minor, int64_t memory_mib, int32_t compute_milli,
                                   bool exclusive) {
  return {.index = index,
          .uuid = GpuUuid(index),
          .minor = minor,
          .exclusive = exclusive,
          .memory_mib = memory_mib,
          .compute_milli = compute_milli};
}

// A pod's grant as the pod manager makes it (pods/grant.h ContainerGrantOf): its record and
// segments under /run/tessera/pods/<kPodUid>.
inline ContainerGrant TestGrant(std::vector<ContainerGrant::Gpu> gpus, Sharing sharing) {
  ContainerGrant g;
  g.owner = "pod team/p";
  g.gpus = std::move(gpus);
  g.sharing = sharing;
  g.record_file = std::string("/run/tessera/pods/") + kPodUid + "/assignment.json";
  g.segments_dir = std::string("/run/tessera/pods/") + kPodUid;
  return g;
}

}  // namespace tessera::agent::testing
