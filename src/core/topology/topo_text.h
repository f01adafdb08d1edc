// Reads the matrix that `nvidia-smi topo -m` prints.
//
// Accepted: a header row of tab-separated column names (GPU0.., NIC0.. or mlx5_0.., then
// "CPU Affinity", "NUMA Affinity", "GPU NUMA ID" when present), one row per GPU and per NIC, and
// the legend (ignored, except "NIC Legend" lines that name each NIC's device). Cells may be padded
// with spaces (" X "). Errors name the line and column (both 1-based) and what was expected.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/node.h"

namespace tessera::core {

struct ParsedTopology {
  // One per GPU row: index, numa_node and cpu_affinity are filled; model, memory, UUID are not
  // in this text and stay empty.
  std::vector<GpuSpec> gpus;
  LinkMatrix links;
  std::vector<NicSpec> nics;
};

[[nodiscard]] absl::StatusOr<ParsedTopology> ParseNvidiaSmiTopo(std::string_view text);

}  // namespace tessera::core
