// A gang member lost (to a GPU fault, say) and recreated by its controller: the replacement goes
// beside the surviving members (Engine::Decide, "Where, for a gang that runs members"), in the
// smallest place holding them all that has room, whatever the gang's level and whatever the
// policy would choose on its own; elsewhere only when that place is full. Tests run under the
// spread policy, which on its own sends a pod to the emptiest node: the place beside the
// survivors is never its own choice here.
#include <string>
#include <vector>

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

// Gang `gang` of `size` one-GPU members at `level` (empty: none).
std::vector<PodRequest> Gang(const std::string& gang, int size, const std::string& level = "",
                             bool required = false) {
  std::vector<PodRequest> out;
  for (int i = 0; i < size; ++i) {
    PodRequest p = Pod(gang + "-" + std::to_string(i), GpuAsk::Whole(1));
    p.gang = GangAsk{gang, size, level, required, 0};
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Candidate> On(const Cluster& c, std::initializer_list<std::string_view> nodes) {
  std::vector<Candidate> out;
  for (std::string_view n : nodes) out.push_back(Candidate{c.FindNode(n)});
  return out;
}

// Places `members` on `nodes` (the survivors' places), then takes member `lost` away, and asks
// for its replacement with the others running.
PlacementResult Replace(Engine& e, const Cluster& c, std::vector<PodRequest> members,
                        std::initializer_list<std::string_view> nodes, int lost) {
  const std::vector<Candidate> where = On(c, nodes);
  for (const PlacementResult& r : e.PlaceGang(members, Mode::kCommit, &where)) {
    EXPECT_TRUE(r.placed()) << r.reason;
  }
  EXPECT_TRUE(e.Release(members[lost].name).ok());
  std::vector<std::string> running;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    if (i != lost) running.push_back(members[i].name);
  }
  PodRequest replacement = members[lost];
  replacement.name += "-replacement";
  std::vector<PlacementResult> rs = e.PlaceElasticGang({&replacement, 1}, running);
  EXPECT_EQ(rs.size(), 1u);
  return rs.empty() ? PlacementResult{} : rs[0];
}

// NVLink domains d1 (a1, a2: 4 GPUs each) and d2 (b1, b2: 8 GPUs each), all in rack r1.
Cluster TwoDomains() {
  struct Row {
    const char* node;
    const char* domain;
    int gpus;
  };
  ClusterBuilder b;
  for (const Row& row :
       {Row{"a1", "d1", 4}, Row{"a2", "d1", 4}, Row{"b1", "d2", 8}, Row{"b2", "d2", 8}}) {
    b.Node(row.node).Gpus(row.gpus, "H100-80GB").NvSwitch();
    b.Label("tessera.dev/nvlink-domain", row.domain).Label("tessera.dev/rack", "r1");
  }
  return b.Build();
}

// A gang with no level: its 3 survivors fill a1 and part of a2; the replacement goes to a2 (d1,
// the survivors' NVLink domain), though d2 has 16 GPUs free and spread prefers b1.
TEST(GangReplacement, GoesToTheSurvivorsNvlinkDomainThoughAnotherHasMoreRoom) {
  Cluster c = TwoDomains();
  Engine e(c, MakePolicy("spread"));
  const std::vector<Candidate> a2 = On(c, {"a2"});
  ASSERT_TRUE(e.Place(Pod("other", GpuAsk::Whole(2)), Mode::kCommit, &a2).placed());
  std::vector<PodRequest> g = Gang("g", 6);
  const PlacementResult r = Replace(e, c, g, {"a1", "a2"}, 5);
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(c.node(r.placement.node).labels.at("tessera.dev/nvlink-domain"), "d1");
  // Without the gang, spread's own choice is elsewhere: the test would show nothing otherwise.
  PodRequest alone = Pod("alone", GpuAsk::Whole(1));
  const PlacementResult own = e.Place(alone, Mode::kTestOnly);
  ASSERT_TRUE(own.placed());
  EXPECT_EQ(c.node(own.placement.node).labels.at("tessera.dev/nvlink-domain"), "d2");
  e.state().CheckInvariants();
}

// A gang that asks for a rack (preferred): its survivors run in NVLink domain d1 of rack r1. The
// replacement goes to d1, not to the emptier d2 of the same rack: the narrowest place first.
TEST(GangReplacement, GoesToTheSurvivorsNvlinkDomainWithinTheRackItAsksFor) {
  Cluster c = TwoDomains();
  Engine e(c, MakePolicy("spread"));
  const PlacementResult r = Replace(e, c, Gang("g", 4, "rack"), {"a1", "a2"}, 0);
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(c.node(r.placement.node).labels.at("tessera.dev/nvlink-domain"), "d1");
}

// No topology labels at all: the survivors' nodes are the place. They run on p1 and p2 (PCIe
// servers); the replacement goes there, not to the empty p3.
TEST(GangReplacement, GoesToTheSurvivorsNodesWhenNoDomainHoldsThem) {
  Cluster c = ClusterBuilder()
                  .Node("p1")
                  .Gpus(2, "L4")
                  .Node("p2")
                  .Gpus(2, "L4")
                  .Node("p3")
                  .Gpus(8, "L4")
                  .Build();
  Engine e(c, MakePolicy("spread"));
  const PlacementResult r = Replace(e, c, Gang("g", 4), {"p1", "p2"}, 3);
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_NE(c.node(r.placement.node).name, "p3");
}

// When the survivors' domain is full (another pod took the lost member's GPU), a gang that only
// prefers its level goes elsewhere; one that requires it waits, saying why.
TEST(GangReplacement, GoesElsewhereOnlyWhenTheSurvivorsDomainIsFull) {
  for (bool required : {false, true}) {
    SCOPED_TRACE(required ? "required" : "preferred");
    Cluster c = TwoDomains();
    Engine e(c, MakePolicy("spread"));
    std::vector<PodRequest> g = Gang("g", 8, "nvlink-domain", required);
    const std::vector<Candidate> d1 = On(c, {"a1", "a2"});
    for (const PlacementResult& r : e.PlaceGang(g, Mode::kCommit, &d1)) ASSERT_TRUE(r.placed());
    ASSERT_TRUE(e.Release(g[7].name).ok());
    ASSERT_TRUE(e.Place(Pod("taker", GpuAsk::Whole(1)), Mode::kCommit, &d1).placed());
    std::vector<std::string> running;
    for (int i = 0; i < 7; ++i) running.push_back(g[i].name);
    PodRequest replacement = g[7];
    replacement.name = "g-7b";
    const PlacementResult r = e.PlaceElasticGang({&replacement, 1}, running)[0];
    if (required) {
      EXPECT_EQ(r.outcome, Outcome::kNoFitNow);
      EXPECT_THAT(r.reason, HasSubstr("7 of 8 members run in one nvlink-domain"));
    } else {
      ASSERT_TRUE(r.placed()) << r.reason;
      EXPECT_EQ(c.node(r.placement.node).labels.at("tessera.dev/nvlink-domain"), "d2");
    }
    e.state().CheckInvariants();
  }
}

// A required gang whose survivors' nodes reach beyond its domain: the place beside them is cut to
// the domain it keeps. A gang requiring a rack runs 3 members on a1 (rack r1) and one on c1 (rack
// r2; a restart found them so): it keeps r1, and its replacement goes to a1, the survivors' node
// in r1, not to c1 (outside r1, though the most room) nor to a2 (r1's emptiest, spread's choice).
TEST(GangReplacement, ARequiredGangsPlaceBesideTheSurvivorsIsCutToItsDomain) {
  Cluster c = ClusterBuilder()
                  .Node("a1")
                  .Gpus(4, "L4")
                  .Label("tessera.dev/rack", "r1")
                  .Node("a2")
                  .Gpus(4, "L4")
                  .Label("tessera.dev/rack", "r1")
                  .Node("c1")
                  .Gpus(8, "L4")
                  .Label("tessera.dev/rack", "r2")
                  .Build();
  Engine e(c, MakePolicy("spread"));
  // Members placed earlier (a restart restored them where they were): 3 on a1, 1 on c1.
  std::vector<PodRequest> g = Gang("g", 5, "rack", /*required=*/true);
  for (int i = 0; i < 4; ++i) {
    const std::vector<Candidate> on = On(c, {i < 3 ? "a1" : "c1"});
    ASSERT_TRUE(e.Place(g[i], Mode::kCommit, &on).placed());
  }
  std::vector<std::string> running = {g[0].name, g[1].name, g[2].name, g[3].name};
  const PlacementResult r = e.PlaceElasticGang({&g[4], 1}, running)[0];
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(c.node(r.placement.node).name, "a1");
}

}  // namespace
}  // namespace tessera::core
