#include "core/policy/policy.h"

#include <set>

#include "common/random.h"
#include "common/strings.h"
#include "core/engine.h"
#include "core/policy/tessera.h"
#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using testing::MakePolicy;
using testing::Pod;
using testing::RealityCheckCluster;

TEST(PolicyRegistry, KnowsEveryBuiltInAndRejectsOthers) {
  for (const std::string& name : PolicyNames()) {
    absl::StatusOr<std::unique_ptr<Policy>> p = CreatePolicy(name, {});
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  EXPECT_EQ(PolicyNames().front(), kDefaultPolicy);
  absl::StatusOr<std::unique_ptr<Policy>> bad = CreatePolicy("nope", {});
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("known policies: tessera"));
}

TEST(WholeGpuPolicy, ShareTakesAWholeGpu) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("whole-gpu"));
  int placed = 0;
  for (int i = 0; i < 20; ++i) {
    placed += e.Place(Pod("p" + std::to_string(i), GpuAsk::Share(4096, 0))).placed();
  }
  EXPECT_EQ(placed, 10);
  EXPECT_EQ(e.state().gpus_in_use(), 10);
  EXPECT_EQ(e.state().allocated_gpu_memory_mib(), 10 * 81920);
}

TEST(WholeGpuPolicy, TopologyBlindLowestIndicesAndNoGangs) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("whole-gpu"));
  std::vector<PodRequest> gang;
  for (int i = 0; i < 8; ++i) {
    PodRequest p = Pod("t" + std::to_string(i), GpuAsk::Whole(1));
    p.gang = GangAsk{"t", 8, "nvlink-domain", true};
    gang.push_back(p);
  }
  auto results = e.PlaceGang(gang);
  std::set<int> nodes;
  for (const PlacementResult& r : results) {
    ASSERT_TRUE(r.placed());
    nodes.insert(r.placement.node.value());
  }
  EXPECT_EQ(nodes.size(), 2u) << "spreads like the default scheduler, blind to the gang";
}

TEST(BinpackPolicy, FullestGpuFirst) {
  Cluster c = ClusterBuilder().Node("a").Gpus(3, "A100-80GB").Build();
  Engine e(c, MakePolicy("binpack"));
  ASSERT_TRUE(e.Place(Pod("x", GpuAsk::Share(60 * 1024, 0))).placed());
  PlacementResult r = e.Place(Pod("y", GpuAsk::Share(16 * 1024, 0)));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(r.placement.gpus[0].gpu, e.Find("x")->gpus[0].gpu);
}

TEST(SpreadPolicy, EmptiestGpuAndNodeFirst) {
  Cluster c =
      ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Node("b").Gpus(2, "A100-80GB").Build();
  Engine e(c, MakePolicy("spread"));
  PlacementResult x = e.Place(Pod("x", GpuAsk::Whole(1)));
  PlacementResult y = e.Place(Pod("y", GpuAsk::Whole(1)));
  ASSERT_TRUE(x.placed() && y.placed());
  EXPECT_NE(x.placement.node, y.placement.node);
  PlacementResult s1 = e.Place(Pod("s1", GpuAsk::Share(1024, 0)));
  PlacementResult s2 = e.Place(Pod("s2", GpuAsk::Share(1024, 0)));
  ASSERT_TRUE(s1.placed() && s2.placed());
  EXPECT_FALSE(s1.placement.node == s2.placement.node &&
               s1.placement.gpus[0].gpu == s2.placement.gpus[0].gpu);
}

TEST(TesseraPolicy, RealityCheckSharesLandOnThePcieServer) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  for (int i = 0; i < 20; ++i) {
    PlacementResult r = e.Place(Pod("p" + std::to_string(i), GpuAsk::Share(4096, 0)));
    ASSERT_TRUE(r.placed()) << r.reason;
    EXPECT_EQ(c.node(r.placement.node).name, "pcie-0");
  }
  EXPECT_EQ(e.state().gpus_in_use(), 1);
  EXPECT_EQ(e.state().whole_free_count(c.FindNode("nvswitch-0")), 8);
}

TEST(TesseraPolicy, WholeGpusBestFitKeepsBigNodesWhole) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  PlacementResult r = e.Place(Pod("one", GpuAsk::Whole(1)));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(c.node(r.placement.node).name, "pcie-0");
  PlacementResult eight = e.Place(Pod("eight", GpuAsk::Whole(8)));
  EXPECT_TRUE(eight.placed());
}

TEST(TesseraPolicy, CpuOnlyPodsAvoidNodesWithFreeGpus) {
  Cluster c = ClusterBuilder()
                  .Node("gpu")
                  .Cpu(64)
                  .Gpus(8, "A100-80GB")
                  .Node("cpu")
                  .Cpu(64)
                  .Gpus(0, "none")
                  .Build();
  Engine e(c, MakePolicy("tessera"));
  PlacementResult r = e.Place(Pod("c", GpuAsk::None(), 4000));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(c.node(r.placement.node).name, "cpu");
}

