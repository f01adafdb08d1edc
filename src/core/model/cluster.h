// The cluster: its nodes, looked up by id or name, and facts about its largest resources that let
// the engine tell "does not fit now" from "can never fit here".
#pragma once

#include <bitset>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/model/ids.h"
#include "core/model/node.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {

// GPU models are interned to small ids so that model constraints are a bitset test.
inline constexpr int kMaxGpuModels = 256;
using ModelSet = std::bitset<kMaxGpuModels>;

class Cluster {
 public:
  // Validates the nodes (unique names, link matrix sizes, GPU counts, positive capacities).
  [[nodiscard]] static absl::StatusOr<Cluster> Create(std::vector<NodeSpec> nodes);

  // Changes in place (the engine's AddNode / UpdateNode / RemoveNode keep the state beside it in
  // step). Ids are stable: a node added gets the next id, a node removed leaves its id unused
  // forever (not live: no name, no capacity, excluded from everything).
  [[nodiscard]] absl::StatusOr<NodeId> AddNode(NodeSpec spec);
  // A new spec for a live node of the same name, validated as Create validates.
  [[nodiscard]] absl::Status UpdateNode(NodeId id, NodeSpec spec);
  void RemoveNode(NodeId id);
  bool live(NodeId id) const { return !removed_[id.value()]; }
  int live_count() const { return node_count() - removed_count_; }

  // Slots, live or removed: ids run 0..node_count()-1.
  int node_count() const { return static_cast<int>(nodes_.size()); }
  const NodeSpec& node(NodeId id) const { return nodes_[id.value()]; }
  const std::vector<NodeSpec>& nodes() const { return nodes_; }
  // Invalid id when absent.
  NodeId FindNode(std::string_view name) const;

  int total_gpus() const { return total_gpus_; }
  int max_gpus_per_node() const { return max_gpus_per_node_; }

  // Model names in the cluster, indexed by model id.
  const std::vector<std::string>& models() const { return models_; }
  // The model ids allowed by a list of names (empty list = every model). Names not present in
  // the cluster match nothing.
  ModelSet ResolveModels(const std::vector<std::string>& names) const;
  // Model id of each GPU of a node.
  const std::vector<uint8_t>& gpu_models(NodeId id) const { return gpu_models_[id.value()]; }
  // GPUs of `id` whose model is in `allowed`.
  uint64_t ModelMask(NodeId id, const ModelSet& allowed) const;

  // MIG-enabled GPUs of a node (they offer MIG slices only).
  uint64_t mig_mask(NodeId id) const { return mig_masks_[id.value()]; }
  // The MIG table of GPU `g` of `id` when it is MIG-enabled, else nullptr.
  const MigModel* mig_model(NodeId id, int g) const { return mig_models_[id.value()][g]; }

  // The node's topology prepared for multi-GPU selection. Nodes with the same links, NUMA layout
  // and NVLink generation share one (a cluster of 1,000 DGX nodes prepares one).
  const GpuSetSelector& gpu_selector(NodeId id) const {
    return *selectors_[selector_of_[id.value()]];
  }

 private:
  std::vector<NodeSpec> nodes_;
  std::vector<std::string> models_;
  std::vector<std::vector<uint8_t>> gpu_models_;
  // Per node: model id when every GPU has the same model, else -1.
  std::vector<int16_t> uniform_model_;
  absl::flat_hash_map<std::string, NodeId> by_name_;
  std::vector<std::shared_ptr<const GpuSetSelector>> selectors_;  // shared: Cluster stays copyable
  std::vector<int32_t> selector_of_;
  std::vector<uint64_t> mig_masks_;
  std::vector<std::vector<const MigModel*>> mig_models_;
  std::vector<uint8_t> removed_;
  int removed_count_ = 0;
  absl::flat_hash_map<std::string, int32_t> selector_by_topology_;
  int total_gpus_ = 0;
  int max_gpus_per_node_ = 0;

  // Validates `n` and (re)derives slot `index` from it (index == node_count() appends).
  absl::Status SetSlot(int index, NodeSpec n);
  void RecountGpus();
};

}  // namespace tessera::core
