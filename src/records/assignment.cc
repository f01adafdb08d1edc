#include "records/assignment.h"

#include "common/strings.h"
#include "records/json_util.h"

namespace tessera::records {

using nlohmann::json;

namespace {

absl::StatusOr<MigInstanceRecord> ReadMigInstance(const json& j, const std::string& path) {
  JsonReader m(j, path);
  TESSERA_RETURN_IF_ERROR(m.ExpectObject());
  MigInstanceRecord out;
  TESSERA_ASSIGN_OR_RETURN(out.profile, m.String("profile"));
  if (!core::IsKnownMigProfile(out.profile)) {
    return m.Error("profile", StrCat("\"", out.profile, "\" is not a MIG profile tessera knows"));
  }
  TESSERA_ASSIGN_OR_RETURN(int64_t start, m.Int("start"));
  if (start < 0 || start >= core::kMigSlots) return m.Error("start", "must be 0..7");
  out.start = static_cast<int32_t>(start);
  return out;
}

}  // namespace

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
    if (!g.mig_profile.empty()) j["mig"] = {{"profile", g.mig_profile}, {"start", g.mig_start}};
    if (g.grant.mode == core::ShareMode::kMps) j["sharing"] = "mps";
    gpus.push_back(std::move(j));
  }
  doc["gpus"] = std::move(gpus);
  if (a.mig_create || !a.mig_destroy.empty()) {
    json destroy = json::array();
    for (const MigInstanceRecord& d : a.mig_destroy) {
      destroy.push_back({{"profile", d.profile}, {"start", d.start}});
    }
    doc["mig_plan"] = {{"create", a.mig_create}, {"destroy", std::move(destroy)}};
  }
  if (a.gang) {
    doc["gang"] = {{"name", a.gang->name},
                   {"size", a.gang->size},
                   {"min", a.gang->min},
                   {"running", a.gang->running}};
  }
  return doc.dump();
}

absl::StatusOr<Assignment> AssignmentFromJson(std::string_view text) {
  TESSERA_ASSIGN_OR_RETURN(json doc, ParseJson(text, "assignment"));
  JsonReader r(doc, "assignment");
  TESSERA_RETURN_IF_ERROR(r.ExpectObject());
  TESSERA_RETURN_IF_ERROR(r.ExpectVersion(kAssignmentVersion));
  Assignment a;
  TESSERA_ASSIGN_OR_RETURN(a.node, r.String("node"));
  if (a.node.empty()) return r.Error("node", "must not be empty");
  TESSERA_ASSIGN_OR_RETURN(const json* gpus, r.Array("gpus"));
  for (size_t i = 0; i < gpus->size(); ++i) {
    JsonReader g((*gpus)[i], StrCat("assignment.gpus[", i, "]"));
    TESSERA_RETURN_IF_ERROR(g.ExpectObject());
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
    TESSERA_ASSIGN_OR_RETURN(std::string sharing, g.OptionalString("sharing"));
    if (sharing == "mps") {
      out.grant.mode = core::ShareMode::kMps;
    } else if (!sharing.empty() && sharing != "shim") {
      return g.Error("sharing", StrCat("\"", sharing, "\" is not shim or mps"));
    }
    if (g.Has("mig")) {
      TESSERA_ASSIGN_OR_RETURN(MigInstanceRecord m, ReadMigInstance(g.At("mig"), g.Path("mig")));
      out.mig_profile = m.profile;
      out.mig_start = m.start;
    }
    a.gpus.push_back(std::move(out));
  }
  if (r.Has("mig_plan")) {
    JsonReader plan(r.At("mig_plan"), r.Path("mig_plan"));
    TESSERA_RETURN_IF_ERROR(plan.ExpectObject());
    TESSERA_ASSIGN_OR_RETURN(a.mig_create, plan.OptionalBool("create", false));
    if (plan.Has("destroy")) {
      TESSERA_ASSIGN_OR_RETURN(const json* destroy, plan.Array("destroy"));
      for (size_t i = 0; i < destroy->size(); ++i) {
        TESSERA_ASSIGN_OR_RETURN(
            MigInstanceRecord d,
            ReadMigInstance((*destroy)[i], StrCat("assignment.mig_plan.destroy[", i, "]")));
        a.mig_destroy.push_back(std::move(d));
      }
    }
    if (a.gpus.size() != 1 || a.gpus[0].mig_profile.empty()) {
      return r.Error("mig_plan", "only with exactly one GPU that has a MIG instance");
    }
  }
  if (r.Has("gang")) {
    JsonReader g(r.At("gang"), r.Path("gang"));
    TESSERA_RETURN_IF_ERROR(g.ExpectObject());
    GangRecord gang;
    TESSERA_ASSIGN_OR_RETURN(gang.name, g.String("name"));
    if (gang.name.empty()) return g.Error("name", "must not be empty");
    TESSERA_ASSIGN_OR_RETURN(int64_t size, g.Int("size"));
    if (size < 1 || size > 1'000'000) return g.Error("size", "must be 1..1000000");
    TESSERA_ASSIGN_OR_RETURN(int64_t min, g.Int("min"));
    if (min < 1 || min > size) return g.Error("min", StrCat("must be 1..", size, " (size)"));
    TESSERA_ASSIGN_OR_RETURN(int64_t running, g.Int("running"));
    if (running < 1 || running > size) {
      return g.Error("running", StrCat("must be 1..", size, " (size)"));
    }
    gang.size = static_cast<int32_t>(size);
    gang.min = static_cast<int32_t>(min);
    gang.running = static_cast<int32_t>(running);
    a.gang = std::move(gang);
  }
  return a;
}

