// Kubernetes' protobuf read in place, without an intermediate tree (issue 33 "decode once"): a
// Pod or Node of a list page answers the questions DecodePod and DecodeNode ask of the JSON shape
// (protobuf_wire.h) -- a member by its JSON name, an array's elements, a map's keys in order, a
// string, a number -- straight from the page's bytes, so a page of 500 pods becomes 500 PodInfo
// without 500 protobuf messages and 500 nlohmann trees in between, and the one decoder of each
// object (k8s/scheduler/objects.h) still reads both wires.
//
// ProtobufValue answers exactly as the JSON that ProtobufListToJson makes of the same bytes would
// (k8s_protobuf_value_test and protobuf_value_fuzz hold the two to it): the fields of
// proto/k8s_core.proto by their JSON names, an absent optional field null, a map an object (keys
// sorted, the last of equal keys wins), a Time its RFC 3339 string (seconds), a Quantity its
// string, a message that occurs more than once merged as protobuf merges it (the last scalar
// wins), strings that are not UTF-8 with U+FFFD for each byte that begins no valid sequence.
// Fields the .proto does not declare are skipped, as protobuf skips unknown fields.
//
// ReadProtobufList first checks the whole page as libprotobuf would parse it (every tag, length
// and known message well formed; a page libprotobuf refuses is refused here), so a value never
// reads past its bytes; it then only walks them. A value points into the page: it lives as long
// as the ProtobufList that holds the page.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

namespace wire_schema {
struct Message;
}  // namespace wire_schema

class ProtobufValue {
 public:
  enum class Type : uint8_t { kNull, kObject, kArray, kString, kInt, kBool };
  ProtobufValue() = default;

  bool is_null() const { return type_ == Type::kNull; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_number_integer() const { return type_ == Type::kInt; }
  bool is_boolean() const { return type_ == Type::kBool; }

  // An object's member by its JSON name; null when absent (or when this is not an object).
  ProtobufValue Field(std::string_view key) const;
  // An object's members (a map's keys sorted, the last of equal keys kept; a message's present
  // fields), or an empty list.
  std::vector<std::pair<std::string, ProtobufValue>> items() const;
  // An array's elements (0 for anything else), an object's members.
  size_t size() const;
  bool empty() const { return size() == 0; }
  ProtobufValue operator[](size_t i) const;

  // A string (UTF-8, U+FFFD for bad bytes); "" for anything else.
  std::string String() const;
  int64_t Int() const { return type_ == Type::kInt ? int_ : 0; }
  bool Bool() const { return type_ == Type::kBool && int_ != 0; }
  template <typename T>
  T get() const;

  friend bool operator==(const ProtobufValue& v, bool b) { return v.is_boolean() && v.Bool() == b; }
  // JsonField and JsonStringField (common/json_fields.h) for a ProtobufValue, found by
  // argument-dependent lookup, so that one decoder template reads either.
  friend ProtobufValue JsonField(const ProtobufValue& v, std::string_view key) {
    return v.Field(key);
  }
  friend std::string JsonStringField(const ProtobufValue& v, std::string_view key) {
    return v.Field(key).String();
  }

  class Iterator {
   public:
    Iterator(const ProtobufValue* array, size_t i) : array_(array), i_(i) {}
    ProtobufValue operator*() const { return (*array_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const ProtobufValue* array_;
    size_t i_;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, is_array() ? parts_.size() : 0); }

  // A Pod's or Node's bytes (as in a list's items) read with the schema of proto/k8s_core.proto.
  // The bytes must have been checked (ReadProtobufList does; tests use CheckedPod/CheckedNode).
  static ProtobufValue Pod(std::string_view bytes);
  static ProtobufValue Node(std::string_view bytes);

 private:
  friend class ProtobufValueBuilder;
  Type type_ = Type::kNull;
  // What the value is made of: a message's segments (merged in order), an array's elements, a
  // map's entries, a string's bytes.
  absl::InlinedVector<std::string_view, 1> parts_;
  const wire_schema::Message* schema_ = nullptr;  // message / map / array of messages
  uint8_t element_ = 0;                           // an array's or a map's element kind
  int64_t int_ = 0;                               // kInt, kBool
};

template <>
inline std::string ProtobufValue::get<std::string>() const {
  return String();
}
template <>
inline int64_t ProtobufValue::get<int64_t>() const {
  return Int();
}
template <>
inline int32_t ProtobufValue::get<int32_t>() const {
  return static_cast<int32_t>(Int());
}
template <>
inline bool ProtobufValue::get<bool>() const {
  return Bool();
}

// A PodList or NodeList answer (envelope included), checked and read in place.
struct ProtobufList {
  std::string kind;  // "PodList", "NodeList"
  std::string resource_version;
  std::string continue_token;  // "" on the last page
  std::optional<int64_t> remaining_item_count;
  std::vector<ProtobufValue> items;  // each a Pod or a Node, pointing into `body`
  std::shared_ptr<const std::string> body;
};

// DataLoss naming what is wrong, as ProtobufListToJson: no envelope, an encoded envelope, a kind
// other than PodList/NodeList, bytes libprotobuf would not parse.
absl::StatusOr<ProtobufList> ReadProtobufList(std::shared_ptr<const std::string> body);

// `v` as the JSON it answers as (tests, fuzzers: ProtobufListToJson's items for the same bytes;
// one difference: a Pod's spec.affinity without a required node affinity answers as present, as
// sent, where ProtobufListToJson leaves it out; the decoders read only that required part, so it
// reads the same; this function leaves it out too).
// `ambiguous` (optional) is set when a map holds two keys that read alike (not UTF-8), whose
// JSON value depends on protobuf's map order.
nlohmann::json ProtobufValueToJson(const ProtobufValue& v, bool* ambiguous = nullptr);

// Whether `bytes` parse as a Pod / a Node would with libprotobuf (tests, fuzzers).
bool ProtobufPodParses(std::string_view bytes);
bool ProtobufNodeParses(std::string_view bytes);

}  // namespace tessera::k8s
