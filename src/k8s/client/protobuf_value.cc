#include "k8s/client/protobuf_value.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <map>

#include "absl/time/time.h"
#include "common/strings.h"
#include "k8s/client/protobuf_wire.h"

namespace tessera::k8s {
namespace wire_schema {

// What a field of proto/k8s_core.proto holds, as the JSON shape shows it.
enum Kind : uint8_t {
  kString,       // string or bytes
  kInt32,        // a varint read as int32
  kInt64,        // a varint read as int64
  kBool,         // a varint, non-zero true
  kMessage,      // an object
  kTime,         // meta/v1 Time: its RFC 3339 string
  kQuantity,     // resource.Quantity: its string
  kStringMap,    // map<string, string>: an object of strings
  kQuantityMap,  // map<string, Quantity>: an object of strings
};

struct Field {
  std::string_view json;  // the JSON name (the .proto's field name)
  uint32_t number = 0;
  Kind kind = kString;
  bool repeated = false;
  // Present in the JSON shape even when absent on the wire: an empty object, array or string
  // (as ProtobufListToJson writes it).
  bool always = false;
  const struct Message* message = nullptr;  // kMessage, kTime, kQuantity, maps (the entry)
};

struct Message {
  const Field* fields;
  size_t size;
  const Field* Find(std::string_view json) const {
    for (size_t i = 0; i < size; ++i) {
      if (fields[i].json == json) return &fields[i];
    }
    return nullptr;
  }
  const Field* Find(uint32_t number) const {
    for (size_t i = 0; i < size; ++i) {
      if (fields[i].number == number) return &fields[i];
    }
    return nullptr;
  }
};

template <size_t N>
constexpr Message M(const Field (&fields)[N]) {
  return Message{fields, N};
}

// The schema of proto/k8s_core.proto (its field numbers checked against Kubernetes' own by
// k8s_protobuf_fields_test; k8s_protobuf_value_test checks this table against the .proto's
// descriptors).
constexpr Field kTypeMetaF[] = {{"apiVersion", 1}, {"kind", 2}};
constexpr Message kTypeMeta = M(kTypeMetaF);
constexpr Field kUnknownF[] = {{"typeMeta", 1, kMessage, false, false, &kTypeMeta},
                               {"raw", 2},
                               {"contentEncoding", 3},
                               {"contentType", 4}};
constexpr Message kUnknown = M(kUnknownF);
constexpr Field kQuantityF[] = {{"string", 1}};
constexpr Message kQuantityM = M(kQuantityF);
constexpr Field kTimeF[] = {{"seconds", 1, kInt64}, {"nanos", 2, kInt32}};
constexpr Message kTimeM = M(kTimeF);
constexpr Field kStringEntryF[] = {{"key", 1}, {"value", 2}};
constexpr Message kStringEntry = M(kStringEntryF);
constexpr Field kQuantityEntryF[] = {{"key", 1}, {"value", 2, kMessage, false, false, &kQuantityM}};
constexpr Message kQuantityEntry = M(kQuantityEntryF);
constexpr Field kListMetaF[] = {
    {"resourceVersion", 2}, {"continue", 3}, {"remainingItemCount", 4, kInt64}};
constexpr Message kListMeta = M(kListMetaF);
constexpr Field kOwnerReferenceF[] = {
    {"kind", 1}, {"name", 3}, {"uid", 4}, {"apiVersion", 5}, {"controller", 6, kBool}};
constexpr Message kOwnerReference = M(kOwnerReferenceF);
constexpr Field kObjectMetaF[] = {{"name", 1},
                                  {"namespace", 3},
                                  {"uid", 5},
                                  {"resourceVersion", 6},
                                  {"creationTimestamp", 8, kTime, false, false, &kTimeM},
                                  {"deletionTimestamp", 9, kTime, false, false, &kTimeM},
                                  {"labels", 11, kStringMap, false, false, &kStringEntry},
                                  {"annotations", 12, kStringMap, false, false, &kStringEntry},
                                  {"ownerReferences", 13, kMessage, true, false, &kOwnerReference}};
constexpr Message kObjectMeta = M(kObjectMetaF);
constexpr Field kResourceClaimF[] = {{"name", 1, kString, false, true}, {"request", 2}};
constexpr Message kResourceClaim = M(kResourceClaimF);
constexpr Field kResourceRequirementsF[] = {
    {"limits", 1, kQuantityMap, false, false, &kQuantityEntry},
    {"requests", 2, kQuantityMap, false, false, &kQuantityEntry},
    {"claims", 3, kMessage, true, false, &kResourceClaim}};
constexpr Message kResourceRequirements = M(kResourceRequirementsF);
constexpr Field kContainerF[] = {{"name", 1, kString, false, true},
                                 {"resources", 8, kMessage, false, false, &kResourceRequirements},
                                 {"restartPolicy", 24}};
constexpr Message kContainer = M(kContainerF);
constexpr Field kRequirementF[] = {{"key", 1, kString, false, true},
                                   {"operator", 2, kString, false, true},
                                   {"values", 3, kString, true}};
constexpr Message kRequirement = M(kRequirementF);
constexpr Field kTermF[] = {{"matchExpressions", 1, kMessage, true, false, &kRequirement},
                            {"matchFields", 2, kMessage, true, false, &kRequirement}};
constexpr Message kTerm = M(kTermF);
constexpr Field kNodeSelectorF[] = {{"nodeSelectorTerms", 1, kMessage, true, true, &kTerm}};
constexpr Message kNodeSelector = M(kNodeSelectorF);
constexpr Field kNodeAffinityF[] = {
    {"requiredDuringSchedulingIgnoredDuringExecution", 1, kMessage, false, false, &kNodeSelector}};
constexpr Message kNodeAffinity = M(kNodeAffinityF);
constexpr Field kAffinityF[] = {{"nodeAffinity", 1, kMessage, false, false, &kNodeAffinity}};
constexpr Message kAffinity = M(kAffinityF);
constexpr Field kTolerationF[] = {
    {"key", 1}, {"operator", 2}, {"value", 3}, {"effect", 4}, {"tolerationSeconds", 5, kInt64}};
constexpr Message kToleration = M(kTolerationF);
constexpr Field kNameOnlyF[] = {{"name", 1, kString, false, true}};
constexpr Message kSchedulingGate = M(kNameOnlyF);
constexpr Field kPodResourceClaimF[] = {
    {"name", 1, kString, false, true}, {"resourceClaimName", 3}, {"resourceClaimTemplateName", 4}};
constexpr Message kPodResourceClaim = M(kPodResourceClaimF);
constexpr Field kSchedulingGroupF[] = {{"podGroupName", 1}};
constexpr Message kSchedulingGroup = M(kSchedulingGroupF);
constexpr Field kPodSpecF[] = {{"containers", 2, kMessage, true, true, &kContainer},
                               {"activeDeadlineSeconds", 5, kInt64},
                               {"nodeSelector", 7, kStringMap, false, false, &kStringEntry},
                               {"nodeName", 10},
                               {"affinity", 18, kMessage, false, false, &kAffinity},
                               {"schedulerName", 19},
                               {"initContainers", 20, kMessage, true, false, &kContainer},
                               {"tolerations", 22, kMessage, true, false, &kToleration},
                               {"priorityClassName", 24},
                               {"priority", 25, kInt32},
                               {"preemptionPolicy", 31},
                               {"overhead", 32, kQuantityMap, false, false, &kQuantityEntry},
                               {"schedulingGates", 38, kMessage, true, false, &kSchedulingGate},
                               {"resourceClaims", 39, kMessage, true, false, &kPodResourceClaim},
                               {"resources", 40, kMessage, false, false, &kResourceRequirements},
                               {"schedulingGroup", 43, kMessage, false, false, &kSchedulingGroup}};
constexpr Message kPodSpec = M(kPodSpecF);
constexpr Field kConditionF[] = {{"type", 1, kString, false, true},
                                 {"status", 2, kString, false, true},
                                 {"lastTransitionTime", 4, kTime, false, false, &kTimeM},
                                 {"reason", 5},
                                 {"message", 6}};
constexpr Message kCondition = M(kConditionF);
constexpr Field kClaimStatusF[] = {{"name", 1, kString, false, true}, {"resourceClaimName", 2}};
constexpr Message kClaimStatus = M(kClaimStatusF);
constexpr Field kExtendedRequestF[] = {{"containerName", 1, kString, false, true},
                                       {"resourceName", 2, kString, false, true},
                                       {"requestName", 3, kString, false, true}};
constexpr Message kExtendedRequest = M(kExtendedRequestF);
constexpr Field kExtendedStatusF[] = {
    {"requestMappings", 1, kMessage, true, true, &kExtendedRequest},
    {"resourceClaimName", 2, kString, false, true}};
constexpr Message kExtendedStatus = M(kExtendedStatusF);
constexpr Field kPodStatusF[] = {
    {"phase", 1},
    {"conditions", 2, kMessage, true, false, &kCondition},
    {"startTime", 7, kTime, false, false, &kTimeM},
    {"nominatedNodeName", 11},
    {"resourceClaimStatuses", 15, kMessage, true, false, &kClaimStatus},
    {"extendedResourceClaimStatus", 18, kMessage, false, false, &kExtendedStatus}};
constexpr Message kPodStatus = M(kPodStatusF);
constexpr Field kPodF[] = {{"metadata", 1, kMessage, false, true, &kObjectMeta},
                           {"spec", 2, kMessage, false, true, &kPodSpec},
                           {"status", 3, kMessage, false, true, &kPodStatus}};
constexpr Message kPod = M(kPodF);
constexpr Field kPodListF[] = {{"metadata", 1, kMessage, false, false, &kListMeta},
                               {"items", 2, kMessage, true, false, &kPod}};
constexpr Message kPodList = M(kPodListF);
constexpr Field kTaintF[] = {
    {"key", 1, kString, false, true}, {"value", 2}, {"effect", 3, kString, false, true}};
constexpr Message kTaint = M(kTaintF);
constexpr Field kNodeSpecF[] = {{"unschedulable", 4, kBool},
                                {"taints", 5, kMessage, true, false, &kTaint}};
constexpr Message kNodeSpec = M(kNodeSpecF);
constexpr Field kNodeStatusF[] = {{"capacity", 1, kQuantityMap, false, false, &kQuantityEntry},
                                  {"allocatable", 2, kQuantityMap, false, false, &kQuantityEntry},
                                  {"conditions", 4, kMessage, true, false, &kCondition}};
constexpr Message kNodeStatus = M(kNodeStatusF);
constexpr Field kNodeF[] = {{"metadata", 1, kMessage, false, true, &kObjectMeta},
                            {"spec", 2, kMessage, false, true, &kNodeSpec},
                            {"status", 3, kMessage, false, true, &kNodeStatus}};
constexpr Message kNode = M(kNodeF);
constexpr Field kNodeListF[] = {{"metadata", 1, kMessage, false, false, &kListMeta},
                                {"items", 2, kMessage, true, false, &kNode}};
constexpr Message kNodeList = M(kNodeListF);

}  // namespace wire_schema

namespace {

namespace ws = wire_schema;

// Protobuf's wire format, read forward. Only ever run over checked bytes by the accessors; Check
// runs it over anything.
class Reader {
 public:
  explicit Reader(std::string_view data) : p_(data.data()), end_(data.data() + data.size()) {}
  bool done() const { return p_ == end_; }
  bool Varint(uint64_t* v, int max_bytes = 10) {
    *v = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (p_ == end_) return false;
      const auto b = static_cast<uint8_t>(*p_++);
      if (i < 10) *v |= uint64_t{b & 0x7fu} << (7 * i);
      if ((b & 0x80u) == 0) return true;
    }
    return false;
  }
  bool Skip(size_t n) {
    if (n > static_cast<size_t>(end_ - p_)) return false;
    p_ += n;
    return true;
  }
  // A length-delimited payload.
  bool Bytes(std::string_view* out) {
    uint64_t n = 0;
    if (!Varint(&n, 5) || n > static_cast<uint64_t>(INT32_MAX) ||
        n > static_cast<uint64_t>(end_ - p_)) {
      return false;
    }
    *out = std::string_view(p_, n);
    p_ += n;
    return true;
  }
  // A tag: field number and wire type; false at the end or on a malformed tag (`ok` tells).
  bool Tag(uint32_t* number, uint32_t* wire_type, bool* ok) {
    *ok = true;
    if (p_ == end_) return false;
    uint64_t tag = 0;
    if (!Varint(&tag, 5) || tag > UINT32_MAX || (tag >> 3) == 0) {
      *ok = false;
      return false;
    }
    *number = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<uint32_t>(tag & 7);
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

// libprotobuf's limit on nested messages and groups.
constexpr int kMaxDepth = 100;

bool Check(std::string_view bytes, const ws::Message& schema, int depth);

bool SkipGroup(Reader& r, uint32_t number, int depth);

// Reads one field's value of wire type `wt` after its tag: a varint (0) into *v, bytes (2) into
// *b; 1 and 5 skipped; a group (3) skipped up to its end tag (SkipGroup at `depth`). False if
// malformed, and for wire types that begin no value (4: an end of group; 6, 7: none such).
bool ReadValue(Reader& r, uint32_t number, uint32_t wt, int depth, uint64_t* v,
               std::string_view* b) {
  switch (wt) {
    case 0:
      return r.Varint(v);
    case 1:
      return r.Skip(8);
    case 2:
      return r.Bytes(b);
    case 3:
      return SkipGroup(r, number, depth);
    case 5:
      return r.Skip(4);
    default:
      return false;
  }
}

// Skips a group (wire type 3) up to its end tag; false if it never ends or is malformed.
bool SkipGroup(Reader& r, uint32_t number, int depth) {
  if (depth > kMaxDepth) return false;
  uint32_t n = 0, wt = 0;
  bool ok = true;
  while (r.Tag(&n, &wt, &ok)) {
    if (wt == 4) return n == number;
    uint64_t v = 0;
    std::string_view b;
    if (!ReadValue(r, n, wt, depth + 1, &v, &b)) return false;
  }
  return false;
}

// Whether a field of this kind is read from wire type 0 (else 2).
bool IsVarint(ws::Kind k) { return k == ws::kInt32 || k == ws::kInt64 || k == ws::kBool; }

// Whether `bytes` parse as `schema` would with libprotobuf: well-formed tags, varints, lengths
// and groups, and every known message field well formed in turn (an unknown field, or a known one
// of another wire type, only has to be well formed as what it is).
bool Check(std::string_view bytes, const ws::Message& schema, int depth) {
  if (depth > kMaxDepth) return false;
  Reader r(bytes);
  uint32_t n = 0, wt = 0;
  bool ok = true;
  while (r.Tag(&n, &wt, &ok)) {
    uint64_t v = 0;
    std::string_view b;
    // 4 here is an end of group that began nowhere.
    if (!ReadValue(r, n, wt, depth + 1, &v, &b)) return false;
    if (wt != 2) continue;
    const ws::Field* f = schema.Find(n);
    if (f != nullptr && f->message != nullptr && !IsVarint(f->kind) &&
        !Check(b, *f->message, depth + 1)) {
      return false;
    }
  }
  return ok;
}

// Calls fn(number, wire_type, payload, varint) for each field of `bytes` (checked).
template <typename Fn>
void ForEachField(std::string_view bytes, Fn&& fn) {
  Reader r(bytes);
  uint32_t n = 0, wt = 0;
  bool ok = true;
  while (r.Tag(&n, &wt, &ok)) {
    uint64_t v = 0;
    std::string_view b;
    if (!ReadValue(r, n, wt, 0, &v, &b)) return;
    if (wt == 0 || wt == 2) fn(n, wt, b, v);
  }
}

// The last string field `number` of `segments` (a message merged from them); nullopt if none.
template <typename Segments>
std::optional<std::string_view> LastString(const Segments& segments, uint32_t number) {
  std::optional<std::string_view> out;
  for (std::string_view s : segments) {
    ForEachField(s, [&](uint32_t n, uint32_t wt, std::string_view b, uint64_t) {
      if (n == number && wt == 2) out = b;
    });
  }
  return out;
}

}  // namespace

class ProtobufValueBuilder {
 public:
  static ProtobufValue Message(const ws::Message* schema, std::string_view bytes) {
    ProtobufValue v;
    v.type_ = ProtobufValue::Type::kObject;
    v.element_ = ws::kMessage;
    v.schema_ = schema;
    v.parts_.push_back(bytes);
    return v;
  }

