#include "k8s/scheduler/claim_binder.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

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
  size_t next = 0;  // the claim being written
  // The claim's steps, in order; each done once.
  enum class Phase { kCreate, kFinalizer, kStatus, kPodStatus };
  Phase phase = Phase::kCreate;
  bool started = false;  // a request of this attempt went out
  bool release = false;  // release_on_failure
  bool binding = false;  // the binding was sent
  // The allocations this attempt wrote: the claim and its resourceVersion after the write.
  std::vector<std::pair<std::shared_ptr<const dra::ClaimInfo>, std::string>> allocated;
  std::string resource_version;
  // The lane of the job's next request: a pod whose writes have begun goes before pods waiting
  // for their first, so that it is bound a few round trips later (AsyncClient::Lane).
  AsyncClient::Lane Lane() {
    const bool next_step = started;
    started = true;
    return next_step ? AsyncClient::Lane::kNext : AsyncClient::Lane::kFirst;
  }
  // Done with the current claim: on to the next.
  void NextClaim() {
    ++next;
    phase = Phase::kCreate;
  }
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
                       uint64_t attempt, bool release_on_failure) {
  auto job = std::make_shared<Job>();
  job->key = pod.key;
  job->node = node;
  job->pod = pod;
  job->writes = std::move(writes);
  job->attempt = attempt;
  job->release = release_on_failure;
  Step(std::move(job));
}

HttpRequest ClaimBinder::ReleaseRequest(const dra::ClaimInfo& claim,
                                        const std::string& resource_version) {
  nlohmann::json patch = {{"metadata", {{"resourceVersion", resource_version}}},
                          {"status", {{"allocation", nullptr}, {"reservedFor", nullptr}}}};
  return HttpRequest{"PATCH", StrCat(ClaimPath(claim), "/status"), patch.dump(),
                     std::string(ContentTypeOf(PatchType::kMerge))};
}

void ClaimBinder::Finish(const std::shared_ptr<Job>& job, absl::Status status) {
  if (!status.ok() && job->release && !job->binding) {
    for (const auto& [claim, version] : job->allocated) {
      if (version.empty()) continue;  // the write's answer named none: leave it
      HttpRequest req = ReleaseRequest(*claim, version);
      spdlog::info(
          "pod {}: taking back the allocation of ResourceClaim {} (the gang's attempt "
          "failed: {})",
          job->key, claim->key, FromAbsl(status.message()));
      client_.Submit(req, [req, key = claim->key](const HttpResponse& r) {
        if (r.ok() || r.status == 404) return;
        spdlog::warn("ResourceClaim {}: its allocation could not be taken back: {}", key,
                     FromAbsl(StatusFromResponse(req, r).message()));
      });
    }
  }
  done_(job->key, job->attempt, std::move(status));
}

HttpRequest ClaimBinder::PodStatusRequest(const PodInfo& pod, const dra::ClaimInfo& claim,
                                          const nlohmann::json& request_mappings) {
  nlohmann::json patch = {
      {"status",
       {{"extendedResourceClaimStatus",
         {{"resourceClaimName", claim.name}, {"requestMappings", request_mappings}}}}}};
  return HttpRequest{"PATCH", StrCat("/api/v1/namespaces/", pod.ns, "/pods/", pod.name, "/status"),
                     patch.dump(), std::string(ContentTypeOf(PatchType::kMerge))};
}

