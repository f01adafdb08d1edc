// Readers for Alibaba's GPU cluster trace (cluster-trace-gpu-v2023, "openb"), the workload of the
// FGD paper (USENIX ATC'23). See data/traces/README.md for the columns.
//
// Nodes (`openb_node_list_*.csv`): sn,cpu_milli,memory_mib,gpu,model. GPU memory is not in the
// trace; each model gets the memory in TraceGpuMemoryMiB (the trace asks for fractions of a GPU,
// which scale with the device's memory, so this figure changes no trace result). Links between
// GPUs are unknown and left as SYS (no topology preference).
//
// Pods (`openb_pod_list_*.csv`): name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,
// pod_phase,creation_time,deletion_time,scheduled_time]. Columns are found by name; the five
// `multigpu*` files have only the first five. Conversions follow the FGD simulator's loader
// (pod_csv_to_yaml.py): num_gpu 0 means CPU-only whatever gpu_milli says; gpu_milli above 1000 is
// read as 1000; gpu_milli 1000 on one GPU is a whole GPU, below 1000 a share (a fraction of the
// GPU's compute and memory); gpu_spec lists allowed GPU models separated by `|` (empty parts are
// dropped). A share of more than one GPU (num_gpu > 1 with gpu_milli < 1000) is an error; a pod
// asking for more GPUs than any node has is not an error here: the engine reports it as
// kNeverFits when it is placed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/node.h"
#include "core/model/request.h"

namespace tessera::sim {

struct TracePod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;                  // 0 for CPU-only pods
  int32_t gpu_milli = 0;                // per GPU, 1..1000; 0 for CPU-only pods
  std::vector<std::string> gpu_models;  // allowed models, in file order; empty = any
  std::string qos;
  std::string phase;
  std::optional<int64_t> creation_time;   // seconds
  std::optional<int64_t> deletion_time;   // seconds
  std::optional<int64_t> scheduled_time;  // seconds
  int line = 0;                           // where it came from, for messages

  // Total milli-GPU asked (num_gpu x gpu_milli).
  int64_t total_gpu_milli() const { return int64_t{num_gpu} * gpu_milli; }
  // The model constraint as the trace writes it ("V100M16|V100M32"); "" = any.
  std::string gpu_spec() const;
};

struct PodTrace {
  std::string source;  // file name
  std::vector<TracePod> pods;
  bool has_times = false;  // creation_time and deletion_time columns present
};

// Memory (MiB) tessera gives one GPU of a trace model: core's known figure when it has one, else
// the memory nvidia-smi reports for the model named by the trace (P100 16280, V100M16 16160,
// V100M32 32510, A10 22731); 32768 for the undisclosed G2/G3 and any other name.
int64_t TraceGpuMemoryMiB(std::string_view model);

// Parsers over text (`source` names it in errors) and file readers.
[[nodiscard]] absl::StatusOr<std::vector<core::NodeSpec>> ParseAlibabaNodes(
    std::string_view text, const std::string& source);
[[nodiscard]] absl::StatusOr<std::vector<core::NodeSpec>> ReadAlibabaNodes(const std::string& path);
[[nodiscard]] absl::StatusOr<PodTrace> ParseAlibabaPods(std::string_view text,
                                                        const std::string& source);
[[nodiscard]] absl::StatusOr<PodTrace> ReadAlibabaPods(const std::string& path);

// The engine's request for a trace pod (named `name`, which replays may make unique).
core::PodRequest ToPodRequest(const TracePod& pod, std::string name);

}  // namespace tessera::sim
