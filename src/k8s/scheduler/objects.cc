#include "k8s/scheduler/objects.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/duration.h"
#include "common/json_fields.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/cluster.h"
#include "core/model/quantity.h"
#include "k8s/client/protobuf_value.h"
#include "records/inventory.h"
#include "records/move.h"
#include "records/names.h"
#include "records/reservation.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

// A string or integer value of either reading of an object (nlohmann's JSON, or protobuf read in
// place): the decoders below are templates on it, so both wires have one decoder.
std::string Str(const json& v) { return v.get<std::string>(); }
std::string Str(const ProtobufValue& v) { return v.String(); }
int64_t I64(const json& v) { return v.get<int64_t>(); }
int64_t I64(const ProtobufValue& v) { return v.Int(); }

// A quantity field as text ("4Gi"); numbers are accepted as JSON sometimes sends them.
template <typename J>
std::optional<std::string> QuantityText(const J& v) {
  if (v.is_string()) return Str(v);
  if (v.is_number_integer()) return std::to_string(I64(v));
  return std::nullopt;
}

// What one container (or the pod's overhead) asks, in tessera units.
struct Demand {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t gpus = 0;
  int64_t gpu_memory_mib = 0;
  int64_t gpu_compute_pct = 0;

  void Add(const Demand& o) {
    cpu_milli += o.cpu_milli;
    memory_mib += o.memory_mib;
    gpus += o.gpus;
    gpu_memory_mib += o.gpu_memory_mib;
    gpu_compute_pct += o.gpu_compute_pct;
  }
  void Max(const Demand& o) {
    cpu_milli = std::max(cpu_milli, o.cpu_milli);
    memory_mib = std::max(memory_mib, o.memory_mib);
    gpus = std::max(gpus, o.gpus);
    gpu_memory_mib = std::max(gpu_memory_mib, o.gpu_memory_mib);
    gpu_compute_pct = std::max(gpu_compute_pct, o.gpu_compute_pct);
  }
};

// Reads cpu/memory from `requests` and the tessera resources from `limits` (else `requests`).
template <typename J>
absl::StatusOr<Demand> ReadResources(const J& requests, const J& limits, const std::string& path) {
  Demand d;
  auto read = [&](const J& list, std::string_view name) -> std::optional<std::string> {
    const auto& v = JsonField(list, name);
    if (v.is_null()) return std::nullopt;
    return QuantityText(v).value_or("<not a quantity>");
  };
  auto bad = [&](std::string_view list, std::string_view name, const std::string& text,
                 const absl::Status& why) {
    return absl::InvalidArgumentError(StrCat(path, ".resources.", list, "[", name, "]: \"", text,
                                             "\" ", FromAbsl(why.message())));
  };
  if (auto cpu = read(requests, "cpu")) {
    absl::StatusOr<int64_t> v = core::ParseCpuMilli(*cpu, core::Rounding::kUp);
    if (!v.ok()) return bad("requests", "cpu", *cpu, v.status());
    d.cpu_milli = *v;
  }
  if (auto mem = read(requests, "memory")) {
    absl::StatusOr<int64_t> v = core::ParseMemoryMiB(*mem, core::Rounding::kUp);
    if (!v.ok()) return bad("requests", "memory", *mem, v.status());
    d.memory_mib = *v;
  }
  auto tessera = [&](std::string_view name) -> std::pair<std::optional<std::string>, std::string> {
    if (auto v = read(limits, name)) return {v, "limits"};
    if (auto v = read(requests, name)) return {v, "requests"};
    return {std::nullopt, ""};
  };
  if (auto [text, list] = tessera(records::kGpuResource); text) {
    absl::StatusOr<int64_t> v = core::ParseCount(*text);
    if (!v.ok()) return bad(list, records::kGpuResource, *text, v.status());
    if (*v > core::kMaxGpusPerNode) {
      return bad(list, records::kGpuResource, *text,
                 absl::InvalidArgumentError(
                     StrCat("is more GPUs than a node can have (", core::kMaxGpusPerNode, ")")));
    }
    d.gpus = *v;
  }
  if (auto [text, list] = tessera(records::kGpuMemoryResource); text) {
    absl::StatusOr<int64_t> v = core::ParseMemoryMiB(*text, core::Rounding::kUp);
    if (!v.ok()) return bad(list, records::kGpuMemoryResource, *text, v.status());
    if (*v <= 0) {
      return bad(list, records::kGpuMemoryResource, *text,
                 absl::InvalidArgumentError("must be positive"));
    }
    d.gpu_memory_mib = *v;
  }
  if (auto [text, list] = tessera(records::kGpuComputeResource); text) {
    absl::StatusOr<int64_t> v = core::ParseCount(*text);
    if (!v.ok()) return bad(list, records::kGpuComputeResource, *text, v.status());
    if (*v < 1 || *v > 100) {
      return bad(list, records::kGpuComputeResource, *text,
                 absl::InvalidArgumentError("must be a percentage of one GPU, 1..100"));
    }
    d.gpu_compute_pct = *v;
  }
  return d;
}

