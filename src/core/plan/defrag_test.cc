#include "core/plan/defrag.h"

#include <limits>

#include "common/random.h"
#include "common/strings.h"
#include "core/engine.h"
#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::plan {
namespace {

using core::Cluster;
using core::Engine;
using core::GpuAsk;
using core::Placement;
using core::PodRequest;
using core::testing::ClusterBuilder;
using core::testing::MakePolicy;
using core::testing::Pod;
using core::testing::TwoNvSwitchServers;
using ::testing::HasSubstr;

constexpr int64_t kGi = 1024;

// Builds the running pods by placing them with the engine (the policy decides where), as a
// scheduler would have.
class World {
 public:
  explicit World(Cluster cluster, std::string policy = "tessera")
      : cluster_(std::move(cluster)), policy_(std::move(policy)) {
    engine_ = std::make_unique<Engine>(cluster_, MakePolicy(policy_));
  }
  // Places `pod` on exactly `node` and `gpus` (a test states the layout it wants).
  World& At(PodRequest pod, int node, uint64_t gpus, bool movable = true) {
    std::vector<core::Candidate> one{{core::NodeId(node), gpus}};
    core::PlacementResult r = engine_->Place(pod, core::Mode::kCommit, &one);
    TESSERA_CHECK_MSG(r.placed(), r.reason.c_str());
    running_.push_back(RunningPod{pod, r.placement, movable});
    return *this;
  }
  bool Anywhere(PodRequest pod, bool movable = true) {
    core::PlacementResult r = engine_->Place(pod);
    if (!r.placed()) return false;
    running_.push_back(RunningPod{pod, r.placement, movable});
    return true;
  }
  // Whether `target` (one pod, or a gang) fits as things are.
  bool Fits(const std::vector<PodRequest>& target) {
    std::vector<core::PlacementResult> r = engine_->PlaceGang(target, core::Mode::kTestOnly);
    return r[0].placed();
  }
  DefragInput Input(std::vector<PodRequest> target) const {
    DefragInput in;
    in.cluster = &cluster_;
    std::string p = policy_;
    in.make_policy = [p] { return MakePolicy(p); };
    in.running = running_;
    in.target = std::move(target);
    return in;
  }
  const Cluster& cluster() const { return cluster_; }
  const std::vector<RunningPod>& running() const { return running_; }

