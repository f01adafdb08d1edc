#include "k8s/dra/objects.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "core/model/quantity.h"

namespace tessera::k8s::dra {
namespace {

using nlohmann::json;

const json& Field(const json& j, std::string_view key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string StringField(const json& j, std::string_view key) {
  const json& v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

std::vector<std::string> Strings(const json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const json& v : j) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

// A quantity field ("80Gi", or a JSON number) in milli-units; an error names `path`.
absl::StatusOr<int64_t> QuantityField(const json& v, const std::string& path) {
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_number_integer()) {
    text = std::to_string(v.get<int64_t>());
  } else {
    return absl::InvalidArgumentError(StrCat(path, ": not a quantity"));
  }
  absl::StatusOr<int64_t> m = ParseMilli(text);
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
  if (const json& i = Field(a, "int"); i.is_number_integer()) {
    v.kind = AttributeValue::Kind::kInt;
    v.i = i.get<int64_t>();
  } else if (const json& b = Field(a, "bool"); b.is_boolean()) {
    v.kind = AttributeValue::Kind::kBool;
    v.b = b.get<bool>();
  } else if (const json& s = Field(a, "string"); s.is_string()) {
    v.kind = AttributeValue::Kind::kString;
    v.s = s.get<std::string>();
  } else if (const json& ver = Field(a, "version"); ver.is_string()) {
    v.kind = AttributeValue::Kind::kVersion;
    v.s = ver.get<std::string>();
  } else if (Field(a, "ints").is_array() || Field(a, "bools").is_array() ||
             Field(a, "strings").is_array() || Field(a, "versions").is_array()) {
    v.kind = AttributeValue::Kind::kList;
  } else {
    return absl::InvalidArgumentError(
        StrCat(path, ": no value (expected one of int, bool, string, version)"));
  }
  return v;
}

absl::StatusOr<RequestPolicy> DecodePolicy(const json& p, const std::string& path) {
  RequestPolicy policy;
  if (const json& d = Field(p, "default"); !d.is_null()) {
    TESSERA_ASSIGN_OR_RETURN(policy.default_milli, QuantityField(d, path + ".default"));
  }
  const json& values = Field(p, "validValues");
  if (values.is_array()) {
    for (size_t i = 0; i < values.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v,
                               QuantityField(values[i], StrCat(path, ".validValues[", i, "]")));
      policy.valid_values.push_back(v);
    }
    std::sort(policy.valid_values.begin(), policy.valid_values.end());
  }
  const json& range = Field(p, "validRange");
  if (range.is_object()) {
    policy.has_range = true;
    for (auto [key, out] : {std::pair{"min", &policy.min}, std::pair{"max", &policy.max},
                            std::pair{"step", &policy.step}}) {
      const json& q = Field(range, key);
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
  dev.name = StringField(d, "name");
  if (dev.name.empty()) return absl::InvalidArgumentError(StrCat(path, ".name: missing"));
  const json& attributes = Field(d, "attributes");
  if (attributes.is_object()) {
    for (const auto& [name, a] : attributes.items()) {
      TESSERA_ASSIGN_OR_RETURN(AttributeValue v,
                               DecodeAttribute(a, StrCat(path, ".attributes[", name, "]")));
      auto [domain, id] = SplitQualified(name, driver);
      dev.attributes[domain][id] = std::move(v);
    }
  }
  const json& capacity = Field(d, "capacity");
  if (capacity.is_object()) {
    for (const auto& [name, c] : capacity.items()) {
      const std::string cpath = StrCat(path, ".capacity[", name, "]");
      DeviceCapacity cap;
      TESSERA_ASSIGN_OR_RETURN(cap.value, QuantityField(Field(c, "value"), cpath + ".value"));
      if (const json& p = Field(c, "requestPolicy"); p.is_object()) {
        TESSERA_ASSIGN_OR_RETURN(cap.policy, DecodePolicy(p, cpath + ".requestPolicy"));
      }
      auto [domain, id] = SplitQualified(name, driver);
      dev.capacity[domain][id] = cap;
      dev.capacity_by_name[name] = cap;
    }
  }
  dev.allow_multiple_allocations = Field(d, "allowMultipleAllocations") == true;
  const json& counters = Field(d, "consumesCounters");
  dev.consumes_counters = counters.is_array() && !counters.empty();
  const json& conditions = Field(d, "bindingConditions");
  dev.binding_conditions = conditions.is_array() && !conditions.empty();
  dev.per_device_node = !Field(d, "nodeName").is_null() || !Field(d, "nodeSelector").is_null() ||
                        !Field(d, "allNodes").is_null();
  const json& taints = Field(d, "taints");
  if (taints.is_array()) {
    for (const json& t : taints) {
      dev.taints.push_back(
          DeviceTaint{StringField(t, "key"), StringField(t, "value"), StringField(t, "effect")});
    }
  }
  return dev;
}

void DecodeSliceInto(const json& slice, SliceInfo* s) {
  const json& meta = Field(slice, "metadata");
  const json& spec = Field(slice, "spec");
  s->name = StringField(meta, "name");
  s->resource_version = StringField(meta, "resourceVersion");
  s->driver = StringField(spec, "driver");
  const json& pool = Field(spec, "pool");
  s->pool = StringField(pool, "name");
  if (const json& g = Field(pool, "generation"); g.is_number_integer()) {
    s->generation = g.get<int64_t>();
  }
  if (const json& c = Field(pool, "resourceSliceCount"); c.is_number_integer()) {
    s->slice_count = c.get<int64_t>();
  }
  s->node_name = StringField(spec, "nodeName");
  const json& devices = Field(spec, "devices");
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
  for (const json& t : list) {
    DeviceToleration tol;
    tol.key = StringField(t, "key");
    tol.op = StringField(t, "operator");
    if (tol.op.empty()) tol.op = "Equal";
    tol.value = StringField(t, "value");
    tol.effect = StringField(t, "effect");
    out.push_back(std::move(tol));
  }
  return out;
}

absl::StatusOr<ExactRequest> DecodeExact(const json& r, std::string name, const std::string& path) {
  ExactRequest e;
  e.name = std::move(name);
  e.device_class = StringField(r, "deviceClassName");
  if (e.device_class.empty()) {
    return absl::InvalidArgumentError(StrCat(path, ".deviceClassName: missing"));
  }
  const json& selectors = Field(r, "selectors");
  if (selectors.is_array()) {
    for (size_t i = 0; i < selectors.size(); ++i) {
      const json& cel = Field(selectors[i], "cel");
      const json& expr = Field(cel, "expression");
      if (!expr.is_string()) {
        return absl::InvalidArgumentError(
            StrCat(path, ".selectors[", i, "]: no cel.expression (the only selector kind)"));
      }
      e.selectors.push_back(expr.get<std::string>());
    }
  }
  if (const std::string mode = StringField(r, "allocationMode"); !mode.empty()) {
    e.allocation_mode = mode;
  }
  if (const json& c = Field(r, "count"); c.is_number_integer()) e.count = c.get<int64_t>();
  e.admin_access = Field(r, "adminAccess") == true;
  TESSERA_ASSIGN_OR_RETURN(e.tolerations, DecodeTolerations(Field(r, "tolerations")));
  const json& requests = Field(Field(r, "capacity"), "requests");
  if (requests.is_object()) {
    for (const auto& [cap, q] : requests.items()) {
      TESSERA_ASSIGN_OR_RETURN(e.capacity[cap],
                               QuantityField(q, StrCat(path, ".capacity.requests[", cap, "]")));
    }
  }
  return e;
}

absl::Status DecodeClaimSpec(const json& devices, ClaimInfo* c) {
  const json& requests = Field(devices, "requests");
  if (requests.is_array()) {
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string path = StrCat("spec.devices.requests[", i, "]");
      ClaimRequest req;
      req.name = StringField(requests[i], "name");
      if (req.name.empty()) return absl::InvalidArgumentError(StrCat(path, ".name: missing"));
      const json& exactly = Field(requests[i], "exactly");
      const json& first = Field(requests[i], "firstAvailable");
      if (exactly.is_object()) {
        TESSERA_ASSIGN_OR_RETURN(ExactRequest e, DecodeExact(exactly, req.name, path + ".exactly"));
        req.alternatives.push_back(std::move(e));
      } else if (first.is_array() && !first.empty()) {
        req.first_available = true;
        for (size_t k = 0; k < first.size(); ++k) {
          const std::string sub = StringField(first[k], "name");
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
  const json& constraints = Field(devices, "constraints");
  if (constraints.is_array()) {
    for (const json& k : constraints) {
      ClaimConstraint con;
      con.requests = Strings(Field(k, "requests"));
      con.match_attribute = StringField(k, "matchAttribute");
      con.distinct_attribute = StringField(k, "distinctAttribute");
      c->constraints.push_back(std::move(con));
    }
  }
  if (const json& config = Field(devices, "config"); config.is_array()) c->config = config;
  return absl::OkStatus();
}

void DecodeAllocation(const json& a, ClaimInfo* c) {
  Allocation alloc;
  alloc.raw = a;
  const json& results = Field(Field(a, "devices"), "results");
  if (results.is_array()) {
    for (size_t i = 0; i < results.size(); ++i) {
      const json& r = results[i];
      AllocatedDevice d;
      d.request = StringField(r, "request");
      d.driver = StringField(r, "driver");
      d.pool = StringField(r, "pool");
      d.device = StringField(r, "device");
      d.share_id = StringField(r, "shareID");
      const json& consumed = Field(r, "consumedCapacity");
      if (consumed.is_object()) {
        for (const auto& [name, q] : consumed.items()) {
          absl::StatusOr<int64_t> v = QuantityField(
              q, StrCat("status.allocation.devices.results[", i, "].consumedCapacity[", name, "]"));
          if (!v.ok()) {
            c->error = std::string(FromAbsl(v.status().message()));
            continue;
          }
          d.consumed[name] = *v;
        }
      }
      alloc.results.push_back(std::move(d));
    }
  }
  // kube-scheduler's allocator writes matchFields metadata.name In [node] for node-local pools.
  const json& terms = Field(Field(a, "nodeSelector"), "nodeSelectorTerms");
  if (terms.is_array() && terms.size() == 1) {
    const json& fields = Field(terms[0], "matchFields");
    if (fields.is_array()) {
      for (const json& f : fields) {
        std::vector<std::string> values = Strings(Field(f, "values"));
        if (StringField(f, "key") == "metadata.name" && StringField(f, "operator") == "In" &&
            values.size() == 1) {
          alloc.node = values[0];
        }
      }
    }
  }
  c->allocation = std::move(alloc);
}

void DecodeClaimInto(const json& claim, ClaimInfo* c) {
  const json& meta = Field(claim, "metadata");
  c->ns = StringField(meta, "namespace");
  c->name = StringField(meta, "name");
  c->uid = StringField(meta, "uid");
  c->key = StrCat(c->ns, "/", c->name);
  c->resource_version = StringField(meta, "resourceVersion");
  c->finalizers = Strings(Field(meta, "finalizers"));
  c->deleting = !Field(meta, "deletionTimestamp").is_null();
  const json& owners = Field(meta, "ownerReferences");
  if (owners.is_array()) {
    for (const json& o : owners) {
      if (Field(o, "controller") == true && StringField(o, "kind") == "Pod" &&
          StringField(o, "apiVersion") == "v1") {
        c->owner_pod_uid = StringField(o, "uid");
        c->owner_pod_name = StringField(o, "name");
      }
    }
  }
  c->extended_resource =
      StringField(Field(meta, "annotations"), kExtendedResourceClaimAnnotation) == "true";
  absl::Status spec = DecodeClaimSpec(Field(Field(claim, "spec"), "devices"), c);
  if (!spec.ok()) c->error = std::string(FromAbsl(spec.message()));
  const json& status = Field(claim, "status");
  if (const json& a = Field(status, "allocation"); a.is_object()) DecodeAllocation(a, c);
  const json& reserved = Field(status, "reservedFor");
  if (reserved.is_array()) {
    for (const json& r : reserved) {
      c->reserved_for.push_back(ConsumerRef{StringField(r, "apiGroup"), StringField(r, "resource"),
                                            StringField(r, "name"), StringField(r, "uid")});
    }
  }
}

}  // namespace

absl::StatusOr<int64_t> ParseMilli(std::string_view text) {
  // Cores are counted in milli-units too: the same exact parser and scale.
  return core::ParseCpuMilli(text, core::Rounding::kUp);
}

std::string FormatMilli(int64_t milli) {
  if (milli % 1000 != 0) return StrCat(milli, "m");
  const int64_t v = milli / 1000;
  if (v != 0) {
    if (v % (int64_t{1} << 40) == 0) return StrCat(v >> 40, "Ti");
    if (v % (int64_t{1} << 30) == 0) return StrCat(v >> 30, "Gi");
    if (v % (int64_t{1} << 20) == 0) return StrCat(v >> 20, "Mi");
  }
  return StrCat(v);
}

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
    const json& meta = Field(device_class, "metadata");
    const json& spec = Field(device_class, "spec");
    c->name = StringField(meta, "name");
    c->resource_version = StringField(meta, "resourceVersion");
    const json& selectors = Field(spec, "selectors");
    if (selectors.is_array()) {
      for (const json& s : selectors) {
        const json& expr = Field(Field(s, "cel"), "expression");
        // A selector kind this version does not know selects nothing (never everything).
        c->selectors.push_back(expr.is_string() ? expr.get<std::string>() : std::string("false"));
      }
    }
    const json& config = Field(spec, "config");
    if (config.is_array()) {
      for (const json& entry : config) {
        if (const json& opaque = Field(entry, "opaque"); opaque.is_object()) {
          c->config.push_back(opaque);
        }
      }
    }
    c->extended_resource_name = StringField(spec, "extendedResourceName");
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

PodClaims DecodePodClaims(const json& pod) {
  PodClaims out;
  try {
    const json& claims = Field(Field(pod, "spec"), "resourceClaims");
    if (!claims.is_array()) return out;
    const json& statuses = Field(Field(pod, "status"), "resourceClaimStatuses");
    for (size_t i = 0; i < claims.size(); ++i) {
      PodClaimRef ref;
      ref.name = StringField(claims[i], "name");
      const std::string direct = StringField(claims[i], "resourceClaimName");
      ref.template_name = StringField(claims[i], "resourceClaimTemplateName");
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
        for (const json& st : statuses) {
          if (StringField(st, "name") != ref.name) continue;
          ref.claim = StringField(st, "resourceClaimName");
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

PodExtended DecodePodExtended(const json& pod) {
  PodExtended out;
  const json& spec = Field(pod, "spec");
  out.claim =
      StringField(Field(Field(pod, "status"), "extendedResourceClaimStatus"), "resourceClaimName");
  int index = 0;
  for (const char* list : {"initContainers", "containers"}) {
    const json& containers = Field(spec, list);
    if (!containers.is_array()) continue;
    const bool init = std::string_view(list) == "initContainers";
    for (const json& c : containers) {
      const int i = index++;
      const json& requests = Field(Field(c, "resources"), "requests");
      if (!requests.is_object()) continue;
      // nlohmann's objects iterate in key order: the place of a name is its sorted index.
      int place = 0;
      for (auto it = requests.begin(); it != requests.end(); ++it, ++place) {
        const std::string& name = it.key();
        const size_t slash = name.find('/');
        if (slash == std::string::npos) continue;  // cpu, memory, hugepages-*: native
        const std::string domain = name.substr(0, slash);
        if (domain == "kubernetes.io" || domain.ends_with(".kubernetes.io")) {
          if (!name.starts_with(kImplicitExtendedPrefix)) continue;  // native
        }
        absl::StatusOr<int64_t> milli = QuantityField(it.value(), name);
        if (!milli.ok() || *milli % 1000 != 0) {
          out.error =
              StrCat(init ? "spec.initContainers" : "spec.containers", "[", StringField(c, "name"),
                     "].resources.requests[", name, "]: an extended resource is a whole number");
          out.requests.clear();
          return out;
        }
        if (*milli == 0) continue;
        ExtendedRequest r;
        r.container_index = i;
        r.container = StringField(c, "name");
        r.resource = name;
        r.request_index = place;
        r.count = *milli / 1000;
        r.short_lived = init && StringField(c, "restartPolicy") != "Always";
        out.requests.push_back(std::move(r));
      }
    }
  }
  return out;
}

}  // namespace tessera::k8s::dra
