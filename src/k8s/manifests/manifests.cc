#include "k8s/manifests/manifests.h"

#include <algorithm>
#include <functional>
#include <map>

#include "common/json_fields.h"
#include "common/status.h"
#include "common/strings.h"
#include "k8s/client/yaml_json.h"
#include "k8s/scheduler/pod_groups.h"
#include "yaml-cpp/yaml.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

// The API group of the PodGroups the scheduler reads (kPodGroupsPath), any version; PodGroups of
// other groups (Volcano's, KAI's, the coscheduling plugin's) are skipped as other kinds are.
constexpr std::string_view kPodGroupApiGroup = "scheduling.k8s.io/";

// How one kind makes pods: its pod template and how many pods run at once. `error` is set when
// the object is malformed (a negative count).
struct Made {
  const json* tmpl = nullptr;  // {metadata, spec} of the pods
  int64_t count = 0;
  std::string error;
};
using Reader = std::function<Made(const json& object)>;

// An integer field, `otherwise` when absent; -1 when present but not a whole number.
int64_t Count(const json& j, const char* key, int64_t otherwise) {
  const json& v = JsonField(j, key);
  if (v.is_null()) return otherwise;
  if (!v.is_number_integer()) return -1;
  return v.get<int64_t>();
}

Made Replicated(const json& o) {
  const json& spec = JsonField(o, "spec");
  return Made{&JsonField(spec, "template"), Count(spec, "replicas", 1), ""};
}

Made JobPods(const json& spec) {
  const int64_t parallelism = Count(spec, "parallelism", 1);
  const int64_t completions = Count(spec, "completions", parallelism);
  if (parallelism < 0 || completions < 0) {
    return Made{nullptr, 0, "spec.parallelism and spec.completions must be whole numbers >= 0"};
  }
  return Made{&JsonField(spec, "template"), std::min(parallelism, completions), ""};
}

// The kinds that make pods. PodGroups make none: ReadObject keeps them for ResolvePodGroups.
const std::vector<std::pair<std::string, Reader>>& Table() {
  static const auto* table = new std::vector<std::pair<std::string, Reader>>{
      {"Pod",
       [](const json& o) {
         return Made{&o, 1, ""};
       }},
      {"Deployment", Replicated},
      {"ReplicaSet", Replicated},
      {"StatefulSet", Replicated},
      {"Job", [](const json& o) { return JobPods(JsonField(o, "spec")); }},
      {"CronJob",
       [](const json& o) {
         return JobPods(JsonField(JsonField(JsonField(o, "spec"), "jobTemplate"), "spec"));
       }},
  };
  return *table;
}

// Values of a string map (labels, annotations) must be strings, as the API server requires.
absl::Status StringMap(const json& meta, const char* key, const std::string& where) {
  const json& m = JsonField(meta, key);
  if (m.is_null()) return absl::OkStatus();
  if (!m.is_object())
    return absl::InvalidArgumentError(StrCat(where, ": ", key, ": expected a map"));
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(StrCat(where, ": ", key, "[", k, "]: ", v.dump(),
                                               " must be a string (quote it: \"", v.dump(), "\")"));
    }
  }
  return absl::OkStatus();
}

// YAML numbers in resource quantities ("cpu: 1", "memory: 2.5") as the quantity text the API
// server would store ("1", "2.5"), so DecodePod reads them as it reads any pod.
void QuantitiesAsText(json& spec) {
  auto fix = [](json& map) {
    if (!map.is_object()) return;
    for (auto& [k, v] : map.items()) {
      if (v.is_number_integer()) {
        v = std::to_string(v.get<int64_t>());
      } else if (v.is_number_float()) {
        std::string s = json(v).dump();
        v = s;
      }
    }
  };
  for (const char* list : {"containers", "initContainers"}) {
    json& cs = spec[list];
    if (!cs.is_array()) {
      if (cs.is_null()) spec.erase(list);
      continue;
    }
    for (json& c : cs) {
      if (!c.is_object() || !c.contains("resources")) continue;
      json& r = c["resources"];
      if (!r.is_object()) continue;
      if (r.contains("requests")) fix(r["requests"]);
      if (r.contains("limits")) fix(r["limits"]);
    }
  }
  if (spec.contains("overhead")) fix(spec["overhead"]);
}

