#include "k8s/scheduler/disruption_budgets.h"

#include <algorithm>

#include "common/json_fields.h"
#include "common/strings.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

int64_t IntField(const json& j, std::string_view key) {
  const json& v = JsonField(j, key);
  return v.is_number_integer() ? v.get<int64_t>() : 0;
}

// spec.selector into *b; false (with b->selector_error) when it cannot be read.
bool DecodeSelector(const json& selector, BudgetInfo* b) {
  if (selector.is_null()) return true;
  b->has_selector = true;
  if (!selector.is_object()) {
    b->selector_error = "spec.selector: not an object";
    return false;
  }
  const json& labels = JsonField(selector, "matchLabels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (!v.is_string()) {
        b->selector_error = StrCat("spec.selector.matchLabels[", k, "]: not a string");
        return false;
      }
      b->match_labels[k] = v.get<std::string>();
    }
  }
  const json& exprs = JsonField(selector, "matchExpressions");
  if (!exprs.is_array()) return true;
  for (size_t i = 0; i < exprs.size(); ++i) {
    LabelRequirement r;
    r.key = JsonStringField(exprs[i], "key");
    r.op = JsonStringField(exprs[i], "operator");
    const std::string where = StrCat("spec.selector.matchExpressions[", i, "]");
    if (const json& values = JsonField(exprs[i], "values"); values.is_array()) {
      for (const json& v : values) {
        if (v.is_string()) r.values.push_back(v.get<std::string>());
      }
    }
    if (r.op == "In" || r.op == "NotIn") {
      if (r.values.empty()) {
        b->selector_error = StrCat(where, ": operator ", r.op, " needs values");
        return false;
      }
    } else if (r.op == "Exists" || r.op == "DoesNotExist") {
      if (!r.values.empty()) {
        b->selector_error = StrCat(where, ": operator ", r.op, " takes no values");
        return false;
      }
    } else {
      b->selector_error = StrCat(where, ": unknown operator \"", r.op, "\"");
      return false;
    }
    b->match_expressions.push_back(std::move(r));
  }
  return true;
}

}  // namespace

bool BudgetInfo::Selects(const std::map<std::string, std::string>& labels) const {
  if (!has_selector || !selector_error.empty()) return false;
  for (const auto& [k, v] : match_labels) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  for (const LabelRequirement& r : match_expressions) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    const bool in =
        has && std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
    if (r.op == "In" && !in) return false;
    if (r.op == "NotIn" && in) return false;
    if (r.op == "Exists" && !has) return false;
    if (r.op == "DoesNotExist" && has) return false;
  }
  return true;
}

std::shared_ptr<const BudgetInfo> DecodeBudget(const json& object) {
  auto b = std::make_shared<BudgetInfo>();
  const json& meta = JsonField(object, "metadata");
  const json& spec = JsonField(object, "spec");
  const json& status = JsonField(object, "status");
  b->ns = JsonStringField(meta, "namespace");
  b->name = JsonStringField(meta, "name");
  b->key = StrCat(b->ns, "/", b->name);
  b->generation = IntField(meta, "generation");
  DecodeSelector(JsonField(spec, "selector"), b.get());
  b->always_allow_unhealthy = JsonStringField(spec, "unhealthyPodEvictionPolicy") == "AlwaysAllow";
  b->observed_generation = IntField(status, "observedGeneration");
  b->disruptions_allowed = IntField(status, "disruptionsAllowed");
  if (const json& d = JsonField(status, "disruptedPods"); d.is_object()) {
    for (const auto& [name, at] : d.items()) b->disrupted.insert(name);
  }
  return b;
}

void DisruptionBudgets::Apply(Change change, std::shared_ptr<const BudgetInfo> budget) {
  const std::string key = budget->key;
  std::vector<std::string>& keys = keys_by_ns_[budget->ns];
  if (change == Change::kDeleted) {
    by_key_.erase(key);
    std::erase(keys, key);
    if (keys.empty()) keys_by_ns_.erase(budget->ns);
    return;
  }
  auto [it, fresh] = by_key_.insert_or_assign(key, std::move(budget));
  if (fresh) {
    keys.push_back(key);
    std::sort(keys.begin(), keys.end());
  }
}

std::string DisruptionBudgets::Covering(const PodInfo& pod) const {
  if (pod.deleting || pod.phase == "Pending" || pod.terminal()) return "";
  auto ns = keys_by_ns_.find(pod.ns);
  if (ns == keys_by_ns_.end()) return "";
  std::string out;
  const BudgetInfo* only = nullptr;
  for (const std::string& key : ns->second) {
    const BudgetInfo& b = *by_key_.at(key);
    if (!b.Selects(pod.labels)) continue;
    only = out.empty() ? &b : nullptr;
    out = out.empty() ? key : StrCat(out, "+", key);
  }
  // Under one budget, an unready pod may go freely when the budget says so.
  if (only != nullptr && !pod.ready && only->always_allow_unhealthy) return "";
  return out;
}

int64_t DisruptionBudgets::Allowed(const std::string& key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return 0;
  const BudgetInfo& b = *it->second;
  if (b.observed_generation < b.generation || b.disrupted.size() > kMaxDisruptedPods) return 0;
  return std::max<int64_t>(0, b.disruptions_allowed);
}

bool DisruptionBudgets::Counted(const std::string& key, const std::string& name) const {
  auto it = by_key_.find(key);
  return it != by_key_.end() && it->second->disrupted.contains(name);
}

}  // namespace tessera::k8s