// component-helpers' PodRequests: containers add up, init containers run one at a time
// (alongside the restartable ones started before them), overhead on top.
// ReadResources of a resources object ({requests, limits}).
template <typename J>
absl::StatusOr<Demand> ReadResourcesOf(const J& resources, const std::string& path) {
  return ReadResources<J>(JsonField(resources, "requests"), JsonField(resources, "limits"), path);
}

template <typename J>
absl::StatusOr<Demand> PodDemand(const J& spec) {
  Demand total;
  const auto& containers = JsonField(spec, "containers");
  if (containers.is_array()) {
    for (size_t i = 0; i < containers.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(Demand d, ReadResourcesOf(JsonField(containers[i], "resources"),
                                                         StrCat("spec.containers[", i, "]")));
      total.Add(d);
    }
  }
  Demand restartable;
  Demand init_max;
  const auto& inits = JsonField(spec, "initContainers");
  if (inits.is_array()) {
    for (size_t i = 0; i < inits.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(Demand d, ReadResourcesOf(JsonField(inits[i], "resources"),
                                                         StrCat("spec.initContainers[", i, "]")));
      if (JsonStringField(inits[i], "restartPolicy") == "Always") {
        total.Add(d);
        restartable.Add(d);
        init_max.Max(restartable);
      } else {
        d.Add(restartable);
        init_max.Max(d);
      }
    }
  }
  total.Max(init_max);
  // Pod-level resources (spec.resources) replace the aggregate for CPU and memory when set.
  const auto& pod_level = JsonField(spec, "resources");
  if (!pod_level.is_null()) {
    TESSERA_ASSIGN_OR_RETURN(Demand d, ReadResourcesOf(pod_level, "spec"));
    if (!JsonField(JsonField(pod_level, "requests"), "cpu").is_null())
      total.cpu_milli = d.cpu_milli;
    if (!JsonField(JsonField(pod_level, "requests"), "memory").is_null())
      total.memory_mib = d.memory_mib;
  }
  const auto& overhead = JsonField(spec, "overhead");
  if (overhead.is_object()) {
    TESSERA_ASSIGN_OR_RETURN(Demand d, ReadResources<J>(overhead, J(), "spec.overhead"));
    d.gpus = d.gpu_memory_mib = d.gpu_compute_pct = 0;
    total.Add(d);
  }
  return total;
}

absl::Status AnnotationError(std::string_view key, std::string_view value, std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("metadata.annotations[", key, "]: \"", value, "\" ", what));
}

// tessera.dev/gang-topology (+ -mode, default required): a gang with only its level and mode
// set; nullopt without the annotation.
absl::StatusOr<std::optional<core::GangAsk>> GangTopology(
    const std::optional<std::string>& topology, const std::optional<std::string>& mode) {
  if (mode && !topology) {
    return AnnotationError(records::kGangTopologyModeAnnotation, *mode,
                           StrCat("needs ", records::kGangTopologyAnnotation));
  }
  if (!topology) return std::nullopt;
  if (topology->empty()) {
    return AnnotationError(records::kGangTopologyAnnotation, *topology, "must name a level");
  }
  core::GangAsk g;
  g.level = *topology;
  g.required = true;
  if (mode) {
    if (*mode != "required" && *mode != "preferred") {
      return AnnotationError(records::kGangTopologyModeAnnotation, *mode,
                             "is not required or preferred");
    }
    g.required = *mode == "required";
  }
  return g;
}

