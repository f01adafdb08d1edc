// The NRI messages the tessera plugin exchanges with the runtime (containerd 2.x, CRI-O), from
// NRI's api.proto (package nri.pkg.api.v1alpha1; github.com/containerd/nri v0.12.3, the version
// containerd v2.4.2 builds with). Only the fields tessera reads or writes are here; the decoders
// skip everything else, so newer runtimes with more fields are read as well.
//
// Field numbers (api.proto):
//   RegisterPluginRequest {plugin_name = 1, plugin_idx = 2, NRI_version = 3}
//   ConfigureRequest {config = 1, runtime_name = 2, runtime_version = 3,
//                     registration_timeout = 4, request_timeout = 5, NRI_version = 6}
//   ConfigureResponse {events = 2}                 bit (e - 1) for each Event e
//   SynchronizeRequest {pods = 1, containers = 2, more = 3}
//   SynchronizeResponse {update = 1, more = 2}
//   CreateContainerRequest {pod = 1, container = 2}
//   CreateContainerResponse {adjust = 1, update = 2, evict = 3}
//   RemovePodSandboxRequest {pod = 1}, StopContainerRequest {pod = 1, container = 2},
//   RemoveContainerRequest {pod = 1, container = 2}, StateChangeEvent {event = 1, pod = 2,
//   container = 3}
//   PodSandbox {id = 1, name = 2, uid = 3, namespace = 4, labels = 5, annotations = 6, ...}
//   Container {id = 1, pod_sandbox_id = 2, name = 3, state = 4, labels = 5, annotations = 6,
//              args = 7, env = 8, mounts = 9, ...}
//   ContainerAdjustment {annotations = 2, mounts = 3, env = 4, hooks = 5, linux = 6,
//                        rlimits = 7, CDI_devices = 8, args = 9}
//   LinuxContainerAdjustment {devices = 1, ...}
//   LinuxDevice {path = 1, type = 2, major = 3, minor = 4, file_mode = 5, uid = 6, gid = 7}
//   Mount {destination = 1, type = 2, source = 3, options = 4}
//   KeyValue {key = 1, value = 2}, CDIDevice {name = 1}, Optional* {value = 1}
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::agent::nri {

inline constexpr char kRuntimeService[] = "nri.pkg.api.v1alpha1.Runtime";
inline constexpr char kPluginService[] = "nri.pkg.api.v1alpha1.Plugin";

// api.proto's Event.
enum Event : int {
  kRunPodSandbox = 1,
  kStopPodSandbox = 2,
  kRemovePodSandbox = 3,
  kCreateContainer = 4,
  kPostCreateContainer = 5,
  kStartContainer = 6,
  kPostStartContainer = 7,
  kUpdateContainer = 8,
  kPostUpdateContainer = 9,
  kStopContainer = 10,
  kRemoveContainer = 11,
};
constexpr int32_t EventBit(Event e) { return int32_t{1} << (e - 1); }

struct PodSandbox {
  std::string id, name, uid, ns;
  std::map<std::string, std::string> labels, annotations;
};

// ContainerState in NRI's api.proto.
inline constexpr int kContainerUnknown = 0;
inline constexpr int kContainerCreated = 1;
inline constexpr int kContainerPaused = 2;
inline constexpr int kContainerRunning = 3;
inline constexpr int kContainerStopped = 4;

struct Container {
  std::string id, pod_sandbox_id, name;
  int state = kContainerUnknown;
  std::map<std::string, std::string> labels, annotations;
  std::vector<std::string> env;  // "K=V"
};

struct Mount {
  std::string destination, type, source;
  std::vector<std::string> options;
  bool operator==(const Mount&) const = default;
};

struct LinuxDevice {
  std::string path;  // in the container
  std::string type;  // "c" or "b"
  int64_t major = 0;
  int64_t minor = 0;
  std::optional<uint32_t> file_mode;
  std::optional<uint32_t> uid, gid;
  bool operator==(const LinuxDevice&) const = default;
};

struct ContainerAdjustment {
  std::map<std::string, std::string> annotations;
  std::vector<Mount> mounts;
  std::vector<std::pair<std::string, std::string>> env;  // a key starting with '-' removes it
  std::vector<LinuxDevice> devices;
  std::vector<std::string> cdi_devices;  // fully qualified: "nvidia.com/gpu=GPU-..."
  bool empty() const {
    return annotations.empty() && mounts.empty() && env.empty() && devices.empty() &&
           cdi_devices.empty();
  }
};

struct ConfigureRequest {
  std::string config, runtime_name, runtime_version, nri_version;
  int64_t registration_timeout_ms = 0, request_timeout_ms = 0;
};

struct SynchronizeRequest {
  std::vector<PodSandbox> pods;
  std::vector<Container> containers;
  bool more = false;
};

// A request about one pod and, for container events, one of its containers.
struct PodContainerRequest {
  PodSandbox pod;
  std::optional<Container> container;
};

std::string EncodeRegisterPluginRequest(std::string_view name, std::string_view index,
                                        std::string_view nri_version);
std::string EncodeConfigureResponse(int32_t events);
std::string EncodeSynchronizeResponse(bool more);
std::string EncodeCreateContainerResponse(const ContainerAdjustment& adjust);
std::string EncodeContainerAdjustment(const ContainerAdjustment& adjust);

[[nodiscard]] absl::StatusOr<ConfigureRequest> DecodeConfigureRequest(std::string_view data);
[[nodiscard]] absl::StatusOr<SynchronizeRequest> DecodeSynchronizeRequest(std::string_view data);
// CreateContainerRequest, StopContainerRequest, RemoveContainerRequest, RunPodSandboxRequest,
// StopPodSandboxRequest, RemovePodSandboxRequest (pod = 1, container = 2), and StateChangeEvent
// (pod = 2, container = 3) with `state_change`.
[[nodiscard]] absl::StatusOr<PodContainerRequest> DecodePodContainerRequest(
    std::string_view data, bool state_change = false);
[[nodiscard]] absl::StatusOr<ContainerAdjustment> DecodeContainerAdjustment(std::string_view data);
[[nodiscard]] absl::StatusOr<PodSandbox> DecodePodSandbox(std::string_view data);
[[nodiscard]] absl::StatusOr<Container> DecodeContainer(std::string_view data);

// Encoders for the runtime side, used by tests that play the runtime.
std::string EncodePodSandbox(const PodSandbox& pod);
std::string EncodeContainer(const Container& container);
std::string EncodeCreateContainerRequest(const PodSandbox& pod, const Container& container);
std::string EncodeConfigureRequest(const ConfigureRequest& request);
std::string EncodeSynchronizeRequest(const SynchronizeRequest& request);

}  // namespace tessera::agent::nri
