// Hot spares (Engine::KeepSpares): N whole GPUs of each NVLink domain kept free for the
// replacement of a gang's lost member, and for nobody else.
#include <string>
#include <vector>

#include "common/strings.h"
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

// dgx: 4 GPUs on an NVSwitch (one NVLink island); pcie: 2 GPUs joined by no NVLink (no domain).
Cluster DgxAndPcie() {
  ClusterBuilder b;
  b.Node("dgx").Gpus(4, "H100-80GB").NvSwitch();
  b.Node("pcie").Gpus(2, "L40S");
  return b.Build();
}

std::vector<PodRequest> Gang(const std::string& gang, int size, int min = 0) {
  std::vector<PodRequest> out;
  for (int i = 0; i < size; ++i) {
    PodRequest p = Pod(gang + "-" + std::to_string(i), GpuAsk::Whole(1));
    p.gang = GangAsk{gang, size, "", false, min};
    out.push_back(std::move(p));
  }
  return out;
}

// A whole GPU held by no pod of the test (the scheduler holds an unhealthy GPU so).
Placement WholeGpu(const Cluster& c, std::string_view node, int gpu) {
  Placement p;
  p.node = c.FindNode(node);
  p.gpus.push_back(GpuGrant{gpu, c.node(p.node).gpus[gpu].memory_mib, 1000, true});
  return p;
}

TEST(Spares, AreTheLastFreeGpusOfEachNvlinkDomainAndNoPodTakesThem) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("binpack"));
  const NodeId dgx = c.FindNode("dgx"), pcie = c.FindNode("pcie");
  e.KeepSpares(1);
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 3);
  EXPECT_EQ(e.spare_gpus(pcie), 0u);  // PCIe-only GPUs are in no NVLink domain
  EXPECT_EQ(e.spare_count(), 1);
  const std::vector<Candidate> on_dgx = {Candidate{dgx}};
  for (int i = 0; i < 3; ++i) {
    const PlacementResult r =
        e.Place(Pod("p" + std::to_string(i), GpuAsk::Whole(1)), Mode::kCommit, &on_dgx);
    ASSERT_TRUE(r.placed()) << r.reason;
    EXPECT_NE(r.placement.gpus[0].gpu, 3);
  }
  // The spare takes neither a whole GPU nor a share, and the reason says why.
  for (const GpuAsk& ask : {GpuAsk::Whole(1), GpuAsk::Share(4096, 100)}) {
    const PlacementResult r = e.Place(Pod("late", ask), Mode::kCommit, &on_dgx);
    EXPECT_FALSE(r.placed());
    EXPECT_THAT(r.reason, HasSubstr("kept spare for gang replacements (spareGpusPerDomain 1)"));
  }
  // Elsewhere a pod goes as it would.
  EXPECT_TRUE(e.Place(Pod("other", GpuAsk::Whole(2))).placed());
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 3);
}

// The nodes whose spares changed are listed, each once, until taken (the scheduler publishes
// those alone): dgx after KeepSpares, nothing when nothing changed (a pod placed on pcie), dgx
// again when a pod restored on the spare's GPU moves it.
TEST(Spares, TheNodesWhoseSparesChangedAreListedUntilTaken) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("binpack"));
  const NodeId dgx = c.FindNode("dgx"), pcie = c.FindNode("pcie");
  EXPECT_THAT(e.TakeSpareChanges(), ::testing::IsEmpty());
  e.KeepSpares(1);
  EXPECT_THAT(e.TakeSpareChanges(), ::testing::ElementsAre(dgx));
  EXPECT_THAT(e.TakeSpareChanges(), ::testing::IsEmpty());
  const std::vector<Candidate> on_pcie = {Candidate{pcie}};
  ASSERT_TRUE(e.Place(Pod("other", GpuAsk::Whole(1)), Mode::kCommit, &on_pcie).placed());
  EXPECT_THAT(e.TakeSpareChanges(), ::testing::IsEmpty());
  ASSERT_TRUE(e.Restore("r", WholeGpu(c, "dgx", 3)).ok());
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 2);
  EXPECT_THAT(e.TakeSpareChanges(), ::testing::ElementsAre(dgx));
}

