#include "k8s/dra/objects.h"

#include <algorithm>

#include "common/json_fields.h"
#include "common/status.h"
#include "common/strings.h"
#include "records/json_util.h"

namespace tessera::k8s::dra {
namespace {

using nlohmann::json;

using records::StringList;

// A quantity field ("80Gi", or a JSON number) in milli-units; an error names `path`.
absl::StatusOr<int64_t> QuantityField(const json& v, const std::string& path) {
  absl::StatusOr<int64_t> m = records::dra::ParseMilliValue(v);
  if (!m.ok())
    return absl::InvalidArgumentError(StrCat(path, ": ", FromAbsl(m.status().message())));
  return *m;
}

std::pair<std::string, std::string> SplitQualified(const std::string& name,
                                                   const std::string& driver) {
  size_t slash = name.find('/');
  if (slash == std::string::npos) return {driver, name};
  return {name.substr(0, slash), name.substr(slash + 1)};
}

absl::StatusOr<AttributeValue> DecodeAttribute(const json& a, const std::string& path) {
  AttributeValue v;
  if (const json& i = JsonField(a, "int"); i.is_number_integer()) {
    v.kind = AttributeValue::Kind::kInt;
    v.i = i.get<int64_t>();
  } else if (const json& b = JsonField(a, "bool"); b.is_boolean()) {
    v.kind = AttributeValue::Kind::kBool;
    v.b = b.get<bool>();
  } else if (const json& s = JsonField(a, "string"); s.is_string()) {
    v.kind = AttributeValue::Kind::kString;
    v.s = s.get<std::string>();
  } else if (const json& ver = JsonField(a, "version"); ver.is_string()) {
    v.kind = AttributeValue::Kind::kVersion;
    v.s = ver.get<std::string>();
  } else if (JsonField(a, "ints").is_array() || JsonField(a, "bools").is_array() ||
             JsonField(a, "strings").is_array() || JsonField(a, "versions").is_array()) {
    v.kind = AttributeValue::Kind::kList;
  } else {
    return absl::InvalidArgumentError(
        StrCat(path, ": no value (expected one of int, bool, string, version)"));
  }
  return v;
}

absl::StatusOr<RequestPolicy> DecodePolicy(const json& p, const std::string& path) {
  RequestPolicy policy;
  if (const json& d = JsonField(p, "default"); !d.is_null()) {
    TESSERA_ASSIGN_OR_RETURN(policy.default_milli, QuantityField(d, path + ".default"));
  }
  const json& values = JsonField(p, "validValues");
  if (values.is_array()) {
    for (size_t i = 0; i < values.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v,
                               QuantityField(values[i], StrCat(path, ".validValues[", i, "]")));
      policy.valid_values.push_back(v);
    }
    std::sort(policy.valid_values.begin(), policy.valid_values.end());
  }
  const json& range = JsonField(p, "validRange");
  if (range.is_object()) {
    policy.has_range = true;
    for (auto [key, out] : {std::pair{"min", &policy.min}, std::pair{"max", &policy.max},
                            std::pair{"step", &policy.step}}) {
      const json& q = JsonField(range, key);
      if (q.is_null()) continue;
      TESSERA_ASSIGN_OR_RETURN(*out, QuantityField(q, StrCat(path, ".validRange.", key)));
    }
    if (policy.step && *policy.step <= 0) {
      return absl::InvalidArgumentError(StrCat(path, ".validRange.step: must be positive"));
    }
  }
  return policy;
}

absl::StatusOr<Device> DecodeDevice(const json& d, const std::string& path,
                                    const std::string& driver) {
  Device dev;
  dev.name = JsonStringField(d, "name");
  if (dev.name.empty()) return absl::InvalidArgumentError(StrCat(path, ".name: missing"));
  const json& attributes = JsonField(d, "attributes");
  if (attributes.is_object()) {
    for (const auto& [name, a] : attributes.items()) {
      TESSERA_ASSIGN_OR_RETURN(AttributeValue v,
                               DecodeAttribute(a, StrCat(path, ".attributes[", name, "]")));
      auto [domain, id] = SplitQualified(name, driver);
      dev.attributes[domain][id] = std::move(v);
    }
  }
  const json& capacity = JsonField(d, "capacity");
  if (capacity.is_object()) {
    for (const auto& [name, c] : capacity.items()) {
      const std::string cpath = StrCat(path, ".capacity[", name, "]");
      DeviceCapacity cap;
      TESSERA_ASSIGN_OR_RETURN(cap.value, QuantityField(JsonField(c, "value"), cpath + ".value"));
      if (const json& p = JsonField(c, "requestPolicy"); p.is_object()) {
        TESSERA_ASSIGN_OR_RETURN(cap.policy, DecodePolicy(p, cpath + ".requestPolicy"));
      }
      auto [domain, id] = SplitQualified(name, driver);
      dev.capacity[domain][id] = cap;
      dev.capacity_by_name[name] = cap;
    }
  }
  dev.allow_multiple_allocations = JsonField(d, "allowMultipleAllocations") == true;
  const json& counters = JsonField(d, "consumesCounters");
  dev.consumes_counters = counters.is_array() && !counters.empty();
  const json& conditions = JsonField(d, "bindingConditions");
  dev.binding_conditions = conditions.is_array() && !conditions.empty();
  dev.per_device_node = !JsonField(d, "nodeName").is_null() ||
                        !JsonField(d, "nodeSelector").is_null() ||
                        !JsonField(d, "allNodes").is_null();
  const json& taints = JsonField(d, "taints");
  if (taints.is_array()) {
    for (const json& t : taints) {
      dev.taints.push_back(DeviceTaint{JsonStringField(t, "key"), JsonStringField(t, "value"),
                                       JsonStringField(t, "effect")});
    }
  }
  return dev;
}

void DecodeSliceInto(const json& slice, SliceInfo* s) {
  const json& meta = JsonField(slice, "metadata");
  const json& spec = JsonField(slice, "spec");
  s->name = JsonStringField(meta, "name");
  s->resource_version = JsonStringField(meta, "resourceVersion");
  s->driver = JsonStringField(spec, "driver");
  const json& pool = JsonField(spec, "pool");
  s->pool = JsonStringField(pool, "name");
  if (const json& g = JsonField(pool, "generation"); g.is_number_integer()) {
    s->generation = g.get<int64_t>();
  }
  if (const json& c = JsonField(pool, "resourceSliceCount"); c.is_number_integer()) {
    s->slice_count = c.get<int64_t>();
  }
  s->node_name = JsonStringField(spec, "nodeName");
  const json& devices = JsonField(spec, "devices");
  if (!devices.is_array()) return;
  for (size_t i = 0; i < devices.size(); ++i) {
    absl::StatusOr<Device> d = DecodeDevice(devices[i], StrCat("spec.devices[", i, "]"), s->driver);
    if (!d.ok()) {
      s->error = std::string(FromAbsl(d.status().message()));
      s->devices.clear();
      return;
    }
    s->devices.push_back(std::move(*d));
  }
}

absl::StatusOr<std::vector<DeviceToleration>> DecodeTolerations(const json& list) {
  std::vector<DeviceToleration> out;
  if (!list.is_array()) return out;
  for (const json& t : list) out.push_back(DecodeToleration(t));
  return out;
}

absl::StatusOr<ExactRequest> DecodeExact(const json& r, std::string name, const std::string& path) {
  ExactRequest e;
  e.name = std::move(name);
  e.device_class = JsonStringField(r, "deviceClassName");
  if (e.device_class.empty()) {
    return absl::InvalidArgumentError(StrCat(path, ".deviceClassName: missing"));
  }
  const json& selectors = JsonField(r, "selectors");
  if (selectors.is_array()) {
    for (size_t i = 0; i < selectors.size(); ++i) {
      const json& cel = JsonField(selectors[i], "cel");
      const json& expr = JsonField(cel, "expression");
      if (!expr.is_string()) {
        return absl::InvalidArgumentError(
            StrCat(path, ".selectors[", i, "]: no cel.expression (the only selector kind)"));
      }
      e.selectors.push_back(expr.get<std::string>());
    }
  }
  if (const std::string mode = JsonStringField(r, "allocationMode"); !mode.empty()) {
    e.allocation_mode = mode;
  }
  if (const json& c = JsonField(r, "count"); c.is_number_integer()) e.count = c.get<int64_t>();
  e.admin_access = JsonField(r, "adminAccess") == true;
  TESSERA_ASSIGN_OR_RETURN(e.tolerations, DecodeTolerations(JsonField(r, "tolerations")));
  const json& requests = JsonField(JsonField(r, "capacity"), "requests");
  if (requests.is_object()) {
    for (const auto& [cap, q] : requests.items()) {
      TESSERA_ASSIGN_OR_RETURN(e.capacity[cap],
                               QuantityField(q, StrCat(path, ".capacity.requests[", cap, "]")));
    }
  }
  return e;
}

absl::Status DecodeClaimSpec(const json& devices, ClaimInfo* c) {
  const json& requests = JsonField(devices, "requests");
  if (requests.is_array()) {
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string path = StrCat("spec.devices.requests[", i, "]");
      ClaimRequest req;
      req.name = JsonStringField(requests[i], "name");
      if (req.name.empty()) return absl::InvalidArgumentError(StrCat(path, ".name: missing"));
      const json& exactly = JsonField(requests[i], "exactly");
      const json& first = JsonField(requests[i], "firstAvailable");
      if (exactly.is_object()) {
        TESSERA_ASSIGN_OR_RETURN(ExactRequest e, DecodeExact(exactly, req.name, path + ".exactly"));
        req.alternatives.push_back(std::move(e));
      } else if (first.is_array() && !first.empty()) {
        req.first_available = true;
        for (size_t k = 0; k < first.size(); ++k) {
          const std::string sub = JsonStringField(first[k], "name");
          const std::string spath = StrCat(path, ".firstAvailable[", k, "]");
          if (sub.empty()) return absl::InvalidArgumentError(spath + ".name: missing");
          TESSERA_ASSIGN_OR_RETURN(ExactRequest e,
                                   DecodeExact(first[k], StrCat(req.name, "/", sub), spath));
          req.alternatives.push_back(std::move(e));
        }
      } else {
        return absl::InvalidArgumentError(
            StrCat(path,
                   ": neither exactly nor firstAvailable (this tessera reads "
                   "resource.k8s.io/v1)"));
      }
      c->requests.push_back(std::move(req));
    }
  }
  const json& constraints = JsonField(devices, "constraints");
  if (constraints.is_array()) {
    for (const json& k : constraints) {
      ClaimConstraint con;
      con.requests = StringList(JsonField(k, "requests"));
      con.match_attribute = JsonStringField(k, "matchAttribute");
      con.distinct_attribute = JsonStringField(k, "distinctAttribute");
      c->constraints.push_back(std::move(con));
    }
  }
  if (const json& config = JsonField(devices, "config"); config.is_array()) c->config = config;
  return absl::OkStatus();
}

