// The pod record `tessera.dev/assignment`: the scheduler's decision, written before binding, read
// by the node agent and by a restarted scheduler to rebuild its ledger.
//
//   {"version": 1, "node": "gpu-node-3",
//    "gpus": [{"index": 2, "uuid": "GPU-...", "memory_mib": 4096, "compute_milli": 250,
//              "exclusive": false}]}
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/placement.h"

namespace tessera::records {

inline constexpr std::string_view kAssignmentAnnotation = "tessera.dev/assignment";
inline constexpr int kAssignmentVersion = 1;

struct AssignedGpu {
  core::GpuGrant grant;
  std::string uuid;
};

struct Assignment {
  std::string node;
  std::vector<AssignedGpu> gpus;
};

std::string AssignmentToJson(const Assignment& assignment);
[[nodiscard]] absl::StatusOr<Assignment> AssignmentFromJson(std::string_view json);

}  // namespace tessera::records
