// MIG changes on one GPU through NVML (root only), for NvmlDiscovery's MigReconfigurer: MIG mode
// on and off, a GPU instance of a profile at an exact placement with its compute instance, and
// destroying one (compute instances first). Nothing here decides what to change: the callers (the
// DRA driver, the classic agent's MIG plans) do; each error says what NVML refused and what a
// person can do about it. The MIG device UUID of a new instance is read back by discovery (its
// MIG device handles), which the caller runs after every change.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "agent/discovery/nvml_api.h"
#include "core/model/mig.h"

namespace tessera::agent {

class NvmlLibrary;

// The GPU a change is for, as messages name it.
struct NvmlMigTarget {
  nvml::Device device{nullptr};
  int index = -1;
  std::string uuid;
  std::string Describe() const;  // "GPU 3 (GPU-...)"
};

// Turns MIG mode on or off; off only when no GPU instance is left. Success means the mode is in
// effect now; a mode that waits for a GPU reset (or an idle GPU) is an error that says so.
[[nodiscard]] absl::Status NvmlSetMigMode(const NvmlLibrary& l, const NvmlMigTarget& gpu,
                                          bool enabled);

// Creates a GPU instance of `profile` at memory slice `start` and its compute instance (the one
// that spans the whole GPU instance, as `nvidia-smi mig -cgi <profile> -C` makes). A GPU instance
// already there at that placement without a compute instance (an interrupted creation) gets one;
// one with a compute instance is left as it is. A compute instance that cannot be made takes its
// new GPU instance with it.
[[nodiscard]] absl::Status NvmlCreateMigInstance(const NvmlLibrary& l, const NvmlMigTarget& gpu,
                                                 const core::MigProfile& profile, int start);

// Destroys the GPU instance of `profile` at `start`: its compute instances, then itself.
// kNotFound when there is none.
[[nodiscard]] absl::Status NvmlDestroyMigInstance(const NvmlLibrary& l, const NvmlMigTarget& gpu,
                                                  const core::MigProfile& profile, int start);

}  // namespace tessera::agent
