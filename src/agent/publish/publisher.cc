#include "agent/publish/publisher.h"

#include "common/strings.h"

namespace tessera::agent {

absl::StatusOr<nlohmann::json> NodePublisher::GetNode() {
  absl::StatusOr<nlohmann::json> node = client_.Get(StrCat("/api/v1/nodes/", node_));
  if (!node.ok() && node.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(StrCat("node ", node_,
                                      " does not exist (yet): the kubelet registers it; is "
                                      "--node-name (or NODE_NAME) this node's name?"));
  }
  return node;
}

absl::StatusOr<PublishOutcome> NodePublisher::Reconcile(const nlohmann::json& node,
                                                        const NodeAdvertisement& ad) {
  NodePatches patches = DiffNode(node, ad);
  PublishOutcome out;
  out.node = node;
  out.changes = std::move(patches.changes);
  const std::string path = StrCat("/api/v1/nodes/", node_);
  if (!patches.metadata.is_null()) {
    absl::StatusOr<nlohmann::json> patched =
        client_.Patch(path, k8s::PatchType::kMerge, patches.metadata);
    ++out.requests;
    if (!patched.ok()) return patched.status();
    out.node = std::move(*patched);
  }
  if (!patches.status.is_null()) {
    absl::StatusOr<nlohmann::json> patched =
        client_.Patch(path + "/status", k8s::PatchType::kMerge, patches.status);
    ++out.requests;
    if (!patched.ok()) return patched.status();
    out.node = std::move(*patched);
  }
  return out;
}

}  // namespace tessera::agent
