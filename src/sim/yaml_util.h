// Reading YAML files field by field with errors that name the file, line and column and say what
// was expected ("cluster.yaml:12:5: unknown key "gpu" in a node (expected one of: ...)").
// yaml-cpp's exceptions stop here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace tessera::sim {

// Parses a whole document; `source` names it in errors (a path, or "<embedded cluster>").
[[nodiscard]] absl::StatusOr<YAML::Node> ParseYaml(std::string_view text, std::string_view source);
// Reads a file (errors name the path) and parses it.
[[nodiscard]] absl::StatusOr<YAML::Node> LoadYamlFile(const std::string& path);
[[nodiscard]] absl::StatusOr<std::string> ReadFile(const std::string& path);

class YamlContext {
 public:
  explicit YamlContext(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  // "<source>:<line>:<column>: <what>" (1-based), or "<source>: <what>" without a mark.
  absl::Status Error(const YAML::Node& at, std::string_view what) const;

  absl::Status ExpectMap(const YAML::Node& n, std::string_view what) const;
  absl::Status ExpectSequence(const YAML::Node& n, std::string_view what) const;
  absl::Status OnlyKeys(const YAML::Node& map, std::string_view what,
                        std::initializer_list<std::string_view> keys) const;

  absl::StatusOr<std::string> String(const YAML::Node& n, std::string_view what) const;
  absl::StatusOr<int64_t> Int(const YAML::Node& n, std::string_view what, int64_t min,
                              int64_t max) const;
  // Kubernetes quantities ("64", "500m", "1Ti"). Capacities round down, requests up.
  absl::StatusOr<int64_t> CpuMilli(const YAML::Node& n, std::string_view what, bool capacity) const;
  absl::StatusOr<int64_t> MemoryMiB(const YAML::Node& n, std::string_view what,
                                    bool capacity) const;

 private:
  std::string source_;
};

}  // namespace tessera::sim