void DecodeClaimInto(const json& claim, ClaimInfo* c) {
  const json& meta = JsonField(claim, "metadata");
  c->ns = JsonStringField(meta, "namespace");
  c->name = JsonStringField(meta, "name");
  c->uid = JsonStringField(meta, "uid");
  c->key = StrCat(c->ns, "/", c->name);
  c->resource_version = JsonStringField(meta, "resourceVersion");
  c->finalizers = StringList(JsonField(meta, "finalizers"));
  c->deleting = !JsonField(meta, "deletionTimestamp").is_null();
  const json& owners = JsonField(meta, "ownerReferences");
  if (owners.is_array()) {
    for (const json& o : owners) {
      if (JsonField(o, "controller") == true && JsonStringField(o, "kind") == "Pod" &&
          JsonStringField(o, "apiVersion") == "v1") {
        c->owner_pod_uid = JsonStringField(o, "uid");
        c->owner_pod_name = JsonStringField(o, "name");
      }
    }
  }
  c->extended_resource =
      JsonStringField(JsonField(meta, "annotations"), kExtendedResourceClaimAnnotation) == "true";
  absl::Status spec = DecodeClaimSpec(JsonField(JsonField(claim, "spec"), "devices"), c);
  if (!spec.ok()) c->error = std::string(FromAbsl(spec.message()));
  records::dra::ClaimStatus status = records::dra::DecodeClaimStatus(JsonField(claim, "status"));
  c->allocation = std::move(status.allocation);
  c->reserved_for = std::move(status.reserved_for);
  if (!status.error.empty()) c->error = std::move(status.error);
}

}  // namespace