template <typename J>
absl::StatusOr<core::PodRequest> BuildRequest(const J& pod, const std::string& key) {
  const auto& spec = JsonField(pod, "spec");
  const auto& annotations = JsonField(JsonField(pod, "metadata"), "annotations");
  auto annotation = [&](std::string_view k) -> std::optional<std::string> {
    const auto& v = JsonField(annotations, k);
    if (v.is_string()) return Str(v);
    return std::nullopt;
  };
  TESSERA_ASSIGN_OR_RETURN(Demand d, PodDemand(spec));
  core::PodRequest r;
  r.name = key;
  r.cpu_milli = d.cpu_milli;
  r.memory_mib = d.memory_mib;
  const bool share = d.gpu_memory_mib > 0 || d.gpu_compute_pct > 0;
  if (d.gpus > 0 && share) {
    return absl::InvalidArgumentError(
        StrCat("resources: ", records::kGpuResource, " (whole GPUs) cannot be combined with ",
               records::kGpuMemoryResource, " or ", records::kGpuComputeResource,
               " (a share of one GPU) in one pod"));
  }
  if (d.gpu_compute_pct > 100) {
    return absl::InvalidArgumentError(StrCat("resources: ", records::kGpuComputeResource,
                                             " adds up to ", d.gpu_compute_pct,
                                             "% over the pod's containers; a share is at most "
                                             "100% of one GPU"));
  }
  if (d.gpus > core::kMaxGpusPerNode) {
    return absl::InvalidArgumentError(StrCat("resources: ", records::kGpuResource, " adds up to ",
                                             d.gpus, ", more than a node can have"));
  }
  if (d.gpus > 0) {
    r.gpu = core::GpuAsk::Whole(static_cast<int32_t>(d.gpus));
  } else if (share && d.gpu_memory_mib == 0) {
    // A compute-only share: no share runs without a memory cap, so it is reserved (and capped on
    // the node) the same fraction of the GPU's memory as of its compute, on whichever GPU it
    // lands (30% of an 80 GiB GPU: 24 GiB). 100% of the compute is the whole GPU.
    r.gpu = d.gpu_compute_pct >= 100
                ? core::GpuAsk::Whole(1)
                : core::GpuAsk::Fraction(static_cast<int32_t>(d.gpu_compute_pct * 10));
  } else if (share) {
    r.gpu = core::GpuAsk::Share(d.gpu_memory_mib, static_cast<int32_t>(d.gpu_compute_pct * 10));
  }
  // How the share is enforced on the node (the agent reads the same annotation): a scheduling
  // input, since a GPU's shares all use one mode.
  if (std::optional<std::string> sharing = annotation(records::kGpuSharingAnnotation)) {
    if (*sharing != "shim" && *sharing != "mps") {
      return AnnotationError(records::kGpuSharingAnnotation, *sharing, "must be shim or mps");
    }
    if (*sharing == "mps" &&
        (r.gpu.kind == core::GpuAsk::Kind::kShare || r.gpu.kind == core::GpuAsk::Kind::kFraction)) {
      r.gpu.mode = core::ShareMode::kMps;
    }
  }
  if (std::optional<std::string> mig = annotation(records::kMigAnnotation)) {
    if (!core::IsKnownMigProfile(*mig)) {
      std::vector<std::string> known;
      for (const std::string& model : core::MigModelNames()) {
        StrAppend(&known.emplace_back(), model, ": ",
                  StrJoin(core::FindMigModel(model)->ProfileNames(), " "));
      }
      return AnnotationError(
          records::kMigAnnotation, *mig,
          StrCat("is not a MIG profile tessera knows (", StrJoin(known, "; "), ")"));
    }
    if (share || d.gpus > 1) {
      return AnnotationError(
          records::kMigAnnotation, *mig,
          StrCat("asks for one MIG instance; it cannot be combined with ",
                 share ? StrCat(records::kGpuMemoryResource, " or ", records::kGpuComputeResource)
                       : StrCat(records::kGpuResource, ": ", d.gpus)));
    }
    r.gpu = core::GpuAsk::Mig(*mig);  // with or without tessera.dev/gpu: 1
  }
  if (std::optional<std::string> models = annotation(records::kGpuModelAnnotation)) {
    if (r.gpu.kind == core::GpuAsk::Kind::kNone) {
      return AnnotationError(records::kGpuModelAnnotation, *models,
                             StrCat("is only for pods asking GPUs (", records::kGpuResource, ", ",
                                    records::kGpuMemoryResource, ", ", records::kGpuComputeResource,
                                    " or ", records::kMigAnnotation, ")"));
    }
    for (absl::string_view part : absl::StrSplit(*models, ',')) {
      std::string_view name = FromAbsl(absl::StripAsciiWhitespace(part));
      if (name.empty()) {
        return AnnotationError(records::kGpuModelAnnotation, *models,
                               "must list GPU models separated by commas (A100-80GB,H100-80GB)");
      }
      r.gpu_models.emplace_back(name);
    }
  }

  std::optional<std::string> topology = annotation(records::kTopologyAnnotation);
  std::optional<std::string> mode = annotation(records::kTopologyModeAnnotation);
  if (topology) {
    if (r.gpu.kind != core::GpuAsk::Kind::kWhole) {
      return AnnotationError(
          records::kTopologyAnnotation, *topology,
          StrCat("is only for pods asking whole GPUs (", records::kGpuResource, ")"));
    }
    if (*topology == "nvlink") {
      r.gpu.topology = core::GpuTopology::kNvLink;
    } else if (*topology == "pcie-switch") {
      r.gpu.topology = core::GpuTopology::kPcieSwitch;
    } else if (*topology == "numa") {
      r.gpu.topology = core::GpuTopology::kNuma;
    } else if (*topology == "node") {
      r.gpu.topology = core::GpuTopology::kAny;
    } else {
      return AnnotationError(records::kTopologyAnnotation, *topology,
                             "is not one of: nvlink, pcie-switch, numa, node");
    }
  }
  if (mode) {
    if (!topology) {
      return AnnotationError(records::kTopologyModeAnnotation, *mode,
                             StrCat("needs ", records::kTopologyAnnotation));
    }
    if (*mode != "required" && *mode != "preferred") {
      return AnnotationError(records::kTopologyModeAnnotation, *mode,
                             "is not required or preferred");
    }
    r.gpu.topology_required = *mode == "required";
  }

  // The gang: tessera's annotations, else Kueue's pod group (its label and total count: Kueue
  // admits the group's pods together, and they start together). A pod in an upstream PodGroup
  // (spec.schedulingGroup) may give tessera.dev/gang-topology alone: the PodGroup's gang takes it
  // (pod_groups.h, which also says which way of asking wins when a pod has several).
  const auto& labels = JsonField(JsonField(pod, "metadata"), "labels");
  const bool in_pod_group =
      !JsonStringField(JsonField(spec, "schedulingGroup"), "podGroupName").empty();
  std::optional<std::string> gang = annotation(records::kGangAnnotation);
  std::optional<std::string> gang_size = annotation(records::kGangSizeAnnotation);
  std::string gang_field = StrCat("metadata.annotations[", records::kGangAnnotation, "]");
  std::string_view size_key = records::kGangSizeAnnotation;
  // Kueue's label without its count in a PodGroup's pod: the PodGroup says the gang, the label
  // adds nothing to it (pod_groups.h); with the count it is a gang the PodGroup may overrule.
  std::optional<std::string> kueue_count = annotation(records::kKueueGroupTotalCountAnnotation);
  if (const auto& kueue = JsonField(labels, records::kKueueGroupNameLabel);
      !gang && kueue.is_string() && (kueue_count || !in_pod_group)) {
    gang = Str(kueue);
    gang_size = kueue_count;
    gang_field = StrCat("metadata.labels[", records::kKueueGroupNameLabel, "]");
    size_key = records::kKueueGroupTotalCountAnnotation;
  }
  const std::string size_field = StrCat("metadata.annotations[", size_key, "]");
  std::optional<std::string> gang_topology = annotation(records::kGangTopologyAnnotation);
  std::optional<std::string> gang_mode = annotation(records::kGangTopologyModeAnnotation);
  std::optional<std::string> gang_min = annotation(records::kGangMinAnnotation);
  auto field_error = [](std::string_view field, std::string_view value, std::string_view what) {
    return absl::InvalidArgumentError(StrCat(field, ": \"", value, "\" ", what));
  };
  if (gang) {
    if (gang->empty()) return field_error(gang_field, *gang, "must name the gang");
    if (!gang_size) {
      return absl::InvalidArgumentError(StrCat(size_field, ": missing; a gang needs its size"));
    }
    absl::StatusOr<int64_t> size = core::ParseCount(*gang_size);
    if (!size.ok() || *size < 1 || *size > records::kMaxGangSize) {
      return field_error(size_field, *gang_size,
                         StrCat("is not a whole number 1..", records::kMaxGangSize));
    }
    core::GangAsk g;
    g.name = *gang;
    g.size = static_cast<int32_t>(*size);
    TESSERA_ASSIGN_OR_RETURN(std::optional<core::GangAsk> where,
                             GangTopology(gang_topology, gang_mode));
    if (where) {
      g.level = where->level;
      g.required = where->required;
    }
    if (gang_min) {
      absl::StatusOr<int64_t> min = core::ParseCount(*gang_min);
      if (!min.ok() || *min < 1) {
        return AnnotationError(records::kGangMinAnnotation, *gang_min,
                               StrCat("is not a whole number 1..", g.size, " (", size_key, ")"));
      }
      if (*min > g.size) {
        return AnnotationError(records::kGangMinAnnotation, *gang_min,
                               StrCat("is more than ", size_key, " ", g.size,
                                      "; a gang starts with at most all its members"));
      }
      g.min = *min < g.size ? static_cast<int32_t>(*min) : 0;  // min = size: all or nothing
    }
    r.gang = g;
  } else {
    for (auto [k, v] : {std::pair{records::kGangSizeAnnotation, gang_size},
                        std::pair{records::kGangMinAnnotation, gang_min}}) {
      if (v) return AnnotationError(k, *v, StrCat("needs ", records::kGangAnnotation));
    }
    if (in_pod_group) {
      TESSERA_ASSIGN_OR_RETURN(std::optional<core::GangAsk> where,
                               GangTopology(gang_topology, gang_mode));
      r.gang = where;  // nameless: only where the PodGroup's gang goes
    } else {
      for (auto [k, v] : {std::pair{records::kGangTopologyAnnotation, gang_topology},
                          std::pair{records::kGangTopologyModeAnnotation, gang_mode}}) {
        if (v) {
          return AnnotationError(
              k, *v,
              StrCat("needs ", records::kGangAnnotation, " or spec.schedulingGroup.podGroupName"));
        }
      }
    }
  }
  return r;
}