// The done-when case: a gang of 3 on dgx, GPU 3 the spare; GPU 1 fails (held, as the scheduler
// holds an unhealthy GPU) and its member is made again: the replacement takes the spare, beside
// the survivors, which no one else could.
TEST(Spares, AGangsLostMemberTakesTheSpare) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("spread"));
  e.KeepSpares(1);
  const NodeId dgx = c.FindNode("dgx");
  const std::vector<Candidate> on_dgx = {Candidate{dgx}};
  std::vector<PodRequest> gang = Gang("train", 3);
  for (const PlacementResult& r : e.PlaceGang(gang, Mode::kCommit, &on_dgx)) {
    ASSERT_TRUE(r.placed()) << r.reason;
  }
  // A gang that starts takes no spare: a second one of 1 does not fit on dgx.
  std::vector<PodRequest> other = Gang("other", 1);
  EXPECT_FALSE(e.PlaceGang(other, Mode::kTestOnly, &on_dgx)[0].placed());

  const Placement* lost = e.Find("train-1");
  ASSERT_NE(lost, nullptr);
  const int bad = lost->gpus[0].gpu;
  ASSERT_TRUE(e.Release("train-1").ok());
  ASSERT_TRUE(e.Restore("unhealthy-gpu", WholeGpu(c, "dgx", bad)).ok());
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 3);
  // A pod of no gang still waits; the replacement goes to the spare.
  EXPECT_FALSE(e.Place(Pod("alone", GpuAsk::Whole(1)), Mode::kTestOnly, &on_dgx).placed());
  PodRequest replacement = gang[1];
  replacement.name = "train-1-again";
  const std::vector<std::string> running = {"train-0", "train-2"};
  const std::vector<PlacementResult> rs = e.PlaceElasticGang({&replacement, 1}, running);
  ASSERT_TRUE(rs[0].placed()) << rs[0].reason;
  EXPECT_EQ(rs[0].placement.node, dgx);
  EXPECT_EQ(rs[0].placement.gpus[0].gpu, 3);
  EXPECT_EQ(e.spare_count(), 0);  // nothing left to keep
}

// An elastic gang growing past its minimum is no replacement: it takes no spare.
TEST(Spares, AnElasticGangGrowingPastItsMinimumTakesNone) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("binpack"));
  e.KeepSpares(1);
  const std::vector<Candidate> on_dgx = {Candidate{c.FindNode("dgx")}};
  std::vector<PodRequest> gang = Gang("elastic", 4, /*min=*/2);
  std::vector<PlacementResult> rs = e.PlaceElasticGang(gang, {}, Mode::kCommit, &on_dgx);
  int placed = 0;
  for (const PlacementResult& r : rs) placed += r.placed() ? 1 : 0;
  EXPECT_EQ(placed, 3);  // 3 of 4: the spare is not theirs
  std::vector<std::string> running;
  for (int i = 0; i < 4; ++i) {
    if (rs[i].placed()) running.push_back(gang[i].name);
  }
  std::vector<PodRequest> pending;
  for (int i = 0; i < 4; ++i) {
    if (!rs[i].placed()) pending.push_back(gang[i]);
  }
  EXPECT_FALSE(e.PlaceElasticGang(pending, running, Mode::kCommit, &on_dgx)[0].placed());
  EXPECT_EQ(e.spare_count(), 1);
}

