// Topology through the policies: required vs preferred interconnect levels across nodes, and
// the indexed Choose of every indexed policy equal to the plain scan for topology and MIG asks.
#include "common/random.h"
#include "core/engine.h"
#include "core/testing/cluster_builder.h"
#include "core/topology/gpu_select.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using ::testing::HasSubstr;
using testing::MakePolicy;
using testing::Pod;

GpuAsk WholeWith(int n, GpuTopology level, bool required) {
  GpuAsk a = GpuAsk::Whole(n);
  a.topology = level;
  a.topology_required = required;
  return a;
}

TEST(TopologyPolicy, PreferredNvlinkPicksAnNvlinkNodeOverTheBestFit) {
  Cluster c =
      ClusterBuilder().Node("pcie").Profile("pcie-8gpu").Node("dgx").Profile("dgx-a100").Build();
  for (const char* policy : {"tessera", "binpack", "spread"}) {
    Engine e(c, MakePolicy(policy));
    ASSERT_TRUE(e.Place(Pod("fill", GpuAsk::Whole(6), 1000)).placed());
    // Best fit alone would take the 2 GPUs left on whichever node the filler went to.
    PlacementResult any = e.Place(Pod("any", GpuAsk::Whole(2)), Mode::kTestOnly);
    ASSERT_TRUE(any.placed());
    PlacementResult nv = e.Place(Pod("nv", WholeWith(2, GpuTopology::kNvLink, false)));
    ASSERT_TRUE(nv.placed()) << policy;
    EXPECT_EQ(c.node(nv.placement.node).name, "dgx") << policy;
    EXPECT_TRUE(
        MeetsTopology(c.node(nv.placement.node), nv.placement.gpu_mask(), GpuTopology::kNvLink));
  }
}

TEST(TopologyPolicy, TesseraKeepsRackScaleNvlinkDomainsForWhatNeedsThem) {
  Cluster c = ClusterBuilder()
                  .Node("tray-0")
                  .Profile("gb200-nvl72-tray")
                  .Label("tessera.dev/nvlink-domain", "nvl72")
                  .Node("tray-1")
                  .Profile("gb200-nvl72-tray")
                  .Label("tessera.dev/nvlink-domain", "nvl72")
                  .Node("hgx")
                  .Profile("hgx-h100")
                  .Node("pcie")
                  .Profile("pcie-8gpu")
                  .Build();
  Engine t(c, MakePolicy("tessera"));
  Engine b(c, MakePolicy("binpack"));
  // Best fit alone puts a 1-GPU pod on a 4-GPU tray; tessera keeps the NVL72 domain whole (its
  // node order takes the PCIe server first).
  PlacementResult one_t = t.Place(Pod("one", GpuAsk::Whole(1)));
  PlacementResult one_b = b.Place(Pod("one", GpuAsk::Whole(1)));
  EXPECT_EQ(c.node(one_t.placement.node).name, "pcie");
  EXPECT_EQ(c.node(one_b.placement.node).name, "tray-0");
  // A 4-GPU pod preferring NVLink: the HGX (NVLink met) before the trays.
  PlacementResult four = t.Place(Pod("four", WholeWith(4, GpuTopology::kNvLink, false)));
  EXPECT_EQ(c.node(four.placement.node).name, "hgx");
  // So an 8-GPU gang still finds the whole domain.
  std::vector<PodRequest> gang;
  for (int i = 0; i < 2; ++i) {
    PodRequest p = Pod("g" + std::to_string(i), GpuAsk::Whole(4));
    p.gang = GangAsk{"g", 2, "nvlink-domain", true};
    gang.push_back(p);
  }
  auto r = t.PlaceGang(gang);
  EXPECT_TRUE(r[0].placed()) << r[0].reason;
  EXPECT_TRUE(r[1].placed());
}