std::string AttributeValue::DebugString() const {
  switch (kind) {
    case Kind::kInt:
      return StrCat(i);
    case Kind::kBool:
      return b ? "true" : "false";
    case Kind::kString:
      return StrCat("\"", s, "\"");
    case Kind::kVersion:
      return StrCat("version ", s);
    case Kind::kList:
      return "a list";
  }
  return "?";
}

const AttributeValue* Device::Attribute(std::string_view qualified, std::string_view driver) const {
  size_t slash = qualified.find('/');
  std::string domain(slash == std::string_view::npos ? driver : qualified.substr(0, slash));
  std::string id(slash == std::string_view::npos ? qualified : qualified.substr(slash + 1));
  auto d = attributes.find(domain);
  if (d == attributes.end()) return nullptr;
  auto a = d->second.find(id);
  return a == d->second.end() ? nullptr : &a->second;
}

std::shared_ptr<const SliceInfo> DecodeSlice(const json& slice) {
  auto s = std::make_shared<SliceInfo>();
  try {
    DecodeSliceInto(slice, s.get());
  } catch (const std::exception& e) {
    s->error = StrCat("resource slice object: ", e.what());
    s->devices.clear();
  }
  return s;
}

std::shared_ptr<const ClassInfo> DecodeClass(const json& device_class) {
  auto c = std::make_shared<ClassInfo>();
  try {
    const json& meta = JsonField(device_class, "metadata");
    const json& spec = JsonField(device_class, "spec");
    c->name = JsonStringField(meta, "name");
    c->resource_version = JsonStringField(meta, "resourceVersion");
    const json& selectors = JsonField(spec, "selectors");
    if (selectors.is_array()) {
      for (const json& s : selectors) {
        const json& expr = JsonField(JsonField(s, "cel"), "expression");
        // A selector kind this version does not know selects nothing (never everything).
        c->selectors.push_back(expr.is_string() ? expr.get<std::string>() : std::string("false"));
      }
    }
    const json& config = JsonField(spec, "config");
    if (config.is_array()) {
      for (const json& entry : config) {
        if (const json& opaque = JsonField(entry, "opaque"); opaque.is_object()) {
          c->config.push_back(opaque);
        }
      }
    }
    c->extended_resource_name = JsonStringField(spec, "extendedResourceName");
  } catch (const std::exception& e) {
    c->selectors = {"false"};
  }
  return c;
}

