// Constructors of the built-in policies, for the registry in policy.cc only.
#pragma once

#include <memory>

#include "core/policy/policy.h"

namespace tessera::core {

std::unique_ptr<Policy> NewTesseraPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewWholeGpuPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewBinpackPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewSpreadPolicy(const PolicyOptions& options);
// The FGD paper's baselines and FGD itself (paper.h).
std::unique_ptr<Policy> NewRandomPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewDotProdPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewGpuClusteringPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewGpuPackingPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewBestFitPolicy(const PolicyOptions& options);
std::unique_ptr<Policy> NewFgdPolicy(const PolicyOptions& options);

}  // namespace tessera::core
