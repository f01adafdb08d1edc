// The names of the Kubernetes-facing contract (DESIGN.md "Kubernetes-facing contract"): extended
// resources, pod annotations and node labels. One home for them, so that every side of the
// contract (the scheduler, the node agent, tests, benchmarks) spells them the same way without
// linking another's code. The records' own annotations are declared beside their formats:
// kInventoryAnnotation (records/inventory.h) and kAssignmentAnnotation (records/assignment.h);
// both are included here.
#pragma once

#include <string_view>

#include "core/topology/domains.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::records {

// Extended resources, in a container's resources.limits (or requests). Nodes advertise the same
// names in status.capacity/allocatable so that kubelet admission accounts them.
inline constexpr std::string_view kGpuResource = "tessera.dev/gpu";                 // whole GPUs
inline constexpr std::string_view kGpuMemoryResource = "tessera.dev/gpu-memory";    // a share
inline constexpr std::string_view kGpuComputeResource = "tessera.dev/gpu-compute";  // percent

// Pod annotations: intent beyond the resources.
// nvlink | pcie-switch | numa | node, for pods asking several whole GPUs.
inline constexpr std::string_view kTopologyAnnotation = "tessera.dev/topology";
// required | preferred (default preferred).
inline constexpr std::string_view kTopologyModeAnnotation = "tessera.dev/topology-mode";
// A MIG instance of this profile ("1g.10gb") on a MIG-enabled GPU, instead of tessera.dev/gpu.
inline constexpr std::string_view kMigAnnotation = "tessera.dev/mig";
// The GPU models the pod accepts, comma-separated ("A100-80GB,H100-80GB"); absent: any model.
inline constexpr std::string_view kGpuModelAnnotation = "tessera.dev/gpu-model";
inline constexpr std::string_view kGangAnnotation = "tessera.dev/gang";           // gang name
inline constexpr std::string_view kGangSizeAnnotation = "tessera.dev/gang-size";  // 1..10000
// An elastic gang: it starts once this many members fit together (1..gang-size; absent: all).
inline constexpr std::string_view kGangMinAnnotation = "tessera.dev/gang-min";
// A topology level ("nvlink-domain", "rack", ...) the whole gang stays inside.
inline constexpr std::string_view kGangTopologyAnnotation = "tessera.dev/gang-topology";
// required | preferred (default required).
inline constexpr std::string_view kGangTopologyModeAnnotation = "tessera.dev/gang-topology-mode";
inline constexpr std::string_view kQueueAnnotation = "tessera.dev/queue";  // queue name
// How the node enforces a share: "shim" (the CUDA shim, the default) or "mps" (the GPU's MPS
// daemon). A GPU runs MPS pods or shim pods, not both (src/agent/README.md).
inline constexpr std::string_view kGpuSharingAnnotation = "tessera.dev/gpu-sharing";
// A compute share's mode: "hard-cap" (the default: never more than its percentage) or
// "work-conserving" (also the time nobody else wants).
inline constexpr std::string_view kGpuComputeModeAnnotation = "tessera.dev/gpu-compute-mode";
inline constexpr int kMaxGangSize = 10'000;

// Kueue's pod groups (sigs.k8s.io/kueue pkg/controller/jobs/pod/constants): the group's name (a
// label) and how many pods it has (an annotation). Kueue admits a group's pods together by
// removing their scheduling gate (kKueueAdmissionGate); tessera places them as one gang.
inline constexpr std::string_view kKueueGroupNameLabel = "kueue.x-k8s.io/pod-group-name";
inline constexpr std::string_view kKueueGroupTotalCountAnnotation =
    "kueue.x-k8s.io/pod-group-total-count";
inline constexpr std::string_view kKueueAdmissionGate = "kueue.x-k8s.io/admission";

// Node labels: the default gang topology levels (core/topology/domains.h owns the defaults).
inline constexpr std::string_view kNvlinkDomainLabel = core::kNvlinkDomainLabel;
inline constexpr std::string_view kRackLabel = core::kRackLabel;
inline constexpr std::string_view kBlockLabel = core::kBlockLabel;
inline constexpr std::string_view kZoneLabel = core::kZoneLabel;

}  // namespace tessera::records
