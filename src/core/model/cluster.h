// The cluster: its nodes, looked up by id or name, and facts about its largest resources that let
// the engine tell "does not fit now" from "can never fit here".
#pragma once

#include <bitset>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/model/ids.h"
#include "core/model/node.h"
#include "core/model/shared_chunks.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {

// GPU models are interned to small ids so that model constraints are a bitset test.
inline constexpr int kMaxGpuModels = 256;
using ModelSet = std::bitset<kMaxGpuModels>;

// Copies are cheap: the nodes' specs and what is derived from them (slots) are kept in chunks of
// 256 slots, each shared between copies of the cluster and copied only when a copy changes it
// (a node added, updated or removed: its chunk), so a what-if copy of a 10,000-node cluster
// copies 40 pointers, not 10,000 specs, while the specs of one chunk stay side by side in memory
// for the engine's scans; the name index is shared too (a copy keeps the names it adds beside it).
class Cluster {
 public:
  // The node specs in id order (removed slots included, empty).
  class NodeSpecs {
   public:
    class Iterator {
     public:
      using iterator_category = std::forward_iterator_tag;
      using value_type = NodeSpec;
      using difference_type = std::ptrdiff_t;
      using pointer = const NodeSpec*;
      using reference = const NodeSpec&;
      Iterator() = default;
      reference operator*() const { return cluster_->node(NodeId(i_)); }
      pointer operator->() const { return &**this; }
      Iterator& operator++() {
        ++i_;
        return *this;
      }
      Iterator operator++(int) {
        Iterator old = *this;
        ++i_;
        return old;
      }
      bool operator==(const Iterator&) const = default;

     private:
      friend class NodeSpecs;
      Iterator(const Cluster* cluster, int i) : cluster_(cluster), i_(i) {}
      const Cluster* cluster_ = nullptr;
      int i_ = 0;
    };
    Iterator begin() const { return Iterator(cluster_, 0); }
    Iterator end() const { return Iterator(cluster_, cluster_->node_count()); }
    size_t size() const { return static_cast<size_t>(cluster_->node_count()); }
    const NodeSpec& operator[](size_t i) const {
      return cluster_->node(NodeId(static_cast<int>(i)));
    }
    // Copies of the specs (to build another cluster from).
    std::vector<NodeSpec> ToVector() const { return std::vector<NodeSpec>(begin(), end()); }

   private:
    friend class Cluster;
    explicit NodeSpecs(const Cluster* cluster) : cluster_(cluster) {}
    const Cluster* cluster_;
  };

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
  int node_count() const { return static_cast<int>(slots_.size()); }
  const NodeSpec& node(NodeId id) const { return slot(id.value()).spec; }
  NodeSpecs nodes() const { return NodeSpecs(this); }
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
  const std::vector<uint8_t>& gpu_models(NodeId id) const { return slot(id.value()).gpu_models; }
  // The model id every GPU of `id` has, or -1 where they differ (or it has none).
  int uniform_model(NodeId id) const { return slot(id.value()).uniform_model; }
  // GPUs of `id` whose model is in `allowed`.
  uint64_t ModelMask(NodeId id, const ModelSet& allowed) const;

  // MIG-enabled GPUs of a node (they offer MIG slices only).
  uint64_t mig_mask(NodeId id) const { return slot(id.value()).mig_mask; }
  // The MIG table of GPU `g` of `id` when it is MIG-enabled, else nullptr.
  const MigModel* mig_model(NodeId id, int g) const { return slot(id.value()).mig_models[g]; }

  // The node's topology prepared for multi-GPU selection. Nodes with the same links, NUMA layout
  // and NVLink generation share one (a cluster of 1,000 DGX nodes prepares one).
  const GpuSetSelector& gpu_selector(NodeId id) const {
    return *selectors_[slot(id.value()).selector];
  }

 private:
  // One node's spec and what is derived from it; a removed node's slot is an empty spec.
  struct Slot {
    NodeSpec spec;
    std::vector<uint8_t> gpu_models;  // model id of each GPU
    int16_t uniform_model = -1;       // model id when every GPU has the same model, else -1
    uint64_t mig_mask = 0;
    std::vector<const MigModel*> mig_models;  // per GPU, nullptr where not MIG-enabled
    int32_t selector = 0;                     // into selectors_
  };
  const Slot& slot(int i) const { return slots_[static_cast<size_t>(i)]; }
  // Names to ids. An entry may be stale (its node removed since): FindNode checks the slot.
  using NameIndex = absl::flat_hash_map<std::string, NodeId>;
  // `name` is node `id`'s from now on.
  void IndexName(const std::string& name, NodeId id);

  // Shared between copies; a chunk is changed in place only while this cluster alone holds it.
  SharedChunks<Slot> slots_;
  std::vector<std::string> models_;
  // Shared between copies (a what-if copy copies one pointer, not 10,000 names) and changed in
  // place only while this cluster alone holds it; a copy notes the names it adds in
  // added_names_ (looked up first), folded into a map of its own when that grows large.
  std::shared_ptr<NameIndex> names_ = std::make_shared<NameIndex>();
  NameIndex added_names_;
  std::vector<std::shared_ptr<const GpuSetSelector>> selectors_;  // shared: Cluster stays copyable
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
