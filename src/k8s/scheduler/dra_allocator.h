// DRA mode in the scheduler: pods whose GPUs come from ResourceClaims. It owns the DRA objects
// the scheduler watches (DraCache: ResourceSlices of tessera's driver, DeviceClasses,
// ResourceClaims), asks the ClaimPlanner what a pod's claims mean for the engine, has the ledger
// place it with the same policies as classic pods, and turns the placement into claim writes
// for the ClaimBinder.
//
// Accounting (ClusterLedger): an allocated claim holds its GPUs under the key "claim:<ns>/<name>",
// whoever allocated it (this scheduler, kube-scheduler, an earlier life of this one); pods with
// claims hold only their CPU and memory. So a claim shared by several pods is counted once, its
// GPUs are freed when its allocation goes (the resourceclaim controller deallocates a claim
// once no pod reserves it, and deletes claims made from templates with their pods), and a
// restarted scheduler rebuilds everything from the claims it lists.
//
// Classic pods whose extended resources a DeviceClass serves (`tessera.dev/gpu: 1` with class
// gpu.tessera.dev's extendedResourceName) get an extended-resource claim (k8s/dra/extended.h),
// planned like any other claim; the pod itself then holds only its CPU and memory, as pods with
// claims do.
//
// Invariants:
//  - a claim this scheduler is writing (tentative: placed, writes in flight) keeps its holding
//    whatever the watch shows until the writes are done; after a failed attempt the holding
//    follows the claim as the watch shows it;
//  - an allocated claim whose devices cannot be read (unknown pool or device, a node the
//    scheduler does not know) blocks its node for GPU pods: never treated as free.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/model/placement.h"
#include "k8s/dra/cache.h"
#include "k8s/dra/extended.h"
#include "k8s/dra/planner.h"
#include "k8s/scheduler/claim_binder.h"
#include "k8s/scheduler/ledger.h"

namespace tessera::k8s {

class DraAllocator {
 public:
  DraAllocator(std::string driver, ClusterLedger& ledger)
      : cache_(std::move(driver)), planner_(cache_), ledger_(ledger) {}

  // Watch events. Each returns true when pending pods may fit now.
  bool OnSlice(Change change, std::shared_ptr<const dra::SliceInfo> slice);
  bool OnClass(Change change, std::shared_ptr<const dra::ClassInfo> device_class);
  bool OnClaim(Change change, std::shared_ptr<const dra::ClaimInfo> claim);
  // The engine's nodes may have changed: claims that could not be accounted are tried again,
  // and when nodes changed, claims holding MIG partitions are read again (a GPU turned to MIG
  // mode holds them as MIG instances, no longer whole) and eligibilities recomputed.
  void OnNodesChanged();

  struct Decision {
    core::PlacementResult result;  // placed: committed in the engine under the pod's key
    std::vector<ClaimWrite> writes;
    std::vector<std::pair<std::string, records::Assignment>> holdings;  // claim key -> GPUs
  };
  // Whether a DeviceClass serves one of the pod's extended resources (DRAExtendedResource,
  // k8s/dra/extended.h): the pod then goes through Decide like a pod with claims.
  bool ServesExtended(const PodInfo& pod) const;
  // One pod with claims, or with extended resources a DeviceClass serves (its extended-resource
  // claim is found, or made in memory and created by the ClaimBinder).
  Decision Decide(const PodInfo& pod);
  // A gang whose members have claims, or extended resources a DeviceClass serves (all or none
  // placed, with the gang's topology rules).
  std::vector<Decision> DecideGang(const std::vector<const PodInfo*>& members,
                                   const std::string& gang_key);
  // A placed decision goes to binding: the pod holds CPU and memory, its new claims their GPUs.
  void Hold(const PodInfo& pod, const Decision& decision);
  // The pod's bind attempt ended (`ok`: every claim write and the binding succeeded), or the
  // pod went away while binding (not ok).
  void BindDone(const std::string& pod_key, bool ok);

  const dra::DraCache& cache() const { return cache_; }

  static std::string ClaimKey(const std::string& claim) { return "claim:" + claim; }

 private:
  // A pod's extended-resource claim (DRAExtendedResource): found, or made in memory with the
  // object that creates it; `invalid` or `wait` say why the pod cannot go on now.
  struct ExtendedClaim {
    dra::ExtendedClaimPlan plan;
    std::shared_ptr<const dra::ClaimInfo> claim;  // nullptr: no extended resource is served
    nlohmann::json create;                        // non-null: the claim is to be created
    std::string invalid, wait;
  };
  ExtendedClaim ExtendedOf(const PodInfo& pod);
  // Adds the writes for planned claim `c` of `pod` (none when it is allocated and reserved for
  // the pod and, for the extended-resource claim, the pod names it already).
  void AddWrite(const PodInfo& pod, const ExtendedClaim& ext, const dra::PlannedClaim& c,
                const nlohmann::json& allocation, Decision* d);
  // Accounts `claim` as it is now (or drops it).
  bool Account(const std::string& key);
  void Reconsider();

  dra::DraCache cache_;
  dra::ClaimPlanner planner_;
  ClusterLedger& ledger_;
  // Claims with writes in flight, and the pod writing them.
  std::map<std::string, std::string> inflight_;
  std::map<std::string, std::set<std::string>> inflight_of_;  // pod -> claims
  std::set<std::string> written_;  // inflight_ claims whose writes succeeded
  // inflight_ claims this scheduler creates (extended-resource claims) that the watch has not
  // shown yet: their holding stays until it does.
  std::set<std::string> awaiting_;
  // Allocated claims that could not be accounted (devices unknown yet).
  std::set<std::string> unresolved_;
  // Allocated claims that name MIG partitions, and the ledger's node changes last seen.
  std::set<std::string> mig_claims_;
  uint64_t seen_node_changes_ = 0;
};

}  // namespace tessera::k8s
