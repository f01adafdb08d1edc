// Delivering a pod's assignment into its containers (DESIGN.md "Delivering the assignment"): the
// NRI handler that turns the pod's tessera.dev/assignment, which the runtime hands over with the
// pod sandbox on every CreateContainer, into the container's adjustment:
//   - the GPUs' device nodes /dev/nvidia<minor> (major and minor read from the host's nodes) and
//     the driver's control nodes that exist (nvidiactl, nvidia-uvm, nvidia-uvm-tools), or, on a
//     node whose driver is described by a CDI spec (nvidia-ctk cdi generate), the CDI devices
//     <kind>=<GPU UUID> instead;
//   - NVIDIA_VISIBLE_DEVICES = the GPUs' UUIDs;
//   - for a share, TESSERA_GPU_MEMORY_LIMIT_MIB and TESSERA_GPU_COMPUTE_PERCENT (informational;
//     the CUDA shim enforces the limits from files, src/shim/contract.h);
//   - /run/tessera/assignment.json: the record itself, read-only, from
//     <pods dir>/<pod UID>/assignment.json on the host.
// Exact by construction: what a container gets is read from its own pod's record, which the API
// server wrote together with spec.nodeName (the Binding), so two pods created at once can never
// swap GPUs. Every container of the pod gets the pod's GPUs (NRI does not say which containers
// asked for them).
//
// A record that cannot be honoured fails the container's creation with a message that says why
// (the kubelet shows it as an Event and retries): it names another node, a GPU this node does not
// have (by UUID), a GPU whose index here differs, a device node that is missing, or a MIG instance
// (not delivered by this agent yet). A pod without a record gets nothing, and a container of such
// a pod that asks the NVIDIA container runtime for GPUs through NVIDIA_VISIBLE_DEVICES gets
// "void" instead (namespaces in `exempt_namespaces`, such as the GPU operator's monitoring, keep
// theirs).
//
// Thread-safe: the agent's loop replaces the GPU list (SetGpus) while the NRI thread delivers.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "agent/discovery/discovery.h"
#include "agent/nri/plugin.h"

namespace tessera::agent {

inline constexpr char kAssignmentInContainer[] = "/run/tessera/assignment.json";
inline constexpr char kEnvVisibleDevices[] = "NVIDIA_VISIBLE_DEVICES";
inline constexpr char kEnvMemoryLimitMib[] = "TESSERA_GPU_MEMORY_LIMIT_MIB";
inline constexpr char kEnvComputePercent[] = "TESSERA_GPU_COMPUTE_PERCENT";

struct DeviceNumber {
  char type = 'c';
  int64_t major = 0;
  int64_t minor = 0;
};
// The device number of the node at `path` (stat), or an error naming it.
using DeviceLookup = std::function<absl::StatusOr<DeviceNumber>(const std::string& path)>;
absl::StatusOr<DeviceNumber> StatDevice(const std::string& path);

struct DeliveryOptions {
  std::string node_name;
  std::string dev_dir = "/dev";                // the host's device nodes
  std::string pods_dir = "/run/tessera/pods";  // host: <pod UID>/assignment.json
  std::string cdi_kind;                        // "nvidia.com/gpu": CDI devices, not device nodes
  std::set<std::string> exempt_namespaces = {"kube-system", "tessera-system", "gpu-operator",
                                             "nvidia-gpu-operator"};
  DeviceLookup lookup = StatDevice;
};

class Delivery : public nri::NriHandler {
 public:
  explicit Delivery(DeliveryOptions options);

  void SetGpus(std::shared_ptr<const NodeGpus> gpus);

  absl::StatusOr<nri::ContainerAdjustment> CreateContainer(const nri::PodSandbox& pod,
                                                           const nri::Container& c) override;
  void Synchronize(const std::vector<nri::PodSandbox>& pods,
                   const std::vector<nri::Container>& containers) override;
  void RemovePodSandbox(const nri::PodSandbox& pod) override;

  int64_t delivered() const { return delivered_.load(); }
  int64_t refused() const { return refused_.load(); }

 private:
  absl::StatusOr<nri::ContainerAdjustment> Adjust(const nri::PodSandbox& pod,
                                                  const nri::Container& c);

  DeliveryOptions options_;
  std::mutex mu_;
  std::shared_ptr<const NodeGpus> gpus_;
  std::atomic<int64_t> delivered_{0}, refused_{0};
};

}  // namespace tessera::agent
