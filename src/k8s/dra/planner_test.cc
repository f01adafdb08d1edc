#include "k8s/dra/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/engine.h"
#include "core/policy/policy.h"
#include "core/testing/cluster_builder.h"
#include "k8s/testing/dra_objects.h"

namespace tessera::k8s::dra {
namespace {

using nlohmann::json;
using testing::ClaimObject;
using ::testing::HasSubstr;
using testing::SliceObject;

constexpr int64_t kGi = int64_t{1024} * 1024 * 1024 * 1000;  // milli-units

class PlannerTest : public ::testing::Test {
 protected:
  PlannerTest()
      : cluster_(core::testing::ClusterBuilder()
                     .Node("a")
                     .Gpus(8, "H100-80GB", 81920)
                     .Node("b")
                     .Gpus(8, "H100-80GB", 81920)
                     .Build()) {
    cache_.OnClass(false, DecodeClass(testing::GpuClass()));
    cache_.OnClass(false, DecodeClass(testing::ShareClass()));
    // Node a: GPUs 0-3 in NVLink domain x, 4-7 in y; node b: all in its own island.
    SliceObject a = SliceObject("a").Gpus(8);
    for (int i = 0; i < 8; ++i) a.Attribute(i, "nvlinkDomain", {{"string", i < 4 ? "x" : "y"}});
    cache_.OnSlice(false, DecodeSlice(a.Json()));
    cache_.OnSlice(false, DecodeSlice(SliceObject("b").Gpus(8).Json()));
  }

  std::shared_ptr<const ClaimInfo> AddClaim(const ClaimObject& c) {
    auto info = DecodeClaim(c.Json());
    EXPECT_TRUE(info->error.empty()) << info->error;
    cache_.OnClaim(false, info);
    return info;
  }
  PodClaims Refs(std::vector<std::string> claims) {
    PodClaims p;
    for (const std::string& c : claims) p.refs.push_back(PodClaimRef{c, c});
    return p;
  }

