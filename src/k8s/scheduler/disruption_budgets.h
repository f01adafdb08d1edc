// PodDisruptionBudgets (policy/v1) as preemption reads them before planning: which budget covers a
// running pod, and how many evictions each allows now, so that a plan never counts on evicting a
// pod the Eviction API would refuse (preemption.h). The Eviction API stays the last guard (a
// budget may change between the plan and the eviction); this keeps a plan from evicting some of
// its victims before another is refused.
//
// Coverage is the Eviction API's (kube-apiserver pkg/registry/core/pod/storage/eviction.go):
//  - budgets of the pod's namespace whose spec.selector matches its labels (a missing selector
//    matches nothing, an empty one every pod; a selector that cannot be read matches nothing);
//  - a pod in phase Pending, or already terminating, is evicted without a budget check: none;
//  - a pod that is not Ready under a budget with unhealthyPodEvictionPolicy AlwaysAllow: none
//    (under IfHealthyBudget it is counted like a ready one, which may refuse what the API server
//    would allow, never the other way round);
//  - a pod under two or more budgets is refused by the Eviction API: it is covered by a budget
//    key that allows nothing ("ns/a+ns/b").
// Allowed: status.disruptionsAllowed, or none while the status is older than the spec
// (observedGeneration < generation, answered 429), when it is negative (403) or when
// status.disruptedPods holds more than the API server accepts (403).
//
// Owned by the scheduler thread; the informer's thread only decodes (DecodeBudget).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/objects.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

// One requirement of a metav1.LabelSelector's matchExpressions.
struct LabelRequirement {
  std::string key;
  std::string op;  // In, NotIn, Exists, DoesNotExist
  std::vector<std::string> values;
};

// A PodDisruptionBudget as the scheduler keeps it.
struct BudgetInfo {
  std::string ns, name, key;  // key: "ns/name"
  // spec.selector: absent selects nothing; `selector_error` a selector that cannot be read (it
  // selects nothing, as the Eviction API treats it).
  bool has_selector = false;
  std::map<std::string, std::string> match_labels;
  std::vector<LabelRequirement> match_expressions;
  std::string selector_error;
  bool always_allow_unhealthy = false;  // spec.unhealthyPodEvictionPolicy: AlwaysAllow
  int64_t generation = 0;               // metadata.generation
  int64_t observed_generation = 0;      // status.observedGeneration
  int64_t disruptions_allowed = 0;      // status.disruptionsAllowed
  // status.disruptedPods: pods whose eviction the API server accepted and the disruption
  // controller has not yet seen go (already counted in disruptions_allowed).
  absl::flat_hash_set<std::string> disrupted;

  // Whether the selector matches `labels`.
  bool Selects(const std::map<std::string, std::string>& labels) const;
};

std::shared_ptr<const BudgetInfo> DecodeBudget(const nlohmann::json& object);

class DisruptionBudgets {
 public:
  // The Eviction API refuses any eviction under a budget whose status.disruptedPods is longer.
  static constexpr size_t kMaxDisruptedPods = 2000;

  void Apply(Change change, std::shared_ptr<const BudgetInfo> budget);
  size_t size() const { return by_key_.size(); }

  // The budget key covering `pod` ("" none; see the file comment).
  std::string Covering(const PodInfo& pod) const;
  // Evictions the budget `key` allows now (0 for unknown keys and for pods under several).
  int64_t Allowed(const std::string& key) const;
  // Whether the budget `key` already counts the eviction of pod `name` (status.disruptedPods).
  bool Counted(const std::string& key, const std::string& name) const;

 private:
  absl::flat_hash_map<std::string, std::shared_ptr<const BudgetInfo>> by_key_;
  absl::flat_hash_map<std::string, std::vector<std::string>> keys_by_ns_;
};

}  // namespace tessera::k8s
