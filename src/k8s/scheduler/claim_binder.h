// DRA mode's binder: what a pod was granted is recorded in its ResourceClaims, not on the pod.
// For each claim, in order, as kube-scheduler's DynamicResources plugin does (PreBind):
//   0. for the extended-resource claim of a classic pod (DRAExtendedResource) not created yet:
//      its creation (POST, with the finalizer, the annotation and the pod as controlling owner);
//   1. the finalizer resource.kubernetes.io/delete-protection, when missing (a merge patch of
//      metadata carrying the claim's resourceVersion: the claim cannot change unseen);
//   2. status.allocation and the pod in status.reservedFor (a merge patch of /status carrying
//      the resourceVersion step 1 returned), or, for a claim allocated already (shared by several
//      pods, or written by an earlier attempt), the pod appended to status.reservedFor (a JSON
//      patch that first tests the allocation is still the one planned, so that concurrent pods
//      sharing one claim do not conflict);
//   3. for the extended-resource claim: the pod's status.extendedResourceClaimStatus (claim name
//      and requestMappings, a merge patch of the pod's /status), which the kubelet reads;
// then the pod is bound (POST .../binding, no annotations). Any step that fails ends the attempt
// with its error; a claim that changed meanwhile (409, or a failed test) is Unavailable, so that
// the scheduler tries the pod again once the watch has shown the claim as it is. What was
// written stays written: a retry finds the claims allocated and reserved for the pod and only
// binds, and so does a scheduler restarted between the claim writes and the binding.
// Every step after a pod's first goes on the AsyncClient's kNext lane: many pods' writes are in
// flight at once, and a pod once begun is bound a few round trips later.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "k8s/client/http.h"
#include "k8s/dra/objects.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/objects.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

struct ClaimWrite {
  std::shared_ptr<const dra::ClaimInfo> claim;  // as the scheduler last saw it
  nlohmann::json allocation;                    // to write; null: allocated already
  bool reserve = true;                          // add the pod to status.reservedFor
  // An extended-resource claim (DRAExtendedResource) not created yet: the object to create
  // first (with its finalizer); `claim` is then what the scheduler planned with.
  nlohmann::json create;
  // Non-null: after the claim's writes, record it with these requestMappings in the pod's
  // status.extendedResourceClaimStatus.
  nlohmann::json request_mappings;
};

class ClaimBinder {
 public:
  using Done = std::function<void(const std::string& key, uint64_t attempt, absl::Status status)>;
  // `done` runs on the client's thread: it must only hand the outcome over. `metrics` (optional)
  // counts the allocations written (dra_allocations).
  ClaimBinder(AsyncClient& client, Done done, SchedulerMetrics* metrics = nullptr)
      : client_(client), done_(std::move(done)), metrics_(metrics) {}

  // `release_on_failure` (a gang member, whose gang is allocated all together): when a step
  // before the binding fails, the allocations this attempt wrote are taken back (the claim's
  // status.allocation and status.reservedFor cleared, under the resourceVersion the write
  // returned: a claim changed since is left alone), so that the gang's next attempt finds its
  // claims free instead of "allocated already" on the node of an attempt that failed. A failed
  // binding takes nothing back (the pod may be bound: a timeout, a 409).
  void Bind(const PodInfo& pod, const std::string& node, std::vector<ClaimWrite> writes,
            uint64_t attempt, bool release_on_failure = false);

  // The requests, for tests: the finalizer patch (nullopt when present), the status patch.
  static std::optional<HttpRequest> FinalizerRequest(const dra::ClaimInfo& claim);
  static HttpRequest StatusRequest(const dra::ClaimInfo& claim, const std::string& resource_version,
                                   const PodInfo& pod, const ClaimWrite& write);
  static HttpRequest PodStatusRequest(const PodInfo& pod, const dra::ClaimInfo& claim,
                                      const nlohmann::json& request_mappings);
  // Takes back an allocation this scheduler wrote at `resource_version` (release_on_failure).
  static HttpRequest ReleaseRequest(const dra::ClaimInfo& claim,
                                    const std::string& resource_version);

 private:
  struct Job;
  void Step(std::shared_ptr<Job> job);
  void Finish(const std::shared_ptr<Job>& job, absl::Status status);

  AsyncClient& client_;
  Done done_;
  SchedulerMetrics* metrics_;
};

}  // namespace tessera::k8s
