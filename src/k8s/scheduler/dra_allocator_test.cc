// DraAllocator on its own (no API server): the watch's slices, classes and claims in, decisions,
// holdings and claim writes out.
#include "k8s/scheduler/dra_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

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

// A gang of classic pods (`tessera.dev/gpu: 1`, gang annotations) in DRA mode: each member gets
// its extended-resource claim, allocated with the others, all or none.
TEST_F(DraAllocatorTest, AGangOfClassicPodsGetsExtendedResourceClaimsAllOrNone) {
  AddSlice();
  auto member = [](const std::string& gang, int size, int i) {
    return DecodePod(PodObject("ns", StrCat(gang, "-", i))
                         .Uid(StrCat("uid-", gang, "-", i))
                         .Request("tessera.dev/gpu", "1")
                         .Gang(gang, size)
                         .Json());
  };
  std::shared_ptr<const PodInfo> a = member("g", 2, 0), b = member("g", 2, 1);
  ASSERT_TRUE(alloc_.ServesExtended(*a));
  std::vector<DraAllocator::Decision> ds = alloc_.DecideGang({a.get(), b.get()}, "ns/g");
  ASSERT_EQ(ds.size(), 2u);
  std::set<std::string> devices;
  for (const DraAllocator::Decision& d : ds) {
    ASSERT_TRUE(d.result.placed()) << d.result.reason;
    ASSERT_EQ(d.writes.size(), 1u);
    EXPECT_FALSE(d.writes[0].create.is_null());
    EXPECT_FALSE(d.writes[0].request_mappings.is_null());
    ASSERT_EQ(d.writes[0].allocation["devices"]["results"].size(), 1u);
    devices.insert(d.writes[0].allocation["devices"]["results"][0]["device"].get<std::string>());
    ASSERT_EQ(d.holdings.size(), 1u);
  }
  EXPECT_EQ(devices.size(), 2u);
  alloc_.Hold(*a, ds[0]);
  alloc_.Hold(*b, ds[1]);
  // No GPU left: a gang of two more places none of its members.
  std::shared_ptr<const PodInfo> c = member("h", 2, 0), d = member("h", 2, 1);
  ds = alloc_.DecideGang({c.get(), d.get()}, "ns/h");
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_FALSE(ds[0].result.placed());
  EXPECT_FALSE(ds[1].result.placed());
  EXPECT_FALSE(ds[0].result.reason.empty());
}

// MIG: node n1 has two H100s, GPU 0 in MIG mode (its MIG partitions published in place of it).
class DraMigTest : public ::testing::Test {
 protected:
  DraMigTest()
      : ledger_(LedgerOptions{}, nullptr,
                [this](const std::string& key, const std::string&, const std::string& why) {
                  blocked_.push_back(StrCat(key, ": ", why));
                }),
        alloc_("gpu.tessera.dev", ledger_) {
    ledger_.OnNode(Change::kAdded, DecodeNode(NodeObject("n1").Gpus(2, "H100-80GB").Mig(0).Json()));
    ledger_.Sync();
    alloc_.OnClass(
        Change::kAdded,
        dra::DecodeClass(ClassObject("gpu.tessera.dev",
                                     {"device.attributes[\"gpu.tessera.dev\"].type == \"gpu\""})));
    alloc_.OnClass(
        Change::kAdded,
        dra::DecodeClass(ClassObject("mig.tessera.dev",
                                     {"device.attributes[\"gpu.tessera.dev\"].type == \"mig\""})));
    AddSlices(SliceObject("n1").Gpus(2, "H100-80GB").MigMode(0));
    ledger_.Sync();
  }
  // The pool's slices: devices, and the counter sets of GPUs in MIG mode.
  void AddSlices(const SliceObject& slice) {
    alloc_.OnSlice(Change::kUpdated, dra::DecodeSlice(slice.Json()));
    alloc_.OnSlice(Change::kUpdated, dra::DecodeSlice(slice.CountersJson()));
  }
  // A pod of its own with claim `name` asking one device of `device_class` (and `profile`).
  std::shared_ptr<const PodInfo> PodWithClaim(const std::string& name,
                                              const std::string& device_class,
                                              const std::string& profile = "") {
    ClaimObject c =
        ClaimObject("ns", name).Uid(StrCat("uid-c-", name)).Request("gpu", device_class);
    if (!profile.empty()) {
      c.Selector(StrCat("device.attributes[\"gpu.tessera.dev\"].profile == \"", profile, "\""));
    }
    alloc_.OnClaim(Change::kAdded, dra::DecodeClaim(c.Json()));
    return DecodePod(testing::WithClaims(PodObject("ns", name).Uid(StrCat("uid-", name)).Json(),
                                         {{"gpu", name}}));
  }
  // Decides and holds the pod's claims as written, as the binder and the watch would.
  DraAllocator::Decision Place(const PodInfo& pod) {
    DraAllocator::Decision d = alloc_.Decide(pod);
    if (!d.result.placed()) return d;
    alloc_.Hold(pod, d);
    alloc_.BindDone(pod.key, true);
    for (const ClaimWrite& w : d.writes) {
      json c = ClaimObject("ns", w.claim->name)
                   .Uid(w.claim->uid)
                   .Request("gpu", w.claim->requests[0].alternatives[0].device_class)
                   .ReservedFor(pod.name, pod.uid)
                   .Json();
      c["status"]["allocation"] = w.allocation;
      alloc_.OnClaim(Change::kUpdated, dra::DecodeClaim(c));
    }
    return d;
  }
  static std::string Device(const DraAllocator::Decision& d) {
    return d.writes.at(0).allocation["devices"]["results"][0]["device"];
  }

