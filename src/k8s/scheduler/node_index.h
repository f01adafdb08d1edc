// The nodes' labels and taints, indexed by the engine's node ids, so that the nodes a pod may use
// (its nodeSelector, required node affinity and tolerations: NodeAllows) are found from bitsets of
// the nodes each label value is on, a word per 64 nodes and term, plus a look at the few tainted
// nodes, instead of checking every node.
//
// Example: 10,000 nodes, 2,000 labelled pool=a, 30 tainted; a pod with nodeSelector pool=a and no
// tolerations: the 2,000 are one bitset already; the 30 tainted are checked one by one; no other
// node is looked at.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

class NodeIndex {
 public:
  // Indexes (or re-indexes) node `id`.
  void Set(int id, std::shared_ptr<const NodeInfo> node);
  void Remove(int id);

  struct Result {
    std::vector<bool> allowed;  // by node id: may take a pod with the constraints
    int taint = 0;              // nodes refused for a taint the pod does not tolerate
    int selector = 0;           // other nodes refused for its selector or node affinity
  };
  // Exactly NodeAllows over every indexed node, ids 0..size-1 (ids not indexed are refused and
  // not counted).
  Result Allowed(const NodeConstraints& c, int size) const;

  int tainted() const { return static_cast<int>(tainted_.size()); }
  // Label values (key and value) on at least one indexed node: a value no node has any more is
  // forgotten, so labels that change value (a timestamp, a churning controller's counter) do not
  // grow the index.
  int label_values() const;

 private:
  using Bits = std::vector<uint64_t>;
  // Sets or clears bit `id`; clearing trims trailing zero words (an empty set has no words).
  static void Put(Bits& b, int id, bool on);
  Bits Match(const NodeSelectorRequirement& r, const Bits& live) const;

  std::vector<std::shared_ptr<const NodeInfo>> nodes_;  // by id; null: none
  Bits live_;
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, Bits>> values_;  // k -> v
  absl::flat_hash_map<std::string, Bits> keys_;  // k -> nodes with the label
  absl::flat_hash_map<std::string, int> by_name_;
  std::set<int> tainted_;
};

}  // namespace tessera::k8s