 private:
  Cluster cluster_;
  std::string policy_;
  std::unique_ptr<Engine> engine_;
  std::vector<RunningPod> running_;
};

// Applies a plan to a fresh engine: the movers leave, then the target and the movers go where
// the plan says. Every step must be accepted by the engine.
void ExpectPlanApplies(const World& s, const DefragInput& in, const DefragPlan& plan) {
  Engine e(s.cluster(), MakePolicy("tessera"), in.levels);
  for (const RunningPod& r : s.running()) ASSERT_TRUE(e.Restore(r.request.name, r.placement).ok());
  for (const Move& m : plan.moves) ASSERT_TRUE(e.Release(m.pod).ok()) << m.pod;
  // Every member, or an elastic gang's first (its min).
  const size_t members = plan.starts_with > 0 ? plan.starts_with : in.target.size();
  ASSERT_EQ(plan.target.size(), members);
  for (size_t i = 0; i < members; ++i) {
    absl::Status st = e.Restore(in.target[i].name, plan.target[i]);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  for (const Move& m : plan.moves) {
    absl::Status st = e.Restore(m.pod, m.to);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  e.state().CheckInvariants();
}

// One A100-80GB node of a test cluster: its name, GPU count, whether an NVSwitch joins its GPUs
// (one NVLink domain), and its rack label (none when empty).
struct NodeShape {
  std::string name;
  int gpus = 4;
  bool nvswitch = true;
  std::string rack;
};

Cluster A100Nodes(const std::vector<NodeShape>& nodes) {
  ClusterBuilder b;
  for (const NodeShape& n : nodes) {
    b.Node(n.name).Gpus(n.gpus, "A100-80GB");
    if (n.nvswitch) b.NvSwitch();
    if (!n.rack.empty()) b.Label("tessera.dev/rack", n.rack);
  }
  return b.Build();
}

Cluster TwoFourGpuNodes() { return A100Nodes({{"a"}, {"b"}}); }

// Reservations: no pod is moved onto held GPUs, and the target lands on held GPUs only where it
// may (its own reservation's room, which a plan then clears for it). a holds three one-GPU pods
// (GPUs 0..2), b one (GPU 0); a 4-GPU pod waits. Nothing held: one move (b's pod to a's GPU 3).
TEST(Defrag, HeldRoomTakesNoMovedPodAndCountsForItsOwner) {
  World s(TwoFourGpuNodes());
  s.At(Pod("a0", GpuAsk::Whole(1)), 0, 0b0001)
      .At(Pod("a1", GpuAsk::Whole(1)), 0, 0b0010)
      .At(Pod("a2", GpuAsk::Whole(1)), 0, 0b0100)
      .At(Pod("b0", GpuAsk::Whole(1)), 1, 0b0001);
  const PodRequest t = Pod("t", GpuAsk::Whole(4));
  absl::StatusOr<DefragPlan> free = PlanDefrag(s.Input({t}));
  ASSERT_TRUE(free.ok()) << free.status();
  ASSERT_EQ(free->verdict, DefragVerdict::kPlan);
  ASSERT_EQ(free->moves.size(), 1u);
  EXPECT_EQ(free->moves[0].pod, "b0");

  // a's GPU 3 held for another: b0 may not move there, and the target may not use it, so no
  // set of moves makes room.
  DefragInput other = s.Input({t});
  other.held.push_back({core::Candidate{core::NodeId(0), 0b1000}, false});
  absl::StatusOr<DefragPlan> none = PlanDefrag(other);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_NE(none->verdict, DefragVerdict::kPlan) << none->reason;
  EXPECT_NE(none->verdict, DefragVerdict::kFitsNow);

  // a's four GPUs held for the target itself: the plan clears its room (a's pods move to b), and
  // no pod moves onto a.
  DefragInput own = s.Input({t});
  own.held.push_back({core::Candidate{core::NodeId(0), 0b1111}, true});
  absl::StatusOr<DefragPlan> plan = PlanDefrag(own);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  EXPECT_EQ(plan->moves.size(), 3u);
  for (const Move& m : plan->moves) EXPECT_EQ(m.to.node, core::NodeId(1)) << m.pod;
  ASSERT_EQ(plan->target.size(), 1u);
  EXPECT_EQ(plan->target[0].node, core::NodeId(0));
  ExpectPlanApplies(s, own, *plan);

  // A held GPU outside the cluster's nodes is an input error.
  DefragInput bad = s.Input({t});
  bad.held.push_back({core::Candidate{core::NodeId(7), 1}, false});
  EXPECT_FALSE(PlanDefrag(bad).ok());
}

// Hot spares (DefragInput::spares_per_domain, as the scheduler keeps them): no pod is moved onto
// a spare and the target takes none. a and b are NVSwitch servers of 4 GPUs (a domain each,
// spare: the last free GPU); 50Gi shares do not share an 80Gi GPU. a: shares on GPUs 0, 1 (GPU 3
// its spare, GPU 2 free); b: a share on GPU 0 (GPU 3 its spare). A 3-GPU pod fits b now without
// spares; with them it needs b0 moved to a's GPU 2, never to a's spare GPU 3.
TEST(Defrag, NoPodIsMovedOntoAHotSpareAndTheTargetTakesNone) {
  World s(TwoFourGpuNodes());
  s.At(Pod("a0", GpuAsk::Share(50 * kGi, 0)), 0, 0b0001);
  s.At(Pod("a1", GpuAsk::Share(50 * kGi, 0)), 0, 0b0010);
  s.At(Pod("b0", GpuAsk::Share(50 * kGi, 0)), 1, 0b0001);
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(3))});
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->verdict, DefragVerdict::kFitsNow) << plan->reason;

  in.spares_per_domain = 1;
  plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].pod, "b0");
  EXPECT_EQ(plan->moves[0].to.node, core::NodeId(0));
  ASSERT_EQ(plan->moves[0].to.gpus.size(), 1u);
  EXPECT_EQ(plan->moves[0].to.gpus[0].gpu, 2);
  ASSERT_EQ(plan->target.size(), 1u);
  EXPECT_EQ(plan->target[0].node, core::NodeId(1));
  for (const core::GpuGrant& g : plan->target[0].gpus) EXPECT_NE(g.gpu, 3);

  // Both servers' spares kept: no 4-GPU pod ever fits, whatever moves.
  in.target = {Pod("t4", GpuAsk::Whole(4))};
  plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->verdict, DefragVerdict::kNeedsCapacity) << plan->reason;
}