// Where the second of two 0.47 shares goes when three asks in four are whole GPUs: while the
// cluster fills it opens a free GPU (0.53 left beside each share, which the mix fills one day;
// pairing strands 0.06), and once a pod has left it pairs up, keeping the free GPU for a
// whole-GPU pod (opening now costs 80 x 0.75 = 60 milli-GPU, more than the 0.06 GPU pairing
// strands less the best-fit nudge).
TEST(TesseraPolicy, SharesPairUpOnceThePodsChurn) {
  Cluster c = ClusterBuilder().Node("a").Gpus(8, "A100-80GB").Build();
  for (bool churn : {false, true}) {
    Engine e(c, MakePolicy("tessera"));
    for (const char* w : {"w1", "w2", "w3"})
      ASSERT_TRUE(e.Place(Pod(w, GpuAsk::Whole(1))).placed());
    PlacementResult first = e.Place(Pod("s1", GpuAsk::Fraction(470)));
    ASSERT_TRUE(first.placed());
    ASSERT_TRUE(e.Place(Pod("gone", GpuAsk::Whole(1))).placed());
    if (churn) {
      ASSERT_TRUE(e.Release("gone").ok());
    }
    PlacementResult second = e.Place(Pod("s2", GpuAsk::Fraction(470)));
    ASSERT_TRUE(second.placed());
    EXPECT_EQ(second.placement.gpus[0].gpu == first.placement.gpus[0].gpu, churn)
        << (churn ? "churning: pairs with the first share" : "filling: opens a free GPU");
  }
}

std::unique_ptr<Policy> MakeTessera(bool reserve_bound_models) {
  TesseraOptions tessera;
  tessera.reserve_bound_models = reserve_bound_models;
  return NewTesseraPolicy(PolicyOptions{}, tessera);
}

// A pod that may use any GPU, beside pods bound to T4 GPUs: without the reserve for bound models
// (the rule before issue 31), while filling, the order (smaller nodes first) and the exact fit
// send it to the T4 node's last GPU; once pods churn it keeps off the T4 node (the T4-bound pods'
// demand per T4 GPU is 1.5 times the mix's per GPU).
TEST(TesseraPolicy, ChurningKeepsContendedModelsForThePodsBoundToThem) {
  Cluster c =
      ClusterBuilder().Node("t4").Gpus(2, "T4", 15360).Node("big").Gpus(4, "A100-80GB").Build();
  PodRequest bound = Pod("t1", GpuAsk::Whole(1));
  bound.gpu_models = {"T4"};
  for (bool churn : {false, true}) {
    Engine e(c, MakeTessera(/*reserve_bound_models=*/false));
    PlacementResult t1 = e.Place(bound);
    ASSERT_TRUE(t1.placed());
    ASSERT_EQ(c.node(t1.placement.node).name, "t4");
    if (churn) {
      ASSERT_TRUE(e.Place(Pod("gone", GpuAsk::Whole(1))).placed());
      ASSERT_TRUE(e.Release("gone").ok());
    }
    PlacementResult any = e.Place(Pod("any", GpuAsk::Whole(1)));
    ASSERT_TRUE(any.placed());
    EXPECT_EQ(c.node(any.placement.node).name, churn ? "big" : "t4");
  }
}

// While the cluster fills, a pod that may use any GPU takes T4 GPUs while the T4 GPUs have room
// to spare for the T4-bound pods, and keeps off them once they are short: half of the asks seen
// are bound to T4, so the T4 GPUs are reserved once fewer than half of the free GPUs are T4s.
// After t1 and any1: T4 3 of 5 free (any1 takes t4a's last GPU, an exact fit); after t2: 1 of 3,
// so any2 goes to the A100 node instead of t4b's last GPU. Without the reserve it takes that GPU.
TEST(TesseraPolicy, FillingKeepsTheLastFreeGpusOfABoundModel) {
  Cluster c = ClusterBuilder()
                  .Node("t4a")
                  .Gpus(2, "T4", 15360)
                  .Node("t4b")
                  .Gpus(2, "T4", 15360)
                  .Node("big")
                  .Gpus(2, "A100-80GB")
                  .NvSwitch()
                  .Build();
  for (bool reserve : {true, false}) {
    Engine e(c, MakeTessera(reserve));
    PodRequest t1 = Pod("t1", GpuAsk::Whole(1));
    t1.gpu_models = {"T4"};
    PodRequest t2 = t1;
    t2.name = "t2";
    PlacementResult r1 = e.Place(t1);
    ASSERT_TRUE(r1.placed());
    ASSERT_EQ(c.node(r1.placement.node).name, "t4a");
    PlacementResult any1 = e.Place(Pod("any1", GpuAsk::Whole(1)));
    ASSERT_TRUE(any1.placed());
    EXPECT_EQ(c.node(any1.placement.node).name, "t4a") << "reserve " << reserve;
    PlacementResult r2 = e.Place(t2);
    ASSERT_TRUE(r2.placed());
    ASSERT_EQ(c.node(r2.placement.node).name, "t4b");
    PlacementResult any2 = e.Place(Pod("any2", GpuAsk::Whole(1)));
    ASSERT_TRUE(any2.placed());
    EXPECT_EQ(c.node(any2.placement.node).name, reserve ? "big" : "t4b");
  }
}