template <typename J>
absl::Status DecodeConstraints(const J& spec, NodeConstraints* p) {
  const auto& selector = JsonField(spec, "nodeSelector");
  if (selector.is_object()) {
    for (const auto& [k, v] : selector.items()) {
      if (v.is_string()) p->node_selector[k] = Str(v);
    }
  }
  const auto& tolerations = JsonField(spec, "tolerations");
  if (tolerations.is_array()) {
    for (const auto& t : tolerations) p->tolerations.push_back(DecodeToleration(t));
  }
  const auto& required = JsonField(JsonField(JsonField(JsonField(spec, "affinity"), "nodeAffinity"),
                                             "requiredDuringSchedulingIgnoredDuringExecution"),
                                   "nodeSelectorTerms");
  if (!required.is_array()) return absl::OkStatus();
  p->has_affinity = true;
  for (size_t i = 0; i < required.size(); ++i) {
    NodeSelectorTerm term;
    for (const char* kind : {"matchExpressions", "matchFields"}) {
      const auto& list = JsonField(required[i], kind);
      if (!list.is_array()) continue;
      for (size_t j = 0; j < list.size(); ++j) {
        NodeSelectorRequirement r;
        r.field = std::string_view(kind) == "matchFields";
        r.key = JsonStringField(list[j], "key");
        r.op = JsonStringField(list[j], "operator");
        const auto& values = JsonField(list[j], "values");
        if (values.is_array()) {
          for (const auto& v : values) {
            if (v.is_string()) r.values.push_back(Str(v));
          }
        }
        static const std::set<std::string> kOps = {"In",           "NotIn", "Exists",
                                                   "DoesNotExist", "Gt",    "Lt"};
        if (!kOps.contains(r.op) || (r.field && r.key != "metadata.name")) {
          return absl::InvalidArgumentError(
              StrCat("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                     "nodeSelectorTerms[",
                     i, "].", kind, "[", j, "]: operator \"", r.op, "\" on \"", r.key,
                     "\" is not supported"));
        }
        term.push_back(std::move(r));
      }
    }
    p->affinity_terms.push_back(std::move(term));
  }
  return absl::OkStatus();
}

// RFC 3339 (as the API server writes times) in Unix seconds; -1 when empty or unreadable.
int64_t UnixSeconds(const std::string& rfc3339) {
  if (rfc3339.empty()) return -1;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &err)) return -1;
  return absl::ToUnixSeconds(t);
}