TEST(Defrag, FitsNowNeedsNoMoves) {
  World s(TwoFourGpuNodes());
  s.At(Pod("x", GpuAsk::Whole(2)), 0, 0b0011);
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(4))});
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->verdict, DefragVerdict::kFitsNow);
  EXPECT_TRUE(plan->moves.empty());
  EXPECT_EQ(plan->target[0].node, core::NodeId(1));
}

TEST(Defrag, OneShareMovedFreesAServer) {
  // a: three shares on GPUs 0..2; b: one share on GPU 0. A 4-GPU pod fits nowhere; moving b's
  // share onto a's GPU 3 (or beside another share) frees b.
  World s(TwoFourGpuNodes());
  for (int g = 0; g < 3; ++g) s.At(Pod(StrCat("a", g), GpuAsk::Share(20 * kGi, 0)), 0, 1 << g);
  s.At(Pod("b0", GpuAsk::Share(20 * kGi, 0)), 1, 0b0001);
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(4))});
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].pod, "b0");
  EXPECT_EQ(plan->moves[0].to.node, core::NodeId(0));
  EXPECT_EQ(plan->target[0].node, core::NodeId(1));
  EXPECT_TRUE(plan->proven_minimal);
  EXPECT_THAT(plan->reason, HasSubstr("fits after 1 move"));
  ExpectPlanApplies(s, in, *plan);
}

TEST(Defrag, NothingGoesToACordonedNode) {
  // As OneShareMovedFreesAServer, but a third node c (4 free GPUs) is cordoned and a is too:
  // the pod cannot take c, and b's share cannot move to a: no plan within the budget, since the
  // only place the share could go is cordoned.
  World s(A100Nodes({{"a"}, {"b"}, {"c"}}));
  for (int g = 0; g < 3; ++g) s.At(Pod(StrCat("a", g), GpuAsk::Share(20 * kGi, 0)), 0, 1 << g);
  s.At(Pod("b0", GpuAsk::Share(20 * kGi, 0)), 1, 0b0001);
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(4))});
  in.cordoned = {core::NodeId(2)};
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].to.node, core::NodeId(0));
  EXPECT_EQ(plan->target[0].node, core::NodeId(1));

  in.cordoned = {core::NodeId(0), core::NodeId(2)};
  plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NE(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  EXPECT_NE(plan->verdict, DefragVerdict::kFitsNow) << plan->reason;

  in.cordoned = {core::NodeId(7)};
  EXPECT_FALSE(PlanDefrag(in).ok());
}

TEST(Defrag, PrefersMovingASharesOverAWholeGpu) {
  // a: GPU 0 held whole, GPUs 1..3 free; b: GPU 0 with a share, GPU 1..3 free. A 4-GPU pod:
  // one move either way; the share is the cheaper one.
  World s(TwoFourGpuNodes());
  s.At(Pod("whole", GpuAsk::Whole(1)), 0, 0b0001);
  s.At(Pod("share", GpuAsk::Share(10 * kGi, 0)), 1, 0b0001);
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(4))});
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].pod, "share");
  EXPECT_EQ(plan->whole_gpus_moved, 0);
  ExpectPlanApplies(s, in, *plan);
}

