// DraAllocator on its own (no API server): the watch's slices, classes and claims in, decisions,
// holdings and claim writes out.
#include "k8s/scheduler/dra_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "k8s/testing/dra_objects.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::ClaimObject;
using testing::ClassObject;
using ::testing::HasSubstr;
using testing::NodeObject;
using testing::PodObject;
using testing::SliceObject;

class DraAllocatorTest : public ::testing::Test {
 protected:
  DraAllocatorTest()
      : ledger_(LedgerOptions{}, nullptr,
                [](const std::string&, const std::string&, const std::string&) {}),
        alloc_("gpu.tessera.dev", ledger_) {
    ledger_.OnNode(Change::kAdded, DecodeNode(NodeObject("n1").Gpus(2, "H100-80GB").Json()));
    ledger_.Sync();
    alloc_.OnClass(Change::kAdded, dra::DecodeClass(ClassObject(
                                       "gpu.tessera.dev", {"device.driver == \"gpu.tessera.dev\""},
                                       "tessera.dev/gpu")));
  }
  void AddSlice() {
    EXPECT_TRUE(alloc_.OnSlice(Change::kAdded,
                               dra::DecodeSlice(SliceObject("n1").Gpus(2, "H100-80GB").Json())));
    ledger_.Sync();
  }
  static json Classic(const std::string& gpus) {
    return PodObject("ns", "p")
        .Uid("uid-p")
        .Request("cpu", "1")
        .Request("tessera.dev/gpu", gpus)
        .Json();
  }

  ClusterLedger ledger_;
  DraAllocator alloc_;
};

// The slice watch: a pod waiting for devices fits as soon as its node's slice arrives.
TEST_F(DraAllocatorTest, ASliceArrivingLetsAWaitingPodFit) {
  alloc_.OnClaim(Change::kAdded,
                 dra::DecodeClaim(ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").Json()));
  std::shared_ptr<const PodInfo> pod =
      DecodePod(testing::WithClaims(PodObject("ns", "p").Uid("uid-p").Json(), {{"gpu", "c"}}));
  DraAllocator::Decision before = alloc_.Decide(*pod);
  EXPECT_FALSE(before.result.placed());
  AddSlice();
  DraAllocator::Decision after = alloc_.Decide(*pod);
  ASSERT_TRUE(after.result.placed()) << after.result.reason;
  ASSERT_EQ(after.writes.size(), 1u);
  EXPECT_FALSE(after.writes[0].allocation.is_null());
  EXPECT_TRUE(after.writes[0].create.is_null());
}

// A classic pod served through the class's extendedResourceName: its claim is made in memory,
// created by the binder, and its GPUs stay held until the watch shows the claim allocated.
TEST_F(DraAllocatorTest, AClassicPodGetsAnExtendedResourceClaim) {
  AddSlice();
  std::shared_ptr<const PodInfo> pod = DecodePod(Classic("2"));
  ASSERT_TRUE(alloc_.ServesExtended(*pod));
  DraAllocator::Decision d = alloc_.Decide(*pod);
  ASSERT_TRUE(d.result.placed()) << d.result.reason;
  ASSERT_EQ(d.writes.size(), 1u);
  const ClaimWrite& w = d.writes[0];
  ASSERT_FALSE(w.create.is_null());
  EXPECT_EQ(w.create["metadata"]["ownerReferences"][0]["uid"], "uid-p");
  // requests {cpu, tessera.dev/gpu}: the GPUs are request 1 of container 0.
  EXPECT_EQ(w.create["spec"]["devices"]["requests"][0]["name"], "container-0-request-1");
  EXPECT_EQ(w.create["spec"]["devices"]["requests"][0]["exactly"]["count"], 2);
  EXPECT_EQ(w.request_mappings[0]["requestName"], "container-0-request-1");
  EXPECT_EQ(w.allocation["devices"]["results"].size(), 2u);
  ASSERT_EQ(d.holdings.size(), 1u);
  const std::string key = w.claim->key;
  EXPECT_EQ(d.holdings[0].first, key);

  alloc_.Hold(*pod, d);
  const std::string held = DraAllocator::ClaimKey(key);
  ASSERT_NE(ledger_.Find(held), nullptr);
  // Writes done before the watch shows the created claim: still held.
  alloc_.BindDone(pod->key, true);
  EXPECT_NE(ledger_.Find(held), nullptr);
  // The watch shows it created, then allocated: held as the claim says.
  json created = w.create;
  alloc_.OnClaim(Change::kAdded, dra::DecodeClaim(created));
  EXPECT_NE(ledger_.Find(held), nullptr);
  created["status"]["allocation"] = w.allocation;
  created["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", "p"}, {"uid", "uid-p"}}};
  alloc_.OnClaim(Change::kUpdated, dra::DecodeClaim(created));
  ASSERT_NE(ledger_.Find(held), nullptr);
  EXPECT_EQ(ledger_.Find(held)->gpus.gpus.size(), 2u);
  // Both GPUs of n1 are taken: a second classic pod does not fit.
  std::shared_ptr<const PodInfo> other =
      DecodePod(PodObject("ns", "q").Uid("uid-q").Request("tessera.dev/gpu", "1").Json());
  EXPECT_FALSE(alloc_.Decide(*other).result.placed());
}

// A restarted scheduler finds the pod's extended-resource claim (allocated and reserved, the pod
// not bound): only the pod's status and the binding remain.
TEST_F(DraAllocatorTest, AnExtendedResourceClaimFromAnEarlierLifeIsReused) {
  AddSlice();
  json claim =
      ClaimObject("ns", "p-extended-resources-abcde")
          .Request("container-0-request-1", "gpu.tessera.dev")
          .Uid("uid-c")
          .OwnedBy("p", "uid-p")
          .Allocated("n1", json::array({testing::Result("container-0-request-1", "n1", "gpu-1")}))
          .ReservedFor("p", "uid-p")
          .Json();
  claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] = "true";
  alloc_.OnClaim(Change::kAdded, dra::DecodeClaim(claim));
  DraAllocator::Decision d = alloc_.Decide(*DecodePod(Classic("1")));
  ASSERT_TRUE(d.result.placed()) << d.result.reason;
  EXPECT_EQ(ledger_.engine().cluster().node(d.result.placement.node).name, "n1");
  ASSERT_EQ(d.writes.size(), 1u);
  EXPECT_TRUE(d.writes[0].create.is_null());
  EXPECT_TRUE(d.writes[0].allocation.is_null());
  EXPECT_FALSE(d.writes[0].reserve);
  EXPECT_EQ(d.writes[0].claim->name, "p-extended-resources-abcde");
  EXPECT_FALSE(d.writes[0].request_mappings.is_null());
}

TEST_F(DraAllocatorTest, SharesAsExtendedResourcesAreRefusedWithWhy) {
  AddSlice();
  std::shared_ptr<const PodInfo> pod = DecodePod(PodObject("ns", "p")
                                                     .Uid("uid-p")
                                                     .Request("tessera.dev/gpu-memory", "4Gi")
                                                     .Request("example.com/x", "1")
                                                     .Json());
  alloc_.OnClass(Change::kAdded, dra::DecodeClass(ClassObject("x", {"true"}, "example.com/x")));
  DraAllocator::Decision d = alloc_.Decide(*pod);
  EXPECT_FALSE(d.result.placed());
  EXPECT_THAT(d.result.reason, HasSubstr("through a ResourceClaim"));
}

}  // namespace
}  // namespace tessera::k8s
