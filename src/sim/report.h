// How simulate results are shown: a side-by-side table for people, and the stable JSON document
// documented in docs/simulate.md.
#pragma once

#include <string>
#include <vector>

#include "core/model/cluster.h"
#include "nlohmann/json.hpp"
#include "sim/scenario.h"

namespace tessera::sim {

// One line summarising the cluster: "2 nodes, 10 GPUs: nvswitch-server 8 x A100-80GB (NVLink),
// ...".
std::string DescribeCluster(const core::Cluster& cluster);

// The side-by-side table of several policies on one workload, then the pods left pending and why.
std::string FormatComparison(const std::vector<ScenarioResult>& results);

// {"policy", "placed", "pending", "gpus_in_use", "placements": [...], "unplaced": [...], ...}
nlohmann::json ResultToJson(const core::Cluster& cluster, const ScenarioResult& result);

}  // namespace tessera::sim
