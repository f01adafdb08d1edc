// Publishing the node's pool (pool.h) as ResourceSlices (resource.k8s.io/v1) and reading
// ResourceClaims for the kubelet plugin: the DRA driver's I/O with the API server.
//
// SlicePublisher::Reconcile makes the API server's slices of driver gpu.tessera.dev on this node
// say what the pool says, and writes only when something differs:
//   - slices are named "<node>-gpu.tessera.dev-<i>" (a hash instead of the node's name when that
//     would be too long), owned by the Node (deleted with it), and carry the hash of the spec the
//     agent wrote (annotation gpu.tessera.dev/spec-hash; the API server rewrites quantities, so
//     specs are not compared field by field);
//   - when anything differs (a device, a slice missing or extra, a slice of another generation)
//     every slice is written again with the pool's generation raised above any seen, and extra
//     slices are deleted after, so a consumer that sees the highest generation with
//     resourceSliceCount slices sees the whole new pool.
// A kubelet that starts deletes its node's slices; the agent reconciles when the kubelet
// registers the plugin again and periodically besides.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "agent/dra/driver.h"
#include "agent/dra/pool.h"
#include "k8s/client/http.h"
#include "nlohmann/json.hpp"

namespace tessera::agent::dra {

inline constexpr char kResourceApi[] = "/apis/resource.k8s.io/v1";

struct SliceOutcome {
  int created = 0, updated = 0, deleted = 0;
  int64_t generation = 0;  // the pool's generation after the reconcile
  bool changed() const { return created + updated + deleted > 0; }
};

class SlicePublisher {
 public:
  SlicePublisher(k8s::ApiClient& client, std::string node_name)
      : client_(client), node_(std::move(node_name)) {}

  [[nodiscard]] absl::StatusOr<SliceOutcome> Reconcile(const Pool& pool);
  // Deletes every slice of this driver on this node (an agent leaving DRA mode).
  [[nodiscard]] absl::Status DeleteAll();
  // In DRA mode the node must not advertise tessera's classic extended resources (the
  // DeviceClass's extendedResourceName serves those pods): removes them from the Node's status
  // if an agent in classic mode left them. Returns how many it removed.
  [[nodiscard]] absl::StatusOr<int> RemoveClassicResources();

  // The slice name for index i.
  std::string SliceName(size_t i) const;

 private:
  absl::StatusOr<nlohmann::json> ListSlices();
  k8s::ApiClient& client_;
  std::string node_;
  std::string node_uid_;
  int64_t last_generation_ = 0;
};

// Hash of a slice spec as the agent builds it (generation left out): 16 hex digits.
std::string SpecHash(const nlohmann::json& spec);

// ResourceClaims read from the API server.
class ApiClaimSource : public ClaimSource {
 public:
  explicit ApiClaimSource(k8s::ApiClient& client) : client_(client) {}
  absl::StatusOr<nlohmann::json> GetClaim(const std::string& ns, const std::string& name) override;

 private:
  k8s::ApiClient& client_;
};

}  // namespace tessera::agent::dra