// What of a pod the simulator does not model.
std::vector<std::string> NotSimulated(const PodInfo& pod, const json& spec) {
  std::vector<std::string> out;
  if (!pod.constraints.node_selector.empty()) out.push_back("spec.nodeSelector");
  if (pod.constraints.has_affinity) out.push_back("required node affinity");
  if (!pod.constraints.tolerations.empty()) out.push_back("tolerations");
  if (JsonField(spec, "priorityClassName").is_string() && JsonField(spec, "priority").is_null()) {
    out.push_back(StrCat("priorityClassName ", JsonStringField(spec, "priorityClassName"),
                         " (simulated at priority 0; give spec.priority to simulate it)"));
  }
  if (pod.scheduler_name != "tessera") {
    out.push_back(StrCat("schedulerName ",
                         pod.scheduler_name.empty() ? "(none)" : pod.scheduler_name,
                         " (tessera schedules only pods with schedulerName: tessera; simulated as "
                         "if it were set)"));
  }
  return out;
}

struct Context {
  std::string source;
  std::string default_namespace;
  Manifests* out;
};

absl::Status ReadObject(const json& o, int line, const Context& c);

absl::Status ReadList(const json& o, int line, const Context& c) {
  const json& items = JsonField(o, "items");
  if (!items.is_array()) {
    return absl::InvalidArgumentError(StrCat(c.source, ":", line, ": kind List without items"));
  }
  for (const json& item : items) TESSERA_RETURN_IF_ERROR(ReadObject(item, line, c));
  return absl::OkStatus();
}

absl::Status ReadObject(const json& o, int line, const Context& c) {
  if (!o.is_object()) {
    return absl::InvalidArgumentError(
        StrCat(c.source, ":", line, ": expected a Kubernetes object (a map with kind)"));
  }
  const std::string kind = JsonStringField(o, "kind");
  if (kind == "List") return ReadList(o, line, c);
  const json& meta = JsonField(o, "metadata");
  const std::string name = JsonStringField(meta, "name");
  if (kind.empty()) {
    return absl::InvalidArgumentError(StrCat(c.source, ":", line, ": the object has no kind"));
  }
  const std::string where = StrCat(c.source, ":", line, " (", kind, " ", name, ")");
  if (kind == "PodGroup" && JsonStringField(o, "apiVersion").starts_with(kPodGroupApiGroup)) {
    if (name.empty()) {
      return absl::InvalidArgumentError(StrCat(where, ": metadata.name is missing"));
    }
    json group = o;
    if (JsonStringField(meta, "namespace").empty()) {
      group["metadata"]["namespace"] = c.default_namespace;
    }
    std::shared_ptr<const PodGroupInfo> decoded = DecodePodGroup(group);
    if (!decoded->error.empty()) {
      return absl::InvalidArgumentError(StrCat(where, ": ", decoded->error));
    }
    c.out->pod_groups.push_back(ManifestPodGroup{c.source, line, std::move(decoded)});
    return absl::OkStatus();
  }
  auto row =
      std::find_if(Table().begin(), Table().end(), [&](const auto& r) { return r.first == kind; });
  if (row == Table().end()) {
    c.out->skipped.push_back(ManifestSkipped{
        kind, name, line,
        kind == "DaemonSet" ? "a DaemonSet runs one pod per matching node; not simulated"
                            : StrCat("kind ", kind, " makes no pods tessera schedules (read: ",
                                     StrJoin(ManifestKinds(), ", "), ")")});
    return absl::OkStatus();
  }
  if (name.empty()) return absl::InvalidArgumentError(StrCat(where, ": metadata.name is missing"));
  Made made = row->second(o);
  if (!made.error.empty()) return absl::InvalidArgumentError(StrCat(where, ": ", made.error));
  if (made.count < 0) {
    return absl::InvalidArgumentError(
        StrCat(where, ": its replica count must be a whole number >= 0"));
  }
  if (made.tmpl == nullptr || !made.tmpl->is_object() ||
      !JsonField(*made.tmpl, "spec").is_object()) {
    return absl::InvalidArgumentError(StrCat(where, ": no pod template (",
                                             kind == "Pod" ? "spec" : "spec.template.spec",
                                             " is missing)"));
  }
  const json& tmeta = JsonField(*made.tmpl, "metadata");
  TESSERA_RETURN_IF_ERROR(StringMap(meta, "labels", where));
  TESSERA_RETURN_IF_ERROR(StringMap(meta, "annotations", where));
  TESSERA_RETURN_IF_ERROR(StringMap(tmeta, "labels", where));
  TESSERA_RETURN_IF_ERROR(StringMap(tmeta, "annotations", where));
  std::string ns = JsonStringField(meta, "namespace");
  if (ns.empty()) ns = c.default_namespace;
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec", JsonField(*made.tmpl, "spec")}};
  for (const char* key : {"labels", "annotations"}) {
    if (JsonField(tmeta, key).is_object()) pod["metadata"][key] = JsonField(tmeta, key);
  }
  QuantitiesAsText(pod["spec"]);
  std::shared_ptr<const PodInfo> info = DecodePod(pod);
  if (!info->input_error.empty()) {
    return absl::InvalidArgumentError(StrCat(where, ": ", info->input_error));
  }
  ManifestWorkload w;
  w.source = c.source;
  w.kind = kind;
  w.ns = ns;
  w.name = name;
  w.line = line;
  w.count = static_cast<int32_t>(std::min<int64_t>(made.count, 1'000'000));
  w.not_simulated = NotSimulated(*info, pod["spec"]);
  w.pod = std::move(info);
  c.out->workloads.push_back(std::move(w));
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> ManifestKinds() {
  std::vector<std::string> out;
  for (const auto& [kind, reader] : Table()) out.push_back(kind);
  out.push_back("List");
  out.push_back(StrCat("PodGroup (", kPodGroupApiGroup, "*)"));
  return out;
}

absl::StatusOr<Manifests> ParseManifests(std::string_view text, std::string_view source,
                                         const std::string& default_namespace) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  Manifests out;
  Context c{std::string(source), default_namespace, &out};
  for (const YAML::Node& doc : docs) {
    if (!doc || doc.IsNull()) continue;  // "---" with nothing after it
    const int line = doc.Mark().line + 1;
    TESSERA_RETURN_IF_ERROR(ReadObject(YamlToJson(doc), line, c));
  }
  if (out.workloads.empty() && out.skipped.empty() && out.pod_groups.empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": no Kubernetes objects in it"));
  }
  return out;
}

