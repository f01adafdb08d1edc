#include "core/reservations/reservations.h"

#include <optional>
#include <string>
#include <vector>

#include "common/strings.h"
#include "core/testing/cluster_builder.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using testing::Pod;

// Two nodes of 4 GPUs (the header's example).
Cluster TwoNodes() {
  return ClusterBuilder().Node("a").Gpus(4, "A100-80GB").Node("b").Gpus(4, "A100-80GB").Build();
}

// An engine and its reservations, with pods started at a time and a declared run time.
struct Fixture {
  explicit Fixture(const Cluster& c, ReservationOptions o)
      : engine(c, *CreatePolicy("binpack", {})), res(o) {}
  // Places `request` where the reservations let it at `now`; tells the reservations.
  PlacementResult Start(const PodRequest& request, int64_t now, std::optional<int64_t> runtime,
                        Admission* how = nullptr) {
    PlacementResult r = res.Place(engine, request, Mode::kCommit, now, runtime, how);
    if (r.placed()) res.Started(request.name, r.placement, now, runtime);
    return r;
  }
  // Puts a one-GPU pod on a given node's GPU (setting up), running `runtime` from `now`.
  void Hold(const std::string& name, int node, int gpu, int64_t now,
            std::optional<int64_t> runtime) {
    std::vector<Candidate> only = {Candidate{NodeId(node), 1ULL << gpu}};
    PlacementResult r = engine.Place(Pod(name, GpuAsk::Whole(1)), Mode::kCommit, &only);
    TESSERA_CHECK(r.placed());
    res.Started(name, r.placement, now, runtime);
  }
  void End(const std::string& name) {
    TESSERA_CHECK(engine.Release(name).ok());
    res.Ended(name);
  }
  int Update(int64_t now, const std::vector<Reservations::Waiting>& waiting) {
    return res.Update(now, waiting, engine);
  }
  Engine engine;
  Reservations res;
};

ReservationOptions On(int n = 1) {
  ReservationOptions o;
  o.max_reservations = n;
  o.after_s = 30;
  o.grace_s = 10;
  return o;
}

// The header's example: a frees 4 GPUs by 300, b by 500.
void Example(Fixture& f) {
  f.Hold("a1", 0, 0, 0, 100);
  f.Hold("a2", 0, 1, 0, 200);
  f.Hold("a3", 0, 2, 0, 300);
  f.Hold("b1", 1, 0, 0, 50);
  f.Hold("b2", 1, 1, 0, 60);
  f.Hold("b3", 1, 2, 0, 400);
  f.Hold("b4", 1, 3, 0, 500);
}

TEST(Reservations, ReservesWhereTheGpusFreeFirst) {
  const Cluster c = TwoNodes();
  Fixture f(c, On());
  Example(f);
  const PodRequest big = Pod("big", GpuAsk::Whole(4));
  // Not before it waited after_s.
  EXPECT_EQ(f.Update(20, {{"big", {&big, 1}, 0, 0}}), 0);
  EXPECT_EQ(f.Update(30, {{"big", {&big, 1}, 0, 0}}), 1);
  ASSERT_EQ(f.res.reservations().size(), 1u);
  const Reservation& r = f.res.reservations()[0];
  EXPECT_EQ(r.owner, "big");
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].node, NodeId(0));
  EXPECT_EQ(r.gpus[0].gpu_mask, 0b1111u);
  EXPECT_EQ(r.expected_start, 300);
  EXPECT_EQ(r.deadline, 310);
  // Kept at the next update; gone once its owner no longer waits.
  EXPECT_EQ(f.Update(40, {{"big", {&big, 1}, 0, 0}}), 0);
  EXPECT_EQ(f.res.reservations().size(), 1u);
  f.Update(41, {});
  EXPECT_TRUE(f.res.reservations().empty());
}

TEST(Reservations, SmallPodsAndOneGpuPodsAreNotEligible) {
  const Cluster c = TwoNodes();
  Fixture f(c, On());
  const PodRequest one = Pod("one", GpuAsk::Whole(1));
  const PodRequest share = Pod("share", GpuAsk::Share(4096, 0));
  EXPECT_EQ(f.Update(100, {{"one", {&one, 1}, 0, 0}, {"share", {&share, 1}, 0, 0}}), 0);
}