  // Field `f` of the message made of `segments`, as its JSON shape holds it.
  template <typename Segments>
  static ProtobufValue Collect(const Segments& segments, const ws::Field& f) {
    ProtobufValue v;
    const uint32_t want_wt = IsVarint(f.kind) ? 0 : 2;
    bool found = false;
    for (std::string_view s : segments) {
      ForEachField(s, [&](uint32_t n, uint32_t wt, std::string_view b, uint64_t x) {
        if (n != f.number || wt != want_wt) return;  // another field, or unknown by its type
        found = true;
        if (want_wt == 0) {
          v.int_ = f.kind == ws::kInt32  ? static_cast<int64_t>(static_cast<int32_t>(x))
                   : f.kind == ws::kBool ? (x != 0 ? 1 : 0)
                                         : static_cast<int64_t>(x);
          return;
        }
        if (f.repeated || f.kind == ws::kMessage || f.kind == ws::kTime ||
            f.kind == ws::kQuantity || f.kind == ws::kStringMap || f.kind == ws::kQuantityMap) {
          v.parts_.push_back(b);
        } else {
          v.parts_.assign(1, b);  // a scalar: the last one wins
        }
      });
    }
    v.schema_ = f.message;
    v.element_ = f.kind;
    if (f.repeated) {
      if (!found && !f.always) return ProtobufValue();
      v.type_ = ProtobufValue::Type::kArray;
      return v;
    }
    if (!found) {
      if (f.always && f.kind == ws::kMessage) {
        v.type_ = ProtobufValue::Type::kObject;
        return v;
      }
      if (f.always && f.kind == ws::kString) {
        v.type_ = ProtobufValue::Type::kString;
        v.parts_.assign(1, std::string_view());
        return v;
      }
      return ProtobufValue();
    }
    switch (f.kind) {
      case ws::kInt32:
      case ws::kInt64:
        v.type_ = ProtobufValue::Type::kInt;
        break;
      case ws::kBool:
        v.type_ = ProtobufValue::Type::kBool;
        break;
      case ws::kMessage:
      case ws::kStringMap:
      case ws::kQuantityMap:
        v.type_ = ProtobufValue::Type::kObject;
        break;
      case ws::kString:
      case ws::kTime:
      case ws::kQuantity:
        v.type_ = ProtobufValue::Type::kString;
        break;
    }
    return v;
  }