bool ClaimInfo::ReservedFor(std::string_view pod_uid) const {
  return std::any_of(reserved_for.begin(), reserved_for.end(), [&](const ConsumerRef& r) {
    return r.api_group.empty() && r.resource == "pods" && r.uid == pod_uid;
  });
}

const ClaimRequest* ClaimInfo::FindRequest(std::string_view name) const {
  for (const ClaimRequest& r : requests) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const ExactRequest* ClaimInfo::FindExact(std::string_view result_request) const {
  size_t slash = result_request.find('/');
  const ClaimRequest* r = FindRequest(result_request.substr(0, slash));
  if (r == nullptr) return nullptr;
  for (const ExactRequest& e : r->alternatives) {
    if (e.name == result_request) return &e;
  }
  return nullptr;
}

std::shared_ptr<const ClaimInfo> DecodeClaim(const json& claim) {
  auto c = std::make_shared<ClaimInfo>();
  try {
    DecodeClaimInto(claim, c.get());
  } catch (const std::exception& e) {
    c->error = StrCat("resource claim object: ", e.what());
  }
  return c;
}

namespace {

// A quantity of a protobuf Pod read in place (its string), as QuantityField reads JSON.
absl::StatusOr<int64_t> QuantityField(const ProtobufValue& v, const std::string& path) {
  return QuantityField(v.is_string() ? json(v.String()) : json(), path);
}

template <typename J>
PodClaims DecodePodClaimsOf(const J& pod) {
  PodClaims out;
  try {
    const auto& claims = JsonField(JsonField(pod, "spec"), "resourceClaims");
    if (!claims.is_array()) return out;
    const auto& statuses = JsonField(JsonField(pod, "status"), "resourceClaimStatuses");
    for (size_t i = 0; i < claims.size(); ++i) {
      PodClaimRef ref;
      ref.name = JsonStringField(claims[i], "name");
      const std::string direct = JsonStringField(claims[i], "resourceClaimName");
      ref.template_name = JsonStringField(claims[i], "resourceClaimTemplateName");
      if (ref.name.empty() || direct.empty() == ref.template_name.empty()) {
        out.error = StrCat("spec.resourceClaims[", i,
                           "]: needs a name and exactly one of resourceClaimName, "
                           "resourceClaimTemplateName");
        out.refs.clear();
        return out;
      }
      if (!direct.empty()) {
        ref.claim = direct;
      } else if (statuses.is_array()) {
        for (const auto& st : statuses) {
          if (JsonStringField(st, "name") != ref.name) continue;
          ref.claim = JsonStringField(st, "resourceClaimName");
          ref.not_needed = ref.claim.empty();
        }
      }
      out.refs.push_back(std::move(ref));
    }
  } catch (const std::exception& e) {
    out.error = StrCat("spec.resourceClaims: ", e.what());
    out.refs.clear();
  }
  return out;
}

template <typename J>
PodExtended DecodePodExtendedOf(const J& pod) {
  PodExtended out;
  const auto& spec = JsonField(pod, "spec");
  out.claim = JsonStringField(JsonField(JsonField(pod, "status"), "extendedResourceClaimStatus"),
                              "resourceClaimName");
  int index = 0;
  for (const char* list : {"initContainers", "containers"}) {
    const auto& containers = JsonField(spec, list);
    if (!containers.is_array()) continue;
    const bool init = std::string_view(list) == "initContainers";
    for (const auto& c : containers) {
      const int i = index++;
      const auto& requests = JsonField(JsonField(c, "resources"), "requests");
      if (!requests.is_object()) continue;
      // Objects iterate in key order (nlohmann's, ProtobufValue::items): the place of a name is
      // its sorted index.
      int place = -1;
      for (const auto& [name, value] : requests.items()) {
        ++place;
        const size_t slash = name.find('/');
        if (slash == std::string::npos) continue;  // cpu, memory, hugepages-*: native
        const std::string domain = name.substr(0, slash);
        if (domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")) {
          if (!name.starts_with(kImplicitExtendedPrefix)) continue;  // native
        }
        absl::StatusOr<int64_t> milli = QuantityField(value, name);
        if (!milli.ok() || *milli % 1000 != 0) {
          out.error = StrCat(init ? "spec.initContainers" : "spec.containers", "[",
                             JsonStringField(c, "name"), "].resources.requests[", name,
                             "]: an extended resource is a whole number");
          out.requests.clear();
          return out;
        }
        if (*milli == 0) continue;
        ExtendedRequest r;
        r.container_index = i;
        r.container = JsonStringField(c, "name");
        r.resource = name;
        r.request_index = place;
        r.count = *milli / 1000;
        r.short_lived = init && JsonStringField(c, "restartPolicy") != "Always";
        out.requests.push_back(std::move(r));
      }
    }
  }
  return out;
}

}  // namespace

PodClaims DecodePodClaims(const json& pod) { return DecodePodClaimsOf(pod); }
PodClaims DecodePodClaims(const ProtobufValue& pod) { return DecodePodClaimsOf(pod); }
PodExtended DecodePodExtended(const json& pod) { return DecodePodExtendedOf(pod); }
PodExtended DecodePodExtended(const ProtobufValue& pod) { return DecodePodExtendedOf(pod); }

}  // namespace tessera::k8s::dra
