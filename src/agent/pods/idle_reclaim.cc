#include "agent/pods/idle_reclaim.h"

#include "common/strings.h"

namespace tessera::agent {

using json = nlohmann::json;

IdleReclaimDecision DecideIdleReclaim(const json& pod, const std::string& uid,
                                      int32_t below_priority) {
  IdleReclaimDecision d;
  if (!pod.is_object()) {
    d.why = "the pod is gone";
    return d;
  }
  const json& meta = pod.value("metadata", json::object());
  if (meta.value("uid", "") != uid) {
    d.why = "the pod of that name is another pod now";
    return d;
  }
  if (meta.contains("deletionTimestamp")) {
    d.why = "the pod is already being deleted";
    return d;
  }
  const std::string phase = pod.value("status", json::object()).value("phase", "");
  if (phase == "Succeeded" || phase == "Failed") {
    d.why = StrCat("the pod has ended (", phase, ")");
    return d;
  }
  const json annotations = meta.value("annotations", json::object());
  if (annotations.contains("kubernetes.io/config.mirror")) {
    d.why = "a static pod (the kubelet would start it again)";
    return d;
  }
  for (const json& owner : meta.value("ownerReferences", json::array())) {
    if (owner.value("kind", "") == "DaemonSet" && owner.value("controller", false)) {
      d.why = "a DaemonSet's pod (it would come back on this node)";
      return d;
    }
  }
  const json& spec = pod.value("spec", json::object());
  auto it = spec.find("priority");
  if (it != spec.end() && it->is_number_integer()) d.priority = it->get<int32_t>();
  if (d.priority >= below_priority) {
    d.why = StrCat("its priority ", d.priority, " is not below ", below_priority);
    return d;
  }
  d.evict = true;
  d.why = StrCat("its priority ", d.priority, " is below ", below_priority);
  return d;
}

}  // namespace tessera::agent
