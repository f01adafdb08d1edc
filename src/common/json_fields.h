// Reading the fields of JSON that arrives from elsewhere (API objects, records, the kubelet's
// messages): a missing member, or a parent that is not an object, reads as null, so a decoder
// checks each value's type once instead of each step of the path.
#pragma once

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace tessera {

// The member `key` of `j`; null when `j` is not an object or has no such member.
inline const nlohmann::json& JsonField(const nlohmann::json& j, std::string_view key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// The member `key` of `j` as a string; "" when it is missing or not a string.
inline std::string JsonStringField(const nlohmann::json& j, std::string_view key) {
  const nlohmann::json& v = JsonField(j, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

}  // namespace tessera
