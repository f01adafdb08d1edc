// Names of the node side of the Kubernetes contract that the agent writes (DESIGN.md
// "Kubernetes-facing contract"): the labels it puts on a GPU node, the record of which of them it
// owns, and the extended resources it advertises. Kept in one small file so that it merges easily
// with the contract's other names (records/inventory.h, records/assignment.h).
//
// Extended resources, in the units pods ask them in (DESIGN.md "Units"):
//   tessera.dev/gpu          GPUs                      node: the number of GPUs
//   tessera.dev/gpu-memory   bytes (a quantity, 4Gi)    node: the sum of its GPUs' memory, in Mi
//   tessera.dev/gpu-compute  percent of one GPU         node: 100 per GPU
// The kubelet admits a pod only if these fit what the node advertises; placement itself is the
// scheduler's, per GPU, from the inventory.
#pragma once

#include <string_view>

namespace tessera::records {

inline constexpr std::string_view kGpuResourceName = "tessera.dev/gpu";
inline constexpr std::string_view kGpuMemoryResourceName = "tessera.dev/gpu-memory";
inline constexpr std::string_view kGpuComputeResourceName = "tessera.dev/gpu-compute";
inline constexpr int kGpuComputePerGpu = 100;

// The GPUs' model ("H100-80GB"; "mixed" when a node has several), and how many there are.
inline constexpr std::string_view kGpuModelLabel = "tessera.dev/gpu-model";
inline constexpr std::string_view kGpuCountLabel = "tessera.dev/gpu-count";
// The node's NVLink domain: "<fabric cluster UUID>.<clique id>" on GB200-class systems, where
// GPUs of several nodes share NVLink (the gang topology level `nvlink-domain`).
inline constexpr std::string_view kNvLinkDomainLabel = "tessera.dev/nvlink-domain";
// Which labels the agent wrote (comma-separated keys), so that it removes only its own when they
// no longer apply and never one an administrator set.
inline constexpr std::string_view kAgentLabelsAnnotation = "tessera.dev/agent-labels";

}  // namespace tessera::records
