// The pod record `tessera.dev/assignment`: the scheduler's decision, written before binding, read
// by the node agent and by a restarted scheduler to rebuild its ledger.
//
//   {"version": 1, "node": "gpu-node-3",
//    "gpus": [{"index": 2, "uuid": "GPU-...", "memory_mib": 4096, "compute_milli": 250,
//              "exclusive": false}]}
//
// A MIG instance names its profile and start slice, and a change of the GPU's configured
// instances comes with it (the agent carries it out before starting the pod):
//   {"version": 1, "node": "a100-7",
//    "gpus": [{"index": 3, "memory_mib": 40192, "compute_milli": 428, "exclusive": false,
//              "mig": {"profile": "3g.40gb", "start": 4}}],
//    "mig_plan": {"create": true, "destroy": [{"profile": "1g.10gb", "start": 4}, ...]}}
//
// A share enforced by MPS (the pod's tessera.dev/gpu-sharing: mps) says so, "sharing": "mps";
// absent, the shim enforces it. A GPU's shares all use one of the two.
//
// A member of a gang says which, and how many of its members run with it placed (for an elastic
// gang, tessera.dev/gang-min, between min and size; written when the member is placed and not
// updated later: the Event "gang ns/g: 6 of 8 members running (min 4)" follows the growth):
//   "gang": {"name": "train", "size": 8, "min": 4, "running": 5}
// Records written before this field existed have none, and read as before.
//
// Reading follows the Kubernetes API conventions for machine-written objects: fields this
// version does not know are ignored (a newer scheduler may add some, and a rollback must still
// read its records); what cannot be interpreted (another version, a missing or malformed field,
// an unknown MIG profile) is an error naming the field. A caller that cannot read a pod's record
// must never treat its GPUs as free (see k8s/scheduler: the node stays blocked for GPU work).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "core/model/placement.h"

namespace tessera::records {

inline constexpr std::string_view kAssignmentAnnotation = "tessera.dev/assignment";
inline constexpr int kAssignmentVersion = 1;

struct AssignedGpu {
  core::GpuGrant grant;  // grant.mig is not used here: the record names the profile
  std::string uuid;
  std::string mig_profile;  // a MIG instance's profile ("3g.40gb"), else empty
  int32_t mig_start = -1;   // its start slice
  bool operator==(const AssignedGpu&) const = default;
};

struct MigInstanceRecord {
  std::string profile;
  int32_t start = 0;
  bool operator==(const MigInstanceRecord&) const = default;
};

// The gang of a member: its name (tessera.dev/gang), size, min (size when not elastic), and the
// members running once this one was placed, it included.
struct GangRecord {
  std::string name;
  int32_t size = 0;
  int32_t min = 0;
  int32_t running = 0;
  bool operator==(const GangRecord&) const = default;
};

struct Assignment {
  std::string node;
  std::vector<AssignedGpu> gpus;
  // For a MIG grant: create the instance (it is not configured yet), after destroying these idle
  // instances (a re-partitioning plan).
  bool mig_create = false;
  std::vector<MigInstanceRecord> mig_destroy;
  // For a gang member; not what the pod holds (ledgers comparing holdings leave it out).
  std::optional<GangRecord> gang;
  bool operator==(const Assignment&) const = default;
};

std::string AssignmentToJson(const Assignment& assignment);
[[nodiscard]] absl::StatusOr<Assignment> AssignmentFromJson(std::string_view json);

// The record of an engine placement: node and GPU UUIDs from the cluster, MIG profiles by name.
Assignment MakeAssignment(const core::Cluster& cluster, const core::Placement& placement);
// Back to a placement (for Engine::Restore). Errors name what does not match the cluster.
[[nodiscard]] absl::StatusOr<core::Placement> AssignmentToPlacement(const core::Cluster& cluster,
                                                                    const Assignment& assignment);

}  // namespace tessera::records
