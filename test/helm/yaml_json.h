// YAML as JSON for the chart's tests: what `helm template` renders, read with yaml-cpp, every
// scalar a string (enough to compare objects and read their fields).
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace tessera::e2e {

inline nlohmann::json YamlToJson(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : n) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
    return out;
  }
  if (n.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const YAML::Node& v : n) out.push_back(YamlToJson(v));
    return out;
  }
  if (n.IsScalar()) return n.as<std::string>();
  return nullptr;
}

// Every document of a multi-document YAML text (empty ones left out).
inline std::vector<nlohmann::json> YamlDocuments(const std::string& text) {
  std::vector<nlohmann::json> out;
  for (const YAML::Node& d : YAML::LoadAll(text)) {
    if (d.IsMap()) out.push_back(YamlToJson(d));
  }
  return out;
}

}  // namespace tessera::e2e
