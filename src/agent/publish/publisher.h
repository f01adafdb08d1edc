// Sends what advertisement.h computes: merge patches of the Node (annotations, labels) and of its
// status subresource (capacity, allocatable), only when something differs.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "agent/publish/advertisement.h"
#include "k8s/client/http.h"
#include "nlohmann/json.hpp"

namespace tessera::agent {

struct PublishOutcome {
  nlohmann::json node;  // the Node after the patches (the input when nothing was patched)
  std::vector<std::string> changes;
  int requests = 0;  // PATCH requests sent (0 when the node already said it all)
};

class NodePublisher {
 public:
  NodePublisher(k8s::ApiClient& client, std::string node_name)
      : client_(client), node_(std::move(node_name)) {}

  // The Node as the API server has it. NotFound says what to check.
  [[nodiscard]] absl::StatusOr<nlohmann::json> GetNode();

  // Patches what differs between `node` (as last seen) and `ad`.
  [[nodiscard]] absl::StatusOr<PublishOutcome> Reconcile(const nlohmann::json& node,
                                                         const NodeAdvertisement& ad);

  const std::string& node_name() const { return node_; }

 private:
  k8s::ApiClient& client_;
  std::string node_;
};

}  // namespace tessera::agent
