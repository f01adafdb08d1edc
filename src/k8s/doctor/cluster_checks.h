// `tessera doctor` (cluster): the preflight of a cluster, read from its API server. Gathering
// (GatherClusterFacts: a handful of GETs and lists) is apart from judging (CheckCluster: pure, on
// the facts), so tests judge planted facts and the e2e test plants the faults on a real cluster.
//
// Checks, each a Finding with what to do:
//   kubernetes-version  classic mode needs 1.30+, DRA mode 1.34+ (resource.k8s.io/v1)
//   dra-api             DRA mode: resource.k8s.io/v1 is served
//   feature-gates       DRA mode: DRAConsumableCapacity (shares), DRAPartitionableDevices
//                       (MIG), DRAExtendedResource (tessera.dev/gpu pods through a DeviceClass),
//                       read from the API server's kubernetes_feature_enabled metric
//   device-classes      DRA mode: the DeviceClasses of tessera's driver exist
//   namespace           tessera's namespace exists
//   pod-security        its PodSecurity enforce label lets the agent run (privileged)
//   components          the scheduler and the agent run there (pods by their `tessera
//                       scheduler` / `tessera agent` arguments), and
//   version-skew        they run the same image
//   other-device-plugin a node with tessera's inventory also advertises nvidia.com/gpu (the
//                       NVIDIA device plugin would hand out the GPUs tessera grants)
//   inventory           GPU nodes (labelled so, or running the agent) without a usable inventory
//                       (classic: the tessera.dev/gpu-inventory annotation; DRA: ResourceSlices)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "k8s/client/http.h"
#include "k8s/doctor/findings.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

struct ClusterCheckOptions {
  std::string mode = "auto";  // classic, dra, or auto (dra when tessera's DeviceClasses exist)
  std::string ns = "tessera-system";
  std::string driver = "gpu.tessera.dev";  // the DRA driver's name
};

// What the API server said. Lists that could not be read are empty with an error kept.
struct ClusterFacts {
  std::string server;
  std::string version;  // /version gitVersion ("v1.37.2"); "" unknown
  bool dra_v1_served = false;
  // kubernetes_feature_enabled from the API server's /metrics; nullopt when unreadable.
  std::optional<std::map<std::string, bool>> feature_gates;
  std::string feature_gates_error;
  std::vector<nlohmann::json> nodes;
  std::optional<nlohmann::json> tessera_namespace;  // nullopt: not found
  std::vector<nlohmann::json> tessera_pods;         // pods of options.ns
  std::vector<std::string> device_classes;          // every DeviceClass's name (DRA served)
  std::vector<std::string> slice_nodes;             // nodes with a ResourceSlice of the driver
  std::vector<std::string> read_errors;             // lists that could not be read
};

// kubernetes_feature_enabled{name="X",...} 1 lines of a /metrics text.
std::map<std::string, bool> ParseFeatureGates(std::string_view metrics);

[[nodiscard]] absl::StatusOr<ClusterFacts> GatherClusterFacts(ApiClient& client,
                                                              const ClusterCheckOptions& options);

DoctorReport CheckCluster(const ClusterFacts& facts, const ClusterCheckOptions& options);

}  // namespace tessera::k8s
