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
#include "absl/strings/string_view.h"
#include "core/model/ids.h"
#include "core/model/node.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {

// GPU models are interned to small ids so that model constraints are a bitset test.
inline constexpr int kMaxGpuModels = 256;
using ModelSet = std::bitset<kMaxGpuModels>;

// Copies are cheap: each node's spec and what is derived from it (a slot) is immutable and shared
// between copies, so a what-if copy of a 10,000-node cluster copies pointers, not specs; a
// change replaces the slot it changes.
class Cluster {
 private:
  struct Slot;

 public:
  // The node specs in id order (removed slots included, empty), as a range over the slots.
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
      reference operator*() const;
      pointer operator->() const { return &**this; }
      Iterator& operator++() {
        ++it_;
        return *this;
      }
      Iterator operator++(int) {
        Iterator old = *this;
        ++it_;
        return old;
      }
      bool operator==(const Iterator&) const = default;

     private:
      friend class NodeSpecs;
      using Base = std::vector<std::shared_ptr<const Slot>>::const_iterator;
      explicit Iterator(Base it) : it_(it) {}
      Base it_;
    };
    Iterator begin() const { return Iterator(slots_->begin()); }
    Iterator end() const { return Iterator(slots_->end()); }
    size_t size() const { return slots_->size(); }
    const NodeSpec& operator[](size_t i) const;
    // Copies of the specs (to build another cluster from).
    std::vector<NodeSpec> ToVector() const { return std::vector<NodeSpec>(begin(), end()); }

   private:
    friend class Cluster;
    explicit NodeSpecs(const std::vector<std::shared_ptr<const Slot>>* slots) : slots_(slots) {}
    const std::vector<std::shared_ptr<const Slot>>* slots_;
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
  const NodeSpec& node(NodeId id) const { return slots_[id.value()]->spec; }
  NodeSpecs nodes() const { return NodeSpecs(&slots_); }
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
  const std::vector<uint8_t>& gpu_models(NodeId id) const { return slots_[id.value()]->gpu_models; }
  // The model id every GPU of `id` has, or -1 where they differ (or it has none).
  int uniform_model(NodeId id) const { return slots_[id.value()]->uniform_model; }
  // GPUs of `id` whose model is in `allowed`.
  uint64_t ModelMask(NodeId id, const ModelSet& allowed) const;

  // MIG-enabled GPUs of a node (they offer MIG slices only).
  uint64_t mig_mask(NodeId id) const { return slots_[id.value()]->mig_mask; }
  // The MIG table of GPU `g` of `id` when it is MIG-enabled, else nullptr.
  const MigModel* mig_model(NodeId id, int g) const { return slots_[id.value()]->mig_models[g]; }

  // The node's topology prepared for multi-GPU selection. Nodes with the same links, NUMA layout
  // and NVLink generation share one (a cluster of 1,000 DGX nodes prepares one).
  const GpuSetSelector& gpu_selector(NodeId id) const {
    return *selectors_[slots_[id.value()]->selector];
  }

 private:
  // One node's spec and what is derived from it. Never changed once made (copies of the cluster
  // share it); a removed node's slot is an empty spec.
  struct Slot {
    NodeSpec spec;
    std::vector<uint8_t> gpu_models;  // model id of each GPU
    int16_t uniform_model = -1;       // model id when every GPU has the same model, else -1
    uint64_t mig_mask = 0;
    std::vector<const MigModel*> mig_models;  // per GPU, nullptr where not MIG-enabled
    int32_t selector = 0;                     // into selectors_
  };

  std::vector<std::shared_ptr<const Slot>> slots_;
  std::vector<std::string> models_;
  // Keys view the names in slots_ (a slot replaced is re-keyed with it).
  absl::flat_hash_map<absl::string_view, NodeId> by_name_;
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

inline const NodeSpec& Cluster::NodeSpecs::Iterator::operator*() const { return (*it_)->spec; }
inline const NodeSpec& Cluster::NodeSpecs::operator[](size_t i) const { return (*slots_)[i]->spec; }

}  // namespace tessera::core
