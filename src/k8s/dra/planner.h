// The mapping between ResourceClaims and the engine: what a pod's claims ask for, as one engine
// request restricted to the GPUs whose devices may serve it (ClaimPlanner::Plan), and what an
// engine placement becomes as claim allocations (ClaimPlanner::Allocate); and back, what an
// allocation holds on a node (HoldingOf). The engine itself never sees DRA's wire format
// (DESIGN.md): it places GPU asks on nodes, and this file owns every translation.
//
// A pod's claims, together, ask for one of (the engine's one ask per pod):
//   - N whole GPUs: requests without capacity requests (ExactCount), over any number of claims;
//     each GPU exclusive. Devices must match every request's class and selectors (when requests
//     differ, the GPUs must satisfy all of them: a conservative reading, documented).
//   - a share of one GPU: one request of count 1 with capacity requests (memory, compute),
//     consumed as kube-scheduler's allocator computes it (the request rounded up by the
//     capacity's requestPolicy, the policy's default, or the whole capacity when neither), on a
//     device that allows multiple allocations. A share that consumes the memory whole is held as
//     the whole GPU, which it is in effect.
//   - one MIG instance: one request of count 1 whose class and selectors match MIG partitions
//     (`gpu-<i>-mig-<profile>-<start>`, consuming the GPU's counters) and no whole GPU. The engine
//     places it with its MIG policy (core/topology/mig_select.h: which GPU in MIG mode and which
//     start slice), the same one classic `tessera.dev/mig` pods get, and the allocation names
//     the partition at that placement. The engine's MIG state is the counters' meaning: an
//     instance's memory slices and media engine, none shared, and a GPU in MIG mode takes no
//     whole or shared use. When the partitions matched span several profiles, each is an option,
//     the smallest first. The selectors must take every placement of a profile on a GPU or none
//     of them (tessera chooses the start slice); partitions on GPUs not in MIG mode (offered
//     when the agent may switch MIG mode on) are not used: the message says to turn MIG mode on.
// matchAttribute keeps a multi-GPU ask inside one value of the attribute on a node (each group of
// equal values is a candidate set); distinctAttribute is checked on the result. firstAvailable
// tries the alternatives in order (the first whose ask fits somewhere wins).
//
// Example: on two nodes of 8 H100s, a claim {request gpu: class gpu.tessera.dev, count 8,
// matchAttribute gpu.tessera.dev/nvlinkDomain} where node a's GPUs 0-3 are in domain x and 4-7 in
// y and node b's are all in z becomes Whole(8) with candidates (a, 0x0f), (a, 0xf0), (b, 0xff):
// only node b can take it.
//
// Refused with a reason naming the claim and request (never guessed): allocationMode All,
// adminAccess, shares of several GPUs in one request, shares combined with other requests,
// capacities other than memory and compute, selectors outside the CEL subset (cel.h). Waits
// (retried on changes): claims not created yet (templates: the resourceclaim controller),
// unknown classes, claims being deleted, claims allocated on different nodes, claims with 256
// consumers.
//
// Already allocated claims (shared by several pods, or a scheduler restarted between writing a
// claim and binding its pod) fix the node; the pod then only needs its reservation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/fit.h"
#include "core/model/cluster.h"
#include "core/model/placement.h"
#include "core/model/request.h"
#include "k8s/dra/cache.h"
#include "k8s/dra/cel.h"
#include "k8s/dra/objects.h"
#include "nlohmann/json.hpp"
#include "records/assignment.h"

namespace tessera::k8s::dra {

// The GPUs one request (with its claim's constraints) may take, per node of the engine's cluster.
struct Eligibility {
  std::vector<uint64_t> masks;  // by node id
  // The nodes with a non-empty mask, when every GPU of each is eligible (a NodeSet keeps the
  // engine's indexes in play); nullptr otherwise.
  std::shared_ptr<core::NodeSet> nodes;
  int devices = 0;  // eligible devices in the cluster
  // For a share: what it consumes, in engine units, on the hungriest eligible device; `whole`
  // when on some device it consumes the memory entirely.
  int64_t share_memory_mib = 0;
  int32_t share_compute_milli = 0;
  bool share_whole = false;
  // MIG: the request matches MIG partitions and no whole GPU. Per profile, smallest first, the
  // GPUs in MIG mode whose every partition of that profile is eligible, by node id.
  struct MigProfile {
    std::string profile;
    std::vector<uint64_t> masks;
  };
  std::vector<MigProfile> mig;
  // Non-empty: the request cannot be allocated at all, and why (a CEL error, a refused feature).
  std::string error;
  // Why devices were not eligible, for "does not fit" messages.
  std::string why_none;
};

// A claim a pod needs, as planned.
struct PlannedClaim {
  std::shared_ptr<const ClaimInfo> claim;
  bool allocate = false;  // true: the plan allocates it; false: it is allocated already
  // When allocating: the requests (the chosen firstAvailable alternative each), in order.
  std::vector<const ExactRequest*> requests;
  // The pod's uid is in status.reservedFor already.
  bool reserved = false;
};

struct PodPlan {
  enum class Kind { kReady, kWait, kInvalid };
  Kind kind = Kind::kReady;
  std::string reason;  // kWait / kInvalid: for the pod's owner

