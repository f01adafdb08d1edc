#include "records/assignment.h"

#include "common/strings.h"
#include "records/json_util.h"

namespace tessera::records {

using nlohmann::json;

std::string AssignmentToJson(const Assignment& a) {
  json doc;
  doc["version"] = kAssignmentVersion;
  doc["node"] = a.node;
  json gpus = json::array();
  for (const AssignedGpu& g : a.gpus) {
    json j = {{"index", g.grant.gpu},
              {"memory_mib", g.grant.memory_mib},
              {"compute_milli", g.grant.compute_milli},
              {"exclusive", g.grant.exclusive}};
    if (!g.uuid.empty()) j["uuid"] = g.uuid;
    gpus.push_back(std::move(j));
  }
  doc["gpus"] = std::move(gpus);
  return doc.dump();
}

absl::StatusOr<Assignment> AssignmentFromJson(std::string_view text) {
  TESSERA_ASSIGN_OR_RETURN(json doc, ParseJson(text, "assignment"));
  JsonReader r(doc, "assignment");
  TESSERA_RETURN_IF_ERROR(r.ExpectObject());
  TESSERA_RETURN_IF_ERROR(r.OnlyKeys({"version", "node", "gpus"}));
  TESSERA_ASSIGN_OR_RETURN(int64_t version, r.Int("version"));
  if (version != kAssignmentVersion) {
    return absl::InvalidArgumentError(StrCat("assignment: version ", version,
                                             " is not supported (this tessera reads version ",
                                             kAssignmentVersion, ")"));
  }
  Assignment a;
  TESSERA_ASSIGN_OR_RETURN(a.node, r.String("node"));
  if (a.node.empty()) return r.Error("node", "must not be empty");
  TESSERA_ASSIGN_OR_RETURN(const json* gpus, r.Array("gpus"));
  for (size_t i = 0; i < gpus->size(); ++i) {
    JsonReader g((*gpus)[i], StrCat("assignment.gpus[", i, "]"));
    TESSERA_RETURN_IF_ERROR(g.ExpectObject());
    TESSERA_RETURN_IF_ERROR(
        g.OnlyKeys({"index", "uuid", "memory_mib", "compute_milli", "exclusive"}));
    AssignedGpu out;
    TESSERA_ASSIGN_OR_RETURN(int64_t index, g.Int("index"));
    if (index < 0 || index >= 64) return g.Error("index", "must be 0..63");
    out.grant.gpu = static_cast<int32_t>(index);
    TESSERA_ASSIGN_OR_RETURN(out.uuid, g.OptionalString("uuid"));
    TESSERA_ASSIGN_OR_RETURN(out.grant.memory_mib, g.Int("memory_mib"));
    if (out.grant.memory_mib < 0) return g.Error("memory_mib", "must not be negative");
    TESSERA_ASSIGN_OR_RETURN(int64_t compute, g.Int("compute_milli"));
    if (compute < 0 || compute > 1000) return g.Error("compute_milli", "must be 0..1000");
    out.grant.compute_milli = static_cast<int32_t>(compute);
    TESSERA_ASSIGN_OR_RETURN(out.grant.exclusive, g.OptionalBool("exclusive", false));
    a.gpus.push_back(std::move(out));
  }
  return a;
}

}  // namespace tessera::records
