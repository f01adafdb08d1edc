#include "records/json_util.h"

#include "common/status.h"
#include "common/strings.h"

namespace tessera::records {

using nlohmann::json;

absl::StatusOr<json> ParseJson(std::string_view text, std::string_view what) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(
        StrCat(what, ": not valid JSON at byte ", e.byte, ": ", e.what()));
  } catch (const json::exception& e) {  // e.g. a number too large for any type
    return absl::InvalidArgumentError(StrCat(what, ": not valid JSON: ", e.what()));
  }
}

std::vector<std::string> StringList(const json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const json& v : j) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

absl::Status JsonReader::ExpectObject() const {
  if (!j_.is_object()) return absl::InvalidArgumentError(StrCat(path_, ": expected an object"));
  return absl::OkStatus();
}

absl::Status JsonReader::OnlyKeys(std::initializer_list<std::string_view> keys) const {
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    bool known = false;
    for (std::string_view k : keys) known = known || it.key() == k;
    if (!known) {
      return absl::InvalidArgumentError(
          StrCat(path_, ": unknown field \"", it.key(), "\" (known: ", StrJoin(keys, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

bool JsonReader::Has(std::string_view key) const {
  return j_.is_object() && j_.contains(key) && !j_.at(std::string(key)).is_null();
}

const json& JsonReader::At(std::string_view key) const { return j_.at(std::string(key)); }

std::string JsonReader::Path(std::string_view key) const { return StrCat(path_, ".", key); }

absl::Status JsonReader::Error(std::string_view key, std::string_view what) const {
  return absl::InvalidArgumentError(StrCat(Path(key), ": ", what));
}

absl::StatusOr<int64_t> JsonReader::Int(std::string_view key) const {
  if (!Has(key)) return Error(key, "missing (expected an integer)");
  const json& v = At(key);
  if (!v.is_number_integer()) return Error(key, StrCat("expected an integer, found ", v.dump()));
  return v.get<int64_t>();
}

absl::Status JsonReader::ExpectVersion(int64_t supported) const {
  TESSERA_ASSIGN_OR_RETURN(int64_t version, Int("version"));
  if (version != supported) {
    return absl::InvalidArgumentError(StrCat(path_, ": version ", version,
                                             " is not supported (this tessera reads version ",
                                             supported, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JsonReader::OptionalInt(std::string_view key, int64_t fallback) const {
  if (!Has(key)) return fallback;
  return Int(key);
}

absl::StatusOr<std::string> JsonReader::String(std::string_view key) const {
  if (!Has(key)) return Error(key, "missing (expected a string)");
  const json& v = At(key);
  if (!v.is_string()) return Error(key, StrCat("expected a string, found ", v.dump()));
  return v.get<std::string>();
}

absl::StatusOr<std::string> JsonReader::OptionalString(std::string_view key) const {
  if (!Has(key)) return std::string();
  return String(key);
}

absl::StatusOr<bool> JsonReader::OptionalBool(std::string_view key, bool fallback) const {
  if (!Has(key)) return fallback;
  const json& v = At(key);
  if (!v.is_boolean()) return Error(key, StrCat("expected true or false, found ", v.dump()));
  return v.get<bool>();
}

absl::StatusOr<const json*> JsonReader::Array(std::string_view key) const {
  if (!Has(key)) return Error(key, "missing (expected an array)");
  const json& v = At(key);
  if (!v.is_array()) return Error(key, StrCat("expected an array, found ", v.type_name()));
  return &v;
}

}  // namespace tessera::records