Assignment MakeAssignment(const core::Cluster& cluster, const core::Placement& p) {
  Assignment a;
  const core::NodeSpec& node = cluster.node(p.node);
  a.node = node.name;
  for (const core::GpuGrant& g : p.gpus) {
    AssignedGpu out;
    out.grant = g;
    out.grant.mig = core::MigPlacement{};
    out.uuid = node.gpus[g.gpu].uuid;
    if (g.is_mig()) {
      const core::MigModel& model = *cluster.mig_model(p.node, g.gpu);
      out.mig_profile = std::string(model.profiles[g.mig.profile].name);
      out.mig_start = g.mig.start;
      a.mig_create = p.mig_plan.create;
      for (core::MigPlacement d : p.mig_plan.destroy) {
        a.mig_destroy.push_back({std::string(model.profiles[d.profile].name), d.start});
      }
    }
    a.gpus.push_back(std::move(out));
  }
  return a;
}

absl::StatusOr<core::Placement> AssignmentToPlacement(const core::Cluster& cluster,
                                                      const Assignment& a) {
  core::Placement p;
  p.node = cluster.FindNode(a.node);
  if (!p.node.valid()) {
    return absl::NotFoundError(StrCat("assignment: node \"", a.node, "\" is not in the cluster"));
  }
  const core::NodeSpec& node = cluster.node(p.node);
  auto mig_of = [&](int gpu, const std::string& profile, int32_t start,
                    std::string_view what) -> absl::StatusOr<core::MigPlacement> {
    const core::MigModel* model = cluster.mig_model(p.node, gpu);
    if (!model) {
      return absl::InvalidArgumentError(
          StrCat("assignment: ", what, ": GPU ", gpu, " of ", a.node, " is not in MIG mode"));
    }
    const int index = model->Find(profile);
    if (index < 0 || start < 0 || start >= core::kMigSlots) {
      return absl::InvalidArgumentError(StrCat("assignment: ", what, ": ", profile, "@", start,
                                               " is not a ", model->model, " MIG instance"));
    }
    return core::MigPlacement{static_cast<int8_t>(index), static_cast<int8_t>(start)};
  };
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    const AssignedGpu& g = a.gpus[i];
    if (g.grant.gpu >= node.gpu_count()) {
      return absl::InvalidArgumentError(
          StrCat("assignment: gpus[", i, "]: node ", a.node, " has ", node.gpu_count(), " GPUs"));
    }
    core::GpuGrant grant = g.grant;
    grant.mig = core::MigPlacement{};
    if (!g.mig_profile.empty()) {
      TESSERA_ASSIGN_OR_RETURN(
          grant.mig, mig_of(grant.gpu, g.mig_profile, g.mig_start, StrCat("gpus[", i, "].mig")));
      p.mig_plan.create = a.mig_create;
      for (size_t k = 0; k < a.mig_destroy.size(); ++k) {
        TESSERA_ASSIGN_OR_RETURN(core::MigPlacement d,
                                 mig_of(grant.gpu, a.mig_destroy[k].profile, a.mig_destroy[k].start,
                                        StrCat("mig_plan.destroy[", k, "]")));
        p.mig_plan.destroy.push_back(d);
      }
    }
    p.gpus.push_back(grant);
  }
  return p;
}

}  // namespace tessera::records