// Spares follow the pods: none while the domain is full, the first GPU freed, then the last one
// freed in the domain's order (the GPU before is free again); an engine copy keeps them.
TEST(Spares, MoveAsPodsComeAndGo) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("binpack"));
  const NodeId dgx = c.FindNode("dgx");
  const std::vector<Candidate> on_dgx = {Candidate{dgx}};
  std::vector<std::string> on_gpu(4);
  for (int i = 0; i < 4; ++i) {
    const PlacementResult r =
        e.Place(Pod("p" + std::to_string(i), GpuAsk::Whole(1)), Mode::kCommit, &on_dgx);
    ASSERT_TRUE(r.placed());
    on_gpu[r.placement.gpus[0].gpu] = "p" + std::to_string(i);
  }
  e.KeepSpares(1);
  EXPECT_EQ(e.spare_count(), 0);
  ASSERT_TRUE(e.Release(on_gpu[1]).ok());
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 1);
  ASSERT_TRUE(e.Release(on_gpu[3]).ok());
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 3);
  const PlacementResult r = e.Place(Pod("next", GpuAsk::Whole(1)), Mode::kCommit, &on_dgx);
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(r.placement.gpus[0].gpu, 1);

  Engine copy(e, MakePolicy("binpack"));
  EXPECT_EQ(copy.spare_gpus(dgx), 1ULL << 3);
  EXPECT_FALSE(copy.Place(Pod("more", GpuAsk::Whole(1)), Mode::kTestOnly, &on_dgx).placed());
  e.KeepSpares(0);
  EXPECT_EQ(e.spare_count(), 0);
  EXPECT_TRUE(e.Place(Pod("more", GpuAsk::Whole(1)), Mode::kTestOnly, &on_dgx).placed());
}

// A what-if sees the spares as they would be with its pods gone: on a full domain the one GPU a
// victim frees would become the spare, so evicting one pod makes no room; two do. The engine is
// left as it was.
TEST(Spares, AWhatIfSeesTheSparesItsVictimsWouldLeave) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("binpack"));
  const NodeId dgx = c.FindNode("dgx");
  const std::vector<Candidate> on_dgx = {Candidate{dgx}};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        e.Place(Pod("p" + std::to_string(i), GpuAsk::Whole(1)), Mode::kCommit, &on_dgx).placed());
  }
  e.KeepSpares(1);
  const PodRequest big = Pod("big", GpuAsk::Whole(1));
  const std::vector<std::string> one = {"p0"}, two = {"p0", "p1"};
  const PlacementResult r1 = e.DecideOne(Ask::Pod(big).In({&on_dgx}).Without(one).TestOnly());
  EXPECT_FALSE(r1.placed());
  EXPECT_THAT(r1.reason, HasSubstr("kept spare"));
  EXPECT_TRUE(e.DecideOne(Ask::Pod(big).In({&on_dgx}).Without(two).TestOnly()).placed());
  EXPECT_EQ(e.spare_count(), 0);
  EXPECT_EQ(e.state().whole_free_count(dgx), 0);
  EXPECT_EQ(e.placed_count(), 4u);
}

// With many spares the reason does not find out whether they would have made the difference (two
// passes over every domain for each pod that waits): it says they are not counted.
TEST(Spares, ManySparesAreOnlySaidNotToCount) {
  ClusterBuilder b;
  for (int i = 0; i < 65; ++i) b.Node("n" + std::to_string(i)).Gpus(2, "H100-80GB").NvSwitch();
  const Cluster c = b.Build();
  Engine e(c, MakePolicy("binpack"));
  e.KeepSpares(1);
  ASSERT_EQ(e.spare_count(), 65);
  for (int i = 0; i < 65; ++i) {
    ASSERT_TRUE(e.Place(Pod("p" + std::to_string(i), GpuAsk::Whole(1))).placed());
  }
  const PlacementResult r = e.Place(Pod("late", GpuAsk::Whole(1)));
  EXPECT_FALSE(r.placed());
  EXPECT_THAT(r.reason, HasSubstr("65 GPUs kept spare for gang replacements (spareGpusPerDomain "
                                  "1) are not counted as free"));
}

// A pod placed earlier (a restarted scheduler restoring it) comes before a spare: the spare moves.
TEST(Spares, ARestoredPodMovesTheSpare) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("binpack"));
  const NodeId dgx = c.FindNode("dgx");
  e.KeepSpares(1);
  ASSERT_EQ(e.spare_gpus(dgx), 1ULL << 3);
  ASSERT_TRUE(e.Restore("earlier", WholeGpu(c, "dgx", 3)).ok());
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 2);
  EXPECT_FALSE(e.Restore("twice", WholeGpu(c, "dgx", 3)).ok());
  EXPECT_EQ(e.spare_gpus(dgx), 1ULL << 2);
}