TEST(Defrag, PinnedPodsStayAndCapacityIsNamed) {
  World s(TwoFourGpuNodes());
  s.At(Pod("pin-a", GpuAsk::Whole(1)), 0, 0b0001, /*movable=*/false);
  s.At(Pod("pin-b", GpuAsk::Whole(1)), 1, 0b0001, /*movable=*/false);
  s.At(Pod("free", GpuAsk::Share(10 * kGi, 0)), 1, 0b0010);
  absl::StatusOr<DefragPlan> plan = PlanDefrag(s.Input({Pod("t", GpuAsk::Whole(4))}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->verdict, DefragVerdict::kNeedsCapacity);
  EXPECT_THAT(plan->reason, HasSubstr("impossible without more capacity"));
  EXPECT_THAT(plan->reason, HasSubstr("every movable pod (1) moved away"));

  absl::StatusOr<DefragPlan> never = PlanDefrag(s.Input({Pod("t", GpuAsk::Whole(6))}));
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->verdict, DefragVerdict::kNeedsCapacity);
  EXPECT_THAT(never->reason, HasSubstr("impossible without more capacity: needs 6"));
}

TEST(Defrag, HigherPriorityPodsAreNotMovedForLowerOnes) {
  World s(TwoFourGpuNodes());
  PodRequest important = Pod("important", GpuAsk::Share(10 * kGi, 0));
  important.priority = 100;
  s.At(important, 0, 0b0001);
  s.At(Pod("whole", GpuAsk::Whole(1)), 1, 0b0001);
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(4))});
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan);
  EXPECT_EQ(plan->moves[0].pod, "whole");  // the cheaper share is not movable for t
  in.target[0].priority = 100;
  plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->moves[0].pod, "important");
  DefragOptions any;
  any.move_higher_priority = true;
  in.target[0].priority = 0;
  plan = PlanDefrag(in, any);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->moves[0].pod, "important");
}

TEST(Defrag, ABudgetTooSmallSaysSo) {
  // Every GPU holds a share: a 4-GPU pod needs four moves onto the other server's GPUs.
  World s(TwoFourGpuNodes());
  for (int n = 0; n < 2; ++n) {
    for (int g = 0; g < 4; ++g) {
      s.At(Pod(StrCat("s", n, g), GpuAsk::Share(30 * kGi, 0)), n, 1 << g);
    }
  }
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(4))});
  DefragOptions small;
  small.max_moves = 3;
  absl::StatusOr<DefragPlan> over = PlanDefrag(in, small);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->verdict, DefragVerdict::kOverBudget);
  EXPECT_THAT(over->reason, HasSubstr("no plan of at most 3 moves"));
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan);
  EXPECT_EQ(plan->moves.size(), 4u);
  ExpectPlanApplies(s, in, *plan);
}

TEST(Defrag, ChainMoveMakesRoomForAMover) {
  // a (2 GPUs): a 2-GPU pod waits; GPU 0 holds a 60Gi share. b (1 GPU): a 30Gi share. The 60Gi
  // share fits on b only once the 30Gi one moves to a's GPU 1... which the target needs. So the
  // 30Gi share moves to c's GPU (c has one GPU holding 50Gi): two moves, one off the site.
  World s(A100Nodes({{"a", 2}, {"b", 1, false}, {"c", 1, false}}));
  s.At(Pod("big", GpuAsk::Share(60 * kGi, 0)), 0, 0b01);
  s.At(Pod("mid", GpuAsk::Share(30 * kGi, 0)), 1, 0b1);
  s.At(Pod("other", GpuAsk::Share(50 * kGi, 0)), 2, 0b1);
  DefragInput in = s.Input({Pod("t", GpuAsk::Whole(2))});
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  ASSERT_EQ(plan->moves.size(), 2u);
  EXPECT_EQ(plan->moves[0].pod, "big");
  EXPECT_EQ(plan->moves[0].to.node, core::NodeId(1));
  EXPECT_EQ(plan->moves[1].pod, "mid");
  EXPECT_EQ(plan->moves[1].to.node, core::NodeId(2));
  ExpectPlanApplies(s, in, *plan);
}

