// Names of the node side of the Kubernetes contract that only the agent writes: the labels it puts
// on a GPU node besides the topology levels, and the record of which labels it owns. The contract's
// other names, the extended resources among them, are in records/names.h.
//
// The extended resources a node advertises, in the units pods ask them in (DESIGN.md "Units"):
//   tessera.dev/gpu          GPUs                      node: the number of GPUs
//   tessera.dev/gpu-memory   bytes (a quantity, 4Gi)    node: the sum of its GPUs' memory, in Mi
//   tessera.dev/gpu-compute  percent of one GPU         node: 100 per GPU
// The kubelet admits a pod only if these fit what the node advertises; placement itself is the
// scheduler's, per GPU, from the inventory.
#pragma once

#include <string_view>

#include "records/names.h"

namespace tessera::records {

// tessera.dev/gpu-compute is a percentage of one GPU: a node has 100 per GPU.
inline constexpr int kGpuComputePerGpu = 100;

// The GPUs' model ("H100-80GB"; "mixed" when a node has several), and how many there are.
inline constexpr std::string_view kGpuModelLabel = "tessera.dev/gpu-model";
inline constexpr std::string_view kGpuCountLabel = "tessera.dev/gpu-count";
// The agent also sets kNvlinkDomainLabel (records/names.h) on GB200-class nodes: "<fabric cluster
// UUID>.<clique id>", where GPUs of several nodes share NVLink.
// Which labels the agent wrote (comma-separated keys), so that it removes only its own when they
// no longer apply and never one an administrator set.
inline constexpr std::string_view kAgentLabelsAnnotation = "tessera.dev/agent-labels";

}  // namespace tessera::records