// The declared maximum run time (PodInfo::max_runtime_s): the annotation, a duration of at least
// 1s, and spec.activeDeadlineSeconds, whichever is smaller.
template <typename J>
void DecodeMaxRuntime(const J& spec, const J& annotations, PodInfo* p) {
  std::optional<int64_t> declared;
  if (const auto& d = JsonField(spec, "activeDeadlineSeconds"); d.is_number_integer()) {
    if (I64(d) > 0) declared = I64(d);
  }
  if (const auto& a = JsonField(annotations, kMaxRuntimeAnnotation); !a.is_null()) {
    const std::string field = StrCat("metadata.annotations[", kMaxRuntimeAnnotation, "]");
    absl::StatusOr<std::chrono::milliseconds> d =
        a.is_string() ? ParseDuration(Str(a)) : absl::InvalidArgumentError("not a string");
    if (!d.ok()) {
      p->max_runtime_error =
          StrCat(field, ": ", FromAbsl(d.status().message()),
                 " (a duration such as 30m or 2h); the pod is taken as declaring no run time");
    } else if (d->count() <= 0) {
      p->max_runtime_error = StrCat(field, ": \"", Str(a),
                                    "\" is not a run time (at least 1s); the pod is taken as "
                                    "declaring no run time");
    } else {
      const int64_t s = (d->count() + 999) / 1000;
      declared = declared ? std::min(*declared, s) : s;
    }
  }
  p->max_runtime_s = declared;
}

