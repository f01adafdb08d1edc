#include "k8s/client/protobuf_wire.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "absl/time/time.h"
#include "common/status.h"
#include "common/strings.h"
#include "k8s_core.pb.h"

namespace tessera::k8s {
namespace {

using json = nlohmann::json;
namespace pb = ::tessera::k8s::wire;

constexpr std::string_view kMagic("k8s\0", 4);

// The length of the valid UTF-8 sequence at the start of `s` (Go's utf8.DecodeRuneInString: no
// overlong forms, no surrogates, nothing above U+10FFFF), 0 if there is none.
size_t Utf8Length(std::string_view s) {
  const auto b = [&s](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return i < s.size() && b(i) >= lo && b(i) <= hi;
  };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// A string of the wire as the API server's JSON carries it. Kubernetes' protobuf is proto2: its
// strings are bytes, and a protobuf client can store any (kube-apiserver v1.37.2 accepts an
// annotation of bytes FF FE and serves them so); its JSON encoder (Go's encoding/json) writes
// each byte that does not begin a valid UTF-8 sequence as U+FFFD. The same here, so that both
// wires read alike, and a string nobody can use in JSON neither fails a whole list nor reaches a
// record as bytes.
std::string U(std::string_view s) { return ValidUtf8(s); }

}  // namespace

std::string ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;  // ASCII: most strings
  while (i < s.size()) {
    const size_t n = Utf8Length(std::string_view(s).substr(i));
    if (n == 0) break;
    i += n;
  }
  if (i == s.size()) return std::string(s);
  std::string out(s.substr(0, i));
  while (i < s.size()) {
    const size_t n = Utf8Length(std::string_view(s).substr(i));
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

namespace {

std::string Rfc3339(const pb::Time& t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(t.seconds()),
                          absl::UTCTimeZone());
}

template <typename Map>
json Quantities(const Map& m) {
  json out = json::object();
  for (const auto& [k, v] : m) out[U(k)] = U(v.string());
  return out;
}

template <typename Map>
json Strings(const Map& m) {
  json out = json::object();
  for (const auto& [k, v] : m) out[U(k)] = U(v);
  return out;
}

json Meta(const pb::ObjectMeta& m) {
  json out = json::object();
  if (m.has_name()) out["name"] = U(m.name());
  if (m.has_namespace_()) out["namespace"] = U(m.namespace_());
  if (m.has_uid()) out["uid"] = U(m.uid());
  if (m.has_resourceversion()) out["resourceVersion"] = U(m.resourceversion());
  if (m.has_creationtimestamp()) out["creationTimestamp"] = Rfc3339(m.creationtimestamp());
  if (m.has_deletiontimestamp()) out["deletionTimestamp"] = Rfc3339(m.deletiontimestamp());
  if (!m.labels().empty()) out["labels"] = Strings(m.labels());
  if (!m.annotations().empty()) out["annotations"] = Strings(m.annotations());
  if (m.ownerreferences_size() > 0) {
    json owners = json::array();
    for (const pb::OwnerReference& o : m.ownerreferences()) {
      json j = json::object();
      if (o.has_apiversion()) j["apiVersion"] = U(o.apiversion());
      if (o.has_kind()) j["kind"] = U(o.kind());
      if (o.has_name()) j["name"] = U(o.name());
      if (o.has_uid()) j["uid"] = U(o.uid());
      if (o.has_controller()) j["controller"] = o.controller();
      owners.push_back(std::move(j));
    }
    out["ownerReferences"] = std::move(owners);
  }
  return out;
}

json Resources(const pb::ResourceRequirements& r) {
  json out = json::object();
  if (!r.limits().empty()) out["limits"] = Quantities(r.limits());
  if (!r.requests().empty()) out["requests"] = Quantities(r.requests());
  if (r.claims_size() > 0) {
    json claims = json::array();
    for (const pb::ResourceClaim& c : r.claims()) {
      json j = {{"name", U(c.name())}};
      if (c.has_request()) j["request"] = U(c.request());
      claims.push_back(std::move(j));
    }
    out["claims"] = std::move(claims);
  }
  return out;
}

json Containers(const google::protobuf::RepeatedPtrField<pb::Container>& cs) {
  json out = json::array();
  for (const pb::Container& c : cs) {
    json j = {{"name", U(c.name())}};
    if (c.has_resources()) j["resources"] = Resources(c.resources());
    if (c.has_restartpolicy()) j["restartPolicy"] = U(c.restartpolicy());
    out.push_back(std::move(j));
  }
  return out;
}

json Requirements(const google::protobuf::RepeatedPtrField<pb::NodeSelectorRequirement>& rs) {
  json out = json::array();
  for (const pb::NodeSelectorRequirement& r : rs) {
    json j = {{"key", U(r.key())}, {"operator", U(r.operator_())}};
    if (r.values_size() > 0) {
      json values = json::array();
      for (const std::string& v : r.values()) values.push_back(U(v));
      j["values"] = std::move(values);
    }
    out.push_back(std::move(j));
  }
  return out;
}

json Spec(const pb::PodSpec& s) {
  json out = json::object();
  out["containers"] = Containers(s.containers());
  if (s.initcontainers_size() > 0) out["initContainers"] = Containers(s.initcontainers());
  if (!s.nodeselector().empty()) out["nodeSelector"] = Strings(s.nodeselector());
  if (s.has_nodename()) out["nodeName"] = U(s.nodename());
  if (s.has_affinity() && s.affinity().has_nodeaffinity() &&
      s.affinity().nodeaffinity().has_requiredduringschedulingignoredduringexecution()) {
    json terms = json::array();
    for (const pb::NodeSelectorTerm& t : s.affinity()
                                             .nodeaffinity()
                                             .requiredduringschedulingignoredduringexecution()
                                             .nodeselectorterms()) {
      json term = json::object();
      if (t.matchexpressions_size() > 0)
        term["matchExpressions"] = Requirements(t.matchexpressions());
      if (t.matchfields_size() > 0) term["matchFields"] = Requirements(t.matchfields());
      terms.push_back(std::move(term));
    }
    out["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
       ["nodeSelectorTerms"] = std::move(terms);
  }
  if (s.has_schedulername()) out["schedulerName"] = U(s.schedulername());
  if (s.tolerations_size() > 0) {
    json tolerations = json::array();
    for (const pb::Toleration& t : s.tolerations()) {
      json j = json::object();
      if (t.has_key()) j["key"] = U(t.key());
      if (t.has_operator_()) j["operator"] = U(t.operator_());
      if (t.has_value()) j["value"] = U(t.value());
      if (t.has_effect()) j["effect"] = U(t.effect());
      if (t.has_tolerationseconds()) j["tolerationSeconds"] = t.tolerationseconds();
      tolerations.push_back(std::move(j));
    }
    out["tolerations"] = std::move(tolerations);
  }
  if (s.has_activedeadlineseconds()) out["activeDeadlineSeconds"] = s.activedeadlineseconds();
  if (s.has_priorityclassname()) out["priorityClassName"] = U(s.priorityclassname());
  if (s.has_priority()) out["priority"] = s.priority();
  if (s.has_preemptionpolicy()) out["preemptionPolicy"] = U(s.preemptionpolicy());
  if (!s.overhead().empty()) out["overhead"] = Quantities(s.overhead());
  if (s.schedulinggates_size() > 0) {
    json gates = json::array();
    for (const pb::PodSchedulingGate& g : s.schedulinggates())
      gates.push_back({{"name", U(g.name())}});
    out["schedulingGates"] = std::move(gates);
  }
  if (s.resourceclaims_size() > 0) {
    json claims = json::array();
    for (const pb::PodResourceClaim& c : s.resourceclaims()) {
      json j = {{"name", U(c.name())}};
      if (c.has_resourceclaimname()) j["resourceClaimName"] = U(c.resourceclaimname());
      if (c.has_resourceclaimtemplatename()) {
        j["resourceClaimTemplateName"] = U(c.resourceclaimtemplatename());
      }
      claims.push_back(std::move(j));
    }
    out["resourceClaims"] = std::move(claims);
  }
  if (s.has_resources()) out["resources"] = Resources(s.resources());
  if (s.has_schedulinggroup()) {
    out["schedulingGroup"] = json::object();
    if (s.schedulinggroup().has_podgroupname()) {
      out["schedulingGroup"]["podGroupName"] = U(s.schedulinggroup().podgroupname());
    }
  }
  return out;
}

template <typename Condition>
json Conditions(const google::protobuf::RepeatedPtrField<Condition>& cs) {
  json out = json::array();
  for (const Condition& c : cs) {
    json j = {{"type", U(c.type())}, {"status", U(c.status())}};
    if (c.has_lasttransitiontime()) j["lastTransitionTime"] = Rfc3339(c.lasttransitiontime());
    if (c.has_reason()) j["reason"] = U(c.reason());
    if (c.has_message()) j["message"] = U(c.message());
    out.push_back(std::move(j));
  }
  return out;
}

json Status(const pb::PodStatus& s) {
  json out = json::object();
  if (s.has_phase()) out["phase"] = U(s.phase());
  if (s.conditions_size() > 0) out["conditions"] = Conditions(s.conditions());
  if (s.has_starttime()) out["startTime"] = Rfc3339(s.starttime());
  if (s.has_nominatednodename()) out["nominatedNodeName"] = U(s.nominatednodename());
  if (s.resourceclaimstatuses_size() > 0) {
    json statuses = json::array();
    for (const pb::PodResourceClaimStatus& c : s.resourceclaimstatuses()) {
      json j = {{"name", U(c.name())}};
      if (c.has_resourceclaimname()) j["resourceClaimName"] = U(c.resourceclaimname());
      statuses.push_back(std::move(j));
    }
    out["resourceClaimStatuses"] = std::move(statuses);
  }
  if (s.has_extendedresourceclaimstatus()) {
    const pb::PodExtendedResourceClaimStatus& e = s.extendedresourceclaimstatus();
    json mappings = json::array();
    for (const pb::ContainerExtendedResourceRequest& r : e.requestmappings()) {
      mappings.push_back({{"containerName", U(r.containername())},
                          {"resourceName", U(r.resourcename())},
                          {"requestName", U(r.requestname())}});
    }
    out["extendedResourceClaimStatus"] = {{"requestMappings", std::move(mappings)},
                                          {"resourceClaimName", U(e.resourceclaimname())}};
  }
  return out;
}

json PodJson(const pb::Pod& p) {
  return {
      {"metadata", Meta(p.metadata())}, {"spec", Spec(p.spec())}, {"status", Status(p.status())}};
}

json NodeJson(const pb::Node& n) {
  json spec = json::object();
  if (n.spec().has_unschedulable()) spec["unschedulable"] = n.spec().unschedulable();
  if (n.spec().taints_size() > 0) {
    json taints = json::array();
    for (const pb::Taint& t : n.spec().taints()) {
      json j = {{"key", U(t.key())}, {"effect", U(t.effect())}};
      if (t.has_value()) j["value"] = U(t.value());
      taints.push_back(std::move(j));
    }
    spec["taints"] = std::move(taints);
  }
  json status = json::object();
  if (!n.status().capacity().empty()) status["capacity"] = Quantities(n.status().capacity());
  if (!n.status().allocatable().empty()) {
    status["allocatable"] = Quantities(n.status().allocatable());
  }
  if (n.status().conditions_size() > 0) status["conditions"] = Conditions(n.status().conditions());
  return {
      {"metadata", Meta(n.metadata())}, {"spec", std::move(spec)}, {"status", std::move(status)}};
}

json ListMetaJson(const pb::ListMeta& m) {
  json out = json::object();
  if (m.has_resourceversion()) out["resourceVersion"] = U(m.resourceversion());
  if (m.has_continue_() && !m.continue_().empty()) out["continue"] = U(m.continue_());
  if (m.has_remainingitemcount()) out["remainingItemCount"] = m.remainingitemcount();
  return out;
}

// Protobuf's wire format, as far as PeekProtobufContinue walks it: varints and the
// length-delimited fields of a message, in order.
class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80u) == 0) return true;
    }
    return false;
  }
  // The next field: its number, and for a length-delimited one its bytes; false at the end or on
  // anything malformed.
  bool Next(uint32_t* number, std::string_view* bytes) {
    uint64_t key = 0;
    if (pos_ >= data_.size() || !Varint(&key)) return false;
    *number = static_cast<uint32_t>(key >> 3);
    uint64_t n = 0;
    switch (key & 7) {
      case 0:
        return Varint(&n);
      case 1:
        return Skip(8);
      case 2:
        if (!Varint(&n) || n > data_.size() - pos_) return false;
        *bytes = data_.substr(pos_, n);
        pos_ += n;
        return true;
      case 5:
        return Skip(4);
      default:
        return false;
    }
  }

 private:
  bool Skip(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

// The length-delimited field `number` of the message `data` (the first one); nullopt if none.
std::optional<std::string_view> Field(std::string_view data, uint32_t number) {
  WireReader r(data);
  uint32_t n = 0;
  std::string_view bytes;
  while (r.Next(&n, &bytes)) {
    if (n == number) return bytes;
  }
  return std::nullopt;
}

// The envelope of `body` (after "k8s\0"); false when there is none or it does not parse.
bool ParseEnvelope(std::string_view body, pb::Unknown* unknown) {
  return IsProtobufEnvelope(body) &&
         unknown->ParseFromArray(body.data() + 4, static_cast<int>(body.size() - 4));
}

}  // namespace

