// MIG (Multi-Instance GPU): the GPU instance profiles of A100-40GB, A100-80GB, H100-80GB and
// H200-141GB and where each may be placed, as NVIDIA publishes them (MIG user guide, "Supported
// MIG Profiles"; `nvidia-smi mig -lgip` for sizes, `nvidia-smi mig -lgipp` for placements).
//
// The placement axis is the GPU's 8 memory slices, numbered 0..7. A profile occupies `size`
// consecutive slices starting at one of its allowed start slots; two instances never share a
// slice. On A100, H100 and H200 alike (`nvidia-smi mig -lgipp`; H200: 1g.18gb, 1g.35gb, 2g.35gb,
// 3g.71gb, 4g.71gb, 7g.141gb):
//
//   profile (A100-40GB / A100-80GB, H100-80GB)   id   size  allowed starts   per GPU
//   1g.5gb   / 1g.10gb                           19   1     0 1 2 3 4 5 6    7
//   1g.5gb+me / 1g.10gb+me (media engines)       20   1     0 1 2 3 4 5 6    1
//   1g.10gb  / 1g.20gb                           15   2     0 2 4 6          4
//   2g.10gb  / 2g.20gb                           14   2     0 2 4            3
//   3g.20gb  / 3g.40gb                            9   4     0 4              2
//   4g.20gb  / 4g.40gb                            5   4     0                1
//   7g.40gb  / 7g.80gb                            0   8     0                1
//
// So slice 7 is reachable only by 1g.10gb/1g.20gb at 6, 3g at 4 and 7g; a 4g at 0 leaves room
// for one 3g at 4 or smaller profiles there; seven 1g instances leave slice 7 unused. Memory is
// what `nvidia-smi mig -lgip` reports (GiB to two decimals, here in MiB); it varies by a few MiB
// between drivers.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace tessera::core {

inline constexpr int kMigSlots = 8;

struct MigProfile {
  std::string_view name;  // "1g.10gb"
  int32_t id;             // GPU instance profile id (nvidia-smi mig -lgip)
  int8_t compute_slices;  // the "1g" of 1g.10gb: sevenths of the GPU's SMs
  int8_t size;            // memory slices occupied
  uint8_t starts;         // bit s: may start at slice s
  int8_t max_per_gpu;     // instances of this profile one GPU can hold
  bool media_extensions;  // +me: the GPU's one set of media engines; at most one per GPU
  int64_t memory_mib;     // what the instance offers
  int32_t sm_count;

  // Memory slices the instance occupies when it starts at `start`.
  uint8_t slots(int start) const { return static_cast<uint8_t>(((1u << size) - 1) << start); }
  bool may_start_at(int start) const {
    return start >= 0 && start < kMigSlots && (starts >> start) & 1;
  }
  // Compute reserved, in milli-GPU: compute slices / 7 (7g = 1000).
  int32_t compute_milli() const { return compute_slices == 7 ? 1000 : compute_slices * 1000 / 7; }
};

// The MIG profiles of one GPU model, largest first (7g, 4g, 3g, 2g, 1g.20gb-style, 1g, 1g+me).
struct MigModel {
  std::string_view model;  // tessera's model name: "A100-40GB", "A100-80GB", "H100-80GB", ...
  std::span<const MigProfile> profiles;

  // Index in `profiles`, or -1.
  int Find(std::string_view profile) const;
  std::vector<std::string> ProfileNames() const;
};

// The MIG table for a GPU model name (tessera's name or nvidia-smi's, e.g. "A100-SXM4-80GB",
// "NVIDIA H100 80GB HBM3"), or nullptr when tessera has none (the GPU cannot be MIG-enabled).
const MigModel* FindMigModel(std::string_view gpu_model);
// Models with a MIG table, for messages.
std::vector<std::string> MigModelNames();
// Whether any known MIG model has a profile of this name ("1g.10gb").
bool IsKnownMigProfile(std::string_view profile);

// One configured GPU instance: profile (index in its MigModel) and start slice.
struct MigPlacement {
  int8_t profile = -1;
  int8_t start = -1;
  bool operator==(const MigPlacement&) const = default;
};

// Whether instance `a` is in the way of instance `b` on one GPU: they share a memory slice, or both
// need the GPU's one set of media engines (+me profiles).
bool MigInstancesConflict(const MigModel& model, MigPlacement a, MigPlacement b);

// "1g.10gb@0".
std::string MigPlacementName(const MigModel& model, MigPlacement p);

// Checks a set of instances on one GPU: known profiles, allowed starts, no shared slice, at most
// one +me instance, per-profile limits. `where` prefixes errors ("node a GPU 2").
[[nodiscard]] absl::Status ValidateMigInstances(const MigModel& model,
                                                const std::vector<MigPlacement>& instances,
                                                std::string_view where);

}  // namespace tessera::core