// The reserve is for whole GPUs only while filling: with the T4 GPUs reserved (one T4-bound pod
// seen of two asks; 1 of 3 GPUs free are T4s), a whole GPU that may use any model goes to the
// A100 node, but a share still takes the T4 node's free GPU first, as without the reserve (the
// order puts the smaller PCIe node first, and a share pays the light filling weight there:
// keeping shares off cost the FGD protocol's fill more than keeping whole GPUs off did;
// bench/results/model-reserve.md).
TEST(TesseraPolicy, FillingLetsSharesUseAReservedModel) {
  Cluster c = ClusterBuilder()
                  .Node("t4")
                  .Gpus(2, "T4", 15360)
                  .Node("big")
                  .Gpus(2, "A100-80GB")
                  .NvSwitch()
                  .Build();
  PodRequest t1 = Pod("t1", GpuAsk::Whole(1));
  t1.gpu_models = {"T4"};
  for (bool share : {false, true}) {
    Engine e(c, MakeTessera(true));
    ASSERT_EQ(c.node(e.Place(t1).placement.node).name, "t4");
    PlacementResult r = e.Place(Pod("any", share ? GpuAsk::Fraction(500) : GpuAsk::Whole(1)));
    ASSERT_TRUE(r.placed());
    EXPECT_EQ(c.node(r.placement.node).name, share ? "t4" : "big") << "share " << share;
  }
}

// The free GPUs of each bound model set are counted once and kept up to date (CountAllFree): a
// node that joins in place (ChangeNodes adding nodes alone, Policy::OnNodesAdded) keeps the counts
// made before, counting only the new node. An engine that lived through joins and new request
// shapes decides as one whose joins came with a cordon left as it is (the rebuild:
// OnClusterChanged counts every node afresh, the mix kept): pods bound to T4 or L4 GPUs and pods
// that may use any GPU, placed while the cluster fills and nodes join, every decision compared.
TEST(TesseraPolicy, BoundModelCountsSurviveNodesJoining) {
  Cluster c = ClusterBuilder()
                  .Node("t4a")
                  .Gpus(4, "T4", 15360)
                  .Node("l4a")
                  .Gpus(2, "L4", 23034)
                  .Node("big")
                  .Gpus(4, "A100-80GB")
                  .NvSwitch()
                  .Build();
  std::vector<NodeSpec> joining;
  for (int i = 0; i < 8; ++i) {
    ClusterBuilder b;
    if (i % 3 == 0) b.Node(StrCat("t4-", i)).Gpus(2, "T4", 15360);
    if (i % 3 == 1) b.Node(StrCat("a100-", i)).Gpus(4, "A100-80GB").NvSwitch();
    if (i % 3 == 2) b.Node(StrCat("l4-", i)).Gpus(4, "L4", 23034);
    joining.push_back(b.Build().nodes()[0]);
  }
  Engine in_place(c, MakeTessera(true));
  Engine rebuilt(c, MakeTessera(true));
  Random rng(11);
  size_t joined = 0;
  int placed = 0;
  for (int step = 0; step < 160; ++step) {
    if (step % 10 == 9 && joined < joining.size()) {
      const NodeSpec& n = joining[joined++];
      ASSERT_TRUE(in_place.ChangeNodes(NodeChanges{{}, {}, {n}, {}}).ok());
      const NodeId first(0);
      ASSERT_TRUE(rebuilt
                      .ChangeNodes(
                          NodeChanges{{}, {}, {n}, {{first, !rebuilt.state().accepts_pods(first)}}})
                      .ok());
    }
    GpuAsk ask = rng.Uniform(3) == 0 ? GpuAsk::Share(1024 * (1 + rng.Uniform(12)), 0)
                                     : GpuAsk::Whole(1 + rng.Uniform(2));
    PodRequest p = Pod(StrCat("p", step), ask, 500, 1024);
    const uint64_t bound = rng.Uniform(4);
    if (bound == 0) p.gpu_models = {"T4"};
    if (bound == 1) p.gpu_models = {"L4", "T4"};
    PlacementResult want = rebuilt.Place(p);
    PlacementResult got = in_place.Place(p);
    ASSERT_EQ(got.outcome, want.outcome) << "step " << step << ": " << got.reason;
    if (!got.placed()) continue;
    ++placed;
    ASSERT_EQ(got.placement.node, want.placement.node) << "step " << step;
    ASSERT_EQ(got.placement.gpus, want.placement.gpus) << "step " << step;
  }
  EXPECT_EQ(joined, joining.size());
  EXPECT_GT(placed, 40);
}

