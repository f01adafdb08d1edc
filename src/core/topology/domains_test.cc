// Topology domains (domains.h) and gangs placed inside them (Engine::PlaceGang).
#include "core/topology/domains.h"

#include "core/engine.h"
#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using ::testing::HasSubstr;
using testing::MakePolicy;
using testing::Pod;

std::vector<PodRequest> Gang(const std::string& name, std::vector<int> gpus, std::string level,
                             bool required) {
  std::vector<PodRequest> members;
  for (size_t i = 0; i < gpus.size(); ++i) {
    PodRequest p = Pod(name + "-" + std::to_string(i), GpuAsk::Whole(gpus[i]));
    p.gang = GangAsk{name, static_cast<int32_t>(gpus.size()), level, required};
    members.push_back(p);
  }
  return members;
}

// The nodes a gang's members landed on, in member order.
std::vector<std::string> Nodes(const Cluster& c, const std::vector<PlacementResult>& results) {
  std::vector<std::string> out;
  for (const PlacementResult& r : results) {
    out.push_back(r.placed() ? c.node(r.placement.node).name : "-");
  }
  return out;
}

LinkMatrix TwoIslands() {
  LinkMatrix m(8, Link{LinkKind::kSys, 0});
  for (int a = 0; a < 8; ++a) {
    for (int b = a + 1; b < 8; ++b) {
      if (a / 4 == b / 4) m.Set(a, b, Link{LinkKind::kNvLink, 4});
    }
  }
  return m;
}

TEST(Domains, FromLabelsAndNvlinkIslands) {
  Cluster c = ClusterBuilder()
                  .Node("tray-0")
                  .Profile("gb200-nvl72-tray")
                  .Label("tessera.dev/nvlink-domain", "nvl72-a")
                  .Label("tessera.dev/rack", "r1")
                  .Node("tray-1")
                  .Profile("gb200-nvl72-tray")
                  .Label("tessera.dev/nvlink-domain", "nvl72-a")
                  .Label("tessera.dev/rack", "r1")
                  .Node("dgx")
                  .Profile("dgx-a100")
                  .Label("tessera.dev/rack", "r2")
                  .Node("split")
                  .Gpus(8, "V100-32GB")
                  .Links(TwoIslands())
                  .Node("pcie")
                  .Profile("pcie-8gpu")
                  .Label("tessera.dev/rack", "r2")
                  .Build();
  TopologyDomains d(c, DefaultTopologyLevels());
  ASSERT_EQ(d.LevelIndex("nvlink-domain"), 0);
  const TopologyDomains::Domains& nv = d.domains(0);
  std::vector<std::string> names;
  for (const Domain& x : nv) names.push_back(x.name + ":" + std::to_string(x.gpu_count));
  // The labelled NVL72 domain spans both trays; each unlabelled NVLink island is its own domain;
  // the PCIe server is in none.
  EXPECT_THAT(names, ::testing::ElementsAre("nvl72-a:8", "dgx/nvlink0:8", "split/nvlink0:4",
                                            "split/nvlink1:4"));
  EXPECT_EQ(nv[3].candidates[0].gpu_mask, 0xF0u);
  const TopologyDomains::Domains& racks = d.domains(d.LevelIndex("rack"));
  ASSERT_EQ(racks.size(), 2u);
  EXPECT_EQ(racks[0].name, "r1");
  EXPECT_EQ(racks[1].name, "r2");
  EXPECT_EQ(racks[1].gpu_count, 16);
  EXPECT_EQ(d.NvlinkDomainOf(c.FindNode("tray-1"), 3), "nvl72-a");
  EXPECT_EQ(d.NvlinkDomainOf(c.FindNode("split"), 5), "split/nvlink1");
  EXPECT_EQ(d.NvlinkDomainOf(c.FindNode("pcie"), 0), std::nullopt);
  // Nodes of one topology share one prepared selector.
  EXPECT_EQ(&c.gpu_selector(c.FindNode("tray-0")), &c.gpu_selector(c.FindNode("tray-1")));
  EXPECT_NE(&c.gpu_selector(c.FindNode("tray-0")), &c.gpu_selector(c.FindNode("dgx")));
}

