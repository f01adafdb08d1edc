// Reading JSON records field by field with errors that name the field path
// ("gpu-inventory.gpus[2].memory_mib: expected an integer"). nlohmann's exceptions stop here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace tessera::records {

[[nodiscard]] absl::StatusOr<nlohmann::json> ParseJson(std::string_view text,
                                                       std::string_view what);

// The strings of a JSON array, leniently (elements that are not strings, and a value that is not
// an array, give none), as readers of machine-written objects take lists.
std::vector<std::string> StringList(const nlohmann::json& j);

class JsonReader {
 public:
  JsonReader(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {}

  absl::Status ExpectObject() const;
  // Unknown keys are errors: a typo must not silently become a default. For files people write
  // (configs, workloads) only: readers of records that machines write accept unknown fields.
  absl::Status OnlyKeys(std::initializer_list<std::string_view> keys) const;
  bool Has(std::string_view key) const;
  const nlohmann::json& At(std::string_view key) const;
  std::string Path(std::string_view key) const;
  absl::Status Error(std::string_view key, std::string_view what) const;

  absl::StatusOr<int64_t> Int(std::string_view key) const;
  absl::StatusOr<int64_t> OptionalInt(std::string_view key, int64_t fallback) const;
  absl::StatusOr<std::string> String(std::string_view key) const;
  absl::StatusOr<std::string> OptionalString(std::string_view key) const;
  absl::StatusOr<bool> OptionalBool(std::string_view key, bool fallback) const;
  absl::StatusOr<const nlohmann::json*> Array(std::string_view key) const;
  // The record's "version" must be `supported`, else an error such as "assignment: version 2 is
  // not supported (this tessera reads version 1)".
  absl::Status ExpectVersion(int64_t supported) const;

 private:
  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace tessera::records