template <typename J>
void DecodePodInto(const J& pod, PodInfo* p) {
  const auto& meta = JsonField(pod, "metadata");
  const auto& spec = JsonField(pod, "spec");
  const auto& status = JsonField(pod, "status");
  p->ns = JsonStringField(meta, "namespace");
  p->name = JsonStringField(meta, "name");
  p->uid = JsonStringField(meta, "uid");
  p->key = StrCat(p->ns, "/", p->name);
  p->resource_version = JsonStringField(meta, "resourceVersion");
  p->created = JsonStringField(meta, "creationTimestamp");
  p->created_unix = UnixSeconds(p->created);
  p->started_unix = UnixSeconds(JsonStringField(status, "startTime"));
  p->deleting = !JsonField(meta, "deletionTimestamp").is_null();
  p->nominated_node = JsonStringField(status, "nominatedNodeName");
  if (const auto& owners = JsonField(meta, "ownerReferences"); owners.is_array()) {
    for (const auto& o : owners) {
      if (JsonField(o, "controller") == true) {
        p->controller = StrCat(JsonStringField(o, "kind"), "/", JsonStringField(o, "name"));
        break;
      }
    }
  }
  if (const auto& labels = JsonField(meta, "labels"); labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) p->labels.emplace(k, Str(v));
    }
  }
  p->scheduler_name = JsonStringField(spec, "schedulerName");
  p->pod_group = JsonStringField(JsonField(spec, "schedulingGroup"), "podGroupName");
  p->node_name = JsonStringField(spec, "nodeName");
  p->phase = JsonStringField(status, "phase");
  const auto& gates = JsonField(spec, "schedulingGates");
  p->gated = gates.is_array() && !gates.empty();
  if (const auto& prio = JsonField(spec, "priority"); prio.is_number_integer()) {
    p->priority = static_cast<int32_t>(I64(prio));
  }
  p->may_preempt = JsonStringField(spec, "preemptionPolicy") != "Never";
  const auto& annotations = JsonField(meta, "annotations");
  if (const auto& q = JsonField(annotations, records::kQueueAnnotation);
      q.is_string() && !Str(q).empty()) {
    p->queue = Str(q);
  }
  if (const auto& a = JsonField(annotations, records::kAssignmentAnnotation); a.is_string()) {
    absl::StatusOr<records::Assignment> assignment = records::AssignmentFromJson(Str(a));
    if (assignment.ok()) {
      p->assignment = std::move(*assignment);
    } else {
      p->assignment_error = std::string(FromAbsl(assignment.status().message()));
    }
  }
  DecodeMaxRuntime(spec, annotations, p);
  const auto& conditions = JsonField(status, "conditions");
  if (conditions.is_array()) {
    for (const auto& c : conditions) {
      if (JsonStringField(c, "type") == "PodScheduled" && JsonStringField(c, "status") == "False") {
        p->unschedulable_message = JsonStringField(c, "message");
      } else if (JsonStringField(c, "type") == "Ready") {
        p->ready = JsonStringField(c, "status") == "True";
      } else if (JsonStringField(c, "type") == kScaleUpCondition) {
        p->scale_up_message = JsonStringField(c, "message");
      } else if (JsonStringField(c, "type") == records::kMovingCondition &&
                 JsonStringField(c, "status") == "True") {
        p->moving_message = JsonStringField(c, "message");
      } else if (JsonStringField(c, "type") == kGangRestartCondition &&
                 JsonStringField(c, "status") == "True") {
        p->gang_restart_message = JsonStringField(c, "message");
      } else if (JsonStringField(c, "type") == records::kReservedCondition &&
                 JsonStringField(c, "status") == "True") {
        p->reservation_message = JsonStringField(c, "message");
        p->reservation_since = JsonStringField(c, "lastTransitionTime");
      }
    }
  }
  absl::Status constraints = DecodeConstraints(spec, &p->constraints);
  absl::StatusOr<core::PodRequest> request = BuildRequest(pod, p->key);
  if (!constraints.ok()) request = constraints;
  if (request.ok()) {
    p->request = std::move(*request);
    p->request.priority = p->priority;
    if (p->request.gang && p->request.gang->name.empty()) {  // only where a PodGroup's gang goes
      p->pod_group_topology = p->request.gang;
      p->request.gang.reset();
    }
  } else {
    p->input_error = std::string(FromAbsl(request.status().message()));
  }
  if (const auto& restart = JsonField(annotations, kGangRestartAnnotation);
      !restart.is_null() && p->input_error.empty()) {
    const std::string value = restart.is_string() ? Str(restart) : std::string("(not a string)");
    const std::string field =
        StrCat("metadata.annotations[", kGangRestartAnnotation, "]: \"", value, "\" ");
    if (value != "all" && value != "member") {
      p->input_error = StrCat(field, "must be all or member");
    } else if (!p->request.gang && p->pod_group.empty()) {
      p->input_error = StrCat(field, "needs ", records::kGangAnnotation,
                              " or spec.schedulingGroup.podGroupName");
    } else {
      p->gang_restart_all = value == "all";
    }
  }
}

template <typename J>
std::shared_ptr<const PodInfo> DecodePodOf(const J& pod) {
  auto p = std::make_shared<PodInfo>();
  try {
    DecodePodInto(pod, p.get());
    p->claims = dra::DecodePodClaims(pod);
    p->extended = dra::DecodePodExtended(pod);
  } catch (const std::exception& e) {
    // Only a pod object the API server would never send gets here; keep it harmless.
    p->input_error = StrCat("pod object: ", e.what());
  }
  return p;
}

}  // namespace