  // The value of a map's entry.
  static ProtobufValue MapValue(const ProtobufValue& map, std::string_view entry) {
    ProtobufValue v;
    v.type_ = ProtobufValue::Type::kString;
    if (map.element_ == ws::kStringMap) {
      v.element_ = ws::kString;
      std::array<std::string_view, 1> one{entry};
      v.parts_.assign(1, LastString(one, 2).value_or(std::string_view()));
    } else {
      v.element_ = ws::kQuantity;
      ForEachField(entry, [&](uint32_t n, uint32_t wt, std::string_view b, uint64_t) {
        if (n == 2 && wt == 2) v.parts_.push_back(b);
      });
    }
    return v;
  }

  static const ws::Message* Schema(const ProtobufValue& v) { return v.schema_; }
  static bool IsMap(const ProtobufValue& v) {
    return v.element_ == ws::kStringMap || v.element_ == ws::kQuantityMap;
  }
  static std::vector<std::string_view> MapKeys(const ProtobufValue& v) {
    std::vector<std::string_view> out;
    for (std::string_view entry : v.parts_) out.push_back(EntryKey(entry));
    return out;
  }

  // A string's bytes as they are (a bytes field).
  static std::string_view Raw(const ProtobufValue& v) {
    return v.parts_.empty() ? std::string_view() : v.parts_[0];
  }