TEST(Reservations, BackfillOnlyForPodsThatEndInTime) {
  const Cluster c = TwoNodes();
  Fixture f(c, On());
  Example(f);
  const PodRequest big = Pod("big", GpuAsk::Whole(4));
  ASSERT_EQ(f.Update(30, {{"big", {&big, 1}, 0, 0}}), 1);
  // a's free GPU 3 is held: a pod without a run time may not take it, and b is full.
  Admission how;
  PlacementResult no = f.Start(Pod("nodecl", GpuAsk::Whole(1)), 30, std::nullopt, &how);
  EXPECT_EQ(no.outcome, Outcome::kNoFitNow);
  // One that ends after the expected start (30 + 300 > 300) may not either.
  EXPECT_FALSE(f.Start(Pod("long", GpuAsk::Whole(1)), 30, 300).placed());
  // One that ends by then backfills.
  PlacementResult yes = f.Start(Pod("short", GpuAsk::Whole(1)), 30, 200, &how);
  ASSERT_TRUE(yes.placed());
  EXPECT_EQ(how, Admission::kBackfill);
  EXPECT_EQ(yes.placement.node, NodeId(0));
  // When b frees a GPU, the pod without a run time goes there: it fits elsewhere.
  f.End("b1");
  f.Update(50, {{"big", {&big, 1}, 0, 0}});
  PlacementResult elsewhere = f.Start(Pod("nodecl", GpuAsk::Whole(1)), 50, std::nullopt, &how);
  ASSERT_TRUE(elsewhere.placed());
  EXPECT_EQ(elsewhere.placement.node, NodeId(1));
  EXPECT_EQ(how, Admission::kFree);
  // The owner takes what is held.
  f.End("a1");
  f.End("a2");
  f.End("a3");
  f.End("short");
  f.Update(300, {{"big", {&big, 1}, 0, 0}});
  PlacementResult owner = f.Start(big, 300, std::nullopt, &how);
  ASSERT_TRUE(owner.placed());
  EXPECT_EQ(how, Admission::kOwner);
}

// The live scheduler's node restrictions (taints, selectors) bound both of Place's decisions,
// and HeldFrom says which GPUs a pod may not take.
TEST(Reservations, PlaceStaysOnTheAllowedNodes) {
  const Cluster c = TwoNodes();
  Fixture f(c, On());
  Example(f);
  const PodRequest big = Pod("big", GpuAsk::Whole(4));
  ASSERT_EQ(f.Update(30, {{"big", {&big, 1}, 0, 0}}), 1);
  f.End("b1");  // b has a free GPU now
  const NodeSet only_a({true, false});
  const NodeSet only_b({false, true});
  const PodRequest nodecl = Pod("nodecl", GpuAsk::Whole(1));
  // Without a run time: a's free GPU is held, and it may not go to b.
  EXPECT_FALSE(
      f.res.Place(f.engine, nodecl, Mode::kTestOnly, 30, std::nullopt, nullptr, &only_a).placed());
  PlacementResult on_b =
      f.res.Place(f.engine, nodecl, Mode::kTestOnly, 30, std::nullopt, nullptr, &only_b);
  ASSERT_TRUE(on_b.placed());
  EXPECT_EQ(on_b.placement.node, NodeId(1));
  // A backfill pod allowed only on b goes to b, not to a's held GPU.
  Admission how;
  PlacementResult short_b = f.res.Place(f.engine, Pod("short", GpuAsk::Whole(1)), Mode::kTestOnly,
                                        30, 100, &how, &only_b);
  ASSERT_TRUE(short_b.placed());
  EXPECT_EQ(short_b.placement.node, NodeId(1));
  // What is held from whom.
  EXPECT_EQ(f.res.HeldFrom(nodecl, NodeId(0), 30, std::nullopt), 0b1111u);
  EXPECT_EQ(f.res.HeldFrom(nodecl, NodeId(1), 30, std::nullopt), 0u);
  EXPECT_EQ(f.res.HeldFrom(nodecl, NodeId(0), 30, 100), 0u);        // ends by 300: backfill
  EXPECT_EQ(f.res.HeldFrom(big, NodeId(0), 30, std::nullopt), 0u);  // its own
}