  std::vector<std::string> blocked_;
  ClusterLedger ledger_;
  DraAllocator alloc_;
};

// tessera allocates MIG partitions with the engine's MIG policy, never two that share a slice.
TEST_F(DraMigTest, MigClaimsGetPartitionsThatDoNotOverlap) {
  DraAllocator::Decision a = Place(*PodWithClaim("a", "mig.tessera.dev", "3g.40gb"));
  ASSERT_TRUE(a.result.placed()) << a.result.reason;
  EXPECT_EQ(Device(a), "gpu-0-mig-3g-40gb-4");  // least loss: 3g at 4 keeps the 4g room at 0
  DraAllocator::Decision b = Place(*PodWithClaim("b", "mig.tessera.dev", "4g.40gb"));
  ASSERT_TRUE(b.result.placed()) << b.result.reason;
  EXPECT_EQ(Device(b), "gpu-0-mig-4g-40gb-0");
  // The GPU's slices are all taken: a third MIG claim waits, and a whole GPU goes to GPU 1.
  DraAllocator::Decision c = alloc_.Decide(*PodWithClaim("c", "mig.tessera.dev", "1g.10gb"));
  EXPECT_FALSE(c.result.placed());
  EXPECT_EQ(c.result.outcome, core::Outcome::kNoFitNow);
  DraAllocator::Decision w = Place(*PodWithClaim("w", "gpu.tessera.dev"));
  ASSERT_TRUE(w.result.placed()) << w.result.reason;
  EXPECT_EQ(Device(w), "gpu-1");
  // Claim b deallocated: its slices serve the waiting 1g.10gb.
  alloc_.OnClaim(Change::kUpdated,
                 dra::DecodeClaim(ClaimObject("ns", "b").Request("gpu", "mig.tessera.dev").Json()));
  DraAllocator::Decision again = alloc_.Decide(*PodWithClaim("c", "mig.tessera.dev", "1g.10gb"));
  ASSERT_TRUE(again.result.placed()) << again.result.reason;
  EXPECT_THAT(Device(again), ::testing::StartsWith("gpu-0-mig-1g-10gb-"));
  EXPECT_TRUE(blocked_.empty()) << blocked_[0];
}

// kube-scheduler's MIG allocation on a GPU in MIG mode is the instance it names: the node is not
// blocked, tessera places beside it on the same GPU and on the rest of the node.
TEST_F(DraMigTest, KubeSchedulersMigAllocationIsReadAsItsInstance) {
  json ks = ClaimObject("ns", "ks")
                .Uid("uid-ks")
                .Request("gpu", "mig.tessera.dev")
                .Allocated("n1", json::array({testing::Result("gpu", "n1", "gpu-0-mig-3g-40gb-4")}))
                .ReservedFor("ks-pod", "uid-ks-pod")
                .Json();
  alloc_.OnClaim(Change::kAdded, dra::DecodeClaim(ks));
  ledger_.Sync();
  const std::string key = DraAllocator::ClaimKey("ns/ks");
  ASSERT_TRUE(ledger_.Accounted(key)) << (blocked_.empty() ? "" : blocked_[0]);
  EXPECT_TRUE(blocked_.empty());
  EXPECT_EQ(ledger_.Find(key)->gpus.gpus[0].mig_profile, "3g.40gb");
  DraAllocator::Decision w = Place(*PodWithClaim("w", "gpu.tessera.dev"));
  ASSERT_TRUE(w.result.placed()) << w.result.reason;
  EXPECT_EQ(Device(w), "gpu-1");
  // A 4g.40gb fits beside it (slices 0-3); a second 3g.40gb would need slices 0-3 too.
  DraAllocator::Decision m = Place(*PodWithClaim("m", "mig.tessera.dev", "4g.40gb"));
  ASSERT_TRUE(m.result.placed()) << m.result.reason;
  EXPECT_EQ(Device(m), "gpu-0-mig-4g-40gb-0");
  EXPECT_FALSE(alloc_.Decide(*PodWithClaim("x", "mig.tessera.dev", "3g.40gb")).result.placed());
}