TEST(TopologyPolicy, RequiredRefusesAndPreferredFallsBack) {
  Cluster c = ClusterBuilder().Node("pcie").Profile("pcie-8gpu").Build();
  Engine f(c, MakePolicy("tessera"));
  // Split every PCIe-switch pair: GPUs 1, 3, 5, 7 taken.
  Placement split;
  split.node = NodeId(0);
  for (int g : {1, 3, 5, 7}) split.gpus.push_back(GpuGrant{g, 81920, 1000, true});
  ASSERT_TRUE(f.Restore("split", split).ok());
  PlacementResult req = f.Place(Pod("req", WholeWith(2, GpuTopology::kPcieSwitch, true)));
  EXPECT_EQ(req.outcome, Outcome::kNoFitNow);
  EXPECT_THAT(req.reason, HasSubstr("no free GPU set meeting the pcie-switch topology"));
  PlacementResult pref = f.Place(Pod("pref", WholeWith(2, GpuTopology::kPcieSwitch, false)));
  ASSERT_TRUE(pref.placed());
  EXPECT_EQ(pref.placement.gpu_mask(), 0b0000'0101u);  // 0 and 2: same socket (NODE)
  // Never: NVLink required on a PCIe-only cluster.
  PlacementResult never = f.Place(Pod("nv", WholeWith(2, GpuTopology::kNvLink, true)));
  EXPECT_EQ(never.outcome, Outcome::kNeverFits);
  EXPECT_EQ(never.reason, "needs 2 GPUs joined by nvlink on one node; no node has such a set");
}

TEST(TopologyPolicy, PreferredNumaKeepsAPodOnOneSocketWhenItCan) {
  Cluster c = ClusterBuilder().Node("hgx").Profile("hgx-h100").Build();
  Engine e(c, MakePolicy("tessera"));
  Placement taken;
  taken.node = NodeId(0);
  for (int g : {0, 1, 2}) taken.gpus.push_back(GpuGrant{g, 81559, 1000, true});
  ASSERT_TRUE(e.Restore("taken", taken).ok());
  // Free: 3 (NUMA 0) and 4..7 (NUMA 1). Three GPUs preferring one NUMA node: 4, 5, 6.
  PlacementResult r = e.Place(Pod("p", WholeWith(3, GpuTopology::kNuma, false)));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(r.placement.gpu_mask(), 0b0111'0000u);
  // Five GPUs cannot be on one NUMA node: preferred still places them, required does not.
  Engine f(c, MakePolicy("tessera"));
  ASSERT_TRUE(f.Restore("taken", taken).ok());
  EXPECT_TRUE(f.Place(Pod("five", WholeWith(5, GpuTopology::kNuma, false))).placed());
  Engine g(c, MakePolicy("tessera"));
  ASSERT_TRUE(g.Restore("taken", taken).ok());
  // (Never, even on an empty node: a NUMA node has four GPUs.)
  EXPECT_EQ(g.Place(Pod("five", WholeWith(5, GpuTopology::kNuma, true))).outcome,
            Outcome::kNeverFits);
}

// The indexed Choose of every indexed policy equals the plain scan with topology levels
// (required and preferred), MIG asks and shares mixed, over a churn of places and releases.
class TopologyIndexEquivalence : public ::testing::TestWithParam<const char*> {};

TEST_P(TopologyIndexEquivalence, IndexedChooseEqualsScan) {
  Cluster c = ClusterBuilder()
                  .Node("dgx")
                  .Profile("dgx-a100")
                  .Node("hgx")
                  .Profile("hgx-h100")
                  .Node("pcie-0")
                  .Profile("pcie-8gpu")
                  .Node("pcie-1")
                  .Profile("pcie-8gpu")
                  .Node("l40s")
                  .Profile("l40s-4gpu")
                  .Node("mig")
                  .Profile("dgx-a100")
                  .Mig({{"1g.10gb", 0}, {"3g.40gb", 4}})
                  .Node("tray-0")
                  .Profile("gb200-nvl72-tray")
                  .Label("tessera.dev/nvlink-domain", "a")
                  .Node("tray-1")
                  .Profile("gb200-nvl72-tray")
                  .Label("tessera.dev/nvlink-domain", "a")
                  .Build();
  Engine indexed(c, MakePolicy(GetParam()));
  PolicyOptions scan;
  scan.use_index = false;
  Engine scanned(c, *CreatePolicy(GetParam(), scan));
  Random rng(11);
  std::vector<std::string> live;
  const GpuTopology levels[] = {GpuTopology::kAny, GpuTopology::kNvLink, GpuTopology::kPcieSwitch,
                                GpuTopology::kNuma, GpuTopology::kNode};
  const char* profiles[] = {"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb"};
  int preferred = 0;
  for (int step = 0; step < 3000; ++step) {
    if (!live.empty() && rng.Uniform(10) < 4) {
      size_t k = rng.Uniform(live.size());
      ASSERT_TRUE(indexed.Release(live[k]).ok());
      ASSERT_TRUE(scanned.Release(live[k]).ok());
      live.erase(live.begin() + k);
      continue;
    }
    GpuAsk ask;
    switch (rng.Uniform(4)) {
      case 0:
      case 1: {
        const int n = 1 + static_cast<int>(rng.Uniform(8));
        ask = WholeWith(n, levels[rng.Uniform(5)], rng.Uniform(3) == 0);
        preferred += !ask.topology_required && ask.topology != GpuTopology::kAny && n > 1;
        break;
      }
      case 2:
        ask = GpuAsk::Mig(profiles[rng.Uniform(6)]);
        break;
      default:
        ask = GpuAsk::Share(1024 * (1 + rng.Uniform(40)), 0);
        break;
    }
    PodRequest p = Pod("p" + std::to_string(step), ask, 500 * (1 + rng.Uniform(8)), 1024);
    PlacementResult a = indexed.Place(p);
    PlacementResult s = scanned.Place(p);
    ASSERT_EQ(a.outcome, s.outcome) << "step " << step << ": " << a.reason << " / " << s.reason;
    if (a.placed()) {
      ASSERT_EQ(a.placement.node, s.placement.node) << "step " << step;
      ASSERT_EQ(a.placement.gpus, s.placement.gpus) << "step " << step;
      ASSERT_EQ(a.placement.mig_plan, s.placement.mig_plan) << "step " << step;
      live.push_back(p.name);
    }
  }
  EXPECT_GT(preferred, 300);
  indexed.state().CheckInvariants();
  scanned.state().CheckInvariants();
}

INSTANTIATE_TEST_SUITE_P(AllIndexedPolicies, TopologyIndexEquivalence,
                         ::testing::Values("binpack", "spread", "tessera"));

}  // namespace
}  // namespace tessera::core
