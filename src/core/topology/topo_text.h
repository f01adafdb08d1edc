// Reads the matrix that `nvidia-smi topo -m` prints, in the forms it reaches people in:
// tab separated as nvidia-smi writes it, space aligned as it looks once pasted into an issue or a
// terminal log, with the header underlined by ANSI escapes, with CRLF line ends.
//
// Accepted:
//  - lines starting with '#' anywhere before the legend: comments (nvidia-smi never prints '#');
//  - the header row: GPU0..GPU<n-1> in order, then device columns (NIC0.. in drivers since about
//    R470, mlx5_0 / mlx4_0 .. before), then the affinity columns "CPU Affinity", "NUMA Affinity",
//    "GPU NUMA ID" when present (any subset, in any order);
//  - one row per GPU: a link cell per GPU and device column, then one value per affinity column
//    (CPU list such as "0-47,96-143" or N/A; NUMA node number, a list such as "0-1" (several
//    nodes: recorded as unknown) or N/A);
//  - one row per device (optional): link cells only; they must agree with the GPU rows;
//  - "Legend:" and everything after it is ignored, except "NIC Legend:" entries ("NIC0: mlx5_0")
//    that name each NIC's device.
// Link cells: X (the diagonal only), NV<lanes>, PIX, PXB, PHB, NODE, SYS (and SOC, the name
// drivers before 2017 printed for SYS). Cells are separated by tabs or spaces; " X " is a cell.
//
// Errors name the line and column (both 1-based, counted in characters of the input line) and
// what was expected, e.g. "nvidia-smi topo text, line 5, column 17: unknown link "NVX" ...".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/node.h"

namespace tessera::core {

struct ParsedTopology {
  // One per GPU row: index, numa_node and cpu_affinity are filled; model, memory and UUID are not
  // in this text and stay empty.
  std::vector<GpuSpec> gpus;
  LinkMatrix links;
  // One per device column, in header order: name ("NIC0" or "mlx5_0"), device ("mlx5_0" from the
  // NIC legend or the column name itself), and its relation to each GPU.
  std::vector<NicSpec> nics;
};

[[nodiscard]] absl::StatusOr<ParsedTopology> ParseNvidiaSmiTopo(std::string_view text);

}  // namespace tessera::core