absl::Status ResolvePodGroups(const std::vector<core::TopologyLevel>& levels,
                              Manifests* manifests) {
  PodGroups groups(levels);
  std::map<std::string, const ManifestPodGroup*> given;  // group key -> where
  for (const ManifestPodGroup& g : manifests->pod_groups) {
    if (auto [it, added] = given.emplace(g.group->key, &g); !added) {
      return absl::InvalidArgumentError(
          StrCat(g.source, ":", g.line, " (PodGroup ", g.group->name, "): PodGroup ", g.group->key,
                 " is given twice (first at ", it->second->source, ":", it->second->line, ")"));
    }
    groups.OnGroup(Change::kAdded, g.group);
  }
  for (ManifestWorkload& w : manifests->workloads) {
    if (w.pod->pod_group.empty()) continue;
    const std::string where = StrCat(w.source, ":", w.line, " (", w.kind, " ", w.name, ")");
    PodGroups::Resolved r = groups.Resolve(w.pod);
    groups.Forget(w.pod->key);  // each object is told on its own, whatever its name
    if (r.pod->pod_group_missing) {
      return absl::InvalidArgumentError(StrCat(
          where, ": spec.schedulingGroup.podGroupName names PodGroup ", w.ns, "/", w.pod->pod_group,
          ", which none of the manifests gives (add it, e.g. from `kubectl get podgroup -n ", w.ns,
          " ", w.pod->pod_group, " -o yaml`)"));
    }
    if (!r.pod->input_error.empty()) {
      return absl::InvalidArgumentError(StrCat(where, ": ", r.pod->input_error));
    }
    if (!r.ignored.empty()) w.not_simulated.push_back(r.ignored);
    w.pod = std::move(r.pod);
  }
  manifests->pod_groups_resolved = true;
  return absl::OkStatus();
}

}  // namespace tessera::k8s
