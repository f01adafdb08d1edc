// What `tessera status` shows: per node and GPU what is granted against what there is, the pods
// on each GPU and MIG instance, the pods waiting for GPUs with the scheduler's reason, per-queue
// rows, and cluster totals, including how much free GPU memory the pending pods cannot use.
//
// Built from a ClusterSnapshot (one list of nodes, one of pods) and the ledger the snapshot
// rebuilds, so "free" means what the scheduler would consider free. Pure computation: no I/O.
// Rendered as text for people (RenderStatusText) or as the stable JSON document of
// docs/operations.md (StatusToJson: fields are only ever added, never renamed or removed).
//
// Stranded memory, worked example: GPU A has 6Gi free of 80Gi, GPU B is empty (80Gi free), and
// the pending pods ask a 10Gi share and 2 whole GPUs. A's 6Gi is smaller than every pending ask
// (the share needs 10Gi, a whole GPU needs all 80Gi), so it is "in pieces too small"; B's 80Gi
// can take the share, so it is usable. With nothing pending, nothing is stranded.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/queues/queue_set.h"
#include "k8s/snapshot/snapshot.h"
#include "k8s/status/agent_usage.h"
#include "nlohmann/json.hpp"
#include "records/queue.h"
#include "records/reservation.h"

namespace tessera::k8s {

struct GpuPodGrant {
  std::string pod;  // "ns/name"
  int64_t memory_mib = 0;
  int32_t compute_milli = 0;  // 0: best-effort time sharing
  bool exclusive = false;
  std::string mig;    // "3g.40gb@4" for a MIG instance
  bool shown = true;  // false when --namespace hides it (it still counts in the GPU's figures)
  // What the node's agent measured for it on this GPU (StatusOptions::agent_usage), if read.
  std::optional<PodGpuUsage> usage;
};

struct MigInstanceStatus {
  std::string profile;  // "3g.40gb"
  int32_t start = 0;
  std::string pod;  // the pod holding it; empty when idle
};

struct GpuStatus {
  int32_t index = 0;
  std::string uuid;
  std::string model;
  int64_t memory_mib = 0;
  bool healthy = true;
  std::string health_reason;  // "XID 79: GPU has fallen off the bus"
  // Kept free by the scheduler as a hot spare for gang replacements (its spareGpusPerDomain, as
  // the node's tessera.dev/spare-gpus annotation says).
  bool spare = false;
  std::vector<int32_t> xids;
  int64_t memory_granted_mib = 0;
  int32_t compute_granted_milli = 0;  // whole GPUs count 1000
  bool exclusive = false;             // held whole by one pod
  bool mig_enabled = false;
  std::vector<MigInstanceStatus> mig_instances;
  std::vector<GpuPodGrant> pods;
  int64_t free_memory_mib = 0;  // what the engine has free (0 on an exclusive or MIG GPU)
  // Free memory here that no pending pod could use now (see the class comment); 0 when usable.
  int64_t stranded_mib = 0;
  bool stranded_too_small = false;  // ... because it is smaller than every pending ask
};

struct NodeStatus {
  std::string name;
  bool ready = false;
  bool cordoned = false;
  int64_t cpu_milli = 0;            // allocatable
  int64_t memory_mib = 0;           // allocatable
  int64_t cpu_requested_milli = 0;  // by the pods bound to it (as the scheduler counts them)
  int64_t memory_requested_mib = 0;
  std::string inventory_error;  // the inventory annotation is there but unusable
  std::string gpus_blocked;     // why its GPUs take no new pods (a pod whose GPUs are unknown)
  std::string interconnect;     // "NVLink", "PCIe", "" without GPUs
  std::vector<GpuStatus> gpus;
  int pods = 0;  // bound pods (of every namespace), GPU or not
};

struct PendingPodStatus {
  std::string pod;             // "ns/name"
  std::string ask;             // "a share of one GPU (4Gi memory, 25% compute)"
  int32_t gpus = 0;            // GPUs asked (whole GPUs; 1 for a share or MIG)
  int64_t gpu_memory_mib = 0;  // a share's memory (0 for whole GPUs and MIG)
  int32_t gpu_compute_milli = 0;
  std::string gang;  // empty when not a gang member
  std::string queue;
  int32_t priority = 0;
  // The scheduler's last word (the PodScheduled=False message), the pod's own input error, or
  // "waiting for scheduling gates" / "not tried yet".
  std::string reason;
  bool never_fits = false;  // the engine says no node of this cluster could ever take it
  // The scheduler's scale-up signal for it (condition tessera.dev/ScaleUp); empty when none.
  std::string scale_up;
  std::string created;           // metadata.creationTimestamp
  int64_t waiting_seconds = -1;  // since creation; -1 when unknown
};

// Room the scheduler holds for a waiting pod or gang (reservations with backfill), as the owner's
// waiting pods' condition tessera.dev/Reserved says (records/reservation.h). Only pods still
// pending are read (a bound pod's condition is stale). One row per owner; the pods of a gang that
// disagree (a write on its way) give the row of the pod that shows the latest.
struct ReservationStatus {
  bool gang = false;              // the owner is a gang
  std::string owner;              // "ns/name" or "ns/gang"; the pod's key when `error` is set
  std::vector<std::string> pods;  // its waiting pods showing it (of the namespace shown), by key
  std::vector<records::ReservationRecord::Site> sites;  // the GPUs held, per node
  std::string since;              // when the room was reserved (lastTransitionTime, RFC 3339)
  int64_t held_seconds = -1;      // since then; -1 when unknown
  std::string expected_start;     // when the owner is expected to start (RFC 3339)
  int64_t starts_in_seconds = 0;  // from now; negative when the estimate is overdue
  std::string error;  // the condition's message cannot be read (its text then), else empty
};

// One row per queue: every Queue object (queues.tessera.dev) and every queue a pod names (the
// tessera.dev/queue annotation; "default" when absent), parents before children. The figures
// are the scheduler's (k8s/scheduler/queue_book.h over core::QueueSet, from the same listed
// objects): cluster-wide, whatever --namespace shows. Resources are in queue units
// (core/queues/resources.h): gpu in milli-GPU (a share counts its fraction), gpuMemory in MiB,
// gpuCompute in milli-GPU.
struct QueueStatus {
  std::string name;
  int running = 0;     // bound pods holding GPUs (of the namespace shown)
  int pending = 0;     // pending GPU pods (of the namespace shown)
  int gpus_whole = 0;  // whole GPUs held (of the namespace shown)
  int64_t memory_granted_mib = 0;
  int64_t compute_granted_milli = 0;
  std::string parent;   // "" top level
  std::string invalid;  // why pods may not use it ("" usable)
  core::QueueResources deserved, fair_share, allocated, borrowed;
  core::QueueResources pending_ask;  // what its waiting pods ask
  int64_t pending_pods = 0;          // its waiting pods (all namespaces)
  // What it held lately (core/queues/usage_history.h), from its status.usage carried to now as
  // the scheduler carries it (the time since counts as holding what it holds now); zero when the
  // scheduler keeps no usage (half-life 0).
  core::QueueResources usage;
};

// A running GPU pod of the namespace shown (--namespace), with the GPUs its
// tessera.dev/assignment grants: listed even when the nodes cannot be read.
struct RunningPodStatus {
  std::string pod;  // "ns/name"
  std::string node;
  std::string queue;
  std::vector<records::AssignedGpu> gpus;
};

struct StatusTotals {
  int nodes = 0;
  int gpu_nodes = 0;
  int gpus = 0;
  int gpus_in_use = 0;  // with any grant
  int gpus_exclusive = 0;
  int gpus_unhealthy = 0;
  int gpus_spare = 0;  // kept as hot spares (GpuStatus::spare)
  int64_t memory_mib = 0;
  int64_t memory_granted_mib = 0;
  // What the running pods asked (a whole GPU asks all of its memory, a MIG instance its slice).
  int64_t memory_requested_mib = 0;
  int64_t compute_milli = 0;
  int64_t compute_granted_milli = 0;
  int running_gpu_pods = 0;
  int pending_gpu_pods = 0;
  int64_t pending_memory_mib = 0;  // shares asked by pending pods
  int pending_whole_gpus = 0;      // whole GPUs asked by pending pods
  int pending_mig = 0;             // MIG instances asked by pending pods
  int64_t free_memory_mib = 0;     // on GPUs of nodes that take pods, spares apart
  // Free memory no pending pod can use now, and the part of it in pieces smaller than every
  // pending ask. Both 0 with nothing pending.
  int64_t stranded_mib = 0;
  int64_t stranded_too_small_mib = 0;
};

struct ClusterStatus {
  std::string server;
  std::chrono::system_clock::time_point taken_at{};
  double read_seconds = 0;
  std::string scheduler_name;
  std::vector<NodeStatus> nodes;          // every node with GPUs (or a bad inventory), by name
  std::vector<PendingPodStatus> pending;  // by creation time, then key
  std::vector<QueueStatus> queues;        // by name
  std::vector<ReservationStatus> reservations;  // by expected start, then owner
  // The scheduler's usage half-life as its Queues' status says ("1h"; empty: it keeps none).
  std::string queue_usage_half_life;
  StatusTotals totals;
  std::vector<SnapshotProblem> problems;
  std::string node_filter;       // --node (empty: all)
  std::string namespace_filter;  // --namespace (empty: all)
  // The snapshot's pods are this namespace's only (listed from it): the GPUs' figures, the
  // queues and the totals count only its pods.
  std::string pods_namespace;
  // The nodes could not be read (a namespace-scoped user): no node, GPU or total is known.
  std::string nodes_error;
  std::vector<RunningPodStatus> running;  // with --namespace: its running GPU pods, by key
};

struct StatusOptions {
  std::string scheduler_name = "tessera";
  std::string policy = "tessera";  // the engine the ledger is rebuilt with (what is free does not
                                   // depend on it; never-fits answers do not either)
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  // Show only this node (the totals stay cluster-wide). Must exist.
  std::string node;
  // Show only this namespace's pods (on GPUs and pending; the GPUs' figures and the totals stay
  // whole). Empty: all.
  std::string ns;
  std::chrono::system_clock::time_point now = std::chrono::system_clock::now();
  // The Queue objects (queues.tessera.dev) as read; nullopt when they could not be (no CRD):
  // then, as in the scheduler, every queue is implicit (nothing deserved, no limit).
  std::optional<std::vector<core::QueueSpec>> queues;
  // Queue objects that could not be decoded, by name, with why.
  std::vector<std::pair<std::string, std::string>> queue_errors;
  // The Queue objects' status.usage (records/queue.h), as the scheduler last wrote it.
  std::vector<records::QueueUsageStatus> queue_usage;
  // What the node agents measured per pod and GPU (agent_usage.h), when read (-o wide).
  const AgentUsage* agent_usage = nullptr;
};

// NotFound when options.node names no node of the snapshot.
[[nodiscard]] absl::StatusOr<ClusterStatus> ComputeStatus(const ClusterSnapshot& snapshot,
                                                          const StatusOptions& options);

struct RenderOptions {
  bool wide = false;  // every pod on a GPU, not the first few, with what its agent measured
  int bar_width = 20;
};
std::string RenderStatusText(const ClusterStatus& status, const RenderOptions& options = {});
// `tessera status -o json`'s document, written to `out` as it is made, without a tree (at 10,000
// nodes the tree cost more than the rest of the command: issue 33); `indent` -1 for one line.
// The one writer of the document.
void WriteStatusJson(const ClusterStatus& status, std::ostream& out, int indent = 2);
// The same document as a tree (tests, callers that edit it): WriteStatusJson's, parsed back.
nlohmann::json StatusToJson(const ClusterStatus& status);

// Seconds from an RFC 3339 time ("2026-03-01T10:00:00Z") to `now`; -1 when unreadable.
int64_t SecondsSince(const std::string& rfc3339, std::chrono::system_clock::time_point now);
// A wait for people: "45s", "12m", "3h", "2d"; "?" when unknown (negative).
std::string FormatWait(int64_t seconds);
// Milli-GPUs as GPUs without trailing zeros: 2500 -> "2.5", 1000 -> "1".
std::string FormatGpus(int64_t milli);

// "[######..............]": `used` of `total` in `width` cells (rounded up, so anything granted
// shows; never more than full).
std::string Bar(int64_t used, int64_t total, int width);

}  // namespace tessera::k8s
