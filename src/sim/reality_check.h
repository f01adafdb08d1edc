// The embedded default of `tessera simulate`: the reality check from DESIGN.md. A cluster of 10
// GPUs of 80Gi on two nodes (an 8-GPU NVSwitch server and a 2-GPU PCIe server) and three parts:
// 20 inference pods of 4Gi GPU memory; a training gang of 8 pods x 1 GPU that must share one
// NVLink domain; both together. Kept as YAML so that it runs through the same readers as user
// files, and so `tessera simulate --show-default` can print it for copying.
#pragma once

#include <string_view>
#include <vector>

namespace tessera::sim {

struct ScenarioPart {
  std::string_view title;
  std::string_view workload_yaml;
};

std::string_view RealityCheckClusterYaml();
const std::vector<ScenarioPart>& RealityCheckParts();

}  // namespace tessera::sim