std::shared_ptr<const PodInfo> DecodePod(const json& pod) { return DecodePodOf(pod); }
std::shared_ptr<const PodInfo> DecodePod(const ProtobufValue& pod) { return DecodePodOf(pod); }

std::string PodGroupInfo::InitiallyScheduled() const {
  for (const json& c : conditions) {
    if (JsonStringField(c, "type") == kPodGroupScheduledCondition) {
      return JsonStringField(c, "status");
    }
  }
  return "";
}

std::shared_ptr<const PodGroupInfo> DecodePodGroup(const json& group) {
  auto g = std::make_shared<PodGroupInfo>();
  const json& meta = JsonField(group, "metadata");
  const json& spec = JsonField(group, "spec");
  g->ns = JsonStringField(meta, "namespace");
  g->name = JsonStringField(meta, "name");
  g->key = StrCat(g->ns, "/", g->name);
  g->uid = JsonStringField(meta, "uid");
  g->resource_version = JsonStringField(meta, "resourceVersion");
  if (const json& gen = JsonField(meta, "generation"); gen.is_number_integer()) {
    g->generation = gen.get<int64_t>();
  }
  if (const json& c = JsonField(JsonField(group, "status"), "conditions"); c.is_array()) {
    for (const json& x : c) {
      if (x.is_object()) g->conditions.push_back(x);
    }
  }
  const json& policy = JsonField(spec, "schedulingPolicy");
  const json& gang = JsonField(policy, "gang");
  if (gang.is_object()) {
    g->gang = true;
    const json& min = JsonField(gang, "minCount");
    if (min.is_number_integer() && min.get<int64_t>() >= 1 &&
        min.get<int64_t>() <= records::kMaxGangSize) {
      g->min_count = static_cast<int32_t>(min.get<int64_t>());
    } else {
      g->error = StrCat("spec.schedulingPolicy.gang.minCount: ", min.dump(),
                        " is not a whole number 1..", records::kMaxGangSize);
    }
  } else if (!JsonField(policy, "basic").is_object()) {
    g->error = "spec.schedulingPolicy: neither gang nor basic";
  }
  const json& disruption = JsonField(spec, "disruptionMode");
  g->disrupt_all = JsonField(disruption, "all").is_object();
  if (g->disrupt_all && JsonField(disruption, "single").is_object()) {
    g->error = "spec.disruptionMode: both single and all (the API server allows one)";
  }
  if (const json& prio = JsonField(spec, "priority"); prio.is_number_integer()) {
    g->priority = prio.get<int32_t>();
  }
  g->preempt_never = JsonStringField(spec, "preemptionPolicy") == "Never";
  const json& topology = JsonField(JsonField(spec, "schedulingConstraints"), "topology");
  if (topology.is_array()) {
    for (const json& t : topology) {
      std::string key = JsonStringField(t, "key");
      if (!key.empty()) g->topology_keys.push_back(std::move(key));
    }
  }
  return g;
}

