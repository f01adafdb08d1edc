// What the allocator knows of the cluster's DRA objects: the ResourceSlices of tessera's driver
// (gathered into each node's devices by GPU index), the DeviceClasses and the ResourceClaims.
// Owned by the scheduler thread; the watch threads only hand it decoded objects.
//
// Pools (resource.k8s.io/v1 semantics): a pool's slices carry its generation; only the slices of
// the highest generation count, and the pool is used only once all `resourceSliceCount` of them
// are there (a driver rewriting its slices never shows a half-published pool). A pool's devices
// belong to the node its slices name (spec.nodeName).
//
// A device is a GPU of its node when it is named `gpu-<index>` (the driver contract) and its
// `index` attribute, when present, agrees; other devices of the driver (MIG partitions
// `gpu-<index>-mig-...`) are known by the GPU they are carved from, so that an allocation of one
// holds that GPU; a MIG partition's placement (profile and start slice) is read from its
// attributes `profile` and `migStart` (src/agent/dra/README.md).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "k8s/dra/objects.h"

namespace tessera::k8s::dra {

// The GPU index a device of the driver stands for (its own, or the one a MIG partition is carved
// from), or -1. `whole`: the device is the whole GPU.
int GpuIndexOf(const Device& device, std::string_view driver, bool* whole = nullptr);

// The MIG placement a MIG partition of the driver stands for: its attributes `profile`
// ("1g.10gb") and `migStart`. False for other devices (and partitions without them).
bool MigPlacementOf(const Device& device, std::string_view driver, std::string* profile,
                    int* start);

struct NodeDevices {
  // A MIG partition carved from a GPU.
  struct Mig {
    const Device* device = nullptr;
    std::string pool;
    std::string profile;  // "1g.10gb"
    int start = 0;        // the first memory slice
  };
  struct Gpu {
    const Device* device = nullptr;  // the whole-GPU device, or nullptr when not published
    std::string pool;
    std::vector<Mig> mig;  // its MIG partitions, as published
  };
  std::vector<Gpu> gpus;  // by GPU index
  // Every device of the node by (pool, name): allocations name them so.
  std::map<std::pair<std::string, std::string>, const Device*> by_name;
  std::vector<std::shared_ptr<const SliceInfo>> slices;  // keeps the devices alive
  const Device* Find(const std::string& pool, const std::string& device) const {
    auto it = by_name.find({pool, device});
    return it == by_name.end() ? nullptr : it->second;
  }
};

class DraCache {
 public:
  explicit DraCache(std::string driver) : driver_(std::move(driver)) {}
  const std::string& driver() const { return driver_; }

  // Watch events. OnSlice returns the nodes whose devices changed; OnClass true when a class
  // changed. Each bumps generation() when something an eligibility depends on changed.
  std::vector<std::string> OnSlice(bool deleted, std::shared_ptr<const SliceInfo> slice);
  bool OnClass(bool deleted, std::shared_ptr<const ClassInfo> device_class);
  // Returns the claim as it was before (nullptr: new).
  std::shared_ptr<const ClaimInfo> OnClaim(bool deleted, std::shared_ptr<const ClaimInfo> claim);

  std::shared_ptr<const ClaimInfo> Claim(const std::string& key) const;
  std::shared_ptr<const ClassInfo> Class(const std::string& name) const;
  // The class serving extended resource `name` (DRAExtendedResource): the one whose
  // spec.extendedResourceName it is (the first by name when several claim it), else the class
  // `<c>` of an implicit name deviceclass.resource.kubernetes.io/<c>; nullptr when none.
  std::shared_ptr<const ClassInfo> ClassForExtendedResource(std::string_view name) const;
  // The extended-resource claim a scheduler made for pod `pod_uid` (annotated, the pod its
  // controlling owner), or nullptr.
  std::shared_ptr<const ClaimInfo> ExtendedClaimOf(const std::string& pod_uid) const;
  // The node's devices (nullptr: no complete pool of the driver names it).
  const NodeDevices* Devices(const std::string& node) const;
  // Nodes with devices.
  const std::map<std::string, NodeDevices>& nodes() const { return nodes_; }
  const absl::flat_hash_map<std::string, std::shared_ptr<const ClaimInfo>>& claims() const {
    return claims_;
  }
  // Pools whose slices are incomplete or disagree, with why (for messages and logs).
  const std::map<std::string, std::string>& pool_problems() const { return pool_problems_; }

  // Bumped whenever devices or classes change: eligibilities computed before are stale.
  uint64_t generation() const { return generation_; }
  void Touch() { ++generation_; }

 private:
  // Rebuilds the devices of every node pool `pool` touches; returns those nodes.
  std::vector<std::string> RebuildPool(const std::string& pool);
  void RebuildNode(const std::string& node);

  std::string driver_;
  std::map<std::string, std::shared_ptr<const SliceInfo>> slices_;  // by name
  std::map<std::string, std::set<std::string>> pool_slices_;        // pool -> slice names
  std::map<std::string, std::string> pool_node_;                    // complete pools' nodes
  std::map<std::string, std::set<std::string>> node_pools_;         // node -> pools
  std::map<std::string, NodeDevices> nodes_;
  std::map<std::string, std::string> pool_problems_;
  absl::flat_hash_map<std::string, std::shared_ptr<const ClassInfo>> classes_;
  absl::flat_hash_map<std::string, std::shared_ptr<const ClaimInfo>> claims_;
  absl::flat_hash_map<std::string, std::string> extended_claims_;  // owner pod uid -> claim key
  uint64_t generation_ = 1;
};

}  // namespace tessera::k8s::dra