TEST(Defrag, GangThatRequiresARackStaysInOne) {
  World s(A100Nodes({{"a", 2, false, "r1"}, {"b", 2, false, "r1"}, {"c", 2, false, "r2"}}));
  s.At(Pod("x", GpuAsk::Share(10 * kGi, 0)), 0, 0b01);
  s.At(Pod("y", GpuAsk::Whole(1)), 2, 0b01);
  std::vector<PodRequest> gang;
  for (int i = 0; i < 4; ++i) {
    PodRequest m = Pod(StrCat("g-", i), GpuAsk::Whole(1));
    m.gang = core::GangAsk{"g", 4, "rack", true};
    gang.push_back(m);
  }
  DefragInput in = s.Input(gang);
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].pod, "x");
  EXPECT_EQ(plan->moves[0].to.node, core::NodeId(2));
  for (const Placement& p : plan->target) EXPECT_NE(p.node, core::NodeId(2));
  ExpectPlanApplies(s, in, *plan);
}

// defrag.h's example: an elastic gang (size 8, min 4, one NVLink domain) on two 8-GPU servers
// each holding five single-GPU pods: one move makes room for the 4 it starts with; no set of
// moves makes room for all 8.
TEST(Defrag, AnElasticGangIsPlannedForItsMin) {
  Cluster c = TwoNvSwitchServers();
  World s(std::move(c));
  for (int g = 0; g < 5; ++g) {
    s.At(Pod(StrCat("a", g), GpuAsk::Whole(1)), 0, 1 << g);
    s.At(Pod(StrCat("b", g), GpuAsk::Whole(1)), 1, 1 << g);
  }
  auto gang = [](int min) {
    std::vector<PodRequest> out;
    for (int i = 0; i < 8; ++i) {
      PodRequest m = Pod(StrCat("t-", i), GpuAsk::Whole(1));
      m.gang = core::GangAsk{"t", 8, "nvlink-domain", true, min};
      out.push_back(m);
    }
    return out;
  };
  DefragInput in = s.Input(gang(4));
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->verdict, DefragVerdict::kPlan) << plan->reason;
  EXPECT_EQ(plan->starts_with, 4);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_TRUE(plan->proven_minimal);
  ASSERT_EQ(plan->target.size(), 4u);  // t-0 .. t-3
  for (const Placement& p : plan->target) EXPECT_EQ(p.node, plan->target[0].node);
  EXPECT_NE(plan->moves[0].to.node, plan->target[0].node);
  EXPECT_THAT(plan->reason, HasSubstr("gang t (4 pods of 1 whole GPU: it starts with 4 of its 8 "
                                      "members) fits after 1 move"));
  ExpectPlanApplies(s, in, *plan);
  // The same gang all or nothing: no plan (the budget's 4 moves, and no more could help).
  absl::StatusOr<DefragPlan> all = PlanDefrag(s.Input(gang(0)));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->verdict, DefragVerdict::kOverBudget) << all->reason;
  EXPECT_EQ(all->starts_with, 0);
  // Fewer members to plan for than the min: refused, saying why.
  std::vector<PodRequest> three = gang(4);
  three.resize(3);
  absl::StatusOr<DefragPlan> few = PlanDefrag(s.Input(three));
  EXPECT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(few.status().message(), HasSubstr("fewer than its min 4"));
}