TEST(Reservations, CpuOnTheNodeIsHeldToo) {
  const Cluster c = ClusterBuilder()
                        .Node("a")
                        .Cpu(16)
                        .Gpus(2, "A100-80GB")
                        .Node("b")
                        .Cpu(16)
                        .Gpus(2, "A100-80GB")
                        .Build();
  Fixture f(c, On());
  f.Hold("a1", 0, 0, 0, 100);
  f.Hold("b1", 1, 0, 0, 200);
  const PodRequest big = Pod("big", GpuAsk::Whole(2), 12'000);
  ASSERT_EQ(f.Update(30, {{"big", {&big, 1}, 0, 0}}), 1);
  EXPECT_EQ(f.res.reservations()[0].gpus[0].node, NodeId(0));
  // A CPU-only pod taking 8 of a's 15 free cores would leave the big pod 8 < 12 at 100: it
  // goes to b.
  Admission how;
  PlacementResult cpu = f.Start(Pod("cpu", GpuAsk::None(), 8'000), 30, std::nullopt, &how);
  ASSERT_TRUE(cpu.placed());
  EXPECT_EQ(cpu.placement.node, NodeId(1));
}

TEST(Reservations, AWrongEstimateExpiresAndIsChosenAgain) {
  const Cluster c = TwoNodes();
  ReservationOptions o = On();
  o.unknown_runtime_s = 100;
  Fixture f(c, o);
  // a: 4 pods without a declared run time started at 0 (expected to end at 100); b: 4 declared
  // to end at 150.
  for (int g = 0; g < 4; ++g) f.Hold(StrCat("a", g), 0, g, 0, std::nullopt);
  for (int g = 0; g < 4; ++g) f.Hold(StrCat("b", g), 1, g, 0, 150);
  const PodRequest big = Pod("big", GpuAsk::Whole(4));
  ASSERT_EQ(f.Update(30, {{"big", {&big, 1}, 0, 0}}), 1);
  EXPECT_EQ(f.res.reservations()[0].gpus[0].node, NodeId(0));
  EXPECT_EQ(f.res.reservations()[0].expected_start, 100);
  // At 105 a's pods still run: each is now expected to end one estimate later (205), past the
  // deadline (100 + grace 10): the reservation is chosen again, now on b (150 < 205).
  EXPECT_EQ(f.Update(105, {{"big", {&big, 1}, 0, 0}}), 1);
  ASSERT_EQ(f.res.reservations().size(), 1u);
  EXPECT_EQ(f.res.reservations()[0].gpus[0].node, NodeId(1));
  EXPECT_EQ(f.res.reservations()[0].expected_start, 150);
  EXPECT_EQ(f.res.reservations()[0].since, 105);
}

TEST(Reservations, AHigherPriorityPodTakesHeldRoomAndTheReservationMoves) {
  const Cluster c = TwoNodes();
  Fixture f(c, On());
  Example(f);
  const PodRequest big = Pod("big", GpuAsk::Whole(4));
  ASSERT_EQ(f.Update(30, {{"big", {&big, 1}, 0, 0}}), 1);
  PodRequest urgent = Pod("urgent", GpuAsk::Whole(1));
  urgent.priority = 10;
  Admission how;
  PlacementResult r = f.Start(urgent, 30, std::nullopt, &how);
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(r.placement.node, NodeId(0));
  EXPECT_EQ(how, Admission::kPriority);
  // a now frees only when urgent ends (30 + 3600): the reservation moves to b (500).
  EXPECT_EQ(f.Update(31, {{"big", {&big, 1}, 0, 0}}), 1);
  ASSERT_EQ(f.res.reservations().size(), 1u);
  EXPECT_EQ(f.res.reservations()[0].gpus[0].node, NodeId(1));
  EXPECT_EQ(f.res.reservations()[0].expected_start, 500);
}

TEST(Reservations, AtMostNAtOnceInQueueOrder) {
  const Cluster c = TwoNodes();
  const PodRequest p1 = Pod("p1", GpuAsk::Whole(2)), p2 = Pod("p2", GpuAsk::Whole(2)),
                   p3 = Pod("p3", GpuAsk::Whole(2));
  const std::vector<Reservations::Waiting> waiting = {
      {"p1", {&p1, 1}, 0, 0}, {"p2", {&p2, 1}, 0, 0}, {"p3", {&p3, 1}, 0, 0}};
  {
    Fixture f(c, On(1));
    Example(f);
    EXPECT_EQ(f.Update(30, waiting), 1);
    EXPECT_EQ(f.res.reservations()[0].owner, "p1");
  }
  Fixture f(c, On(2));
  Example(f);
  EXPECT_EQ(f.Update(30, waiting), 2);
  ASSERT_EQ(f.res.reservations().size(), 2u);
  // p1 where two GPUs free first: b's GPUs 0 and 1 (at 50, 60); p2 then on a's GPUs 3 and 0
  // (free now, at 100).
  EXPECT_EQ(f.res.reservations()[0].gpus[0].node, NodeId(1));
  EXPECT_EQ(f.res.reservations()[0].expected_start, 60);
  EXPECT_EQ(f.res.reservations()[1].owner, "p2");
  EXPECT_EQ(f.res.reservations()[1].gpus[0].node, NodeId(0));
  EXPECT_EQ(f.res.reservations()[1].expected_start, 100);
}

TEST(Reservations, AGangReservesInOneDomainOfItsLevel) {
  const Cluster c = ClusterBuilder()
                        .Node("r1a")
                        .Label("tessera.dev/rack", "r1")
                        .Gpus(2, "A100-80GB")
                        .Node("r1b")
                        .Label("tessera.dev/rack", "r1")
                        .Gpus(2, "A100-80GB")
                        .Node("r2a")
                        .Label("tessera.dev/rack", "r2")
                        .Gpus(2, "A100-80GB")
                        .Node("r2b")
                        .Label("tessera.dev/rack", "r2")
                        .Gpus(2, "A100-80GB")
                        .Build();
  Fixture f(c, On());
  f.Hold("x0", 0, 0, 0, 300);  // rack r1 frees all by 300
  f.Hold("x1", 1, 1, 0, 100);
  f.Hold("y0", 2, 0, 0, 200);  // rack r2 frees all by 200
  f.Hold("y1", 3, 0, 0, 150);
  f.Hold("y2", 3, 1, 0, 120);
  std::vector<PodRequest> members;
  for (int k = 0; k < 2; ++k) {
    PodRequest m = Pod(StrCat("g-", k), GpuAsk::Whole(2));
    m.gang = GangAsk{"g", 2, "rack", true, 0};
    members.push_back(m);
  }
  ASSERT_EQ(f.Update(30, {{"g", members, 0, 0}}), 1);
  const Reservation& r = f.res.reservations()[0];
  EXPECT_EQ(r.owner, "g");
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].node, NodeId(2));
  EXPECT_EQ(r.gpus[1].node, NodeId(3));
  EXPECT_EQ(r.expected_start, 200);
  EXPECT_EQ(r.cpu_milli, 0);
  // A member may take what the gang holds; another pod may not.
  f.End("y0");
  f.End("y1");
  f.End("y2");
  f.Update(200, {{"g", members, 0, 0}});
  Admission how;
  // r1's nodes have one GPU free each: two on one node are only in r2, held.
  EXPECT_EQ(f.Start(Pod("other", GpuAsk::Whole(2)), 200, std::nullopt).outcome, Outcome::kNoFitNow);
  PlacementResult member = f.Start(members[0], 200, std::nullopt, &how);
  ASSERT_TRUE(member.placed());
  EXPECT_EQ(how, Admission::kOwner);
  EXPECT_GE(member.placement.node.value(), 2);
}

// A gang is steered around room held for another as a pod is: the policy (binpack) would put a
// member on a's free GPU, held for `big`; the gang runs on b instead. One that fits only on held
// room waits; one whose members end in time backfills it. An elastic gang's members keep off it.
TEST(Reservations, AGangRunsAroundHeldRoomWhenItFitsElsewhere) {
  const Cluster c = TwoNodes();
  Fixture f(c, On());
  Example(f);
  const PodRequest big = Pod("big", GpuAsk::Whole(4));
  ASSERT_EQ(f.Update(30, {{"big", {&big, 1}, 0, 0}}), 1);  // a's GPUs, expected start 300
  f.End("b1");
  f.End("b2");  // at 60: b has GPUs 0 and 1 free, a has GPU 3 free (held)
  auto gang = [](const std::string& name, int size, int min = 0) {
    std::vector<PodRequest> members;
    for (int k = 0; k < size; ++k) {
      PodRequest m = Pod(StrCat(name, "-", k), GpuAsk::Whole(1));
      m.gang = GangAsk{name, size, "", false, min};
      members.push_back(m);
    }
    return members;
  };
  // Without reservations the policy takes a's GPU for one member.
  const std::vector<PodRequest> two = gang("two", 2);
  std::vector<PlacementResult> plain = f.engine.Decide(Ask::Gang(two).TestOnly());
  ASSERT_TRUE(plain[0].placed() && plain[1].placed());
  EXPECT_TRUE(plain[0].placement.node == NodeId(0) || plain[1].placement.node == NodeId(0));

  std::vector<PlacementResult> placed = f.res.PlaceGang(f.engine, Ask::Gang(two), 60);
  ASSERT_TRUE(placed[0].placed() && placed[1].placed()) << placed[0].reason;
  EXPECT_EQ(placed[0].placement.node, NodeId(1));
  EXPECT_EQ(placed[1].placement.node, NodeId(1));
  for (const PodRequest& m : two) ASSERT_TRUE(f.engine.Release(m.name).ok());

  // Three fit only with a's held GPU: they wait, saying why; declaring run times ending by 300
  // they may take it (backfill).
  const std::vector<PodRequest> three = gang("three", 3);
  std::vector<PlacementResult> held = f.res.PlaceGang(f.engine, Ask::Gang(three).TestOnly(), 60);
  for (const PlacementResult& r : held) {
    EXPECT_EQ(r.outcome, Outcome::kNoFitNow);
    EXPECT_EQ(r.reason, "the room it fits is held for a waiting pod or gang (a reservation)");
  }
  const std::vector<std::optional<int64_t>> short_runs(3, int64_t{100});
  std::vector<PlacementResult> backfill =
      f.res.PlaceGang(f.engine, Ask::Gang(three).TestOnly(), 60, {}, short_runs);
  for (const PlacementResult& r : backfill) EXPECT_TRUE(r.placed()) << r.reason;
  const std::vector<std::optional<int64_t>> long_runs(3, int64_t{1000});
  EXPECT_FALSE(
      f.res.PlaceGang(f.engine, Ask::Gang(three).TestOnly(), 60, {}, long_runs)[0].placed());

  // An elastic gang of 3 (min 1): the two members that fit off held room run, the third waits.
  const std::vector<PodRequest> elastic = gang("el", 3, 1);
  std::vector<PlacementResult> some =
      f.res.PlaceGang(f.engine, Ask::ElasticGang(elastic, {}).TestOnly(), 60);
  int on_b = 0;
  for (const PlacementResult& r : some) {
    if (!r.placed()) continue;
    EXPECT_EQ(r.placement.node, NodeId(1));
    ++on_b;
  }
  EXPECT_EQ(on_b, 2);

  // `owners`: the members as the reservations name them (the engine's gang is "g", the
  // reservations' owner "big"): the owner takes its room.
  const std::vector<PodRequest> g = gang("g", 3);
  std::vector<PodRequest> named = g;
  for (PodRequest& m : named) m.gang->name = "big";
  EXPECT_FALSE(f.res.PlaceGang(f.engine, Ask::Gang(g).TestOnly(), 60)[0].placed());
  EXPECT_TRUE(f.res.PlaceGang(f.engine, Ask::Gang(g).TestOnly(), 60, named)[0].placed());
}

TEST(Reservations, OffMakesNoneAndPlacesAsTheEngine) {
  const Cluster c = TwoNodes();
  Fixture f(c, ReservationOptions{});
  Example(f);
  const PodRequest big = Pod("big", GpuAsk::Whole(4));
  EXPECT_EQ(f.Update(1000, {{"big", {&big, 1}, 0, 0}}), 0);
  Admission how;
  PlacementResult r = f.Start(Pod("one", GpuAsk::Whole(1)), 1000, std::nullopt, &how);
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(how, Admission::kFree);
}

}  // namespace
}  // namespace tessera::core
