#include "k8s/scheduler/claim_binder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/dra/planner.h"
#include "k8s/testing/dra_objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::ClaimObject;
using ::testing::HasSubstr;

PodInfo Pod() {
  PodInfo p;
  p.ns = "ns";
  p.name = "p";
  p.uid = "uid-p";
  p.key = "ns/p";
  return p;
}

TEST(ClaimBinder, TheFinalizerGoesOnceWithTheResourceVersion) {
  auto claim = dra::DecodeClaim(
      ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").ResourceVersion("41").Json());
  std::optional<HttpRequest> r = ClaimBinder::FinalizerRequest(*claim);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->method, "PATCH");
  EXPECT_EQ(r->path, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c");
  json body = json::parse(r->body);
  EXPECT_EQ(body["metadata"]["resourceVersion"], "41");
  EXPECT_EQ(body["metadata"]["finalizers"],
            json::array({"resource.kubernetes.io/delete-protection"}));
  json with = ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").Json();
  with["metadata"]["finalizers"] = {"resource.kubernetes.io/delete-protection"};
  EXPECT_FALSE(ClaimBinder::FinalizerRequest(*dra::DecodeClaim(with)));
}

TEST(ClaimBinder, AnAllocationIsWrittenWithItsReservationUnderTheResourceVersion) {
  auto claim = dra::DecodeClaim(ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").Json());
  json allocation = {{"devices", {{"results", json::array()}}},
                     {"nodeSelector", dra::NodeSelectorFor("n1")}};
  HttpRequest r = ClaimBinder::StatusRequest(*claim, "42", Pod(), ClaimWrite{claim, allocation});
  EXPECT_EQ(r.path, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status");
  EXPECT_EQ(r.content_type, ContentTypeOf(PatchType::kMerge));
  json body = json::parse(r.body);
  EXPECT_EQ(body["metadata"]["resourceVersion"], "42");
  EXPECT_EQ(body["status"]["allocation"], allocation);
  EXPECT_EQ(body["status"]["reservedFor"],
            json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "uid-p"}}}));
}

TEST(ClaimBinder, ASharedClaimIsReservedByAppendingAfterTestingItsAllocation) {
  auto claim =
      dra::DecodeClaim(ClaimObject("ns", "c")
                           .Request("gpu", "gpu.tessera.dev")
                           .Uid("uid-c")
                           .Allocated("n1", json::array({testing::Result("gpu", "n1", "gpu-0")}))
                           .ReservedFor("other", "uid-o")
                           .Json());
  HttpRequest r = ClaimBinder::StatusRequest(*claim, "43", Pod(), ClaimWrite{claim, nullptr});
  EXPECT_EQ(r.content_type, ContentTypeOf(PatchType::kJson));
  json ops = json::parse(r.body);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0], (json{{"op", "test"}, {"path", "/metadata/uid"}, {"value", "uid-c"}}));
  EXPECT_EQ(ops[1]["path"], "/status/allocation/nodeSelector");
  EXPECT_EQ(ops[1]["value"], dra::NodeSelectorFor("n1"));
  EXPECT_EQ(ops[2]["op"], "add");
  EXPECT_EQ(ops[2]["path"], "/status/reservedFor/-");
  EXPECT_EQ(ops[2]["value"]["uid"], "uid-p");
}

TEST(ClaimBinder, TheExtendedResourceClaimIsNamedInThePodsStatus) {
  auto claim = dra::DecodeClaim(ClaimObject("ns", "p-extended-resources-x2b4z").Json());
  json mappings = json::array({{{"containerName", "main"},
                                {"resourceName", "tessera.dev/gpu"},
                                {"requestName", "container-0-request-0"}}});
  HttpRequest r = ClaimBinder::PodStatusRequest(Pod(), *claim, mappings);
  EXPECT_EQ(r.method, "PATCH");
  EXPECT_EQ(r.path, "/api/v1/namespaces/ns/pods/p/status");
  EXPECT_EQ(r.content_type, ContentTypeOf(PatchType::kMerge));
  json body = json::parse(r.body);
  EXPECT_EQ(body["status"]["extendedResourceClaimStatus"]["resourceClaimName"],
            "p-extended-resources-x2b4z");
  EXPECT_EQ(body["status"]["extendedResourceClaimStatus"]["requestMappings"], mappings);
}

}  // namespace
}  // namespace tessera::k8s