TEST(Defrag, GangMembersAndMigAreNeverMoved) {
  World s(TwoFourGpuNodes());
  PodRequest m = Pod("m", GpuAsk::Whole(1));
  m.gang = core::GangAsk{"old", 1, "", false};
  s.At(m, 0, 0b0001);
  s.At(Pod("n", GpuAsk::Whole(1)), 1, 0b0001, /*movable=*/false);
  absl::StatusOr<DefragPlan> plan = PlanDefrag(s.Input({Pod("t", GpuAsk::Whole(4))}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->verdict, DefragVerdict::kNeedsCapacity);

  absl::StatusOr<DefragPlan> mig = PlanDefrag(s.Input({Pod("t", GpuAsk::Mig("1g.10gb"))}));
  EXPECT_EQ(mig.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mig.status().message(), HasSubstr("MIG instance"));
}

TEST(Defrag, APolicyWithoutGangsPlacesAllMembersOrNone) {
  // whole-gpu places gang members one by one: a plan still places every member.
  World s(TwoFourGpuNodes(), "whole-gpu");
  s.At(Pod("x", GpuAsk::Whole(1)), 0, 0b0001);
  s.At(Pod("y", GpuAsk::Whole(3)), 1, 0b0111);
  std::vector<PodRequest> gang;
  for (int i = 0; i < 5; ++i) {
    PodRequest m = Pod(StrCat("g-", i), GpuAsk::Whole(1));
    m.gang = core::GangAsk{"g", 5, "", false};
    gang.push_back(m);
  }
  DefragInput in = s.Input(gang);
  absl::StatusOr<DefragPlan> plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 5 GPUs for it and 4 for x and y, on 8: no set of moves helps.
  EXPECT_EQ(plan->verdict, DefragVerdict::kOverBudget) << plan->reason;
  EXPECT_TRUE(plan->proven_minimal);
  gang.pop_back();
  for (PodRequest& m : gang) m.gang->size = 4;
  in = s.Input(gang);
  plan = PlanDefrag(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->verdict, DefragVerdict::kFitsNow) << plan->reason;
  EXPECT_EQ(plan->target.size(), 4u);
}

TEST(Defrag, BadInputIsRefusedWithAReason) {
  World s(TwoFourGpuNodes());
  s.At(Pod("x", GpuAsk::Whole(1)), 0, 0b0001);
  absl::StatusOr<DefragPlan> dup = PlanDefrag(s.Input({Pod("x", GpuAsk::Whole(1))}));
  EXPECT_THAT(dup.status().message(), HasSubstr("already running"));
  DefragInput clash = s.Input({Pod("t", GpuAsk::Whole(1))});
  clash.running.push_back(clash.running[0]);
  clash.running.back().request.name = "x2";
  EXPECT_THAT(PlanDefrag(clash).status().message(), HasSubstr("do not fit the cluster together"));
  EXPECT_THAT(PlanDefrag(s.Input({Pod("t1", GpuAsk::Whole(1)), Pod("t2", GpuAsk::Whole(1))}))
                  .status()
                  .message(),
              HasSubstr("not a gang"));
  PodRequest g = Pod("g-0", GpuAsk::Whole(1));
  g.gang = core::GangAsk{"g", 1, "planet", true};
  EXPECT_THAT(PlanDefrag(s.Input({g})).status().message(), HasSubstr("unknown topology level"));
}

// ---- Optimality against exhaustive search -------------------------------------------------

// The reference: every set of movable pods by size, and for each every destination of every pod
// (every node, every GPU set of the right size, each checked by the engine's Place restricted to
// exactly that), with a required gang's domain checked at the end. Shares nothing with the
// planner but the engine.
struct Reference {
  int moves = -1;  // -1: none within the budget
  int whole_gpus = 0;
};

class Exhaustive {
 public:
  Exhaustive(const World& s, const DefragInput& in) : s_(s), in_(in) {
    engine_ = std::make_unique<Engine>(s.cluster(), MakePolicy("tessera"), in.levels);
    for (const RunningPod& r : s.running()) {
      TESSERA_CHECK(engine_->Restore(r.request.name, r.placement).ok());
      if (r.movable && !r.request.gang) movable_.push_back(&r);
    }
  }

  Reference Run(int max_moves) {
    for (int k = 0; k <= max_moves && k <= static_cast<int>(movable_.size()); ++k) {
      int best = std::numeric_limits<int>::max();
      std::vector<bool> pick(movable_.size(), false);
      std::fill(pick.begin(), pick.begin() + k, true);
      std::sort(pick.begin(), pick.end());
      do {
        std::vector<const RunningPod*> set;
        int cost = 0;
        for (size_t i = 0; i < pick.size(); ++i) {
          if (!pick[i]) continue;
          set.push_back(movable_[i]);
          if (movable_[i]->request.gpu.kind == GpuAsk::Kind::kWhole) {
            cost += movable_[i]->request.gpu.count;
          }
        }
        if (cost >= best) continue;
        for (const RunningPod* r : set) TESSERA_CHECK(engine_->Release(r->request.name).ok());
        std::vector<const PodRequest*> order;
        for (const PodRequest& t : in_.target) order.push_back(&t);
        for (const RunningPod* r : set) order.push_back(&r->request);
        std::vector<Placement> placed(order.size());
        if (PlaceEvery(order, 0, &placed)) best = cost;
        for (const RunningPod* r : set) {
          TESSERA_CHECK(engine_->Restore(r->request.name, r->placement).ok());
        }
      } while (std::next_permutation(pick.begin(), pick.end()));
      if (best != std::numeric_limits<int>::max()) return Reference{k, best};
    }
    return Reference{};
  }

 private:
  bool GangOk(const std::vector<Placement>& placed) const {
    const PodRequest& t = in_.target[0];
    if (!t.gang || !t.gang->required || t.gang->level.empty()) return true;
    int level = engine_->domains().LevelIndex(t.gang->level);
    std::optional<std::string> domain;
    for (size_t i = 0; i < in_.target.size(); ++i) {
      for (const core::GpuGrant& g : placed[i].gpus) {
        std::optional<std::string> d = engine_->domains().DomainOf(level, placed[i].node, g.gpu);
        if (!d) return false;
        if (domain && *domain != *d) return false;
        domain = d;
      }
    }
    return true;
  }

  bool PlaceEvery(const std::vector<const PodRequest*>& order, size_t i,
                  std::vector<Placement>* placed) {
    if (i == order.size()) return GangOk(*placed);
    const PodRequest& r = *order[i];
    const int need = r.gpu.kind == GpuAsk::Kind::kWhole ? r.gpu.count : 1;
    for (int n = 0; n < s_.cluster().node_count(); ++n) {
      const int gpus = s_.cluster().node(core::NodeId(n)).gpu_count();
      for (uint64_t mask = 1; mask < (1ULL << gpus); ++mask) {
        if (__builtin_popcountll(mask) != need) continue;
        std::vector<core::Candidate> one{{core::NodeId(n), mask}};
        core::PlacementResult res = engine_->Place(r, core::Mode::kCommit, &one);
        if (!res.placed()) continue;
        (*placed)[i] = res.placement;
        bool ok = PlaceEvery(order, i + 1, placed);
        TESSERA_CHECK(engine_->Release(r.name).ok());
        if (ok) return true;
      }
    }
    return false;
  }

  const World& s_;
  const DefragInput& in_;
  std::unique_ptr<Engine> engine_;
  std::vector<const RunningPod*> movable_;
};

Cluster RandomCluster(Random& rng) {
  ClusterBuilder b;
  const int nodes = 2 + rng.Uniform(2);
  for (int n = 0; n < nodes; ++n) {
    b.Node(StrCat("n", n)).Gpus(2 + rng.Uniform(3), "A100-80GB");
    if (rng.Uniform(2) == 0) b.NvSwitch();
    b.Label("tessera.dev/rack", StrCat("r", n % 2));
  }
  return b.Build();
}

PodRequest RandomPod(Random& rng, std::string name) {
  switch (rng.Uniform(4)) {
    case 0:
      return Pod(std::move(name), GpuAsk::Whole(1 + rng.Uniform(2)));
    case 1:
      return Pod(std::move(name), GpuAsk::Share((1 + rng.Uniform(4)) * 20 * kGi, 0));
    case 2:
      return Pod(std::move(name), GpuAsk::Share(10 * kGi, 250 * (1 + rng.Uniform(3))));
    default:
      return Pod(std::move(name), GpuAsk::Fraction(100 * (1 + rng.Uniform(9))));
  }
}

std::vector<PodRequest> RandomTarget(Random& rng) {
  switch (rng.Uniform(4)) {
    case 0: {
      PodRequest t = Pod("t", GpuAsk::Whole(2 + rng.Uniform(3)));
      if (rng.Uniform(2) == 0) {
        t.gpu.topology = core::GpuTopology::kNvLink;
        t.gpu.topology_required = true;
      }
      return {t};
    }
    case 1:
      return {Pod("t", GpuAsk::Share((2 + rng.Uniform(3)) * 20 * kGi, 0))};
    default: {
      std::vector<PodRequest> gang;
      const int size = 2 + rng.Uniform(2);
      const bool rack = rng.Uniform(3) != 0;
      for (int i = 0; i < size; ++i) {
        PodRequest m = Pod(StrCat("t-", i), GpuAsk::Whole(1 + rng.Uniform(2)));
        m.gang = core::GangAsk{"t", size, rack ? "rack" : "", rack};
        gang.push_back(m);
      }
      return gang;
    }
  }
}

// Randomised small clusters: the planner's fewest moves, and the whole GPUs they move, equal the
// exhaustive search's; every plan applies; "needs capacity" and "over budget" are true.
TEST(Defrag, OptimalAgainstExhaustiveSearchOnSmallClusters) {
  constexpr int kMaxMoves = 3;
  int plans = 0, fits = 0, over = 0, capacity = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Random rng(seed);
    World s(RandomCluster(rng));
    // Pods arrive until the target waits (most instances), up to 10 of them.
    std::vector<PodRequest> target = RandomTarget(rng);
    const bool until_waits = rng.Uniform(10) != 0;
    for (int i = 0; i < 10 && (!until_waits || s.Fits(target)); ++i) {
      s.Anywhere(RandomPod(rng, StrCat("p", i)), rng.Uniform(8) != 0);
    }
    DefragInput in = s.Input(target);
    DefragOptions opts;
    opts.max_moves = kMaxMoves;
    opts.max_tries = 1'000'000;
    absl::StatusOr<DefragPlan> plan = PlanDefrag(in, opts);
    ASSERT_TRUE(plan.ok()) << "seed " << seed << ": " << plan.status();
    Exhaustive ex(s, in);
    Reference ref = ex.Run(kMaxMoves);
    SCOPED_TRACE(StrCat("seed ", seed, ": ", plan->reason));
    switch (plan->verdict) {
      case DefragVerdict::kFitsNow:
        ++fits;
        EXPECT_EQ(ref.moves, 0);
        ExpectPlanApplies(s, in, *plan);
        break;
      case DefragVerdict::kPlan:
        ++plans;
        EXPECT_TRUE(plan->proven_minimal);
        EXPECT_EQ(static_cast<int>(plan->moves.size()), ref.moves);
        EXPECT_EQ(plan->whole_gpus_moved, ref.whole_gpus);
        ExpectPlanApplies(s, in, *plan);
        break;
      case DefragVerdict::kOverBudget:
        ++over;
        EXPECT_EQ(ref.moves, -1);
        break;
      case DefragVerdict::kNeedsCapacity: {
        ++capacity;
        EXPECT_EQ(Exhaustive(s, in).Run(1000).moves, -1);
        break;
      }
      case DefragVerdict::kSearchLimit:
        ADD_FAILURE() << "search limit on a small instance";
        break;
    }
  }
  // The instances exercise every answer, plans most.
  EXPECT_GT(plans, 30);
  EXPECT_GT(fits, 0);
  EXPECT_GT(capacity, 0);
  RecordProperty("plans", plans);
  std::cerr << "plans " << plans << ", fits now " << fits << ", over budget " << over
            << ", needs capacity " << capacity << "\n";
}

}  // namespace
}  // namespace tessera::plan