// An engine's what-if copy shares the domains and changes only its own: a node appended to the
// copy (one joining a labelled domain, one bringing its own island) leaves the base as it was.
TEST(Domains, ACopyAppendsWithoutChangingTheBase) {
  Cluster base_cluster = ClusterBuilder()
                             .Node("tray-0")
                             .Gpus(4, "GB200")
                             .Label("tessera.dev/nvlink-domain", "nvl72-a")
                             .Node("dgx")
                             .Profile("dgx-a100")
                             .Build();
  TopologyDomains base(base_cluster, DefaultTopologyLevels());
  Cluster cluster = base_cluster;
  TopologyDomains copy(base, cluster);
  auto names = [](const TopologyDomains& d) {
    std::vector<std::string> out;
    for (const Domain& x : d.domains(0)) {
      out.push_back(x.name + ":" + std::to_string(x.candidates.size()));
    }
    return out;
  };
  std::vector<std::pair<int, int>> joined;
  NodeSpec tray = base_cluster.node(base_cluster.FindNode("tray-0"));
  tray.name = "tray-1";
  ASSERT_TRUE(copy.Append(*cluster.AddNode(tray), &joined));
  NodeSpec dgx = base_cluster.node(base_cluster.FindNode("dgx"));
  dgx.name = "dgx-2";
  ASSERT_TRUE(copy.Append(*cluster.AddNode(dgx), &joined));
  EXPECT_THAT(names(copy), ::testing::ElementsAre("nvl72-a:2", "dgx/nvlink0:1", "dgx-2/nvlink0:1"));
  EXPECT_THAT(names(base), ::testing::ElementsAre("nvl72-a:1", "dgx/nvlink0:1"));
  EXPECT_EQ(copy.NvlinkDomainOf(cluster.FindNode("dgx-2"), 0), "dgx-2/nvlink0");
  EXPECT_EQ(base.NvlinkDomainOf(base_cluster.FindNode("dgx"), 0), "dgx/nvlink0");
}

TEST(Gangs, MultiGpuPodsLandInsideOneNvlinkDomain) {
  Cluster c =
      ClusterBuilder().Node("pcie").Profile("pcie-8gpu").Node("dgx").Profile("dgx-a100").Build();
  Engine e(c, MakePolicy("tessera"));
  // Best fit alone would not care; the gang's level does: both 4-GPU members on the DGX.
  auto r = e.PlaceGang(Gang("train", {4, 4}, "nvlink-domain", true));
  EXPECT_THAT(Nodes(c, r), ::testing::ElementsAre("dgx", "dgx"));
  // Only the PCIe server is left: a required NVLink gang waits, and says why.
  auto again = e.PlaceGang(Gang("more", {2, 2}, "nvlink-domain", true));
  EXPECT_EQ(again[0].outcome, Outcome::kNoFitNow);
  EXPECT_THAT(again[0].reason, HasSubstr("no nvlink-domain has room for all 2 members now "
                                         "(needs 4 GPUs; at most 0 fully free in one)"));
  e.state().CheckInvariants();
}

TEST(Gangs, SpanNodesOfOneLabelledNvl72Domain) {
  ClusterBuilder b;
  for (int i = 0; i < 3; ++i) {
    b.Node("a-" + std::to_string(i))
        .Profile("gb200-nvl72-tray")
        .Label("tessera.dev/nvlink-domain", "a");
  }
  for (int i = 0; i < 2; ++i) {
    b.Node("b-" + std::to_string(i))
        .Profile("gb200-nvl72-tray")
        .Label("tessera.dev/nvlink-domain", "b");
  }
  Cluster c = b.Build();
  Engine e(c, MakePolicy("tessera"));
  // 12 GPUs in 3 pods of 4: only domain a (3 trays) has room.
  auto r = e.PlaceGang(Gang("big", {4, 4, 4}, "nvlink-domain", true));
  EXPECT_THAT(Nodes(c, r), ::testing::UnorderedElementsAre("a-0", "a-1", "a-2"));
  // 8 GPUs: a is full, b fits exactly.
  auto s = e.PlaceGang(Gang("mid", {4, 4}, "nvlink-domain", true));
  EXPECT_THAT(Nodes(c, s), ::testing::UnorderedElementsAre("b-0", "b-1"));
  // Never: 16 GPUs inside one domain when the largest has 12.
  Engine fresh(c, MakePolicy("tessera"));
  auto t = fresh.PlaceGang(Gang("huge", {4, 4, 4, 4}, "nvlink-domain", true));
  EXPECT_EQ(t[0].outcome, Outcome::kNeverFits);
  EXPECT_EQ(t[0].reason, "gang huge needs 16 GPUs inside one nvlink-domain; the largest has 12");
}