// Node changes: a node joining with an NVLink island gets its spare; a cordoned node keeps none.
TEST(Spares, FollowNodeChanges) {
  const Cluster c = DgxAndPcie();
  Engine e(c, MakePolicy("binpack"));
  e.KeepSpares(2);
  const NodeId dgx = c.FindNode("dgx");
  EXPECT_EQ(e.spare_gpus(dgx), 0b1100u);
  NodeChanges add;
  add.add.push_back(
      ClusterBuilder().Node("dgx2").Gpus(8, "H100-80GB").NvSwitch().Build().node(NodeId(0)));
  std::vector<NodeId> added;
  ASSERT_TRUE(e.ChangeNodes(add, &added).ok());
  EXPECT_EQ(e.spare_gpus(added[0]), 0b11000000u);
  NodeChanges cordon;
  cordon.cordon.emplace_back(dgx, true);
  ASSERT_TRUE(e.ChangeNodes(cordon).ok());
  EXPECT_EQ(e.spare_gpus(dgx), 0u);
  EXPECT_EQ(e.spare_count(), 2);
}

// Nodes only added settle the domains they join alone (the rest keep their spares), with what
// giving every spare back and choosing again gives (here the add comes with a cordon left as it
// is, which takes that path): a rack-scale NVLink domain that a node joins (its spares move to
// the new node, last in the domain's order), a server that is a domain of its own, a PCIe node
// in none; every node's spares and every later decision the same.
TEST(Spares, NodesJoiningSettleTheirDomainsAsAllAgain) {
  ClusterBuilder b;
  b.Node("a0").Gpus(4, "H100-80GB").NvSwitch().Label("tessera.dev/nvlink-domain", "nvl");
  b.Node("a1").Gpus(4, "H100-80GB").NvSwitch().Label("tessera.dev/nvlink-domain", "nvl");
  b.Node("dgx").Gpus(8, "H100-80GB").NvSwitch();
  const Cluster c = b.Build();
  std::vector<NodeSpec> joining;
  joining.push_back(ClusterBuilder()
                        .Node("a2")
                        .Gpus(4, "H100-80GB")
                        .NvSwitch()
                        .Label("tessera.dev/nvlink-domain", "nvl")
                        .Build()
                        .node(NodeId(0)));
  joining.push_back(
      ClusterBuilder().Node("dgx2").Gpus(8, "H100-80GB").NvSwitch().Build().node(NodeId(0)));
  joining.push_back(ClusterBuilder().Node("pcie").Gpus(2, "L40S").Build().node(NodeId(0)));
  for (std::string_view policy : {"tessera", "binpack"}) {
    SCOPED_TRACE(policy);
    Engine in_place(c, MakePolicy(policy)), again(c, MakePolicy(policy));
    for (Engine* e : {&in_place, &again}) {
      e->KeepSpares(2);
      ASSERT_TRUE(e->Place(Pod("busy", GpuAsk::Whole(3))).placed());
    }
    for (size_t i = 0; i < joining.size(); ++i) {
      ASSERT_TRUE(in_place.ChangeNodes(NodeChanges{{}, {}, {joining[i]}, {}}).ok());
      const NodeId first(0);
      ASSERT_TRUE(again
                      .ChangeNodes(NodeChanges{
                          {}, {}, {joining[i]}, {{first, !again.state().accepts_pods(first)}}})
                      .ok());
      ASSERT_EQ(in_place.spare_count(), again.spare_count()) << "after " << joining[i].name;
      for (int n = 0; n < in_place.cluster().node_count(); ++n) {
        EXPECT_EQ(in_place.spare_gpus(NodeId(n)), again.spare_gpus(NodeId(n)))
            << "node " << in_place.cluster().node(NodeId(n)).name << " after " << joining[i].name;
      }
      for (int k = 0; k < 3; ++k) {
        const PodRequest p = Pod(StrCat("p", i, "-", k), GpuAsk::Whole(1 + k));
        const PlacementResult x = in_place.Place(p), y = again.Place(p);
        ASSERT_EQ(x.placed(), y.placed()) << x.reason << " / " << y.reason;
        EXPECT_EQ(x.placement.node, y.placement.node);
        EXPECT_EQ(x.placement.gpus, y.placement.gpus);
      }
    }
    EXPECT_GT(in_place.spare_count(), 0);
  }
}

}  // namespace
}  // namespace tessera::core
