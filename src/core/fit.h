// Whether a pod can go on a node right now, and which of its GPUs could take it. Shared by every
// policy, so that they differ only in preference, never in what they consider possible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster_state.h"
#include "core/model/request.h"

namespace tessera::core {

// Restricts a placement to some nodes, and on each to some GPUs (a gang inside one domain).
struct Candidate {
  NodeId node;
  uint64_t gpu_mask = ~0ULL;
};

// The nodes a pod may use at all, whatever is free on them: those whose taints it tolerates and
// whose labels match its nodeSelector and node affinity. One set serves every pod with the same
// constraints. Unlike a candidate list it keeps the policies' indexes in play: its id is unique in
// the process, so an index kept per request shape (shape_index.h) keeps one entry per set and
// stays exact. Example: a cluster of 10,000 GPU nodes and one tainted control-plane node; pods
// that do not tolerate the taint share one set of 10,000 nodes and are placed through the index.
//
// A set may change (Set) as nodes change, keeping its id: whoever changes membership must then
// have the engine re-evaluate that node (Engine::TouchNode), since indexes cache per set.
class NodeSet {
 public:
  // `allowed[i]`: node i of the cluster may be used.
  explicit NodeSet(std::vector<bool> allowed);
  // Nodes beyond the vector (a set made for a smaller cluster) are not in the set.
  bool Contains(NodeId node) const {
    return static_cast<size_t>(node.value()) < allowed_.size() && allowed_[node.value()];
  }
  // Adds or removes one node (growing the set for nodes added to the cluster).
  void Set(NodeId node, bool allowed);
  int size() const { return size_; }
  uint64_t id() const { return id_; }

 private:
  std::vector<bool> allowed_;
  int size_ = 0;
  uint64_t id_ = 0;
};

// One placement question, prepared once: the request with its model constraint resolved.
struct Query {
  Query(const ClusterState& state, const PodRequest& request,
        const std::vector<Candidate>* candidates = nullptr, const NodeSet* nodes = nullptr)
      : request(&request),
        models(state.cluster().ResolveModels(request.gpu_models)),
        candidates(candidates),
        nodes(nodes) {}

  const PodRequest* request;
  ModelSet models;
  const std::vector<Candidate>* candidates;  // nullptr = every node, every GPU
  const NodeSet* nodes;                      // nullptr = no node excluded
};

// Why a node cannot take a pod, most fundamental first.
enum class Reject : uint8_t {
  kNone,
  kCordoned,      // takes no new pods (cordoned: spec.unschedulable), or removed
  kExcluded,      // not in the pod's NodeSet (taints, nodeSelector, node affinity)
  kCpu,           // not enough CPU free
  kMemory,        // not enough host memory free
  kNoGpuOfModel,  // no GPU of an allowed model (or none left in the allowed set)
  kTooFewGpus,    // fewer fully free GPUs than asked
  kNoGpuRoom,     // no GPU with enough free memory/compute for the share
  kShareMode,     // room for the share only on GPUs whose shares use the other ShareMode
  kTopology,      // GPUs are free but no set meets the required interconnect
  kMigMode,       // the allowed GPUs are all in MIG mode (they take MIG instances only)
  kNoMigGpu,      // a MIG ask, but no MIG-enabled GPU offering the profile
  kNoMigRoom,     // MIG GPUs offer the profile, but none has the slices free
  kCount,         // number of reasons
};

struct NodeFit {
  Reject reject = Reject::kNone;
  // GPUs that could take (part of) the pod: for whole asks, the fully free ones; for shares,
  // those with room. Limited to `allowed` and to allowed models.
  uint64_t gpus = 0;
  bool ok() const { return reject == Reject::kNone; }
};

NodeFit CheckNode(const ClusterState& state, const Query& query, NodeId node,
                  uint64_t allowed = ~0ULL);

// Memory and compute a share/fraction ask reserves on GPU `g` of `node`.
int64_t ShareMemoryFor(const ClusterState& state, const GpuAsk& ask, NodeId node, int g);

// The grants for a pod given the chosen GPUs (whole: every GPU in `mask`, exclusive; share: the
// single GPU in `mask`), with the pod's CPU and memory. Not for MIG asks: MakeMigPlacement.
Placement MakePlacement(const ClusterState& state, const PodRequest& request, NodeId node,
                        uint64_t mask);
// The grant of a MIG instance `placement` on GPU `gpu` (its profile's memory and compute), with
// how the GPU's configured instances change.
Placement MakeMigPlacement(const ClusterState& state, const PodRequest& request, NodeId node,
                           int gpu, MigPlacement placement, const MigPlan& plan);

// If no node of the cluster could take the pod even when empty, the reason; else nullopt.
std::optional<std::string> NeverFitsReason(const ClusterState& state, const Query& query);

// Counts, over the query's candidates, why each node rejects the pod now. `policy_declined`
// reports nodes that passed CheckNode but where the policy found no acceptable GPU set.
std::string ExplainNoFit(const ClusterState& state, const Query& query,
                         const std::vector<NodeId>& policy_declined);

// "8 GPUs", "a 4Gi share of one GPU", ... for messages.
std::string DescribeAsk(const PodRequest& request);

}  // namespace tessera::core