TEST(Gangs, BestFitDomainLeavesRoomForTheNextBigGang) {
  Cluster c =
      ClusterBuilder().Node("dgx-0").Profile("dgx-a100").Node("dgx-1").Profile("dgx-a100").Build();
  Engine e(c, MakePolicy("tessera"));
  ASSERT_TRUE(e.Place(Pod("solo", GpuAsk::Whole(4))).placed());
  const std::string busy = c.node(e.Find("solo")->node).name;
  // Both domains fit 2 x 2 GPUs; the one already half used is left with 0 free: best fit.
  auto r = e.PlaceGang(Gang("small", {2, 2}, "nvlink-domain", true));
  EXPECT_THAT(Nodes(c, r), ::testing::ElementsAre(busy, busy));
  // So the 8-GPU gang still finds a whole server.
  auto big = e.PlaceGang(Gang("big", {8}, "nvlink-domain", true));
  EXPECT_TRUE(big[0].placed()) << big[0].reason;
}

TEST(Gangs, PreferredTriesTheNarrowestLevelFirst) {
  Cluster c = ClusterBuilder()
                  .Node("r1-pcie")
                  .Profile("pcie-8gpu")
                  .Label("tessera.dev/rack", "r1")
                  .Node("r1-dgx")
                  .Profile("dgx-a100")
                  .Label("tessera.dev/rack", "r1")
                  .Node("r2-pcie")
                  .Profile("pcie-8gpu")
                  .Label("tessera.dev/rack", "r2")
                  .Build();
  Engine e(c, MakePolicy("tessera"));
  // Asked: rack, preferred. An NVLink domain (narrower) has room: the gang goes there.
  auto r = e.PlaceGang(Gang("g1", {2, 2}, "rack", false));
  EXPECT_THAT(Nodes(c, r), ::testing::ElementsAre("r1-dgx", "r1-dgx"));
  // Fill the DGX; the next gang no longer fits an NVLink domain, so one rack: r1 and r2 both
  // have 8 free and would keep 2: the first, r1.
  ASSERT_TRUE(e.Place(Pod("fill", GpuAsk::Whole(4))).placed());
  ASSERT_EQ(c.node(e.Find("fill")->node).name, "r1-dgx");
  auto s = e.PlaceGang(Gang("g2", {4, 2}, "rack", false));
  std::vector<std::string> where = Nodes(c, s);
  ASSERT_EQ(where.size(), 2u);
  EXPECT_EQ(c.node(c.FindNode(where[0])).labels.at("tessera.dev/rack"),
            c.node(c.FindNode(where[1])).labels.at("tessera.dev/rack"));
  EXPECT_EQ(where[0], "r1-pcie");
  // 10 GPUs are free (2 in r1, 8 in r2) but no rack has 10: preferred falls back to anywhere.
  auto t = e.PlaceGang(Gang("g3", {4, 4, 2}, "rack", false));
  EXPECT_THAT(Nodes(c, t), ::testing::ElementsAre("r2-pcie", "r2-pcie", "r1-pcie"));
  // Required would have refused (r1-pcie taken: no rack has 16 free GPUs).
  Engine f(c, MakePolicy("tessera"));
  Placement x;
  x.node = c.FindNode("r1-pcie");
  for (int g = 0; g < 8; ++g) x.gpus.push_back(GpuGrant{g, 81920, 1000, true});
  ASSERT_TRUE(f.Restore("x", x).ok());
  auto u = f.PlaceGang(Gang("g4", {8, 8}, "rack", true));
  EXPECT_EQ(u[0].outcome, Outcome::kNoFitNow);
  e.state().CheckInvariants();
}