std::optional<std::string> PeekProtobufContinue(std::string_view body) {
  if (!IsProtobufEnvelope(body)) return std::nullopt;
  // Unknown.raw (2) -> List.metadata (1) -> ListMeta.continue (3). The envelope's typeMeta (1)
  // comes before raw; the list's metadata before its items.
  std::optional<std::string_view> raw = Field(body.substr(4), 2);
  if (!raw) return std::nullopt;
  WireReader list(*raw);
  uint32_t n = 0;
  std::string_view meta;
  if (!list.Next(&n, &meta) || n != 1) return std::nullopt;
  std::optional<std::string_view> token = Field(meta, 3);
  return token ? U(std::string(*token)) : std::string();
}

bool IsProtobufEnvelope(std::string_view body) { return body.substr(0, 4) == kMagic; }

namespace {

// What is inside the envelope of `body`; DataLoss saying why there is nothing to read.
absl::StatusOr<pb::Unknown> Envelope(std::string_view body) {
  if (!IsProtobufEnvelope(body)) {
    return absl::DataLossError("the answer is not in Kubernetes' protobuf envelope (no k8s\\0)");
  }
  pb::Unknown unknown;
  if (!ParseEnvelope(body, &unknown)) {
    return absl::DataLossError("the protobuf envelope does not parse");
  }
  if (unknown.has_contentencoding() && !unknown.contentencoding().empty()) {
    return absl::DataLossError(
        StrCat("the protobuf answer is encoded (", unknown.contentencoding(), "), not read here"));
  }
  return unknown;
}

json StatusJson(const pb::Status& status) {
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"status", U(status.status())},
          {"message", U(status.message())},
          {"reason", U(status.reason())},
          {"code", status.code()}};
}

