#include "k8s/client/yaml_json.h"

#include <cstdint>
#include <string>

namespace tessera::k8s {

nlohmann::json YamlToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) o[kv.first.Scalar()] = YamlToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& v : n) a.push_back(YamlToJson(v));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted: always a string
      if (s == "null" || s == "~" || s == "Null" || s == "NULL") return nullptr;
      bool b = false;
      if (YAML::convert<bool>::decode(n, b)) return b;
      int64_t i = 0;
      if (YAML::convert<int64_t>::decode(n, i)) return i;
      double d = 0;
      if (YAML::convert<double>::decode(n, d)) return d;
      return s;
    }
    default:
      return nullptr;
  }
}

}  // namespace tessera::k8s
