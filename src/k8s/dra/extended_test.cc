#include "k8s/dra/extended.h"

#include <gtest/gtest.h>

#include "k8s/testing/dra_objects.h"

namespace tessera::k8s::dra {
namespace {

using nlohmann::json;
using testing::ClassObject;

json PodWith(json containers, json init = json::array()) {
  return {{"metadata", {{"name", "train"}, {"namespace", "ml"}, {"uid", "pod-uid"}}},
          {"spec", {{"containers", containers}, {"initContainers", init}}}};
}

json Container(const std::string& name, json requests) {
  return {{"name", name}, {"resources", {{"requests", requests}, {"limits", requests}}}};
}

DraCache Classes() {
  DraCache cache("gpu.tessera.dev");
  cache.OnClass(false, DecodeClass(ClassObject("gpu.tessera.dev", {"true"}, "tessera.dev/gpu")));
  cache.OnClass(false, DecodeClass(ClassObject("fpga.example.com", {"true"})));
  return cache;
}

TEST(DecodePodExtended, NumbersContainersAndRequestsAsKubeSchedulerDoes) {
  // Containers are numbered over init containers then containers; a request by its place among
  // the container's sorted requests names (cpu, memory, tessera.dev/gpu -> 2).
  PodExtended e = DecodePodExtended(PodWith(
      json::array({Container("main", {{"cpu", "1"}, {"memory", "1Gi"}, {"tessera.dev/gpu", "2"}}),
                   Container("side", {{"example.com/nic", "1"}, {"hugepages-2Mi", "2Mi"}})}),
      json::array({Container("init", {{"cpu", "1"}})})));
  ASSERT_TRUE(e.error.empty()) << e.error;
  ASSERT_EQ(e.requests.size(), 2u);
  EXPECT_EQ(e.requests[0].container, "main");
  EXPECT_EQ(e.requests[0].container_index, 1);
  EXPECT_EQ(e.requests[0].request_index, 2);
  EXPECT_EQ(e.requests[0].count, 2);
  EXPECT_EQ(e.requests[0].resource, "tessera.dev/gpu");
  EXPECT_FALSE(e.requests[0].short_lived);
  EXPECT_EQ(e.requests[1].container_index, 2);
  EXPECT_EQ(e.requests[1].request_index, 0);
  EXPECT_TRUE(e.claim.empty());

  json pod = PodWith(json::array({Container("main", {{"tessera.dev/gpu", "1"}})}));
  pod["status"]["extendedResourceClaimStatus"] = {{"resourceClaimName", "train-extended-x"}};
  EXPECT_EQ(DecodePodExtended(pod).claim, "train-extended-x");

  EXPECT_FALSE(
      DecodePodExtended(PodWith(json::array({Container("main", {{"tessera.dev/gpu", "500m"}})})))
          .error.empty());
}

TEST(PlanExtendedClaim, ServedResourcesBecomeRequestsWithMappings) {
  DraCache cache = Classes();
  PodExtended e = DecodePodExtended(
      PodWith(json::array({Container("a", {{"cpu", "1"}, {"tessera.dev/gpu", "1"}}),
                           Container("b", {{"tessera.dev/gpu", "3"}, {"example.com/nic", "1"}})})));
  ExtendedClaimPlan plan = PlanExtendedClaim(e, cache);
  ASSERT_TRUE(plan.error.empty()) << plan.error;
  ASSERT_EQ(plan.requests.size(), 2u);  // example.com/nic is no class's: not DRA's
  EXPECT_EQ(plan.requests[0].name, "container-0-request-1");
  EXPECT_EQ(plan.requests[0].alternatives[0].device_class, "gpu.tessera.dev");
  EXPECT_EQ(plan.requests[0].alternatives[0].count, 1);
  EXPECT_EQ(plan.requests[1].name, "container-1-request-1");
  EXPECT_EQ(plan.requests[1].alternatives[0].count, 3);
  EXPECT_EQ(plan.mappings, json::parse(R"([
    {"containerName": "a", "resourceName": "tessera.dev/gpu", "requestName": "container-0-request-1"},
    {"containerName": "b", "resourceName": "tessera.dev/gpu", "requestName": "container-1-request-1"}
  ])"));
}

TEST(PlanExtendedClaim, ImplicitNamesAndRefusals) {
  DraCache cache = Classes();
  ExtendedClaimPlan implicit = PlanExtendedClaim(
      DecodePodExtended(PodWith(json::array(
          {Container("a", {{"deviceclass.resource.kubernetes.io/fpga.example.com", "1"}})}))),
      cache);
  ASSERT_EQ(implicit.requests.size(), 1u);
  EXPECT_EQ(implicit.requests[0].alternatives[0].device_class, "fpga.example.com");

  // Nothing served: no claim.
  EXPECT_FALSE(PlanExtendedClaim(DecodePodExtended(PodWith(
                                     json::array({Container("a", {{"example.com/nic", "1"}})}))),
                                 cache)
                   .served());

  // An init container (not a sidecar) asking a served resource is refused, with why.
  ExtendedClaimPlan init = PlanExtendedClaim(
      DecodePodExtended(PodWith(json::array({Container("a", {{"cpu", "1"}})}),
                                json::array({Container("setup", {{"tessera.dev/gpu", "1"}})}))),
      cache);
  EXPECT_FALSE(init.served());
  EXPECT_NE(init.error.find("init container setup"), std::string::npos) << init.error;
}

TEST(ExtendedClaim, ObjectCarriesOwnerAnnotationFinalizerAndRequests) {
  DraCache cache = Classes();
  ExtendedClaimPlan plan = PlanExtendedClaim(
      DecodePodExtended(PodWith(json::array({Container("a", {{"tessera.dev/gpu", "2"}})}))), cache);
  const std::string name = NewExtendedClaimName("train");
  EXPECT_EQ(name.rfind("train-extended-resources-", 0), 0u);
  EXPECT_EQ(name.size(), std::string("train-extended-resources-").size() + 5);
  EXPECT_EQ(NewExtendedClaimName(std::string(100, 'p')).size(), 63u);
  std::shared_ptr<const ClaimInfo> c = ExtendedClaimInMemory("ml", name, "train", "pod-uid", plan);
  json o = ExtendedClaimObject(*c);
  EXPECT_EQ(o["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"], "true");
  EXPECT_EQ(o["metadata"]["finalizers"], json::array({"resource.kubernetes.io/delete-protection"}));
  EXPECT_EQ(o["metadata"]["ownerReferences"][0]["uid"], "pod-uid");
  EXPECT_EQ(o["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(o["spec"]["devices"]["requests"][0]["exactly"]["count"], 2);
  // Decoded back (as the watch shows it), it is the pod's extended-resource claim.
  std::shared_ptr<const ClaimInfo> back = DecodeClaim(o);
  EXPECT_TRUE(back->extended_resource);
  EXPECT_EQ(back->owner_pod_uid, "pod-uid");
  EXPECT_EQ(back->requests, c->requests);
  cache.OnClaim(false, back);
  EXPECT_EQ(cache.ExtendedClaimOf("pod-uid"), back);
  cache.OnClaim(true, back);
  EXPECT_EQ(cache.ExtendedClaimOf("pod-uid"), nullptr);
}

}  // namespace
}  // namespace tessera::k8s::dra