TEST(Gangs, ConfiguredLevelsReplaceTheDefaults) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Profile("pcie-8gpu")
                  .Label("example.com/pod", "p1")
                  .Node("b")
                  .Profile("pcie-8gpu")
                  .Label("example.com/pod", "p2")
                  .Build();
  Engine e(c, MakePolicy("tessera"), {{"pod", "example.com/pod"}});
  auto r = e.PlaceGang(Gang("g", {4, 4}, "pod", true));
  std::vector<std::string> where = Nodes(c, r);
  EXPECT_EQ(where[0], where[1]);
  auto bad = e.PlaceGang(Gang("h", {1}, "rack", true));
  EXPECT_THAT(bad[0].reason, HasSubstr("unknown topology level \"rack\" (configured: pod)"));
}

TEST(Gangs, AllOrNothingWithMultiGpuMembers) {
  Cluster c =
      ClusterBuilder().Node("dgx").Profile("dgx-a100").Node("pcie").Profile("l40s-4gpu").Build();
  for (const char* policy : {"tessera", "binpack", "spread"}) {
    Engine e(c, MakePolicy(policy));
    ASSERT_TRUE(e.Place(Pod("a", GpuAsk::Whole(2))).placed());
    std::vector<GpuState> before;
    for (int n = 0; n < c.node_count(); ++n) {
      for (const GpuState& g : e.state().gpus(NodeId(n))) before.push_back(g);
    }
    // 10 GPUs free (6 + 4 or 8 + 2), the gang needs 4 + 4 + 4: the last one cannot fit.
    auto r = e.PlaceGang(Gang("g", {4, 4, 4}, "", false));
    for (const PlacementResult& x : r) EXPECT_EQ(x.outcome, Outcome::kNoFitNow) << policy;
    std::vector<GpuState> after;
    for (int n = 0; n < c.node_count(); ++n) {
      for (const GpuState& g : e.state().gpus(NodeId(n))) after.push_back(g);
    }
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(before[i].grants, after[i].grants) << policy << " GPU " << i;
    }
    EXPECT_EQ(e.placed_count(), 1u);
    e.state().CheckInvariants();
  }
}

TEST(Gangs, LargestMembersFirst) {
  // Spread puts each member on the node with the most free GPUs. In member order 2, 2, 4 on
  // nodes with 6 and 2 free, the 2s would both take the 6-GPU node and strand the 4; placed
  // largest first, the 4 goes there first and the gang fits.
  Cluster c =
      ClusterBuilder().Node("a").Gpus(6, "A100-80GB").Node("b").Gpus(2, "A100-80GB").Build();
  Engine e(c, MakePolicy("spread"));
  auto r = e.PlaceGang(Gang("g", {2, 2, 4}, "", false));
  ASSERT_TRUE(r[0].placed()) << r[0].reason;
  EXPECT_EQ(Nodes(c, r)[2], "a");
  EXPECT_EQ(r[2].placement.gpus.size(), 4u);
  EXPECT_EQ(
      e.state().whole_free_count(c.FindNode("a")) + e.state().whole_free_count(c.FindNode("b")), 0);
}

TEST(Gangs, TestOnlyLeavesNothingBehind) {
  Cluster c = ClusterBuilder().Node("dgx").Profile("dgx-a100").Build();
  Engine e(c, MakePolicy("tessera"));
  auto r = e.PlaceGang(Gang("g", {4, 2, 2}, "nvlink-domain", true), Mode::kTestOnly);
  EXPECT_TRUE(r[0].placed());
  EXPECT_EQ(e.state().whole_free_count(NodeId(0)), 8);
  EXPECT_EQ(e.placed_count(), 0u);
}

}  // namespace
}  // namespace tessera::core