  // One way to satisfy every claim; Plan lists them in firstAvailable order.
  struct Option {
    core::GpuAsk gpu;
    std::vector<PlannedClaim> claims;
    // Restriction of the GPU ask: `nodes` (every GPU of those nodes) or `candidates` (nodes and
    // GPU masks; a node may appear once per matchAttribute group). Both unset: no GPUs asked.
    std::shared_ptr<const core::NodeSet> nodes;
    std::vector<core::Candidate> candidates;
    bool use_candidates = false;
    std::string why_none;  // non-empty: no device is eligible anywhere, and why
  };
  std::vector<Option> options;
  std::string fixed_node;  // allocated claims put the pod here
};

// One claim's allocation as written, and what it holds in the engine.
struct ClaimAllocation {
  std::shared_ptr<const ClaimInfo> claim;
  nlohmann::json allocation;    // status.allocation
  records::Assignment holding;  // its GPUs on the node (engine units)
};

class ClaimPlanner {
 public:
  explicit ClaimPlanner(DraCache& cache) : cache_(cache) {}

  // The plan for a pod's claims against the engine's cluster. `pod_uid` finds reservations.
  // `extra`: one more claim after the pod's own (its extended-resource claim, which may exist
  // only in memory until the binder creates it).
  PodPlan Plan(const PodClaims& claims, const std::string& ns, const std::string& pod_uid,
               const core::Cluster& cluster, std::shared_ptr<const ClaimInfo> extra = nullptr);

  // The allocations for `option`'s claims to allocate, given where the engine placed its ask
  // (`placement`: node and grants, handed out to the requests in order). Fails when the choice
  // breaks a claim's constraint (matchAttribute, distinctAttribute).
  absl::StatusOr<std::vector<ClaimAllocation>> Allocate(const PodPlan::Option& option,
                                                        const core::Placement& placement,
                                                        const core::Cluster& cluster);

  // What an allocated claim holds on its node: the GPUs of tessera's driver it names, whole
  // (exclusive) or shares as consumed, in engine units. No GPUs when it holds none of ours;
  // an error when it names devices this cache does not know (yet): never treat them as free.
  absl::StatusOr<records::Assignment> HoldingOf(const ClaimInfo& claim,
                                                const core::Cluster& cluster) const;

  // Forgets cached eligibilities (devices, classes or nodes changed).
  void Invalidate() { eligibility_.clear(); }

 private:
  std::shared_ptr<const Eligibility> EligibilityOf(const ExactRequest& r,
                                                   const core::Cluster& cluster);
  std::shared_ptr<const Eligibility> Compute(const ExactRequest& r, const core::Cluster& cluster);
  // Adds the options for these claims to `out` (one, or one per MIG profile); false with
  // `invalid` set when they cannot be combined.
  bool Combine(std::vector<PlannedClaim> claims, const core::Cluster& cluster,
               std::vector<PodPlan::Option>* out, std::string* invalid);
  // The MIG partitions a request matches, when it matches no whole GPU (Compute's second pass).
  void ComputeMig(const ExactRequest& r, const core::Cluster& cluster,
                  const std::vector<std::shared_ptr<const CelProgram>>& programs, Eligibility* e);
  std::shared_ptr<const CelProgram> Compiled(const std::string& expression, std::string* error);

  DraCache& cache_;
  // What the cached eligibilities were computed against.
  uint64_t generation_ = 0;
  int node_count_ = -1, live_count_ = -1;
  absl::flat_hash_map<std::string, std::shared_ptr<const Eligibility>> eligibility_;
  absl::flat_hash_map<std::string, std::pair<std::shared_ptr<const CelProgram>, std::string>>
      programs_;
};

// Capacity DRA-style: what a request consumes of one capacity of a device (kube-scheduler's
// calculateConsumedCapacity), or nullopt when the device cannot serve it (above the policy's
// maximum, its largest valid value, or the capacity).
std::optional<int64_t> ConsumedCapacity(std::optional<int64_t> requested,
                                        const DeviceCapacity& capacity);

// A fresh UUID (version 4) for a share's shareID.
std::string NewShareId();

// The nodeSelector of an allocation bound to `node`.
nlohmann::json NodeSelectorFor(const std::string& node);

}  // namespace tessera::k8s::dra