TEST(TopologyAwarePolicies, MultiGpuPodGetsAPcieSwitchPair) {
  // pcie-8gpu: pairs (0,1) (2,3) (4,5) (6,7). With 1, 2 and 3 free, a 2-GPU pod takes 2+3.
  Cluster c = ClusterBuilder().Node("n").Profile("pcie-8gpu").Build();
  for (const char* policy : {"tessera", "binpack", "spread"}) {
    Engine e(c, MakePolicy(policy));
    for (int g : {0, 4, 5, 6, 7}) {
      Placement p;
      p.node = NodeId(0);
      p.gpus.push_back(GpuGrant{g, c.node(NodeId(0)).gpus[g].memory_mib, 1000, true});
      ASSERT_TRUE(e.Restore("busy" + std::to_string(g), p).ok());
    }
    PlacementResult r = e.Place(Pod("pair", GpuAsk::Whole(2)));
    ASSERT_TRUE(r.placed());
    EXPECT_EQ(r.placement.gpu_mask(), 0b1100u) << policy;
  }
}

// Random workloads of every kind on a mixed cluster: an indexed Choose must pick exactly what
// the plain scan picks, and the state must stay consistent through releases.
class IndexEquivalence : public ::testing::TestWithParam<const char*> {};

TEST_P(IndexEquivalence, IndexedChooseEqualsScan) {
  ClusterBuilder b;
  for (int i = 0; i < 12; ++i) {
    b.Node("n" + std::to_string(i)).Cpu(16 + 8 * (i % 3)).MemoryGi(128);
    if (i % 4 == 0) {
      b.Gpus(8, "A100-80GB").NvSwitch();
    } else if (i % 4 == 1) {
      b.Gpus(4, "T4", 15360);
    } else if (i % 4 == 2) {
      b.Gpus(2, "A100-80GB");
    }  // else CPU only
  }
  Cluster c = b.Build();
  Engine indexed(c, MakePolicy(GetParam()));
  PolicyOptions scan;
  scan.use_index = false;
  Engine scanned(c, *CreatePolicy(GetParam(), scan));
  Random rng(7);
  std::vector<std::string> live;
  for (int step = 0; step < 3000; ++step) {
    if (!live.empty() && rng.Uniform(10) < 4) {
      size_t k = rng.Uniform(live.size());
      ASSERT_TRUE(indexed.Release(live[k]).ok());
      ASSERT_TRUE(scanned.Release(live[k]).ok());
      live.erase(live.begin() + k);
      continue;
    }
    GpuAsk ask;
    switch (rng.Uniform(5)) {
      case 0:
        ask = GpuAsk::None();
        break;
      case 1:
        ask = GpuAsk::Whole(1 + rng.Uniform(4));
        break;
      case 2:
        ask = GpuAsk::Share(1024 * (1 + rng.Uniform(20)), 0);
        break;
      case 3:
        ask = GpuAsk::Share(1024 * (1 + rng.Uniform(8)), 50 * (1 + rng.Uniform(10)));
        break;
      default:
        ask = GpuAsk::Fraction(100 * (1 + rng.Uniform(9)));
        break;
    }
    PodRequest p = Pod("p" + std::to_string(step), ask, 500 * (1 + rng.Uniform(8)), 1024);
    if (rng.Uniform(10) == 0) p.gpu_models = {"T4"};
    PlacementResult a = indexed.Place(p);
    PlacementResult s = scanned.Place(p);
    ASSERT_EQ(a.outcome, s.outcome) << "step " << step << ": " << a.reason << " / " << s.reason;
    if (a.placed()) {
      ASSERT_EQ(a.placement.node, s.placement.node) << "step " << step;
      ASSERT_EQ(a.placement.gpus, s.placement.gpus) << "step " << step;
      live.push_back(p.name);
    }
  }
  indexed.state().CheckInvariants();
  scanned.state().CheckInvariants();
}

INSTANTIATE_TEST_SUITE_P(AllIndexedPolicies, IndexEquivalence,
                         ::testing::Values("binpack", "spread", "tessera", "random", "dotprod",
                                           "gpu-clustering", "gpu-packing", "bestfit", "fgd"));

}  // namespace
}  // namespace tessera::core