  static std::string_view EntryKey(std::string_view entry) {
    std::array<std::string_view, 1> one{entry};
    return LastString(one, 1).value_or(std::string_view());
  }
};

using B = ProtobufValueBuilder;

ProtobufValue ProtobufValue::Field(std::string_view key) const {
  if (type_ != Type::kObject) return {};
  if (element_ == ws::kStringMap || element_ == ws::kQuantityMap) {
    // The last entry whose key reads as `key` (bytes that are not UTF-8 read with U+FFFD).
    const bool replaced = key.find("\xEF\xBF\xBD") != std::string_view::npos;
    const std::string_view* found = nullptr;
    for (const std::string_view& entry : parts_) {
      const std::string_view k = B::EntryKey(entry);
      if (k == key || (replaced && ValidUtf8(k) == key)) found = &entry;
    }
    return found == nullptr ? ProtobufValue() : B::MapValue(*this, *found);
  }
  const ws::Field* f = schema_ == nullptr ? nullptr : schema_->Find(key);
  if (f == nullptr) return {};
  return B::Collect(parts_, *f);
}

std::vector<std::pair<std::string, ProtobufValue>> ProtobufValue::items() const {
  std::vector<std::pair<std::string, ProtobufValue>> out;
  if (type_ != Type::kObject) return out;
  if (element_ == ws::kStringMap || element_ == ws::kQuantityMap) {
    std::map<std::string, ProtobufValue> sorted;
    for (std::string_view entry : parts_) {
      sorted[ValidUtf8(B::EntryKey(entry))] = B::MapValue(*this, entry);
    }
    out.assign(std::make_move_iterator(sorted.begin()), std::make_move_iterator(sorted.end()));
    return out;
  }
  if (schema_ == nullptr) return out;
  for (size_t i = 0; i < schema_->size; ++i) {
    ProtobufValue v = B::Collect(parts_, schema_->fields[i]);
    if (!v.is_null()) out.emplace_back(std::string(schema_->fields[i].json), std::move(v));
  }
  return out;
}

size_t ProtobufValue::size() const {
  if (type_ == Type::kArray) return parts_.size();
  if (type_ == Type::kObject) return items().size();
  return 0;
}

ProtobufValue ProtobufValue::operator[](size_t i) const {
  if (type_ != Type::kArray || i >= parts_.size()) return {};
  if (element_ == ws::kString) {
    ProtobufValue v;
    v.type_ = Type::kString;
    v.element_ = ws::kString;
    v.parts_.assign(1, parts_[i]);
    return v;
  }
  return B::Message(schema_, parts_[i]);
}

std::string ProtobufValue::String() const {
  if (type_ != Type::kString) return "";
  switch (element_) {
    case ws::kTime: {
      int64_t seconds = 0;
      for (std::string_view s : parts_) {
        ForEachField(s, [&](uint32_t n, uint32_t wt, std::string_view, uint64_t x) {
          if (n == 1 && wt == 0) seconds = static_cast<int64_t>(x);
        });
      }
      return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(seconds),
                              absl::UTCTimeZone());
    }
    case ws::kQuantity:
      return ValidUtf8(LastString(parts_, 1).value_or(std::string_view()));
    default:
      return parts_.empty() ? std::string() : ValidUtf8(parts_[0]);
  }
}

nlohmann::json ProtobufValueToJson(const ProtobufValue& v, bool* ambiguous) {
  using json = nlohmann::json;
  if (v.is_string()) return v.String();
  if (v.is_number_integer()) return v.Int();
  if (v.is_boolean()) return v.Bool();
  if (v.is_array()) {
    json out = json::array();
    for (const ProtobufValue& e : v) out.push_back(ProtobufValueToJson(e, ambiguous));
    return out;
  }
  if (v.is_object()) {
    json out = json::object();
    if (ambiguous != nullptr && B::IsMap(v)) {
      // Two keys that read alike (bytes that are not UTF-8 both read as U+FFFD): which value
      // the JSON shape keeps depends on protobuf's map order.
      std::map<std::string, std::string_view> seen;
      for (std::string_view raw : B::MapKeys(v)) {
        auto [it, added] = seen.emplace(ValidUtf8(raw), raw);
        if (!added && it->second != raw) *ambiguous = true;
      }
    }
    for (const auto& [k, e] : v.items()) {
      // ProtobufListToJson writes spec.affinity only with its required node affinity (all that
      // is read of it); in place it is there as sent.
      if (k == "affinity" && B::Schema(v) == &ws::kPodSpec &&
          e.Field("nodeAffinity")
              .Field("requiredDuringSchedulingIgnoredDuringExecution")
              .is_null()) {
        continue;
      }
      out[k] = ProtobufValueToJson(e, ambiguous);
    }
    return out;
  }
  return nullptr;
}

ProtobufValue ProtobufValue::Pod(std::string_view bytes) { return B::Message(&ws::kPod, bytes); }

ProtobufValue ProtobufValue::Node(std::string_view bytes) { return B::Message(&ws::kNode, bytes); }

bool ProtobufPodParses(std::string_view bytes) { return Check(bytes, ws::kPod, 0); }
bool ProtobufNodeParses(std::string_view bytes) { return Check(bytes, ws::kNode, 0); }

absl::StatusOr<ProtobufList> ReadProtobufList(std::shared_ptr<const std::string> body) {
  if (body == nullptr || !IsProtobufEnvelope(*body)) {
    return absl::DataLossError("the answer is not in Kubernetes' protobuf envelope (no k8s\\0)");
  }
  const std::string_view envelope = std::string_view(*body).substr(4);
  if (!Check(envelope, ws::kUnknown, 0)) {
    return absl::DataLossError("the protobuf envelope does not parse");
  }
  const ProtobufValue unknown = B::Message(&ws::kUnknown, envelope);
  // (Its bytes as they are in the message, as ProtobufListToJson says it.)
  if (std::string_view encoding = B::Raw(unknown.Field("contentEncoding")); !encoding.empty()) {
    return absl::DataLossError(
        StrCat("the protobuf answer is encoded (", encoding, "), not read here"));
  }
  ProtobufList out;
  out.kind = unknown.Field("typeMeta").Field("kind").String();
  const ws::Message* schema = out.kind == "PodList"    ? &ws::kPodList
                              : out.kind == "NodeList" ? &ws::kNodeList
                                                       : nullptr;
  if (schema == nullptr) {
    return absl::DataLossError(StrCat("a protobuf ",
                                      out.kind.empty() ? "object without a kind" : out.kind,
                                      " where a PodList or NodeList was expected"));
  }
  // Unknown.raw is bytes: the last one, its bytes as they are.
  const ProtobufValue raw_value = unknown.Field("raw");
  const std::string_view raw = B::Raw(raw_value);
  if (!Check(raw, *schema, 0))
    return absl::DataLossError(StrCat("a ", out.kind, " does not parse"));
  const ProtobufValue list = B::Message(schema, raw);
  const ProtobufValue meta = list.Field("metadata");
  out.resource_version = meta.Field("resourceVersion").String();
  out.continue_token = meta.Field("continue").String();
  if (const ProtobufValue n = meta.Field("remainingItemCount"); n.is_number_integer()) {
    out.remaining_item_count = n.Int();
  }
  const ProtobufValue items = list.Field("items");
  out.items.reserve(items.size());
  for (ProtobufValue item : items) out.items.push_back(std::move(item));
  out.body = std::move(body);
  return out;
}

}  // namespace tessera::k8s