// The object in `unknown` as JSON, when it is one of `kinds`.
absl::StatusOr<json> ObjectJson(const pb::Unknown& unknown,
                                std::initializer_list<std::string_view> kinds) {
  const std::string kind = U(unknown.typemeta().kind());
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    return absl::DataLossError(StrCat("a protobuf ", kind.empty() ? "object without a kind" : kind,
                                      " where a ", StrJoin(kinds, " or "), " was expected"));
  }
  json out = {{"kind", kind}, {"apiVersion", U(unknown.typemeta().apiversion())}};
  auto refused = [&kind] { return absl::DataLossError(StrCat("a ", kind, " does not parse")); };
  if (kind == "PodList" || kind == "NodeList") {
    json items = json::array();
    if (kind == "PodList") {
      pb::PodList list;
      if (!list.ParseFromString(unknown.raw())) return refused();
      out["metadata"] = ListMetaJson(list.metadata());
      for (const pb::Pod& p : list.items()) items.push_back(PodJson(p));
    } else {
      pb::NodeList list;
      if (!list.ParseFromString(unknown.raw())) return refused();
      out["metadata"] = ListMetaJson(list.metadata());
      for (const pb::Node& n : list.items()) items.push_back(NodeJson(n));
    }
    out["items"] = std::move(items);
    return out;
  }
  if (kind == "Pod") {
    pb::Pod pod;
    if (!pod.ParseFromString(unknown.raw())) return refused();
    out.update(PodJson(pod));
  } else if (kind == "Node") {
    pb::Node node;
    if (!node.ParseFromString(unknown.raw())) return refused();
    out.update(NodeJson(node));
  } else {  // Status
    pb::Status status;
    if (!status.ParseFromString(unknown.raw())) return refused();
    out = StatusJson(status);
  }
  return out;
}

}  // namespace