namespace {

template <typename J>
void DecodeNodeInto(const J& node, NodeInfo* n) {
  const auto& meta = JsonField(node, "metadata");
  const auto& status = JsonField(node, "status");
  n->name = JsonStringField(meta, "name");
  n->spec.name = n->name;
  n->unschedulable = JsonField(JsonField(node, "spec"), "unschedulable") == true;
  const auto& taints = JsonField(JsonField(node, "spec"), "taints");
  if (taints.is_array()) {
    for (const auto& t : taints) {
      Taint taint{JsonStringField(t, "key"), JsonStringField(t, "value"),
                  JsonStringField(t, "effect")};
      if (taint.effect == "NoSchedule" || taint.effect == "NoExecute") {
        n->taints.push_back(std::move(taint));
      }
    }
  }
  const auto& labels = JsonField(meta, "labels");
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) n->spec.labels[k] = Str(v);
    }
  }
  const auto& allocatable = JsonField(status, "allocatable").is_null()
                                ? JsonField(status, "capacity")
                                : JsonField(status, "allocatable");
  std::vector<std::string> errors;
  if (auto cpu = QuantityText(JsonField(allocatable, "cpu"))) {
    absl::StatusOr<int64_t> v = core::ParseCpuMilli(*cpu, core::Rounding::kDown);
    if (v.ok()) {
      n->spec.cpu_milli = *v;
    } else {
      errors.push_back(
          StrCat("status.allocatable.cpu: \"", *cpu, "\" ", FromAbsl(v.status().message())));
    }
  }
  if (auto mem = QuantityText(JsonField(allocatable, "memory"))) {
    absl::StatusOr<int64_t> v = core::ParseMemoryMiB(*mem, core::Rounding::kDown);
    if (v.ok()) {
      n->spec.memory_mib = *v;
    } else {
      errors.push_back(
          StrCat("status.allocatable.memory: \"", *mem, "\" ", FromAbsl(v.status().message())));
    }
  }
  n->capacity_error = StrJoin(errors, "; ");
  const auto& inventory = JsonField(JsonField(meta, "annotations"), records::kInventoryAnnotation);
  std::string inventory_text;
  if (!inventory.is_null()) {
    n->has_inventory = true;
    if (!inventory.is_string()) {
      n->inventory_error = "annotation is not a string";
    } else {
      inventory_text = Str(inventory);
      absl::StatusOr<records::Inventory> inv = records::InventoryFromJson(inventory_text);
      if (!inv.ok()) {
        n->inventory_error = std::string(FromAbsl(inv.status().message()));
      } else {
        core::NodeSpec probe;
        probe.name = n->name.empty() ? "node" : n->name;
        probe.gpus = inv->gpus;
        probe.links = inv->links;
        probe.nics = inv->nics;
        // The cluster's own validation, on this node alone, so that one bad node can never make
        // the whole cluster invalid.
        absl::StatusOr<core::Cluster> check = core::Cluster::Create({probe});
        if (!check.ok()) {
          n->inventory_error = std::string(FromAbsl(check.status().message()));
        } else {
          for (const core::GpuSpec& g : inv->gpus) {
            if (!inv->healthy(g.index)) n->unhealthy_gpus.push_back(g.index);
          }
          n->spec.gpus = std::move(inv->gpus);
          n->spec.links = std::move(inv->links);
          n->spec.nics = std::move(inv->nics);
        }
      }
    }
  }
  const auto& spares = JsonField(JsonField(meta, "annotations"), records::kSpareGpusAnnotation);
  if (spares.is_string()) n->spare_gpus = Str(spares);
  std::string labels_text;
  for (const auto& [k, v] : n->spec.labels) StrAppend(&labels_text, k, "=", v, ";");
  std::string taints_text;
  for (const Taint& t : n->taints) StrAppend(&taints_text, t.key, "=", t.value, ":", t.effect, ";");
  n->fingerprint =
      StrCat(n->spec.cpu_milli, "|", n->spec.memory_mib, "|", n->unschedulable, "|", taints_text,
             "|", labels_text, "|", n->inventory_error.empty(), "|", inventory_text);
}

template <typename J>
std::shared_ptr<const NodeInfo> DecodeNodeOf(const J& node) {
  auto n = std::make_shared<NodeInfo>();
  try {
    DecodeNodeInto(node, n.get());
  } catch (const std::exception& e) {
    n->inventory_error = StrCat("node object: ", e.what());
    n->spec.gpus.clear();
    n->spec.links = core::LinkMatrix();
  }
  return n;
}

}  // namespace

std::shared_ptr<const NodeInfo> DecodeNode(const json& node) { return DecodeNodeOf(node); }
std::shared_ptr<const NodeInfo> DecodeNode(const ProtobufValue& node) { return DecodeNodeOf(node); }

namespace {

bool Matches(const NodeSelectorRequirement& r, const NodeInfo& node) {
  std::optional<std::string> value;
  if (r.field) {
    value = node.name;
  } else if (auto it = node.spec.labels.find(r.key); it != node.spec.labels.end()) {
    value = it->second;
  }
  auto in = [&] {
    return value && std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
  };
  if (r.op == "In") return in();
  if (r.op == "NotIn") return !in();
  if (r.op == "Exists") return value.has_value();
  if (r.op == "DoesNotExist") return !value.has_value();
  if ((r.op == "Gt" || r.op == "Lt") && value && r.values.size() == 1) {
    try {
      int64_t have = std::stoll(*value), want = std::stoll(r.values[0]);
      return r.op == "Gt" ? have > want : have < want;
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

}  // namespace

bool NodeAllows(const NodeInfo& node, const NodeConstraints& c, std::string* why) {
  if (!ToleratesAll(c.tolerations, node.taints)) {
    if (why) *why = "taint";
    return false;
  }
  for (const auto& [k, v] : c.node_selector) {
    auto it = node.spec.labels.find(k);
    if (it == node.spec.labels.end() || it->second != v) {
      if (why) *why = "selector";
      return false;
    }
  }
  if (c.has_affinity) {
    bool any = false;
    for (const NodeSelectorTerm& term : c.affinity_terms) {
      if (term.empty()) continue;  // an empty term matches no node
      bool all = true;
      for (const NodeSelectorRequirement& r : term) {
        if (!Matches(r, node)) {
          all = false;
          break;
        }
      }
      if (all) {
        any = true;
        break;
      }
    }
    if (!any) {
      if (why) *why = "selector";
      return false;
    }
  }
  return true;
}

}  // namespace tessera::k8s