// The slices may show a GPU's MIG partitions before its node shows it in MIG mode: a MIG claim
// waits, and fits once the node does (eligibilities follow the nodes, not only the slices).
TEST_F(DraMigTest, AMigClaimFitsOnceTheNodeShowsMigMode) {
  ledger_.OnNode(Change::kUpdated, DecodeNode(NodeObject("n1").Gpus(2, "H100-80GB").Json()));
  ledger_.Sync();
  alloc_.OnNodesChanged();
  std::shared_ptr<const PodInfo> pod = PodWithClaim("m", "mig.tessera.dev", "1g.10gb");
  DraAllocator::Decision before = alloc_.Decide(*pod);
  ASSERT_FALSE(before.result.placed());
  EXPECT_THAT(before.result.reason, HasSubstr("not in MIG mode"));
  ledger_.OnNode(Change::kUpdated, DecodeNode(NodeObject("n1").Gpus(2, "H100-80GB").Mig(0).Json()));
  ledger_.Sync();
  alloc_.OnNodesChanged();
  DraAllocator::Decision after = alloc_.Decide(*pod);
  ASSERT_TRUE(after.result.placed()) << after.result.reason;
  EXPECT_EQ(Device(after), "gpu-0-mig-1g-10gb-6");
}

// A partition kube-scheduler allocated on a GPU not in MIG mode (the driver may switch it on)
// holds the GPU whole; once the node shows the GPU in MIG mode, it holds its instance.
TEST_F(DraMigTest, APartitionOnAGpuSwitchedToMigModeIsReadAgain) {
  ledger_.OnNode(Change::kUpdated, DecodeNode(NodeObject("n1").Gpus(2, "H100-80GB").Json()));
  json slice = SliceObject("n1").Gpus(2, "H100-80GB").Generation(2).Json();
  for (json& d : SliceObject("n1").Gpus(2, "H100-80GB").MigDevices(1)) {
    slice["spec"]["devices"].push_back(d);
  }
  alloc_.OnSlice(Change::kUpdated, dra::DecodeSlice(slice));
  ledger_.Sync();
  alloc_.OnNodesChanged();
  json ks = ClaimObject("ns", "ks")
                .Uid("uid-ks")
                .Request("gpu", "mig.tessera.dev")
                .Allocated("n1", json::array({testing::Result("gpu", "n1", "gpu-1-mig-1g-10gb-6")}))
                .ReservedFor("ks-pod", "uid-ks-pod")
                .Json();
  alloc_.OnClaim(Change::kAdded, dra::DecodeClaim(ks));
  const std::string key = DraAllocator::ClaimKey("ns/ks");
  ASSERT_TRUE(ledger_.Accounted(key));
  EXPECT_TRUE(ledger_.Find(key)->gpus.gpus[0].grant.exclusive);
  // The agent turned MIG mode on for GPU 1: the node and its slices say so.
  ledger_.OnNode(Change::kUpdated, DecodeNode(NodeObject("n1").Gpus(2, "H100-80GB").Mig(1).Json()));
  AddSlices(SliceObject("n1").Gpus(2, "H100-80GB").MigMode(1).Generation(3));
  ledger_.Sync();
  alloc_.OnNodesChanged();
  ASSERT_TRUE(ledger_.Accounted(key));
  EXPECT_EQ(ledger_.Find(key)->gpus.gpus[0].mig_profile, "1g.10gb");
  EXPECT_EQ(ledger_.Find(key)->gpus.gpus[0].mig_start, 6);
  // GPU 1 takes more MIG instances beside it.
  DraAllocator::Decision m = Place(*PodWithClaim("m", "mig.tessera.dev", "3g.40gb"));
  ASSERT_TRUE(m.result.placed()) << m.result.reason;
  EXPECT_EQ(Device(m), "gpu-1-mig-3g-40gb-0");
}

}  // namespace
}  // namespace tessera::k8s
