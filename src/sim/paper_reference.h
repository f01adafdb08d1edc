// The FGD paper's published results (data/reference/fgd-results.md): the first markdown
// table, GPU allocation ratio (%) at 130% arrived demand per workload and policy. Column names
// are mapped to tessera's policy names (Random -> random, DotProd -> dotprod, GpuClustering ->
// gpu-clustering, GpuPacking -> gpu-packing, BestFit -> bestfit, FGD -> fgd).
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace tessera::sim {

// workload -> policy -> allocation % at 130% arrived.
using PaperTable = std::map<std::string, std::map<std::string, double>>;

[[nodiscard]] absl::StatusOr<PaperTable> ParseFgdReference(const std::string& markdown,
                                                           const std::string& source);
[[nodiscard]] absl::StatusOr<PaperTable> ReadFgdReference(const std::string& path);

}  // namespace tessera::sim
