// The workload file (YAML) of `tessera simulate --workload`. Jobs arrive in file order; the pods
// of a job are named JOB-0 .. JOB-(replicas-1).
//
//   jobs:
//     - name: infer
//       replicas: 20
//       cpu: 1                     # per pod; default 0
//       memory: 8Gi                # host memory per pod; default 0
//       gpu: {memory: 4Gi, compute: 25}     # a share: GPU memory and/or percent of compute
//       # gpu: {count: 2, topology: nvlink|pcie-switch|numa, mode: required|preferred}
//       # gpu: {fraction: 0.5}               # trace style: half of one GPU's compute and memory
//       # gpu: {mig: 1g.10gb}                # one MIG instance of this profile (tessera.dev/mig)
//       # topology "node" (all on one node) is what any multi-GPU pod gets anyway
//       model: A100-80GB           # optional GPU model constraint (a name or a list)
//       gang: {size: 8, topology: nvlink-domain, mode: required}   # optional
//       # gang: {size: 8, min: 4, ...}   # elastic: starts with 4 or more members, up to 8
//       priority: 100              # optional
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/request.h"

namespace tessera::sim {

struct Job {
  std::string name;
  int32_t replicas = 1;
  core::PodRequest pod;               // the template; name and gang filled per replica
  std::optional<core::GangAsk> gang;  // size, level, required (name filled per gang)
  int line = 0;                       // where the job starts in its file, for messages
};

struct Workload {
  std::vector<Job> jobs;
};

[[nodiscard]] absl::StatusOr<Workload> ParseWorkloadYaml(std::string_view text,
                                                         std::string_view source);
[[nodiscard]] absl::StatusOr<Workload> LoadWorkloadFile(const std::string& path);

// A job's pods in order; members of one gang are consecutive. Gang k of job J is named J when
// the job is one gang, else J-g<k>.
std::vector<core::PodRequest> ExpandJob(const Job& job);

}  // namespace tessera::sim
