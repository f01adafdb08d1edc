// Elastic gangs in the engine (Engine::PlaceElasticGang): a gang of size K and min M starts once M
// members fit together, takes as many more as fit, grows as room appears, keeps its domain, and
// never goes beyond K.
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
using testing::TwoNvSwitchServers;

std::vector<PodRequest> Members(const std::string& gang, int from, int to, int size, int min,
                                bool required = true) {
  std::vector<PodRequest> out;
  for (int i = from; i < to; ++i) {
    PodRequest p = Pod(gang + "-" + std::to_string(i), GpuAsk::Whole(1));
    p.gang = GangAsk{gang, size, "nvlink-domain", required, min};
    out.push_back(std::move(p));
  }
  return out;
}

// Takes `gpus` whole GPUs of `node` with one pod.
void Fill(Engine& e, const Cluster& c, const std::string& pod, const std::string& node, int gpus) {
  std::vector<Candidate> only = {Candidate{c.FindNode(node)}};
  ASSERT_TRUE(e.Place(Pod(pod, GpuAsk::Whole(gpus)), Mode::kCommit, &only).placed());
}

int Placed(const std::vector<PlacementResult>& rs) {
  int n = 0;
  for (const PlacementResult& r : rs) n += r.placed();
  return n;
}

std::vector<std::string> Names(const std::vector<PodRequest>& members, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(members[i].name);
  return out;
}

TEST(ElasticGang, StartsWithMinAndGrowsToSizeAsRoomAppears) {
  Cluster c = TwoNvSwitchServers();
  Engine e(c, MakePolicy("tessera"));
  Fill(e, c, "fa", "a", 4);
  Fill(e, c, "fb", "b", 8);
  std::vector<PodRequest> g = Members("g", 0, 8, 8, 4);
  std::vector<PlacementResult> start = e.PlaceElasticGang(g, {});
  ASSERT_EQ(Placed(start), 4) << start[4].reason;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(start[i].placed());  // the first (oldest) members
    EXPECT_EQ(c.node(start[i].placement.node).name, "a");
  }
  for (int i = 4; i < 8; ++i) {
    EXPECT_EQ(start[i].outcome, Outcome::kNoFitNow);
    EXPECT_THAT(start[i].reason, HasSubstr("gang g: 4 of 8 members running (min 4)"));
  }
  // Room appears on a: the rest go there.
  ASSERT_TRUE(e.Release("fa").ok());
  std::vector<PodRequest> rest(g.begin() + 4, g.end());
  std::vector<PlacementResult> grow = e.PlaceElasticGang(rest, Names(g, 4));
  ASSERT_EQ(Placed(grow), 4);
  for (const PlacementResult& r : grow) EXPECT_EQ(c.node(r.placement.node).name, "a");
  EXPECT_EQ(e.state().whole_free_count(c.FindNode("a")), 0);
  e.state().CheckInvariants();
}

TEST(ElasticGang, DoesNotStartBelowMinAndLeavesTheStateAsItWas) {
  Cluster c = TwoNvSwitchServers();
  Engine e(c, MakePolicy("tessera"));
  Fill(e, c, "fa", "a", 5);
  Fill(e, c, "fb", "b", 6);
  std::vector<PodRequest> g = Members("g", 0, 8, 8, 4);
  std::vector<PlacementResult> rs = e.PlaceElasticGang(g, {});
  EXPECT_EQ(Placed(rs), 0);
  for (const PlacementResult& r : rs) EXPECT_EQ(r.outcome, Outcome::kNoFitNow);
  EXPECT_THAT(rs[0].reason, HasSubstr("no nvlink-domain has room for all 4 members"));
  EXPECT_EQ(e.placed_count(), 2u);
  EXPECT_EQ(e.state().whole_free_count(c.FindNode("a")), 3);
  EXPECT_EQ(e.state().whole_free_count(c.FindNode("b")), 2);
  e.state().CheckInvariants();
}

TEST(ElasticGang, StartsWithAsManyAsOneDomainTakes) {
  Cluster c = TwoNvSwitchServers();
  Engine e(c, MakePolicy("tessera"));
  Fill(e, c, "fa", "a", 2);  // 6 free on a
  Fill(e, c, "fb", "b", 3);  // 5 free on b
  std::vector<PodRequest> g = Members("g", 0, 8, 8, 4);
  std::vector<PlacementResult> rs = e.PlaceElasticGang(g, {});
  ASSERT_EQ(Placed(rs), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.node(rs[i].placement.node).name, "a");
  EXPECT_THAT(rs[6].reason, HasSubstr("6 of 8 members running (min 4)"));
}

