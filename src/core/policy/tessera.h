// tessera's own options, beside the PolicyOptions every policy reads (policy.h). CreatePolicy
// ("tessera", ...) uses the defaults; tests and research that compare a rule with the one before
// it build the policy here.
#pragma once

#include <memory>

#include "core/policy/policy.h"

namespace tessera::core {

struct TesseraOptions {
  // While the cluster fills (no pod has left yet), a whole-GPU pod that may use other models keeps
  // off the GPUs of a model set that asks of the live mix are bound to once that set's free GPUs
  // are fewer than the bound asks' part of the demand claims of what is free (tessera.cc, "Bound
  // models' last free GPUs"). False: it pays the light filling weight only (the rule before
  // issue 31).
  bool reserve_bound_models = true;
};

std::unique_ptr<Policy> NewTesseraPolicy(const PolicyOptions& options,
                                         const TesseraOptions& tessera);

}  // namespace tessera::core
