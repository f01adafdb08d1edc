// What is free, per node and per GPU, and the one place where grants are applied and reverted.
//
// Invariants (checked on every Apply and Revert, always on):
//  - no GPU has more memory or compute granted than it has (free amounts never go negative);
//  - an exclusive GPU has exactly one grant, and a GPU with any grant is never granted exclusively;
//  - a GPU's shares all use one ShareMode (shim or MPS);
//  - node CPU and memory are never over-committed;
//  - a GPU with no grant has all its memory and compute free;
//  - MIG (model/mig.h): only MIG-enabled GPUs hold MIG instances and MIG grants, and they hold
//    nothing else; their configured instances use allowed start slices only and never share a
//    slice; every MIG grant is exactly one assigned instance; MIG GPUs are never "whole free".
// Every change bumps the node's version so that policies can cache per-node results.
//
// MIG model: a MIG-enabled GPU has configured GPU instances (from the node's initial layout or
// created for pods), each assigned to one pod or idle. A pod's MIG grant takes an idle instance
// of its profile, or creates one in unconfigured slices, or (a re-partitioning plan) destroys
// idle instances in the way and creates its own (Placement::mig_plan). Release leaves the
// instance configured and idle, as a node's MIG manager does; Revert (rollback of a gang or a
// what-if) restores the configuration exactly as it was.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/model/cluster.h"
#include "core/model/placement.h"

namespace tessera::core {

// The configured GPU instances of one MIG-enabled GPU.
struct MigGpuState {
  struct Instance {
    MigPlacement placement;
    bool assigned = false;
  };
  absl::InlinedVector<Instance, 7> instances;
  uint8_t configured = 0;  // memory slices of all instances
  uint8_t assigned = 0;    // memory slices of assigned instances

  // The instance at exactly this profile and start, or nullptr.
  const Instance* Find(MigPlacement p) const {
    for (const Instance& i : instances) {
      if (i.placement == p) return &i;
    }
    return nullptr;
  }
};

struct GpuState {
  int64_t free_memory_mib = 0;
  int32_t free_compute_milli = 0;
  int32_t grants = 0;      // pods holding a grant on this GPU
  int32_t mps_grants = 0;  // of which shares enforced by MPS (ShareMode::kMps)
  bool exclusive = false;  // held whole by one pod

  // Whether a share enforced by `mode` may join the shares here: a GPU's shares all use one
  // mode (the shim and MPS cannot serve one GPU at once).
  bool TakesShareMode(ShareMode mode) const {
    return mode == ShareMode::kMps ? mps_grants == grants : mps_grants == 0;
  }
};

class ClusterState {
 public:
  explicit ClusterState(const Cluster& cluster);
  // A copy of `other` for `cluster`, an equal copy of other's cluster (an engine's copy).
  // A copy of `other` for `cluster` (a copy of other's cluster), with room for a few nodes to
  // join without moving every node's state (what-if copies add nodes).
  ClusterState(const ClusterState& other, const Cluster& cluster);

  const Cluster& cluster() const { return *cluster_; }
  int node_count() const { return cluster_->node_count(); }

  int64_t free_cpu_milli(NodeId n) const { return nodes_[n.value()].free_cpu_milli; }
  int64_t free_memory_mib(NodeId n) const { return nodes_[n.value()].free_memory_mib; }
  std::span<const GpuState> gpus(NodeId n) const {
    const NodeState& s = nodes_[n.value()];
    return {gpus_.data() + s.gpu_begin, static_cast<size_t>(s.gpu_count)};
  }
  const GpuState& gpu(NodeId n, int g) const { return gpus_[nodes_[n.value()].gpu_begin + g]; }
  // GPUs with no grant at all.
  uint64_t whole_free_mask(NodeId n) const { return nodes_[n.value()].whole_free_mask; }
  int whole_free_count(NodeId n) const { return __builtin_popcountll(whole_free_mask(n)); }
  // Bumped on every change to the node.
  uint64_t version(NodeId n) const { return nodes_[n.value()].version; }
  // Whether the node takes new pods: live in the cluster and not cordoned.
  bool accepts_pods(NodeId n) const { return cluster_->live(n) && !nodes_[n.value()].cordoned; }

  // Node changes (the engine's): (re)initialises `n` from the cluster's spec, all free (a node
  // just added, or re-specified after every grant on it was returned); the version goes on
  // counting. Cordoning keeps what the node holds. Touch bumps the version only (something
  // outside the state changed what the policies should think of the node).
  void InitNode(NodeId n);
  void SetCordoned(NodeId n, bool cordoned);
  void Touch(NodeId n) { ++nodes_[n.value()].version; }

  // The configured MIG instances of GPU `g` of `n` (empty for a GPU not in MIG mode).
  const MigGpuState& mig(NodeId n, int g) const { return mig_[nodes_[n.value()].gpu_begin + g]; }

  // Whether `p` can be applied, and if not, why (for people).
  bool CanApply(const Placement& p, std::string* why = nullptr) const;
  // Applies a placement. A placement that breaks an invariant is a bug in the caller: CHECK.
  void Apply(const Placement& p);
  // Returns what `p` took, exactly: MIG instances it created are removed and those it destroyed
  // come back (gang rollback, what-if). `p` must have been applied.
  void Revert(const Placement& p);
  // A pod ended: returns what `p` took, but its MIG instance stays configured, idle.
  void Release(const Placement& p);

  // Cluster-wide figures.
  int gpus_in_use() const { return gpus_in_use_; }
  int64_t allocated_compute_milli() const { return allocated_compute_milli_; }
  int64_t allocated_gpu_memory_mib() const { return allocated_gpu_memory_mib_; }
  int64_t allocated_cpu_milli() const { return allocated_cpu_milli_; }

  // Recomputes everything from scratch and CHECKs it against the incremental state (tests).
  void CheckInvariants() const;

 private:
  struct NodeState {
    int64_t free_cpu_milli = 0;
    int64_t free_memory_mib = 0;
    uint64_t whole_free_mask = 0;
    uint64_t version = 0;
    int32_t gpu_begin = 0;
    int32_t gpu_count = 0;
    bool cordoned = false;
  };

  void Return(const Placement& p, bool keep_mig_instance);

  // Every member is copied by the copy constructor above: keep it in step.
  const Cluster* cluster_;
  std::vector<NodeState> nodes_;
  std::vector<GpuState> gpus_;
  std::vector<MigGpuState> mig_;  // parallel to gpus_
  int gpus_in_use_ = 0;
  int64_t allocated_compute_milli_ = 0;
  int64_t allocated_gpu_memory_mib_ = 0;
  int64_t allocated_cpu_milli_ = 0;
};

}  // namespace tessera::core