TEST(ElasticGang, RequiredDomainIsKeptWhenRoomAppearsElsewhere) {
  Cluster c = TwoNvSwitchServers();
  Engine e(c, MakePolicy("tessera"));
  Fill(e, c, "fa", "a", 4);
  Fill(e, c, "fb", "b", 8);
  std::vector<PodRequest> g = Members("g", 0, 8, 8, 4);
  ASSERT_EQ(Placed(e.PlaceElasticGang(g, {})), 4);
  ASSERT_TRUE(e.Release("fb").ok());  // b is empty now, a still full
  std::vector<PodRequest> rest(g.begin() + 4, g.end());
  std::vector<PlacementResult> grow = e.PlaceElasticGang(rest, Names(g, 4));
  EXPECT_EQ(Placed(grow), 0);
  EXPECT_THAT(grow[0].reason, HasSubstr("4 of 8 members run in one nvlink-domain"));
  EXPECT_EQ(e.state().whole_free_count(c.FindNode("b")), 8);

  // Preferred: the running members' domain first, then anywhere.
  Engine p(c, MakePolicy("tessera"));
  Fill(p, c, "fa", "a", 4);
  Fill(p, c, "fb", "b", 8);
  std::vector<PodRequest> h = Members("h", 0, 8, 8, 4, /*required=*/false);
  ASSERT_EQ(Placed(p.PlaceElasticGang(h, {})), 4);
  ASSERT_TRUE(p.Release("fb").ok());
  std::vector<PodRequest> more(h.begin() + 4, h.end());
  std::vector<PlacementResult> grown = p.PlaceElasticGang(more, Names(h, 4));
  ASSERT_EQ(Placed(grown), 4);
  for (const PlacementResult& r : grown) EXPECT_EQ(c.node(r.placement.node).name, "b");
}

TEST(ElasticGang, NeverBeyondItsSize) {
  Cluster c = TwoNvSwitchServers();
  Engine e(c, MakePolicy("tessera"));
  // Ten pods claim membership of a gang of 8: 8 run, the other two are told why they wait.
  std::vector<PodRequest> g = Members("g", 0, 10, 8, 4);
  std::vector<PlacementResult> rs = e.PlaceElasticGang(g, {});
  EXPECT_EQ(Placed(rs), 8);
  EXPECT_THAT(rs[8].reason, HasSubstr("already has its 8 members"));
  std::vector<PodRequest> extra(g.begin() + 8, g.end());
  std::vector<PlacementResult> more = e.PlaceElasticGang(extra, Names(g, 8));
  EXPECT_EQ(Placed(more), 0);
  EXPECT_THAT(more[0].reason, HasSubstr("already runs its 8 members"));
  EXPECT_EQ(e.placed_count(), 8u);
}

TEST(ElasticGang, BelowMinAfterALossItNeedsTheMissingMembersTogether) {
  Cluster c = TwoNvSwitchServers();
  Engine e(c, MakePolicy("tessera"));
  Fill(e, c, "fb", "b", 8);
  std::vector<PodRequest> g = Members("g", 0, 8, 8, 4);
  ASSERT_EQ(Placed(e.PlaceElasticGang(g, {})), 8);
  // Five members are gone; 3 run, below min 4: it needs at least 1 more (min - running) and
  // takes as many as fit in its domain, here the 1 GPU left free on a.
  for (int i = 3; i < 8; ++i) ASSERT_TRUE(e.Release(g[i].name).ok());
  Fill(e, c, "fa", "a", 4);
  std::vector<PodRequest> rest(g.begin() + 3, g.end());
  std::vector<PlacementResult> one = e.PlaceElasticGang(rest, Names(g, 3));
  EXPECT_EQ(Placed(one), 1);
  // A rigid gang (min = size) with members running needs all its missing members at once, in
  // their domain.
  Engine r(c, MakePolicy("tessera"));
  Fill(r, c, "fb", "b", 8);
  std::vector<PodRequest> k = Members("k", 0, 4, 4, 0);
  ASSERT_EQ(Placed(r.PlaceGang(k)), 4);
  ASSERT_TRUE(r.Release(k[2].name).ok());
  ASSERT_TRUE(r.Release(k[3].name).ok());
  Fill(r, c, "fa", "a", 5);  // 1 free on a: not enough for the 2 missing members
  std::vector<PodRequest> missing(k.begin() + 2, k.end());
  EXPECT_EQ(Placed(r.PlaceElasticGang(missing, Names(k, 2))), 0);
  ASSERT_TRUE(r.Release("fa").ok());
  std::vector<PlacementResult> back = r.PlaceElasticGang(missing, Names(k, 2));
  ASSERT_EQ(Placed(back), 2);
  for (const PlacementResult& x : back) EXPECT_EQ(c.node(x.placement.node).name, "a");
}

// A gang at or above its min that finds no room to grow says how many of its members run (no
// domain to keep: the reason is the engine's, after the count).
TEST(ElasticGang, AGangThatCannotGrowSaysHowManyRun) {
  Cluster c = ClusterBuilder().Node("a").Gpus(4, "A100-80GB").Build();
  Engine e(c, MakePolicy("tessera"));
  std::vector<PodRequest> m = Members("g", 0, 6, 6, 2, /*required=*/false);
  EXPECT_EQ(Placed(e.PlaceElasticGang(m, {})), 4);
  std::vector<PodRequest> rest(m.begin() + 4, m.end());
  std::vector<PlacementResult> more = e.PlaceElasticGang(rest, Names(m, 4));
  EXPECT_EQ(Placed(more), 0);
  EXPECT_THAT(more[0].reason, HasSubstr("gang g: 4 of 6 members running (min 2); no room for "
                                        "more now: "));
}

}  // namespace
}  // namespace tessera::core
