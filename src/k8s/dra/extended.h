// DRAExtendedResource on the allocator's side: a classic pod asking an extended resource
// (`tessera.dev/gpu: 1`) that a DeviceClass serves (spec.extendedResourceName, or the implicit
// `deviceclass.resource.kubernetes.io/<class>`) gets one ResourceClaim made for it, as
// kube-scheduler's DynamicResources plugin makes it (Kubernetes v1.37):
//   - metadata: the pod as controlling owner (apiVersion v1, kind Pod), the annotation
//     resource.kubernetes.io/extended-resource-claim: "true", a name from
//     "<pod>-extended-resources-" (base cut at 58 characters) and 5 random characters;
//   - spec.devices.requests: per container (initContainers then containers, numbered together)
//     and served resource, `container-<index>-request-<place>` where <place> is the resource's
//     index among the container's sorted resources.requests names, exactly {deviceClassName,
//     allocationMode ExactCount, count}; sorted by name;
//   - pod.status.extendedResourceClaimStatus {resourceClaimName, requestMappings [{containerName,
//     resourceName, requestName}]}, which the kubelet reads to hand each container its devices.
// Init containers that are not sidecars and ask a served resource are refused (kube-scheduler
// lets them reuse later containers' requests; tessera does not implement that yet).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "k8s/dra/cache.h"
#include "k8s/dra/objects.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s::dra {

struct ExtendedClaimPlan {
  std::vector<ClaimRequest> requests;                 // sorted by name; empty: no served resource
  nlohmann::json mappings = nlohmann::json::array();  // requestMappings
  std::string error;                                  // the pod cannot be served, and why
  bool served() const { return !requests.empty(); }
};

// What the pod's extended resources served by classes of `cache` ask.
ExtendedClaimPlan PlanExtendedClaim(const PodExtended& pod, const DraCache& cache);

// A name for a new extended-resource claim of pod `pod_name` (generateName's way: the base cut
// at 58 characters, 5 random characters of the API server's alphabet).
std::string NewExtendedClaimName(const std::string& pod_name);

// The claim, in memory, with `name` and the requests of `plan` (finalizer included), and the
// object that creates it.
std::shared_ptr<const ClaimInfo> ExtendedClaimInMemory(const std::string& ns,
                                                       const std::string& name,
                                                       const std::string& pod_name,
                                                       const std::string& pod_uid,
                                                       const ExtendedClaimPlan& plan);
nlohmann::json ExtendedClaimObject(const ClaimInfo& claim);

}  // namespace tessera::k8s::dra
