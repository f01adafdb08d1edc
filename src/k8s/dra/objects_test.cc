#include "k8s/dra/objects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/testing/dra_objects.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s::dra {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(DraQuantity, MilliUnitsExactly) {
  EXPECT_EQ(*ParseMilli("80Gi"), int64_t{80} * 1024 * 1024 * 1024 * 1000);
  EXPECT_EQ(*ParseMilli("25"), 25'000);
  EXPECT_EQ(*ParseMilli("250m"), 250);
  EXPECT_FALSE(ParseMilli("4Gx").ok());
  EXPECT_EQ(FormatMilli(*ParseMilli("80Gi")), "80Gi");
  EXPECT_EQ(FormatMilli(*ParseMilli("10Mi")), "10Mi");
  EXPECT_EQ(FormatMilli(*ParseMilli("1536Mi")), "1536Mi");
  EXPECT_EQ(FormatMilli(25'000), "25");
  EXPECT_EQ(FormatMilli(0), "0");
  EXPECT_EQ(FormatMilli(250), "250m");
  EXPECT_EQ(*ParseMilli(FormatMilli(123'456'789)), 123'456'789);
}

TEST(DraObjects, SliceAsTheDriverPublishesIt) {
  auto s = DecodeSlice(testing::SliceObject("node-a").Gpus(2, "H100-80GB", "80Gi").Json());
  ASSERT_TRUE(s->error.empty()) << s->error;
  EXPECT_EQ(s->driver, "gpu.tessera.dev");
  EXPECT_EQ(s->pool, "node-a");
  EXPECT_EQ(s->node_name, "node-a");
  EXPECT_EQ(s->generation, 1);
  ASSERT_EQ(s->devices.size(), 2u);
  const Device& d = s->devices[1];
  EXPECT_EQ(d.name, "gpu-1");
  EXPECT_TRUE(d.allow_multiple_allocations);
  // Unqualified names are in the driver's domain; qualified ones in theirs.
  ASSERT_NE(d.Attribute("gpu.tessera.dev/index", "gpu.tessera.dev"), nullptr);
  EXPECT_EQ(d.Attribute("gpu.tessera.dev/index", "gpu.tessera.dev")->i, 1);
  ASSERT_NE(d.Attribute("resource.kubernetes.io/pcieRoot", "gpu.tessera.dev"), nullptr);
  EXPECT_EQ(d.Attribute("gpu.tessera.dev/pcieRoot", "gpu.tessera.dev"), nullptr);
  EXPECT_EQ(d.capacity_by_name.at("memory").value, *ParseMilli("80Gi"));
  const RequestPolicy& memory = *d.capacity_by_name.at("memory").policy;
  EXPECT_EQ(*memory.min, *ParseMilli("1Mi"));
  EXPECT_EQ(*memory.step, *ParseMilli("1Mi"));
  EXPECT_EQ(*memory.default_milli, *ParseMilli("80Gi"));
  EXPECT_EQ(*d.capacity_by_name.at("compute").policy->default_milli, 0);
}

TEST(DraObjects, ABadSliceSaysWhich) {
  json s = testing::SliceObject("node-a").Gpus(2).Json();
  s["spec"]["devices"][1]["capacity"]["memory"]["value"] = "lots";
  auto slice = DecodeSlice(s);
  EXPECT_THAT(slice->error, HasSubstr("spec.devices[1].capacity[memory].value"));
  EXPECT_TRUE(slice->devices.empty());
}

TEST(DraObjects, Claim) {
  json j = testing::ClaimObject("ns", "c")
               .Uid("u1")
               .ResourceVersion("7")
               .Request("gpu", "gpu-share.tessera.dev")
               .Capacity("memory", "4Gi")
               .Selector("device.attributes['gpu.tessera.dev'].model == 'H100-80GB'")
               .MatchAttribute("gpu.tessera.dev/nvlinkDomain")
               .Allocated(
                   "node-a",
                   json::array({testing::Result("gpu", "node-a", "gpu-0",
                                                {{"memory", "4Gi"}, {"compute", "0"}}, "share-1")}))
               .ReservedFor("p", "pod-uid")
               .Json();
  auto c = DecodeClaim(j);
  ASSERT_TRUE(c->error.empty()) << c->error;
  EXPECT_EQ(c->key, "ns/c");
  ASSERT_EQ(c->requests.size(), 1u);
  const ExactRequest& e = c->requests[0].alternatives[0];
  EXPECT_EQ(e.device_class, "gpu-share.tessera.dev");
  EXPECT_EQ(e.count, 1);
  EXPECT_EQ(e.capacity.at("memory"), *ParseMilli("4Gi"));
  EXPECT_EQ(e.selectors.size(), 1u);
  ASSERT_EQ(c->constraints.size(), 1u);
  EXPECT_EQ(c->constraints[0].match_attribute, "gpu.tessera.dev/nvlinkDomain");
  ASSERT_TRUE(c->allocation);
  EXPECT_EQ(c->allocation->node, "node-a");
  ASSERT_EQ(c->allocation->results.size(), 1u);
  EXPECT_EQ(c->allocation->results[0].share_id, "share-1");
  EXPECT_EQ(c->allocation->results[0].consumed.at("memory"), *ParseMilli("4Gi"));
  EXPECT_TRUE(c->ReservedFor("pod-uid"));
  EXPECT_FALSE(c->ReservedFor("other"));
  EXPECT_EQ(c->FindExact("gpu"), &e);
}

TEST(DraObjects, FirstAvailable) {
  json j = testing::ClaimObject("ns", "c").Json();
  j["spec"]["devices"]["requests"] =
      json::array({{{"name", "gpu"},
                    {"firstAvailable",
                     {{{"name", "big"}, {"deviceClassName", "gpu.tessera.dev"}},
                      {{"name", "small"},
                       {"deviceClassName", "gpu-share.tessera.dev"},
                       {"capacity", {{"requests", {{"memory", "10Gi"}}}}}}}}}});
  auto c = DecodeClaim(j);
  ASSERT_TRUE(c->error.empty()) << c->error;
  ASSERT_EQ(c->requests[0].alternatives.size(), 2u);
  EXPECT_TRUE(c->requests[0].first_available);
  EXPECT_EQ(c->requests[0].alternatives[1].name, "gpu/small");
  EXPECT_EQ(c->FindExact("gpu/small"), &c->requests[0].alternatives[1]);
}

TEST(DraObjects, ABadClaimNamesTheField) {
  json j = testing::ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").Json();
  j["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "4 Gi";
  EXPECT_THAT(DecodeClaim(j)->error,
              HasSubstr("spec.devices.requests[0].exactly.capacity.requests[memory]"));
  j = testing::ClaimObject("ns", "c").Request("gpu", "").Json();
  EXPECT_THAT(DecodeClaim(j)->error, HasSubstr("deviceClassName: missing"));
}

TEST(DraObjects, PodClaims) {
  json pod = testing::PodObject("ns", "p").Json();
  EXPECT_TRUE(DecodePodClaims(pod).empty());
  pod = testing::WithClaims(pod, {{"gpu", "c1"}});
  pod = testing::WithClaimTemplate(pod, "more", "tmpl");
  PodClaims c = DecodePodClaims(pod);
  ASSERT_TRUE(c.error.empty()) << c.error;
  ASSERT_EQ(c.refs.size(), 2u);
  EXPECT_EQ(c.refs[0].claim, "c1");
  EXPECT_FALSE(c.refs[0].from_template());
  EXPECT_EQ(c.refs[1].claim, "");  // the controller has not made it yet
  EXPECT_EQ(c.refs[1].template_name, "tmpl");
  pod["status"]["resourceClaimStatuses"] =
      json::array({{{"name", "more"}, {"resourceClaimName", "p-more-x7"}}});
  EXPECT_EQ(DecodePodClaims(pod).refs[1].claim, "p-more-x7");
  pod["spec"]["resourceClaims"][0].erase("resourceClaimName");
  EXPECT_THAT(DecodePodClaims(pod).error, HasSubstr("spec.resourceClaims[0]"));
}

TEST(DraObjects, ClassSelectorsOfAnUnknownKindSelectNothing) {
  json j = testing::ClassObject("c", {"true"});
  j["spec"]["selectors"].push_back({{"future", {{"x", 1}}}});
  auto c = DecodeClass(j);
  EXPECT_EQ(c->selectors, (std::vector<std::string>{"true", "false"}));
}

}  // namespace
}  // namespace tessera::k8s::dra