void ClaimBinder::Step(std::shared_ptr<Job> job) {
  using Phase = Job::Phase;
  // Skip what needs no write.
  while (job->next < job->writes.size() && job->phase == Phase::kCreate &&
         job->writes[job->next].create.is_null() && job->writes[job->next].allocation.is_null() &&
         !job->writes[job->next].reserve && job->writes[job->next].request_mappings.is_null()) {
    job->NextClaim();
  }
  if (job->next == job->writes.size()) {
    job->binding = true;
    HttpRequest req{
        "POST", StrCat("/api/v1/namespaces/", job->pod.ns, "/pods/", job->pod.name, "/binding"),
        BindingBody(job->pod.ns, job->pod.name, job->pod.uid, job->node, nullptr).dump(),
        "application/json"};
    const AsyncClient::Lane lane = job->Lane();
    client_.Submit(
        req, [this, job, req](const HttpResponse& r) { Finish(job, StatusFromResponse(req, r)); },
        lane);
    return;
  }
  ClaimWrite& w = job->writes[job->next];
  const dra::ClaimInfo& claim = *w.claim;
  if (job->phase == Phase::kCreate) {
    job->phase = Phase::kFinalizer;
    job->resource_version = claim.resource_version;
    if (!w.create.is_null()) {
      // An extended-resource claim: created (with its finalizer) before it is allocated.
      HttpRequest req{"POST",
                      StrCat(dra::kResourceApi, "/namespaces/", claim.ns, "/resourceclaims"),
                      w.create.dump(), "application/json"};
      const AsyncClient::Lane lane = job->Lane();
      client_.Submit(
          req,
          [this, job, req](const HttpResponse& r) {
            ClaimWrite& cw = job->writes[job->next];
            absl::Status st = StatusFromResponse(req, r);
            if (!st.ok()) {
              // 409: the name is taken; the next attempt picks another.
              Finish(job, r.status == 409 ? Stale(*cw.claim, st) : st);
              return;
            }
            std::shared_ptr<const dra::ClaimInfo> created;
            try {
              created = dra::DecodeClaim(nlohmann::json::parse(r.body));
            } catch (const std::exception& e) {
              Finish(job, absl::InternalError(
                              StrCat("ResourceClaim ", cw.claim->key,
                                     ": unreadable answer to its creation: ", e.what())));
              return;
            }
            cw.claim = std::move(created);
            job->resource_version = cw.claim->resource_version;
            Step(job);
          },
          lane);
      return;
    }
  }
  if (job->phase == Phase::kFinalizer) {
    job->phase = Phase::kStatus;
    std::optional<HttpRequest> fin =
        w.allocation.is_null() ? std::nullopt : FinalizerRequest(claim);
    if (fin) {
      const AsyncClient::Lane lane = job->Lane();
      client_.Submit(
          *fin,
          [this, job, req = *fin](const HttpResponse& r) {
            absl::Status st = StatusFromResponse(req, r);
            const dra::ClaimInfo& c = *job->writes[job->next].claim;
            if (!st.ok()) {
              Finish(job, r.status == 409 ? Stale(c, st) : st);
              return;
            }
            try {
              job->resource_version = nlohmann::json::parse(r.body)
                                          .at("metadata")
                                          .at("resourceVersion")
                                          .get<std::string>();
            } catch (const std::exception& e) {
              Finish(job, absl::InternalError(
                              StrCat("ResourceClaim ", c.key,
                                     ": unreadable answer to the finalizer patch: ", e.what())));
              return;
            }
            Step(job);
          },
          lane);
      return;
    }
  }
  if (job->phase == Phase::kStatus) {
    job->phase = Phase::kPodStatus;
    if (!w.allocation.is_null() || w.reserve) {
      HttpRequest req = StatusRequest(claim, job->resource_version, job->pod, w);
      const AsyncClient::Lane lane = job->Lane();
      client_.Submit(
          req,
          [this, job, req](const HttpResponse& r) {
            absl::Status st = StatusFromResponse(req, r);
            const dra::ClaimInfo& c = *job->writes[job->next].claim;
            if (!st.ok()) {
              // 409: stale resourceVersion; 422 from a JSON patch whose test failed: changed
              // meanwhile.
              Finish(job, r.status == 409 || r.status == 422 ? Stale(c, st) : st);
              return;
            }
            if (!job->writes[job->next].allocation.is_null()) {
              if (metrics_ != nullptr) metrics_->dra_allocations++;
              std::string version;
              try {
                version = nlohmann::json::parse(r.body)
                              .at("metadata")
                              .at("resourceVersion")
                              .get<std::string>();
              } catch (const std::exception&) {
              }
              job->allocated.emplace_back(job->writes[job->next].claim, std::move(version));
            }
            Step(job);
          },
          lane);
      return;
    }
  }
  // kPodStatus: the pod names its extended-resource claim, which the kubelet reads.
  if (w.request_mappings.is_null()) {
    job->NextClaim();
    Step(job);
    return;
  }
  HttpRequest req = PodStatusRequest(job->pod, claim, w.request_mappings);
  const AsyncClient::Lane lane = job->Lane();
  client_.Submit(
      req,
      [this, job, req](const HttpResponse& r) {
        absl::Status st = StatusFromResponse(req, r);
        if (!st.ok()) {
          Finish(job, st);
          return;
        }
        job->NextClaim();
        Step(job);
      },
      lane);
}

}  // namespace tessera::k8s