  core::Cluster cluster_;
  DraCache cache_{"gpu.tessera.dev"};
  ClaimPlanner planner_{cache_};
};

TEST_F(PlannerTest, AShareBecomesOneShareAskAndItsAllocationSaysWhatItConsumes) {
  AddClaim(
      ClaimObject("ns", "share").Request("gpu", "gpu-share.tessera.dev").Capacity("memory", "4Gi"));
  PodPlan plan = planner_.Plan(Refs({"share"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  ASSERT_EQ(plan.options.size(), 1u);
  const PodPlan::Option& o = plan.options[0];
  EXPECT_EQ(o.gpu, core::GpuAsk::Share(4096, 0));
  ASSERT_NE(o.nodes, nullptr);  // every GPU eligible: the engine's indexes stay in play
  EXPECT_EQ(o.nodes->size(), 2);

  core::Placement p;
  p.node = cluster_.FindNode("b");
  p.gpus.push_back(core::GpuGrant{3, 4096, 0, false});
  absl::StatusOr<std::vector<ClaimAllocation>> a = planner_.Allocate(o, p, cluster_);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 1u);
  const json& r = (*a)[0].allocation["devices"]["results"][0];
  EXPECT_EQ(r["request"], "gpu");
  EXPECT_EQ(r["pool"], "b");
  EXPECT_EQ(r["device"], "gpu-3");
  EXPECT_EQ(r["consumedCapacity"]["memory"], "4Gi");
  EXPECT_EQ(r["consumedCapacity"]["compute"], "0");
  EXPECT_EQ(r["shareID"].get<std::string>().size(), 36u);
  EXPECT_EQ((*a)[0].allocation["nodeSelector"], NodeSelectorFor("b"));
  ASSERT_EQ((*a)[0].holding.gpus.size(), 1u);
  EXPECT_EQ((*a)[0].holding.gpus[0].grant, (core::GpuGrant{3, 4096, 0, false}));

  // Read back from the claim as the API server returns it: the same holding.
  json claim = ClaimObject("ns", "share")
                   .Request("gpu", "gpu-share.tessera.dev")
                   .Capacity("memory", "4Gi")
                   .Json();
  claim["status"]["allocation"] = (*a)[0].allocation;
  absl::StatusOr<records::Assignment> held = planner_.HoldingOf(*DecodeClaim(claim), cluster_);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(*held, (*a)[0].holding);
}

TEST_F(PlannerTest, WholeGpusOverClaimsAndAnAllocatedClaimFixesTheNode) {
  AddClaim(ClaimObject("ns", "two").Request("gpu", "gpu.tessera.dev", 2));
  AddClaim(ClaimObject("ns", "one").Request("gpu", "gpu.tessera.dev"));
  PodPlan plan = planner_.Plan(Refs({"two", "one"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  EXPECT_EQ(plan.options[0].gpu, core::GpuAsk::Whole(3));
  EXPECT_TRUE(plan.fixed_node.empty());

  json shared = ClaimObject("ns", "shared")
                    .Request("gpu", "gpu.tessera.dev")
                    .Allocated("a", json::array({testing::Result(
                                        "gpu", "a", "gpu-5", {{"memory", "80Gi"}, {"compute", "0"}},
                                        "8b0e2f1c-0000-4000-8000-000000000001")}))
                    .ReservedFor("p1", "uid-1")
                    .Json();
  cache_.OnClaim(false, DecodeClaim(shared));
  plan = planner_.Plan(Refs({"shared"}), "ns", "uid-2", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  EXPECT_EQ(plan.fixed_node, "a");
  EXPECT_FALSE(plan.options[0].claims[0].allocate);
  EXPECT_FALSE(plan.options[0].claims[0].reserved);
  // It consumes all the memory: the GPU is held whole.
  absl::StatusOr<records::Assignment> held = planner_.HoldingOf(*DecodeClaim(shared), cluster_);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->gpus[0].grant, (core::GpuGrant{5, 81920, 1000, true}));
}

TEST_F(PlannerTest, MatchAttributeSplitsANodeIntoItsDomains) {
  AddClaim(ClaimObject("ns", "eight")
               .Request("gpu", "gpu.tessera.dev", 8)
               .MatchAttribute("gpu.tessera.dev/nvlinkDomain"));
  PodPlan plan = planner_.Plan(Refs({"eight"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  const PodPlan::Option& o = plan.options[0];
  ASSERT_TRUE(o.use_candidates);
  ASSERT_EQ(o.candidates.size(), 3u);
  EXPECT_EQ(o.candidates[0].gpu_mask, 0x0fu);
  EXPECT_EQ(o.candidates[1].gpu_mask, 0xf0u);
  EXPECT_EQ(o.candidates[2].node, cluster_.FindNode("b"));
  EXPECT_EQ(o.candidates[2].gpu_mask, 0xffu);
  // The engine, given these candidates, can only use node b.
  auto policy = core::CreatePolicy("binpack", {});
  ASSERT_TRUE(policy.ok());
  core::Engine engine(cluster_, std::move(*policy));
  core::PodRequest req;
  req.name = "ns/p";
  req.gpu = o.gpu;
  core::PlacementResult r = engine.Place(req, core::Mode::kCommit, &o.candidates);
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(r.placement.node, cluster_.FindNode("b"));
  absl::StatusOr<std::vector<ClaimAllocation>> a = planner_.Allocate(o, r.placement, cluster_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)[0].allocation["devices"]["results"].size(), 8u);

  // Handed GPUs of two domains, Allocate refuses.
  core::Placement bad;
  bad.node = cluster_.FindNode("a");
  for (int g = 0; g < 8; ++g) bad.gpus.push_back(core::GpuGrant{g, 81920, 1000, true});
  EXPECT_THAT(planner_.Allocate(o, bad, cluster_).status().message(), HasSubstr("differ in"));
}

TEST_F(PlannerTest, SelectorsChooseDevicesAndUnsupportedOnesAreRefusedByName) {
  AddClaim(ClaimObject("ns", "low")
               .Request("gpu", "gpu.tessera.dev")
               .Selector("device.attributes['gpu.tessera.dev'].index in [0, 1]"));
  PodPlan plan = planner_.Plan(Refs({"low"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  ASSERT_TRUE(plan.options[0].use_candidates);
  ASSERT_EQ(plan.options[0].candidates.size(), 2u);
  EXPECT_EQ(plan.options[0].candidates[0].gpu_mask, 0x3u);

  AddClaim(ClaimObject("ns", "regex")
               .Request("gpu", "gpu.tessera.dev")
               .Selector("device.attributes['gpu.tessera.dev'].model.matches('^H1')"));
  plan = planner_.Plan(Refs({"regex"}), "ns", "uid-1", cluster_);
  EXPECT_EQ(plan.kind, PodPlan::Kind::kInvalid);
  EXPECT_THAT(plan.reason, HasSubstr("claim ns/regex request gpu"));
  EXPECT_THAT(plan.reason, HasSubstr("the method 'matches'"));

  AddClaim(ClaimObject("ns", "none")
               .Request("gpu", "gpu.tessera.dev")
               .Selector("device.attributes['gpu.tessera.dev'].model == 'A100'"));
  plan = planner_.Plan(Refs({"none"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady);
  EXPECT_THAT(plan.options[0].why_none, HasSubstr("16 rejected by selectors"));
}

TEST_F(PlannerTest, WaitsAndRefusals) {
  PodClaims tmpl;
  tmpl.refs.push_back(PodClaimRef{"gpu", "", "gpu-template"});
  EXPECT_EQ(planner_.Plan(tmpl, "ns", "u", cluster_).kind, PodPlan::Kind::kWait);
  EXPECT_EQ(planner_.Plan(Refs({"missing"}), "ns", "u", cluster_).kind, PodPlan::Kind::kWait);
  AddClaim(ClaimObject("ns", "all").Request("gpu", "gpu.tessera.dev").AllocationMode("All"));
  PodPlan plan = planner_.Plan(Refs({"all"}), "ns", "u", cluster_);
  EXPECT_EQ(plan.kind, PodPlan::Kind::kInvalid);
  EXPECT_THAT(plan.reason, HasSubstr("allocationMode All"));
  AddClaim(ClaimObject("ns", "noclass").Request("gpu", "nope.example.com"));
  plan = planner_.Plan(Refs({"noclass"}), "ns", "u", cluster_);
  EXPECT_EQ(plan.kind, PodPlan::Kind::kWait);
  EXPECT_THAT(plan.reason, HasSubstr("DeviceClass nope.example.com does not exist"));
  AddClaim(ClaimObject("ns", "shares")
               .Request("gpu", "gpu-share.tessera.dev", 2)
               .Capacity("memory", "4Gi"));
  EXPECT_EQ(planner_.Plan(Refs({"shares"}), "ns", "u", cluster_).kind, PodPlan::Kind::kInvalid);
}

// MIG partitions (the driver's partitionable devices on shared counters): node m has two H100s
// in MIG mode; node w two H100s not in MIG mode, whose GPU 1 the driver also offers as MIG
// partitions (it may switch MIG mode on).
class MigPlannerTest : public ::testing::Test {
 protected:
  MigPlannerTest()
      : cluster_(core::testing::ClusterBuilder()
                     .Node("m")
                     .Gpus(2, "H100-80GB", 81920)
                     .Mig()
                     .Node("w")
                     .Gpus(2, "H100-80GB", 81920)
                     .Build()) {
    cache_.OnClass(false, DecodeClass(testing::GpuClass()));
    cache_.OnClass(
        false, DecodeClass(testing::ClassObject(
                   "mig.tessera.dev", {"device.attributes[\"gpu.tessera.dev\"].type == \"mig\""})));
    const SliceObject m = SliceObject("m").Gpus(2).MigMode(0).MigMode(1);
    cache_.OnSlice(false, DecodeSlice(m.Json()));
    cache_.OnSlice(false, DecodeSlice(m.CountersJson()));  // the pool's second slice
    json w = SliceObject("w").Gpus(2).Json();
    for (json& d : SliceObject("w").Gpus(2).MigDevices(1)) w["spec"]["devices"].push_back(d);
    cache_.OnSlice(false, DecodeSlice(w));
  }
  void AddClaim(const ClaimObject& c) {
    auto info = DecodeClaim(c.Json());
    ASSERT_TRUE(info->error.empty()) << info->error;
    cache_.OnClaim(false, info);
  }
  PodClaims Refs(std::vector<std::string> claims) {
    PodClaims p;
    for (const std::string& c : claims) p.refs.push_back(PodClaimRef{c, c});
    return p;
  }

  core::Cluster cluster_;
  DraCache cache_{"gpu.tessera.dev"};
  ClaimPlanner planner_{cache_};
};

TEST_F(MigPlannerTest, AMigClaimIsPlacedByTheEnginesMigPolicyAndNamesThePartition) {
  AddClaim(ClaimObject("ns", "mig")
               .Request("mig", "mig.tessera.dev")
               .Selector("device.attributes[\"gpu.tessera.dev\"].profile == \"1g.10gb\""));
  PodPlan plan = planner_.Plan(Refs({"mig"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  ASSERT_EQ(plan.options.size(), 1u);
  const PodPlan::Option& o = plan.options[0];
  EXPECT_EQ(o.gpu, core::GpuAsk::Mig("1g.10gb"));
  ASSERT_TRUE(o.use_candidates);
  // Only node m's GPUs, which are in MIG mode (w's GPU 1 is offered, but not in MIG mode).
  ASSERT_EQ(o.candidates.size(), 1u);
  EXPECT_EQ(o.candidates[0].node, cluster_.FindNode("m"));
  EXPECT_EQ(o.candidates[0].gpu_mask, 0x3u);

  // The engine's MIG policy (tessera's: least slice loss) puts a 1g.10gb at slice 6 of an empty
  // GPU; the allocation names that partition.
  auto policy = core::CreatePolicy("tessera", {});
  ASSERT_TRUE(policy.ok());
  core::Engine engine(cluster_, std::move(*policy));
  core::PodRequest req;
  req.name = "ns/p";
  req.gpu = o.gpu;
  core::PlacementResult r = engine.Place(req, core::Mode::kCommit, &o.candidates);
  ASSERT_TRUE(r.placed()) << r.reason;
  ASSERT_EQ(r.placement.gpus.size(), 1u);
  EXPECT_EQ(r.placement.gpus[0].mig.start, 6);
  absl::StatusOr<std::vector<ClaimAllocation>> a = planner_.Allocate(o, r.placement, cluster_);
  ASSERT_TRUE(a.ok()) << a.status();
  const json& result = (*a)[0].allocation["devices"]["results"][0];
  EXPECT_EQ(result["device"], StrCat("gpu-", r.placement.gpus[0].gpu, "-mig-1g-10gb-6"));
  EXPECT_EQ(result["pool"], "m");
  EXPECT_FALSE(result.contains("shareID"));
  EXPECT_FALSE(result.contains("consumedCapacity"));
  ASSERT_EQ((*a)[0].holding.gpus.size(), 1u);
  EXPECT_EQ((*a)[0].holding.gpus[0].mig_profile, "1g.10gb");
  EXPECT_EQ((*a)[0].holding.gpus[0].mig_start, 6);
  EXPECT_FALSE((*a)[0].holding.mig_create);  // the driver creates the instance: no plan held

  // Read back from the claim (as kube-scheduler's allocation would be read too): the same
  // MIG instance, not the whole GPU.
  json claim = ClaimObject("ns", "mig").Request("mig", "mig.tessera.dev").Json();
  claim["status"]["allocation"] = (*a)[0].allocation;
  absl::StatusOr<records::Assignment> held = planner_.HoldingOf(*DecodeClaim(claim), cluster_);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(*held, (*a)[0].holding);
  absl::StatusOr<core::Placement> back = records::AssignmentToPlacement(cluster_, *held);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gpus[0], r.placement.gpus[0]);
}

TEST_F(MigPlannerTest, AnyMigPartitionIsOneOptionPerProfileSmallestFirst) {
  AddClaim(ClaimObject("ns", "any").Request("mig", "mig.tessera.dev"));
  PodPlan plan = planner_.Plan(Refs({"any"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  std::vector<std::string> profiles;
  for (const PodPlan::Option& o : plan.options) profiles.push_back(o.gpu.mig_profile);
  EXPECT_EQ(profiles, (std::vector<std::string>{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb",
                                                "3g.40gb", "4g.40gb", "7g.80gb"}));
}

TEST_F(MigPlannerTest, AWholeGpuClassKeepsMeaningWholeGpus) {
  // GpuClass selects every device of the driver: whole GPUs are published (node w), so the
  // request means whole GPUs, as before MIG partitions were understood.
  AddClaim(ClaimObject("ns", "whole").Request("gpu", "gpu.tessera.dev"));
  PodPlan plan = planner_.Plan(Refs({"whole"}), "ns", "uid-1", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  EXPECT_EQ(plan.options[0].gpu, core::GpuAsk::Whole(1));
}

TEST_F(MigPlannerTest, RefusalsSayWhatToDo) {
  // A selector that picks some placements of a profile: tessera chooses the start itself.
  AddClaim(ClaimObject("ns", "start")
               .Request("mig", "mig.tessera.dev")
               .Selector("device.attributes[\"gpu.tessera.dev\"].migStart == 0"));
  PodPlan plan = planner_.Plan(Refs({"start"}), "ns", "u", cluster_);
  EXPECT_EQ(plan.kind, PodPlan::Kind::kInvalid);
  EXPECT_THAT(plan.reason, HasSubstr("not by migStart"));
  // Two MIG partitions in one request.
  AddClaim(ClaimObject("ns", "two").Request("mig", "mig.tessera.dev", 2));
  plan = planner_.Plan(Refs({"two"}), "ns", "u", cluster_);
  EXPECT_EQ(plan.kind, PodPlan::Kind::kInvalid);
  EXPECT_THAT(plan.reason, HasSubstr("one MIG instance per pod"));
  // Only partitions of a GPU not in MIG mode match: no fit, and why.
  AddClaim(ClaimObject("ns", "onw")
               .Request("mig", "mig.tessera.dev")
               .Selector("device.attributes[\"gpu.tessera.dev\"].nvlinkDomain == \"w\""));
  plan = planner_.Plan(Refs({"onw"}), "ns", "u", cluster_);
  ASSERT_EQ(plan.kind, PodPlan::Kind::kReady) << plan.reason;
  EXPECT_THAT(plan.options[0].why_none, HasSubstr("25 MIG partitions on GPUs not in MIG mode"));
  EXPECT_THAT(plan.options[0].why_none, HasSubstr("nvidia-smi -i <index> -mig 1"));
}

TEST_F(MigPlannerTest, AMigPartitionOnAGpuNotInMigModeIsHeldWhole) {
  // kube-scheduler allocated a partition of w's GPU 1 (the driver turns MIG mode on when it
  // prepares the claim): until the node shows MIG mode, the GPU is held whole.
  json claim =
      ClaimObject("ns", "ks")
          .Request("mig", "mig.tessera.dev")
          .Allocated("w", json::array({testing::Result("mig", "w", "gpu-1-mig-3g-40gb-4")}))
          .Json();
  absl::StatusOr<records::Assignment> held = planner_.HoldingOf(*DecodeClaim(claim), cluster_);
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->gpus.size(), 1u);
  EXPECT_TRUE(held->gpus[0].grant.exclusive);
  EXPECT_TRUE(held->gpus[0].mig_profile.empty());
  // On m (MIG mode): the instance.
  claim = ClaimObject("ns", "ks")
              .Request("mig", "mig.tessera.dev")
              .Allocated("m", json::array({testing::Result("mig", "m", "gpu-1-mig-3g-40gb-4")}))
              .Json();
  held = planner_.HoldingOf(*DecodeClaim(claim), cluster_);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->gpus[0].mig_profile, "3g.40gb");
  EXPECT_EQ(held->gpus[0].mig_start, 4);
  EXPECT_FALSE(held->gpus[0].grant.exclusive);
}

TEST(ConsumedCapacity, RoundsUpAsKubeSchedulerDoes) {
  DeviceCapacity memory{80 * kGi, RequestPolicy{}};
  memory.policy->has_range = true;
  memory.policy->min = kGi / 1024;  // 1Mi
  memory.policy->step = kGi / 1024;
  EXPECT_EQ(ConsumedCapacity(4 * kGi, memory), 4 * kGi);
  EXPECT_EQ(ConsumedCapacity(4 * kGi + 1, memory), 4 * kGi + kGi / 1024);
  EXPECT_EQ(ConsumedCapacity(std::nullopt, memory), 80 * kGi);  // no default: all of it
  EXPECT_EQ(ConsumedCapacity(81 * kGi, memory), std::nullopt);
  DeviceCapacity compute{100'000, RequestPolicy{}};
  compute.policy->default_milli = 0;
  compute.policy->has_range = true;
  compute.policy->min = 0;
  compute.policy->max = 100'000;
  compute.policy->step = 1'000;
  EXPECT_EQ(ConsumedCapacity(std::nullopt, compute), 0);
  EXPECT_EQ(ConsumedCapacity(25'500, compute), 26'000);
  DeviceCapacity listed{100'000, RequestPolicy{}};
  listed.policy->valid_values = {10'000, 50'000};
  EXPECT_EQ(ConsumedCapacity(20'000, listed), 50'000);
  EXPECT_EQ(ConsumedCapacity(60'000, listed), std::nullopt);
}

TEST(ShareId, IsAVersion4Uuid) {
  std::string a = NewShareId(), b = NewShareId();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.size(), 36u);
  EXPECT_EQ(a[14], '4');
  EXPECT_TRUE(a[19] == '8' || a[19] == '9' || a[19] == 'a' || a[19] == 'b');
}

}  // namespace
}  // namespace tessera::k8s::dra
