#include "records/inventory.h"

#include "common/strings.h"
#include "nlohmann/json.hpp"
#include "records/json_util.h"

namespace tessera::records {

using nlohmann::json;

std::string InventoryToJson(const Inventory& inv, bool pretty) {
  json doc;
  doc["version"] = kInventoryVersion;
  json gpus = json::array();
  for (const core::GpuSpec& g : inv.gpus) {
    json j;
    j["index"] = g.index;
    if (!g.uuid.empty()) j["uuid"] = g.uuid;
    j["model"] = g.model;
    j["memory_mib"] = g.memory_mib;
    if (g.sm_count > 0) j["sm_count"] = g.sm_count;
    j["numa_node"] = g.numa_node;
    if (!g.pci_bus_id.empty()) j["pci_bus_id"] = g.pci_bus_id;
    if (!g.cpu_affinity.empty()) j["cpu_affinity"] = g.cpu_affinity;
    json mig = {{"capable", core::FindMigModel(g.model) != nullptr}, {"enabled", g.mig_enabled}};
    if (!g.mig_layout.empty()) {
      const core::MigModel* model = core::FindMigModel(g.model);
      json instances = json::array();
      for (core::MigPlacement p : g.mig_layout) {
        instances.push_back(
            {{"profile", model ? std::string(model->profiles[p.profile].name) : std::string("?")},
             {"start", p.start}});
      }
      mig["instances"] = std::move(instances);
    }
    j["mig"] = std::move(mig);
    if (!inv.healthy(g.index)) {
      const GpuHealth& h = inv.health[static_cast<size_t>(g.index)];
      json health = {{"healthy", false}};
      if (!h.xids.empty()) health["xids"] = h.xids;
      if (!h.reason.empty()) health["reason"] = h.reason;
      j["health"] = std::move(health);
    }
    gpus.push_back(std::move(j));
  }
  doc["gpus"] = std::move(gpus);
  json links = json::array();
  for (int i = 0; i < inv.links.size(); ++i) {
    json row = json::array();
    for (int k = 0; k < inv.links.size(); ++k) row.push_back(core::LinkName(inv.links.at(i, k)));
    links.push_back(std::move(row));
  }
  doc["links"] = std::move(links);
  if (!inv.nics.empty()) {
    json nics = json::array();
    for (const core::NicSpec& n : inv.nics) {
      json row = json::array();
      for (const core::Link& l : n.gpu_links) row.push_back(core::LinkName(l));
      json j = {{"name", n.name}, {"links", std::move(row)}};
      if (!n.device.empty()) j["device"] = n.device;
      nics.push_back(std::move(j));
    }
    doc["nics"] = std::move(nics);
  }
  return pretty ? doc.dump(2) : doc.dump();
}

absl::StatusOr<Inventory> InventoryFromJson(std::string_view text) {
  TESSERA_ASSIGN_OR_RETURN(json doc, ParseJson(text, "gpu-inventory"));
  JsonReader r(doc, "gpu-inventory");
  TESSERA_RETURN_IF_ERROR(r.ExpectObject());
  TESSERA_RETURN_IF_ERROR(r.ExpectVersion(kInventoryVersion));
  Inventory inv;
  TESSERA_ASSIGN_OR_RETURN(const json* gpus, r.Array("gpus"));
  if (gpus->size() > static_cast<size_t>(core::kMaxGpusPerNode)) {
    return absl::InvalidArgumentError(
        StrCat("gpu-inventory.gpus: ", gpus->size(), " GPUs; at most ", core::kMaxGpusPerNode));
  }
  for (size_t i = 0; i < gpus->size(); ++i) {
    JsonReader g((*gpus)[i], StrCat("gpu-inventory.gpus[", i, "]"));
    TESSERA_RETURN_IF_ERROR(g.ExpectObject());
    core::GpuSpec spec;
    TESSERA_ASSIGN_OR_RETURN(int64_t index, g.Int("index"));
    if (index != static_cast<int64_t>(i)) {
      return g.Error("index", StrCat("is ", index, ", expected ", i, " (GPUs in index order)"));
    }
    spec.index = static_cast<int32_t>(index);
    TESSERA_ASSIGN_OR_RETURN(spec.uuid, g.OptionalString("uuid"));
    TESSERA_ASSIGN_OR_RETURN(spec.model, g.String("model"));
    if (spec.model.empty()) return g.Error("model", "must not be empty");
    TESSERA_ASSIGN_OR_RETURN(spec.memory_mib, g.Int("memory_mib"));
    if (spec.memory_mib <= 0) return g.Error("memory_mib", "must be positive");
    TESSERA_ASSIGN_OR_RETURN(int64_t sm, g.OptionalInt("sm_count", 0));
    if (sm < 0) return g.Error("sm_count", "must not be negative");
    spec.sm_count = static_cast<int32_t>(sm);
    TESSERA_ASSIGN_OR_RETURN(int64_t numa, g.OptionalInt("numa_node", -1));
    spec.numa_node = static_cast<int32_t>(numa);
    TESSERA_ASSIGN_OR_RETURN(spec.pci_bus_id, g.OptionalString("pci_bus_id"));
    TESSERA_ASSIGN_OR_RETURN(spec.cpu_affinity, g.OptionalString("cpu_affinity"));
    if (g.Has("mig")) {
      JsonReader mig(g.At("mig"), g.Path("mig"));
      TESSERA_RETURN_IF_ERROR(mig.ExpectObject());
      TESSERA_ASSIGN_OR_RETURN(spec.mig_enabled, mig.OptionalBool("enabled", false));
      TESSERA_ASSIGN_OR_RETURN(bool capable, mig.OptionalBool("capable", false));
      (void)capable;  // informational: tessera knows which models have MIG tables
      const core::MigModel* model = core::FindMigModel(spec.model);
      if (spec.mig_enabled && !model) {
        return mig.Error("enabled",
                         StrCat("tessera has no MIG profiles for ", spec.model,
                                " (it has: ", StrJoin(core::MigModelNames(), ", "), ")"));
      }
      if (mig.Has("instances")) {
        if (!spec.mig_enabled) return mig.Error("instances", "only when enabled is true");
        TESSERA_ASSIGN_OR_RETURN(const json* instances, mig.Array("instances"));
        for (size_t k = 0; k < instances->size(); ++k) {
          JsonReader inst((*instances)[k], StrCat(mig.Path("instances"), "[", k, "]"));
          TESSERA_RETURN_IF_ERROR(inst.ExpectObject());
          TESSERA_ASSIGN_OR_RETURN(std::string profile, inst.String("profile"));
          const int found = model->Find(profile);
          if (found < 0) {
            return inst.Error("profile",
                              StrCat("\"", profile, "\" is not a ", model->model, " MIG profile (",
                                     StrJoin(model->ProfileNames(), ", "), ")"));
          }
          TESSERA_ASSIGN_OR_RETURN(int64_t start, inst.Int("start"));
          if (start < 0 || start >= core::kMigSlots) return inst.Error("start", "must be 0..7");
          spec.mig_layout.push_back(
              core::MigPlacement{static_cast<int8_t>(found), static_cast<int8_t>(start)});
        }
        TESSERA_RETURN_IF_ERROR(
            core::ValidateMigInstances(*model, spec.mig_layout, mig.Path("instances")));
      }
    }
    GpuHealth health;
    if (g.Has("health")) {
      JsonReader h(g.At("health"), g.Path("health"));
      TESSERA_RETURN_IF_ERROR(h.ExpectObject());
      if (!h.Has("healthy") || !h.At("healthy").is_boolean()) {
        return h.Error("healthy", "expected true or false");
      }
      health.healthy = h.At("healthy").get<bool>();
      if (h.Has("xids")) {
        TESSERA_ASSIGN_OR_RETURN(const json* xids, h.Array("xids"));
        for (const json& x : *xids) {
          if (!x.is_number_integer() || x.get<int64_t>() <= 0 || x.get<int64_t>() > 1'000'000) {
            return h.Error("xids", StrCat("expected positive XID numbers, found ", x.dump()));
          }
          health.xids.push_back(static_cast<int32_t>(x.get<int64_t>()));
        }
      }
      TESSERA_ASSIGN_OR_RETURN(health.reason, h.OptionalString("reason"));
      if (health.healthy) health = GpuHealth{};  // only an unhealthy GPU's details are kept
    }
    if (!health.healthy && inv.health.size() < i) inv.health.resize(i);  // all healthy so far
    if (!health.healthy || !inv.health.empty()) inv.health.push_back(std::move(health));
    inv.gpus.push_back(std::move(spec));
  }
  const int n = static_cast<int>(inv.gpus.size());
  inv.links = core::LinkMatrix(n);
  TESSERA_ASSIGN_OR_RETURN(const json* links, r.Array("links"));
  if (links->size() != static_cast<size_t>(n)) {
    return r.Error("links", StrCat("has ", links->size(), " rows for ", n, " GPUs"));
  }
  std::vector<std::vector<core::Link>> rows(n);
  for (int i = 0; i < n; ++i) {
    const json& row = (*links)[i];
    std::string path = StrCat("gpu-inventory.links[", i, "]");
    if (!row.is_array() || row.size() != static_cast<size_t>(n)) {
      return absl::InvalidArgumentError(StrCat(path, ": expected an array of ", n, " link names"));
    }
    for (int k = 0; k < n; ++k) {
      if (!row[k].is_string()) {
        return absl::InvalidArgumentError(StrCat(path, "[", k, "]: expected a link name"));
      }
      absl::StatusOr<core::Link> link = core::ParseLinkName(row[k].get<std::string>());
      if (!link.ok()) {
        return absl::InvalidArgumentError(StrCat(path, "[", k, "]: ", link.status().message()));
      }
      if ((i == k) != (link->kind == core::LinkKind::kSelf)) {
        return absl::InvalidArgumentError(StrCat(
            path, "[", k, "]: ", i == k ? "expected X on the diagonal" : "X off the diagonal"));
      }
      rows[i].push_back(*link);
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int k = i + 1; k < n; ++k) {
      if (!(rows[i][k] == rows[k][i])) {
        return absl::InvalidArgumentError(StrCat("gpu-inventory.links[", k, "][", i,
                                                 "]: differs from links[", i, "][", k,
                                                 "] (the matrix must be symmetric)"));
      }
      inv.links.Set(i, k, rows[i][k]);
    }
  }
  if (r.Has("nics")) {
    TESSERA_ASSIGN_OR_RETURN(const json* nics, r.Array("nics"));
    for (size_t i = 0; i < nics->size(); ++i) {
      JsonReader nr((*nics)[i], StrCat("gpu-inventory.nics[", i, "]"));
      TESSERA_RETURN_IF_ERROR(nr.ExpectObject());
      core::NicSpec nic;
      TESSERA_ASSIGN_OR_RETURN(nic.name, nr.String("name"));
      TESSERA_ASSIGN_OR_RETURN(nic.device, nr.OptionalString("device"));
      TESSERA_ASSIGN_OR_RETURN(const json* nl, nr.Array("links"));
      if (nl->size() != static_cast<size_t>(n)) {
        return nr.Error("links", StrCat("has ", nl->size(), " entries for ", n, " GPUs"));
      }
      for (size_t k = 0; k < nl->size(); ++k) {
        if (!(*nl)[k].is_string()) return nr.Error("links", "expected link names");
        absl::StatusOr<core::Link> link = core::ParseLinkName((*nl)[k].get<std::string>());
        if (!link.ok()) return nr.Error("links", FromAbsl(link.status().message()));
        nic.gpu_links.push_back(*link);
      }
      inv.nics.push_back(std::move(nic));
    }
  }
  return inv;
}

}  // namespace tessera::records
