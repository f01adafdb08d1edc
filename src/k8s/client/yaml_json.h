// YAML read as Kubernetes reads it (sigs.k8s.io/yaml: YAML turned into JSON, then decoded): maps
// become objects, sequences arrays, plain scalars true/false, null, integers and floats where
// they read as such, and every quoted scalar a string. One converter for every YAML a person
// hands us as Kubernetes objects or their parts (manifests, a kubeconfig's exec extension).
#pragma once

#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace tessera::k8s {

nlohmann::json YamlToJson(const YAML::Node& node);

}  // namespace tessera::k8s
