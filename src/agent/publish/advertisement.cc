#include "agent/publish/advertisement.h"

#include <set>

#include "common/json_fields.h"
#include "common/strings.h"
#include "core/model/quantity.h"
#include "records/inventory.h"
#include "records/node_names.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

// Two quantities of one resource are the same amount.
bool SameQuantity(std::string_view resource, const json& have, const std::string& want) {
  if (!have.is_string()) return false;
  const std::string text = have.get<std::string>();
  if (text == want) return true;
  if (resource == records::kGpuMemoryResource) {
    absl::StatusOr<int64_t> a = core::ParseMemoryMiB(text, core::Rounding::kDown);
    absl::StatusOr<int64_t> b = core::ParseMemoryMiB(want, core::Rounding::kDown);
    absl::StatusOr<int64_t> a_up = core::ParseMemoryMiB(text, core::Rounding::kUp);
    return a.ok() && b.ok() && a_up.ok() && *a == *b && *a_up == *a;
  }
  absl::StatusOr<int64_t> a = core::ParseCount(text);
  absl::StatusOr<int64_t> b = core::ParseCount(want);
  return a.ok() && b.ok() && *a == *b;
}

std::set<std::string> SplitKeys(const std::string& list) {
  std::set<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    if (comma > start) out.insert(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

NodeAdvertisement AdvertisementFor(const NodeGpus& gpus) {
  NodeAdvertisement ad;
  ad.inventory = records::InventoryToJson(gpus.ToInventory());
  int64_t memory_mib = 0;
  std::set<std::string> models;
  for (const DiscoveredGpu& g : gpus.gpus) {
    memory_mib += g.spec.memory_mib;
    models.insert(g.spec.model);
  }
  const int64_t n = static_cast<int64_t>(gpus.gpus.size());
  ad.labels[std::string(records::kGpuModelLabel)] =
      models.size() == 1 ? *models.begin() : std::string("mixed");
  ad.labels[std::string(records::kGpuCountLabel)] = StrCat(n);
  if (std::string domain = gpus.NvLinkDomain(); !domain.empty()) {
    ad.labels[std::string(records::kNvlinkDomainLabel)] = domain;
  }
  ad.resources[std::string(records::kGpuResource)] = StrCat(n);
  ad.resources[std::string(records::kGpuMemoryResource)] = StrCat(memory_mib, "Mi");
  ad.resources[std::string(records::kGpuComputeResource)] = StrCat(n * records::kGpuComputePerGpu);
  return ad;
}

NodePatches DiffNode(const json& node, const NodeAdvertisement& ad) {
  NodePatches out;
  const json& metadata = JsonField(node, "metadata");
  const json& annotations = JsonField(metadata, "annotations");
  const json& labels = JsonField(metadata, "labels");
  json meta_annotations = json::object();
  json meta_labels = json::object();

  const std::string inventory_key(records::kInventoryAnnotation);
  const std::string have_inventory = JsonStringField(annotations, inventory_key);
  bool same_inventory = false;
  if (!have_inventory.empty()) {
    try {
      same_inventory = json::parse(have_inventory) == json::parse(ad.inventory);
    } catch (const json::exception&) {
      same_inventory = false;  // not JSON: replaced
    }
  }
  if (!same_inventory) {
    meta_annotations[inventory_key] = ad.inventory;
    out.changes.push_back(have_inventory.empty() ? "inventory: published" : "inventory: changed");
  }

  for (const auto& [key, value] : ad.labels) {
    const std::string have = JsonStringField(labels, key);
    if (have != value || !JsonField(labels, key).is_string()) {
      meta_labels[key] = value;
      out.changes.push_back(
          StrCat("label ", key, ": ", have.empty() ? "(none)" : have, " -> ", value));
    }
  }
  const std::string owned_key(records::kAgentLabelsAnnotation);
  for (const std::string& key : SplitKeys(JsonStringField(annotations, owned_key))) {
    if (ad.labels.count(key) == 0 && JsonField(labels, key).is_string()) {
      meta_labels[key] = nullptr;  // a label the agent wrote and that no longer applies
      out.changes.push_back(StrCat("label ", key, ": removed"));
    }
  }
  std::vector<std::string> keys;
  for (const auto& [key, value] : ad.labels) keys.push_back(key);
  const std::string owned = StrJoin(keys, ",");
  if (JsonStringField(annotations, owned_key) != owned) meta_annotations[owned_key] = owned;

  if (!meta_annotations.empty() || !meta_labels.empty()) {
    out.metadata = json::object();
    if (!meta_annotations.empty()) out.metadata["metadata"]["annotations"] = meta_annotations;
    if (!meta_labels.empty()) out.metadata["metadata"]["labels"] = meta_labels;
  }

  const json& status = JsonField(node, "status");
  json capacity = json::object();
  json allocatable = json::object();
  for (const auto& [resource, quantity] : ad.resources) {
    const json& have_capacity = JsonField(JsonField(status, "capacity"), resource);
    const json& have_allocatable = JsonField(JsonField(status, "allocatable"), resource);
    if (!SameQuantity(resource, have_capacity, quantity) ||
        !SameQuantity(resource, have_allocatable, quantity)) {
      capacity[resource] = quantity;
      allocatable[resource] = quantity;
      out.changes.push_back(
          StrCat("resource ", resource, ": ",
                 have_capacity.is_string() ? have_capacity.get<std::string>() : "(none)", " -> ",
                 quantity));
    }
  }
  if (!capacity.empty()) {
    out.status = {{"status", {{"capacity", capacity}, {"allocatable", allocatable}}}};
  }
  return out;
}

NodePatches WithdrawNode(const json& node) {
  NodePatches out;
  const json& metadata = JsonField(node, "metadata");
  const json& annotations = JsonField(metadata, "annotations");
  const json& labels = JsonField(metadata, "labels");
  json meta = json::object();
  const std::string owned_key(records::kAgentLabelsAnnotation);
  for (const std::string& key : SplitKeys(JsonStringField(annotations, owned_key))) {
    if (JsonField(labels, key).is_string()) {
      meta["metadata"]["labels"][key] = nullptr;
      out.changes.push_back(StrCat("label ", key, ": removed"));
    }
  }
  for (const std::string& key : {std::string(records::kInventoryAnnotation), owned_key}) {
    if (JsonField(annotations, key).is_string()) {
      meta["metadata"]["annotations"][key] = nullptr;
      out.changes.push_back(StrCat("annotation ", key, ": removed"));
    }
  }
  if (!meta.empty()) out.metadata = std::move(meta);
  json status = json::object();
  for (const char* list : {"capacity", "allocatable"}) {
    for (const std::string_view r :
         {records::kGpuResource, records::kGpuMemoryResource, records::kGpuComputeResource}) {
      if (JsonField(JsonField(JsonField(node, "status"), list), std::string(r)).is_null()) continue;
      status["status"][list][std::string(r)] = nullptr;
      out.changes.push_back(StrCat("resource ", r, " (", list, "): removed"));
    }
  }
  if (!status.empty()) out.status = std::move(status);
  return out;
}

}  // namespace tessera::agent