absl::StatusOr<json> ProtobufListToJson(std::string_view body) {
  TESSERA_ASSIGN_OR_RETURN(pb::Unknown unknown, Envelope(body));
  return ObjectJson(unknown, {"PodList", "NodeList"});
}

absl::StatusOr<json> ProtobufObjectToJson(std::string_view body) {
  TESSERA_ASSIGN_OR_RETURN(pb::Unknown unknown, Envelope(body));
  return ObjectJson(unknown, {"Pod", "Node", "Status"});
}

absl::StatusOr<json> ProtobufWatchEventToJson(std::string_view frame) {
  pb::WatchEvent event;
  if (!event.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return absl::DataLossError("a watch frame is not a WatchEvent");
  }
  if (!event.has_type() || event.type().empty()) {
    return absl::DataLossError("a watch frame's WatchEvent has no type");
  }
  if (!event.has_object() || !event.object().has_raw()) {
    return absl::DataLossError(StrCat("a ", event.type(), " watch frame has no object"));
  }
  absl::StatusOr<json> object = ProtobufObjectToJson(event.object().raw());
  if (!object.ok()) {
    return absl::DataLossError(StrCat("the object of a ", event.type(),
                                      " watch frame: ", FromAbsl(object.status().message())));
  }
  return json({{"type", U(event.type())}, {"object", std::move(*object)}});
}

std::optional<std::string> ProtobufStatusAsJson(std::string_view body) {
  pb::Unknown unknown;
  if (!ParseEnvelope(body, &unknown) || unknown.typemeta().kind() != "Status") {
    return std::nullopt;
  }
  pb::Status status;
  if (!status.ParseFromString(unknown.raw())) return std::nullopt;
  return StatusJson(status).dump();
}

}  // namespace tessera::k8s
