#include "k8s/scheduler/claim_binder.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"

namespace tessera::k8s {
namespace {

std::string ClaimPath(const dra::ClaimInfo& claim) {
  return StrCat(dra::kResourceApi, "/namespaces/", claim.ns, "/resourceclaims/", claim.name);
}

nlohmann::json ConsumerOf(const PodInfo& pod) {
  return {{"resource", "pods"}, {"name", pod.name}, {"uid", pod.uid}};
}

// A conflict on a claim: the scheduler's view was stale; retried after the watch catches up.
absl::Status Stale(const dra::ClaimInfo& claim, const absl::Status& status) {
  return absl::UnavailableError(StrCat("ResourceClaim ", claim.key,
                                       " changed while it was being allocated (",
                                       FromAbsl(status.message()), "); trying again"));
}

}  // namespace

struct ClaimBinder::Job {
  std::string key, ns, name, uid, node;
  PodInfo pod;
  std::vector<ClaimWrite> writes;
  uint64_t attempt = 0;
  size_t next = 0;         // the claim being written
  bool finalized = false;  // its finalizer step is done
  std::string resource_version;
};

std::optional<HttpRequest> ClaimBinder::FinalizerRequest(const dra::ClaimInfo& claim) {
  if (std::find(claim.finalizers.begin(), claim.finalizers.end(), dra::kClaimFinalizer) !=
      claim.finalizers.end()) {
    return std::nullopt;
  }
  nlohmann::json finalizers = claim.finalizers;
  finalizers.push_back(dra::kClaimFinalizer);
  nlohmann::json patch = {
      {"metadata", {{"resourceVersion", claim.resource_version}, {"finalizers", finalizers}}}};
  return HttpRequest{"PATCH", ClaimPath(claim), patch.dump(),
                     std::string(ContentTypeOf(PatchType::kMerge))};
}

HttpRequest ClaimBinder::StatusRequest(const dra::ClaimInfo& claim,
                                       const std::string& resource_version, const PodInfo& pod,
                                       const ClaimWrite& write) {
  const std::string path = StrCat(ClaimPath(claim), "/status");
  if (!write.allocation.is_null()) {
    nlohmann::json reserved = nlohmann::json::array();
    for (const dra::ConsumerRef& r : claim.reserved_for) {
      nlohmann::json c = {{"resource", r.resource}, {"name", r.name}, {"uid", r.uid}};
      if (!r.api_group.empty()) c["apiGroup"] = r.api_group;
      reserved.push_back(std::move(c));
    }
    if (write.reserve) reserved.push_back(ConsumerOf(pod));
    nlohmann::json patch = {
        {"metadata", {{"resourceVersion", resource_version}}},
        {"status", {{"allocation", write.allocation}, {"reservedFor", reserved}}}};
    return HttpRequest{"PATCH", path, patch.dump(), std::string(ContentTypeOf(PatchType::kMerge))};
  }
  // Allocated already: append the pod, provided the allocation is still the one planned with.
  nlohmann::json ops = nlohmann::json::array();
  ops.push_back({{"op", "test"}, {"path", "/metadata/uid"}, {"value", claim.uid}});
  ops.push_back({{"op", "test"},
                 {"path", "/status/allocation/nodeSelector"},
                 {"value", claim.allocation->raw.value("nodeSelector", nlohmann::json())}});
  if (claim.reserved_for.empty()) {
    // No consumers: the list may be absent; guard with the resourceVersion instead.
    ops.push_back(
        {{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", resource_version}});
    ops.push_back({{"op", "add"},
                   {"path", "/status/reservedFor"},
                   {"value", nlohmann::json::array({ConsumerOf(pod)})}});
  } else {
    ops.push_back({{"op", "add"}, {"path", "/status/reservedFor/-"}, {"value", ConsumerOf(pod)}});
  }
  return HttpRequest{"PATCH", path, ops.dump(), std::string(ContentTypeOf(PatchType::kJson))};
}

void ClaimBinder::Bind(const PodInfo& pod, const std::string& node, std::vector<ClaimWrite> writes,
                       uint64_t attempt) {
  auto job = std::make_shared<Job>();
  job->key = pod.key;
  job->node = node;
  job->pod = pod;
  job->writes = std::move(writes);
  job->attempt = attempt;
  Step(std::move(job));
}

void ClaimBinder::Finish(const std::shared_ptr<Job>& job, absl::Status status) {
  done_(job->key, job->attempt, std::move(status));
}

void ClaimBinder::Step(std::shared_ptr<Job> job) {
  // Skip what needs no write.
  while (job->next < job->writes.size() && job->writes[job->next].allocation.is_null() &&
         !job->writes[job->next].reserve) {
    ++job->next;
  }
  if (job->next == job->writes.size()) {
    HttpRequest req{
        "POST", StrCat("/api/v1/namespaces/", job->pod.ns, "/pods/", job->pod.name, "/binding"),
        BindingBody(job->pod.ns, job->pod.name, job->pod.uid, job->node, nullptr).dump(),
        "application/json"};
    client_.Submit(
        req, [this, job, req](const HttpResponse& r) { Finish(job, StatusFromResponse(req, r)); });
    return;
  }
  const ClaimWrite& w = job->writes[job->next];
  const dra::ClaimInfo& claim = *w.claim;
  if (!job->finalized) {
    job->finalized = true;
    job->resource_version = claim.resource_version;
    std::optional<HttpRequest> fin =
        w.allocation.is_null() ? std::nullopt : FinalizerRequest(claim);
    if (fin) {
      client_.Submit(*fin, [this, job, req = *fin](const HttpResponse& r) {
        absl::Status st = StatusFromResponse(req, r);
        const dra::ClaimInfo& c = *job->writes[job->next].claim;
        if (!st.ok()) {
          Finish(job, r.status == 409 ? Stale(c, st) : st);
          return;
        }
        try {
          job->resource_version =
              nlohmann::json::parse(r.body).at("metadata").at("resourceVersion").get<std::string>();
        } catch (const std::exception& e) {
          Finish(job, absl::InternalError(
                          StrCat("ResourceClaim ", c.key,
                                 ": unreadable answer to the finalizer patch: ", e.what())));
          return;
        }
        Step(job);
      });
      return;
    }
  }
  HttpRequest req = StatusRequest(claim, job->resource_version, job->pod, w);
  client_.Submit(req, [this, job, req](const HttpResponse& r) {
    absl::Status st = StatusFromResponse(req, r);
    const dra::ClaimInfo& c = *job->writes[job->next].claim;
    if (!st.ok()) {
      // 409: stale resourceVersion; 422 from a JSON patch whose test failed: changed meanwhile.
      Finish(job, r.status == 409 || r.status == 422 ? Stale(c, st) : st);
      return;
    }
    ++job->next;
    job->finalized = false;
    Step(job);
  });
}

}  // namespace tessera::k8s
