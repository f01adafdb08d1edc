#include "k8s/dra/extended.h"

#include <algorithm>
#include <mutex>
#include <random>

#include "common/strings.h"

namespace tessera::k8s::dra {

ExtendedClaimPlan PlanExtendedClaim(const PodExtended& pod, const DraCache& cache) {
  ExtendedClaimPlan plan;
  if (!pod.error.empty()) {
    plan.error = pod.error;
    return plan;
  }
  for (const ExtendedRequest& r : pod.requests) {
    std::shared_ptr<const ClassInfo> c = cache.ClassForExtendedResource(r.resource);
    if (!c) continue;  // not served by DRA: the node's own extended resource, if any
    const std::string name = StrCat("container-", r.container_index, "-request-", r.request_index);
    if (r.short_lived) {
      plan.error = StrCat("init container ", r.container, " asks ", r.resource,
                          ", which DeviceClass ", c->name,
                          " serves; tessera serves extended resources through DRA for regular "
                          "and sidecar containers only (ask it through a ResourceClaim instead)");
      plan.requests.clear();
      return plan;
    }
    ClaimRequest req;
    req.name = name;
    ExactRequest x;
    x.name = name;
    x.device_class = c->name;
    x.allocation_mode = "ExactCount";
    x.count = r.count;
    req.alternatives.push_back(std::move(x));
    plan.requests.push_back(std::move(req));
    plan.mappings.push_back(
        {{"containerName", r.container}, {"resourceName", r.resource}, {"requestName", name}});
  }
  std::sort(plan.requests.begin(), plan.requests.end(),
            [](const ClaimRequest& a, const ClaimRequest& b) { return a.name < b.name; });
  return plan;
}

std::string NewExtendedClaimName(const std::string& pod_name) {
  // The API server's generateName alphabet (no vowels, no confusable characters).
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::string name = StrCat(pod_name, "-extended-resources-");
  if (name.size() > 58) name.resize(58);
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < 5; ++i) name += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return name;
}

std::shared_ptr<const ClaimInfo> ExtendedClaimInMemory(const std::string& ns,
                                                       const std::string& name,
                                                       const std::string& pod_name,
                                                       const std::string& pod_uid,
                                                       const ExtendedClaimPlan& plan) {
  auto c = std::make_shared<ClaimInfo>();
  c->ns = ns;
  c->name = name;
  c->key = StrCat(ns, "/", name);
  c->finalizers = {std::string(kClaimFinalizer)};
  c->owner_pod_uid = pod_uid;
  c->owner_pod_name = pod_name;
  c->extended_resource = true;
  c->requests = plan.requests;
  return c;
}

nlohmann::json ExtendedClaimObject(const ClaimInfo& claim) {
  nlohmann::json requests = nlohmann::json::array();
  for (const ClaimRequest& r : claim.requests) {
    const ExactRequest& x = r.alternatives.at(0);
    requests.push_back({{"name", r.name},
                        {"exactly",
                         {{"deviceClassName", x.device_class},
                          {"allocationMode", x.allocation_mode},
                          {"count", x.count}}}});
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata",
           {{"name", claim.name},
            {"namespace", claim.ns},
            {"annotations", {{std::string(kExtendedResourceClaimAnnotation), "true"}}},
            {"finalizers", claim.finalizers},
            {"ownerReferences",
             {{{"apiVersion", "v1"},
               {"kind", "Pod"},
               {"name", claim.owner_pod_name},
               {"uid", claim.owner_pod_uid},
               {"controller", true}}}}}},
          {"spec", {{"devices", {{"requests", requests}}}}}};
}

}  // namespace tessera::k8s::dra
