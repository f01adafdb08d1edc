// Taints and tolerations: the one matcher for both kinds Kubernetes has, a Node's
// (spec.taints, the scheduler's TaintToleration filter) and a DRA device's (ResourceSlice
// devices[].taints, a claim request's tolerations, which the allocator checks).
//
// Kubernetes' rule (Toleration.ToleratesTaint, and DeviceToleration's, the same): a toleration
// with an effect tolerates only taints of that effect; one with an empty key and operator Exists
// tolerates every taint; otherwise the keys must be equal and either the operator is Exists or
// the values are equal. Example: {key "gpu", op "Exists"} tolerates gpu=broken:NoSchedule and
// gpu=:NoExecute, not other=x:NoSchedule; {op "Exists", effect "NoExecute"} tolerates every
// NoExecute taint and no NoSchedule one.
//
// Which taints count is each caller's: the scheduler keeps a Node's NoSchedule and NoExecute
// taints (PreferNoSchedule is only a preference), the DRA planner a device's NoSchedule and
// NoExecute ones (None is informational).
//
// Users: k8s/scheduler/objects.cc (DecodePod, NodeAllows, node_index.cc), k8s/dra/objects.cc
// (a claim's tolerations) and k8s/dra/planner.cc.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/json_fields.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

struct Taint {
  std::string key, value, effect;  // effect: NoSchedule | PreferNoSchedule | NoExecute | None
  bool operator==(const Taint&) const = default;
};

struct Toleration {
  std::string key, op = "Equal", value, effect;  // op: Equal | Exists; effect empty: any
  bool operator==(const Toleration&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Toleration& t) {
    return H::combine(std::move(h), t.key, t.op, t.value, t.effect);
  }
};

// A toleration as the API writes it (a Pod's spec.tolerations[], a claim request's
// tolerations[]): fields it does not know are ignored, no operator is Equal.
template <typename J>  // nlohmann::json, or k8s::ProtobufValue (objects.h)
Toleration DecodeToleration(const J& t) {
  Toleration tol;
  tol.key = JsonStringField(t, "key");
  tol.op = JsonStringField(t, "operator");
  if (tol.op.empty()) tol.op = "Equal";
  tol.value = JsonStringField(t, "value");
  tol.effect = JsonStringField(t, "effect");
  return tol;
}

// Whether `toleration` tolerates `taint`.
inline bool Tolerates(const Toleration& toleration, const Taint& taint) {
  if (!toleration.effect.empty() && toleration.effect != taint.effect) return false;
  // An empty key with Exists tolerates all (the API server refuses an empty key with Equal).
  if (toleration.key.empty()) return toleration.op == "Exists";
  if (toleration.key != taint.key) return false;
  return toleration.op == "Exists" || toleration.value == taint.value;
}

// Whether one of `tolerations` tolerates `taint`.
inline bool Tolerated(const std::vector<Toleration>& tolerations, const Taint& taint) {
  return std::any_of(tolerations.begin(), tolerations.end(),
                     [&](const Toleration& t) { return Tolerates(t, taint); });
}

// Whether `tolerations` tolerate every one of `taints`.
inline bool ToleratesAll(const std::vector<Toleration>& tolerations,
                         const std::vector<Taint>& taints) {
  return std::all_of(taints.begin(), taints.end(),
                     [&](const Taint& t) { return Tolerated(tolerations, t); });
}

}  // namespace tessera::k8s
