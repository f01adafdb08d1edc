#include "agent/dra/slices.h"

#include <algorithm>
#include <map>

#include "agent/dra/names.h"
#include "common/hash.h"
#include "common/json_fields.h"
#include "common/status.h"
#include "common/strings.h"
#include "records/names.h"
#include "spdlog/spdlog.h"

namespace tessera::agent::dra {
namespace {

using nlohmann::json;

int64_t GenerationOf(const json& slice) {
  const json& g = JsonField(JsonField(JsonField(slice, "spec"), "pool"), "generation");
  return g.is_number_integer() ? g.get<int64_t>() : 0;
}

}  // namespace

std::string SpecHash(const json& spec) {
  json copy = spec;
  if (copy.contains("pool")) copy["pool"].erase("generation");
  return fmt::format("{:016x}", Fnv1a(copy.dump(), kFnv1aDraSeed));
}

std::string SlicePublisher::SliceName(size_t i) const {
  const std::string suffix = StrCat("-", records::dra::kDriverName, "-", i);
  if (node_.size() + suffix.size() <= 253) return node_ + suffix;
  return StrCat("node-", fmt::format("{:016x}", Fnv1a(node_, kFnv1aDraSeed)), suffix);
}

absl::StatusOr<json> SlicePublisher::ListSlices() {
  const std::string selector =
      StrCat("spec.nodeName=", node_, ",spec.driver=", records::dra::kDriverName);
  TESSERA_ASSIGN_OR_RETURN(
      json list, client_.Get(StrCat(kResourceApi,
                                    "/resourceslices?fieldSelector=", k8s::QueryEscape(selector))));
  return list;
}

absl::StatusOr<SliceOutcome> SlicePublisher::Reconcile(const Pool& pool) {
  if (node_uid_.empty()) {
    TESSERA_ASSIGN_OR_RETURN(json node, client_.Get(StrCat("/api/v1/nodes/", node_)));
    node_uid_ = JsonField(JsonField(node, "metadata"), "uid").get<std::string>();
  }
  TESSERA_ASSIGN_OR_RETURN(json list, ListSlices());
  std::map<std::string, json> have;
  int64_t generation = last_generation_;
  for (const json& s : JsonField(list, "items")) {
    have[JsonField(s, "metadata").value("name", "")] = s;
    generation = std::max(generation, GenerationOf(s));
  }
  SliceOutcome out;
  // Anything different?
  bool same = have.size() == pool.slices.size();
  int64_t have_generation = -1;
  for (size_t i = 0; same && i < pool.slices.size(); ++i) {
    auto it = have.find(SliceName(i));
    if (it == have.end()) {
      same = false;
      break;
    }
    const json& annotations = JsonField(JsonField(it->second, "metadata"), "annotations");
    const int64_t g = GenerationOf(it->second);
    if (have_generation == -1) have_generation = g;
    same = g == have_generation &&
           annotations.value(std::string(kSpecHashAnnotation), "") == SpecHash(pool.slices[i]);
  }
  if (same) {
    last_generation_ = have_generation;
    out.generation = have_generation;
    return out;
  }
  ++generation;
  const json owner = {{"apiVersion", "v1"},
                      {"kind", "Node"},
                      {"name", node_},
                      {"uid", node_uid_},
                      {"controller", true}};
  for (size_t i = 0; i < pool.slices.size(); ++i) {
    json spec = pool.slices[i];
    spec["pool"]["generation"] = generation;
    const std::string name = SliceName(i);
    json object = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceSlice"},
        {"metadata",
         {{"name", name},
          {"annotations", {{std::string(kSpecHashAnnotation), SpecHash(pool.slices[i])}}},
          {"ownerReferences", json::array({owner})}}},
        {"spec", spec}};
    auto it = have.find(name);
    if (it == have.end()) {
      absl::StatusOr<json> made = client_.Create(StrCat(kResourceApi, "/resourceslices"), object);
      if (!made.ok()) {
        return absl::Status(made.status().code(),
                            StrCat("creating ResourceSlice ", name, ": ", made.status().message()));
      }
      ++out.created;
    } else {
      object["metadata"]["resourceVersion"] =
          JsonField(it->second, "metadata").value("resourceVersion", "");
      absl::StatusOr<json> updated =
          client_.Update(StrCat(kResourceApi, "/resourceslices/", name), object);
      if (!updated.ok()) {
        return absl::Status(updated.status().code(), StrCat("updating ResourceSlice ", name, ": ",
                                                            updated.status().message()));
      }
      ++out.updated;
      have.erase(it);
    }
  }
  for (size_t i = 0; i < pool.slices.size(); ++i) have.erase(SliceName(i));
  for (const auto& [name, slice] : have) {
    absl::StatusOr<json> gone = client_.Delete(StrCat(kResourceApi, "/resourceslices/", name));
    if (!gone.ok() && !absl::IsNotFound(gone.status())) {
      return absl::Status(gone.status().code(),
                          StrCat("deleting ResourceSlice ", name, ": ", gone.status().message()));
    }
    ++out.deleted;
  }
  last_generation_ = generation;
  out.generation = generation;
  return out;
}

absl::Status SlicePublisher::DeleteAll() {
  TESSERA_ASSIGN_OR_RETURN(json list, ListSlices());
  for (const json& s : JsonField(list, "items")) {
    const std::string name = JsonField(s, "metadata").value("name", "");
    absl::StatusOr<json> gone = client_.Delete(StrCat(kResourceApi, "/resourceslices/", name));
    if (!gone.ok() && !absl::IsNotFound(gone.status())) return gone.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SlicePublisher::RemoveClassicResources() {
  TESSERA_ASSIGN_OR_RETURN(json node, client_.Get(StrCat("/api/v1/nodes/", node_)));
  json capacity = json::object();
  for (std::string_view r :
       {records::kGpuResource, records::kGpuMemoryResource, records::kGpuComputeResource}) {
    if (JsonField(JsonField(node, "status"), "capacity").contains(std::string(r)) ||
        JsonField(JsonField(node, "status"), "allocatable").contains(std::string(r))) {
      capacity[std::string(r)] = nullptr;
    }
  }
  if (capacity.empty()) return 0;
  json patch = {{"status", {{"capacity", capacity}, {"allocatable", capacity}}}};
  TESSERA_RETURN_IF_ERROR(
      client_.Patch(StrCat("/api/v1/nodes/", node_, "/status"), k8s::PatchType::kMerge, patch)
          .status());
  return static_cast<int>(capacity.size());
}

absl::StatusOr<json> ApiClaimSource::GetClaim(const std::string& ns, const std::string& name) {
  return client_.Get(StrCat(kResourceApi, "/namespaces/", ns, "/resourceclaims/", name));
}

}  // namespace tessera::agent::dra
